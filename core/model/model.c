/*
 * The executable model of both architectures (gpt and mlp): creation from a
 * plan (which layers, which slices) and the layer-at-a-time entry points of
 * model.h. Activation memory is model_slots.c; the layer bodies are
 * gpt_layers.c (embedding, attention, head) and mlp.c (the MLP half of a
 * block, which is the whole block of the MLP arch); the parameters they
 * read come from model_params.c; the bf16 copy of the weights, and where
 * bf16 is granted, model_bf16.c. The top of the folder's layers
 * (core/model/LAYERS): it calls the bodies, nothing calls back up.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "model/model_bodies.h"
#include "model/ring_attention.h"
#include "runtime/error.h"
#include "runtime/memory.h"

/* ---- creation ------------------------------------------------------------ */

/* The llama arch's kernels, refused naming them where the device has
 * none; then the rotary angles' table. */
static plait_status llama_setup(plait_model *m) {
    if (!PLAIT_KERNELS_HAS_LLAMA(m->k))
        return plait_set_error(
            PLAIT_ERR_INVALID_CONFIG,
            "model: arch llama: the device's kernel table has no Llama kernels (ABI 1.10: RMSNorm, "
            "rotary positions, SwiGLU, grouped-query attention); the cpu and cuda devices have them");
    if (m->desc->qk_norm && !PLAIT_KERNELS_HAS_RING_ATTENTION(m->k))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: [model] qk_norm = true: the device's kernel table has no copy_rows (ABI "
                               "1.18), which moves the heads to their norms; the cpu and cuda devices have it");
    /* cos and sin of each token's angle at each frequency, in float32
     * whatever the run's precision, as Hugging Face computes them:
     * inv_freq_i = 1 / theta^(2i/HS) (scaled under rope_scaling,
     * rope_freq.h), angle = position · inv_freq_i */
    const int64_t T = m->T, half = m->HS / 2;
    const size_t bytes = (size_t)(2 * T * half) * sizeof(float);
    float *cs = malloc(bytes);
    m->rope_cs = plait_device_alloc(bytes, "activations");
    if (!cs || !m->rope_cs) {
        free(cs);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: the rotary angles' table (%zu bytes)", bytes);
    }
    for (int64_t i = 0; i < half; i++) {
        const float inv = plait_rope_inv_freq(m->desc->rope_theta, &m->desc->rope_scaling, i, m->HS);
        for (int64_t t = 0; t < T; t++) {
            const float angle = (float)(m->cp > 1 ? plait_cp_position(m, t) : t) * inv;
            cs[t * half + i] = cosf(angle);
            cs[T * half + t * half + i] = sinf(angle);
        }
    }
    m->act_bytes += bytes;
    plait_status st = plait_device_copy(m->rope_cs, cs, bytes, PLAIT_COPY_TO_DEVICE);
    free(cs);
    return st == PLAIT_OK ? PLAIT_OK : plait_wrap_error(st, "model: uploading the rotary angles' table");
}

static plait_status check_params(plait_model *m, const plait_model_create_args *args) {
    const plait_model_desc *d = m->desc;
    const plait_param_set *ps = args->params;
    for (int32_t i = 0; i < ps->n_params; i++) {
        plait_param *p = &ps->params[i];
        if (p->index < 0 || p->index >= d->spec.n_params)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter set entry %d has global index %d (the model "
                                   "has %d parameters)",
                                   (int)i, (int)p->index, (int)d->spec.n_params);
        m->param[p->index] = p;
    }
    /* the description's buffers are the model's own, whatever the set lists */
    plait_status bst = plait_model_buffers_setup(m);
    if (bst != PLAIT_OK) return bst;
    m->tp = 1;
    m->tp_rank = 0;
    m->ep = 1;
    m->ep_rank = 0;
    m->ep_comm = args->ep_comm;
    for (int32_t gi = 0; gi < d->spec.n_params; gi++) {
        const plait_param *g = &d->params[gi];
        if (!m->local_layer[g->layer]) continue;
        if (!m->param[gi])
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter %s of local layer %s is missing from the "
                                   "parameter set",
                                   g->name, plait_model_layer_name(m, g->layer));
        plait_param expect = *g;
        const plait_shard *second = args->plan->second_shards ? &args->plan->second_shards[gi] : NULL;
        plait_status st = plait_param_apply_shard(&expect, &args->plan->shards[gi]);
        if (st == PLAIT_OK && second) st = plait_param_apply_second(&expect, second);
        if (st != PLAIT_OK) return plait_wrap_error(st, "model");
        if (expect.numel != m->param[gi]->numel)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter %s holds %zu elements but its shard in the "
                                   "plan has %zu",
                                   g->name, m->param[gi]->numel, expect.numel);
        const plait_shard *sh = &expect.shard;
        int split = sh->dim >= 0 && sh->parts > 1;
        if (split && (g->flags & PLAIT_PARAM_EXPERT) && sh->dim == 0) { /* expert parallelism: moe.c */
            m->ep = sh->parts;
            m->ep_rank = sh->index;
            if (!second || second->dim < 0 || second->parts <= 1) continue;
            sh = second; /* tp × ep: each expert's width over tp, checked as any tp split */
        }
        if (g->tp_role == PLAIT_TP_REPLICATE) {
            if (split)
                return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                       "model: parameter %s is replicated under tensor "
                                       "parallelism but the plan splits it",
                                       g->name);
            continue;
        }
        int want_dim = g->shard.dim; /* the description's: 1 or 0, a stacked expert tensor's 2 or 1 */
        if (split && sh->dim != want_dim)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter %s must be split along dimension %d, the plan "
                                   "splits dimension %d",
                                   g->name, want_dim, (int)sh->dim);
        if (split && g->tp_role != PLAIT_TP_VOCAB && sh->padded_len != g->shape[want_dim])
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter %s may not be padded (padded length %lld, "
                                   "length %lld)",
                                   g->name, (long long)sh->padded_len,
                                   (long long)g->shape[want_dim]);
        if (split && g->tp_role == PLAIT_TP_COLUMN && sh->groups != g->shard.groups)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "model: parameter %s must be split as %d groups (q, k, v), the "
                                   "plan uses %d",
                                   g->name, (int)g->shard.groups, (int)sh->groups);
        if (split) {
            m->tp = sh->parts;
            m->tp_rank = sh->index;
        }
    }
    /* every split parameter must use the same TP group, and under TP every
     * splittable one must be split */
    if (m->tp > 1)
        for (int32_t gi = 0; gi < d->spec.n_params; gi++) {
            const plait_param *g = &d->params[gi];
            if (!m->local_layer[g->layer] || g->tp_role == PLAIT_TP_REPLICATE) continue;
            const plait_shard *sh = &args->plan->shards[gi];
            if ((g->flags & PLAIT_PARAM_EXPERT) && sh->dim == 0 && args->plan->second_shards)
                sh = &args->plan->second_shards[gi]; /* tp × ep: the width's split */
            if (sh->dim < 0 || sh->parts != m->tp || sh->index != m->tp_rank)
                return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                       "model: parameter %s is not split like the others (%d "
                                       "ways, slice %d): every tensor-parallel split must use "
                                       "the same group",
                                       g->name, (int)m->tp, (int)m->tp_rank);
        }
    if (m->tp > 1 && !m->tp_ops)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: the plan splits parameters %d ways but provides no "
                               "tensor-parallel operators (plan->tp_ops)",
                               (int)m->tp);
    return PLAIT_OK;
}

