/*
 * GPT layer bodies: the embedding, the attention half of a block, and the
 * head (ln_f, the tied output projection, cross-entropy). Under tensor
 * parallelism they follow Megatron-LM: f (identity forward, all-reduce of
 * the input gradient) before the column-parallel c_attn and lm_head, g
 * (all-reduce forward) after the row-parallel c_proj and the
 * vocabulary-parallel embedding, and a cross-entropy that combines per-row
 * max, Σexp and target logit across ranks instead of gathering logits.
 * Under sequence parallelism (tp_conjugates.c) the norms and the residual
 * stream hold this rank's rows only: an all-gather of ln_1's (ln_f's)
 * output before c_attn (lm_head: the logits are computed over every row,
 * as Megatron-LM gathers before its vocabulary-parallel logits), a
 * reduce-scatter after c_proj and the embedding. The slot keeps ln_1's
 * output split; c_attn's weight gradient gathers it again.
 */
#include "model/model_bodies.h"
#include "model/ring_attention.h"
#include "runtime/error.h"

/* ---- embedding ----------------------------------------------------------- */

plait_status plait_gpt_embedding_forward(plait_model *m, model_slot *s) {
    if (!s->has_tokens)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: forward of the embedding without tokens (set_batch first)");
    embedding_params p;
    plait_status st = plait_model_embedding_params(m, PARAM_DATA, &p);
    if (st != PLAIT_OK) return st;
    float *out = s->bound[0];
    if (m->cp > 1) { /* positions in the whole sequence (ring_attention.h), to this rank's rows */
        float *part = plait_tp_partial(m, out);
        m->k->embedding_forward_vocab(part, s->tokens, p.wte, m->vocab_start, m->Vl, NULL, m->B, m->T, m->C);
        if ((st = plait_tp_sum(m, part, out, "of the embedding", 0)) != PLAIT_OK) return st;
        plait_cp_add_positions(m, out, p.wpe);
        return PLAIT_OK;
    }
    if (!m->tp_ops) {
        m->k->embedding_forward_vocab(out, s->tokens, p.wte, m->vocab_start, m->Vl, p.wpe, m->B,
                                        m->T, m->C);
        return PLAIT_OK;
    }
    /* each rank contributes its vocabulary rows, zeros elsewhere; g sums them
     * exactly (x + 0 = x), then the replicated positions are added: to this
     * rank's rows, a run of consecutive positions per sequence they cross */
    float *part = plait_tp_partial(m, out);
    m->k->embedding_forward_vocab(part, s->tokens, p.wte, m->vocab_start, m->Vl, NULL, m->B, m->T, m->C);
    st = plait_tp_sum(m, part, out, "of the embedding", 0);
    if (st != PLAIT_OK) return st;
    for (int64_t row = m->row0; row < m->row0 + m->R;) {
        const int64_t t = row % m->T, n = m->T - t < m->row0 + m->R - row ? m->T - t : m->row0 + m->R - row;
        m->k->add_positions(out + (row - m->row0) * m->C, p.wpe + t * m->C, 1, n, m->C);
        row += n;
    }
    return PLAIT_OK;
}

plait_status plait_gpt_embedding_backward(plait_model *m, model_slot *s) {
    embedding_params g;
    plait_status st = plait_model_embedding_params(m, PARAM_GRAD, &g);
    if (st != PLAIT_OK) return st;
    const float *d;
    if ((st = plait_tp_grad_full(m, s->gbuf[0], &d, "of the embedding", 0)) != PLAIT_OK) return st;
    m->k->embedding_backward_vocab(g.wte, m->cp > 1 ? NULL : g.wpe, d, s->tokens, m->vocab_start, m->Vl, m->B, m->T,
                                   m->C);
    if (m->cp > 1) plait_cp_positions_backward(m, g.wpe, d);
    return PLAIT_OK;
}

/* ---- attention half of a block ------------------------------------------- */

