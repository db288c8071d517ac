/*
 * Causal multi-head self-attention, one (batch, head) pair per work item.
 *
 * Inside an item the T×T score matrix is processed in square tiles of
 * ATT_TILE rows: row tile [i0, i1) only meets keys [0, i1), so the products
 * Q·Kᵀ and att·V (and their backward) skip the masked upper triangle except
 * inside diagonal tiles. Each product is one single-threaded sgemm (the
 * items themselves run in parallel); softmax and its backward are
 * vectorised row loops.
 *
 * The fused entries (attention_fused_*) do the same per row tile with
 * the tile's scores in per-item scratch (ATT_TILE x T floats) instead of
 * a B·NH·T·T buffer: the forward keeps each row's log-sum-exp, and the
 * backward recomputes the tile's probabilities from it, exp(s − lse), and
 * accumulates dK and dV over the row tiles in order.
 *
 * The fused entries also take grouped-query attention (NKV key/value
 * heads shared by NH query heads, qkv's rows [q | k | v] then NH + 2·NKV
 * heads wide); with NKV = NH they are the entries above.
 *
 * Shapes: qkv[B,T,3·NH·HS] = [q | k | v], head h at columns h·HS..;
 * out[B,T,NH·HS]; att[B,NH,T,T] softmax probabilities (zeros above the
 * diagonal); lse[B,NH,T].
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

#define ATT_TILE PLAIT_K_ATT_TILE

typedef struct attn_job {
    float *out;        /* forward: out;  backward: dqkv */
    float *att;        /* forward: att;  backward: scratch (datt) */
    const float *qkv;
    const float *att_in; /* backward: saved probabilities */
    const float *dout;   /* backward */
    int64_t B, T, NH, HS;
} attn_job;

/* Rows [i0, i1) of the scores (already scaled, row stride T): softmax of
 * row i over keys 0..i, zeros after. */
PLAIT_SIMD_CLONES static void softmax_causal_rows(float *att, int64_t i0, int64_t i1, int64_t T) {
    for (int64_t i = i0; i < i1; i++) {
        float *row = att + i * T;
        int64_t n = i + 1;
        float mx = plait_max(row, n);
        for (int64_t j = 0; j < n; j++) row[j] = plait_expf(row[j] - mx);
        float inv = 1.0f / plait_sum(row, n);
        for (int64_t j = 0; j < n; j++) row[j] *= inv;
        if (n < T) memset(row + n, 0, (size_t)(T - n) * sizeof *row);
    }
}

/* One (batch, head) item; with j->out NULL only the probabilities (the
 * same products and softmax, so the same bits). */
static void attention_forward_item(void *vj, int64_t item) {
    const attn_job *j = vj;
    const int64_t T = j->T, HS = j->HS, NH = j->NH;
    const int64_t b = item / NH, h = item % NH;
    const int64_t Cl = NH * HS, C3 = 3 * Cl;
    const float *q = j->qkv + b * T * C3 + h * HS;
    const float *k = q + Cl;
    const float *v = q + 2 * Cl;
    float *att = j->att + item * T * T;
    float *out = j->out ? j->out + b * T * Cl + h * HS : NULL;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t i0 = 0; i0 < T; i0 += ATT_TILE) {
        int64_t i1 = i0 + ATT_TILE < T ? i0 + ATT_TILE : T;
        plait_k_gemm_here(0, 1, i1 - i0, i1, HS, scale, q + i0 * C3, C3, k, C3, 0.0f, att + i0 * T, T);
        softmax_causal_rows(att, i0, i1, T);
        if (out) plait_k_gemm_here(0, 0, i1 - i0, HS, i1, 1.0f, att + i0 * T, T, v, C3, 0.0f, out + i0 * Cl, Cl);
    }
}

void plait_k_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                               int64_t NH, int64_t HS) {
    plait_kernels_ensure_init();
    attn_job j = {.out = out, .att = att, .qkv = qkv, .B = B, .T = T, .NH = NH, .HS = HS};
    plait_pool_run(B * NH, attention_forward_item, &j);
}

void plait_k_attention_probs(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                             int64_t HS) {
    plait_kernels_ensure_init();
    attn_job j = {.att = att, .qkv = qkv, .B = B, .T = T, .NH = NH, .HS = HS};
    plait_pool_run(B * NH, attention_forward_item, &j);
}

