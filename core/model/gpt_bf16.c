/*
 * The GPT's layer bodies under bf16 activations (plait_model.bf16): the
 * attention half, the MLP half and the head, as gpt_layers.c and mlp.c
 * run them, with what the products read and write stored in bf16 and the
 * weights read from their bf16 copy (model_bf16.c). The residual stream and its
 * gradient stay float32: the products that end a half add into it
 * (matmul_forward_residual_bf16), LayerNorm reads it and writes bf16, and
 * a product that reads its gradient reads a bf16 copy in the scratch
 * sb.dres, which both of its gradients read: written by the LayerNorm
 * backward that made the gradient where the table has
 * layernorm_backward_fused_bf16_copy (m->dres_of says whose copy sb.dres
 * holds), else made by to_bf16 (a read and a write of the gradient more
 * per block half).
 * Only the layouts model_bf16.c grants bf16 come here: the fused kernels (under
 * context parallelism the ring's bf16 block entries in the fused
 * attention's place, ring_attention.h), under any [model] recompute: what it drops is
 * rebuilt before a block's backward (recompute.c) by these forwards, into
 * bf16 buffers the blocks share. A split backward (zero-bubble schedules)
 * runs the same calls in two halves: the input half makes every input
 * gradient, the products with dweight NULL and the LayerNorms with no
 * parameter gradients, and keeps the output gradients the parameters'
 * read in bf16 (block_grads_bf16); the weight half makes every parameter
 * gradient from those, the products with dinp NULL, which the table's
 * contract gives the bits of the one call (tests/device/
 * cases_bf16_products.c checks it); see layernorm_param_grads for the
 * LayerNorms'. Selective drops
 * GELU's output alone (the fused attention keeps no probabilities), so
 * its forward runs GELU apart with the kernel that rebuilds it; full
 * reruns the block's forward up to the GELU as the forward ran it.
 */
#include "model/model_bodies.h"
#include "model/ring_attention.h"
#include "runtime/error.h"

/* ---- tensor parallelism ---------------------------------------------------
 * Under tensor parallelism, with or without sequence parallelism
 * (tp_conjugates.c), the blocks keep what their products read and write in
 * bf16 as one rank does, and hand the tp group's collectives float32, as
 * gpt_layers.c does (the tp plugin sends them as bf16 on a bf16 run): a
 * norm's output, kept in bf16 on this rank's rows under sequence
 * parallelism, is widened, all-gathered in float32 and rounded to bf16
 * again, exactly, before its product in the forward and before the
 * product's weight gradient in the backward; a row-parallel product writes its partial sums in
 * float32 (matmul_forward_residual_bf16 without a residual), summed over
 * the group before the residual and the bias are added; a column-parallel
 * product's input gradient, this rank's partial sums in bf16, is widened
 * to float32 exactly (plait_tp_widen) and summed before its norm's
 * backward reads it in bf16 again. The head's loss stays float32 there, its products bf16
 * (tp_head_bf16.c). */

/* A block norm's bf16 output over every row the column-parallel product
 * reads, from the rows the slot keeps: `rows` itself, or under sequence
 * parallelism those R rows widened to float32 (exact), all-gathered and
 * rounded back (exact again) into sp_ln_bf, the buffer every block
 * shares: in the forward, and again before the product's weight
 * gradient, the same bits both times. The identities that widen reads
 * live in the backward's scratch, got here in the forward (a forward-only
 * model under sequence parallelism allocates it too). */
plait_status plait_bf16_norm_full(plait_model *m, const plait_bf16 *rows, const plait_bf16 **full, const char *where,
                                  int32_t layer) {
    tp_pending pend;
    plait_status st = plait_bf16_norm_full_start(m, rows, 0, where, layer, &pend);
    return st == PLAIT_OK ? plait_bf16_norm_full_end(m, &pend, full) : st;
}

