/*
 * The MLP half of a block, y = r + c_proj(gelu(c_fc(ln_2(r)))): the second
 * half of every GPT block and the whole block of the small "mlp" arch.
 * Under tensor parallelism c_fc is column-parallel and c_proj row-parallel
 * (Megatron's MLP): f before c_fc, g after c_proj, then the replicated bias;
 * under sequence parallelism an all-gather of ln_2's rows before c_fc and a
 * reduce-scatter after c_proj (tp_conjugates.c); the slot keeps ln_2's
 * rows split, gathered again for c_fc's weight gradient.
 */
#include "model/model_bodies.h"
#include "runtime/error.h"

plait_status plait_mlp_half_forward_act(plait_model *m, model_slot *s, int32_t layer,
                                        const float *r) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    block_acts *a = &s->blocks[layer - 1];
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN2_W, &p);
    if (st != PLAIT_OK) return st;
    const float *ln;
    m->k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, r, p.ln_w, p.ln_b, m->R, C);
    if ((st = plait_tp_norm_full(m, a->ln2, &ln, "before mlp.c_fc", layer)) != PLAIT_OK) return st;
    /* GELU in the product's epilogue, its input kept; not where selective
     * recomputation rebuilds GELU's output with gelu_forward, whose bits a
     * device's epilogue need not give */
    if (m->fused_gelu && m->desc->recompute != PLAIT_RECOMPUTE_SELECTIVE) {
        m->k->matmul_forward_gelu(a->fcg, a->fch, ln, p.in_w, p.in_b, BT, C, F);
        return PLAIT_OK;
    }
    m->k->matmul_forward(a->fch, ln, p.in_w, p.in_b, BT, C, F);
    m->k->gelu_forward(a->fcg, a->fch, (size_t)(BT * F));
    return PLAIT_OK;
}

plait_status plait_mlp_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r,
                                    float *y) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl;
    block_acts *a = &s->blocks[layer - 1];
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN2_W, &p);
    if (st == PLAIT_OK) st = plait_mlp_half_forward_act(m, s, layer, r);
    if (st != PLAIT_OK) return st;
    if (!m->tp_ops) {
        m->k->matmul_forward_residual(y, r, a->fcg, p.out_w, p.out_b, BT, F, C);
        return PLAIT_OK;
    }
    float *part = plait_tp_partial(m, y);
    m->k->matmul_forward(part, a->fcg, p.out_w, NULL, BT, F, C);
    if ((st = plait_tp_sum(m, part, y, "after mlp.c_proj", layer)) != PLAIT_OK) return st;
    m->k->add_bias_residual(y, r, p.out_b, m->R, C);
    return PLAIT_OK;
}

/* The input half: dr (overwritten) = d(r) from dy = d(y), leaving dfch and
 * dln2 in g (the scratch in one pass; copied into the slot's stash, with dy,
 * when the backward is split). The weight half: c_proj's, c_fc's and
 * ln_2's gradients from g; it reads no parameter. */
