/*
 * bf16 products through oneDNN's matmul against the same products
 * emulated (operands rounded to bf16, multiplied by the fp32 BLAS: the
 * products of two bf16 values are exact in fp32, so only the order of the
 * fp32 sums differs): gpt-small's shapes in all three transposes, alpha and
 * beta, row strides wider than the rows, tiles of odd sizes, a NaN in C
 * under beta = 0, more tile shapes than a thread keeps primitives for, and
 * the same bits at 1, 2 and 3 threads; the products rounded to a bf16 C by
 * oneDNN as it stores them against the fp32 ones rounded by plait, bit for
 * bit. Where oneDNN's headers are
 * installed, plait's copy of the interface (kernels/onednn_abi.h) is
 * checked against them at compile time. Skips (77) on a CPU without
 * AVX512_BF16 or AMX_BF16, or without libdnnl.so.2, saying which.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_features.h"
#include "cpu_check.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/onednn_abi.h"

#if defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl_types.h>)
#include <oneapi/dnnl/dnnl_types.h>
_Static_assert((int)PLAIT_DNNL_OK == (int)dnnl_success && (int)PLAIT_DNNL_UNIMPLEMENTED == (int)dnnl_unimplemented,
               "status");
_Static_assert((int)PLAIT_DNNL_ENGINE_CPU == (int)dnnl_cpu &&
                   (int)PLAIT_DNNL_STREAM_IN_ORDER == (int)dnnl_stream_in_order,
               "engine");
_Static_assert((int)PLAIT_DNNL_BF16 == (int)dnnl_bf16 && (int)PLAIT_DNNL_F32 == (int)dnnl_f32, "data types");
_Static_assert((int)PLAIT_DNNL_SCRATCHPAD_USER == (int)dnnl_scratchpad_mode_user, "scratchpad");
_Static_assert((int)PLAIT_DNNL_QUERY_IMPL_INFO_STR == (int)dnnl_query_impl_info_str, "query");
_Static_assert((int)PLAIT_DNNL_QUERY_SCRATCHPAD_MD == (int)dnnl_query_scratchpad_md, "query");
_Static_assert((int)PLAIT_DNNL_ARG_SRC == (int)DNNL_ARG_SRC && (int)PLAIT_DNNL_ARG_DST == (int)DNNL_ARG_DST, "args");
_Static_assert((int)PLAIT_DNNL_ARG_WEIGHTS == (int)DNNL_ARG_WEIGHTS &&
                   (int)PLAIT_DNNL_ARG_SCRATCHPAD == (int)DNNL_ARG_SCRATCHPAD,
               "args");
_Static_assert((int)PLAIT_DNNL_MAX_NDIMS == (int)DNNL_MAX_NDIMS, "dims");
_Static_assert(sizeof(plait_dnnl_md) >= sizeof(dnnl_memory_desc_t), "memory desc");
_Static_assert(_Alignof(plait_dnnl_md) >= _Alignof(dnnl_memory_desc_t), "memory desc");
_Static_assert(sizeof(plait_dnnl_matmul_desc) >= sizeof(dnnl_matmul_desc_t), "matmul desc");
_Static_assert(_Alignof(plait_dnnl_matmul_desc) >= _Alignof(dnnl_matmul_desc_t), "matmul desc");
_Static_assert(sizeof(plait_dnnl_exec_arg) == sizeof(dnnl_exec_arg_t), "exec arg");
#endif
#endif

typedef struct shape {
    int ta, tb;
    int64_t M, N, K, pad; /* pad: extra elements in each row of A, B and C */
    float alpha, beta;
} shape;

/* C = alpha op(A) op(B) + beta C0, native against emulated; the largest
 * difference relative to the sum of |terms| of its element (every term is
 * below 1 in magnitude: K + 1 bounds it). NaN where a result is not finite. */
