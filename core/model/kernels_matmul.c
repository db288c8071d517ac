/*
 * Matrix products: OpenBLAS cblas_sgemm, threaded by plait over a partition
 * of the output that depends only on the shapes (see kernels.h for why).
 */
#include <assert.h>
#include <cblas.h>
#include <string.h>

#include "model/kernels.h"
#include "model/kernels_internal.h"
#include "model/kernels_pool.h"

/* A product smaller than this many multiply-adds runs in one call: waking a
 * worker costs more than it saves. */
#define SGEMM_SPLIT_MIN_MACS (1ll << 21)
#define SGEMM_MAX_PARTS 4
/* Part boundaries are multiples of this (OpenBLAS micro-kernel widths). */
#define SGEMM_GRAIN 32

typedef struct sgemm_job {
    int trans_a, trans_b, split_rows;
    int64_t M, N, K, lda, ldb, ldc, part_len;
    float alpha, beta;
    const float *A, *B;
    float *C;
} sgemm_job;

void plait_k_blas_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

static void sgemm_part(void *vjob, int64_t part) {
    const sgemm_job *j = vjob;
    int64_t lo = part * j->part_len;
    if (j->split_rows) {
        int64_t rows = j->M - lo < j->part_len ? j->M - lo : j->part_len;
        const float *A = j->trans_a ? j->A + lo : j->A + lo * j->lda;
        plait_k_blas_gemm(j->trans_a, j->trans_b, rows, j->N, j->K, j->alpha, A, j->lda, j->B,
                          j->ldb, j->beta, j->C + lo * j->ldc, j->ldc);
    } else {
        int64_t cols = j->N - lo < j->part_len ? j->N - lo : j->part_len;
        const float *B = j->trans_b ? j->B + lo * j->ldb : j->B + lo;
        plait_k_blas_gemm(j->trans_a, j->trans_b, j->M, cols, j->K, j->alpha, j->A, j->lda, B,
                          j->ldb, j->beta, j->C + lo, j->ldc);
    }
}

void plait_k_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                   int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    plait_kernels_ensure_init();
    sgemm_job j = {trans_a, trans_b, M >= N, M, N, K, lda, ldb, ldc, 0, alpha, beta, A, B, C};
    int64_t dim = j.split_rows ? M : N;
    int64_t parts = 1;
    while (parts < SGEMM_MAX_PARTS && M * N * K / (parts * 2) >= SGEMM_SPLIT_MIN_MACS &&
           dim / (parts * 2) >= SGEMM_GRAIN)
        parts *= 2;
    if (parts == 1) {
        plait_k_blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int64_t len = (dim + parts - 1) / parts;
    j.part_len = (len + SGEMM_GRAIN - 1) / SGEMM_GRAIN * SGEMM_GRAIN;
    plait_pool_run((dim + j.part_len - 1) / j.part_len, sgemm_part, &j);
}

static void fill_rows(float *out, const float *row, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) memcpy(out + r * cols, row, (size_t)cols * sizeof *out);
}

void plait_k_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int64_t BT, int64_t C, int64_t OC) {
    if (bias) fill_rows(out, bias, BT, OC);
    plait_k_sgemm(0, 1, BT, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

void plait_k_matmul_forward_residual(float *out, const float *res, const float *inp,
                                     const float *weight, const float *bias, int64_t BT,
                                     int64_t C, int64_t OC) {
    if (bias) {
        for (int64_t r = 0; r < BT; r++) {
            float *o = out + r * OC;
            const float *x = res + r * OC;
            for (int64_t c = 0; c < OC; c++) o[c] = x[c] + bias[c];
        }
    } else if (out != res) {
        memcpy(out, res, (size_t)(BT * OC) * sizeof *out);
    }
    plait_k_sgemm(0, 1, BT, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

/* Column blocks: each column is summed over the rows in row order. */
#define BIAS_COLS 128

typedef struct bias_job {
    float *dbias;
    const float *dout;
    int64_t BT, OC;
} bias_job;

static void bias_item(void *vj, int64_t item) {
    const bias_job *j = vj;
    const int64_t OC = j->OC, BT = j->BT;
    int64_t c0 = item * BIAS_COLS, c1 = c0 + BIAS_COLS < OC ? c0 + BIAS_COLS : OC;
    float *restrict db = j->dbias;
    for (int64_t r = 0; r < BT; r++) {
        const float *restrict d = j->dout + r * OC;
        for (int64_t c = c0; c < c1; c++) db[c] += d[c];
    }
}

void plait_k_bias_backward(float *dbias, const float *dout, int64_t BT, int64_t OC) {
    bias_job j = {dbias, dout, BT, OC};
    plait_pool_run((OC + BIAS_COLS - 1) / BIAS_COLS, bias_item, &j);
}

void plait_k_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int64_t BT, int64_t C,
                             int64_t OC) {
    if (dinp) plait_k_sgemm(0, 0, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
    if (dweight) plait_k_sgemm(1, 0, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) plait_k_bias_backward(dbias, dout, BT, OC);
}

void plait_k_add_bias_residual(float *x, const float *res, const float *bias, int64_t BT,
                               int64_t C) {
    for (int64_t r = 0; r < BT; r++) {
        float *o = x + r * C;
        const float *s = res + r * C;
        if (bias)
            for (int64_t c = 0; c < C; c++) o[c] += s[c] + bias[c];
        else
            for (int64_t c = 0; c < C; c++) o[c] += s[c];
    }
}