/* d(scores) for rows [i0, i1) from the probabilities p and d(probabilities)
 * g, in place in g: p_j·(g_j − Σ_k p_k g_k) for j ≤ i, 0 after up to i1. */
PLAIT_SIMD_CLONES static void softmax_causal_rows_backward(float *g, const float *p, int64_t i0,
                                                           int64_t i1, int64_t T) {
    for (int64_t i = i0; i < i1; i++) {
        float *gr = g + i * T;
        const float *pr = p + i * T;
        int64_t n = i + 1;
        float dot = plait_dot(pr, gr, n);
        for (int64_t j = 0; j < n; j++) gr[j] = pr[j] * (gr[j] - dot);
        if (n < i1) memset(gr + n, 0, (size_t)(i1 - n) * sizeof *gr);
    }
}

static void attention_backward_item(void *vj, int64_t item) {
    const attn_job *j = vj;
    const int64_t T = j->T, HS = j->HS, NH = j->NH;
    const int64_t b = item / NH, h = item % NH;
    const int64_t Cl = NH * HS, C3 = 3 * Cl;
    const float *q = j->qkv + b * T * C3 + h * HS;
    const float *k = q + Cl;
    const float *v = q + 2 * Cl;
    float *dq = j->out + b * T * C3 + h * HS;
    float *dk = dq + Cl;
    float *dv = dq + 2 * Cl;
    const float *att = j->att_in + item * T * T;
    float *datt = j->att + item * T * T;
    const float *dout = j->dout + b * T * Cl + h * HS;
    const float scale = 1.0f / sqrtf((float)HS);

    /* rows: d(att) = dout·vᵀ, then d(scores), then dq = scale·d(scores)·k */
    for (int64_t i0 = 0; i0 < T; i0 += ATT_TILE) {
        int64_t i1 = i0 + ATT_TILE < T ? i0 + ATT_TILE : T;
        plait_k_gemm_here(0, 1, i1 - i0, i1, HS, 1.0f, dout + i0 * Cl, Cl, v, C3, 0.0f, datt + i0 * T, T);
        softmax_causal_rows_backward(datt, att, i0, i1, T);
        plait_k_gemm_here(0, 0, i1 - i0, HS, i1, scale, datt + i0 * T, T, k, C3, 0.0f, dq + i0 * C3, C3);
    }
    /* columns: key tile [j0, j1) is seen by query rows [j0, T):
     * dv = attᵀ·dout, dk = scale·d(scores)ᵀ·q */
    for (int64_t j0 = 0; j0 < T; j0 += ATT_TILE) {
        int64_t j1 = j0 + ATT_TILE < T ? j0 + ATT_TILE : T;
        plait_k_gemm_here(1, 0, j1 - j0, HS, T - j0, 1.0f, att + j0 * T + j0, T, dout + j0 * Cl, Cl, 0.0f, dv + j0 * C3,
                          C3);
        plait_k_gemm_here(1, 0, j1 - j0, HS, T - j0, scale, datt + j0 * T + j0, T, q + j0 * C3, C3, 0.0f, dk + j0 * C3,
                          C3);
    }
}

void plait_k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    plait_kernels_ensure_init();
    attn_job j = {.out = dqkv, .att = scratch, .qkv = qkv, .att_in = att, .dout = dout, .B = B, .T = T, .NH = NH,
                  .HS = HS};
    plait_pool_run(B * NH, attention_backward_item, &j);
}

/* ---- fused: the scores of one row tile at a time --------------------------- */

/* Floats of scratch an item (one (batch, head) pair) uses: the tile's
 * scores, and in the backward their gradient beside them. */
size_t plait_k_attention_item_floats(int64_t T) { return (size_t)(2 * ATT_TILE * T); }

size_t plait_k_attention_fused_scratch(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    (void)HS;
    return (size_t)(B * NH) * plait_k_attention_item_floats(T);
}

/* Scores of rows [i0, i1) (tile row r = row i0 + r, stride T) -> their
 * probabilities over keys 0..i, zeros after up to i1 (the unfused
 * forward's softmax, so the same bits), and lse[i] = max + log Σ. */