plait_status plait_bf16_norm_full_start(plait_model *m, const plait_bf16 *rows, int overlap, const char *where,
                                        int32_t layer, tp_pending *p) {
    *p = (tp_pending){.where = where, .layer = layer, .rows = rows};
    if (!m->sp) return PLAIT_OK;
    plait_status st = plait_model_scratch_get(m);
    if (st != PLAIT_OK) return st;
    plait_tp_widen(m, m->sp_local, rows, m->R * m->C);
    return plait_tp_gather_start(m, m->sp_local, m->sp_full, overlap, where, layer, p);
}

plait_status plait_bf16_norm_full_end(plait_model *m, tp_pending *p, const plait_bf16 **full) {
    *full = p->rows;
    if (!m->sp) return PLAIT_OK;
    plait_status st = plait_tp_gather_end(m, p);
    if (st != PLAIT_OK) return st;
    m->k->to_bf16(m->sp_ln_bf, m->sp_full, (size_t)(m->B * m->T * m->C));
    *full = m->sp_ln_bf;
    return PLAIT_OK;
}

/* A norm's output in bf16 on this rank's rows (out), the same bits as
 * without sequence parallelism; *full as plait_bf16_norm_full gives it. */
static plait_status norm_forward(plait_model *m, plait_bf16 *out, const plait_bf16 **full, float *mean, float *rstd,
                                 const float *x, const float *w, const float *b, const char *where, int32_t layer) {
    m->k->layernorm_forward_bf16(out, mean, rstd, x, w, b, m->R, m->C);
    return plait_bf16_norm_full(m, out, full, where, layer);
}

/* out (this rank's rows of the residual stream) = res + inp · wᵀ + bias,
 * K inputs a row: one product, or under tensor parallelism the float32
 * partial sums summed over the group, then the residual and bias added. */
plait_status plait_bf16_row_product(plait_model *m, float *out, const float *res, const plait_bf16 *inp,
                                    const plait_bf16 *w, const float *bias, int64_t K, const char *where,
                                    int32_t layer) {
    const int64_t BT = m->B * m->T, C = m->C;
    if (!m->tp_ops) {
        m->k->matmul_forward_residual_bf16(out, res, inp, w, bias, BT, K, C);
        return PLAIT_OK;
    }
    float *part = plait_tp_partial(m, out);
    m->k->matmul_forward_residual_bf16(part, NULL, inp, w, NULL, BT, K, C);
    plait_status st = plait_tp_sum(m, part, out, where, layer);
    if (st == PLAIT_OK) m->k->add_bias_residual(out, res, bias, m->R, C);
    return st;
}

/* sb.dln, a column-parallel product's input gradient: under tensor
 * parallelism this rank's partial sums, summed over the group into its R
 * rows at sb.dln's start (float32 in s_dln on the way). */
plait_status plait_bf16_input_grad_sum(plait_model *m, const char *where, int32_t layer) {
    tp_pending pend;
    plait_status st = plait_bf16_input_grad_sum_start(m, 0, where, layer, &pend);
    return st == PLAIT_OK ? plait_bf16_input_grad_sum_end(m, &pend) : st;
}

plait_status plait_bf16_input_grad_sum_start(plait_model *m, int overlap, const char *where, int32_t layer,
                                             tp_pending *p) {
    *p = (tp_pending){0};
    if (!m->tp_ops) return PLAIT_OK;
    plait_tp_widen(m, m->s_dln, m->sb.dln, m->B * m->T * m->C);
    return overlap ? plait_tp_grad_sum_start(m, m->s_dln, where, layer, p)
                   : plait_tp_grad_sum(m, m->s_dln, where, layer);
}

plait_status plait_bf16_input_grad_sum_end(plait_model *m, tp_pending *p) {
    if (!m->tp_ops) return PLAIT_OK;
    plait_status st = plait_tp_grad_sum_end(m, p);
    if (st == PLAIT_OK) m->k->to_bf16(m->sb.dln, m->s_dln, (size_t)(m->R * m->C));
    return st;
}

