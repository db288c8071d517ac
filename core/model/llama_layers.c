/*
 * The Llama family's layer bodies, float32: the token embedding (no
 * learned positions), a block (RMSNorm, q/k/v projections, rotary
 * positions on q and k, grouped-query attention, o_proj into the residual
 * stream; RMSNorm, gate and up projections, SwiGLU, down_proj into the
 * stream) and the head (RMSNorm, lm_head, the loss the gpt head shares).
 *
 * q, k and v share one buffer a row, [q of NH heads | k of NKV | v of
 * NKV], as the attention kernel reads it, so K and V are never expanded.
 * Their weights lie one after another in the parameters' storage (a
 * block's tensors in order, each on a 16-float boundary, which q's and k's
 * sizes keep when C·HS is a multiple of 16), one [(NH+2·NKV)·HS, C]
 * matrix: the forward, the input gradient and the weight gradient are one
 * product each over it, which packs ln1 (or the gradient) once and cuts
 * into wider tiles than one product a projection would. Where a layout
 * keeps them apart (padding, or ZeRO's units splitting a block at large
 * widths) the products read a stacked copy (qkv_pack, Wq·C floats, a
 * 1/BT share of the product's traffic) and the weight gradient is added
 * in it and copied back: every layout runs the same products, so their
 * bits agree. The rotation happens in place after the products: the
 * slot keeps the rotated q and k the attention read, and the backward
 * rotates their gradient back before the products' backward.
 *
 * gate's and up's input gradients sum into one buffer: up's product adds
 * to gate's (beta 1) instead of a product of its own and a pass adding it.
 *
 * Under tensor parallelism they follow Megatron-LM as the GPT's bodies do:
 * q, k, v (whole query heads with their key/value heads), gate and up
 * column-parallel, o_proj and down_proj row-parallel, the vocabulary-
 * parallel embedding and head; g (all-reduce forward) after the
 * row-parallel products and the embedding, f (all-reduce of the input
 * gradient) before the column-parallel ones. Under sequence parallelism
 * (tp_conjugates.c) the RMSNorms and the residual stream hold this rank's
 * rows: an all-gather of the norm's output before q/k/v, gate/up and
 * lm_head, a reduce-scatter after o_proj, down_proj and the embedding.
 *
 * [model] qk_norm normalises q's and k's heads between the product and
 * the rotation (qk_norm.c); the slot keeps them as they were before.
 *
 * [model] recompute: selective drops SwiGLU's output (rebuilt from gate's
 * and up's), full keeps the block's input alone and reruns the block up
 * to SwiGLU (plait_llama_block_forward_act) before its backward
 * (recompute.c). Under bf16 activations a block runs llama_bf16.c's
 * bodies instead; the embedding and the head stay float32.
 */
#include "device/device.h"
#include "model/model_bodies.h"
#include "model/qk_norm.h"
#include "model/ring_attention.h"
#include "runtime/error.h"

/* out = res + inp @ weight^T, the product row-parallel under tensor
 * parallelism (its partial sums summed over the group before the residual
 * is added: all-reduced, or reduce-scattered into this rank's rows). */
static plait_status residual_product(plait_model *m, float *out, const float *res, const float *inp,
                                     const float *weight, int64_t K, const char *where, int32_t layer) {
    const int64_t BT = m->B * m->T, C = m->C;
    if (!m->tp_ops) {
        m->k->matmul_forward_residual(out, res, inp, weight, NULL, BT, K, C);
        return PLAIT_OK;
    }
    float *part = plait_tp_partial(m, out);
    m->k->matmul_forward(part, inp, weight, NULL, BT, K, C);
    plait_status st = plait_tp_sum(m, part, out, where, layer);
    if (st == PLAIT_OK) m->k->add_bias_residual(out, res, NULL, m->R, C);
    return st;
}

/* RMSNorm of this rank's rows of x into `out` over every row (gathered
 * under sequence parallelism), its reciprocal deviations into rstd. */
static plait_status norm_forward(plait_model *m, float *out, float *rstd, const float *x, const float *w,
                                 const char *where, int32_t layer) {
    float *rows = plait_tp_local(m, out);
    m->k->rmsnorm_forward(rows, rstd, x, w, m->R, m->C, m->desc->norm_eps);
    return plait_tp_gather(m, rows, out, where, layer);
}

