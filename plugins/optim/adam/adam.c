/*
 * AdamW, the plain (non-sharded) optimizer plugin: every rank keeps the
 * moments of the parameters it holds (TP/PP-local, replicated over DP), the
 * core owns parameter and gradient storage, and gradients arrive already
 * reduced over the DP group.
 *
 * Per step: the exact global gradient norm (plait/optim_util.h: each distinct
 * gradient counted once over the world, summed in integers), clipping by
 * [optim] grad_clip, the learning rate of the schedule, then
 * host->kernels->adamw on each parameter — weight decay only on parameters
 * without PLAIT_PARAM_NO_DECAY (nanoGPT: no decay on biases and LayerNorm).
 * When the norm can stay on the device (one rank, kernels and trainer of
 * ABI 1.7: plait_optim_norm_on_device), the step reads nothing back: the
 * device computes Σg² and the clipping factor (sumsq_clip) and updates
 * every parameter in one call (adamw_multi), the same values as the host
 * path's; the trainer reads Σg² with the step's losses.
 *
 * Tied parameters: a PLAIT_PARAM_TIED_COPY whose original is held by the
 * same rank shares its storage and is skipped (its state is the original's);
 * the trainer has summed the copy's gradient into the original's before
 * step(). A copy on another pipeline stage keeps its own state and receives
 * the same summed gradient, so both stay identical.
 *
 * Bias correction uses the plugin's own update count (get_step/set_step,
 * saved in checkpoints), not the caller's step number.
 *
 * Parameter indices in export_tensor() and in the value source given to
 * materialize() are global indices (plait_param.index).
 *
 * [optim] moments = bf16 keeps the two moments in bf16 (bf16_moments.h):
 * each update widens them a piece at a time around the same adamw kernel,
 * and the step goes tensor by tensor (adamw_multi reads float32 moments).
 *
 * Device-agnostic (plait/device_util.h): the moments and the norm
 * accumulator are the device's memory, touched only by host->kernels; the
 * value source and export_tensor's dst are host memory, crossed with the
 * device's copy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/plugin.h>

#include "bf16_moments.h"
#include "offload.h"
#include "optim_common.h"

#define NAME "adam"

typedef struct adam {
    const plait_host *host;
    const plait_config *cfg;
    plait_param_set *params;
    plait_comm *world;
    plait_optim_hparams hp;
    plait_optim_topology topo;
    int64_t updates;        /* AdamW steps taken (bias-correction count) */
    float *state;           /* tensor memory: exp_avg of every owner, then exp_avg_sq */
    size_t state_numel;     /* elements in each half */
    float **exp_avg;        /* per local parameter; a tied copy points at its original's */
    float **exp_avg_sq;
    uint8_t *owns_state;    /* 1 if the parameter is updated by this rank's step */
    plait_optim_norm norm;  /* the exact Σ g² accumulator (tensor memory) */
    /* the step on the device (plait_optim_norm_on_device): the tensors as
     * one list for adamw_multi (a host copy, and tensor memory refreshed
     * when a pointer moved) and the clipping factor (tensor memory) */
    plait_adamw_tensor *list, *list_dev;
    size_t list_count, list_total;
    float *scale_dev;
    /* [optim] offload: the moments in host memory or a file instead of
     * `state` (offload.h); state_at[i] is parameter i's place in them */
    plait_optim_offload offload;
    optim_offload *store;
    /* [optim] moments = bf16: the moments there instead of `state`, at
     * state_at[i] as offloaded ones are (bf16_moments.h) */
    int moments16;
    bf16_moments m16;
    size_t *state_at;
    optim_offload_seg *segs;
    size_t n_segs;
} adam;

static const char *const state_names[] = {"exp_avg", "exp_avg_sq", NULL};

static void adam_destroy(void *sp) {
    adam *a = sp;
    if (!a) return;
    a->host->free(a->state);
    a->host->free(a->list_dev);
    a->host->free(a->scale_dev);
    free(a->list);
    optim_offload_close(a->store);
    bf16_moments_close(&a->m16);
    free(a->state_at);
    free(a->segs);
    plait_optim_norm_free(a->host, &a->norm);
    free(a->exp_avg);
    free(a->exp_avg_sq);
    free(a->owns_state);
    free(a);
}

