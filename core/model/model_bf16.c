/*
 * Where the model runs bf16 and the bf16 copy of its weights: the rule
 * that grants bf16 activations (the kernels a path needs, the layouts it
 * runs under), which parameters a bf16 run reads as bf16 copies, and the
 * copies themselves, laid out once and made again before a layer runs
 * whenever its weights changed (model.c calls them around each layer).
 */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "model/tied.h"
#include "runtime/error.h"

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n > t && strcmp(s + n - t, tail) == 0;
}

/* The weights of every dense linear layer, and the biases of those whose
 * output is bf16 (a residual product adds its float32 bias to the float32
 * stream), found by name (model_desc.c's): a sparse block's router
 * (mlp.router.*) runs float32 and reads no copy; its experts
 * (mlp.experts.*, mlp.shared_experts.*: every weight and bias, their
 * outputs all bf16) where they run bf16 (moe_experts_bf16.c). */
int plait_model_bf16_copied(const plait_model_spec *spec, int32_t gi, int what) {
    if (gi < 0 || gi >= spec->n_params) return 0;
    const plait_param *p = &spec->params[gi];
    const int in_block = p->layer >= 1 && p->layer <= spec->n_layer;
    if (in_block && strstr(p->name, "experts.")) return (what & PLAIT_BF16_COPY_EXPERTS) != 0;
    const int block = in_block && !strstr(p->name, ".router.");
    if (strcmp(spec->arch, "llama") == 0) { /* a block's projections, named *_proj.weight, q's, k's and v's biases */
        if (p->layer == spec->n_layer + 1 && strcmp(p->name, "lm_head.weight") == 0) /* lm_head, tied or not */
            return (what & PLAIT_BF16_COPY_HEAD) != 0;
        return block && (ends_with(p->name, "_proj.weight") || ends_with(p->name, "_proj.bias"));
    }
    if (strcmp(spec->arch, "gpt") != 0) return 0;
    if (plait_tied_is_copy(p)) return (what & PLAIT_BF16_COPY_HEAD) != 0; /* lm_head */
    static const char *const copied[] = {".attn.c_attn.weight", ".attn.c_attn.bias", ".attn.c_proj.weight",
                                         ".mlp.c_fc.weight",    ".mlp.c_fc.bias",    ".mlp.c_proj.weight"};
    for (size_t i = 0; block && i < sizeof copied / sizeof copied[0]; i++)
        if (ends_with(p->name, copied[i])) return 1;
    return 0;
}

int plait_model_moe_bf16(const plait_kernels *k, int llama, int64_t C, int64_t F) {
    const int act = llama ? PLAIT_KERNELS_HAS_LLAMA_BF16(k) : PLAIT_KERNELS_HAS_BF16_ACTIVATIONS(k);
    return PLAIT_KERNELS_HAS_MOE_BF16(k) && act && PLAIT_KERNELS_HAS_FROM_BF16(k) && C % 8 == 0 && F % 8 == 0;
}

int plait_model_kernels_bf16(const plait_kernels *k, int64_t HS) {
    return PLAIT_KERNELS_HAS_FUSED_ATTENTION(k, HS) && PLAIT_KERNELS_HAS_FUSED_LOSS(k) &&
           PLAIT_KERNELS_HAS_FUSED_LAYERNORM(k) && PLAIT_KERNELS_HAS_FUSED_GELU(k) &&
           PLAIT_KERNELS_HAS_BF16_ACTIVATIONS(k);
}

int plait_model_kernels_llama_bf16(const plait_kernels *k) {
    return PLAIT_KERNELS_HAS_LLAMA(k) && PLAIT_KERNELS_HAS_LLAMA_BF16(k) && PLAIT_KERNELS_HAS_BF16_ACTIVATIONS(k) &&
           PLAIT_KERNELS_HAS_RING_ATTENTION(k);
}

int plait_model_grants_bf16(const plait_bf16_terms *t) {
    if (!t->requested || !t->kernels) return 0;
    if (t->context_parallel && (!t->ring_bf16 || t->head_size % 2)) return 0;
    return t->gpt || (t->llama && t->n_embd % 8 == 0);
}

/* Lays out (base NULL: measures) the bf16 copies of the local product
 * weights, each 16-byte aligned: one after the other, or where the copy
 * lives only while its layer runs (wbf_per_layer) each layer's from the
 * start of one buffer that the largest layer's fills. Returns the bf16
 * elements the buffer holds. */
static size_t bf16_weights_carve(plait_model *m, plait_bf16 *base) {
    const plait_model_desc *d = m->desc;
    size_t off = 0, most = 0;
    for (int32_t gi = 0, layer = -1; gi < d->spec.n_params; gi++) {
        if (!m->param[gi] || !m->local_layer[d->params[gi].layer] ||
            !plait_model_bf16_copied(&d->spec, gi, PLAIT_BF16_COPY_HEAD | (m->moe_bf16 ? PLAIT_BF16_COPY_EXPERTS : 0)))
            continue;
        if (m->wbf_kept && m->wbf_kept[gi] == WBF_LENT) { /* the optimizer's buffer, not ours */
            if (base) m->wbf[gi] = NULL;
            continue;
        }
        if (m->wbf_per_layer && d->params[gi].layer != layer) off = 0, layer = d->params[gi].layer;
        if (base) m->wbf[gi] = base + off;
        off += plait_model_bf16_copy_numel(m->param[gi]->numel);
        if (off > most) most = off;
    }
    return most;
}