/* RMSNorm's backward over this rank's rows: dx = (dres, or 0) + its input
 * gradient from dout (either may be NULL), its weight's gradient added to
 * dw (may be NULL; completed over the group under sequence parallelism). */
static plait_status norm_backward(plait_model *m, float *dx, const float *dres, float *dw, const float *dout,
                                  const float *x, const float *w, const float *rstd, int32_t layer) {
    norm_grads ng = plait_tp_norm_grads(m, dw, NULL);
    m->k->rmsnorm_backward(dx, dres, ng.w, dout, x, w, rstd, m->R, m->C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

/* ---- embedding ----------------------------------------------------------- */

plait_status plait_llama_embedding_forward(plait_model *m, model_slot *s) {
    if (!s->has_tokens)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: forward of the embedding without tokens (set_batch first)");
    float *wte;
    plait_status st = plait_model_tensors(m, PARAM_DATA, 0, m->desc->p_wte, 1, &wte);
    if (st != PLAIT_OK) return st;
    float *part = m->tp_ops ? plait_tp_partial(m, s->bound[0]) : s->bound[0];
    m->k->embedding_forward_vocab(part, s->tokens, wte, m->vocab_start, m->Vl, NULL, m->B, m->T, m->C);
    /* each tp rank contributes its vocabulary rows, zeros elsewhere: g sums them exactly */
    return plait_tp_sum(m, part, s->bound[0], "of the embedding", 0);
}

plait_status plait_llama_embedding_backward(plait_model *m, model_slot *s) {
    float *dwte;
    plait_status st = plait_model_tensors(m, PARAM_GRAD, 0, m->desc->p_wte, 1, &dwte);
    if (st != PLAIT_OK) return st;
    const float *d;
    if ((st = plait_tp_grad_full(m, s->gbuf[0], &d, "of the embedding", 0)) != PLAIT_OK) return st;
    m->k->embedding_backward_vocab(dwte, NULL, d, s->tokens, m->vocab_start, m->Vl, m->B, m->T, m->C);
    return PLAIT_OK;
}

/* ---- a block --------------------------------------------------------------- */

/* Where q, k and v start in a row, and their widths. */
typedef struct qkv_cols {
    int64_t at[3], width[3];
} qkv_cols;

static qkv_cols qkv_columns(const plait_model *m) {
    const int64_t q = m->NHl * m->HS, kv = m->NKVl * m->HS;
    return (qkv_cols){.at = {0, q, q + kv}, .width = {q, kv, kv}};
}

/* [q; k; v] as one row-major [Wq, row] matrix into *out (row C: the
 * weights, from t[LP_Q..LP_V]; row 1: the biases, from t[LP_QB..LP_VB]),
 * their data or gradients: the tensors themselves where they lie one after
 * another, else their copy stacked in *pack (allocated the first time). */
static plait_status stacked(plait_model *m, float *const *t, int64_t row, float **pack, float **out) {
    const qkv_cols qc = qkv_columns(m);
    *out = t[0];
    if (t[1] == t[0] + qc.at[1] * row && t[2] == t[0] + qc.at[2] * row) return PLAIT_OK;
    if (!*pack && !(*pack = plait_device_alloc((size_t)(m->Wq * row) * sizeof(float), "activations")))
        return PLAIT_ERR_NO_MEMORY;
    for (int i = 0; i < 3; i++) m->k->copy(*pack + qc.at[i] * row, t[i], (size_t)(qc.width[i] * row));
    *out = *pack;
    return PLAIT_OK;
}

static plait_status qkv_stacked(plait_model *m, float *const *t, float **out) {
    return stacked(m, t + LP_Q, m->C, &m->qkv_pack, out);
}

/* Their biases stacked [Wq], or NULL without [model] qkv_bias. */
static plait_status qkv_bias_stacked(plait_model *m, float *const *t, float **out) {
    *out = NULL;
    return t[LP_QB] ? stacked(m, t + LP_QB, 1, &m->qkv_bias_pack, out) : PLAIT_OK;
}

/* Copies back from the stack `g` into the tensors t[0..2] where it was a
 * copy (an added gradient). */
static void unstack(plait_model *m, float *const *t, int64_t row, const float *g) {
    const qkv_cols qc = qkv_columns(m);
    for (int i = 0; g != t[0] && i < 3; i++) m->k->copy(t[i], g + qc.at[i] * row, (size_t)(qc.width[i] * row));
}

plait_status plait_llama_block_forward_act(plait_model *m, model_slot *s, int32_t layer) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl, Wq = m->Wq;
    const float *x = s->bound[layer - 1];
    block_acts *a = &s->blocks[layer - 1];
    float *p[LP_ALL];
    plait_status st = plait_llama_block_tensors(m, PARAM_DATA, layer, p);
    if (st != PLAIT_OK) return st;
    st = norm_forward(m, a->ln1, a->ln1_rstd, x, p[LP_ATTN_NORM], "before self_attn.q_proj, k_proj and v_proj", layer);
    if (st != PLAIT_OK) return st;
    float *w, *b;
    if ((st = qkv_stacked(m, p, &w)) != PLAIT_OK || (st = qkv_bias_stacked(m, p, &b)) != PLAIT_OK) return st;
    if (b) m->k->matmul_forward(a->qkv, a->ln1, w, b, BT, C, Wq);
    else m->k->sgemm(0, 1, BT, Wq, C, 1.0f, a->ln1, C, w, C, 0.0f, a->qkv, Wq);
    if (m->desc->qk_norm) plait_qk_norm_forward(m, a, p[LP_QN], p[LP_KN]);
    m->k->rope(a->qkv, m->rope_cs, m->B, m->T, Wq, m->NHl + m->NKVl, m->HS, 0);
    if (m->cp > 1) st = plait_ring_attention_forward(m, layer, a->atty, a->lse, a->qkv, m->NHl, m->NKVl);
    else m->k->attention_gqa_forward(a->atty, a->lse, m->att_scratch, a->qkv, m->B, m->T, m->NHl, m->NKVl, m->HS);
    if (st != PLAIT_OK) return st;
    st = residual_product(m, a->res2, x, a->atty, p[LP_O], m->Cl, "after self_attn.o_proj", layer);
    if (st == PLAIT_OK)
        st = norm_forward(m, a->ln2, a->ln2_rstd, a->res2, p[LP_MLP_NORM], "before mlp.gate_proj and up_proj", layer);
    if (st != PLAIT_OK || desc_block_sparse(m->desc, layer - 1)) return st;
    m->k->matmul_forward(a->fch, a->ln2, p[LP_GATE], NULL, BT, C, F);
    m->k->matmul_forward(a->fcg, a->ln2, p[LP_UP], NULL, BT, C, F);
    m->k->swiglu_forward(a->swi, a->fch, a->fcg, (size_t)(BT * F));
    return PLAIT_OK;
}

plait_status plait_llama_block_forward(plait_model *m, model_slot *s, int32_t layer) {
    if (m->bf16) return plait_llama_bf16_block_forward(m, s, layer);
    float *down;
    plait_status st = plait_llama_block_forward_act(m, s, layer);
    if (st == PLAIT_OK && desc_block_sparse(m->desc, layer - 1))
        return plait_moe_forward(m, s, layer, s->blocks[layer - 1].ln2, s->blocks[layer - 1].res2, s->bound[layer]);
    if (st == PLAIT_OK)
        st = plait_model_tensors(m, PARAM_DATA, layer, desc_llama_param(m->desc, layer - 1, LP_DOWN), 1, &down);
    if (st != PLAIT_OK) return st;
    const block_acts *a = &s->blocks[layer - 1];
    return residual_product(m, s->bound[layer], a->res2, a->swi, down, m->Fl, "after mlp.down_proj", layer);
}

/* The MLP half's input gradient: d(res2) into dr from dy = d(block
 * output). With `gw` (a one-pass backward) the weight gradients come from
 * the same calls; with `keep` (the input half of a split backward) the
 * output gradients the weight half reads are kept there. */
static plait_status mlp_input(plait_model *m, int32_t layer, const block_acts *a, float *const *p, float *const *gw,
                              const float *dy_rows, float *dr, const block_grads *keep) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    float *dswi = m->s_dfc; /* becomes up's output gradient, in place */
    const float *dy;        /* over every row: gathered under sequence parallelism */
    plait_status st = plait_tp_grad_full(m, dy_rows, &dy, "after mlp.down_proj", layer);
    if (st != PLAIT_OK) return st;
    m->k->matmul_backward(dswi, gw ? gw[LP_DOWN] : NULL, NULL, dy, a->swi, p[LP_DOWN], BT, F, C);
    m->k->swiglu_backward(m->s_dgate, dswi, dswi, a->fch, a->fcg, (size_t)(BT * F));
    /* d(ln2) = gate's input gradient + up's, the latter added by its
     * product (beta 1) */
    float *const *with = m->tp_overlap ? NULL : gw; /* else the sum travels while the two are made */
    m->k->matmul_backward(m->s_dln, with ? with[LP_GATE] : NULL, NULL, m->s_dgate, a->ln2, p[LP_GATE], BT, C, F);
    m->k->sgemm(0, 0, BT, C, F, 1.0f, dswi, F, p[LP_UP], C, 1.0f, m->s_dln, C);
    if (gw && !with) {
        tp_pending pend;
        if ((st = plait_tp_grad_sum_start(m, m->s_dln, "before mlp.gate_proj and up_proj", layer, &pend)) != PLAIT_OK)
            return st;
        m->k->matmul_backward(NULL, gw[LP_GATE], NULL, m->s_dgate, a->ln2, NULL, BT, C, F);
        m->k->matmul_backward(NULL, gw[LP_UP], NULL, dswi, a->ln2, NULL, BT, C, F);
        st = plait_tp_grad_sum_end(m, &pend);
    } else {
        if (gw) m->k->matmul_backward(NULL, gw[LP_UP], NULL, dswi, a->ln2, NULL, BT, C, F);
        st = plait_tp_grad_sum(m, m->s_dln, "before mlp.gate_proj and up_proj", layer);
    }
    if (st != PLAIT_OK) return st;
    if (keep) {
        m->k->copy(keep->dy, dy, (size_t)(BT * C));
        m->k->copy(keep->dfch, dswi, (size_t)(BT * F));
        m->k->copy(keep->dgate, m->s_dgate, (size_t)(BT * F));
        m->k->copy(keep->dln2, m->s_dln, (size_t)(m->R * C));
    }
    return norm_backward(m, dr, dy_rows, gw ? gw[LP_MLP_NORM] : NULL, m->s_dln, a->res2, p[LP_MLP_NORM], a->ln2_rstd,
                         layer);
}

