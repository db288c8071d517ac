/*
 * [model] qk_norm's forward and backward (qk_norm.h says what they do).
 */
#include "model/qk_norm.h"

#include "model/model_bodies.h"

/* One of the two norms: q's heads or k's. */
typedef struct heads {
    int64_t col;   /* where its heads start in a q|k|v row */
    int64_t width; /* its heads' columns in a row (n·HS) */
    int64_t rows;  /* head rows, BT·n */
    int64_t kept;  /* where its inputs start in qkn (elements) and its deviations in qk_rstd */
    int64_t rstd;
    const float *w;
} heads;

static heads heads_of(const plait_model *m, int k, const float *w) {
    const int64_t BT = m->B * m->T, nq = m->NHl * m->HS;
    if (!k) return (heads){.col = 0, .width = nq, .rows = BT * m->NHl, .kept = 0, .rstd = 0, .w = w};
    return (heads){.col = nq,
                   .width = m->NKVl * m->HS,
                   .rows = BT * m->NKVl,
                   .kept = plait_qk_norm_k_at(BT * nq),
                   .rstd = plait_qk_norm_k_at(BT * m->NHl),
                   .w = w};
}

/* The scratch's parts: two float32 [BT·NHl,HS], a bf16 one, dw [2,HS]. */
static float *scratch_f32(plait_model *m, int i) {
    return m->qkn_scratch + (size_t)i * (size_t)plait_qk_norm_k_at(m->B * m->T * m->NHl * m->HS);
}
static plait_bf16 *scratch_bf16(plait_model *m) { return (plait_bf16 *)(void *)scratch_f32(m, 2); }

float *plait_qk_norm_dw(plait_model *m) {
    return scratch_f32(m, 2) + (m->bf16 ? plait_qk_norm_k_at(m->B * m->T * m->NHl * m->HS) / 2 : 0);
}

/* Copies a head block of `BT` rows between a q|k|v row layout (stride Wq,
 * from column h->col) and packed rows (stride h->width): to_rows 1 packs.
 * bf16 elements move as pairs of floats (every width and column even). */
static void move(plait_model *m, int bf16, void *qkv, void *rows, const heads *h, int to_rows) {
    const int64_t BT = m->B * m->T, s = bf16 ? 2 : 1;
    float *at = (float *)qkv + h->col / s, *packed = (float *)rows;
    if (to_rows) m->k->copy_rows(packed, h->width / s, at, m->Wq / s, BT, h->width / s);
    else m->k->copy_rows(at, m->Wq / s, packed, h->width / s, BT, h->width / s);
}

void plait_qk_norm_forward(plait_model *m, block_acts *a, const float *wq, const float *wk) {
    const float eps = m->desc->norm_eps;
    float *A = scratch_f32(m, 0);
    for (int k = 0; k < 2; k++) {
        const heads h = heads_of(m, k, k ? wk : wq);
        float *rstd = a->qk_rstd + h.rstd;
        if (m->bf16) {
            plait_bf16 *x = a->bf.qkn + h.kept, *out = scratch_bf16(m);
            move(m, 1, a->bf.qkv, x, &h, 1);
            m->k->from_bf16(A, x, (size_t)(h.rows * m->HS));
            m->k->rmsnorm_forward_bf16(out, rstd, A, h.w, h.rows, m->HS, eps);
            move(m, 1, a->bf.qkv, out, &h, 0);
        } else {
            float *x = a->qkn + h.kept;
            move(m, 0, a->qkv, x, &h, 1);
            m->k->rmsnorm_forward(A, rstd, x, h.w, h.rows, m->HS, eps);
            move(m, 0, a->qkv, A, &h, 0);
        }
    }
}

void plait_qk_norm_backward(plait_model *m, const block_acts *a, const float *wq, const float *wk, void *dqkv,
                            float *dw) {
    float *A = scratch_f32(m, 0), *B = scratch_f32(m, 1);
    m->k->zero(dw, (size_t)(2 * m->HS));
    for (int k = 0; k < 2; k++) {
        const heads h = heads_of(m, k, k ? wk : wq);
        const float *rstd = a->qk_rstd + h.rstd;
        float *dwk = dw + k * m->HS;
        const size_t n = (size_t)(h.rows * m->HS);
        if (m->bf16) {
            plait_bf16 *dout = scratch_bf16(m);
            move(m, 1, dqkv, dout, &h, 1);
            m->k->from_bf16(A, a->bf.qkn + h.kept, n);
            m->k->rmsnorm_backward_bf16(B, NULL, dwk, dout, A, h.w, rstd, h.rows, m->HS);
            m->k->to_bf16(dout, B, n);
            move(m, 1, dqkv, dout, &h, 0);
        } else {
            move(m, 0, dqkv, A, &h, 1);
            m->k->rmsnorm_backward(B, NULL, dwk, A, a->qkn + h.kept, h.w, rstd, h.rows, m->HS);
            move(m, 0, dqkv, B, &h, 0);
        }
    }
}

plait_status plait_qk_norm_sum(plait_model *m, int32_t layer, float *dw) {
    /* each rank's heads are its own: the weights' gradients are partial */
    return plait_tp_heads_sum(m, dw, (size_t)(2 * m->HS), "of self_attn.q_norm's and k_norm's weight gradients", layer);
}

void plait_qk_norm_add(plait_model *m, const float *dw, float *gq, float *gk) {
    if (gq) m->k->axpy(gq, dw, (size_t)m->HS, 1.0f);
    if (gk) m->k->axpy(gk, dw + m->HS, (size_t)m->HS, 1.0f);
}