static plait_status adam_create(const plait_optim_init *init, void **out) {
    *out = NULL;
    const plait_host *host = init->host;
    if (init->struct_size < offsetof(plait_optim_init, deterministic) + sizeof init->deterministic)
        return host->set_error(PLAIT_ERR_ABI, NAME ": plait_optim_init of %u bytes is older than this plugin",
                               init->struct_size);
    if (!PLAIT_HOST_HAS(host, kernels))
        return host->set_error(PLAIT_ERR_UNSUPPORTED, NAME ": the host provides no kernel library "
                                                      "(host->kernels is NULL)");
    if (!init->params) return host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": no parameter set");
    adam *a = calloc(1, sizeof *a);
    int32_t n = init->params->n_params;
    if (a) {
        a->exp_avg = calloc(n ? (size_t)n : 1, sizeof *a->exp_avg);
        a->exp_avg_sq = calloc(n ? (size_t)n : 1, sizeof *a->exp_avg_sq);
        a->owns_state = calloc(n ? (size_t)n : 1, 1);
        a->state_at = calloc(n ? (size_t)n : 1, sizeof *a->state_at);
        a->segs = calloc(n ? (size_t)n : 1, sizeof *a->segs);
    }
    if (!a || !a->exp_avg || !a->exp_avg_sq || !a->owns_state || !a->state_at || !a->segs) {
        if (a) {
            a->host = host;
            adam_destroy(a);
        }
        return host->set_error(PLAIT_ERR_NO_MEMORY, NAME ": out of memory");
    }
    a->host = host;
    a->cfg = init->config;
    a->params = init->params;
    a->world = init->world;
    plait_status st = plait_optim_read_hparams(host, init->config, &a->hp);
    if (st == PLAIT_OK) st = plait_optim_read_offload(host, init->config, NAME, &a->offload);
    if (st == PLAIT_OK && a->offload.params) st = optim_refuse_offload_params(host, init->config, NAME);
    if (st == PLAIT_OK) st = plait_optim_topology_from_init(init, &a->topo);
    if (st == PLAIT_OK) {
        int m16 = bf16_moments_wanted(host, init->config, NAME);
        if (m16 < 0) st = PLAIT_ERR_INVALID_CONFIG;
        a->moments16 = m16 > 0;
    }
    if (st == PLAIT_OK) st = plait_optim_norm_init(host, &a->norm);
    if (st != PLAIT_OK) {
        adam_destroy(a);
        return st;
    }
    for (int32_t i = 0; i < n; i++) a->owns_state[i] = plait_tied_local_original(a->params, &a->params->params[i]) < 0;
    *out = a;
    return PLAIT_OK;
}

/* Fill `count` elements of state `which` of parameter p: 1 if the source had
 * it, 0 if it did not (zeros written), -1 on error. */
static int fill_state(adam *a, const plait_value_source *src, const plait_param *p, const char *which, float *dst) {
    plait_status st = plait_tensor_read(a->host, src, p->index, which, 0, p->numel, dst);
    if (st == PLAIT_OK) return 1;
    if (st != PLAIT_ERR_UNSUPPORTED) return -1;
    a->host->kernels->zero(dst, p->numel);
    return 0;
}

/* materialize() with the moments outside `state`: offloaded (the store
 * opened, or made again, for this rank's elements) or in bf16, each
 * parameter's at state_at[i], filled from the source. */