/* The MLP half's weight gradients from what its input half kept. */
static plait_status mlp_weight(plait_model *m, int32_t layer, const block_acts *a, float *const *gw,
                               const block_grads *kept) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    m->k->matmul_backward(NULL, gw[LP_DOWN], NULL, kept->dy, a->swi, NULL, BT, F, C);
    m->k->matmul_backward(NULL, gw[LP_GATE], NULL, kept->dgate, a->ln2, NULL, BT, C, F);
    m->k->matmul_backward(NULL, gw[LP_UP], NULL, kept->dfch, a->ln2, NULL, BT, C, F);
    return norm_backward(m, NULL, NULL, gw[LP_MLP_NORM], kept->dln2, a->res2, NULL, a->ln2_rstd, layer);
}

/* q's, k's and v's weight gradients from their output gradient dqkv (one
 * row of the three a token, as the forward's buffer): one product adding
 * to the stacked gradients, copied back where they were a copy; their
 * biases' likewise, each column's sum over the rows. */
static plait_status qkv_weight(plait_model *m, const block_acts *a, float *const *gw, const float *dqkv) {
    float *g, *gb;
    plait_status st = qkv_stacked(m, gw, &g);
    if (st != PLAIT_OK) return st;
    m->k->sgemm(1, 0, m->Wq, m->C, m->B * m->T, 1.0f, dqkv, m->Wq, a->ln1, m->C, 1.0f, g, m->C);
    unstack(m, gw + LP_Q, m->C, g);
    if ((st = qkv_bias_stacked(m, gw, &gb)) != PLAIT_OK || !gb) return st;
    m->k->bias_backward(gb, dqkv, m->B * m->T, m->Wq);
    unstack(m, gw + LP_QB, 1, gb);
    return PLAIT_OK;
}