plait_status plait_model_bf16_weights_alloc(plait_model *m) {
    m->wbf = calloc((size_t)m->desc->spec.n_params, sizeof *m->wbf);
    m->layer_epoch = calloc((size_t)m->n_layers, sizeof *m->layer_epoch);
    m->wbf_kept = calloc((size_t)m->desc->spec.n_params, sizeof *m->wbf_kept);
    m->wbf_bytes = bf16_weights_carve(m, NULL) * sizeof(plait_bf16);
    m->wbf_mem = plait_device_alloc(m->wbf_bytes ? m->wbf_bytes : 16, "parameters"); /* a copy of them */
    if (!m->wbf || !m->layer_epoch || !m->wbf_kept || !m->wbf_mem)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: the bf16 copy of the weights (%zu bytes)", m->wbf_bytes);
    bf16_weights_carve(m, m->wbf_mem);
    m->weights_epoch = 1; /* every layer's copy (epoch 0) is made at its first forward */
    m->wbf_layer = -1;
    return PLAIT_OK;
}

/* Before a forward of `layer` (and, where the copy lives only while its
 * layer runs, before each part of its backward): its bf16 weight copies
 * made again if the weights changed since they were made, or if another
 * layer's copy took the buffer since. The kernels that read a copy run on
 * the compute stream before the next layer's copy is made there, so one
 * buffer serves every layer. */
plait_status plait_model_bf16_weights_refresh(plait_model *m, int32_t layer) {
    if (!m->bf16) return PLAIT_OK;
    const plait_model_desc *d = m->desc;
    const plait_layer *ly = &d->layers[layer];
    /* a lent copy is where the optimizer's hook for this call put it */
    for (int32_t gi = ly->first_param; m->wbf_lent && gi < ly->first_param + ly->n_params; gi++) {
        if (m->wbf_kept[gi] != WBF_LENT) continue;
        m->wbf[gi] = *m->wbf_slot[gi];
        if (!m->wbf[gi])
            return plait_set_error(PLAIT_ERR_INTERNAL,
                                   "model: the bf16 values of %s were not gathered before layer %s ran",
                                   d->params[gi].name, plait_model_layer_name(m, layer));
    }
    if (m->layer_epoch[layer] == m->weights_epoch && (!m->wbf_per_layer || m->wbf_layer == layer)) return PLAIT_OK;
    m->wbf_layer = -1; /* the buffer holds no whole layer until the copies below are made */
    for (int32_t gi = ly->first_param; gi < ly->first_param + ly->n_params; gi++) {
        if (!m->wbf[gi] || m->wbf_kept[gi]) continue; /* a kept or lent copy: its owner fills it */
        if (!m->param[gi]->data) return plait_model_param_missing(m, gi, layer, PARAM_DATA);
        m->k->to_bf16(m->wbf[gi], m->param[gi]->data, m->param[gi]->numel);
    }
    m->layer_epoch[layer] = m->weights_epoch;
    m->wbf_layer = layer;
    return PLAIT_OK;
}

int plait_model_bf16_activations(const plait_model *m) { return m->bf16; }

int plait_model_experts_bf16(const plait_model *m) { return m->moe_bf16; }

int64_t plait_model_head_chunk_rows(const plait_model *m) { return m->bf16_head ? m->head_rows : 0; }

uint64_t plait_model_weight_copy_bytes(const plait_model *m) { return m->bf16 ? (uint64_t)m->wbf_bytes : 0; }

plait_bf16 *plait_model_keep_weight_copy(plait_model *m, int32_t gi) {
    if (!m->bf16 || gi < 0 || gi >= m->desc->spec.n_params || !m->wbf[gi] ||
        plait_tied_is_copy(&m->desc->spec.params[gi]))
        return NULL;
    m->wbf_kept[gi] = WBF_KEPT;
    return m->wbf[gi];
}

int plait_model_lend_weight_copy(plait_model *m, int32_t gi, void *const *slot) {
    if (!m->bf16 || !slot || gi < 0 || gi >= m->desc->spec.n_params || !m->wbf[gi] || m->wbf_kept[gi] ||
        plait_tied_is_copy(&m->desc->spec.params[gi]))
        return 0;
    if (!m->wbf_slot) {
        m->wbf_slot = calloc((size_t)m->desc->spec.n_params, sizeof *m->wbf_slot);
        if (!m->wbf_slot) return -1;
    }
    m->wbf_kept[gi] = WBF_LENT;
    m->wbf_slot[gi] = slot;
    m->wbf_lent = 1;
    return 1;
}

/* The buffer laid out again without the lent copies: where every copy of
 * a layer is lent (ZeRO-3 gathering them, llama's blocks) it holds what
 * is left, the gpt head's tied copy, or nothing. */
plait_status plait_model_settle_weight_copies(plait_model *m) {
    if (!m->bf16 || !m->wbf_lent) return PLAIT_OK;
    const size_t bytes = bf16_weights_carve(m, NULL) * sizeof(plait_bf16);
    plait_bf16 *mem = plait_device_alloc(bytes ? bytes : 16, "parameters");
    if (!mem) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: the bf16 copy of the weights (%zu bytes)", bytes);
    plait_device_free(m->wbf_mem);
    m->wbf_mem = mem;
    m->wbf_bytes = bytes;
    bf16_weights_carve(m, mem);
    m->wbf_layer = -1;
    m->weights_epoch++; /* every copy the buffer holds is made again */
    return PLAIT_OK;
}

void plait_model_weights_changed(plait_model *m) { m->weights_epoch++; }
