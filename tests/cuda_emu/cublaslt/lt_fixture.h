/*
 * One cuBLASLt matmul set up as the cuda plugin sets it up, for the tests
 * of the stand-in (test_cublaslt_emu.c: results; test_cublaslt_refusals_emu.c:
 * refusals): its layouts, descriptor and preference from a spec, operands
 * filled, and D's reference computed in double from NVIDIA's definition.
 * Test code: failures are cmocka assertions.
 */
#ifndef PLAIT_LT_FIXTURE_H
#define PLAIT_LT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>

typedef struct spec {
    int ta, tb;                  /* 0: CUBLAS_OP_N, 1: CUBLAS_OP_T */
    int64_t m, n, k;             /* D is m x n */
    int64_t pad_a, pad_b, pad_c; /* ld = rows + pad */
    int64_t pad_d;               /* D's ld = m + pad_d (C's layout when pad_d == pad_c) */
    int batch;
    int64_t gap;                 /* batch stride = ld * cols + gap */
    int interleave;              /* instead: batch stride = rows, ld = rows * batch + pad (attention heads) */
    int bf16, tf32, bias, in_place;
    int64_t bias_stride;
    float alpha, beta;
    uint64_t workspace;          /* MAX_WORKSPACE_BYTES */
    uint32_t align;              /* every MIN_ALIGNMENT_*_BYTES */
} spec;

typedef struct fx {
    spec s;
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found;
    int64_t ar, ac, lda, br, bc, ldb, ldc, ldd, sa, sb, sc, sd;
    void *A, *B;
    float *C, *D, *bias, *ref;
    size_t nA, nB, nC, nD, nbias;
    void *ws;
} fx;

/* a multiple of 1/64 in [-2, 2] */
float grid(void);
/* zeroed, 64-byte aligned; fails the test when out of memory */
void *alloc64(size_t bytes);
/* Layouts, descriptor and preference for `s`, operands filled (grid
 * values, or random floats in [-1, 1)). */
void fx_init(fx *f, const spec *s, int random_floats);
void fx_free(fx *f);
/* the heuristic's first algorithm into f->res (f->found: how many) */
cublasStatus_t fx_heuristic(fx *f);
/* The matmul with explicit pointers (the refusal tests shift them). */
cublasStatus_t fx_matmul_with(fx *f, const void *A, const void *B, const void *C, void *D, const float *bias,
                              size_t ws_bytes);
cublasStatus_t fx_matmul(fx *f);
/* D's reference from the definition, in double, into f->ref. */
void fx_reference(fx *f);
/* Heuristic + matmul succeed and D equals the reference: exactly for grid
 * operands (tol 0), within tol * (sum of |terms|) otherwise. */
void check_case(const spec *s, int random_floats, double tol);
/* a copy of D (the caller frees it) */
float *snapshot(const fx *f);
/* the epilogue, its aux pointer and leading dimension on f's descriptor */
void set_epilogue(fx *f, cublasLtEpilogue_t epi, void *aux, int64_t aux_ld);

#endif
