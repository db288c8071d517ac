/*
 * A Llama block under bf16 activations (plait_model.bf16), as
 * llama_layers.c runs it in float32, with what its products read and
 * write stored in bf16 (RMSNorm's outputs, q|k|v, the attention's output,
 * gate|up, SwiGLU's output, and the gradients at each of them) and the
 * weights read from their bf16 copy (model_bf16.c). The residual stream and
 * its gradient, RMSNorm's statistics and weights, the log-sum-exps and
 * every parameter gradient stay float32, as for the GPT (gpt_bf16.c,
 * whose residual products, norm gathers, tp sums and gradient conversion
 * these blocks share).
 *
 * q, k and v are one product: their bf16 weight copies lie side by side
 * (model_bf16.c lays the copies out in parameter order, whole multiples of 8
 * elements where n_embd is, which the grant asks), so one [Wq,C] weight
 * writes a row's [q | k | v] as the attention reads it; likewise gate_proj
 * and up_proj as one [2·Fl,C] product whose rows SwiGLU reads side by side
 * (Megatron-LM's linear_fc1). Their weight gradients come from the same
 * output gradient: in one product where the float32 gradients lie side by
 * side too, else one product a projection, from its columns packed by
 * copy_rows. The rotation runs apart on the bf16 q and k (rope_bf16): the
 * product is cuBLASLt's, whose epilogues have no rotation, and the
 * attention reads q and k in three kernels (forward, dK|dV, dQ), so a
 * rotation on load would be done three times; its inverse on dq and dk
 * rounds them to bf16 a second time.
 *
 * Context parallelism as the float32 blocks, the ring's bf16 block
 * entries in the grouped-query attention's place (ring_attention.h; the
 * rotation at the whole sequence's positions, model.c). Tensor and
 * sequence parallelism and pipeline stages as the float32
 * blocks: the tp collectives and stage boundaries carry the float32
 * residual stream and its gradient, which the transports send as bf16 on
 * a bf16 run. The head runs in bf16 without tensor parallelism (below: the
 * GPT's chunked head), float32 under it (llama_layers.c). A split backward
 * (zero-bubble schedules) runs the same calls in two halves, the input
 * half keeping in bf16 the output gradients the weight half's products
 * and norms read (block_grads_bf16), as gpt_bf16.c's. Under any [model]
 * recompute: selective drops
 * SwiGLU's output and rebuilds it from gate|up with the forward's kernel,
 * full reruns the block up to SwiGLU (recompute.c), each into bf16
 * buffers the blocks share.
 */
#include "device/device.h"
#include "model/model_bodies.h"
#include "model/qk_norm.h"
#include "model/ring_attention.h"

/* The bf16 copy of block `layer`'s parameter lp. */
static const plait_bf16 *copy_of(const plait_model *m, int32_t layer, int lp) {
    return m->wbf[desc_llama_param(m->desc, layer - 1, lp)];
}

/* RMSNorm of this rank's rows of x into `rows` (bf16), and *full: its
 * output over every row the column-parallel product reads. */
static plait_status norm_forward(plait_model *m, plait_bf16 *rows, const plait_bf16 **full, float *rstd, const float *x,
                                 const float *w, const char *where, int32_t layer) {
    m->k->rmsnorm_forward_bf16(rows, rstd, x, w, m->R, m->C, m->desc->norm_eps);
    return plait_bf16_norm_full(m, rows, full, where, layer);
}

/* The weight gradients of n projections stacked in one product: dout
 * [BT, W] holds projection i's widths[i] columns after those of the
 * ones before it; grads[i] += its columns' gradient against inp [BT,C],
 * and bgrads[i] (bgrads NULL: none) += its biases', each column's sum over
 * the rows. */