static plait_status vocab_slice(plait_model *m);

/* Context parallelism: this rank's share of the sequence (ring_attention.h),
 * on what the ring attention runs on (train/'s checks name the keys first). */
static plait_status cp_setup(plait_model *m, const plait_model_create_args *args) {
    m->cp = args->cp > 1 ? args->cp : 1;
    m->cp_rank = args->cp > 1 ? args->cp_rank : 0;
    m->cp_comm = args->cp_comm;
    if (m->cp == 1) return PLAIT_OK;
    const plait_model_desc *d = m->desc;
    if (!d->is_gpt && !d->is_llama)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "model: context parallelism splits attention, and the "
                                                         "mlp arch has none");
    if (m->T % (2 * m->cp) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "model: block_size %lld does not split into 2cp = %d chunks",
                               (long long)m->T, 2 * (int)m->cp);
    if (!m->cp_comm)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "model: context parallelism needs the mesh's cp group");
    if (!PLAIT_KERNELS_HAS_RING_ATTENTION(m->k))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: context parallelism needs ring attention in the device's kernel table "
                               "(plait/kernels.h, ABI 1.18), which this device lacks; use [device] plugin = cpu "
                               "or cuda, or [parallel] cp = 1");
    m->T /= m->cp;
    /* a bf16 run's K|V blocks in bf16 on the wire where the transport
     * carries them so (a host-memory one; nccl's device memory stays float32) */
    m->cp_wire_bf16 = args->activations_bf16 && plait_comm_p2p_bf16_carried(m->cp_comm, plait_device_mem_kind());
    return PLAIT_OK;
}

/* Sequence parallelism where the plan's operators ask for it
 * (plait_tp_ops.sequence_parallel, ABI 1.14): this rank's rows of the
 * residual stream (tp_conjugates.c). */
static plait_status sequence_setup(plait_model *m) {
    const plait_tp_ops *tp = m->tp_ops;
    m->R = m->B * m->T;
    m->row0 = 0;
    m->tp_overlap = tp && m->tp > 1 && PLAIT_TP_OPS_HAS(tp, enter_backward_start) && tp->overlap_input_grads &&
                    tp->wait && tp->enter_backward_start;
    if (!tp || m->tp < 2 || !PLAIT_TP_OPS_HAS(tp, wait) || !tp->sequence_parallel) return PLAIT_OK;
    if (!tp->allgather || !tp->reduce_scatter || !tp->wait)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: the plan's tensor-parallel operators ask for sequence "
                                                      "parallelism but lack allgather, reduce_scatter or wait");
    if (m->T % m->tp != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: sequence parallelism over %d ranks needs [model] block_size (%lld) divisible "
                               "by %d",
                               (int)m->tp, (long long)m->T, (int)m->tp);
    m->sp = 1;
    m->R = m->B * m->T / m->tp;
    m->row0 = m->tp_rank * m->R;
    return PLAIT_OK;
}