/* sb.dres as the bf16 copy of the residual stream's gradient g: the copy
 * the LayerNorm backward that wrote g left there, or one made now. */
static const plait_bf16 *dres_bf16(plait_model *m, const float *g) {
    if (m->dres_of != g) {
        m->k->to_bf16(m->sb.dres, g, (size_t)(m->B * m->T * m->C));
        m->dres_of = g;
    }
    return m->sb.dres;
}

/* The residual stream's gradient over every row a row-parallel product
 * reads, in bf16: dres_bf16 of g, or under sequence parallelism of g's
 * rows all-gathered first (converted every time: sp_full's contents
 * change under one address). */
plait_status plait_bf16_dres_full(plait_model *m, const float *g, const plait_bf16 **out, const char *where,
                                  int32_t layer) {
    if (!m->sp) {
        *out = dres_bf16(m, g);
        return PLAIT_OK;
    }
    const float *full = NULL;
    plait_status st = plait_tp_grad_full(m, g, &full, where, layer);
    if (st != PLAIT_OK) return st;
    m->k->to_bf16(m->sb.dres, full, (size_t)(m->B * m->T * m->C));
    m->dres_of = NULL;
    *out = m->sb.dres;
    return PLAIT_OK;
}

/* LayerNorm's fused backward into the residual stream's gradient dinp
 * (from dres, which may be dinp), over this rank's rows; with `copy`, its
 * bf16 copy into sb.dres where the table can write both at once (the next
 * block half's products read it; not under sequence parallelism, whose
 * products read gathered rows): dres_bf16 then finds it there. The
 * parameter gradients summed over the tp group under sequence
 * parallelism (plait_tp_norm_grads). */
