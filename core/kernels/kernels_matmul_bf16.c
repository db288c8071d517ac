/*
 * The linear layers on bf16 activations (plait/kernels.h, ABI 1.8): bf16
 * input, weight and output gradient, products accumulated in float32.
 *
 * The output C[M,N] is cut into plait_k_sgemm's tiles (the same partition
 * for the same shapes, so the bits never depend on the thread count), and
 * each tile is one product on the calling thread (plait_k_bf16_tile: the
 * bf16 run's native library, or the float32 product of widened operands).
 * A float32 result (the weight gradient, a residual stream) is written in
 * place; a bf16 one with nothing to finish is rounded by oneDNN as it
 * stores it, where the products are oneDNN's (the same bits as rounding
 * the float32 tile, without writing and reading it); any other is made in
 * the thread's scratch and finished there, in cache, before it is rounded
 * once: the bias added, GELU applied (and its input kept), or GELU's
 * derivative applied to a gradient.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

/* How a tile's float32 result is finished */
typedef enum {
    EPI_NONE = 0,  /* written in place into the float32 C */
    EPI_ROUND,     /* + bias, rounded into out */
    EPI_GELU,      /* + bias; pre = that rounded, out = GELU of it (before rounding) rounded */
    EPI_GELU_BACK, /* out = GELU's backward at pre (widened) of it, rounded */
} epilogue;

typedef struct mm_job {
    int trans_a, trans_b;
    int64_t M, N, K, lda, ldb, tm, tn, tiles_n;
    uint64_t product; /* plait_k_bf16_tile's name for this product */
    const uint16_t *A, *B;
    float *C; /* EPI_NONE */
    int64_t ldc;
    float beta;
    epilogue epi;
    uint16_t *out, *pre; /* the bf16 results, row stride ldo (pre_in's too) */
    int64_t ldo;
    const uint16_t *bias, *pre_in;
} mm_job;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* a tile's rows of t (row stride cols) finished into the job's bf16
 * outputs, each step over the whole tile at once (the tile is in cache;
 * a call a row cost more than the row's work at a head size's width) */
static void finish_rows(const mm_job *j, float *t, int64_t r0, int64_t c0, int64_t rows, int64_t cols) {
    const int64_t at = r0 * j->ldo + c0, n = rows * cols;
    if (j->bias) {
        float *b = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)cols, "a bf16 product's bias");
        plait_k_widen(b, j->bias + c0, cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) t[r * cols + c] += b[c];
    }
    if (j->epi == EPI_GELU) {
        plait_k_narrow_rows(j->pre + at, j->ldo, t, cols, rows, cols);
        plait_k_gelu_forward_span(t, t, (size_t)n);
    } else if (j->epi == EPI_GELU_BACK) {
        float *p = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)n, "a bf16 product's GELU input");
        plait_k_widen_rows(p, cols, j->pre_in + at, j->ldo, rows, cols);
        plait_k_gelu_backward_span(t, p, t, (size_t)n);
    }
    plait_k_narrow_rows(j->out + at, j->ldo, t, cols, rows, cols);
}

static void mm_tile(void *vj, int64_t tile) {
    const mm_job *j = vj;
    const int64_t r0 = tile / j->tiles_n * j->tm, c0 = tile % j->tiles_n * j->tn;
    const int64_t rows = j->M - r0 < j->tm ? j->M - r0 : j->tm;
    const int64_t cols = j->N - c0 < j->tn ? j->N - c0 : j->tn;
    const uint16_t *A = j->trans_a ? j->A + r0 : j->A + r0 * j->lda;
    const uint16_t *B = j->trans_b ? j->B + c0 * j->ldb : j->B + c0;
    if (j->epi == EPI_NONE) {
        plait_k_bf16_tile(j->product, j->trans_a, j->trans_b, rows, cols, j->K, 1.0f, A, j->lda, B, j->ldb, j->beta,
                          j->C + r0 * j->ldc + c0, j->ldc);
        return;
    }
    /* a plain rounded result straight from the library, where it can */
    if (j->epi == EPI_ROUND && !j->bias &&
        plait_k_bf16_tile_rounded(j->trans_a, j->trans_b, rows, cols, j->K, A, j->lda, B, j->ldb,
                                  j->out + r0 * j->ldo + c0, j->ldo) == 0)
        return;
    float *t = plait_k_scratch_or_die(PLAIT_K_SLOT_TILE_C, (size_t)(rows * cols), "a bf16 product's tile");
    plait_k_bf16_tile(j->product, j->trans_a, j->trans_b, rows, cols, j->K, 1.0f, A, j->lda, B, j->ldb, 0.0f, t, cols);
    finish_rows(j, t, r0, c0, rows, cols);
}

static void mm_run(mm_job *j) {
    if (j->M <= 0 || j->N <= 0) return;
    if (!j->ldo) j->ldo = j->N;
    plait_kernels_ensure_init();
    const int64_t tiles = plait_k_sgemm_tiles(j->M, j->N, j->K, &j->tm, &j->tn);
    j->tiles_n = ceil_div(j->N, j->tn);
    j->product = plait_k_bf16_product();
    plait_pool_run(tiles, mm_tile, j);
}

/* out[BT,OC] (rows ldo apart) = inp[BT,C]·weightᵀ (weight [OC,C]) finished
 * by `epi` */
