/*
 * A sparse block's MLP half under bf16 activations (plait_model.bf16):
 * the block's attention half runs in bf16 as a dense block's does
 * (gpt_bf16.c, llama_bf16.c), and the sparse half between the float32
 * residual stream's rows as the float32 model runs it: its norm (ln_2,
 * or the llama arch's post_attention_layernorm) in float32, the router,
 * its logits and gates in float32 (moe.c), as Megatron-Core keeps them;
 * the experts' permuted rows, hidden tensors and outputs (and the rows
 * the ep group trades and holds) in bf16 where the device's kernels have
 * the experts' bf16 entries (plait_model.moe_bf16, moe_experts_bf16.c:
 * the dispatch rounds the norm's float32 rows, the combine adds the bf16
 * outputs into the float32 stream), else float32. The boundary
 * needs no conversion: the half reads res2 and writes the next block's
 * input, both float32 in either model, and its backward reads and writes
 * their float32 gradients (the bf16 copy of a gradient that sb.dres may
 * hold is dropped: m->dres_of).
 *
 * The norm's float32 output over every row (gathered under sequence
 * parallelism) is the router's and the experts' input; it is not kept in
 * the slot: the forward writes it into a buffer every sparse block and
 * slot shares, and the backward rebuilds it there from res2 with the
 * forward's kernel (the same bits), as recompute.c rebuilds dropped parts;
 * under recompute = full it then reruns the router and the experts from
 * it (plait_moe_rerun), whose activations the slot did not keep.
 * Its gradient lands in a second such buffer. Both are float32 [B·T,C]
 * and counted in the activation bytes (core/cost counts both as the
 * experts' scratch: it plans training); the output's is allocated at the
 * first sparse forward, the gradient's at the first backward or at the
 * first forward that a backward follows (not plait_model_forward_only),
 * so that evaluation and sampling never hold it. A sparse
 * block's slot keeps the norm's statistics, not its output
 * (model_slots.c).
 *
 * A split backward (zero-bubble schedules) rebuilds the norm's output in
 * both halves, as one pass does, so the slot keeps only the norm's output
 * gradient between them (float32 [R,C], block_grads.dln2 in the block's
 * stash) beside the experts' kept gradients (moe.c).
 */
#include "device/device.h"
#include "model/model_bodies.h"
#include "runtime/error.h"

/* The shared float32 norm output, [B·T,C], and with `grads` its gradient
 * likewise. */
static plait_status buffers(plait_model *m, int grads) {
    const size_t bytes = (size_t)(m->B * m->T * m->C) * sizeof(float);
    float **want[2] = {&m->moe_bf16_mem, grads ? &m->moe_bf16_dmem : NULL};
    for (int i = 0; i < 2; i++) {
        if (!want[i] || *want[i]) continue;
        *want[i] = plait_device_alloc(bytes, "activations");
        if (!*want[i])
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: the sparse blocks' float32 norm %s buffer (%zu bytes)",
                                   i ? "gradient" : "output", bytes);
        m->moe_bf16_bytes += bytes;
        m->act_bytes += bytes;
    }
    return PLAIT_OK;
}

static float *ln_full(plait_model *m) { return m->moe_bf16_mem; }

static float *dln_full(plait_model *m) { return m->moe_bf16_dmem; }

/* The sparse half's norm parameters (data or gradients): the gpt arch's
 * ln_2 weight and bias, the llama arch's MLP norm weight (p[1] NULL). */
static plait_status norm_params(plait_model *m, param_part part, int32_t layer, float **p) {
    p[1] = NULL;
    if (m->desc->is_llama)
        return plait_model_tensors(m, part, layer, desc_llama_param(m->desc, layer - 1, LP_MLP_NORM), 1, p);
    return plait_model_tensors(m, part, layer, desc_block_param(m->desc, layer - 1, BP_LN2_W), 2, p);
}

/* The norm of this rank's rows of r, float32, its statistics into the
 * slot's block, the output over every row into ln_full. */