static plait_status layernorm_backward_into_stream(plait_model *m, int32_t layer, int copy, float *dinp,
                                                   const float *dres, float *dweight, float *dbias,
                                                   const plait_bf16 *dout, const float *inp, const float *weight,
                                                   const float *mean, const float *rstd) {
    const int64_t R = m->R, C = m->C;
    norm_grads ng = plait_tp_norm_grads(m, dweight, dbias);
    if (copy && !m->sp && PLAIT_KERNELS_HAS_LAYERNORM_BF16_COPY(m->k)) {
        m->k->layernorm_backward_fused_bf16_copy(dinp, m->sb.dres, dres, ng.w, ng.b, dout, inp, weight, mean, rstd, R,
                                                 C);
        m->dres_of = dinp;
    } else {
        m->k->layernorm_backward_fused_bf16(dinp, dres, ng.w, ng.b, dout, inp, weight, mean, rstd, R, C);
        if (m->dres_of == dinp) m->dres_of = NULL;
    }
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

/* A LayerNorm's parameter gradients alone (a split backward's weight
 * half), from the entry the one pass makes them with, for its bits. That
 * entry writes an input gradient as well: dropped here into idle scratch
 * (sb.dfc, BT x 4C bf16, holds BT x C floats: the weight half computes no
 * product's input gradient; under tensor parallelism, where sb.dfc holds
 * BT x 4C/tp, s_dln). The LayerNorm's weight scales that input gradient
 * only, never the parameters' sums, so zeros stand in for it (the
 * attention scratch's first C floats, or under tensor parallelism the C
 * after the identities): the weight half reads no parameter. Over this
 * rank's rows, summed over the tp group under sequence parallelism. */
static plait_status layernorm_param_grads(plait_model *m, int32_t layer, float *dweight, float *dbias,
                                          const plait_bf16 *dout, const float *inp, const float *mean,
                                          const float *rstd) {
    const int64_t C = m->C;
    float *zeros = m->unit ? (float *)(void *)(m->unit + PLAIT_UNIT_BF16) : m->s_datt;
    float *drop = m->unit ? m->s_dln : (float *)(void *)m->sb.dfc;
    m->k->zero(zeros, (size_t)C);
    norm_grads ng = plait_tp_norm_grads(m, dweight, dbias);
    m->k->layernorm_backward_fused_bf16(drop, NULL, ng.w, ng.b, dout, inp, zeros, mean, rstd, m->R, C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

/* 1 if the input gradient of global layer `layer`'s LayerNorm backward
 * is read next by a block of this rank (its copy pays): not below block 1
 * (the embedding reads float32), nor where the layer below is on another
 * stage (plait_model_boundary_grad hands the gradient out, dropping the
 * copy). */
static int copy_read_below(const plait_model *m, int32_t layer) { return layer > 1 && m->local_layer[layer - 1]; }

/* Under a split backward's input half: n bf16 elements kept for the
 * weight half from where the one-pass calls left them (no copy where the
 * stash is that buffer). */
static void keep_bf16(plait_model *m, plait_bf16 *stash, const plait_bf16 *from, int64_t n) {
    if (stash != from) m->k->copy((float *)(void *)stash, (const float *)(const void *)from, (size_t)(n + 1) / 2);
}

/* The stash of block `layer`'s weight half: NULL in one pass. */
static block_grads_bf16 *stash_of(model_slot *s, int32_t layer, bwd_part part) {
    return part == BWD_ALL ? NULL : &s->wg[layer - 1].bf;
}

/* A block half's parameters for `part` of its backward: their gradients,
 * and their data unless the weight half (which reads no parameter: p is
 * then zeroed). */
static plait_status half_for(plait_model *m, int32_t layer, int first_bp, bwd_part part, half_params *p,
                             half_params *dp) {
    *p = (half_params){0};
    plait_status st = part & BWD_INPUT ? plait_model_half_params(m, PARAM_DATA, layer, first_bp, p) : PLAIT_OK;
    return st != PLAIT_OK ? st : plait_model_half_params(m, PARAM_GRAD, layer, first_bp, dp);
}

plait_status plait_bf16_attention_forward(plait_model *m, model_slot *s, int32_t layer, const float *x) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl;
    block_acts *a = &s->blocks[layer - 1];
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN1_W, &p);
    if (st != PLAIT_OK) return st;
    const half_bf16 w = plait_model_half_bf16(m, layer, BP_LN1_W);
    const plait_bf16 *ln;
    st = norm_forward(m, a->bf.ln1, &ln, a->ln1_mean, a->ln1_rstd, x, p.ln_w, p.ln_b, "before attn.c_attn", layer);
    if (st != PLAIT_OK) return st;
    m->k->matmul_forward_bf16(a->bf.qkv, ln, w.in_w, w.in_b, BT, C, 3 * Cl);
    if (m->cp > 1) /* over the cp ring (ring_attention.h) */
        st = plait_ring_attention_forward_bf16(m, layer, a->bf.atty, a->lse, a->bf.qkv, m->NHl, m->NHl);
    else m->k->attention_fused_forward_bf16(a->bf.atty, a->lse, m->att_scratch, a->bf.qkv, m->B, m->T, m->NHl, m->HS);
    if (st != PLAIT_OK) return st;
    return plait_bf16_row_product(m, a->res2, x, a->bf.atty, w.out_w, p.out_b, Cl, "after attn.c_proj", layer);
}

/* c_attn's backward: dln (NULL: none) from dqkv, with its parameter
 * gradients; the key bias's stays exactly zero (gpt_layers.c says why):
 * its accumulator saved around the product in the attention scratch. */
static void attention_in_backward(plait_model *m, plait_bf16 *dln, const half_params *dp, const plait_bf16 *dqkv,
                                  const plait_bf16 *ln1, const plait_bf16 *w_in) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl;
    m->k->copy(m->s_datt, dp->in_b + Cl, (size_t)Cl);
    m->k->matmul_backward_bf16(dln, dp->in_w, dp->in_b, dqkv, ln1, w_in, BT, C, 3 * Cl);
    m->k->copy(dp->in_b + Cl, m->s_datt, (size_t)Cl);
}

/* On entry dx holds d(res2); leaves d(x) there and adds the half's
 * parameter gradients (a split backward's input half: its LayerNorm's;
 * its weight half: its products', leaving dx alone). */
