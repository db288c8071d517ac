/*
 * The CPU layer: which OpenBLAS kernels plait picks for which features
 * (pure: any machine tests every case), the testing switch that hides
 * features, the feature list, the start-up line, bf16 rounding (one value
 * and whole tensors, on the CPU's instruction where it has one) and the
 * emulated bf16 product against a double-precision reference on rounded
 * operands.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"
#include "cpu/compute_line.h"
#include "cpu/cpu_features.h"
#include "kernels/kernels.h"

static plait_cpu_features with(int avx2, int avx512, int bf16) {
    plait_cpu_features f;
    memset(&f, 0, sizeof f);
    f.has[PLAIT_CPU_AVX2] = avx2;
    f.has[PLAIT_CPU_AVX512] = avx512;
    f.has[PLAIT_CPU_AVX512_BF16] = bf16;
    return f;
}

static void test_pick_core(void **state) {
    (void)state;
    plait_cpu_features xeon = with(1, 1, 1), epyc = with(1, 0, 0), old = with(0, 0, 0);
    /* the generic kernels OpenBLAS falls back to on an unknown model */
    assert_string_equal(plait_blas_pick_core("Prescott", &xeon), "SkylakeX");
    assert_string_equal(plait_blas_pick_core("Prescott", &epyc), "Haswell");
    assert_string_equal(plait_blas_pick_core("Sandybridge", &epyc), "Haswell");
    /* an AVX2 core on an AVX-512 CPU is upgraded; the right one is kept */
    assert_string_equal(plait_blas_pick_core("Haswell", &xeon), "SkylakeX");
    assert_null(plait_blas_pick_core("SkylakeX", &xeon));
    assert_null(plait_blas_pick_core("Cooperlake", &xeon));
    assert_null(plait_blas_pick_core("SapphireRapids", &xeon));
    assert_null(plait_blas_pick_core("Zen", &epyc));
    assert_null(plait_blas_pick_core("Haswell", &epyc));
    /* never kernels the CPU cannot run */
    assert_null(plait_blas_pick_core("Prescott", &old));
    assert_null(plait_blas_pick_core(NULL, &xeon));
}

static void test_hide(void **state) {
    (void)state;
    plait_cpu_features f = with(1, 1, 1);
    f.has[PLAIT_CPU_AMX_BF16] = 1;
    char bad[32] = "";
    assert_int_equal(plait_cpu_hide(&f, "amx_bf16, AVX512_bf16", bad, sizeof bad), 0);
    assert_false(f.has[PLAIT_CPU_AMX_BF16]);
    assert_false(f.has[PLAIT_CPU_AVX512_BF16]);
    assert_true(f.has[PLAIT_CPU_AVX512]);
    /* hiding AVX-512 hides what needs its registers */
    f = with(1, 1, 1);
    assert_int_equal(plait_cpu_hide(&f, "avx512", bad, sizeof bad), 0);
    assert_false(f.has[PLAIT_CPU_AVX512_BF16]);
    assert_int_equal(plait_cpu_hide(&f, "", bad, sizeof bad), 0);
    assert_int_equal(plait_cpu_hide(&f, "avx2,sse9", bad, sizeof bad), -1);
    assert_string_equal(bad, "sse9");
    char list[128];
    plait_cpu_feature_list(&f, list, sizeof list);
    assert_string_equal(list, "no AVX2");
    f = with(1, 1, 1);
    plait_cpu_feature_list(&f, list, sizeof list);
    assert_string_equal(list, "AVX2 AVX512 AVX512_BF16");
}

static void test_detect_and_line(void **state) {
    (void)state;
    plait_cpu_features f;
    plait_cpu_detect(&f);
#if defined(__x86_64__)
    /* every x86-64 answers with a vendor; AVX-512 implies AVX2 everywhere */
    assert_true(strlen(f.vendor) == 12);
    if (f.has[PLAIT_CPU_AVX512]) assert_true(f.has[PLAIT_CPU_AVX2]);
#endif
    char line[512];
    plait_compute_line(line, sizeof line, 3, "fp32");
    assert_non_null(strstr(line, "OpenBLAS"));
    assert_non_null(strstr(line, " kernels ("));
    assert_non_null(strstr(line, "3 math threads per rank, precision fp32"));
}