plait_status plait_gpt_attention_forward(plait_model *m, model_slot *s, int32_t layer,
                                         const float *x) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl, R = m->R;
    block_acts *a = &s->blocks[layer - 1];
    half_params p;
    plait_status st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN1_W, &p);
    if (st != PLAIT_OK) return st;
    const float *ln;
    m->k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p.ln_w, p.ln_b, R, C);
    if ((st = plait_tp_norm_full(m, a->ln1, &ln, "before attn.c_attn", layer)) != PLAIT_OK) return st;
    m->k->matmul_forward(a->qkv, ln, p.in_w, p.in_b, BT, C, 3 * Cl);
    if (m->cp > 1) st = plait_ring_attention_forward(m, layer, a->atty, a->lse, a->qkv, m->NHl, m->NHl);
    else if (m->fused_attn) /* its scratch came with the first slot */
        m->k->attention_fused_forward(a->atty, a->lse, m->att_scratch, a->qkv, m->B, m->T, m->NHl, m->HS);
    else
        m->k->attention_forward(a->atty, a->att, a->qkv, m->B, m->T, m->NHl, m->HS);
    if (st != PLAIT_OK) return st;
    if (!m->tp_ops) {
        m->k->matmul_forward_residual(a->res2, x, a->atty, p.out_w, p.out_b, BT, Cl, C);
        return PLAIT_OK;
    }
    float *part = plait_tp_partial(m, a->res2);
    m->k->matmul_forward(part, a->atty, p.out_w, NULL, BT, Cl, C);
    if ((st = plait_tp_sum(m, part, a->res2, "after attn.c_proj", layer)) != PLAIT_OK) return st;
    m->k->add_bias_residual(a->res2, x, p.out_b, R, C);
    return PLAIT_OK;
}

/* The attention half's input gradient up to (not including) ln_1: with dx
 * holding d(res2) (this rank's rows; over all of them in *dres2 after),
 * leaves d(ln_1's output), TP-reduced, in the scratch s_dln and c_attn's
 * output gradient in s_dqkv. */
static plait_status attention_input_grads(plait_model *m, model_slot *s, int32_t layer, const half_params *p,
                                          const half_params *dp, const float *dx_rows, const float **dres2) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl;
    block_acts *a = &s->blocks[layer - 1];
    const float *dx;
    plait_status st = plait_tp_grad_full(m, dx_rows, &dx, "after attn.c_proj", layer);
    if (st != PLAIT_OK) return st;
    *dres2 = dx;
    /* c_attn's weight gradient reads ln_1's output over every row (the
     * input gradient alone reads none of it): with tp_overlap gathered
     * while c_proj's and the attention's gradients are made */
    tp_pending gather = {0};
    if (dp && (st = plait_tp_norm_full_start(m, a->ln1, m->tp_overlap, "before attn.c_attn's weight gradient", layer,
                                             &gather)) != PLAIT_OK)
        return st;
    m->k->matmul_backward(m->s_datty, dp ? dp->out_w : NULL, dp ? dp->out_b : NULL, dx, a->atty, p->out_w, BT, Cl,
                          C);
    if (m->cp > 1)
        st = plait_ring_attention_backward(m, layer, m->s_dqkv, m->s_datty, a->qkv, a->atty, a->lse, m->NHl, m->NHl);
    else if (m->fused_attn)
        m->k->attention_fused_backward(m->s_dqkv, m->s_datt, m->s_datty, a->qkv, a->atty, a->lse, m->B, m->T,
                                       m->NHl, m->HS);
    else m->k->attention_backward(m->s_dqkv, m->s_datt, m->s_datty, a->qkv, a->att, m->B, m->T, m->NHl, m->HS);
    const float *ln = m->sp ? m->sp_ln : a->ln1;
    plait_status gathered = dp ? plait_tp_norm_full_end(m, &gather, &ln) : PLAIT_OK;
    if (st != PLAIT_OK || (st = gathered) != PLAIT_OK) return st;
    if (!dp || !m->tp_overlap) {
        if (dp) m->k->copy(m->s_datt, dp->in_b + Cl, (size_t)Cl); /* the key bias: attention_weight_grads */
        m->k->matmul_backward(m->s_dln, dp ? dp->in_w : NULL, dp ? dp->in_b : NULL, m->s_dqkv, ln, p->in_w, BT, C,
                              3 * Cl);
        if (dp) m->k->copy(dp->in_b + Cl, m->s_datt, (size_t)Cl);
        return plait_tp_grad_sum(m, m->s_dln, "before attn.c_attn", layer);
    }
    /* the input gradient's sum travels while the weight gradient is made */
    m->k->matmul_backward(m->s_dln, NULL, NULL, m->s_dqkv, ln, p->in_w, BT, C, 3 * Cl);
    tp_pending pend;
    if ((st = plait_tp_grad_sum_start(m, m->s_dln, "before attn.c_attn", layer, &pend)) != PLAIT_OK) return st;
    m->k->copy(m->s_datt, dp->in_b + Cl, (size_t)Cl);
    m->k->matmul_backward(NULL, dp->in_w, dp->in_b, m->s_dqkv, ln, NULL, BT, C, 3 * Cl);
    m->k->copy(dp->in_b + Cl, m->s_datt, (size_t)Cl);
    return plait_tp_grad_sum_end(m, &pend);
}