plait_status plait_bf16_attention_backward(plait_model *m, model_slot *s, int32_t layer, const float *x, float *dx,
                                           bwd_part part) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl, R = m->R;
    block_acts *a = &s->blocks[layer - 1];
    block_grads_bf16 *g = stash_of(s, layer, part);
    half_params p, dp;
    plait_status st = half_for(m, layer, BP_LN1_W, part, &p, &dp);
    if (st != PLAIT_OK) return st;
    const half_bf16 w = plait_model_half_bf16(m, layer, BP_LN1_W);
    /* c_attn's weight gradient reads ln_1's output over every row (the
     * input gradient alone reads none of it) */
    const plait_bf16 *ln = m->sp ? m->sp_ln_bf : a->bf.ln1;
    if (part == BWD_WEIGHT) { /* from what the input half kept */
        if ((st = plait_bf16_norm_full(m, a->bf.ln1, &ln, "before attn.c_attn's weight gradient", layer)) != PLAIT_OK)
            return st;
        m->k->matmul_backward_bf16(NULL, dp.out_w, dp.out_b, g->dres2, a->bf.atty, NULL, BT, Cl, C);
        attention_in_backward(m, NULL, &dp, g->dqkv, ln, NULL);
        return layernorm_param_grads(m, layer, dp.ln_w, dp.ln_b, g->dln1, x, a->ln1_mean, a->ln1_rstd);
    }
    const plait_bf16 *dres = NULL;
    if ((st = plait_bf16_dres_full(m, dx, &dres, "after attn.c_proj", layer)) != PLAIT_OK) return st;
    /* in one pass, gathered while c_proj's and the attention's gradients
     * are made where tp_overlap (dres is in sb.dres: sp_full is free) */
    tp_pending gather = {0};
    if (!g && (st = plait_bf16_norm_full_start(m, a->bf.ln1, m->tp_overlap, "before attn.c_attn's weight gradient",
                                               layer, &gather)) != PLAIT_OK)
        return st;
    m->k->matmul_backward_bf16(m->sb.datty, g ? NULL : dp.out_w, g ? NULL : dp.out_b, dres, a->bf.atty, w.out_w, BT,
                               Cl, C);
    if (m->cp > 1)
        st = plait_ring_attention_backward_bf16(m, layer, m->sb.dqkv, m->sb.datty, a->bf.qkv, a->bf.atty, a->lse,
                                                m->NHl, m->NHl);
    else
        m->k->attention_fused_backward_bf16(m->sb.dqkv, m->s_datt, m->sb.datty, a->bf.qkv, a->bf.atty, a->lse, m->B,
                                            m->T, m->NHl, m->HS);
    plait_status gathered = !g ? plait_bf16_norm_full_end(m, &gather, &ln) : PLAIT_OK;
    if (st != PLAIT_OK || (st = gathered) != PLAIT_OK) return st;
    /* with tp_overlap the input gradient's sum travels while c_attn's
     * weight gradient is made */
    const int apart = !g && m->tp_overlap;
    if (g) {
        keep_bf16(m, g->dres2, dres, BT * C);
        keep_bf16(m, g->dqkv, m->sb.dqkv, BT * 3 * Cl);
    }
    if (g || apart) m->k->matmul_backward_bf16(m->sb.dln, NULL, NULL, m->sb.dqkv, ln, w.in_w, BT, C, 3 * Cl);
    else attention_in_backward(m, m->sb.dln, &dp, m->sb.dqkv, ln, w.in_w);
    tp_pending pend;
    if ((st = plait_bf16_input_grad_sum_start(m, apart, "before attn.c_attn", layer, &pend)) != PLAIT_OK) return st;
    if (apart) attention_in_backward(m, NULL, &dp, m->sb.dqkv, ln, NULL);
    if ((st = plait_bf16_input_grad_sum_end(m, &pend)) != PLAIT_OK) return st;
    if (g) keep_bf16(m, g->dln1, m->sb.dln, R * C);
    return layernorm_backward_into_stream(m, layer, copy_read_below(m, layer), dx, dx, g ? NULL : dp.ln_w,
                                          g ? NULL : dp.ln_b, m->sb.dln, x, p.ln_w, a->ln1_mean, a->ln1_rstd);
}