static plait_status derive_sizes(plait_model *m) {
    const plait_model_desc *d = m->desc;
    m->B = d->micro_batch;
    m->T = d->block_size;
    m->C = d->n_embd;
    const int heads = d->is_gpt || d->is_llama;
    m->NH = heads ? d->n_head : 1;
    m->HS = d->is_llama ? d->head_dim : heads ? m->C / m->NH : m->C;
    m->NKV = d->is_llama ? d->n_kv_head : m->NH;
    m->V = d->vocab_size;
    if (d->is_llama) { /* whole query heads with their key/value heads on each tp rank */
        if (m->NH % m->tp != 0 || m->NKV % m->tp != 0 || d->ffn_hidden % m->tp != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "model: tensor parallelism over %d ranks needs n_head (%lld), n_kv_head (%lld) "
                                   "and ffn_hidden (%lld) divisible by %d",
                                   (int)m->tp, (long long)m->NH, (long long)m->NKV, (long long)d->ffn_hidden,
                                   (int)m->tp);
        m->NHl = m->NH / m->tp;
        m->NKVl = m->NKV / m->tp;
        m->Cl = m->NHl * m->HS;
        m->Fl = d->ffn_hidden / m->tp;
        m->Wq = (m->NHl + 2 * m->NKVl) * m->HS;
        return vocab_slice(m);
    }
    if ((d->is_gpt && m->NH % m->tp != 0) || (4 * m->C) % m->tp != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: tensor parallelism over %d ranks needs n_head (%lld) and "
                               "4*n_embd (%lld) divisible by %d",
                               (int)m->tp, (long long)m->NH, (long long)(4 * m->C), (int)m->tp);
    m->NHl = m->NH / m->tp;
    m->Cl = m->NHl * m->HS;
    m->Fl = 4 * m->C / m->tp;
    return vocab_slice(m);
}

/* The vocabulary slice from the token table or the head, whichever is local. */
static plait_status vocab_slice(plait_model *m) {
    const plait_model_desc *d = m->desc;
    m->Vl = m->V;
    m->vocab_start = 0;
    int32_t gi = m->param[d->p_wte] ? d->p_wte : m->param[d->p_lm_head] ? d->p_lm_head : -1;
    if (gi >= 0) {
        plait_param tmp = d->params[gi];
        plait_status st = plait_param_apply_shard(&tmp, &m->plan->shards[gi]);
        if (st != PLAIT_OK) return st;
        m->Vl = tmp.local_shape[0];
        m->vocab_start = tmp.shard.parts > 1 ? (int64_t)tmp.shard.index * m->Vl : 0;
    }
    int64_t valid = m->V - m->vocab_start;
    m->vocab_valid = valid < 0 ? 0 : valid > m->Vl ? m->Vl : valid;
    return PLAIT_OK;
}

/* A model with experts: what its sparse blocks need of the layout and the
 * device, refused naming what would work; the routing's counters. */
static plait_status moe_setup(plait_model *m) {
    const int32_t E = m->desc->moe.experts;
    if (m->desc->moe.ffn % m->tp != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: [model] moe_ffn_hidden = %lld is not divisible by [parallel] tp = %d: each "
                               "expert's width splits over the tensor-parallel ranks (allowed: a tp dividing %lld)",
                               (long long)m->desc->moe.ffn, (int)m->tp, (long long)m->desc->moe.ffn);
    if (!PLAIT_KERNELS_HAS_MOE(m->k))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "model: [model] moe_experts = %d: the device's kernel table has no mixture-of-experts "
                               "entries (plait/kernels.h, ABI 1.21; the cpu and cuda devices have them): choose "
                               "[device] plugin = cpu or cuda, or a dense model",
                               (int)E);
    m->moe_counts = calloc((size_t)m->desc->n_layer * (size_t)E, sizeof *m->moe_counts);
    return m->moe_counts ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
}

int32_t plait_model_moe_experts(const plait_model_desc *desc) { return desc->moe.experts; }

void plait_model_moe_take(plait_model *m, double *counts, double *totals) {
    if (!m->moe_counts) return; /* no experts */
    const size_t n = (size_t)m->desc->n_layer * (size_t)m->desc->moe.experts;
    for (size_t i = 0; i < n; i++) counts[i] = (double)m->moe_counts[i];
    totals[0] = m->moe_aux;
    totals[1] = m->moe_z;
    totals[2] = (double)m->moe_dropped;
    memset(m->moe_counts, 0, n * sizeof *m->moe_counts);
    m->moe_aux = m->moe_z = 0.0;
    m->moe_dropped = m->moe_forwards = 0;
}

plait_status plait_model_moe_balance(plait_model *m, const double *counts) {
    const moe_desc *md = &m->desc->moe;
    if (md->experts == 0 || md->bias_rate <= 0) return PLAIT_OK;
    float *bias = malloc((size_t)md->experts * sizeof *bias);
    if (!bias) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory moving the selection bias");
    plait_status st = PLAIT_OK;
    for (int32_t l = 0; st == PLAIT_OK && l < m->desc->n_layer; l++) {
        if (!desc_block_sparse(m->desc, l) || !m->local_layer[l + 1]) continue;
        const int32_t gi = m->desc->moe_first[l] + MOE_BIAS; /* a buffer: the model's, whole */
        if ((st = plait_model_buffer_read(m, gi, bias)) != PLAIT_OK) break;
        const double *c = counts + (size_t)l * (size_t)md->experts;
        double mean = 0.0;
        for (int32_t e = 0; e < md->experts; e++) mean += c[e];
        mean /= md->experts;
        /* DeepSeek-V3: an expert below the mean load gains, above it loses */
        for (int32_t e = 0; e < md->experts; e++)
            bias[e] += (float)(c[e] < mean ? md->bias_rate : c[e] > mean ? -md->bias_rate : 0.0);
        st = plait_model_buffer_write(m, gi, bias);
    }
    free(bias);
    return st;
}

