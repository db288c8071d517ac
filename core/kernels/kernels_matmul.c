/*
 * Matrix products: OpenBLAS cblas_sgemm (or oneDNN's dnnl_sgemm,
 * kernels_onednn.c), threaded by plait over a partition of the output that depends only on the shapes (see kernels.h for why).
 */
#include <assert.h>
#include <cblas.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

/* The output C[M,N] is cut into tiles of tm x tn (the last row and column
 * of tiles shorter), and each tile is one single-threaded cblas_sgemm over
 * the whole K: every element of C is computed by the same call sequence
 * whatever the thread count. The tile size depends only on (M, N, K):
 * starting from the whole product, the longer side is halved (rounded up to
 * SGEMM_GRAIN, the micro-kernels' widths) until there are SGEMM_TILES tiles
 * (enough for 64 threads with room to balance load) or a tile would fall
 * below SGEMM_MIN_TILE_MACS multiply-adds. Each tile packs its own panels
 * of A (tm x K) and B (K x tn), so packing costs (tm + tn) / (tm * tn) per
 * multiply-add: at 2^22 (tiles of 128 x 128 at K = 256) OpenBLAS's copy
 * routines took 18% of a gpt-small step against 9% under its own threading
 * (perf, 2 threads) and the step was 15% slower; at 2^26 (512 x 512) the
 * step's CPU time is back at OpenBLAS's own (measured 9.5 s vs 9.7-10.5 s of
 * user time for 6 steps; 11.0 s at 2^22). Products of GPT-2 124M's size
 * still get up to 128 tiles; small models use fewer threads than a large
 * machine has, which costs less than packing every panel many times.
 * Below 2^27 multiply-adds that floor would leave a product whole, on one
 * thread, however many a rank has: such a product of at least
 * SGEMM_MIN_HALVED_MACS is cut once instead (its tiles at least half of
 * it), so that two threads share it for one more packing of the operand
 * its halves share. llama-tiny's and gpt-tiny's steps at 2 threads took
 * 15-25% less time so, and no difference at 1 thread showed through the
 * rounds' noise (docs/cpu.md). */
#define SGEMM_TILES 128
#define SGEMM_MIN_TILE_MACS (1ll << 26)
#define SGEMM_MIN_HALVED_MACS (1ll << 23)
#define SGEMM_GRAIN 32

typedef struct sgemm_job {
    int trans_a, trans_b;
    int64_t M, N, K, lda, ldb, ldc, tm, tn, tiles_n;
    float alpha, beta;
    const float *A, *B;
    float *C;
    const plait_bf16_operands *bf16; /* NULL in fp32 */
} sgemm_job;

void plait_k_blas_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

void plait_k_gemm_here(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (plait_kernels_gemm() == PLAIT_GEMM_ONEDNN)
        plait_k_onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else plait_k_blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t halve(int64_t len) { return ceil_div(ceil_div(len, 2), SGEMM_GRAIN) * SGEMM_GRAIN; }

/* the fewest multiply-adds a tile of a product of `macs` may keep */
static int64_t tile_floor(int64_t macs) {
    if (macs >= 2 * SGEMM_MIN_TILE_MACS || macs < SGEMM_MIN_HALVED_MACS) return SGEMM_MIN_TILE_MACS;
    return (macs + 1) / 2;
}

int64_t plait_k_sgemm_tiles(int64_t M, int64_t N, int64_t K, int64_t *tm_out, int64_t *tn_out) {
    int64_t tm = M, tn = N;
    const int64_t floor_macs = tile_floor(M * N * K);
    while (ceil_div(M, tm) * ceil_div(N, tn) < SGEMM_TILES) {
        /* the longer side first; the other when the longer cannot shrink */
        int64_t nm = halve(tm), nn = halve(tn);
        int can_m = nm < tm && nm * tn * K >= floor_macs;
        int can_n = nn < tn && tm * nn * K >= floor_macs;
        if (can_m && (tm >= tn || !can_n))
            tm = nm;
        else if (can_n)
            tn = nn;
        else
            break;
    }
    if (tm_out) *tm_out = tm;
    if (tn_out) *tn_out = tn;
    return ceil_div(M, tm) * ceil_div(N, tn);
}

static void sgemm_tile(void *vjob, int64_t tile) {
    const sgemm_job *j = vjob;
    int64_t r0 = tile / j->tiles_n * j->tm, c0 = tile % j->tiles_n * j->tn;
    int64_t rows = j->M - r0 < j->tm ? j->M - r0 : j->tm;
    int64_t cols = j->N - c0 < j->tn ? j->N - c0 : j->tn;
    if (j->bf16) {
        plait_k_bf16_gemm(j->trans_a, j->trans_b, rows, cols, j->K, j->alpha, j->bf16, r0, c0, j->beta,
                          j->C + r0 * j->ldc + c0, j->ldc);
        return;
    }
    const float *A = j->trans_a ? j->A + r0 : j->A + r0 * j->lda;
    const float *B = j->trans_b ? j->B + c0 * j->ldb : j->B + c0;
    plait_k_gemm_here(j->trans_a, j->trans_b, rows, cols, j->K, j->alpha, A, j->lda, B, j->ldb, j->beta,
                      j->C + r0 * j->ldc + c0, j->ldc);
}

void plait_k_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                   int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    plait_kernels_ensure_init();
    sgemm_job j = {.trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb,
                   .ldc = ldc, .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C};
    plait_bf16_operands op;
    /* bf16: the operands rounded once per product, then the same tiles (out
     * of memory for the copies: the fp32 product, with a warning) */
    if (plait_kernels_precision() != PLAIT_KERNELS_FP32 && K > 0) {
        if (plait_k_bf16_operands(trans_a, trans_b, M, N, K, A, lda, B, ldb, &op) == 0)
            j.bf16 = &op;
        else
            plait_kernels_warn("no memory for bf16 copies of a %lldx%lldx%lld product; it runs in fp32",
                      (long long)M, (long long)N, (long long)K);
    }
    int64_t tiles = plait_k_sgemm_tiles(M, N, K, &j.tm, &j.tn);
    j.tiles_n = ceil_div(N, j.tn);
    plait_pool_run(tiles, sgemm_tile, &j);
}