/* c_proj's, c_attn's (unless the input half's products computed them:
 * products_done) and ln_1's gradients from g; reads no parameter. */
static plait_status attention_weight_grads(plait_model *m, model_slot *s, int32_t layer, const float *x,
                                           const block_grads *g, const half_params *grads, int products_done) {
    const int64_t BT = m->B * m->T, C = m->C, Cl = m->Cl;
    block_acts *a = &s->blocks[layer - 1];
    half_params dp = *grads;
    norm_grads ng;
    if (products_done) {
        ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
        m->k->layernorm_backward(NULL, ng.w, ng.b, g->dln1, x, NULL, a->ln1_mean, a->ln1_rstd, m->R, C);
        return plait_tp_norm_grads_sum(m, &ng, layer);
    }
    m->k->matmul_backward(NULL, dp.out_w, dp.out_b, g->dres2, a->atty, NULL, BT, Cl, C);
    /* The key bias cannot change the output (softmax is invariant to adding
     * the same q·b_k to every key's score), so its gradient is exactly zero;
     * computed, it is rounding noise that Adam would amplify into ±lr steps
     * and that would differ between layouts. Keep it at exactly zero: save
     * that slice of the accumulator around the update (s_datt is free: the
     * attention backward is done). */
    const float *ln;
    plait_status st = plait_tp_norm_full(m, a->ln1, &ln, "before attn.c_attn's weight gradient", layer);
    if (st != PLAIT_OK) return st;
    m->k->copy(m->s_datt, dp.in_b + Cl, (size_t)Cl);
    m->k->matmul_backward(NULL, dp.in_w, dp.in_b, g->dqkv, ln, NULL, BT, C, 3 * Cl);
    m->k->copy(dp.in_b + Cl, m->s_datt, (size_t)Cl);
    ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
    m->k->layernorm_backward(NULL, ng.w, ng.b, g->dln1, x, NULL, a->ln1_mean, a->ln1_rstd, m->R, C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

/* On entry dx holds d(res2); the input half leaves d(x) there (and, under a
 * split backward, d(res2), dqkv and dln1 in g); the weight half reads g. In
 * one pass (BWD_ALL, g the scratch and dx itself) the weight half runs
 * before ln_1's input gradient overwrites d(res2). */
plait_status plait_gpt_attention_backward(plait_model *m, model_slot *s, int32_t layer, const float *x, float *dx,
                                          bwd_part part, const block_grads *g) {
    const int64_t BT = m->B * m->T, C = m->C, R = m->R;
    block_acts *a = &s->blocks[layer - 1];
    half_params p, dp;
    const float *dres2 = dx;
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) st = plait_model_half_params(m, PARAM_DATA, layer, BP_LN1_W, &p);
    if (st == PLAIT_OK && (part & BWD_WEIGHT)) st = plait_model_half_params(m, PARAM_GRAD, layer, BP_LN1_W, &dp);
    /* in one pass each product's input and weight gradients come from one
     * call, which reads (and converts) its output gradient once */
    if (st == PLAIT_OK && (part & BWD_INPUT))
        st = attention_input_grads(m, s, layer, &p, part == BWD_ALL ? &dp : NULL, dx, &dres2);
    if (st != PLAIT_OK) return st;
    if (part == BWD_INPUT) {
        plait_model_keep(m, g->dres2, dres2, (size_t)(BT * C));
        plait_model_keep(m, g->dqkv, m->s_dqkv, (size_t)(BT * 3 * m->Cl));
        plait_model_keep(m, g->dln1, m->s_dln, (size_t)(R * C));
    }
    if (part == BWD_ALL && m->fused_ln) { /* ln_1's input gradient into dx and its parameters', one pass */
        norm_grads ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
        m->k->layernorm_backward_fused(dx, dx, ng.w, ng.b, m->s_dln, x, p.ln_w, a->ln1_mean, a->ln1_rstd, R, C);
        return plait_tp_norm_grads_sum(m, &ng, layer);
    }
    if (part & BWD_WEIGHT) st = attention_weight_grads(m, s, layer, x, g, &dp, part == BWD_ALL);
    if (st != PLAIT_OK || !(part & BWD_INPUT)) return st;
    m->k->layernorm_backward(dx, NULL, NULL, m->s_dln, x, p.ln_w, a->ln1_mean, a->ln1_rstd, R, C);
    return PLAIT_OK;
}

/* ---- head ---------------------------------------------------------------- */

plait_status plait_gpt_head_forward(plait_model *m, model_slot *s) {
    const plait_model_desc *d = m->desc;
    const int64_t C = m->C;
    head_params p;
    plait_status st = plait_model_head_params(m, PARAM_DATA, &p);
    if (st != PLAIT_OK) return st;
    float *ln = plait_tp_local(m, s->lnf);
    m->k->layernorm_forward(ln, s->lnf_mean, s->lnf_rstd, s->bound[d->n_layer], p.ln_w, p.ln_b, m->R, C);
    if ((st = plait_tp_gather(m, ln, s->lnf, "before lm_head", d->n_layer + 1)) != PLAIT_OK) return st;
    if ((st = plait_head_logits(m, s, p.w)) != PLAIT_OK) return st;
    return plait_head_loss(m, s);
}

plait_status plait_head_logits(plait_model *m, model_slot *s, const float *w) {
    if (m->bf16) return plait_tp_head_logits_bf16(m, s); /* tensor parallelism on a bf16 run */
    m->k->matmul_forward(s->logits, s->lnf, w, NULL, m->B * m->T, m->C, m->Vl);
    return PLAIT_OK;
}

plait_status plait_head_loss(plait_model *m, model_slot *s) {
    const int32_t layer = m->desc->n_layer + 1;
    const int64_t BT = m->B * m->T, Vl = m->Vl;
    plait_status st;
    s->has_logits = 1;
    s->has_dlogits = 0;
    s->has_loss = 0;
    if (!s->has_targets) return PLAIT_OK;
    double *loss_sum = m->loss_dev + (s - m->slots);
    if (!m->tp_ops && m->fused_loss) {
        /* every class here: the loss and, unless the logits are to be kept
         * or no backward follows, their gradient in the same pass, in place */
        float *dlogits = m->keep_logits || m->forward_only ? NULL : s->logits;
        m->k->zero_f64(loss_sum, 1);
        m->k->crossentropy_fused(s->losses, s->lse, loss_sum, dlogits, s->logits, s->targets, BT, Vl,
                                 m->vocab_valid, m->loss_scale);
        s->has_loss = 1;
        s->has_dlogits = dlogits != NULL;
        s->has_logits = !s->has_dlogits;
        return PLAIT_OK;
    }

    /* lse = max + log Σ exp(logit - max) and the target logit, each combined
     * across the TP group (logits are never gathered) */
    const plait_tp_ops *tp = m->tp_ops;
    float *lse = s->lse, *sumexp = s->sumexp, *tlogit = s->losses;
    m->k->logits_rowmax(lse, s->logits, BT, Vl, m->vocab_valid);
    if (tp && (st = tp->reduce_max(tp->ctx, lse, (size_t)BT)) != PLAIT_OK)
        return plait_model_tp_error(m, st, "max of the logits", layer);
    m->k->logits_sumexp(sumexp, s->logits, lse, BT, Vl, m->vocab_valid);
    if (tp && (st = tp->reduce_sum(tp->ctx, sumexp, (size_t)BT)) != PLAIT_OK)
        return plait_model_tp_error(m, st, "sum of exp(logits)", layer);
    m->k->logits_target(tlogit, s->logits, s->targets, m->vocab_start, BT, Vl, m->vocab_valid);
    if (tp && (st = tp->reduce_sum(tp->ctx, tlogit, (size_t)BT)) != PLAIT_OK)
        return plait_model_tp_error(m, st, "sum of the target logits", layer);
    /* lse in place of the max, the row losses in place of the target
     * logits, their sum into the slot's loss accumulator (device memory:
     * the trainer reads every slot's once per step) */
    m->k->zero_f64(loss_sum, 1);
    m->k->loss_rows(tlogit, lse, lse, sumexp, tlogit, s->targets, BT, loss_sum);
    s->has_loss = 1;
    return PLAIT_OK;
}

plait_status plait_head_dlogits(plait_model *m, model_slot *s) {
    if (!s->has_loss || !(s->has_logits || s->has_dlogits))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: backward of the head needs a forward with targets since "
                                                      "the last backward of this slot");
    /* the logits become their gradient, in place (unless the fused loss of
     * the forward did it) */
    if (!s->has_dlogits)
        m->k->crossentropy_backward(s->logits, s->logits, s->lse, s->targets, m->vocab_start, m->B * m->T, m->Vl,
                                    m->vocab_valid, m->loss_scale);
    s->has_logits = 0;
    s->has_dlogits = 0;
    return PLAIT_OK;
}

