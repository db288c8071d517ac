/*
 * The fused attention on bf16 activations (plait/kernels.h
 * attention_fused_*_bf16, attention_gqa_*_bf16), as the cuda device's
 * tensor-core kernels compute it: the tile products multiply bf16
 * operands with float32 sums (kernels_dpbf16.c: AVX512_BF16's dot
 * products on a bf16 run where the CPU has them), q, k, v and dout read as
 * stored, the probabilities and d(scores) rounded to bf16 for the products
 * that take them; softmax, lse and the sums of dk and dv over a group's
 * query heads stay float32, and out, dq, dk and dv are rounded once. An
 * item packs its key/value head once (kᵀ and vᵀ in pairs of the head's
 * columns, k in pairs of rows) and runs its row tiles as the float32
 * entries do (kernels_attention.c).
 *
 * An odd head size has no pairs to take: there the item's heads are
 * widened into the thread's scratch as [T, 3·HS] rows and the float32
 * item runs on them, its results rounded once.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

typedef struct attn_bf16_job {
    plait_bf16 *out, *dqkv;
    float *lse, *scratch;
    const plait_bf16 *qkv, *dout;
    const float *lse_in;
    int64_t B, T, NH, NKV, HS;
} attn_bf16_job;

/* row 0 of batch b: the row's width and where query head h, key/value
 * head kv start (a row is [q of NH heads | k of NKV | v of NKV]) */
static int64_t row_width(const attn_bf16_job *j) { return (j->NH + 2 * j->NKV) * j->HS; }
static int64_t q_col(const attn_bf16_job *j, int64_t h) { return h * j->HS; }
static int64_t k_col(const attn_bf16_job *j, int64_t kv) { return (j->NH + kv) * j->HS; }
static int64_t v_col(const attn_bf16_job *j, int64_t kv) { return (j->NH + j->NKV + kv) * j->HS; }

/* T rows of HS bf16 values at src (row stride ld) into column `col` of x
 * ([T, 3·HS]) */
static void widen_head(float *x, int64_t col, const plait_bf16 *src, int64_t ld, int64_t T, int64_t HS) {
    plait_k_widen_rows(x + col, 3 * HS, src, ld, T, HS);
}

static void narrow_head(plait_bf16 *dst, int64_t ld, const float *x, int64_t col, int64_t xld, int64_t T, int64_t HS) {
    plait_k_narrow_rows(dst, ld, x + col, xld, T, HS);
}

static void forward_item_widened(const attn_bf16_job *j, int64_t item) {
    const int64_t T = j->T, HS = j->HS, NH = j->NH, W = row_width(j), Cl = NH * HS;
    const int64_t b = item / NH, h = item % NH, kv = h / (NH / j->NKV);
    const plait_bf16 *row0 = j->qkv + b * T * W;
    float *x = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(T * 3 * HS), "attention_fused_forward_bf16");
    float *o = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS1, (size_t)(T * HS), "attention_fused_forward_bf16");
    widen_head(x, 0, row0 + q_col(j, h), W, T, HS);
    widen_head(x, HS, row0 + k_col(j, kv), W, T, HS);
    widen_head(x, 2 * HS, row0 + v_col(j, kv), W, T, HS);
    plait_k_attention_head_forward(o, HS, j->lse + item * T,
                                   j->scratch + (size_t)item * plait_k_attention_item_floats(T), x, x + HS, x + 2 * HS,
                                   3 * HS, T, HS);
    narrow_head(j->out + b * T * Cl + h * HS, Cl, o, 0, HS, T, HS);
}

static void backward_item_widened(const attn_bf16_job *j, int64_t item) {
    const int64_t T = j->T, HS = j->HS, NH = j->NH, NKV = j->NKV, G = NH / NKV, W = row_width(j), Cl = NH * HS;
    const int64_t b = item / NKV, kv = item % NKV, X = 3 * HS;
    const plait_bf16 *row0 = j->qkv + b * T * W;
    plait_bf16 *drow0 = j->dqkv + b * T * W;
    float *x = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(T * X), "attention_fused_backward_bf16");
    float *d = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS1, (size_t)(T * HS), "attention_fused_backward_bf16");
    float *dx = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS2, (size_t)(T * X), "attention_fused_backward_bf16");
    float *p = j->scratch + (size_t)item * plait_k_attention_item_floats(T);
    widen_head(x, HS, row0 + k_col(j, kv), W, T, HS);
    widen_head(x, 2 * HS, row0 + v_col(j, kv), W, T, HS);
    for (int64_t t = 0; t < T; t++) memset(dx + t * X + HS, 0, (size_t)(2 * HS) * sizeof *dx);
    for (int64_t h = kv * G; h < (kv + 1) * G; h++) {
        widen_head(x, 0, row0 + q_col(j, h), W, T, HS);
        plait_k_widen_rows(d, HS, j->dout + b * T * Cl + h * HS, Cl, T, HS);
        plait_k_attention_head_backward(dx, dx + HS, dx + 2 * HS, p, d, HS, j->lse_in + (b * NH + h) * T, x, x + HS,
                                        x + 2 * HS, X, T, HS);
        narrow_head(drow0 + q_col(j, h), W, dx, 0, X, T, HS);
    }
    narrow_head(drow0 + k_col(j, kv), W, dx, HS, X, T, HS);
    narrow_head(drow0 + v_col(j, kv), W, dx, 2 * HS, X, T, HS);
}