plait_status plait_model_create(const plait_model_desc *desc, const plait_model_create_args *args,
                                plait_model **out) {
    *out = NULL;
    const plait_plan *plan = args ? args->plan : NULL;
    if (!plan || !args->params || args->max_slots < 1 || !plan->shards ||
        !plan->layer_stage || plan->n_params != desc->spec.n_params ||
        plan->n_layers != desc->spec.n_layers)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: creating it needs a plan for %d parameters and %d layers, "
                               "a parameter set and at least one activation slot",
                               (int)desc->spec.n_params, (int)desc->spec.n_layers);
    plait_model *m = calloc(1, sizeof *m);
    if (!m) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
    m->desc = desc;
    m->k = args->kernels ? args->kernels : plait_device_kernels();
    m->plan = plan;
    m->tp_ops = plan->tp_ops;
    m->stage = args->stage;
    m->n_layers = desc->spec.n_layers;
    m->max_slots = args->max_slots;
    m->staged_slot = -1;
    m->split = args->split_backward != 0;
    m->param = calloc((size_t)desc->spec.n_params, sizeof *m->param);
    m->local_layer = calloc((size_t)m->n_layers, 1);
    m->slots = calloc((size_t)m->max_slots, sizeof *m->slots);
    plait_status st = PLAIT_OK;
    m->loss_dev = plait_device_alloc(sizeof(double) * (size_t)m->max_slots, "activations");
    if (!m->param || !m->local_layer || !m->slots || !m->loss_dev) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
        goto fail;
    }
    for (int32_t l = 0; l < m->n_layers; l++) m->local_layer[l] = plan->layer_stage[l] == m->stage;
    st = check_params(m, args);
    if (st == PLAIT_OK) st = derive_sizes(m);
    if (st == PLAIT_OK) st = cp_setup(m, args);
    if (st == PLAIT_OK) st = sequence_setup(m);
    if (st != PLAIT_OK) goto fail;
    if (desc->is_llama && (st = llama_setup(m)) != PLAIT_OK) goto fail;
    /* the scores of a fused attention never leave the kernels: a block
     * keeps each row's log-sum-exp instead of B·NH·T² probabilities (the
     * llama arch has only the fused, grouped-query one) */
    m->fused_attn = desc->is_llama || (desc->is_gpt && PLAIT_KERNELS_HAS_FUSED_ATTENTION(m->k, m->HS));
    if (m->cp > 1 && !m->fused_attn) { /* the ring keeps the fused attention's log-sum-exp rows */
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "model: context parallelism needs the fused attention (head size %lld, at most %d)",
                             (long long)m->HS, PLAIT_ATTENTION_FUSED_MAX_HS);
        goto fail;
    }
    m->fused_loss = PLAIT_KERNELS_HAS_FUSED_LOSS(m->k);
    m->fused_ln = PLAIT_KERNELS_HAS_FUSED_LAYERNORM(m->k);
    m->fused_gelu = PLAIT_KERNELS_HAS_FUSED_GELU(m->k);
    m->loss_scale = m->token_scale = 1.0f / (float)(m->B * m->T);
    /* bf16 activations where every kernel the GPT's one-pass backward runs
     * has its bf16 form and the layout needs nothing more (the rule:
     * plait_model_grants_bf16) */
    const plait_bf16_terms terms = {.requested = args->activations_bf16,
                                    .gpt = desc->is_gpt,
                                    .llama = desc->is_llama,
                                    /* qk_norm widens the bf16 heads for their norms (qk_norm.c) */
                                    .kernels = desc->is_llama
                                                   ? plait_model_kernels_llama_bf16(m->k) &&
                                                         (!desc->qk_norm || PLAIT_KERNELS_HAS_FROM_BF16(m->k))
                                                   : plait_model_kernels_bf16(m->k, m->HS),
                                    .context_parallel = m->cp > 1,
                                    .ring_bf16 = PLAIT_KERNELS_HAS_RING_ATTENTION_BF16(m->k),
                                    .head_size = m->HS,
                                    .n_embd = m->C};
    m->bf16 = plait_model_grants_bf16(&terms);
    m->bf16_head = m->bf16 && !m->tp_ops && (desc->is_gpt || desc->is_llama);
    if (args->residual_bf16 && (!args->activations_bf16 || !PLAIT_KERNELS_HAS_FROM_BF16(m->k))) {
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "[run] residual = bf16 needs %s: the residual stream rounds to bf16 and is widened "
                             "again where a layer reads it (residual = fp32 keeps it float32)",
                             args->activations_bf16 ? "a device whose kernels widen bf16 (from_bf16)"
                                                    : "[run] precision = bf16");
        goto fail;
    }
    m->residual_bf16 = args->residual_bf16 != 0;
    if (desc->moe.experts > 0 && (st = moe_setup(m)) != PLAIT_OK) goto fail;
    m->moe_bf16 = m->bf16 && desc->moe.experts > 0 &&
                  plait_model_moe_bf16(m->k, desc->is_llama, m->C, desc->moe.ffn / m->tp);
    /* parameters gathered for each layer and freed after (ZeRO-3): the
     * bf16 copy likewise, made while the layer runs */
    m->wbf_per_layer = args->params_gathered != 0;
    if (m->bf16 && (st = plait_model_bf16_weights_alloc(m)) != PLAIT_OK) goto fail;
    if (m->bf16) m->head_rows = plait_model_head_rows(m->B * m->T, m->Vl, plait_model_head_room(m), NULL);
    *out = m;
    return PLAIT_OK;