static plait_status norm_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, int grads,
                                 const char *where) {
    block_acts *a = &s->blocks[layer - 1];
    float *p[2];
    plait_status st = buffers(m, grads);
    if (st == PLAIT_OK && m->sp) st = plait_model_sp_scratch(m);
    if (st == PLAIT_OK) st = norm_params(m, PARAM_DATA, layer, p);
    if (st != PLAIT_OK) return st;
    float *rows = plait_tp_local(m, ln_full(m));
    if (m->desc->is_llama) m->k->rmsnorm_forward(rows, a->ln2_rstd, r, p[0], m->R, m->C, m->desc->norm_eps);
    else m->k->layernorm_forward(rows, a->ln2_mean, a->ln2_rstd, r, p[0], p[1], m->R, m->C);
    return plait_tp_gather(m, rows, ln_full(m), where, layer);
}

plait_status plait_moe_bf16_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y) {
    plait_status st = norm_forward(m, s, layer, r, !m->forward_only, "before the router");
    return st != PLAIT_OK ? st : plait_moe_forward(m, s, layer, ln_full(m), r, y);
}

/* The weight half of a split backward: the experts' and the router's
 * gradients (moe.c, from the output gradients the input half kept in the
 * slot, the router's from the norm's output just rebuilt), then the
 * norm's parameters' from its output gradient the input half kept in
 * kept->dln2 (float32 [R,C]: the only gradient of the half no kept
 * activation can give again without the input half's products). */
static plait_status weight_half(plait_model *m, model_slot *s, int32_t layer, const float *r, const block_grads *kept) {
    const block_acts *a = &s->blocks[layer - 1];
    float *g[2];
    plait_status st = norm_params(m, PARAM_GRAD, layer, g);
    if (st == PLAIT_OK) st = plait_moe_backward(m, s, layer, ln_full(m), NULL, NULL, BWD_WEIGHT);
    if (st != PLAIT_OK) return st;
    norm_grads ng = plait_tp_norm_grads(m, g[0], g[1]);
    if (m->desc->is_llama) m->k->rmsnorm_backward(NULL, NULL, ng.w, kept->dln2, r, NULL, a->ln2_rstd, m->R, m->C);
    else m->k->layernorm_backward(NULL, ng.w, ng.b, kept->dln2, r, NULL, a->ln2_mean, a->ln2_rstd, m->R, m->C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}

plait_status plait_moe_bf16_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                          float *dr, bwd_part part, const block_grads *kept) {
    const block_acts *a = &s->blocks[layer - 1];
    float *p[2], *g[2] = {NULL, NULL};
    /* either half: the norm's output rebuilt (the router's weight
     * gradient reads it in the weight half, as its input gradient does in
     * the input half), cheaper than a kept [B·T,C] float32 copy a block */
    plait_status st = norm_forward(m, s, layer, r, 1, "before the router's weight gradient");
    if (st == PLAIT_OK && part == BWD_ALL) st = norm_params(m, PARAM_GRAD, layer, g);
    if (st == PLAIT_OK && (part & BWD_INPUT)) st = norm_params(m, PARAM_DATA, layer, p);
    /* recompute = full: the slot kept nothing of the experts (moe.c) */
    if (st == PLAIT_OK && m->desc->recompute == PLAIT_RECOMPUTE_FULL) st = plait_moe_rerun(m, s, layer, ln_full(m));
    if (st == PLAIT_OK && part == BWD_WEIGHT) return weight_half(m, s, layer, r, kept);
    if (st == PLAIT_OK) st = plait_moe_backward(m, s, layer, ln_full(m), dy, dln_full(m), part);
    if (st != PLAIT_OK) return st;
    if (part == BWD_INPUT) plait_model_keep(m, kept->dln2, dln_full(m), (size_t)(m->R * m->C));
    /* dr = dy + the norm's input gradient, over this rank's rows */
    norm_grads ng = plait_tp_norm_grads(m, g[0], g[1]);
    if (m->desc->is_llama) {
        m->k->rmsnorm_backward(dr, dy, ng.w, dln_full(m), r, p[0], a->ln2_rstd, m->R, m->C);
    } else {
        m->k->copy(dr, dy, (size_t)(m->R * m->C));
        m->k->layernorm_backward(dr, ng.w, ng.b, dln_full(m), r, p[0], a->ln2_mean, a->ln2_rstd, m->R, m->C);
    }
    if (m->dres_of == dr) m->dres_of = NULL; /* sb.dres no longer holds dr's copy */
    return plait_tp_norm_grads_sum(m, &ng, layer);
}