static void test_bf16_round(void **state) {
    (void)state;
    assert_true(plait_bf16_round(1.0f) == 1.0f);
    /* 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: to even */
    assert_true(plait_bf16_round(1.0f + 0x1p-8f) == 1.0f);
    assert_true(plait_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    assert_true(plait_bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    assert_true(plait_bf16_round(-3.0f) == -3.0f);
    assert_true(isinf(plait_bf16_round(INFINITY)));
    assert_true(isnan(plait_bf16_round(NAN)));
    /* the largest float rounds to infinity, as in PyTorch */
    assert_true(isinf(plait_bf16_round(3.4028235e38f)));
    assert_true(isinf(plait_bf16_round(-INFINITY)) && plait_bf16_round(-INFINITY) < 0);
    /* against the rule written out (special values apart, nearest even on
     * the upper 16 bits; a NaN stays a NaN, made quiet), over bit patterns
     * spread across every exponent and sign */
    for (uint64_t k = 0; k < (1ull << 32); k += 65521) {
        uint32_t u = (uint32_t)k, want;
        if ((u & 0x7f800000u) == 0x7f800000u) want = (u & 0x7fffffu) ? (u | 0x00400000u) & 0xffff0000u : u;
        else want = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        float x, y;
        memcpy(&x, &u, sizeof x);
        y = plait_bf16_round(x);
        uint32_t got;
        memcpy(&got, &y, sizeof got);
        if (got != want) fail_msg("bf16 rounding of 0x%08x: 0x%08x, expected 0x%08x", u, got, want);
    }
}

/* The rule of test_bf16_round on a float's bits: the bf16 bits wanted */
static uint16_t narrow_rule(uint32_t u) {
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)(((u & 0x7fffffu) ? u | 0x00400000u : u) >> 16);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The whole-tensor rounding (16 values an instruction where the CPU has
 * AVX512_BF16, which reads subnormals as zero and quiets NaNs by its own
 * rule) gives the rule's bits for every value: subnormals, NaNs with
 * payloads, infinities, ties and overflow placed alone or among normal
 * values in a group of 16, at every length and offset up to past two
 * groups, and a spread of bit patterns in bulk. */
static void test_bf16_narrow_spans(void **state) {
    (void)state;
    static const uint32_t odd[] = {0x00000001u, 0x807fffffu, 0x00400000u, 0x0000ffffu, 0x00008000u, 0x00018000u,
                                   0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff810000u, 0x7fbfffffu, 0x7f800000u,
                                   0xff800000u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x00800000u, 0x80000000u};
    const int nodd = (int)(sizeof odd / sizeof odd[0]);
    enum { LEN = 48 };
    float src[LEN + 8];
    plait_bf16 dst[LEN + 8];
    for (int len = 1; len <= LEN; len++)
        for (int off = 0; off < 3; off++)
            for (int which = -1; which < nodd; which++) {
                for (int i = 0; i < LEN + 8; i++) {
                    uint32_t u = 0x3f800000u + (uint32_t)i * 0x9e3779u % 0x00ffffffu; /* normal values */
                    if (which >= 0 && i % 7 == len % 7) u = odd[which];
                    memcpy(&src[i], &u, sizeof u);
                    dst[i] = 0xabcd;
                }
                plait_k_to_bf16(dst + off, src + off, (size_t)len);
                for (int i = 0; i < LEN + 8; i++) {
                    uint32_t u;
                    memcpy(&u, &src[i], sizeof u);
                    uint16_t want = i >= off && i < off + len ? narrow_rule(u) : 0xabcd;
                    if (dst[i] != want)
                        fail_msg("length %d at %d: value %d (0x%08x) became 0x%04x, expected 0x%04x", len, off, i, u,
                                 dst[i], want);
                }
            }
    enum { BULK = 1 << 16 };
    float *big = malloc(sizeof(float) * BULK);
    plait_bf16 *out = malloc(sizeof(plait_bf16) * BULK);
    assert_true(big && out);
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)BULK * 4099) {
        for (int i = 0; i < BULK; i++) {
            uint32_t u = (uint32_t)(base + (uint64_t)i * 4099);
            memcpy(&big[i], &u, sizeof u);
        }
        plait_k_to_bf16(out, big, BULK);
        for (int i = 0; i < BULK; i++) {
            uint32_t u;
            memcpy(&u, &big[i], sizeof u);
            if (out[i] != narrow_rule(u)) fail_msg("0x%08x became 0x%04x, expected 0x%04x", u, out[i], narrow_rule(u));
        }
    }
    free(big);
    free(out);
}

/* The emulated bf16 product equals a double-precision product of the
 * rounded operands to fp32 accuracy, and differs from the fp32 product. */
static void test_bf16_gemm(void **state) {
    (void)state;
    const int64_t M = 300, N = 200, K = 150; /* several tiles */
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K);
    float *C = malloc(sizeof(float) * M * N), *C32 = malloc(sizeof(float) * M * N);
    assert_true(A && B && C && C32);
    uint32_t s = 1;
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int64_t i = 0; i < N * K; i++) B[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    assert_int_equal(plait_kernels_set_precision(PLAIT_KERNELS_BF16_EMULATED), 0);
    plait_kernels_set_threads(3);
    plait_k_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    assert_int_equal(plait_kernels_set_precision(PLAIT_KERNELS_FP32), 0);
    plait_k_sgemm(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C32, N);
    plait_kernels_set_threads(1);
    double worst = 0, moved = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double want = 0;
            for (int64_t k = 0; k < K; k++)
                want += (double)plait_bf16_round(A[i * K + k]) * (double)plait_bf16_round(B[j * K + k]);
            double d = fabs(C[i * N + j] - want);
            if (d > worst) worst = d;
            moved += C[i * N + j] != C32[i * N + j];
        }
    assert_true(worst < 1e-5);
    assert_true(moved > M * N / 2);
    /* an unknown mode is refused and changes nothing */
    assert_int_equal(plait_kernels_set_precision(7), -1);
    assert_int_equal(plait_kernels_precision(), PLAIT_KERNELS_FP32);
    free(A);
    free(B);
    free(C);
    free(C32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_core),         cmocka_unit_test(test_hide),
        cmocka_unit_test(test_detect_and_line),   cmocka_unit_test(test_bf16_round),
        cmocka_unit_test(test_bf16_narrow_spans), cmocka_unit_test(test_bf16_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