/* ln_2, c_fc and GELU into the block's acts. */
static plait_status mlp_act(plait_model *m, int32_t layer, block_acts *a, const float *r, const half_params *p,
                            const half_bf16 *w) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    const plait_bf16 *ln;
    plait_status st = norm_forward(m, a->bf.ln2, &ln, a->ln2_mean, a->ln2_rstd, r, p->ln_w, p->ln_b, "before mlp.c_fc",
                                   layer);
    if (st != PLAIT_OK) return st;
    if (m->desc->recompute == PLAIT_RECOMPUTE_SELECTIVE) {
        /* GELU apart, with the kernel the backward rebuilds its output
         * with: the same bits in both */
        m->k->matmul_forward_bf16(a->bf.fch, ln, w->in_w, w->in_b, BT, C, F);
        m->k->gelu_forward_bf16(a->bf.fcg, a->bf.fch, (size_t)(BT * F));
    } else {
        m->k->matmul_forward_gelu_bf16(a->bf.fcg, a->bf.fch, ln, w->in_w, w->in_b, BT, C, F);
    }
    return PLAIT_OK;
}

plait_status plait_bf16_mlp_forward_act(plait_model *m, model_slot *s, int32_t layer, const float *r) {
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN2_W, &p);
    if (st != PLAIT_OK) return st;
    const half_bf16 w = plait_model_half_bf16(m, layer, BP_LN2_W);
    return mlp_act(m, layer, &s->blocks[layer - 1], r, &p, &w);
}

plait_status plait_bf16_mlp_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y) {
    block_acts *a = &s->blocks[layer - 1];
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN2_W, &p);
    if (st != PLAIT_OK) return st;
    const half_bf16 w = plait_model_half_bf16(m, layer, BP_LN2_W);
    if ((st = mlp_act(m, layer, a, r, &p, &w)) != PLAIT_OK) return st;
    return plait_bf16_row_product(m, y, r, a->bf.fcg, w.out_w, p.out_b, m->Fl, "after mlp.c_proj", layer);
}

/* dr (overwritten) = d(r) from dy = d(y); the half's parameter gradients
 * added (as the attention half splits them). */