plait_status plait_head_products_backward(plait_model *m, model_slot *s, const float *w, float *dw) {
    const int64_t BT = m->B * m->T, C = m->C, Vl = m->Vl;
    const int32_t layer = m->desc->n_layer + 1;
    if (m->bf16) return plait_tp_head_backward_bf16(m, s, dw, 1);
    if (dw && m->tp_overlap) { /* the sum travels while the weight gradient is made */
        m->k->matmul_backward(m->s_dln, NULL, NULL, s->logits, s->lnf, w, BT, C, Vl);
        tp_pending pend;
        plait_status st = plait_tp_grad_sum_start(m, m->s_dln, "before lm_head", layer, &pend);
        if (st != PLAIT_OK) return st;
        m->k->matmul_backward(NULL, dw, NULL, s->logits, s->lnf, NULL, BT, C, Vl);
        return plait_tp_grad_sum_end(m, &pend);
    }
    m->k->matmul_backward(m->s_dln, dw, NULL, s->logits, s->lnf, w, BT, C, Vl);
    return plait_tp_grad_sum(m, m->s_dln, "before lm_head", layer);
}

/* The input half turns the logits into their gradient (in place, kept in
 * the slot for the weight half), leaves d(ln_f's output), TP-reduced, in
 * dln (the scratch, or the slot's stash) and d(input) in the gradient
 * buffer; the weight half adds lm_head's and ln_f's gradients. */