/* The attention half's input gradient: dx holds d(res2) on entry, d(x)
 * after; `gw` and `keep` as for mlp_input. */
static plait_status attention_input(plait_model *m, int32_t layer, const block_acts *a, float *const *p,
                                    float *const *gw, const float *x, float *dx, const block_grads *keep) {
    const int64_t BT = m->B * m->T, C = m->C, Wq = m->Wq;
    const float *dres2; /* over every row: gathered under sequence parallelism */
    plait_status st = plait_tp_grad_full(m, dx, &dres2, "after self_attn.o_proj", layer);
    if (st != PLAIT_OK) return st;
    m->k->matmul_backward(m->s_datty, gw ? gw[LP_O] : NULL, NULL, dres2, a->atty, p[LP_O], BT, m->Cl, C);
    if (keep) m->k->copy(keep->dres2, dres2, (size_t)(BT * C));
    if (m->cp > 1) {
        st = plait_ring_attention_backward(m, layer, m->s_dqkv, m->s_datty, a->qkv, a->atty, a->lse, m->NHl, m->NKVl);
        if (st != PLAIT_OK) return st;
    } else
        m->k->attention_gqa_backward(m->s_dqkv, m->att_scratch, m->s_datty, a->qkv, a->atty, a->lse, m->B, m->T, m->NHl,
                                     m->NKVl, m->HS);
    /* the gradient of q and k before their rotation, and their norms' */
    m->k->rope(m->s_dqkv, m->rope_cs, m->B, m->T, Wq, m->NHl + m->NKVl, m->HS, 1);
    if (m->desc->qk_norm) { /* the norms' weight gradients kept for the weight half, or added now */
        float *dw = keep ? keep->dqk_norm : plait_qk_norm_dw(m);
        plait_qk_norm_backward(m, a, p[LP_QN], p[LP_KN], m->s_dqkv, dw);
        if ((st = plait_qk_norm_sum(m, layer, dw)) != PLAIT_OK) return st;
        if (gw) plait_qk_norm_add(m, dw, gw[LP_QN], gw[LP_KN]);
    }
    float *w;
    if ((st = qkv_stacked(m, p, &w)) != PLAIT_OK) return st;
    m->k->sgemm(0, 0, BT, C, Wq, 1.0f, m->s_dqkv, Wq, w, C, 0.0f, m->s_dln, C);
    if (keep) m->k->copy(keep->dqkv, m->s_dqkv, (size_t)(BT * Wq));
    if (gw) { /* the sum travels while the weight gradient is made (tp_overlap) */
        tp_pending pend;
        st = plait_tp_grad_sum_start(m, m->s_dln, "before self_attn.q_proj, k_proj and v_proj", layer, &pend);
        if (st != PLAIT_OK) return st;
        st = qkv_weight(m, a, gw, m->s_dqkv);
        plait_status end = plait_tp_grad_sum_end(m, &pend);
        if (st == PLAIT_OK) st = end;
    } else {
        st = plait_tp_grad_sum(m, m->s_dln, "before self_attn.q_proj, k_proj and v_proj", layer);
    }
    if (st != PLAIT_OK) return st;
    if (keep) m->k->copy(keep->dln1, m->s_dln, (size_t)(m->R * C));
    return norm_backward(m, dx, dx, gw ? gw[LP_ATTN_NORM] : NULL, m->s_dln, x, p[LP_ATTN_NORM], a->ln1_rstd, layer);
}