static plait_status adam_materialize_elsewhere(adam *a, const plait_value_source *src, size_t total) {
    const plait_host *host = a->host;
    plait_param_set *set = a->params;
    optim_offload_close(a->store);
    a->store = NULL;
    bf16_moments_close(&a->m16);
    plait_status st;
    if (a->moments16) {
        st = bf16_moments_open(host, total, NAME, &a->m16);
    } else {
        int rank = a->world && host->coll ? host->coll->rank(a->world) : 0;
        st = optim_offload_open(host, NAME, &a->offload, rank, total, 0, &a->store);
        /* every parameter adam updates is read first by its layer's
         * forward, which waits for it (adam_before_forward), or by export */
        if (st == PLAIT_OK) optim_offload_defer(a->store);
    }
    if (st != PLAIT_OK) return st;
    const plait_param *present = NULL, *absent = NULL;
    const char *present_which = NULL, *absent_which = NULL;
    size_t off = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        if (!a->owns_state[i]) continue;
        const plait_param *p = &set->params[i];
        a->state_at[i] = off;
        for (int s = 0; s < 2; s++) {
            int got = a->store ? optim_offload_load(a->store, s, off, src, p->index, state_names[s], 0, p->numel)
                               : bf16_moments_load(&a->m16, s, off, src, p->index, state_names[s], 0, p->numel);
            if (got < 0) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", host->last_error());
                return host->set_error(PLAIT_ERR_PROTOCOL, NAME ": reading %s of %s: %s", state_names[s], p->name, msg);
            }
            if (got && !present) present = p, present_which = state_names[s];
            if (!got && !absent) absent = p, absent_which = state_names[s];
        }
        off += p->numel;
    }
    for (int32_t i = 0; i < set->n_params; i++)
        if (!a->owns_state[i]) a->state_at[i] = a->state_at[plait_tied_local_original(set, &set->params[i])];
    if (present && absent)
        return host->set_error(PLAIT_ERR_PROTOCOL,
                               NAME ": the optimizer state is incomplete: it has %s for %s but no %s for %s "
                                    "(a damaged or foreign checkpoint)",
                               present_which, present->name, absent_which, absent->name);
    return PLAIT_OK;
}

static plait_status adam_materialize(void *sp, const plait_value_source *src) {
    adam *a = sp;
    const plait_host *host = a->host;
    plait_param_set *set = a->params;
    host->free(a->state);
    a->state = NULL;
    size_t total = 0;
    for (int32_t i = 0; i < set->n_params; i++)
        if (a->owns_state[i]) total += set->params[i].numel;
    a->state_numel = total;
    if (a->offload.mode != PLAIT_OFFLOAD_NONE || a->moments16) return adam_materialize_elsewhere(a, src, total);
    a->state = plait_tensor_alloc(host, 2 * total, "optimizer state");
    if (!a->state) return PLAIT_ERR_NO_MEMORY; /* alloc set the message */
    size_t off = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        if (!a->owns_state[i]) continue;
        a->exp_avg[i] = a->state + off;
        a->exp_avg_sq[i] = a->state + total + off;
        off += set->params[i].numel;
    }
    for (int32_t i = 0; i < set->n_params; i++) {
        if (a->owns_state[i]) continue;
        int32_t orig = plait_tied_local_original(set, &set->params[i]);
        a->exp_avg[i] = a->exp_avg[orig];
        a->exp_avg_sq[i] = a->exp_avg_sq[orig];
    }
    /* A checkpoint holds all of the state or none of it. */
    const plait_param *present = NULL, *absent = NULL;
    const char *present_which = NULL, *absent_which = NULL;
    for (int32_t i = 0; i < set->n_params; i++) {
        if (!a->owns_state[i]) continue;
        const plait_param *p = &set->params[i];
        for (int s = 0; s < 2; s++) {
            int got = fill_state(a, src, p, state_names[s], s ? a->exp_avg_sq[i] : a->exp_avg[i]);
            if (got < 0) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", host->last_error());
                return host->set_error(PLAIT_ERR_PROTOCOL, NAME ": reading %s of %s: %s", state_names[s], p->name,
                                       msg);
            }
            if (got && !present) present = p, present_which = state_names[s];
            if (!got && !absent) absent = p, absent_which = state_names[s];
        }
    }
    if (present && absent)
        return host->set_error(PLAIT_ERR_PROTOCOL,
                               NAME ": the optimizer state is incomplete: it has %s for %s but no %s for %s "
                               "(a damaged or foreign checkpoint)",
                               present_which, present->name, absent_which, absent->name);
    host->log(PLAIT_LOG_DEBUG, NAME, "optimizer state: %zu elements per moment, %s", total,
              present ? "restored" : "zero-initialised");
    return PLAIT_OK;
}