/* Row blocks of the memory-bound epilogues (fixed, as every cut here). */
#define ROWS_CHUNK 64

typedef struct rows_job {
    float *out;
    const float *res, *bias;
    int64_t C;
    int add;
} rows_job;

/* out = bias in every row */
static void fill_rows(void *vj, int64_t r0, int64_t r1) {
    const rows_job *j = vj;
    for (int64_t r = r0; r < r1; r++) memcpy(j->out + r * j->C, j->bias, (size_t)j->C * sizeof(float));
}

/* out = res + bias, or out += res + bias when `add` (bias may be NULL;
 * out may be res when not adding) */
static void res_bias_rows(void *vj, int64_t r0, int64_t r1) {
    const rows_job *j = vj;
    const int64_t C = j->C;
    const float *b = j->bias;
    for (int64_t r = r0; r < r1; r++) {
        float *o = j->out + r * C;
        const float *x = j->res + r * C;
        if (j->add && b)
            for (int64_t c = 0; c < C; c++) o[c] += x[c] + b[c];
        else if (j->add)
            for (int64_t c = 0; c < C; c++) o[c] += x[c];
        else if (b)
            for (int64_t c = 0; c < C; c++) o[c] = x[c] + b[c];
        else if (o != x)
            memcpy(o, x, (size_t)C * sizeof *o);
    }
}

void plait_k_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int64_t BT, int64_t C, int64_t OC) {
    rows_job j = {out, NULL, bias, OC, 0};
    if (bias) plait_pool_for(BT, ROWS_CHUNK, fill_rows, &j);
    plait_k_sgemm(0, 1, BT, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

void plait_k_matmul_forward_residual(float *out, const float *res, const float *inp,
                                     const float *weight, const float *bias, int64_t BT,
                                     int64_t C, int64_t OC) {
    rows_job j = {out, res, bias, OC, 0};
    if (bias || out != res) plait_pool_for(BT, ROWS_CHUNK, res_bias_rows, &j);
    plait_k_sgemm(0, 1, BT, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

/* Column blocks: each column is summed over the rows in row order, from
 * its value in dbias. A block's running sums stay in a local array (no
 * aliasing with dout, so the loop vectorises) and each row's part of the
 * block is read as four contiguous cache lines. */
#define BIAS_COLS 64

typedef struct bias_job {
    float *dbias;
    const float *dout;
    int64_t BT, OC;
} bias_job;

PLAIT_SIMD_CLONES static void bias_cols(float *dbias, const float *dout, int64_t BT, int64_t OC, int64_t n) {
    float acc[BIAS_COLS];
    for (int64_t c = 0; c < n; c++) acc[c] = dbias[c];
    for (int64_t r = 0; r < BT; r++) {
        const float *d = dout + r * OC;
        for (int64_t c = 0; c < n; c++) acc[c] += d[c];
    }
    for (int64_t c = 0; c < n; c++) dbias[c] = acc[c];
}

static void bias_item(void *vj, int64_t item) {
    const bias_job *j = vj;
    const int64_t c0 = item * BIAS_COLS, c1 = c0 + BIAS_COLS < j->OC ? c0 + BIAS_COLS : j->OC;
    bias_cols(j->dbias + c0, j->dout + c0, j->BT, j->OC, c1 - c0);
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
    rows_job j = {x, res, bias, C, 1};
    plait_pool_for(BT, ROWS_CHUNK, res_bias_rows, &j);
}