static void stacked_weight_grads(plait_model *m, const plait_bf16 *dout, int64_t W, const int64_t *widths, int n,
                                 const plait_bf16 *inp, float *const *grads, float *const *bgrads) {
    const int64_t BT = m->B * m->T, C = m->C;
    int side_by_side = 1;
    for (int i = 1; i < n; i++) {
        side_by_side &= grads[i] == grads[i - 1] + widths[i - 1] * C;
        if (bgrads) side_by_side &= bgrads[i] == bgrads[i - 1] + widths[i - 1];
    }
    if (side_by_side) {
        m->k->matmul_backward_bf16(NULL, grads[0], bgrads ? bgrads[0] : NULL, dout, inp, NULL, BT, C, W);
        return;
    }
    /* bf16 pairs moved as floats: every width and offset is even (HS is) */
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        m->k->copy_rows((float *)(void *)m->sb.pack, widths[i] / 2, (const float *)(const void *)(dout + at), W / 2, BT,
                        widths[i] / 2);
        m->k->matmul_backward_bf16(NULL, grads[i], bgrads ? bgrads[i] : NULL, m->sb.pack, inp, NULL, BT, C, widths[i]);
        at += widths[i];
    }
}

/* The bf16 copies of q's, k's and v's biases stacked [Wq]: the copies
 * themselves where they lie one after another (widths that are whole
 * multiples of 8), else stacked in m->qkv_bias_pack; NULL without [model]
 * qkv_bias. */
static plait_status qkv_bias_copy(plait_model *m, int32_t layer, const plait_bf16 **out) {
    *out = NULL;
    if (!m->desc->qkv_bias) return PLAIT_OK;
    const plait_bf16 *b[3] = {copy_of(m, layer, LP_QB), copy_of(m, layer, LP_KB), copy_of(m, layer, LP_VB)};
    const int64_t q = m->NHl * m->HS, kv = m->NKVl * m->HS;
    *out = b[0];
    if (b[1] == b[0] + q && b[2] == b[1] + kv) return PLAIT_OK;
    if (!m->qkv_bias_pack && !(m->qkv_bias_pack = plait_device_alloc((size_t)m->Wq * sizeof(float), "activations")))
        return PLAIT_ERR_NO_MEMORY;
    /* bf16 pairs moved as floats: every width is even (HS is) */
    float *pack = m->qkv_bias_pack;
    m->k->copy(pack, (const float *)(const void *)b[0], (size_t)(q / 2));
    m->k->copy(pack + q / 2, (const float *)(const void *)b[1], (size_t)(kv / 2));
    m->k->copy(pack + q / 2 + kv / 2, (const float *)(const void *)b[2], (size_t)(kv / 2));
    *out = (const plait_bf16 *)(const void *)pack;
    return PLAIT_OK;
}

plait_status plait_llama_bf16_block_forward_act(plait_model *m, model_slot *s, int32_t layer) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    const float *x = s->bound[layer - 1];
    block_acts *a = &s->blocks[layer - 1];
    float *p[LP_ALL];
    plait_status st = plait_llama_block_tensors(m, PARAM_DATA, layer, p);
    const plait_bf16 *ln;
    if (st == PLAIT_OK)
        st = norm_forward(m, a->bf.ln1, &ln, a->ln1_rstd, x, p[LP_ATTN_NORM],
                          "before self_attn.q_proj, k_proj and v_proj", layer);
    const plait_bf16 *bias;
    if (st != PLAIT_OK || (st = qkv_bias_copy(m, layer, &bias)) != PLAIT_OK) return st;
    m->k->matmul_forward_bf16(a->bf.qkv, ln, copy_of(m, layer, LP_Q), bias, BT, C, m->Wq);
    if (m->desc->qk_norm) plait_qk_norm_forward(m, a, p[LP_QN], p[LP_KN]);
    m->k->rope_bf16(a->bf.qkv, m->rope_cs, m->B, m->T, m->Wq, m->NHl + m->NKVl, m->HS, 0);
    if (m->cp > 1) /* over the cp ring, the key/value heads alone travelling (ring_attention.h) */
        st = plait_ring_attention_forward_bf16(m, layer, a->bf.atty, a->lse, a->bf.qkv, m->NHl, m->NKVl);
    else
        m->k->attention_gqa_forward_bf16(a->bf.atty, a->lse, m->att_scratch, a->bf.qkv, m->B, m->T, m->NHl, m->NKVl,
                                         m->HS);
    if (st == PLAIT_OK)
        st = plait_bf16_row_product(m, a->res2, x, a->bf.atty, copy_of(m, layer, LP_O), NULL, m->Cl,
                                    "after self_attn.o_proj", layer);
    if (desc_block_sparse(m->desc, layer - 1)) return st; /* its MLP half: moe_bf16.c */
    if (st == PLAIT_OK)
        st = norm_forward(m, a->bf.ln2, &ln, a->ln2_rstd, a->res2, p[LP_MLP_NORM], "before mlp.gate_proj and up_proj",
                          layer);
    if (st != PLAIT_OK) return st;
    m->k->matmul_forward_bf16(a->bf.gu, ln, copy_of(m, layer, LP_GATE), NULL, BT, C, 2 * F);
    m->k->swiglu_forward_bf16(a->bf.swi, a->bf.gu, BT, F);
    return PLAIT_OK;
}