/* The tensors this rank updates, as adamw_multi's list: rebuilt on the
 * host each step (the parameters' storage may have moved) and copied to
 * tensor memory only when it changed (in stream order: an update still
 * queued reads the old one first). */
static plait_status adam_tensor_list(adam *a) {
    const plait_host *host = a->host;
    plait_param_set *set = a->params;
    plait_adamw_tensor *t = calloc(set->n_params ? (size_t)set->n_params : 1, sizeof *t);
    if (!t) return host->set_error(PLAIT_ERR_NO_MEMORY, NAME ": out of memory");
    size_t count = 0, total = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        if (!a->owns_state[i]) continue;
        plait_param *p = &set->params[i];
        if (!p->data || !p->grad) {
            free(t);
            return host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": parameter %s has no storage", p->name);
        }
        t[count] = (plait_adamw_tensor){.param = p->data, .grad = p->grad, .m = a->exp_avg[i], .v = a->exp_avg_sq[i],
                                        .n = p->numel, .offset = total,
                                        .weight_decay = (p->flags & PLAIT_PARAM_NO_DECAY) ? 0.0f
                                                                                          : (float)a->hp.weight_decay};
        total += p->numel;
        count++;
    }
    size_t bytes = (count ? count : 1) * sizeof *t;
    if (a->list && a->list_count == count && memcmp(a->list, t, count * sizeof *t) == 0) {
        free(t);
        return PLAIT_OK;
    }
    if (!a->list_dev || a->list_count < count) {
        host->free(a->list_dev);
        a->list_dev = host->alloc(bytes, plait_tensor_kind(host), 64, "optimizer tensor list");
        if (!a->list_dev) {
            free(t);
            a->list_count = 0;
            return PLAIT_ERR_NO_MEMORY; /* alloc set the message */
        }
    }
    plait_status st = plait_tensor_copy(host, a->list_dev, t, count * sizeof *t, PLAIT_COPY_TO_DEVICE);
    free(a->list);
    a->list = t;
    a->list_count = st == PLAIT_OK ? count : 0;
    a->list_total = total;
    return st;
}

/* The step with the norm on the device: Σg², the clipping factor and every
 * update queued, nothing read back (the trainer reads Σg² with the loss). */
static plait_status adam_step_on_device(adam *a, const plait_optim_step_in *in, plait_optim_step_out *out) {
    const plait_host *host = a->host;
    const plait_kernels *k = host->kernels;
    plait_status st = plait_optim_norm_begin(host, &a->norm);
    if (st == PLAIT_OK) st = plait_optim_norm_add_set(host, &a->norm, &a->topo, a->params);
    if (st == PLAIT_OK) st = adam_tensor_list(a);
    if (st == PLAIT_OK && !a->scale_dev && !(a->scale_dev = plait_tensor_alloc(host, 1, "optimizer clip factor")))
        st = PLAIT_ERR_NO_MEMORY;
    if (st != PLAIT_OK) return st;
    k->sumsq_clip(in->sumsq_dev, a->scale_dev, a->norm.acc, a->hp.grad_clip);
    a->updates++;
    plait_adamw_args args = {.struct_size = sizeof args, .lr = (float)plait_optim_lr_at(&a->hp, in->step),
                             .beta1 = (float)a->hp.beta1, .beta2 = (float)a->hp.beta2, .eps = (float)a->hp.eps,
                             .step = a->updates, .grad_scale = 1.0f};
    k->adamw_multi(a->list_dev, a->list_count, a->list_total, &args, a->scale_dev);
    plait_optim_report_step_norm_on_device(out, plait_optim_lr_at(&a->hp, in->step));
    return PLAIT_OK;
}

