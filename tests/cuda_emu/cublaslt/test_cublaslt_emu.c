/*
 * The cuBLASLt stand-in (cublaslt.c) against a double-precision reference
 * computed from NVIDIA's definition, D = alpha·op(A)·op(B) + beta·C
 * (+ bias per row of D), column-major (lt_fixture.c), and the GELU
 * epilogues (GELU's input kept in the auxiliary matrix, GELU's gradient).
 * Its refusals are test_cublaslt_refusals_emu.c's.
 *
 * Most operands are multiples of 1/64 in [-2, 2] (exact in bf16, their
 * products and short sums exact in float), so those results must equal the
 * reference exactly, whatever order the emulator sums in; random floats
 * check the rest against a tolerance.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <cmocka.h>

#include "lt_fixture.h"

/* ---- results --------------------------------------------------------------- */

static void test_exports(void **state) {
    (void)state;
    void *lib = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    static const char *const names[] = {
        "cublasLtCreate", "cublasLtDestroy", "cublasLtGetStatusString", "cublasLtMatmul",
        "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
        "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy", "cublasLtMatrixLayoutSetAttribute",
        "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
        "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!dlsym(lib, names[i])) fail_msg("%s lacks %s", PLAIT_CUDA_EMU_LT, names[i]);
    /* the internals stay local (exports.map) */
    assert_null(dlsym(lib, "check_problem"));
    assert_null(dlsym(lib, "tf32_round"));
    assert_string_equal(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
                        "an invalid numeric value was used as an argument");
    dlclose(lib);
}

/* Asked for more, the heuristic offers three distinct candidates, each
 * computing the same bits; the test hooks count each one's calls. */
static void test_candidates(void **state) {
    (void)state;
    spec s = {.m = 9, .n = 7, .k = 5, .alpha = 1.0f, .beta = 0.5f, .bias = 1};
    fx f;
    fx_init(&f, &s, 1);
    cublasLtMatmulHeuristicResult_t res[4];
    int found = -1;
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(f.h, f.desc, f.la, f.lb, f.lc, f.ld, f.pref, 4, res, &found),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(found, 3);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(f.found, 1);
    assert_memory_equal(&f.res.algo, &res[0].algo, sizeof res[0].algo); /* the first is the single answer */
    void *lib = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL);
    uint64_t (*calls)(int) = lib ? (uint64_t (*)(int))dlsym(lib, "plait_cublaslt_emu_algo_calls") : NULL;
    assert_non_null(calls);
    fx_reference(&f);
    float *first = malloc(f.nD * sizeof *first);
    assert_non_null(first);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].state, CUBLAS_STATUS_SUCCESS);
        for (int j = 0; j < i; j++) assert_memory_not_equal(&res[i].algo, &res[j].algo, sizeof res[i].algo);
        uint64_t before[3] = {calls(0), calls(1), calls(2)};
        f.res = res[i];
        assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
        for (int j = 0; j < 3; j++) assert_int_equal(calls(j) - before[j], j == i);
        if (i == 0) memcpy(first, f.D, f.nD * sizeof *first);
        else assert_memory_equal(f.D, first, f.nD * sizeof *first);
    }
    for (size_t i = 0; i < f.nD; i++)
        if (fabs((double)first[i] - f.ref[i]) > 1e-5 * (1 + fabs(f.ref[i])) * (double)s.k) fail();
    free(first);
    dlclose(lib);
    fx_free(&f);
}

static void test_transposes_and_shapes(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 4, 9}, {8, 33, 2}, {40, 24, 31}};
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 0.25f}};
    for (int t = 0; t < 4; t++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (size_t ai = 0; ai < sizeof ab / sizeof ab[0]; ai++) {
                spec s = {.ta = t & 1, .tb = t >> 1, .m = shapes[si][0], .n = shapes[si][1], .k = shapes[si][2],
                          .alpha = ab[ai][0], .beta = ab[ai][1]};
                check_case(&s, 0, 0);
                /* ld > rows on every matrix, and ldd != ldc out of place */
                s.pad_a = 3, s.pad_b = 1, s.pad_c = 5, s.pad_d = 2;
                check_case(&s, 0, 0);
            }
}