plait_status plait_llama_bf16_block_forward(plait_model *m, model_slot *s, int32_t layer) {
    plait_status st = plait_llama_bf16_block_forward_act(m, s, layer);
    const block_acts *a = &s->blocks[layer - 1];
    if (st == PLAIT_OK && desc_block_sparse(m->desc, layer - 1))
        return plait_moe_bf16_half_forward(m, s, layer, a->res2, s->bound[layer]);
    return st != PLAIT_OK ? st
                          : plait_bf16_row_product(m, s->bound[layer], a->res2, a->bf.swi, copy_of(m, layer, LP_DOWN),
                                                   NULL, m->Fl, "after mlp.down_proj", layer);
}

/* RMSNorm's backward over this rank's rows from its output gradient dout:
 * dx = dres + its input gradient (dx NULL: none), its weight's gradient
 * added to dw (NULL: none). */
static plait_status norm_backward(plait_model *m, float *dx, const float *dres, float *dw, const plait_bf16 *dout,
                                  const float *x, const float *w, const float *rstd, int32_t layer) {
    norm_grads ng = plait_tp_norm_grads(m, dw, NULL);
    m->k->rmsnorm_backward_bf16(dx, dres, ng.w, dout, x, w, rstd, m->R, m->C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

/* Under a split backward's input half: n bf16 elements kept for the
 * weight half (keep NULL: one pass, nothing kept). */
static void keep(plait_model *m, plait_bf16 *stash, const plait_bf16 *from, int64_t n) {
    if (stash) m->k->copy((float *)(void *)stash, (const float *)(const void *)from, (size_t)(n + 1) / 2);
}

/* The MLP half: d(res2) into dx from dy (`part` of it: the input half
 * keeps in `kept` the output gradients the weight half reads; kept NULL
 * in one pass). */
static plait_status mlp_backward(plait_model *m, int32_t layer, const block_acts *a, float *const *p, float *const *g,
                                 const float *dy, float *dx, bwd_part part, block_grads_bf16 *kept) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    const plait_bf16 *dres = kept ? kept->dy : NULL, *dgu = m->sb.dfc, *ln;
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) {
        m->dres_of = NULL; /* converted afresh: no norm backward here writes the copy */
        if ((st = plait_bf16_dres_full(m, dy, &dres, "after mlp.down_proj", layer)) != PLAIT_OK) return st;
        /* in one pass, with tp_overlap, the norm's output is gathered while
         * down's and the input gradients are made, and gate|up's weight
         * gradients are made while the input gradient's sum travels (the
         * gather done first: it shares the sum's buffers) */
        const int apart = !kept && m->tp_overlap;
        tp_pending gather = {0};
        if (apart &&
            (st = plait_bf16_norm_full_start(m, a->bf.ln2, 1, "before mlp.gate_proj's and up_proj's weight gradients",
                                             layer, &gather)) != PLAIT_OK)
            return st;
        m->k->matmul_backward_bf16(m->sb.dswi, kept ? NULL : g[LP_DOWN], NULL, dres, a->bf.swi,
                                   copy_of(m, layer, LP_DOWN), BT, F, C);
        m->k->swiglu_backward_bf16(m->sb.dfc, m->sb.dswi, a->bf.gu, BT, F);
        m->k->matmul_backward_bf16(m->sb.dln, NULL, NULL, m->sb.dfc, a->bf.ln2, copy_of(m, layer, LP_GATE), BT, C,
                                   2 * F);
        if (kept) keep(m, kept->dy, dres, BT * C);
        keep(m, kept ? kept->dfc : NULL, m->sb.dfc, BT * 2 * F);
        if (apart && (st = plait_bf16_norm_full_end(m, &gather, &ln)) != PLAIT_OK) return st;
        tp_pending pend;
        if ((st = plait_bf16_input_grad_sum_start(m, apart, "before mlp.gate_proj and up_proj", layer, &pend)) !=
            PLAIT_OK)
            return st;
        const int64_t widths[2] = {F, F};
        if (apart) stacked_weight_grads(m, dgu, 2 * F, widths, 2, ln, g + LP_GATE, NULL);
        if ((st = plait_bf16_input_grad_sum_end(m, &pend)) != PLAIT_OK) return st;
        keep(m, kept ? kept->dln2 : NULL, m->sb.dln, m->R * C);
        if (apart)
            return norm_backward(m, dx, dy, g[LP_MLP_NORM], m->sb.dln, a->res2, p[LP_MLP_NORM], a->ln2_rstd, layer);
        st = norm_backward(m, dx, dy, kept ? NULL : g[LP_MLP_NORM], m->sb.dln, a->res2, p[LP_MLP_NORM], a->ln2_rstd,
                           layer);
        if (st != PLAIT_OK || part == BWD_INPUT) return st;
    } else { /* the weight half, from what the input half kept */
        dgu = kept->dfc;
        m->k->matmul_backward_bf16(NULL, g[LP_DOWN], NULL, dres, a->bf.swi, NULL, BT, F, C);
        st = norm_backward(m, NULL, NULL, g[LP_MLP_NORM], kept->dln2, a->res2, NULL, a->ln2_rstd, layer);
        if (st != PLAIT_OK) return st;
    }
    /* gate|up's weight gradients read the norm's output over every row */
    if ((st = plait_bf16_norm_full(m, a->bf.ln2, &ln, "before mlp.gate_proj's and up_proj's weight gradients",
                                   layer)) != PLAIT_OK)
        return st;
    const int64_t widths[2] = {F, F};
    stacked_weight_grads(m, dgu, 2 * F, widths, 2, ln, g + LP_GATE, NULL);
    return PLAIT_OK;
}