PLAIT_SIMD_CLONES static void softmax_tile_lse(float *s, float *lse, int64_t i0, int64_t i1, int64_t T) {
    for (int64_t i = i0; i < i1; i++) {
        float *row = s + (i - i0) * T;
        int64_t n = i + 1;
        float mx = plait_max(row, n);
        for (int64_t c = 0; c < n; c++) row[c] = plait_expf(row[c] - mx);
        float sum = plait_sum(row, n), inv = 1.0f / sum;
        for (int64_t c = 0; c < n; c++) row[c] *= inv;
        if (n < i1) memset(row + n, 0, (size_t)(i1 - n) * sizeof *row);
        lse[i] = mx + logf(sum);
    }
}

/* Rows [i0, i1) of a tile: scores p -> probabilities exp(s − lse_i), and
 * g = d(probabilities) -> d(scores) p·(g − Σ_j p_j g_j); both zero after
 * key i up to i1. */
PLAIT_SIMD_CLONES static void softmax_tile_grad(float *p, float *g, const float *lse, int64_t i0, int64_t i1,
                                                int64_t T) {
    for (int64_t i = i0; i < i1; i++) {
        float *pr = p + (i - i0) * T, *gr = g + (i - i0) * T;
        const int64_t n = i + 1;
        for (int64_t c = 0; c < n; c++) pr[c] = plait_expf(pr[c] - lse[i]);
        const float dot = plait_dot(pr, gr, n);
        for (int64_t c = 0; c < n; c++) gr[c] = pr[c] * (gr[c] - dot);
        if (n < i1) {
            memset(pr + n, 0, (size_t)(i1 - n) * sizeof *pr);
            memset(gr + n, 0, (size_t)(i1 - n) * sizeof *gr);
        }
    }
}

void plait_k_softmax_tile_lse(float *s, float *lse, int64_t i0, int64_t i1, int64_t T) {
    softmax_tile_lse(s, lse, i0, i1, T);
}

void plait_k_softmax_tile_grad(float *p, float *g, const float *lse, int64_t i0, int64_t i1, int64_t T) {
    softmax_tile_grad(p, g, lse, i0, i1, T);
}

typedef struct fused_job {
    float *out, *lse, *scratch, *dqkv;
    const float *qkv, *dout, *lse_in;
    int64_t B, T, NH, NKV, HS;
} fused_job;

/* Where query head h's q, k and v start in row 0 of batch b: a row is
 * [q of NH heads | k of NKV | v of NKV], head h reading key/value head
 * h / (NH/NKV); W is the row's width. */
typedef struct head_at {
    int64_t q, k, v, W;
} head_at;

static head_at head_columns(const fused_job *j, int64_t b, int64_t h) {
    const int64_t HS = j->HS, W = (j->NH + 2 * j->NKV) * HS, kv = h / (j->NH / j->NKV);
    const int64_t row0 = b * j->T * W;
    return (head_at){.q = row0 + h * HS, .k = row0 + (j->NH + kv) * HS, .v = row0 + (j->NH + j->NKV + kv) * HS, .W = W};
}

void plait_k_attention_head_forward(float *out, int64_t ldo, float *lse, float *s, const float *q, const float *k,
                                    const float *v, int64_t W, int64_t T, int64_t HS) {
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t i0 = 0; i0 < T; i0 += ATT_TILE) {
        int64_t i1 = i0 + ATT_TILE < T ? i0 + ATT_TILE : T;
        plait_k_gemm_here(0, 1, i1 - i0, i1, HS, scale, q + i0 * W, W, k, W, 0.0f, s, T);
        softmax_tile_lse(s, lse, i0, i1, T);
        plait_k_gemm_here(0, 0, i1 - i0, HS, i1, 1.0f, s, T, v, W, 0.0f, out + i0 * ldo, ldo);
    }
}

/* The forward of one item (a batch and query head) */
static void fused_forward_item(void *vj, int64_t item) {
    const fused_job *j = vj;
    const int64_t T = j->T, HS = j->HS, NH = j->NH;
    const int64_t b = item / NH, h = item % NH;
    const int64_t Cl = NH * HS;
    const head_at at = head_columns(j, b, h);
    (plait_k_attention_on_pairs(HS)
         ? plait_k_attention_head_forward_rounded
         : plait_k_attention_head_forward)(j->out + b * T * Cl + h * HS, Cl, j->lse + item * T,
                                           j->scratch + (size_t)item * plait_k_attention_item_floats(T), j->qkv + at.q,
                                           j->qkv + at.k, j->qkv + at.v, at.W, T, HS);
}