static plait_status adam_step(void *sp, const plait_optim_step_in *in, plait_optim_step_out *out) {
    adam *a = sp;
    const plait_host *host = a->host;
    const plait_kernels *k = host->kernels;
    plait_param_set *set = a->params;
    if (!a->state && !a->store && !a->m16.m)
        return host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": step() before materialize()");
    /* adamw_multi reads float32 moments */
    if (a->state && plait_optim_norm_on_device(host, in, a->world)) return adam_step_on_device(a, in, out);

    double norm = 0;
    uint64_t sent = 0;
    double waited_before = plait_optim_wait_seconds(host, a->world, NULL);
    plait_status st = plait_optim_grad_norm_acc(host, &a->topo, set, a->world, &a->norm, &norm, &sent);
    if (st != PLAIT_OK) return st;
    plait_adamw_args args;
    st = optim_begin_update(host, NAME, &a->hp, in->step, norm, &a->updates, &args);
    if (st != PLAIT_OK) return st;
    double lr = plait_optim_lr_at(&a->hp, in->step); /* reported in double, as before */
    a->n_segs = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        if (!a->owns_state[i]) continue;
        plait_param *p = &set->params[i];
        if (!p->data || !p->grad)
            return host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": parameter %s has no storage", p->name);
        args.weight_decay = (p->flags & PLAIT_PARAM_NO_DECAY) ? 0.0f : (float)a->hp.weight_decay;
        if (a->store)
            a->segs[a->n_segs++] = (optim_offload_seg){.param = p->data,
                                                       .grad = p->grad,
                                                       .at = a->state_at[i],
                                                       .n = p->numel,
                                                       .weight_decay = args.weight_decay,
                                                       .layer = p->layer};
        else if (a->moments16) bf16_moments_adamw(&a->m16, p->data, p->grad, a->state_at[i], p->numel, &args);
        else k->adamw(p->data, p->grad, a->exp_avg[i], a->exp_avg_sq[i], p->numel, &args);
    }
    if (a->store && (st = optim_offload_step(a->store, a->segs, a->n_segs, &args, in->step + 1)) != PLAIT_OK) return st;
    plait_optim_report_step(out, lr, norm, sent, plait_optim_wait_seconds(host, a->world, NULL) - waited_before);
    return PLAIT_OK;
}

/* 1 if another local parameter is a tied copy of parameter i: its
 * gradient is folded into i's after the backward (PLAIT_GRAD_FINISH_TIED). */
static int has_tied_copy(const plait_param_set *set, int32_t i) {
    for (int32_t k = 0; k < set->n_params; k++)
        if (k != i && plait_tied_local_original(set, &set->params[k]) == i) return 1;
    return 0;
}

/* With offload = host on one rank, a layer's gradients are final after its
 * backward on the last micro-batch: their copies to the host start then,
 * beside the backward of the layers before it (offload.h). With more ranks
 * the gradients are reduced after this hook, so the step copies them all;
 * a parameter with a tied copy waits for the step too (its gradient gets
 * the copy's folded in after the backward). */
static plait_status adam_after_backward(void *sp, int32_t layer, int32_t mb, int last) {
    adam *a = sp;
    (void)mb;
    const plait_host *host = a->host;
    if (!last || !a->store || !optim_offload_posts(a->store)) return PLAIT_OK;
    if (a->world && host->coll && host->coll->size(a->world) > 1) return PLAIT_OK;
    plait_param_set *set = a->params;
    size_t n = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        plait_param *p = &set->params[i];
        if (p->layer != layer || !a->owns_state[i] || !p->data || !p->grad || has_tied_copy(set, i)) continue;
        float wd = (p->flags & PLAIT_PARAM_NO_DECAY) ? 0.0f : (float)a->hp.weight_decay;
        a->segs[n++] = (optim_offload_seg){
            .param = p->data, .grad = p->grad, .at = a->state_at[i], .n = p->numel, .weight_decay = wd, .layer = layer};
    }
    return optim_offload_post(a->store, a->segs, n);
}

/* With offload = host's copies overlapped, the last step's updated
 * parameters go back to the device beside this forward, layer by layer:
 * the layer's forward waits for its own (optim_offload_defer). */
static plait_status adam_before_forward(void *sp, int32_t layer, int32_t mb) {
    adam *a = sp;
    (void)mb;
    return optim_offload_ready(a->store, layer);
}