plait_status plait_bf16_mlp_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                     float *dr, bwd_part part) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl, R = m->R;
    block_acts *a = &s->blocks[layer - 1];
    block_grads_bf16 *g = stash_of(s, layer, part);
    half_params p, dp;
    plait_status st = half_for(m, layer, BP_LN2_W, part, &p, &dp);
    if (st != PLAIT_OK) return st;
    const half_bf16 w = plait_model_half_bf16(m, layer, BP_LN2_W);
    /* c_fc's weight gradient reads ln_2's output over every row */
    const plait_bf16 *ln = m->sp ? m->sp_ln_bf : a->bf.ln2;
    if (part == BWD_WEIGHT) { /* from what the input half kept */
        if ((st = plait_bf16_norm_full(m, a->bf.ln2, &ln, "before mlp.c_fc's weight gradient", layer)) != PLAIT_OK)
            return st;
        m->k->matmul_backward_gelu_bf16(NULL, dp.out_w, dp.out_b, g->dy, a->bf.fcg, NULL, NULL, BT, F, C);
        m->k->matmul_backward_bf16(NULL, dp.in_w, dp.in_b, g->dfc, ln, NULL, BT, C, F);
        return layernorm_param_grads(m, layer, dp.ln_w, dp.ln_b, g->dln2, r, a->ln2_mean, a->ln2_rstd);
    }
    const plait_bf16 *dres = NULL;
    if ((st = plait_bf16_dres_full(m, dy, &dres, "after mlp.c_proj", layer)) != PLAIT_OK) return st;
    /* in one pass, gathered while c_proj's gradients are made where
     * tp_overlap */
    tp_pending gather = {0};
    if (!g && (st = plait_bf16_norm_full_start(m, a->bf.ln2, m->tp_overlap, "before mlp.c_fc's weight gradient", layer,
                                               &gather)) != PLAIT_OK)
        return st;
    m->k->matmul_backward_gelu_bf16(m->sb.dfc, g ? NULL : dp.out_w, g ? NULL : dp.out_b, dres, a->bf.fcg, w.out_w,
                                    a->bf.fch, BT, F, C);
    if (!g && (st = plait_bf16_norm_full_end(m, &gather, &ln)) != PLAIT_OK) return st;
    /* with tp_overlap the input gradient's sum travels while c_fc's weight
     * gradient is made */
    const int with = !g && !m->tp_overlap;
    m->k->matmul_backward_bf16(m->sb.dln, with ? dp.in_w : NULL, with ? dp.in_b : NULL, m->sb.dfc, ln, w.in_w, BT, C,
                               F);
    if (g) { /* before the LayerNorm's copy replaces dres */
        keep_bf16(m, g->dy, dres, BT * C);
        keep_bf16(m, g->dfc, m->sb.dfc, BT * F);
    }
    tp_pending pend;
    if ((st = plait_bf16_input_grad_sum_start(m, !g && !with, "before mlp.c_fc", layer, &pend)) != PLAIT_OK) return st;
    if (!g && !with) m->k->matmul_backward_bf16(NULL, dp.in_w, dp.in_b, m->sb.dfc, ln, NULL, BT, C, F);
    if ((st = plait_bf16_input_grad_sum_end(m, &pend)) != PLAIT_OK) return st;
    if (g) keep_bf16(m, g->dln2, m->sb.dln, R * C);
    return layernorm_backward_into_stream(m, layer, 1, dr, dy, g ? NULL : dp.ln_w, g ? NULL : dp.ln_b, m->sb.dln, r,
                                          p.ln_w, a->ln2_mean, a->ln2_rstd);
}

/* ---- the head ------------------------------------------------------------
 * The logits of a GPT-2-sized vocabulary are the largest activation of
 * all (BT x 50,304 in bf16: 1.65 GB for GPT-2 124M at batch 16, a third of
 * what its 12 blocks keep). The fused loss already turns them into their
 * gradient in the forward; so the forward also runs the head's products'
 * backward there, head_rows rows at a time (plait_model_head_rows, in
 * model_slots.c; the idea of fused
 * linear-cross-entropy heads): a chunk's logits, its loss and gradient in
 * place, ln_f's output gradient for its rows and lm_head's weight gradient
 * added over the chunks. A chunk's logits live in the backward scratch,
 * which no backward uses while a forward runs, so no logits outlive their
 * chunk. The slot keeps ln_f's output gradient (bf16, BT x C) and the
 * weight gradient (float32, Vl x C: 154 MB at that size), which the
 * head's backward adds into lm_head's gradient where the unchunked head
 * added its product, so gradients accumulate in the same order whatever
 * the schedule. The cost: the weight gradient is read and written once a
 * chunk instead of once. */

/* What a bf16 head's forward needs before its norm: targets, no logits
 * asked for, the scratch its chunks borrow. */
plait_status plait_bf16_head_begin(plait_model *m, model_slot *s) {
    if (!s->has_targets || m->keep_logits)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: a model with bf16 activations computes the head only with targets, "
                               "turning the logits into their gradient (it keeps no float32 logits%s)",
                               m->keep_logits ? "; plait_model_keep_logits asked for them" : "");
    plait_status st = plait_model_scratch_get(m);
    m->dres_of = NULL; /* the chunks' logits may cover sb.dres */
    return st;
}