void plait_k_attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                   int64_t NH, int64_t NKV, int64_t HS) {
    plait_kernels_ensure_init();
    fused_job j = {
        .out = out, .lse = lse, .scratch = scratch, .qkv = qkv, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    plait_pool_run(B * NH, fused_forward_item, &j);
}

void plait_k_attention_fused_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                     int64_t NH, int64_t HS) {
    plait_k_attention_gqa_forward(out, lse, scratch, qkv, B, T, NH, NH, HS);
}

void plait_k_attention_head_backward(float *dq, float *dk, float *dv, float *p, const float *dout, int64_t ldd,
                                     const float *lse, const float *q, const float *k, const float *v, int64_t W,
                                     int64_t T, int64_t HS) {
    float *g = p + ATT_TILE * T;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t i0 = 0; i0 < T; i0 += ATT_TILE) {
        const int64_t i1 = i0 + ATT_TILE < T ? i0 + ATT_TILE : T, rows = i1 - i0;
        plait_k_gemm_here(0, 1, rows, i1, HS, scale, q + i0 * W, W, k, W, 0.0f, p, T);
        plait_k_gemm_here(0, 1, rows, i1, HS, 1.0f, dout + i0 * ldd, ldd, v, W, 0.0f, g, T);
        softmax_tile_grad(p, g, lse, i0, i1, T);
        plait_k_gemm_here(0, 0, rows, HS, i1, scale, g, T, k, W, 0.0f, dq + i0 * W, W);
        plait_k_gemm_here(1, 0, i1, HS, rows, 1.0f, p, T, dout + i0 * ldd, ldd, 1.0f, dv, W);
        plait_k_gemm_here(1, 0, i1, HS, rows, scale, g, T, q + i0 * W, W, 1.0f, dk, W);
    }
}

/* The backward of one item (a batch and key/value head): its query heads
 * in order, dK and dV zeroed before the first. One item owns its
 * key/value head's dK and dV, so the sum over the group's heads has one
 * order whatever the threads. */
static void fused_backward_item(void *vj, int64_t item) {
    const fused_job *j = vj;
    const int64_t T = j->T, HS = j->HS, NH = j->NH, NKV = j->NKV, G = NH / NKV;
    const int64_t b = item / NKV, kv = item % NKV;
    const int64_t Cl = NH * HS;
    float *p = j->scratch + (size_t)item * plait_k_attention_item_floats(T);
    if (plait_k_attention_on_pairs(HS)) {
        const head_at at = head_columns(j, b, kv * G);
        plait_k_attention_group_backward_rounded(j->dqkv + at.q, j->dqkv + at.k, j->dqkv + at.v, p,
                                                 j->dout + b * T * Cl + kv * G * HS, Cl,
                                                 j->lse_in + (b * NH + kv * G) * T, j->qkv + at.q, j->qkv + at.k,
                                                 j->qkv + at.v, at.W, G, T, HS);
        return;
    }
    for (int64_t h = kv * G; h < (kv + 1) * G; h++) {
        const head_at at = head_columns(j, b, h);
        const int64_t W = at.W;
        float *dk = j->dqkv + at.k, *dv = j->dqkv + at.v;
        if (h == kv * G)
            for (int64_t t = 0; t < T; t++) {
                memset(dk + t * W, 0, (size_t)HS * sizeof *dk);
                memset(dv + t * W, 0, (size_t)HS * sizeof *dv);
            }
        plait_k_attention_head_backward(j->dqkv + at.q, dk, dv, p, j->dout + b * T * Cl + h * HS, Cl,
                                        j->lse_in + (b * NH + h) * T, j->qkv + at.q, j->qkv + at.k, j->qkv + at.v, W, T,
                                        HS);
    }
}

void plait_k_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                    const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    (void)out; /* the row's Σ_j P·dP stands for dout·out: each row tile holds the whole row */
    plait_kernels_ensure_init();
    fused_job j = {.dqkv = dqkv,
                   .scratch = scratch,
                   .qkv = qkv,
                   .dout = dout,
                   .lse_in = lse,
                   .B = B,
                   .T = T,
                   .NH = NH,
                   .NKV = NKV,
                   .HS = HS};
    plait_pool_run(B * NKV, fused_backward_item, &j);
}

void plait_k_attention_fused_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                      const float *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                      int64_t HS) {
    plait_k_attention_gqa_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NH, HS);
}