plait_status plait_mlp_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy_rows,
                                     float *dr, bwd_part part, const block_grads *g) {
    const int64_t BT = m->B * m->T, C = m->C, F = m->Fl, R = m->R;
    block_acts *a = &s->blocks[layer - 1];
    half_params dp;
    if (part & BWD_WEIGHT) {
        plait_status st = plait_model_half_params(m, PARAM_GRAD, layer, BP_LN2_W, &dp);
        if (st != PLAIT_OK) return st;
    }
    /* in one pass each product's input and weight gradients come from one
     * call, which reads (and converts) its output gradient once */
    const half_params *both = part == BWD_ALL ? &dp : NULL;
    if (part & BWD_INPUT) {
        half_params p;
        const float *dy; /* over every row: gathered under sequence parallelism */
        plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN2_W, &p);
        if (st == PLAIT_OK) st = plait_tp_grad_full(m, dy_rows, &dy, "after mlp.c_proj", layer);
        if (st != PLAIT_OK) return st;
        /* c_fc's weight gradient reads ln_2's output over every row: with
         * tp_overlap gathered while c_proj's gradients are made */
        tp_pending gather = {0};
        if (both && (st = plait_tp_norm_full_start(m, a->ln2, m->tp_overlap, "before mlp.c_fc's weight gradient", layer,
                                                   &gather)) != PLAIT_OK)
            return st;
        if (m->fused_gelu) /* GELU's derivative in the product's epilogue */
            m->k->matmul_backward_gelu(m->s_dfc, both ? both->out_w : NULL, both ? both->out_b : NULL, dy, a->fcg,
                                       p.out_w, a->fch, BT, F, C);
        else {
            m->k->matmul_backward(m->s_dfc, both ? both->out_w : NULL, both ? both->out_b : NULL, dy, a->fcg,
                                  p.out_w, BT, F, C);
            m->k->gelu_backward(m->s_dfc, a->fch, m->s_dfc, (size_t)(BT * F));
        }
        const float *ln = m->sp ? m->sp_ln : a->ln2;
        if (both && (st = plait_tp_norm_full_end(m, &gather, &ln)) != PLAIT_OK) return st;
        /* with tp_overlap the input gradient's sum travels while c_fc's
         * weight gradient is made */
        const half_params *with = m->tp_overlap ? NULL : both;
        m->k->matmul_backward(m->s_dln, with ? with->in_w : NULL, with ? with->in_b : NULL, m->s_dfc, ln, p.in_w, BT, C,
                              F);
        if (both && !with) {
            tp_pending pend;
            if ((st = plait_tp_grad_sum_start(m, m->s_dln, "before mlp.c_fc", layer, &pend)) != PLAIT_OK) return st;
            m->k->matmul_backward(NULL, both->in_w, both->in_b, m->s_dfc, ln, NULL, BT, C, F);
            st = plait_tp_grad_sum_end(m, &pend);
        } else {
            st = plait_tp_grad_sum(m, m->s_dln, "before mlp.c_fc", layer);
        }
        if (st != PLAIT_OK) return st;
        plait_model_keep(m, g->dfch, m->s_dfc, (size_t)(BT * F));
        plait_model_keep(m, g->dln2, m->s_dln, (size_t)(R * C));
        if (part == BWD_INPUT) plait_model_keep(m, g->dy, dy, (size_t)(BT * C)); /* one pass: g->dy is dy_rows */
        if (both && m->fused_ln) { /* d(r) = dy + ln_2's input gradient, and its parameters', one pass */
            norm_grads ng = plait_tp_norm_grads(m, both->ln_w, both->ln_b);
            m->k->layernorm_backward_fused(dr, dy_rows, ng.w, ng.b, m->s_dln, r, p.ln_w, a->ln2_mean, a->ln2_rstd, R,
                                           C);
            return plait_tp_norm_grads_sum(m, &ng, layer);
        }
        m->k->copy(dr, dy_rows, (size_t)(R * C));
        m->k->layernorm_backward(dr, NULL, NULL, m->s_dln, r, p.ln_w, a->ln2_mean, a->ln2_rstd, R, C);
    }
    if (part & BWD_WEIGHT) {
        if (!both) {
            const float *ln;
            plait_status st = plait_tp_norm_full(m, a->ln2, &ln, "before mlp.c_fc's weight gradient", layer);
            if (st != PLAIT_OK) return st;
            m->k->matmul_backward(NULL, dp.out_w, dp.out_b, g->dy, a->fcg, NULL, BT, F, C);
            m->k->matmul_backward(NULL, dp.in_w, dp.in_b, g->dfch, ln, NULL, BT, C, F);
        }
        norm_grads ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
        m->k->layernorm_backward(NULL, ng.w, ng.b, g->dln2, r, NULL, a->ln2_mean, a->ln2_rstd, R, C);
        return plait_tp_norm_grads_sum(m, &ng, layer);
    }
    return PLAIT_OK;
}