/* The attention half: dx holds d(res2) on entry, d(x) after (`part` and
 * `kept` as for mlp_backward); under [model] qk_norm the norms' weight
 * gradients go through dwn (qk_norm.h), kept there between a split one's
 * halves. */
static plait_status attention_backward(plait_model *m, int32_t layer, const block_acts *a, float *const *p,
                                       float *const *g, const float *x, float *dx, bwd_part part,
                                       block_grads_bf16 *kept, float *dwn) {
    const int64_t BT = m->B * m->T, C = m->C, Wq = m->Wq;
    const plait_bf16 *dres = kept ? kept->dres2 : NULL, *dqkv = m->sb.dqkv, *ln;
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) {
        m->dres_of = NULL;
        if ((st = plait_bf16_dres_full(m, dx, &dres, "after self_attn.o_proj", layer)) != PLAIT_OK) return st;
        /* as the MLP half's: the norm's output gathered while o_proj's, the
         * attention's and the input gradients are made, q|k|v's weight
         * gradients beside the sum */
        const int apart = !kept && m->tp_overlap;
        tp_pending gather = {0};
        if (apart &&
            (st = plait_bf16_norm_full_start(m, a->bf.ln1, 1, "before q_proj's, k_proj's and v_proj's weight gradients",
                                             layer, &gather)) != PLAIT_OK)
            return st;
        m->k->matmul_backward_bf16(m->sb.datty, kept ? NULL : g[LP_O], NULL, dres, a->bf.atty, copy_of(m, layer, LP_O),
                                   BT, m->Cl, C);
        if (m->cp > 1)
            st = plait_ring_attention_backward_bf16(m, layer, m->sb.dqkv, m->sb.datty, a->bf.qkv, a->bf.atty, a->lse,
                                                    m->NHl, m->NKVl);
        else
            m->k->attention_gqa_backward_bf16(m->sb.dqkv, m->att_scratch, m->sb.datty, a->bf.qkv, a->bf.atty, a->lse,
                                              m->B, m->T, m->NHl, m->NKVl, m->HS);
        if (st != PLAIT_OK) {
            if (apart) (void)plait_bf16_norm_full_end(m, &gather, &ln); /* the request finished; st says why */
            return st;
        }
        /* the gradient of q and k before their rotation, and their norms' */
        m->k->rope_bf16(m->sb.dqkv, m->rope_cs, m->B, m->T, Wq, m->NHl + m->NKVl, m->HS, 1);
        if (dwn) plait_qk_norm_backward(m, a, p[LP_QN], p[LP_KN], m->sb.dqkv, dwn);
        m->k->matmul_backward_bf16(m->sb.dln, NULL, NULL, m->sb.dqkv, a->bf.ln1, copy_of(m, layer, LP_Q), BT, C, Wq);
        if (kept) keep(m, kept->dres2, dres, BT * C);
        keep(m, kept ? kept->dqkv : NULL, m->sb.dqkv, BT * Wq);
        if (apart && (st = plait_bf16_norm_full_end(m, &gather, &ln)) != PLAIT_OK) return st;
        if (dwn) { /* summed once no gather is in flight */
            if ((st = plait_qk_norm_sum(m, layer, dwn)) != PLAIT_OK) return st;
            if (!kept) plait_qk_norm_add(m, dwn, g[LP_QN], g[LP_KN]);
        }
        tp_pending pend;
        if ((st = plait_bf16_input_grad_sum_start(m, apart, "before self_attn.q_proj, k_proj and v_proj", layer,
                                                  &pend)) != PLAIT_OK)
            return st;
        const int64_t kv = m->NKVl * m->HS, widths[3] = {m->Cl, kv, kv};
        if (apart) stacked_weight_grads(m, dqkv, Wq, widths, 3, ln, g + LP_Q, g[LP_QB] ? g + LP_QB : NULL);
        if ((st = plait_bf16_input_grad_sum_end(m, &pend)) != PLAIT_OK) return st;
        keep(m, kept ? kept->dln1 : NULL, m->sb.dln, m->R * C);
        if (apart) return norm_backward(m, dx, dx, g[LP_ATTN_NORM], m->sb.dln, x, p[LP_ATTN_NORM], a->ln1_rstd, layer);
        st = norm_backward(m, dx, dx, kept ? NULL : g[LP_ATTN_NORM], m->sb.dln, x, p[LP_ATTN_NORM], a->ln1_rstd, layer);
        if (st != PLAIT_OK || part == BWD_INPUT) return st;
    } else { /* the weight half, from what the input half kept */
        dqkv = kept->dqkv;
        m->k->matmul_backward_bf16(NULL, g[LP_O], NULL, dres, a->bf.atty, NULL, BT, m->Cl, C);
        if (dwn) plait_qk_norm_add(m, dwn, g[LP_QN], g[LP_KN]);
        st = norm_backward(m, NULL, NULL, g[LP_ATTN_NORM], kept->dln1, x, NULL, a->ln1_rstd, layer);
        if (st != PLAIT_OK) return st;
    }
    if ((st = plait_bf16_norm_full(m, a->bf.ln1, &ln, "before q_proj's, k_proj's and v_proj's weight gradients",
                                   layer)) != PLAIT_OK)
        return st;
    const int64_t kv = m->NKVl * m->HS, widths[3] = {m->Cl, kv, kv};
    stacked_weight_grads(m, dqkv, Wq, widths, 3, ln, g + LP_Q, g[LP_QB] ? g + LP_QB : NULL);
    return PLAIT_OK;
}

