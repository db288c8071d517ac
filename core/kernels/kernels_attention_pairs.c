/*
 * The fused attention's heads on bf16 pairs: what a bf16 run's attention
 * computes at an even head size, as the cuda device's tensor-core kernels
 * do. The tile products multiply bf16 operands with float32 sums
 * (kernels_dpbf16.c), q, k, v and dout as stored in bf16, the
 * probabilities and d(scores) rounded to bf16 for the products that take
 * them; softmax, lse and the sums of dk and dv over a group's query heads
 * stay float32. The row tiles and the order of every sum are those of the
 * float32 heads (kernels_attention.c), so that a tile's keys stop at its
 * last row's.
 *
 * Callers: the bf16-activation entries (kernels_attention_bf16.c), and
 * the float32 entries on a bf16 run (their heads rounded first, below),
 * so that both give the same bits on the same values, as on the GPU.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#define TILE PLAIT_K_ATT_TILE

/* float32 slots hold the bf16 buffers: n values take n/2 floats, each
 * buffer starting on a cache line */
static size_t floats_for(int64_t n_bf16) { return ((size_t)(n_bf16 + 1) / 2 + 15) & ~(size_t)15; }

int plait_k_attention_on_pairs(int64_t HS) {
    return HS % 2 == 0 && plait_kernels_precision() != PLAIT_KERNELS_FP32 && !plait_k_bf16_widened();
}

static void put_rows(plait_k_rows_out o, int64_t row0, const float *x, int64_t xld, int64_t rows, int64_t cols) {
    if (o.b) {
        plait_k_narrow_rows(o.b + row0 * o.ld, o.ld, x, xld, rows, cols);
        return;
    }
    for (int64_t r = 0; r < rows; r++) memcpy(o.f + (row0 + r) * o.ld, x + r * xld, (size_t)cols * sizeof *x);
}

void plait_k_attention_pairs_forward(plait_k_rows_out out, float *lse, float *s, const uint16_t *q, int64_t qld,
                                     const uint16_t *k, const uint16_t *v, int64_t kvld, int64_t T, int64_t HS) {
    const int64_t H2 = HS / 2, Tp = T + (T & 1);
    const size_t n_kt = floats_for(HS * T), n_vp = floats_for(Tp * HS), n_pb = floats_for(TILE * Tp);
    float *buf = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, n_kt + n_vp + n_pb, "attention_fused_forward");
    uint16_t *kt = (uint16_t *)buf, *vp = (uint16_t *)(buf + n_kt), *pb = (uint16_t *)(buf + n_kt + n_vp);
    float *o = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS1, (size_t)(TILE * HS), "attention_fused_forward");
    const float scale = 1.0f / sqrtf((float)HS);
    plait_k_dpbf16_pack_cols(kt, 2 * T, k, kvld, HS, T);
    plait_k_dpbf16_pack_rows(vp, 2 * HS, v, kvld, T, HS);
    for (int64_t i0 = 0; i0 < T; i0 += TILE) {
        const int64_t i1 = i0 + TILE < T ? i0 + TILE : T, rows = i1 - i0;
        const plait_k_dp_causal to_row_cols = {PLAIT_K_DP_COLS_TO_ROW, i0}, to_row_k = {PLAIT_K_DP_K_TO_ROW, i0};
        plait_k_dpbf16_gemm_causal(rows, i1, H2, scale, q + i0 * qld, qld, 2, kt, 2 * T, 0.0f, s, T, to_row_cols);
        plait_k_softmax_tile_lse(s, lse, i0, i1, T);
        plait_k_dpbf16_round_rows(pb, Tp, s, T, rows, i1);
        plait_k_dpbf16_gemm_causal(rows, HS, (i1 + 1) / 2, 1.0f, pb, Tp, 2, vp, 2 * HS, 0.0f, o, HS, to_row_k);
        put_rows(out, i0, o, HS, rows, HS);
    }
}

plait_k_attention_pairs plait_k_attention_pairs_begin(const uint16_t *k, const uint16_t *v, int64_t kvld, int64_t T,
                                                      int64_t HS) {
    const int64_t Tp = T + (T & 1);
    const size_t n_t = floats_for(HS * T), n_kp = floats_for(Tp * HS), n_dsb = floats_for(TILE * Tp),
                 n_pp = floats_for(TILE * 2 * Tp), n_hp = floats_for(TILE * HS);
    float *buf = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, 2 * n_t + n_kp + n_dsb + 2 * n_pp + 2 * n_hp,
                                        "attention_fused_backward");
    float *acc = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS1, (size_t)((2 * T + TILE) * HS), "attention_fused_backward");
    plait_k_attention_pairs u = {.T = T, .HS = HS};
    u.kt = (uint16_t *)buf;
    u.vt = (uint16_t *)(buf += n_t);
    u.kp = (uint16_t *)(buf += n_t);
    u.dsb = (uint16_t *)(buf += n_kp);
    u.pp = (uint16_t *)(buf += n_dsb);
    u.dsp = (uint16_t *)(buf += n_pp);
    u.dop = (uint16_t *)(buf += n_pp);
    u.qp = (uint16_t *)(buf + n_hp);
    u.dk = acc;
    u.dv = acc + T * HS;
    u.dqt = acc + 2 * T * HS;
    plait_k_dpbf16_pack_cols(u.kt, 2 * T, k, kvld, HS, T);
    plait_k_dpbf16_pack_cols(u.vt, 2 * T, v, kvld, HS, T);
    plait_k_dpbf16_pack_rows(u.kp, 2 * HS, k, kvld, T, HS);
    memset(u.dk, 0, (size_t)(2 * T * HS) * sizeof *u.dk);
    return u;
}

