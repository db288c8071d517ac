/*
 * The host's AdamW for offloaded state (plugins/optim/common/
 * offload_adamw.c) in every instruction set this CPU has, on one thread and
 * on several: each leaves the bits of plait_adamw_elem run element by
 * element (the cpu device's `adamw`, and the device's own order), over
 * values from subnormal to large, lengths that leave a scalar tail and
 * pointers not aligned to a vector. A set the CPU lacks is said and not
 * checked. PLAIT_OFFLOAD_ISA's names: auto picks the widest the CPU has,
 * a set the CPU lacks and a name it does not know are refused naming why.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "offload.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
/* A value of either sign and of magnitude 2^lo to 2^hi (0 now and then). */
static float value(int lo, int hi) {
    uint32_t r = next_u32();
    if (r % 97 == 0) return 0.0f;
    float mant = 1.0f + (float)(r >> 9) / (float)(1u << 23);
    float x = ldexpf(mant, lo + (int)(next_u32() % (uint32_t)(hi - lo + 1)));
    return r & 1 ? -x : x;
}

typedef struct state {
    float *p, *g, *m, *v;
} state;

static state make(size_t n) {
    state s = {malloc(n * 4), malloc(n * 4), malloc(n * 4), malloc(n * 4)};
    assert_true(s.p && s.g && s.m && s.v);
    for (size_t i = 0; i < n; i++) {
        s.p[i] = value(-20, 4);
        s.g[i] = value(-140, 6); /* subnormal gradients among them */
        s.m[i] = value(-30, 2);
        s.v[i] = fabsf(value(-60, 4));
    }
    return s;
}
static state copy(const state *a, size_t n) {
    state s = make(n);
    memcpy(s.p, a->p, n * 4);
    memcpy(s.g, a->g, n * 4);
    memcpy(s.m, a->m, n * 4);
    memcpy(s.v, a->v, n * 4);
    return s;
}
static void drop(state *s) {
    free(s->p);
    free(s->g);
    free(s->m);
    free(s->v);
}

static void reference(state *s, size_t off, size_t n, const plait_adamw_args *a) {
    plait_adamw_consts c = plait_adamw_consts_of(a);
    for (size_t i = off; i < off + n; i++) plait_adamw_elem(&s->p[i], s->g[i], &s->m[i], &s->v[i], &c);
}

static void same_bits(const float *want, const float *got, size_t n, const char *what, const char *isa, int threads) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], 4) != 0)
            fail_msg("%s on %d thread(s): %s[%zu] = %a, element by element %a", isa, threads, what, i, (double)got[i],
                     (double)want[i]);
}

/* Two steps of every set at `n` elements from `off`, against the reference. */
static void check_all(size_t n, size_t off, int threads) {
    const plait_adamw_args steps[2] = {
        {sizeof(plait_adamw_args), 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f},
        {sizeof(plait_adamw_args), 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 7, 0.37f},
    };
    state base = make(n + off);
    for (int isa = OPTIM_ISA_SCALAR; isa <= OPTIM_ISA_AVX512; isa++) {
        if (!optim_host_isa_supported((optim_host_isa)isa)) {
            print_message("this CPU has no %s: its AdamW is not checked here\n",
                          optim_host_isa_name((optim_host_isa)isa));
            continue;
        }
        state want = copy(&base, n + off), got = copy(&base, n + off);
        for (int k = 0; k < 2; k++) {
            reference(&want, off, n, &steps[k]);
            optim_host_adamw(got.p + off, got.g + off, got.m + off, got.v + off, n, &steps[k], threads,
                             (optim_host_isa)isa);
        }
        const char *name = optim_host_isa_name((optim_host_isa)isa);
        same_bits(want.p, got.p, n + off, "param", name, threads);
        same_bits(want.m, got.m, n + off, "exp_avg", name, threads);
        same_bits(want.v, got.v, n + off, "exp_avg_sq", name, threads);
        drop(&want);
        drop(&got);
    }
    drop(&base);
}

/* Short runs: lengths around each width, pointers one float off a vector. */
static void test_short_unaligned(void **st) {
    (void)st;
    for (size_t n = 1; n <= 67; n += 3) check_all(n, 1, 1);
}

/* A run long enough to be split over threads, with a tail. */
static void test_long_threads(void **st) {
    (void)st;
    check_all(3 * 65536 + 13, 0, 1);
    check_all(3 * 65536 + 13, 0, 3);
}

static void test_pick(void **st) {
    (void)st;
    char why[256];
    optim_host_isa isa = OPTIM_ISA_SCALAR, widest = OPTIM_ISA_SCALAR;
    for (int k = OPTIM_ISA_SCALAR; k <= OPTIM_ISA_AVX512; k++)
        if (optim_host_isa_supported((optim_host_isa)k)) widest = (optim_host_isa)k;
    assert_int_equal(optim_host_isa_pick(NULL, &isa, why, sizeof why), 0);
    assert_int_equal(isa, widest);
    assert_int_equal(optim_host_isa_pick("auto", &isa, why, sizeof why), 0);
    assert_int_equal(isa, widest);
#if defined(__x86_64__)
    assert_int_equal(widest >= OPTIM_ISA_SSE2, 1); /* x86-64's baseline */
    assert_int_equal(optim_host_isa_pick("sse2", &isa, why, sizeof why), 0);
    assert_int_equal(isa, OPTIM_ISA_SSE2);
#endif
    assert_int_equal(optim_host_isa_pick("scalar", &isa, why, sizeof why), 0);
    assert_int_equal(isa, OPTIM_ISA_SCALAR);
    if (!optim_host_isa_supported(OPTIM_ISA_AVX512)) {
        assert_int_equal(optim_host_isa_pick("avx512", &isa, why, sizeof why), -1);
        assert_non_null(strstr(why, "PLAIT_OFFLOAD_ISA = avx512: this CPU does not have it"));
    }
    assert_int_equal(optim_host_isa_pick("neon", &isa, why, sizeof why), -1);
    assert_non_null(strstr(why, "PLAIT_OFFLOAD_ISA = neon: not an instruction set"));
    assert_non_null(strstr(why, "avx512, avx2, sse2 or scalar"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_unaligned),
        cmocka_unit_test(test_long_threads),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
