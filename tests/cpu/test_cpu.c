/*
 * The CPU layer: which OpenBLAS kernels plait picks for which features
 * (pure: any machine tests every case), the testing switch that hides
 * features, the feature list, the start-up line, and bf16 rounding and the
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
        cmocka_unit_test(test_pick_core), cmocka_unit_test(test_hide), cmocka_unit_test(test_detect_and_line),
        cmocka_unit_test(test_bf16_round), cmocka_unit_test(test_bf16_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