/* The attention half's weight gradients from what its input half kept. */
static plait_status attention_weight(plait_model *m, int32_t layer, const block_acts *a, float *const *gw,
                                     const float *x, const block_grads *kept) {
    const int64_t BT = m->B * m->T, C = m->C;
    m->k->matmul_backward(NULL, gw[LP_O], NULL, kept->dres2, a->atty, NULL, BT, m->Cl, C);
    if (m->desc->qk_norm) plait_qk_norm_add(m, kept->dqk_norm, gw[LP_QN], gw[LP_KN]);
    plait_status st = qkv_weight(m, a, gw, kept->dqkv);
    if (st != PLAIT_OK) return st;
    return norm_backward(m, NULL, NULL, gw[LP_ATTN_NORM], kept->dln1, x, NULL, a->ln1_rstd, layer);
}

/* One pass (BWD_ALL), or either half of a split backward: the input half
 * keeps in the slot's stash (s->wg) what the weight half reads, and the
 * two give one pass's bits (each product's input and weight gradients
 * from the same operands, in calls whose halves are exact). */
plait_status plait_llama_block_backward(plait_model *m, model_slot *s, int32_t layer, bwd_part part) {
    if (m->bf16) return plait_llama_bf16_block_backward(m, s, layer, part);
    block_acts *a = &s->blocks[layer - 1];
    float *p[LP_ALL], *g[LP_ALL];
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) st = plait_llama_block_tensors(m, PARAM_DATA, layer, p);
    if (st == PLAIT_OK && (part & BWD_WEIGHT)) st = plait_llama_block_tensors(m, PARAM_GRAD, layer, g);
    if (st != PLAIT_OK) return st;
    const float *x = s->bound[layer - 1];
    const block_grads *stash = part == BWD_ALL ? NULL : &s->wg[layer - 1];
    const int sparse = desc_block_sparse(m->desc, layer - 1);
    if (part == BWD_WEIGHT) {
        if (sparse) { /* the experts' gradients (moe.c), then the MLP norm's from its kept output gradient */
            st = plait_moe_backward(m, s, layer, a->ln2, NULL, NULL, BWD_WEIGHT);
            if (st == PLAIT_OK)
                st = norm_backward(m, NULL, NULL, g[LP_MLP_NORM], stash->dln2, a->res2, NULL, a->ln2_rstd, layer);
        } else st = mlp_weight(m, layer, a, g, stash);
        return st != PLAIT_OK ? st : attention_weight(m, layer, a, g, x, stash);
    }
    float *dx = s->gbuf[(layer - 1) & 1], *const *gw = part == BWD_ALL ? g : NULL;
    if (sparse) {
        const float *dy = s->gbuf[layer & 1];
        st = plait_moe_backward(m, s, layer, a->ln2, dy, m->s_dln, part);
        if (st == PLAIT_OK && stash) m->k->copy(stash->dln2, m->s_dln, (size_t)(m->R * m->C));
        if (st == PLAIT_OK)
            st = norm_backward(m, dx, dy, gw ? gw[LP_MLP_NORM] : NULL, m->s_dln, a->res2, p[LP_MLP_NORM], a->ln2_rstd,
                               layer);
    } else st = mlp_input(m, layer, a, p, gw, s->gbuf[layer & 1], dx, stash);
    return st != PLAIT_OK ? st : attention_input(m, layer, a, p, gw, x, dx, stash);
}