static void forward_bf16(epilogue epi, plait_bf16 *out, int64_t ldo, plait_bf16 *pre, const plait_bf16 *inp,
                         const plait_bf16 *weight, const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    mm_job j = {.trans_b = 1, .M = BT, .N = OC, .K = C, .lda = C, .ldb = C, .A = inp, .B = weight, .epi = epi};
    j.out = out, j.ldo = ldo, j.pre = pre, j.bias = bias;
    mm_run(&j);
}

void plait_k_matmul_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight,
                                 const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    forward_bf16(EPI_ROUND, out, OC, NULL, inp, weight, bias, BT, C, OC);
}

void plait_k_matmul_forward_bf16_ld(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                    const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    forward_bf16(EPI_ROUND, out, ldo, NULL, inp, weight, bias, BT, C, OC);
}

void plait_k_matmul_forward_gelu_bf16(plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    forward_bf16(EPI_GELU, out, OC, pre, inp, weight, bias, BT, C, OC);
}

/* out = res + bias (either NULL: left out), the float32 entry's first step */
typedef struct res_job {
    float *out;
    const float *res, *bias;
    int64_t C;
} res_job;

static void res_rows(void *vj, int64_t r0, int64_t r1) {
    const res_job *j = vj;
    const int64_t C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        float *o = j->out + r * C;
        const float *x = j->res ? j->res + r * C : NULL, *b = j->bias;
        if (x && b)
            for (int64_t c = 0; c < C; c++) o[c] = x[c] + b[c];
        else if (b) memcpy(o, b, (size_t)C * sizeof *o);
        else if (o != x) memcpy(o, x, (size_t)C * sizeof *o);
    }
}

void plait_k_matmul_forward_residual_bf16(float *out, const float *res, const plait_bf16 *inp, const plait_bf16 *weight,
                                          const float *bias, int64_t BT, int64_t C, int64_t OC) {
    res_job r = {out, res, bias, OC};
    if (res || bias) plait_pool_for(BT, 64, res_rows, &r);
    mm_job j = {.trans_b = 1,
                .M = BT,
                .N = OC,
                .K = C,
                .lda = C,
                .ldb = C,
                .A = inp,
                .B = weight,
                .C = out,
                .ldc = OC,
                .beta = res || bias ? 1.0f : 0.0f};
    mm_run(&j);
}

/* dbias[c] += Σ_r dout[r,c] over the rows in order, a block of columns a
 * work item (plait_k_bias_backward's order, on the widened values) */
#define BIAS_COLS 64

typedef struct bias_job {
    float *dbias;
    const uint16_t *dout;
    int64_t BT, OC, ld; /* dout's rows ld apart */
} bias_job;

/* rows widened BIAS_ROWS at a time (one call a block: a row's 64 values
 * cost less than the call), then added in row order */
#define BIAS_ROWS 16

static void bias_item(void *vj, int64_t item) {
    const bias_job *j = vj;
    const int64_t c0 = item * BIAS_COLS, n = c0 + BIAS_COLS < j->OC ? BIAS_COLS : j->OC - c0;
    float acc[BIAS_COLS], rows[BIAS_ROWS * BIAS_COLS];
    for (int64_t c = 0; c < n; c++) acc[c] = j->dbias[c0 + c];
    for (int64_t r0 = 0; r0 < j->BT; r0 += BIAS_ROWS) {
        const int64_t nr = j->BT - r0 < BIAS_ROWS ? j->BT - r0 : BIAS_ROWS;
        plait_k_widen_rows(rows, BIAS_COLS, j->dout + r0 * j->ld + c0, j->ld, nr, n);
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = 0; c < n; c++) acc[c] += rows[r * BIAS_COLS + c];
    }
    for (int64_t c = 0; c < n; c++) j->dbias[c0 + c] = acc[c];
}

void plait_k_matmul_backward_bf16_ld(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                     int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                     const plait_bf16 *pre, int64_t BT, int64_t C, int64_t OC) {
    if (dinp) { /* dinp[BT,C] = dout[BT,OC]·weight[OC,C] */
        mm_job j = {.M = BT, .N = C, .K = OC, .lda = ldo, .ldb = C, .A = dout, .B = weight};
        j.epi = pre ? EPI_GELU_BACK : EPI_ROUND, j.out = dinp, j.pre_in = pre;
        mm_run(&j);
    }
    if (dweight) { /* dweight[OC,C] += doutᵀ·inp */
        mm_job j = {.trans_a = 1, .M = OC, .N = C, .K = BT, .lda = ldo, .ldb = C, .A = dout, .B = inp};
        j.C = dweight, j.ldc = C, j.beta = 1.0f;
        mm_run(&j);
    }
    if (dbias) {
        bias_job b = {dbias, dout, BT, OC, ldo};
        plait_pool_run((OC + BIAS_COLS - 1) / BIAS_COLS, bias_item, &b);
    }
}

void plait_k_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                  const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_backward_bf16_ld(dinp, dweight, dbias, dout, OC, inp, weight, NULL, BT, C, OC);
}

void plait_k_matmul_backward_gelu_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                       const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre,
                                       int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_backward_bf16_ld(dinp, dweight, dbias, dout, OC, inp, weight, pre, BT, C, OC);
}