plait_status plait_llama_bf16_block_backward(plait_model *m, model_slot *s, int32_t layer, bwd_part part) {
    const block_acts *a = &s->blocks[layer - 1];
    float *p[LP_ALL] = {0}, *g[LP_ALL] = {0};
    plait_status st = (part & BWD_INPUT) ? plait_llama_block_tensors(m, PARAM_DATA, layer, p) : PLAIT_OK;
    if (st == PLAIT_OK && (part & BWD_WEIGHT)) st = plait_llama_block_tensors(m, PARAM_GRAD, layer, g);
    if (st != PLAIT_OK) return st;
    block_grads_bf16 *kept = part == BWD_ALL ? NULL : &s->wg[layer - 1].bf;
    float *dx = s->gbuf[(layer - 1) & 1];
    float *dwn = !m->desc->qk_norm ? NULL : kept ? s->wg[layer - 1].dqk_norm : plait_qk_norm_dw(m);
    st = desc_block_sparse(m->desc, layer - 1) /* its float32 norm gradient kept in block_grads.dln2 */
             ? plait_moe_bf16_half_backward(m, s, layer, a->res2, s->gbuf[layer & 1], dx, part,
                                            part == BWD_ALL ? NULL : &s->wg[layer - 1])
             : mlp_backward(m, layer, a, p, g, s->gbuf[layer & 1], dx, part, kept);
    return st != PLAIT_OK ? st : attention_backward(m, layer, a, p, g, s->bound[layer - 1], dx, part, kept, dwn);
}