/* From the final norm's bf16 output in head_lnf: per chunk of rows
 * lm_head, the loss with the logits' gradient in place, and the
 * products' backward: the norm's output gradient into the slot,
 * lm_head's weight gradient into its accumulator (the model keeps no
 * logits: plait_model_create_args). A forward-only model (evaluation)
 * computes the loss alone. Both archs' heads end so. */
void plait_bf16_head_chunks(plait_model *m, model_slot *s) {
    const int64_t BT = m->B * m->T, C = m->C, Vl = m->Vl;
    const plait_bf16 *w = plait_model_head_bf16(m), *lnf = m->head_lnf;
    plait_bf16 *logits = m->head_logits;
    double *loss_sum = m->loss_dev + (s - m->slots);
    const int grads = !m->forward_only;
    m->k->zero_f64(loss_sum, 1);
    if (grads) m->k->zero(s->head_dw, (size_t)(Vl * C));
    for (int64_t r = 0; r < BT; r += m->head_rows) {
        const int64_t n = BT - r < m->head_rows ? BT - r : m->head_rows;
        m->k->matmul_forward_bf16(logits, lnf + r * C, w, NULL, n, C, Vl);
        m->k->crossentropy_fused_bf16(s->losses + r, s->lse + r, loss_sum, grads ? logits : NULL, logits,
                                      s->targets + r, n, Vl, m->vocab_valid, m->loss_scale);
        if (grads)
            m->k->matmul_backward_bf16(s->dlnf_bf + r * C, s->head_dw, NULL, logits, lnf + r * C, w, n, C, Vl);
    }
    s->has_loss = 1;
    s->has_dlogits = grads;
    s->has_logits = 0;
}

/* ln_f, then the chunks. */
plait_status plait_bf16_head_forward(plait_model *m, model_slot *s) {
    head_params p;
    plait_status st = plait_bf16_head_begin(m, s);
    if (st == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
    if (st != PLAIT_OK) return st;
    m->k->layernorm_forward_bf16(m->head_lnf, s->lnf_mean, s->lnf_rstd, s->bound[m->desc->n_layer], p.ln_w, p.ln_b,
                                 m->B * m->T, m->C);
    plait_bf16_head_chunks(m, s);
    return PLAIT_OK;
}

plait_status plait_bf16_head_backward_check(const model_slot *s) {
    if (s->has_loss && s->has_dlogits) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "model: backward of the head needs a forward with targets since the last backward of "
                           "this slot%s",
                           s->has_loss ? ", and not a forward-only one (plait_model_forward_only)" : "");
}

/* From what the forward left: lm_head's gradient, and ln_f's and
 * d(input) into the slot's gradient buffer; a split backward's input
 * half makes d(input), its weight half the parameters' gradients. */
plait_status plait_bf16_head_backward(plait_model *m, model_slot *s, bwd_part part) {
    const plait_model_desc *d = m->desc;
    const int64_t C = m->C, Vl = m->Vl;
    head_params p, dp;
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) {
        if ((st = plait_bf16_head_backward_check(s)) == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
    }
    if (st == PLAIT_OK) st = plait_model_head_params(m, PARAM_GRAD, &dp);
    if (st != PLAIT_OK) return st;
    if (part & BWD_WEIGHT) m->k->axpy(dp.w, s->head_dw, (size_t)(Vl * C), 1.0f);
    const int32_t layer = d->n_layer + 1;
    if (part == BWD_WEIGHT)
        return layernorm_param_grads(m, layer, dp.ln_w, dp.ln_b, s->dlnf_bf, s->bound[d->n_layer], s->lnf_mean,
                                     s->lnf_rstd);
    s->has_dlogits = 0;
    const int all = part == BWD_ALL;
    return layernorm_backward_into_stream(m, layer, copy_read_below(m, layer), s->gbuf[d->n_layer & 1], NULL,
                                          all ? dp.ln_w : NULL, all ? dp.ln_b : NULL, s->dlnf_bf, s->bound[d->n_layer],
                                          p.ln_w, s->lnf_mean, s->lnf_rstd);
}