fail:
    plait_model_free(m);
    return st;
}

void plait_model_free(plait_model *m) {
    if (!m) return;
    if (m->slots)
        for (int32_t i = 0; i < m->max_slots; i++) plait_model_slot_release(m, &m->slots[i]);
    plait_device_free(m->scratch);
    plait_device_free(m->att_scratch);
    plait_device_free(m->sp_mem);
    plait_device_free(m->res_x);
    plait_device_free(m->rc_mem);
    plait_device_free(m->loss_dev);
    plait_device_free(m->rope_cs);
    plait_device_free(m->qkv_pack);
    plait_device_free(m->qkv_bias_pack);
    plait_device_free(m->qkn_scratch);
    plait_ring_attention_free(m);
    plait_device_free(m->wbf_mem);
    plait_device_free(m->moe_scratch);
    plait_device_free(m->moe_rc);
    plait_device_free(m->moe_held_act);
    plait_device_free(m->moe_send_x);
    plait_device_free(m->moe_held_y);
    plait_device_free(m->moe_held_grads);
    plait_device_free(m->moe_bf16_mem);
    plait_device_free(m->moe_bf16_dmem);
    plait_model_pool_free(m);
    plait_model_buffers_free(m);
    free(m->moe_counts);
    free(m->wbf);
    free(m->wbf_kept);
    free(m->wbf_slot);
    free(m->layer_epoch);
    free(m->slots);
    free(m->param);
    free(m->local_layer);
    free(m);
}

/* ---- entry points -------------------------------------------------------- */

plait_status plait_model_set_batch(plait_model *m, int32_t slot, const int32_t *tokens,
                                   const int32_t *targets) {
    model_slot *s = NULL;
    plait_status st = plait_model_slot_get(m, slot, &s);
    if (st != PLAIT_OK) return st;
    const int64_t n = m->B * m->T;
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *src = pass ? targets : tokens;
        if (!src) continue;
        for (int64_t i = 0; i < n; i++)
            if (src[i] >= m->V || (src[i] < 0 && !pass))
                return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                       "model: %s %d at position %lld of the micro-batch is outside "
                                       "the vocabulary [0, %lld)",
                                       pass ? "target" : "token", (int)src[i], (long long)i,
                                       (long long)m->V);
    }
    /* the upload: checked on the host above, copied to the device here */
    if (tokens) st = plait_device_copy(s->tokens, tokens, (size_t)n * sizeof *tokens, PLAIT_COPY_TO_DEVICE);
    if (targets && st == PLAIT_OK)
        st = plait_device_copy(s->targets, targets, (size_t)n * sizeof *targets, PLAIT_COPY_TO_DEVICE);
    if (st != PLAIT_OK) return plait_wrap_error(st, "model: uploading micro-batch %d", (int)slot);
    s->has_tokens |= tokens != NULL;
    s->has_targets |= targets != NULL;
    return PLAIT_OK;
}

void plait_model_set_loss_scale(plait_model *m, float scale) { m->loss_scale = m->token_scale = scale; }

void plait_model_set_target_scale(plait_model *m, float scale) { m->loss_scale = scale; }

void plait_model_keep_logits(plait_model *m, int keep) { m->keep_logits = keep != 0; }

void plait_model_forward_only(plait_model *m, int on) { m->forward_only = on != 0; }

static plait_status check_layer(plait_model *m, int32_t layer, const char *what) {
    if (layer < 0 || layer >= m->n_layers || !m->local_layer[layer])
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: %s of layer %d, which pipeline stage %d does not hold", what,
                               (int)layer, (int)m->stage);
    return PLAIT_OK;
}

static plait_status check_slot_layer(plait_model *m, const model_slot *s, int32_t slot, int32_t layer) {
    if (plait_model_slot_has(m, s, layer)) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: activation slot %d holds layers %d..%d, not layer %d",
                           (int)slot, (int)s->first, (int)s->last, (int)layer);
}

/* Whether a slot stores boundary l apart from the float32 stream the
 * layers read: in bf16 on the device, or in host memory. */
static int stored_apart(const model_slot *s, int32_t l) { return s->bound16[l] || (s->host_bound && s->host_bound[l]); }

/* [model] recompute_offload = host: boundary `src` (float32, on the
 * device) into its host store `dst`, through `tmp` (a free device buffer
 * of the boundary's size) where the store is bf16; and back. The copies
 * are the device's ordered ones: the host waits for the layer that wrote
 * the boundary, and the layer that reads it waits for the copy. */