/* ---- the head ------------------------------------------------------------
 * Without tensor parallelism the head runs in bf16 as the GPT's does
 * (gpt_bf16.c, "the head"): RMSNorm's bf16 output, then lm_head's products
 * and the fused loss a chunk of rows at a time, the logits never whole;
 * the slot keeps the norm's output gradient and lm_head's weight gradient
 * for the backward. */

plait_status plait_llama_bf16_head_forward(plait_model *m, model_slot *s) {
    head_params p;
    plait_status st = plait_bf16_head_begin(m, s);
    if (st == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
    if (st != PLAIT_OK) return st;
    m->k->rmsnorm_forward_bf16(m->head_lnf, s->lnf_rstd, s->bound[m->desc->n_layer], p.ln_w, m->B * m->T, m->C,
                               m->desc->norm_eps);
    plait_bf16_head_chunks(m, s);
    return PLAIT_OK;
}

/* lm_head's gradient from what the forward left, and RMSNorm's backward
 * into the slot's gradient buffer; a split backward's input half makes
 * d(input), its weight half the parameters' gradients. */
plait_status plait_llama_bf16_head_backward(plait_model *m, model_slot *s, bwd_part part) {
    const int32_t L = m->desc->n_layer;
    const float *x = s->bound[L];
    head_params p = {0}, g = {0};
    plait_status st = PLAIT_OK;
    m->dres_of = NULL; /* it writes a gradient sb.dres may have stood for */
    if (part & BWD_INPUT) {
        if ((st = plait_bf16_head_backward_check(s)) == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
    }
    if (st == PLAIT_OK && (part & BWD_WEIGHT)) st = plait_model_head_params(m, PARAM_GRAD, &g);
    if (st != PLAIT_OK) return st;
    if (part & BWD_WEIGHT) m->k->axpy(g.w, s->head_dw, (size_t)(m->Vl * m->C), 1.0f);
    if (part == BWD_WEIGHT) return norm_backward(m, NULL, NULL, g.ln_w, s->dlnf_bf, x, NULL, s->lnf_rstd, L + 1);
    s->has_dlogits = 0;
    return norm_backward(m, s->gbuf[L & 1], NULL, g.ln_w, s->dlnf_bf, x, p.ln_w, s->lnf_rstd, L + 1);
}