/* ---- head ---------------------------------------------------------------- */

plait_status plait_llama_head_forward(plait_model *m, model_slot *s) {
    head_params p;
    plait_status st = plait_model_head_params(m, PARAM_DATA, &p);
    if (st == PLAIT_OK)
        st = norm_forward(m, s->lnf, s->lnf_rstd, s->bound[m->desc->n_layer], p.ln_w, "before lm_head",
                          m->desc->n_layer + 1);
    if (st != PLAIT_OK) return st;
    if ((st = plait_head_logits(m, s, p.w)) != PLAIT_OK) return st;
    return plait_head_loss(m, s);
}

plait_status plait_llama_head_backward(plait_model *m, model_slot *s, bwd_part part) {
    const int64_t C = m->C;
    const int32_t L = m->desc->n_layer;
    head_params p = {0}, g = {0};
    plait_status st = PLAIT_OK;
    if (part & BWD_WEIGHT) st = plait_model_head_params(m, PARAM_GRAD, &g);
    if (st != PLAIT_OK) return st;
    if (part == BWD_WEIGHT) { /* from the logits' gradient and ln_f's output's the input half left */
        if ((st = plait_head_weight_grad(m, s, g.w)) != PLAIT_OK) return st;
        return norm_backward(m, NULL, NULL, g.ln_w, s->head_dln, s->bound[L], NULL, s->lnf_rstd, L + 1);
    }
    if ((st = plait_head_dlogits(m, s)) == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
    if (st != PLAIT_OK) return st;
    /* in one pass (g.w) the weight gradient from the same call */
    if ((st = plait_head_products_backward(m, s, p.w, g.w)) != PLAIT_OK) return st;
    if (part == BWD_INPUT) m->k->copy(s->head_dln, m->s_dln, (size_t)(m->R * C));
    return norm_backward(m, s->gbuf[L & 1], NULL, g.ln_w, m->s_dln, s->bound[L], p.ln_w, s->lnf_rstd, L + 1);
}
