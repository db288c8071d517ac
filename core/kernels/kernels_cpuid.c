/*
 * What this CPU can run, as the kernels' run-time choices need it: cpuid's
 * feature bits together with the register state the OS saves (XCR0), so
 * that a feature counts only where its instructions can execute. Read on
 * each call (a handful of cpuid instructions; the callers keep what they
 * need).
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define CPUID_X86 1
#endif

#include "kernels/kernels_internal.h"

#ifdef CPUID_X86
/* XCR0, 0 where the OS has not enabled XSAVE (cpuid leaf 1 ECX bit 27) */
static unsigned long long xcr0(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}
#endif

int plait_k_cpu_avx512_bf16(void) {
#ifdef CPUID_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if ((xcr0() & 0xe6u) != 0xe6u) return 0; /* SSE, AVX and the three AVX-512 states */
    /* AVX-512 F, BW and VL: leaf 7 EBX bits 16, 30, 31; BF16: leaf 7 subleaf 1 EAX bit 5 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b >> 16 & 1u) || !(b >> 30 & 1u) || !(b >> 31 & 1u)) return 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
#else
    return 0;
#endif
}

int plait_k_cpu_avx512_core(void) {
#ifdef CPUID_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if ((xcr0() & 0xe6u) != 0xe6u) return 0; /* SSE, AVX and the three AVX-512 states */
    /* AVX-512 F, DQ, BW and VL: leaf 7 EBX bits 16, 17, 30, 31 (oneDNN's avx512_core) */
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 16 & 1u) && (b >> 17 & 1u) && (b >> 30 & 1u) &&
           (b >> 31 & 1u);
#else
    return 0;
#endif
}

int plait_k_cpu_amx_bf16(void) {
#ifdef CPUID_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if ((xcr0() & 0x60000u) != 0x60000u) return 0; /* XTILECFG and XTILEDATA */
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);
#else
    return 0;
#endif
}

int plait_k_cpu_intel(void) {
#ifdef CPUID_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    /* "GenuineIntel" in EBX, EDX, ECX */
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
#else
    return 0;
#endif
}
