/*
 * Activation recomputation ([model] recompute), as Megatron-LM calls it:
 *
 *   none       a slot keeps everything a block's backward reads;
 *   selective  a slot drops the attention probabilities (B·H·T² floats per
 *              block, the largest part at long contexts) and the GELU's
 *              output; the backward recomputes the probabilities from the
 *              saved q, k (scores and softmax, no att·V) and the GELU from
 *              its saved input (c_fc's output), which is cheap next to the
 *              matrix products, as llm.c's recompute=1 does. With the
 *              device's fused attention there are no probabilities to drop
 *              (its backward recomputes them from each row's log-sum-exp
 *              anyway): selective then drops the GELU's output alone;
 *   full       a slot keeps only each block's input (the residual stream it
 *              holds anyway as the pipeline's boundary buffers); the
 *              backward reruns the block's forward up to the GELU (c_proj
 *              of the MLP is not needed) before differentiating it.
 *
 * Dropped parts live in one set of buffers shared by every block and slot
 * (recompute_keep.c says which parts each mode drops and lays the buffers
 * out): the forward writes them as scratch, and plait_recompute_block()
 * refills them right before the block's backward. Under bf16 activations the parts
 * the products read and write (block_acts_bf16) are bf16 there as in a
 * slot, and the refill runs the bf16 bodies (gpt_bf16.c) with the weights'
 * bf16 copy the forward read: a backward never makes it again, and the
 * trainer changes the weights only after every backward of the step. The
 * recomputation calls the forward's own kernels on the same inputs and
 * parameters, which are deterministic for a given shape, so gradients are
 * bit-identical to recompute = none (selective under bf16 activations runs
 * the forward's GELU apart, to have the backward's kernel: see
 * gpt_bf16.c). Under tensor parallelism a full recompute repeats the
 * all-reduce after attn.c_proj (Megatron does the same; counted in tp_bytes).
 *
 * A sparse block (moe.c) under full keeps only its input as any block:
 * the backward reruns its attention half, the MLP norm and then the
 * router, the permutation and the experts (shared ones too; at ep > 1 the
 * trades again), which choose the routes the forward chose, being the same
 * kernels on the same rows; not the combine, whose output the backward
 * does not read. Selective drops its experts' activation function
 * outputs (routed and shared; Megatron-Core's moe_act) and rebuilds them
 * from the kept GELU or SwiGLU inputs with the forward's own calls.
 * Under bf16 activations a sparse block's MLP half rebuilds its float32
 * norm output itself before its backward in every mode, and under full
 * reruns its router and experts from it there (moe_bf16.c).
 */
#include "model/model_bodies.h"

/* Under bf16 activations (a one-pass backward): the bf16 bodies' forward,
 * with the bf16 weight copies the block's forward read. */
static plait_status recompute_bf16(plait_model *m, model_slot *s, int32_t layer) {
    block_acts *a = &s->blocks[layer - 1];
    const int sparse = desc_block_sparse(m->desc, layer - 1);
    switch (m->desc->recompute) {
    case PLAIT_RECOMPUTE_SELECTIVE:
        if (sparse) return plait_moe_act_rerun(m, s, layer); /* the experts' GELUs, float32 */
        m->k->gelu_forward_bf16(a->bf.fcg, a->bf.fch, (size_t)(m->B * m->T * m->Fl));
        return PLAIT_OK;
    case PLAIT_RECOMPUTE_FULL: {
        /* a sparse half rebuilds its norm and reruns its experts itself (moe_bf16.c) */
        plait_status st = plait_bf16_attention_forward(m, s, layer, s->bound[layer - 1]);
        return st != PLAIT_OK || sparse ? st : plait_bf16_mlp_forward_act(m, s, layer, a->res2);
    }
    default: return PLAIT_OK;
    }
}

/* The llama arch: SwiGLU's output from gate's and up's (selective), or the
 * block up to it (full). */
static plait_status recompute_llama(plait_model *m, model_slot *s, int32_t layer) {
    block_acts *a = &s->blocks[layer - 1];
    switch (m->desc->recompute) {
        case PLAIT_RECOMPUTE_SELECTIVE:
            if (desc_block_sparse(m->desc, layer - 1)) return plait_moe_act_rerun(m, s, layer); /* the experts' */
            if (m->bf16) /* the forward's own kernel on gate|up (llama_bf16.c): the same bits */
                m->k->swiglu_forward_bf16(a->bf.swi, a->bf.gu, m->B * m->T, m->Fl);
            else m->k->swiglu_forward(a->swi, a->fch, a->fcg, (size_t)(m->B * m->T * m->Fl));
            return PLAIT_OK;
        case PLAIT_RECOMPUTE_FULL: {
            plait_status st = m->bf16 ? plait_llama_bf16_block_forward_act(m, s, layer)
                                      : plait_llama_block_forward_act(m, s, layer);
            /* under bf16 a sparse half reruns its experts itself (moe_bf16.c) */
            if (st != PLAIT_OK || !desc_block_sparse(m->desc, layer - 1) || m->bf16) return st;
            return plait_moe_rerun(m, s, layer, s->blocks[layer - 1].ln2);
        }
        default:
            return PLAIT_OK;
    }
}

/* A gpt sparse block's MLP norm (ln_2) over the residual stream's rows
 * (the router's input and what the norm's backward reads), then its
 * router and experts. */
static plait_status sparse_mlp_rerun(plait_model *m, model_slot *s, int32_t layer) {
    block_acts *a = &s->blocks[layer - 1];
    float *p[2];
    plait_status st = plait_model_tensors(m, PARAM_DATA, layer, desc_block_param(m->desc, layer - 1, BP_LN2_W), 2, p);
    if (st == PLAIT_OK) m->k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p[0], p[1], m->R, m->C);
    const float *ln = a->ln2; /* every row: gathered under sequence parallelism */
    if (st == PLAIT_OK) st = plait_tp_norm_full(m, a->ln2, &ln, "before the router (recomputed)", layer);
    return st == PLAIT_OK ? plait_moe_rerun(m, s, layer, ln) : st;
}

plait_status plait_recompute_block(plait_model *m, model_slot *s, int32_t layer, int weights_only) {
    if (m->desc->is_llama) return recompute_llama(m, s, layer);
    if (m->bf16) return recompute_bf16(m, s, layer);
    block_acts *a = &s->blocks[layer - 1];
    const int sparse = desc_block_sparse(m->desc, layer - 1);
    switch (m->desc->recompute) {
    case PLAIT_RECOMPUTE_SELECTIVE:
        /* the weight half reads the GELU's output, not the probabilities */
        if (m->desc->is_gpt && !weights_only && !m->fused_attn)
            m->k->attention_probs(a->att, a->qkv, m->B, m->T, m->NHl, m->HS);
        if (sparse) return plait_moe_act_rerun(m, s, layer); /* the experts' GELUs */
        m->k->gelu_forward(a->fcg, a->fch, (size_t)(m->B * m->T * m->Fl));
        return PLAIT_OK;
    case PLAIT_RECOMPUTE_FULL: {
        const float *x = s->bound[layer - 1];
        if (m->desc->is_gpt) {
            plait_status st = plait_gpt_attention_forward(m, s, layer, x);
            if (st != PLAIT_OK) return st;
        }
        if (sparse) return sparse_mlp_rerun(m, s, layer);
        return plait_mlp_half_forward_act(m, s, layer, m->desc->is_gpt ? a->res2 : x);
    }
    default: return PLAIT_OK;
    }
}
