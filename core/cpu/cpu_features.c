#include "cpu/cpu_features.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

void plait_cpu_detect(plait_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned a = 0, b = 0, c = 0, d = 0, max = 0;
    if (!__get_cpuid(0, &max, &b, &c, &d)) return;
    memcpy(f->vendor, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    unsigned ext = __get_cpuid_max(0x80000000u, NULL);
    if (ext >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) {
            __get_cpuid(0x80000002u + i, &a, &b, &c, &d);
            memcpy(f->brand + 16 * i, &a, 4);
            memcpy(f->brand + 16 * i + 4, &b, 4);
            memcpy(f->brand + 16 * i + 8, &c, 4);
            memcpy(f->brand + 16 * i + 12, &d, 4);
        }
        /* trim the padding some CPUs put around it */
        char *s = f->brand;
        while (*s == ' ') s++;
        memmove(f->brand, s, strlen(s) + 1);
        for (size_t n = strlen(f->brand); n > 0 && f->brand[n - 1] == ' '; n--) f->brand[n - 1] = '\0';
    }
    __get_cpuid(1, &a, &b, &c, &d);
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    uint64_t x = osxsave ? xcr0() : 0;
    int os_avx = (x & 0x6) == 0x6, os_avx512 = os_avx && (x & 0xe0) == 0xe0,
        os_amx = (x & 0x60000) == 0x60000;
    if (max < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned sub_max = a;
    int avx2 = (b >> 5) & 1;
    int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    int amx = ((d >> 22) & 1) && ((d >> 24) & 1);
    int bf16 = 0;
    if (sub_max >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        bf16 = (a >> 5) & 1;
    }
    f->has[PLAIT_CPU_AVX2] = os_avx && avx && avx2 && fma;
    f->has[PLAIT_CPU_AVX512] = os_avx512 && avx512;
    f->has[PLAIT_CPU_AVX512_BF16] = f->has[PLAIT_CPU_AVX512] && bf16;
    f->has[PLAIT_CPU_AMX_BF16] = os_amx && amx;
}
#else
void plait_cpu_detect(plait_cpu_features *f) { memset(f, 0, sizeof *f); }
#endif

static const char *const names[PLAIT_CPU_N_FEATURES] = {"AVX2", "AVX512", "AVX512_BF16", "AMX_BF16"};

const char *plait_cpu_feature_name(int feature) {
    return feature >= 0 && feature < PLAIT_CPU_N_FEATURES ? names[feature] : NULL;
}

int plait_cpu_hide(plait_cpu_features *f, const char *list, char *bad, size_t bad_len) {
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        size_t n = strcspn(p, ", \t");
        if (n == 0) break;
        int found = -1;
        for (int i = 0; i < PLAIT_CPU_N_FEATURES; i++)
            if (strlen(names[i]) == n && strncasecmp(p, names[i], n) == 0) found = i;
        if (found < 0) {
            snprintf(bad, bad_len, "%.*s", (int)n, p);
            return -1;
        }
        f->has[found] = 0;
        /* the bf16 features need AVX512's registers */
        if (found == PLAIT_CPU_AVX512) f->has[PLAIT_CPU_AVX512_BF16] = 0;
        p += n;
    }
    return 0;
}

void plait_cpu_feature_list(const plait_cpu_features *f, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < PLAIT_CPU_N_FEATURES; i++)
        if (f->has[i] && at < len) at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " " : "", names[i]);
    if (at == 0) snprintf(buf, len, "no AVX2");
}