static plait_status host_store(plait_model *m, void *dst, const float *src, float *tmp) {
    const size_t n = (size_t)(m->R * m->C);
    if (!m->residual_bf16) return plait_device_copy(dst, src, n * sizeof(float), PLAIT_COPY_TO_HOST);
    m->k->to_bf16((plait_bf16 *)(void *)tmp, src, n);
    return plait_device_copy(dst, tmp, n * sizeof(plait_bf16), PLAIT_COPY_TO_HOST);
}

static plait_status host_load(plait_model *m, float *dst, const void *src, float *tmp) {
    const size_t n = (size_t)(m->R * m->C);
    if (!m->residual_bf16) return plait_device_copy(dst, src, n * sizeof(float), PLAIT_COPY_TO_DEVICE);
    plait_status st = plait_device_copy(tmp, src, n * sizeof(plait_bf16), PLAIT_COPY_TO_DEVICE);
    if (st == PLAIT_OK) m->k->from_bf16(dst, (const plait_bf16 *)(const void *)tmp, n);
    return st;
}

/* A received boundary staged in res_x (plait_model_boundary) rounded into
 * its slot's bf16 store (exact, the sender's residual stream being bf16
 * already), or copied to its host store. Before anything else writes
 * res_x (res_y is free between layers). */
static plait_status staged_store(plait_model *m) {
    if (m->staged_slot < 0) return PLAIT_OK;
    model_slot *s = &m->slots[m->staged_slot];
    const int32_t l = m->staged_layer;
    m->staged_slot = -1;
    if (s->host_bound && s->host_bound[l]) return host_store(m, s->host_bound[l], m->res_x, m->res_y);
    m->k->to_bf16(s->bound16[l], m->res_x, (size_t)(m->R * m->C));
    return PLAIT_OK;
}

/* Under a bf16 residual stream or [model] recompute_offload, the
 * boundaries a slot stores apart that `layer` reads (its input, widened or
 * brought back into res_x) and, in a forward, writes (its output, into
 * res_y), as float32 while the layer runs: the layer bodies read and write
 * s->bound as ever. */
static plait_status residual_open(plait_model *m, model_slot *s, int32_t layer, int forward) {
    if (!m->res_x) return PLAIT_OK;
    plait_status st = staged_store(m); /* before res_x is written */
    const int32_t L = m->desc->n_layer;
    if (st == PLAIT_OK && layer >= 1 && layer - 1 <= L && stored_apart(s, layer - 1)) {
        if (s->bound16[layer - 1]) m->k->from_bf16(m->res_x, s->bound16[layer - 1], (size_t)(m->R * m->C));
        else st = host_load(m, m->res_x, s->host_bound[layer - 1], m->res_y); /* res_y: written after */
        s->bound[layer - 1] = m->res_x;
    }
    if (forward && layer <= L && stored_apart(s, layer)) s->bound[layer] = m->res_y;
    return st;
}

/* After the layer: a forward's output rounded to bf16, into the slot's
 * bf16 store, or copied to its host store, or rounded in place where the
 * slot keeps it float32 (sent on to the next stage: the pipeline's bf16
 * wire is then exact); residual_open's pointers cleared. */
static plait_status residual_close(plait_model *m, model_slot *s, int32_t layer, int forward, plait_status st) {
    if (!m->res_x) return st;
    const int32_t L = m->desc->n_layer;
    const size_t n = (size_t)(m->R * m->C);
    if (layer >= 1 && layer - 1 <= L && stored_apart(s, layer - 1)) s->bound[layer - 1] = NULL;
    if (!forward || layer > L) return st;
    if (stored_apart(s, layer)) {
        /* res_x, read, is free for the rounding */
        if (st == PLAIT_OK && s->bound16[layer]) m->k->to_bf16(s->bound16[layer], m->res_y, n);
        else if (st == PLAIT_OK) st = host_store(m, s->host_bound[layer], m->res_y, m->res_x);
        s->bound[layer] = NULL;
    } else if (st == PLAIT_OK && s->bound[layer] && m->residual_bf16) {
        plait_bf16 *tmp = (plait_bf16 *)(void *)m->res_x;
        m->k->to_bf16(tmp, s->bound[layer], n);
        m->k->from_bf16(s->bound[layer], tmp, n);
    }
    return st;
}

static plait_status forward_body(plait_model *m, model_slot *s, int32_t layer) {
    plait_status st;
    const int32_t L = m->desc->n_layer;
    if (m->desc->is_llama)
        return layer == 0       ? plait_llama_embedding_forward(m, s)
               : layer == L + 1 ? (m->bf16_head ? plait_llama_bf16_head_forward(m, s) : plait_llama_head_forward(m, s))
                                : plait_llama_block_forward(m, s, layer);
    if (layer == 0) return plait_gpt_embedding_forward(m, s);
    if (layer == L + 1) return m->bf16_head ? plait_bf16_head_forward(m, s) : plait_gpt_head_forward(m, s);
    const float *x = s->bound[layer - 1];
    if (m->bf16) {
        const float *r = s->blocks[layer - 1].res2;
        if ((st = plait_bf16_attention_forward(m, s, layer, x)) != PLAIT_OK) return st;
        return desc_block_sparse(m->desc, layer - 1) ? plait_moe_bf16_half_forward(m, s, layer, r, s->bound[layer])
                                                     : plait_bf16_mlp_forward(m, s, layer, r, s->bound[layer]);
    }
    const float *r = x;
    if (m->desc->is_gpt) {
        st = plait_gpt_attention_forward(m, s, layer, x);
        if (st != PLAIT_OK) return st;
        r = s->blocks[layer - 1].res2;
    }
    if (desc_block_sparse(m->desc, layer - 1)) return plait_moe_gpt_half_forward(m, s, layer, r, s->bound[layer]);
    return plait_mlp_half_forward(m, s, layer, r, s->bound[layer]);
}

