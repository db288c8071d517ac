/*
 * The cuBLASLt stand-in's refusals (validate.c): for each, the status, the
 * one stderr line saying why, and D left untouched. The matmul is
 * lt_fixture.c's; test_cublaslt_emu.c checks the results.
 */
#include <unistd.h>
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

/* ---- refusals ---------------------------------------------------------------- */

static FILE *g_err;
static int g_saved_fd = -1;

static void capture_begin(void) {
    fflush(stderr);
    g_err = tmpfile();
    assert_non_null(g_err);
    g_saved_fd = dup(2);
    assert_true(g_saved_fd >= 0);
    assert_true(dup2(fileno(g_err), 2) >= 0);
}

/* What the emulator wrote meanwhile; it must be one "cublasLt-emu: " line
 * containing `why`. */
static void capture_end(const char *why) {
    fflush(stderr);
    assert_true(dup2(g_saved_fd, 2) >= 0);
    close(g_saved_fd);
    char buf[1024] = "";
    rewind(g_err);
    size_t n = fread(buf, 1, sizeof buf - 1, g_err);
    buf[n] = 0;
    fclose(g_err);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    if (lines != 1 || strncmp(buf, "cublasLt-emu: ", 14) != 0 || !strstr(buf, why))
        fail_msg("stderr was \"%s\", want one line with \"%s\"", buf, why);
}

/* `call` returns `st` and prints the one line naming `why` */
#define REFUSED(call, st, why)                                                                                   \
    do {                                                                                                         \
        capture_begin();                                                                                         \
        assert_int_equal((call), (st));                                                                          \
        capture_end(why);                                                                                        \
    } while (0)

static void assert_d_untouched(const fx *f, const float *before) {
    assert_memory_equal(f->D, before, f->nD * 4);
}

/* What NVIDIA documents for GELU's input matrix, refused: an LD not
 * divisible by 8 or below D's rows, a NULL pointer at the product, an aux
 * type other than D's; DGELU_BGRAD is not emulated. D stays untouched. */
static void test_refuse_gelu_epilogues(void **state) {
    (void)state;
    spec s = {.m = 16, .n = 3, .k = 2, .alpha = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    float *aux = alloc64(64 * 3 * 4), *before = snapshot(&f);
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, aux, 20);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD 20: must be divisible by 8");
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU, aux, 8);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "no less than D's 16 rows");
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, NULL, 16);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "NULL EPILOGUE_AUX_POINTER");
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, aux + 1, 16);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "only 4-byte aligned");
    int32_t bf = CUDA_R_16BF;
    assert_int_equal(
        cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &bf, sizeof bf), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "aux data type CUDA_R_16BF");
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU_BGRAD, aux, 16);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "epilogue 208");
    assert_d_untouched(&f, before);
    free(before);
    free(aux);
    fx_free(&f);
}

/* A layout replaced by one of (type, rows, cols, ld): the heuristic and a
 * matmul without an algorithm both refuse with `st`, naming `why`. */