static void forward_item_pairs(const attn_bf16_job *j, int64_t item) {
    const int64_t T = j->T, HS = j->HS, NH = j->NH, W = row_width(j), Cl = NH * HS;
    const int64_t b = item / NH, h = item % NH, kv = h / (NH / j->NKV);
    const plait_bf16 *row0 = j->qkv + b * T * W;
    plait_k_attention_pairs_forward((plait_k_rows_out){.b = j->out + b * T * Cl + h * HS, .ld = Cl}, j->lse + item * T,
                                    j->scratch + (size_t)item * plait_k_attention_item_floats(T), row0 + q_col(j, h), W,
                                    row0 + k_col(j, kv), row0 + v_col(j, kv), W, T, HS);
}

static void backward_item_pairs(const attn_bf16_job *j, int64_t item) {
    const int64_t T = j->T, HS = j->HS, NH = j->NH, NKV = j->NKV, G = NH / NKV, W = row_width(j), Cl = NH * HS;
    const int64_t b = item / NKV, kv = item % NKV;
    const plait_bf16 *row0 = j->qkv + b * T * W;
    plait_bf16 *drow0 = j->dqkv + b * T * W;
    float *p = j->scratch + (size_t)item * plait_k_attention_item_floats(T);
    const plait_k_attention_pairs u = plait_k_attention_pairs_begin(row0 + k_col(j, kv), row0 + v_col(j, kv), W, T, HS);
    for (int64_t h = kv * G; h < (kv + 1) * G; h++)
        plait_k_attention_pairs_head(&u, (plait_k_rows_out){.b = drow0 + q_col(j, h), .ld = W}, row0 + q_col(j, h), W,
                                     j->dout + b * T * Cl + h * HS, Cl, j->lse_in + (b * NH + h) * T, p);
    plait_k_attention_pairs_end(&u, (plait_k_rows_out){.b = drow0 + k_col(j, kv), .ld = W},
                                (plait_k_rows_out){.b = drow0 + v_col(j, kv), .ld = W});
}

static void forward_item(void *vj, int64_t item) {
    const attn_bf16_job *j = vj;
    if (plait_k_attention_on_pairs(j->HS)) forward_item_pairs(j, item);
    else forward_item_widened(j, item);
}

static void backward_item(void *vj, int64_t item) {
    const attn_bf16_job *j = vj;
    if (plait_k_attention_on_pairs(j->HS)) backward_item_pairs(j, item);
    else backward_item_widened(j, item);
}

void plait_k_attention_gqa_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                        int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    plait_kernels_ensure_init();
    attn_bf16_job j = {
        .out = out, .lse = lse, .scratch = scratch, .qkv = qkv, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    plait_pool_run(B * NH, forward_item, &j);
}

void plait_k_attention_fused_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                          int64_t T, int64_t NH, int64_t HS) {
    plait_k_attention_gqa_forward_bf16(out, lse, scratch, qkv, B, T, NH, NH, HS);
}

void plait_k_attention_gqa_backward_bf16(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout,
                                         const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                         int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    (void)out; /* as the float32 entry: each row tile holds its whole row */
    plait_kernels_ensure_init();
    attn_bf16_job j = {.dqkv = dqkv,
                       .scratch = scratch,
                       .qkv = qkv,
                       .dout = dout,
                       .lse_in = lse,
                       .B = B,
                       .T = T,
                       .NH = NH,
                       .NKV = NKV,
                       .HS = HS};
    plait_pool_run(B * NKV, backward_item, &j);
}

void plait_k_attention_fused_backward_bf16(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout,
                                           const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                           int64_t T, int64_t NH, int64_t HS) {
    plait_k_attention_gqa_backward_bf16(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NH, HS);
}