plait_status plait_model_forward_layer(plait_model *m, int32_t layer, int32_t slot) {
    model_slot *s = NULL;
    plait_status st = check_layer(m, layer, "forward");
    if (st == PLAIT_OK) st = plait_model_slot_get(m, slot, &s);
    if (st == PLAIT_OK) st = check_slot_layer(m, s, slot, layer);
    if (st != PLAIT_OK) return st;
    /* the forward writes what the pending weight half reads */
    if (s->weight_due && s->weight_due[layer])
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: forward of layer %s in slot %d before the weight half of its last backward",
                               plait_model_layer_name(m, layer), (int)slot);
    if ((st = plait_model_bf16_weights_refresh(m, layer)) != PLAIT_OK) return st;
    /* the output the slot sends on is a pool buffer, of its gradient's
     * parity (model_slots.c) */
    if (layer <= m->desc->n_layer && plait_model_slot_has(m, s, layer) && !plait_model_slot_has(m, s, layer + 1)) {
        if (!(s->bound[layer] = plait_model_slot_grad(m, s, layer & 1))) return PLAIT_ERR_NO_MEMORY;
    }
    /* a slot's output may share its gradient buffer, whose bf16 copy
     * sb.dres then no longer is */
    if (layer <= m->desc->n_layer && m->dres_of && m->dres_of == s->bound[layer]) m->dres_of = NULL;
    if ((st = residual_open(m, s, layer, 1)) != PLAIT_OK) return residual_close(m, s, layer, 1, st);
    return residual_close(m, s, layer, 1, forward_body(m, s, layer));
}

/* Part `part` of block `layer`'s backward, what [model] recompute dropped
 * rebuilt first (for the weight half too: whatever ran in between may
 * have overwritten the shared buffers). */
static plait_status block_backward(plait_model *m, model_slot *s, int32_t layer, bwd_part part) {
    plait_status st = plait_recompute_block(m, s, layer, part == BWD_WEIGHT);
    if (st != PLAIT_OK) return st;
    float *dy = s->gbuf[layer & 1];
    float *dx = s->gbuf[(layer - 1) & 1];
    const float *x = s->bound[layer - 1];
    const float *r = m->desc->is_gpt ? s->blocks[layer - 1].res2 : x;
    if (m->bf16) {
        const block_grads *kept = part == BWD_ALL ? NULL : &s->wg[layer - 1]; /* the sparse half's dln2 */
        st = desc_block_sparse(m->desc, layer - 1) ? plait_moe_bf16_half_backward(m, s, layer, r, dy, dx, part, kept)
                                                   : plait_bf16_mlp_backward(m, s, layer, r, dy, dx, part);
        return st != PLAIT_OK ? st : plait_bf16_attention_backward(m, s, layer, x, dx, part);
    }
    block_grads one_pass = {.dy = dy, .dfch = m->s_dfc, .dln2 = m->s_dln, .dres2 = dx, .dqkv = m->s_dqkv,
                            .dln1 = m->s_dln};
    const block_grads *g = part == BWD_ALL ? &one_pass : &s->wg[layer - 1];
    if (desc_block_sparse(m->desc, layer - 1)) /* ln_2's gradient kept in the block's stash */
        st = plait_moe_gpt_half_backward(m, s, layer, r, dy, dx, part, part == BWD_ALL ? NULL : &s->wg[layer - 1]);
    else st = plait_mlp_half_backward(m, s, layer, r, dy, dx, part, g);
    if (st == PLAIT_OK && m->desc->is_gpt) st = plait_gpt_attention_backward(m, s, layer, x, dx, part, g);
    return st;
}