static void refuse_layout(int which, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, cublasStatus_t st,
                          const char *why) {
    spec s = {.m = 6, .n = 5, .k = 4, .alpha = 1.0f, .beta = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    cublasLtMatrixLayout_t *l[4] = {&f.la, &f.lb, &f.lc, &f.ld};
    cublasLtMatrixLayoutDestroy(*l[which]);
    assert_int_equal(cublasLtMatrixLayoutCreate(l[which], type, (uint64_t)rows, (uint64_t)cols, ld), 0);
    float *before = snapshot(&f);
    REFUSED(fx_heuristic(&f), st, why);
    assert_int_equal(f.found, 0);
    REFUSED(cublasLtMatmul(
                f.h, f.desc, &s.alpha, f.A, f.la, f.B, f.lb, &s.beta, f.C, f.lc, f.D, f.ld, NULL, NULL, 0, NULL),
            st, why);
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
}

static void test_refuse_layouts(void **state) {
    (void)state;
    /* A is 6 x 4, B 4 x 5, C and D 6 x 5 */
    refuse_layout(0, CUDA_R_32F, 6, 4, 5, CUBLAS_STATUS_INVALID_VALUE, "Adesc: ld 5 < rows 6");
    refuse_layout(3, CUDA_R_32F, 6, 5, 4, CUBLAS_STATUS_INVALID_VALUE, "Ddesc: ld 4 < rows 6");
    refuse_layout(1, CUDA_R_32F, 3, 5, 3, CUBLAS_STATUS_INVALID_VALUE, "inner dimensions differ");
    refuse_layout(0, CUDA_R_32F, 7, 4, 7, CUBLAS_STATUS_INVALID_VALUE, "D is 6 x 5 but op(A)·op(B) is 7 x 5");
    refuse_layout(2, CUDA_R_32F, 6, 4, 6, CUBLAS_STATUS_INVALID_VALUE, "C is 6 x 4 but D is 6 x 5");
    refuse_layout(3, CUDA_R_32F, 6, 4, 6, CUBLAS_STATUS_INVALID_VALUE, "D is 6 x 4 but op(A)·op(B) is 6 x 5");
    refuse_layout(0, CUDA_R_16F, 6, 4, 6, CUBLAS_STATUS_NOT_SUPPORTED, "A CUDA_R_16F with B CUDA_R_32F");
    refuse_layout(1, CUDA_R_16BF, 4, 5, 4, CUBLAS_STATUS_NOT_SUPPORTED, "A CUDA_R_32F with B CUDA_R_16BF");
    refuse_layout(3, CUDA_R_16BF, 6, 5, 6, CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_32F, D CUDA_R_16BF");
    refuse_layout(2, CUDA_R_64F, 6, 5, 6, CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_64F");
}

/* D's batch stride set to `stride` after the heuristic: cublasLtMatmul
 * refuses naming `why`, D untouched. */
static void refuse_d_stride(fx *f, int64_t stride, const char *why) {
    assert_int_equal(
        cublasLtMatrixLayoutSetAttribute(f->ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
        0);
    float *before = snapshot(f);
    REFUSED(fx_matmul(f), CUBLAS_STATUS_INVALID_VALUE, why);
    assert_d_untouched(f, before);
    free(before);
}

static void test_refuse_batches(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .batch = 2, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    int32_t three = 3;
    assert_int_equal(
        cublasLtMatrixLayoutSetAttribute(f.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &three, sizeof three), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A 2, B 3, C 2, D 2");
    int32_t two = 2;
    assert_int_equal(cublasLtMatrixLayoutSetAttribute(f.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two), 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    /* D's batches on top of each other */
    refuse_d_stride(&f, 5, "D's batches overlap: batch 0 and batch 1 share an element (stride 5, ld 4, 4 x 3)");
    fx_free(&f);
    /* interleaved batches (stride 4, ld 12) one row too close: batch 1
     * starts inside batch 0 */
    spec h = {.m = 4, .n = 3, .k = 2, .batch = 3, .interleave = 1, .alpha = 1.0f, .beta = 0.0f};
    fx_init(&f, &h, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    refuse_d_stride(&f, 3, "batch 0 and batch 1 share an element (stride 3, ld 12");
    /* or too far: batch 1's second column reaches back into batch 0's */
    refuse_d_stride(&f, 9, "batch 0 and batch 1 share an element (stride 9, ld 12");
    fx_free(&f);
}

static void test_refuse_descriptor(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    /* FAST_TF32 with bf16 operands: not in NVIDIA's table */
    cublasLtMatrixLayoutDestroy(f.la);
    cublasLtMatrixLayoutDestroy(f.lb);
    assert_int_equal(cublasLtMatrixLayoutCreate(&f.la, CUDA_R_16BF, 4, 2, 4), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&f.lb, CUDA_R_16BF, 2, 3, 2), 0);
    int32_t ct = CUBLAS_COMPUTE_32F_FAST_TF32;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_COMPUTE_32F_FAST_TF32 with CUDA_R_16BF operands");
    ct = CUBLAS_COMPUTE_16F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "compute type 64");
    ct = CUBLAS_COMPUTE_32F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    int32_t scale = CUDA_R_64F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale),
                     0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "scale type CUDA_R_64F");
    /* a wrong attribute size */
    int64_t wide = CUBLAS_OP_T;
    REFUSED(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE, "TRANSA: sizeInBytes 8, the attribute is 4 bytes");
    cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU; /* not emulated */
    scale = CUDA_R_32F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale),
                     0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "epilogue 2;");
    /* requestedAlgoCount < 1 */
    int found = -1;
    REFUSED(cublasLtMatmulAlgoGetHeuristic(f.h, f.desc, f.la, f.lb, f.lc, f.ld, f.pref, 0, &f.res, &found),
            CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount 0 < 1");
    assert_int_equal(found, 0);
    fx_free(&f);
}

/* Pointers less aligned than the preference promised, per matrix. */
static void test_refuse_alignment(void **state) {
    (void)state;
    spec s = {.m = 8, .n = 4, .k = 4, .pad_a = 4, .pad_b = 4, .pad_c = 4, .pad_d = 4, .bias = 1, .alpha = 1.0f,
              .beta = 1.0f, .align = 16};
    fx f;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    float *before = snapshot(&f);
    const float *A = f.A, *B = f.B;
    /* each pointer moved by one float: 4-byte aligned, 16 promised */
    struct {
        const void *a, *b, *c;
        void *d;
        const float *bias;
        const char *why;
    } cases[] = {
        {A + 1, B, f.C, f.D, f.bias, "A at"},
        {A, B + 1, f.C, f.D, f.bias, "B at"},
        {A, B, f.C + 1, f.D, f.bias, "C at"},
        {A, B, f.C, f.D + 1, f.bias, "D at"},
        {A, B, f.C, f.D, f.bias + 1, "bias at"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REFUSED(fx_matmul_with(&f, cases[i].a, cases[i].b, cases[i].c, cases[i].d, cases[i].bias, 0),
                CUBLAS_STATUS_INVALID_VALUE, cases[i].why);
        assert_d_untouched(&f, before);
    }
    /* the promise is what counts: with 4 promised, the same pointers pass */
    fx_free(&f);
    free(before);
    s.align = 4;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul_with(&f, (const float *)f.A + 1, f.B, f.C, f.D, f.bias, 0), CUBLAS_STATUS_SUCCESS);
    fx_free(&f);
}

static void test_refuse_matmul_arguments(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .bias = 1, .alpha = 1.0f, .beta = 0.0f, .workspace = 256};
    fx f;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    float *before = snapshot(&f);
    /* BIAS with a NULL bias pointer */
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, NULL, 0),
            CUBLAS_STATUS_INVALID_VALUE, "epilogue BIAS with a NULL BIAS_POINTER");
    assert_d_untouched(&f, before);
    /* a workspace above the preference's maximum */
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, f.bias, 512),
            CUBLAS_STATUS_INVALID_VALUE, "workspaceSizeInBytes 512 exceeds the 256 bytes");
    assert_d_untouched(&f, before);
    /* the descriptor changed after the heuristic chose for it */
    cublasLtEpilogue_t def = CUBLASLT_EPILOGUE_DEFAULT;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &def, sizeof def), 0);
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, f.bias, 256),
            CUBLAS_STATUS_INVALID_VALUE, "the descriptor no longer matches the algorithm");
    assert_d_untouched(&f, before);
    /* an algorithm the heuristic never wrote */
    memset(&f.res.algo, 0, sizeof f.res.algo);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &(cublasLtEpilogue_t){
                                                        CUBLASLT_EPILOGUE_BIAS}, sizeof(cublasLtEpilogue_t)),
                     0);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "algo was not written by cublasLtMatmulAlgoGetHeuristic");
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
    /* in place (C == D) with C's layout not D's */
    spec t = {.m = 4, .n = 3, .k = 2, .alpha = 1.0f, .beta = 1.0f, .pad_c = 2, .pad_d = 0};
    fx_init(&f, &t, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    memcpy(f.D, f.C, f.nD * 4); /* nD <= nC */
    before = snapshot(&f);
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.D, f.D, NULL, 0),
            CUBLAS_STATUS_INVALID_VALUE, "in place (C == D) with C's ld 6");
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuse_gelu_epilogues),
        cmocka_unit_test(test_refuse_layouts),
        cmocka_unit_test(test_refuse_batches),
        cmocka_unit_test(test_refuse_descriptor),
        cmocka_unit_test(test_refuse_alignment),
        cmocka_unit_test(test_refuse_matmul_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