static double compare(const shape *s, int nan_c) {
    int64_t a_rows = s->ta ? s->K : s->M, a_cols = s->ta ? s->M : s->K;
    int64_t b_rows = s->tb ? s->N : s->K, b_cols = s->tb ? s->K : s->N;
    int64_t lda = a_cols + s->pad, ldb = b_cols + s->pad, ldc = s->N + s->pad;
    float *A = malloc(sizeof(float) * (size_t)(a_rows * lda)), *B = malloc(sizeof(float) * (size_t)(b_rows * ldb));
    float *C1 = malloc(sizeof(float) * (size_t)(s->M * ldc)), *C2 = malloc(sizeof(float) * (size_t)(s->M * ldc));
    fill(A, a_rows * lda, 1);
    fill(B, b_rows * ldb, 2);
    fill(C1, s->M * ldc, 3);
    if (nan_c)
        for (int64_t i = 0; i < s->M * ldc; i++) C1[i] = NAN;
    memcpy(C2, C1, sizeof(float) * (size_t)(s->M * ldc));
    plait_kernels_set_precision(PLAIT_KERNELS_BF16_EMULATED);
    plait_k_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, lda, B, ldb, s->beta, C1, ldc);
    plait_kernels_set_precision(PLAIT_KERNELS_BF16);
    plait_k_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, lda, B, ldb, s->beta, C2, ldc);
    double worst = 0;
    for (int64_t r = 0; r < s->M; r++)
        for (int64_t c = 0; c < s->N; c++) {
            double d = fabs((double)C1[r * ldc + c] - (double)C2[r * ldc + c]) / (double)(s->K + 1);
            if (!(d <= worst)) worst = d; /* NaN too */
        }
    /* the padding between rows is not C's: untouched */
    for (int64_t r = 0; r < s->M && s->pad; r++)
        for (int64_t c = s->N; c < ldc; c++)
            if (memcmp(&C1[r * ldc + c], &C2[r * ldc + c], sizeof(float)) != 0) worst = NAN;
    free(A);
    free(B);
    free(C1);
    free(C2);
    return worst;
}

/* the native product at `threads` threads, for bit comparison */
static float *native(const shape *s, int threads) {
    int64_t a_rows = s->ta ? s->K : s->M, a_cols = s->ta ? s->M : s->K;
    int64_t b_rows = s->tb ? s->N : s->K, b_cols = s->tb ? s->K : s->N;
    float *A = malloc(sizeof(float) * (size_t)(a_rows * a_cols)),
          *B = malloc(sizeof(float) * (size_t)(b_rows * b_cols));
    float *C = malloc(sizeof(float) * (size_t)(s->M * s->N));
    fill(A, a_rows * a_cols, 4);
    fill(B, b_rows * b_cols, 5);
    fill(C, s->M * s->N, 6);
    plait_kernels_set_threads(threads);
    plait_k_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, a_cols, B, b_cols, s->beta, C, s->N);
    free(A);
    free(B);
    return C;
}

/* The product rounded by oneDNN as it stores it against the float32
 * product rounded by plait: the same bits, and the padding between C's
 * rows untouched. 0, or the number of elements that differ. */
static int64_t rounded(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float scale) {
    int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    float *x = malloc(sizeof(float) * (size_t)(a_rows * lda + b_rows * ldb));
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)(a_rows * lda)),
             *B = malloc(sizeof(uint16_t) * (size_t)(b_rows * ldb));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc));
    uint16_t *R = malloc(sizeof(uint16_t) * (size_t)(M * ldc));
    fill(x, a_rows * lda + b_rows * ldb, 7);
    for (int64_t i = 0; i < a_rows * lda; i++) A[i] = plait_k_narrow_bf16(x[i] * scale);
    for (int64_t i = 0; i < b_rows * ldb; i++) B[i] = plait_k_narrow_bf16(x[a_rows * lda + i] * scale);
    memset(R, 0xab, sizeof(uint16_t) * (size_t)(M * ldc));
    int64_t bad = -1;
    if (plait_k_onednn_bf16_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc) == 0 &&
        plait_k_onednn_bf16_gemm_rounded(ta, tb, M, N, K, A, lda, B, ldb, R, ldc) == 0) {
        bad = 0;
        for (int64_t r = 0; r < M; r++)
            for (int64_t c = 0; c < ldc; c++)
                bad += R[r * ldc + c] != (c < N ? plait_k_narrow_bf16(C[r * ldc + c]) : 0xabab);
    }
    free(x);
    free(A);
    free(B);
    free(C);
    free(R);
    return bad;
}