static plait_status backward_part(plait_model *m, int32_t layer, int32_t slot, bwd_part part) {
    static const char *const what[] = {"", "input half of the backward", "weight half of the backward", "backward"};
    model_slot *s = NULL;
    plait_status st = check_layer(m, layer, what[part]);
    if (st == PLAIT_OK) st = plait_model_slot_get(m, slot, &s);
    if (st == PLAIT_OK) st = check_slot_layer(m, s, slot, layer);
    if (st == PLAIT_OK) st = plait_model_scratch_get(m);
    if (st != PLAIT_OK) return st;
    if (part != BWD_ALL && !m->split)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: the %s of layer %s needs a model laid out for a split backward", what[part],
                               plait_model_layer_name(m, layer));
    int due = s->weight_due ? s->weight_due[layer] : 0;
    if (part == BWD_WEIGHT ? !due : due)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: %s of layer %s in slot %d %s", what[part],
                               plait_model_layer_name(m, layer), (int)slot,
                               due ? "while its weight half is still due" : "before its input half");
    if (m->wbf_per_layer && (st = plait_model_bf16_weights_refresh(m, layer)) != PLAIT_OK) return st;
    const int32_t L = m->desc->n_layer;
    /* the gradient buffers the layer reads and writes, from the pool: the
     * embedding's output gradient (0), the head's input gradient (L), or a
     * block's output's and input's; a block's or the head's weight half
     * reads what its input half kept in the slot instead */
    const int32_t g0 = layer == 0 ? 0 : layer == L + 1 ? L : layer - 1, g1 = layer == 0 || layer == L + 1 ? g0 : layer;
    if ((part != BWD_WEIGHT || layer == 0) &&
        (!plait_model_slot_grad(m, s, g0 & 1) || !plait_model_slot_grad(m, s, g1 & 1)))
        return PLAIT_ERR_NO_MEMORY;
    /* the input the forward read, for the recomputation too */
    if ((st = residual_open(m, s, layer, 0)) != PLAIT_OK) {
    } else if (m->desc->is_llama) {
        if (layer == 0) st = (part & BWD_WEIGHT) ? plait_llama_embedding_backward(m, s) : PLAIT_OK;
        else if (layer == L + 1)
            st = m->bf16_head ? plait_llama_bf16_head_backward(m, s, part) : plait_llama_head_backward(m, s, part);
        /* what [model] recompute dropped rebuilt first, for the weight half too */
        else if ((st = plait_recompute_block(m, s, layer, part == BWD_WEIGHT)) == PLAIT_OK)
            st = plait_llama_block_backward(m, s, layer, part);
    } else if (layer == 0) {
        /* the embedding has no input gradient: all of it is weights */
        if (part & BWD_WEIGHT) st = plait_gpt_embedding_backward(m, s);
    } else if (layer == L + 1) {
        m->dres_of = NULL; /* a float32 head under bf16 blocks writes the gradient sb.dres may stand for */
        st = m->bf16_head ? plait_bf16_head_backward(m, s, part)
                          : plait_gpt_head_backward(m, s, part, part == BWD_ALL ? m->s_dln : s->head_dln);
    } else {
        st = block_backward(m, s, layer, part);
    }
    st = residual_close(m, s, layer, 0, st);
    if (st == PLAIT_OK && part != BWD_ALL) s->weight_due[layer] = part == BWD_INPUT;
    return st;
}

plait_status plait_model_backward_layer(plait_model *m, int32_t layer, int32_t slot) {
    return backward_part(m, layer, slot, BWD_ALL);
}

plait_status plait_model_backward_input(plait_model *m, int32_t layer, int32_t slot) {
    return backward_part(m, layer, slot, BWD_INPUT);
}

plait_status plait_model_backward_weight(plait_model *m, int32_t layer, int32_t slot) {
    return backward_part(m, layer, slot, BWD_WEIGHT);
}

const double *plait_model_loss_sum_device(const plait_model *m, int32_t slot) {
    if (slot < 0 || slot >= m->max_slots || !m->slots[slot].has_loss) return NULL;
    return m->loss_dev + slot;
}

double plait_model_loss_sum(const plait_model *m, int32_t slot) {
    const double *dev = plait_model_loss_sum_device(m, slot);
    double sum = 0.0;
    if (dev && plait_device_copy(&sum, dev, sizeof sum, PLAIT_COPY_TO_HOST) != PLAIT_OK) return NAN;
    return sum;
}

const float *plait_model_logits(const plait_model *m, int32_t slot) {
    if (slot < 0 || slot >= m->max_slots || !m->slots[slot].has_logits) return NULL;
    return m->slots[slot].logits;
}

float *plait_model_boundary(plait_model *m, int32_t slot, int32_t layer) {
    model_slot *s = NULL;
    if (layer < 0 || layer > m->desc->n_layer || plait_model_slot_get(m, slot, &s) != PLAIT_OK) return NULL;
    /* a received boundary the slot stores in bf16 arrives in res_x, free
     * between layers; one staged there before is stored first */
    if (!stored_apart(s, layer) || plait_model_slot_has(m, s, layer)) return s->bound[layer];
    if (staged_store(m) != PLAIT_OK) return NULL;
    m->staged_slot = slot;
    m->staged_layer = layer;
    return m->res_x;
}

plait_status plait_model_boundary_store(plait_model *m, int32_t slot, int32_t layer) {
    return m->staged_slot == slot && m->staged_layer == layer ? staged_store(m) : PLAIT_OK;
}

float *plait_model_boundary_grad(plait_model *m, int32_t slot, int32_t layer) {
    model_slot *s = NULL;
    if (layer < 0 || layer > m->desc->n_layer || plait_model_slot_get(m, slot, &s) != PLAIT_OK) return NULL;
    float *g = plait_model_slot_grad(m, s, layer & 1);
    if (g && m->dres_of == g) m->dres_of = NULL; /* the caller may write it */
    return g;
}

size_t plait_model_boundary_numel(const plait_model *m) { return (size_t)(m->R * m->C); }

uint64_t plait_model_activation_bytes(const plait_model *m) { return m->act_bytes; }

uint64_t plait_model_host_activation_bytes(const plait_model *m) { return m->host_act_bytes; }