plait_status plait_head_weight_grad(plait_model *m, model_slot *s, float *dw) {
    if (m->bf16) return plait_tp_head_backward_bf16(m, s, dw, 0);
    m->k->matmul_backward(NULL, dw, NULL, s->logits, s->lnf, NULL, m->B * m->T, m->C, m->Vl);
    return PLAIT_OK;
}

plait_status plait_gpt_head_backward(plait_model *m, model_slot *s, bwd_part part, float *dln) {
    const plait_model_desc *d = m->desc;
    const int32_t layer = d->n_layer + 1;
    const int64_t C = m->C, R = m->R;
    if (part & BWD_INPUT) {
        head_params p;
        plait_status st = plait_head_dlogits(m, s);
        if (st == PLAIT_OK) st = plait_model_head_params(m, PARAM_DATA, &p);
        if (st != PLAIT_OK) return st;
        /* in one pass the weight gradient from the same call (the logits'
         * gradient read and converted once) */
        head_params dp = {0};
        if (part == BWD_ALL && (st = plait_model_head_params(m, PARAM_GRAD, &dp)) != PLAIT_OK) return st;
        if ((st = plait_head_products_backward(m, s, p.w, dp.w)) != PLAIT_OK) return st;
        plait_model_keep(m, dln, m->s_dln, (size_t)(R * C));
        float *dx = s->gbuf[d->n_layer & 1];
        if (part == BWD_ALL && m->fused_ln) { /* dx written (no zeroing first), ln_f's parameters too */
            norm_grads ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
            m->k->layernorm_backward_fused(dx, NULL, ng.w, ng.b, m->s_dln, s->bound[d->n_layer], p.ln_w, s->lnf_mean,
                                           s->lnf_rstd, R, C);
            return plait_tp_norm_grads_sum(m, &ng, layer);
        }
        m->k->zero(dx, (size_t)(R * C));
        m->k->layernorm_backward(dx, NULL, NULL, m->s_dln, s->bound[d->n_layer], p.ln_w, s->lnf_mean, s->lnf_rstd, R,
                                 C);
    }
    if (part & BWD_WEIGHT) {
        head_params dp;
        plait_status st = plait_model_head_params(m, PARAM_GRAD, &dp);
        if (st != PLAIT_OK) return st;
        if (part != BWD_ALL && (st = plait_head_weight_grad(m, s, dp.w)) != PLAIT_OK) return st;
        norm_grads ng = plait_tp_norm_grads(m, dp.ln_w, dp.ln_b);
        m->k->layernorm_backward(NULL, ng.w, ng.b, dln, s->bound[d->n_layer], NULL, s->lnf_mean, s->lnf_rstd, R, C);
        return plait_tp_norm_grads_sum(m, &ng, layer);
    }
    return PLAIT_OK;
}