static plait_status adam_export(void *sp, int32_t param_index, const char *which, float *dst) {
    adam *a = sp;
    int32_t i = plait_param_set_find(a->params, param_index);
    if (i < 0)
        return a->host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": parameter %d is not held by this rank", param_index);
    const plait_param *p = &a->params->params[i];
    const float *src;
    if ((a->store || a->moments16) && strcmp(which, "param") != 0) {
        int s = strcmp(which, "exp_avg") == 0 ? 0 : strcmp(which, "exp_avg_sq") == 0 ? 1 : -1;
        if (s < 0)
            return a->host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": unknown tensor \"%s\" of %s", which, p->name);
        if (!dst) return PLAIT_OK;
        if (!a->store && !a->m16.m)
            return a->host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": %s of %s does not exist yet (materialize first)",
                                      which, p->name);
        return a->store ? optim_offload_get(a->store, s, a->state_at[i], dst, p->numel)
                        : bf16_moments_get(&a->m16, s, a->state_at[i], dst, p->numel);
    }
    /* a checkpoint reads the parameters the last step's copies back write */
    plait_status st = strcmp(which, "param") == 0 ? optim_offload_drain(a->store) : PLAIT_OK;
    if (st != PLAIT_OK) return st;
    if (strcmp(which, "param") == 0) src = p->data;
    else if (strcmp(which, "exp_avg") == 0) src = a->exp_avg[i];
    else if (strcmp(which, "exp_avg_sq") == 0) src = a->exp_avg_sq[i];
    else return a->host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": unknown tensor \"%s\" of %s", which, p->name);
    if (!src)
        return a->host->set_error(PLAIT_ERR_INVALID_ARG, NAME ": %s of %s does not exist yet (materialize first)",
                                  which, p->name);
    return dst ? plait_tensor_to_host(a->host, dst, src, p->numel) : PLAIT_OK;
}

static int64_t adam_get_step(void *sp) { return ((adam *)sp)->updates; }
static void adam_set_step(void *sp, int64_t step) { ((adam *)sp)->updates = step; }

static void adam_memory(void *sp, plait_optim_memory *out) {
    adam *a = sp;
    plait_optim_memory m = {.struct_size = sizeof m};
    /* Parameters with their own state count 4+4+8 bytes per element (the
     * ZeRO paper's accounting); a tied copy sharing its original's storage
     * still has its own gradient, which the core sums into the original's:
     * reported as a working buffer, as the ZeRO plugins do. */
    for (int32_t i = 0; i < a->params->n_params; i++) {
        size_t bytes = a->params->params[i].numel * sizeof(float);
        if (a->owns_state[i]) {
            m.param_bytes += bytes;
            m.grad_bytes += bytes;
        } else {
            m.buffer_bytes += bytes;
        }
    }
    m.state_bytes = a->store ? 0 : 2 * (uint64_t)a->state_numel * (a->moments16 ? 2 : sizeof(float));
    if (a->moments16) m.buffer_bytes += 4 * 3 * (uint64_t)BF16_PIECE; /* the bf16 moments' widening pieces */
    plait_fill_versioned(out, &m, (uint32_t)sizeof m);
}

/* ops.check: create()'s refusals of the keys on the layout, said before
 * any rank starts. */
static plait_status adam_check(const plait_host *host, const plait_config *cfg, const plait_optim_layout *layout) {
    plait_value v;
    plait_status st = plait_optim_check_offload_host(host, cfg, NAME, layout->host_memory);
    if (st == PLAIT_OK && host->config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK && v.i)
        st = optim_refuse_offload_params(host, cfg, NAME);
    return st;
}

static const plait_optim_ops adam_ops = {
    .struct_size = sizeof(plait_optim_ops),
    .flags = 0,
    .state_names = state_names,
    .create = adam_create,
    .materialize = adam_materialize,
    .before_forward = adam_before_forward,
    .after_backward = adam_after_backward,
    .step = adam_step,
    .export_tensor = adam_export,
    .get_step = adam_get_step,
    .set_step = adam_set_step,
    .memory = adam_memory,
    .destroy = adam_destroy,
    .check = adam_check,
};

static const plait_plugin_desc adam_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = NAME,
    .version = "1.0.0",
    .description = "AdamW with global-norm clipping and warmup + cosine schedule; state replicated over DP",
    .keys = NULL,
    .n_keys = 0,
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &adam_ops,
    .uses = NULL,
};

PLAIT_PLUGIN_DEFINE_ENTRY("optim/adam", 0, NULL, &adam_desc)
