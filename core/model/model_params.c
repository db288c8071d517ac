/*
 * The parameters a layer body reads, fetched by the part of the model they
 * belong to (model_internal.h: embedding_params, half_params, head_params),
 * their bf16 copies, and the errors that name a layer. The layer bodies
 * (gpt_layers.c, mlp.c, gpt_bf16.c, llama_layers.c, llama_bf16.c) and model.c call down into this file;
 * it calls nothing of the model's above it.
 */
#include <stddef.h>

#include "model/model_internal.h"
#include "runtime/error.h"

const char *plait_model_layer_name(const plait_model *m, int32_t layer) { return m->desc->layers[layer].name; }

plait_status plait_model_param_missing(const plait_model *m, int32_t gi, int32_t layer, param_part part) {
    if (part == PARAM_DATA)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: parameter %s has no data during layer %s (not local, or "
                               "released: the optimizer must gather it before the layer runs)",
                               m->desc->params[gi].name, plait_model_layer_name(m, layer));
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "model: parameter %s has no gradient storage during the backward of "
                           "layer %s",
                           m->desc->params[gi].name, plait_model_layer_name(m, layer));
}

/* The `n` consecutive parameters from global index `first`, all of layer
 * `layer`: their data or gradients into out[0..n). */
plait_status plait_model_tensors(plait_model *m, param_part part, int32_t layer, int32_t first, int32_t n,
                                 float **out) {
    for (int32_t i = 0; i < n; i++) {
        int32_t gi = first + i;
        plait_param *p = m->param[gi];
        out[i] = !p ? NULL : part == PARAM_DATA ? p->data : p->grad;
        /* a kept copy's parameter has no float32 values: the products read
         * the copy, and nothing reads out[i] */
        if (!out[i] && p && part == PARAM_DATA && m->wbf_kept && m->wbf_kept[gi]) continue;
        /* a buffer has no gradient (model_buffers.c), and no body adds one */
        if (!out[i] && p && part == PARAM_GRAD && (p->flags & PLAIT_PARAM_BUFFER)) continue;
        if (!out[i]) return plait_model_param_missing(m, gi, layer, part);
    }
    return PLAIT_OK;
}

plait_status plait_llama_block_tensors(plait_model *m, param_part part, int32_t layer, float **out) {
    const plait_model_desc *d = m->desc;
    const int n = desc_block_sparse(d, layer - 1) ? LP_GATE : LP_COUNT;
    for (int lp = 0; lp < LP_ALL; lp++) out[lp] = NULL;
    /* the parameters before o's lie one after another; with biases and q/k norms, o's and those after it
     * LP_BIASES and LP_QK_NORMS on */
    plait_status st = plait_model_tensors(m, part, layer, desc_llama_param(d, layer - 1, 0), LP_O, out);
    if (st == PLAIT_OK)
        st = plait_model_tensors(m, part, layer, desc_llama_param(d, layer - 1, LP_O), n - LP_O, out + LP_O);
    if (st == PLAIT_OK && d->qkv_bias)
        st = plait_model_tensors(m, part, layer, desc_llama_param(d, layer - 1, LP_QB), LP_BIASES, out + LP_QB);
    if (st == PLAIT_OK && d->qk_norm)
        st = plait_model_tensors(m, part, layer, desc_llama_param(d, layer - 1, LP_QN), LP_QK_NORMS, out + LP_QN);
    return st;
}

plait_status plait_model_embedding_params(plait_model *m, param_part part, embedding_params *out) {
    float *t[2];
    plait_status st = plait_model_tensors(m, part, 0, m->desc->p_wte, 2, t);
    *out = (embedding_params){.wte = t[0], .wpe = t[1]};
    return st;
}

plait_status plait_model_half_params(plait_model *m, param_part part, int32_t layer, int first_bp, half_params *out) {
    float *t[6];
    plait_status st = plait_model_tensors(m, part, layer, desc_block_param(m->desc, layer - 1, first_bp), 6, t);
    *out = (half_params){.ln_w = t[0], .ln_b = t[1], .in_w = t[2], .in_b = t[3], .out_w = t[4], .out_b = t[5]};
    return st;
}

plait_status plait_model_head_params(plait_model *m, param_part part, head_params *out) {
    float *t[3] = {NULL, NULL, NULL};
    const int biased = m->desc->p_lnf_b >= 0; /* LayerNorm's bias; RMSNorm has none */
    plait_status st = plait_model_tensors(m, part, m->desc->n_layer + 1, m->desc->p_lnf_w, biased ? 3 : 2, t);
    *out = biased ? (head_params){.ln_w = t[0], .ln_b = t[1], .w = t[2]} : (head_params){.ln_w = t[0], .w = t[1]};
    return st;
}

half_bf16 plait_model_half_bf16(const plait_model *m, int32_t layer, int first_bp) {
    const int32_t gi = desc_block_param(m->desc, layer - 1, first_bp);
    /* first_bp + 2, 3, 4: the projection in (weight, bias), the one out */
    return (half_bf16){.in_w = m->wbf[gi + 2], .in_b = m->wbf[gi + 3], .out_w = m->wbf[gi + 4]};
}

const plait_bf16 *plait_model_head_bf16(const plait_model *m) { return m->wbf[m->desc->p_lm_head]; }

plait_status plait_model_tp_error(plait_model *m, plait_status st, const char *what, int32_t layer) {
    return plait_wrap_error(st, "tensor-parallel %s in layer %s (tp rank %d of %d)", what,
                            plait_model_layer_name(m, layer), (int)m->tp_rank, (int)m->tp);
}