static void test_batched_strided(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        /* C's and D's batch strides differ (ldc 8, ldd 11) */
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 6, .n = 5, .k = 7, .pad_a = 1, .pad_c = 2, .pad_d = 5,
                  .batch = 3, .gap = 11, .alpha = 0.75f, .beta = 0.5f};
        check_case(&s, 0, 0);
        s.bias = 1; /* one bias for every batch (BIAS_BATCH_STRIDE 0) */
        check_case(&s, 0, 0);
        s.bias_stride = 8; /* a bias per batch */
        check_case(&s, 0, 0);
        /* interleaved batches (the plugin's attention heads): stride =
         * rows, ld = rows x batch */
        spec h = {.ta = t & 1, .tb = t >> 1, .m = 8, .n = 6, .k = 8, .batch = 4, .interleave = 1, .pad_d = 3,
                  .alpha = 0.125f, .beta = 0.0f};
        check_case(&h, 0, 0);
    }
}

static void test_beta_zero_ignores_c(void **state) {
    (void)state;
    spec s = {.ta = 1, .m = 5, .n = 4, .k = 3, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    for (size_t i = 0; i < f.nC; i++) f.C[i] = NAN; /* BLAS: with beta 0, C need not hold numbers */
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    fx_reference(&f);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (size_t i = 0; i < f.nD; i++) {
        assert_false(isnan(f.D[i]));
        assert_true(f.D[i] == f.ref[i]);
    }
    /* and C may be NULL then */
    for (size_t i = 0; i < f.nD; i++) f.D[i] = -7.0f;
    assert_int_equal(fx_matmul_with(&f, f.A, f.B, NULL, f.D, NULL, 0), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(f.D, f.ref, f.nD * 4);
    /* beta != 0 does read C: NaN comes through */
    f.s.beta = 1.0f;
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_true(isnan(f.D[0]));
    fx_free(&f);
}

static void test_bias_epilogue(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 9, .n = 6, .k = 5, .bias = 1, .alpha = 1.0f, .beta = 0.0f};
        check_case(&s, 0, 0);
        s.beta = -1.0f, s.pad_c = 3, s.pad_d = 3;
        check_case(&s, 0, 0);
        s.in_place = 1; /* the plugin's call: C == D, one layout */
        check_case(&s, 0, 0);
    }
    /* the bias runs along D's rows: D[i][j] = bias[i] when the product is 0 */
    spec s = {.m = 3, .n = 2, .k = 1, .bias = 1, .alpha = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    memset(f.A, 0, f.nA * 4);
    f.bias[0] = 1, f.bias[1] = 2, f.bias[2] = 3;
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    const float want[6] = {1, 2, 3, 1, 2, 3}; /* column-major 3 x 2 */
    assert_memory_equal(f.D, want, sizeof want);
    fx_free(&f);
}

static void test_bf16_operands(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 13, .n = 7, .k = 19, .pad_a = 2, .pad_b = 1, .bf16 = 1,
                  .alpha = 1.0f, .beta = 0.5f};
        check_case(&s, 0, 0);
        s.batch = 2, s.gap = 3, s.bias = 1;
        check_case(&s, 0, 0);
    }
}

static void test_tf32_rounding(void **state) {
    (void)state;
    /* D (4 x 1) = A (4 x 1) · B (1 x 1 = 1): D holds op(A) as the product saw it */
    const float a[4] = {1.0f + 0x1p-11f, 1.0f + 0x1p-12f, 1.0f + 0x1p-11f + 0x1p-12f, -(1.0f + 0x1p-11f)};
    /* TF32 keeps 10 mantissa bits: 1 + 2^-11 is a tie and rounds away from
     * zero to 1 + 2^-10 (round-to-even or truncation would give 1) */
    const float tf32_want[4] = {1.0f + 0x1p-10f, 1.0f, 1.0f + 0x1p-10f, -(1.0f + 0x1p-10f)};
    for (int tf32 = 0; tf32 < 2; tf32++) {
        spec s = {.m = 4, .n = 1, .k = 1, .tf32 = tf32, .alpha = 1.0f};
        fx f;
        fx_init(&f, &s, 0);
        memcpy(f.A, a, sizeof a);
        ((float *)f.B)[0] = 1.0f;
        assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
        assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
        assert_memory_equal(f.D, tf32 ? tf32_want : a, sizeof a);
        fx_free(&f);
    }
    /* random floats: FAST_TF32 matches the TF32-rounded reference and is far
     * from the fp32 one */
    spec s = {.ta = 1, .m = 24, .n = 16, .k = 64, .tf32 = 1, .alpha = 1.0f};
    check_case(&s, 1, 1e-6);
    fx f;
    fx_init(&f, &s, 1);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    f.s.tf32 = 0; /* the fp32 reference */
    fx_reference(&f);
    double worst = 0;
    for (size_t i = 0; i < f.nD; i++) worst = fmax(worst, fabs((double)f.D[i] - f.ref[i]));
    if (worst < 1e-4) fail_msg("FAST_TF32 result within %g of fp32: operands were not rounded", worst);
    fx_free(&f);
}