int main(void) {
    /* oneDNN's products are the subject, whatever the environment chose */
    unsetenv("PLAIT_CPU_GEMM");
    setenv("PLAIT_CPU_BF16_PRODUCTS", "bf16", 1); /* oneDNN's products even where auto widens */
    plait_cpu_features f;
    plait_cpu_detect(&f);
    if (!f.has[PLAIT_CPU_AVX512_BF16] && !f.has[PLAIT_CPU_AMX_BF16]) {
        printf("SKIP: this CPU (%s) has neither AVX512_BF16 nor AMX_BF16\n", f.brand[0] ? f.brand : "unknown");
        return 77;
    }
    char what[160], why[768];
    if (plait_kernels_bf16_native(what, sizeof what, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (!strstr(what, "oneDNN")) {
        printf("SKIP: bf16 products run on %s here, not oneDNN\n", what);
        return 77;
    }
    CHECK(plait_kernels_set_precision(PLAIT_KERNELS_BF16) == 0, "bf16 refused after the probe accepted it");
    plait_kernels_bf16_describe(what, sizeof what);
    printf("%s\n", what);
    CHECK(strstr(what, "bf16 products on oneDNN 2.") && strstr(what, "bf16"), "description: %s", what);

    /* fp32 sums in different orders differ by a few ulps of the sum's
     * magnitude; 2^-20 is ~8 ulps, far below a wrong element */
    const double tol = 1.0 / (1 << 20);
    plait_kernels_set_threads(2);
    const int64_t BT = 2048, C = 256, io[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++) {
        int64_t in = io[i][0], out = io[i][1];
        shape fwd = {0, 1, BT, out, in, 0, 1, 0}, dinp = {0, 0, BT, in, out, 0, 1, 0},
              dw = {1, 0, out, in, BT, 0, 1, 1};
        double e1 = compare(&fwd, 1), e2 = compare(&dinp, 0), e3 = compare(&dw, 0);
        CHECK(e1 < tol, "forward %lldx%lldx%lld (C NaN, beta 0): %.3g", (long long)BT, (long long)out, (long long)in,
              e1);
        CHECK(e2 < tol, "input gradient %lldx%lldx%lld: %.3g", (long long)BT, (long long)in, (long long)out, e2);
        CHECK(e3 < tol, "weight gradient (beta 1) %lldx%lldx%lld: %.3g", (long long)out, (long long)in, (long long)BT,
              e3);
    }
    /* odd sizes, strides wider than the rows, alpha and beta not 1 */
    const shape odd[] = {{0, 0, 37, 129, 65, 3, 0.5f, 0.25f},
                         {1, 1, 300, 70, 33, 5, 2.0f, 1.0f},
                         {0, 1, 1, 1, 1, 0, 1.0f, 0.0f},
                         {1, 0, 513, 257, 129, 1, 1.0f, -1.0f}};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        double e = compare(&odd[i], 0);
        CHECK(e < tol, "odd shape %zu (%lldx%lldx%lld, ta %d tb %d, pad %lld, alpha %g beta %g): %.3g", i,
              (long long)odd[i].M, (long long)odd[i].N, (long long)odd[i].K, odd[i].ta, odd[i].tb,
              (long long)odd[i].pad, odd[i].alpha, odd[i].beta, e);
    }
    /* more tile shapes than one thread keeps primitives for (128): the
     * oldest are replaced, the results still right */
    plait_kernels_set_threads(1);
    for (int64_t n = 1; n <= 140; n++) {
        shape s = {0, 1, 16, n, 24, 0, 1, 0};
        double e = compare(&s, 0);
        if (!(e < tol)) {
            CHECK(0, "shape 16x%lldx24 after %lld others: %.3g", (long long)n, (long long)n - 1, e);
            break;
        }
    }
    /* oneDNN's rounding as it stores a bf16 C (the linear layers' plain
     * bf16 outputs) is plait's: round to nearest even of the same fp32 sums */
    const int64_t rshapes[][6] = {{0, 1, 512, 352, 128, 0},
                                  {0, 0, 512, 128, 352, 0},
                                  {1, 0, 64, 128, 512, 0},
                                  {0, 1, 37, 129, 65, 3},
                                  {1, 1, 300, 70, 33, 5}};
    for (size_t i = 0; i < sizeof rshapes / sizeof rshapes[0]; i++) {
        const int64_t *r = rshapes[i];
        int64_t bad = rounded((int)r[0], (int)r[1], r[2], r[3], r[4], r[5], 1.0f);
        CHECK(bad == 0, "rounded product %lldx%lldx%lld (ta %d tb %d, pad %lld): %lld elements differ (-1: refused)",
              (long long)r[2], (long long)r[3], (long long)r[4], (int)r[0], (int)r[1], (long long)r[5], (long long)bad);
    }
    /* printed, not held: what a kernel does with sums below float32's
     * normal range is its ISA's (vdpbf16ps flushes them) */
    int64_t tiny = rounded(0, 1, 64, 64, 32, 0, 1e-19f);
    printf("rounded product of values near 1e-19 (sums below float32's normal range): %lld elements differ\n",
           (long long)tiny);
    /* the same bits at any thread count: each tile one call on one thread */
    shape big = {0, 1, 2048, 1024, 256, 0, 1, 1};
    float *r1 = native(&big, 1), *r2 = native(&big, 2), *r3 = native(&big, 3);
    size_t bytes = sizeof(float) * (size_t)(big.M * big.N);
    CHECK(memcmp(r1, r2, bytes) == 0 && memcmp(r1, r3, bytes) == 0, "1, 2 and 3 threads differ");
    free(r1);
    free(r2);
    free(r3);
    plait_kernels_set_threads(1);
    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    if (!failures) printf("oneDNN bf16 products OK\n");
    return failures ? 1 : 0;
}