void plait_k_attention_pairs_head(const plait_k_attention_pairs *u, plait_k_rows_out dq, const uint16_t *q, int64_t qld,
                                  const uint16_t *dout, int64_t ldd, const float *lse, float *p) {
    const int64_t T = u->T, HS = u->HS, H2 = HS / 2, Tp = T + (T & 1);
    const float scale = 1.0f / sqrtf((float)HS);
    float *g = p + TILE * T;
    for (int64_t i0 = 0; i0 < T; i0 += TILE) {
        const int64_t i1 = i0 + TILE < T ? i0 + TILE : T, rows = i1 - i0, r2 = (rows + 1) / 2;
        const plait_k_dp_causal to_row_cols = {PLAIT_K_DP_COLS_TO_ROW, i0}, to_row_k = {PLAIT_K_DP_K_TO_ROW, i0},
                                from_row_k = {PLAIT_K_DP_K_FROM_ROW, i0};
        plait_k_dpbf16_gemm_causal(rows, i1, H2, scale, q + i0 * qld, qld, 2, u->kt, 2 * T, 0.0f, p, T, to_row_cols);
        plait_k_dpbf16_gemm_causal(rows, i1, H2, 1.0f, dout + i0 * ldd, ldd, 2, u->vt, 2 * T, 0.0f, g, T, to_row_cols);
        plait_k_softmax_tile_grad(p, g, lse, i0, i1, T);
        plait_k_dpbf16_round_rows(u->dsb, Tp, g, T, rows, i1);
        plait_k_dpbf16_gemm_causal(rows, HS, (i1 + 1) / 2, scale, u->dsb, Tp, 2, u->kp, 2 * HS, 0.0f, u->dqt, HS,
                                   to_row_k);
        put_rows(dq, i0, u->dqt, HS, rows, HS);
        plait_k_dpbf16_pack_rows_rounded(u->pp, 2 * Tp, p, T, rows, i1);
        plait_k_dpbf16_pack_rows_rounded(u->dsp, 2 * Tp, g, T, rows, i1);
        plait_k_dpbf16_pack_rows(u->dop, 2 * HS, dout + i0 * ldd, ldd, rows, HS);
        plait_k_dpbf16_pack_rows(u->qp, 2 * HS, q + i0 * qld, qld, rows, HS);
        /* key n's pair kk of pᵀ (and of d(scores)ᵀ) is queries 2kk and
         * 2kk+1 of column n */
        plait_k_dpbf16_gemm_causal(i1, HS, r2, 1.0f, u->pp, 2, 2 * Tp, u->dop, 2 * HS, 1.0f, u->dv, HS, from_row_k);
        plait_k_dpbf16_gemm_causal(i1, HS, r2, scale, u->dsp, 2, 2 * Tp, u->qp, 2 * HS, 1.0f, u->dk, HS, from_row_k);
    }
}

void plait_k_attention_pairs_end(const plait_k_attention_pairs *u, plait_k_rows_out dk, plait_k_rows_out dv) {
    put_rows(dk, 0, u->dk, u->HS, u->T, u->HS);
    put_rows(dv, 0, u->dv, u->HS, u->T, u->HS);
}

/* ---- the float32 entries on a bf16 run -------------------------------------- */
/* T rows of HS floats (row stride ld) rounded into a [T, HS] bf16 buffer */
static void round_head(uint16_t *dst, const float *src, int64_t ld, int64_t T, int64_t HS) {
    plait_k_narrow_rows(dst, HS, src, ld, T, HS);
}

void plait_k_attention_head_forward_rounded(float *out, int64_t ldo, float *lse, float *s, const float *q,
                                            const float *k, const float *v, int64_t W, int64_t T, int64_t HS) {
    const size_t n = floats_for(T * HS);
    float *buf = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS2, 3 * n, "attention_fused_forward");
    uint16_t *qb = (uint16_t *)buf, *kb = (uint16_t *)(buf + n), *vb = (uint16_t *)(buf + 2 * n);
    round_head(qb, q, W, T, HS);
    round_head(kb, k, W, T, HS);
    round_head(vb, v, W, T, HS);
    plait_k_attention_pairs_forward((plait_k_rows_out){.f = out, .ld = ldo}, lse, s, qb, HS, kb, vb, HS, T, HS);
}

void plait_k_attention_group_backward_rounded(float *dq, float *dk, float *dv, float *p, const float *dout, int64_t ldd,
                                              const float *lse, const float *q, const float *k, const float *v,
                                              int64_t W, int64_t G, int64_t T, int64_t HS) {
    const size_t n = floats_for(T * HS);
    float *buf = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS2, 4 * n, "attention_fused_backward");
    uint16_t *kb = (uint16_t *)buf, *vb = (uint16_t *)(buf + n), *qb = (uint16_t *)(buf + 2 * n),
             *db = (uint16_t *)(buf + 3 * n);
    round_head(kb, k, W, T, HS);
    round_head(vb, v, W, T, HS);
    const plait_k_attention_pairs u = plait_k_attention_pairs_begin(kb, vb, HS, T, HS);
    for (int64_t h = 0; h < G; h++) {
        round_head(qb, q + h * HS, W, T, HS);
        round_head(db, dout + h * HS, ldd, T, HS);
        plait_k_attention_pairs_head(&u, (plait_k_rows_out){.f = dq + h * HS, .ld = W}, qb, HS, db, HS, lse + h * T, p);
    }
    plait_k_attention_pairs_end(&u, (plait_k_rows_out){.f = dk, .ld = W}, (plait_k_rows_out){.f = dv, .ld = W});
}