static void test_random_deterministic(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 37, .n = 29, .k = 53, .pad_a = 3, .pad_b = 5, .pad_c = 1,
                  .pad_d = 1, .batch = 2, .gap = 7, .bias = 1, .alpha = 0.3f, .beta = 1.7f};
        check_case(&s, 1, 1e-6);
    }
    /* the same call gives the same bits */
    spec s = {.m = 64, .n = 48, .k = 96, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 1);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    float *first = malloc(f.nD * 4);
    assert_non_null(first);
    memcpy(first, f.D, f.nD * 4);
    memset(f.D, 0, f.nD * 4);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(first, f.D, f.nD * 4);
    free(first);
    fx_free(&f);
}

/* GELU, tanh form, and its derivative, in double, from their definitions */
static double gelu_ref(double x) {
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static double dgelu_ref(double x) {
    const double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* GELU_AUX_BIAS: aux = x = alpha·A·B + beta·C + bias (GELU's input), D =
 * GELU(x); GELU_BIAS the same D without aux; DGELU: D = GELU'(aux) ·
 * (alpha·A·B + beta·C). Grid operands: x is exact, so aux equals the
 * reference bit for bit and D is within float rounding of GELU(x). */
static void test_gelu_epilogues(void **state) {
    (void)state;
    spec s = {.ta = 1, .m = 16, .n = 5, .k = 4, .pad_d = 8, .bias = 1, .alpha = 1.0f, .beta = 0.5f};
    fx f;
    fx_init(&f, &s, 0);
    const int64_t aux_ld = 24;
    float *aux = alloc64((size_t)(aux_ld * s.n) * 4);
    for (int64_t i = 0; i < aux_ld * s.n; i++) aux[i] = 777.0f;
    fx_reference(&f); /* x */
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, aux, aux_ld);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < s.n; j++)
        for (int64_t i = 0; i < aux_ld; i++) {
            float x = f.ref[i + j * f.ldd], a = aux[i + j * aux_ld];
            if (i >= s.m) { /* rows past D's: untouched */
                assert_true(a == 777.0f);
                continue;
            }
            assert_true(a == x);
            double want = gelu_ref(x), got = f.D[i + j * f.ldd];
            if (fabs(got - want) > 2e-6 * (1 + fabs(want))) fail_msg("GELU(%g): got %.9g, want %.9g", x, got, want);
        }
    /* GELU_BIAS: the same D, no aux needed */
    float *d_aux = snapshot(&f);
    for (size_t i = 0; i < f.nD; i++) f.D[i] = 12345.0f;
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_BIAS, NULL, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(f.D, d_aux, f.nD * 4);
    free(d_aux);
    fx_free(&f);

    /* DGELU reads GELU's input from aux (no bias) */
    spec g = {.m = 16, .n = 5, .k = 4, .alpha = 1.0f, .beta = 1.0f};
    fx_init(&f, &g, 0);
    for (int64_t i = 0; i < aux_ld * g.n; i++) aux[i] = grid();
    fx_reference(&f); /* the product, beta·C included */
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU, aux, aux_ld);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < g.n; j++)
        for (int64_t i = 0; i < g.m; i++) {
            double want = dgelu_ref(aux[i + j * aux_ld]) * f.ref[i + j * f.ldd], got = f.D[i + j * f.ldd];
            if (fabs(got - want) > 2e-6 * (1 + fabs(want)))
                fail_msg("GELU'(%g)·%g: got %.9g, want %.9g", aux[i + j * aux_ld], f.ref[i + j * f.ldd], got, want);
        }
    fx_free(&f);
    free(aux);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exports),
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_transposes_and_shapes),
        cmocka_unit_test(test_batched_strided),
        cmocka_unit_test(test_beta_zero_ignores_c),
        cmocka_unit_test(test_bias_epilogue),
        cmocka_unit_test(test_gelu_epilogues),
        cmocka_unit_test(test_bf16_operands),
        cmocka_unit_test(test_tf32_rounding),
        cmocka_unit_test(test_random_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
