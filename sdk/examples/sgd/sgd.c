/*
 * Example third-party plugin: SGD with momentum, PyTorch's formulation
 * (buf = momentum*buf + grad; param -= lr*buf), with decoupled weight decay
 * as AdamW has it (param -= lr*weight_decay*param, not on parameters marked
 * PLAIT_PARAM_NO_DECAY: biases and LayerNorm).
 *
 * It uses only the SDK: parameters, gradients and their DP reduction are the
 * core's; this plugin keeps one momentum buffer per parameter. Everything an
 * optimizer shares with plait's own comes from plait/optim_util.h, so it
 * honours [optim] exactly like adam does: lr, warmup_steps, min_lr,
 * lr_decay_steps and lr_schedule (warmup then cosine, or constant; the
 * schedules of ABI 1.36, linear, wsd and inverse_sqrt, the core refuses
 * beside a plugin declaring less, which this one does: declare 36 to
 * take them),
 * weight_decay, and grad_clip (clipping by the exact global gradient norm,
 * the same for every layout). Its own key is [optim.sgd] momentum. It
 * reports what it holds (parameters and gradients, owned by the core but
 * counted for this rank, and the momentum) for the start-up memory report.
 *
 * Device-agnostic (plait/device_util.h): the momentum lives in the device's
 * memory like the parameters; the plugin computes only with host->kernels
 * and crosses to host memory only with the device's copy, so the same
 * plugin trains on the cpu device and on a GPU. Hence abi_minor 3.
 *
 * It keeps its momentum beside the parameters, so it refuses [optim]
 * offload (the keys adam and ZeRO honour) rather than ignore it: in
 * create(), and through check() (ABI 1.34, optional) before any rank
 * starts, so `plait config check` and the launcher say it once; a core
 * before 1.34 never calls check(), and each rank's create() says it.
 */
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>
#include <plait/optim_util.h>

static const plait_host *host;

typedef struct sgd_state {
    plait_param_set *params;
    plait_comm *world;
    plait_optim_hparams hp;
    plait_optim_topology topo;
    double mu;
    float **momentum;       /* per local parameter; a tied copy points at its original's */
    uint8_t *owned;         /* 1 if momentum[i] was allocated for parameter i */
    int64_t step;
    plait_optim_norm norm;  /* the exact Σ g² accumulator, in the device's memory */
} sgd_state;

static void sgd_destroy(void *state) {
    sgd_state *s = state;
    for (int32_t i = 0; s->momentum && s->owned && i < s->params->n_params; i++)
        if (s->owned[i]) host->free(s->momentum[i]);
    plait_optim_norm_free(host, &s->norm);
    free(s->momentum);
    free(s->owned);
    free(s);
}

/* What sgd refuses of a configuration, in check() and create() alike. */
static plait_status sgd_refusals(const plait_host *h, const plait_config *cfg) {
    plait_value v;
    /* [optim] offload exists from ABI 1.12: an older core has no such key */
    if ((h->abi_version & 0xffffu) < 12 || h->config_get(cfg, "optim", "offload", &v) != PLAIT_OK || !v.s ||
        strcmp(v.s, "none") == 0)
        return PLAIT_OK;
    return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                        "%s: [optim] offload = %s: sgd keeps its momentum in the device's memory beside the "
                        "parameters; use offload = none, or an optimizer that offloads its state (adam, zero1-3)",
                        PLAIT_HOST_HAS(h, config_where) ? h->config_where(cfg, "optim", "offload") : "config", v.s);
}

static plait_status sgd_check(const plait_host *h, const plait_config *cfg, const plait_optim_layout *layout) {
    (void)layout; /* no rule of sgd's depends on the layout */
    return sgd_refusals(h, cfg);
}

static plait_status sgd_create(const plait_optim_init *init, void **out) {
    sgd_state *s = calloc(1, sizeof *s);
    if (!s) return host->set_error(PLAIT_ERR_NO_MEMORY, "sgd: out of memory");
    s->params = init->params;
    s->world = init->world;
    s->mu = plait_cfg_float(host, init->config, "optim.sgd", "momentum");
    s->momentum = calloc((size_t)init->params->n_params + 1, sizeof *s->momentum);
    s->owned = calloc((size_t)init->params->n_params + 1, 1);
    plait_status st = s->momentum && s->owned ? PLAIT_OK : host->set_error(PLAIT_ERR_NO_MEMORY, "sgd: out of memory");
    if (st == PLAIT_OK) st = sgd_refusals(host, init->config);
    if (st == PLAIT_OK) st = plait_optim_read_hparams(host, init->config, &s->hp);
    if (st == PLAIT_OK) st = plait_optim_topology_from_init(init, &s->topo);
    if (st == PLAIT_OK) st = plait_optim_norm_init(host, &s->norm);
    if (st != PLAIT_OK) {
        sgd_destroy(s);
        return st;
    }
    *out = s;
    return PLAIT_OK;
}

static plait_status sgd_materialize(void *state, const plait_value_source *src) {
    sgd_state *s = state;
    for (int32_t i = 0; i < s->params->n_params; i++) {
        plait_param *p = &s->params->params[i];
        if (plait_optim_tied_to_local(s->params, p)) continue; /* shares its original's, below */
        s->momentum[i] = plait_tensor_alloc(host, p->numel, "optimizer state");
        if (!s->momentum[i]) return PLAIT_ERR_NO_MEMORY;
        s->owned[i] = 1;
        if (plait_tensor_read(host, src, p->index, "momentum", 0, p->numel, s->momentum[i]) != PLAIT_OK)
            host->kernels->zero(s->momentum[i], p->numel);
    }
    for (int32_t i = 0; i < s->params->n_params; i++)
        if (!s->owned[i]) s->momentum[i] = s->momentum[plait_optim_local_index(s->params, s->params->params[i].tied_to)];
    return PLAIT_OK;
}

static plait_status sgd_step(void *state, const plait_optim_step_in *in, plait_optim_step_out *out) {
    sgd_state *s = state;
    double waited = plait_optim_wait_seconds(host, s->world, NULL), norm = 0;
    uint64_t sent = 0;
    plait_status st = plait_optim_grad_norm_acc(host, &s->topo, s->params, s->world, &s->norm, &norm, &sent);
    if (st != PLAIT_OK) return st;
    if (!(norm < 1e300)) /* NaN or Inf: change nothing */
        return host->set_error(PLAIT_ERR_INVALID_ARG, "sgd: the gradient norm at step %lld is not finite: training "
                               "diverged; no parameter was changed", (long long)in->step);
    double lr = plait_optim_lr_at(&s->hp, in->step);
    float clip = (float)plait_optim_clip_scale(s->hp.grad_clip, norm);
    for (int32_t i = 0; i < s->params->n_params; i++) {
        plait_param *p = &s->params->params[i];
        if (plait_optim_tied_to_local(s->params, p)) continue; /* shares storage with its original */
        if (!(p->flags & PLAIT_PARAM_NO_DECAY) && s->hp.weight_decay > 0)
            host->kernels->scale(p->data, p->numel, (float)(1.0 - lr * s->hp.weight_decay));
        host->kernels->scale(s->momentum[i], p->numel, (float)s->mu);
        host->kernels->axpy(s->momentum[i], p->grad, p->numel, clip);
        host->kernels->axpy(p->data, s->momentum[i], p->numel, (float)-lr);
    }
    s->step = in->step + 1;
    plait_optim_report_step(out, lr, norm, sent, plait_optim_wait_seconds(host, s->world, NULL) - waited);
    return PLAIT_OK;
}

static plait_status sgd_export(void *state, int32_t index, const char *which, float *dst) {
    sgd_state *s = state;
    int32_t i = plait_optim_local_index(s->params, index);
    if (i < 0) return host->set_error(PLAIT_ERR_INVALID_ARG, "sgd: parameter %d is not local", index);
    plait_param *p = &s->params->params[i];
    if (!dst) return PLAIT_OK;
    /* dst is host memory (the checkpoint writer's) */
    if (strcmp(which, "param") == 0) return plait_tensor_to_host(host, dst, p->data, p->numel);
    if (strcmp(which, "momentum") == 0) return plait_tensor_to_host(host, dst, s->momentum[i], p->numel);
    return host->set_error(PLAIT_ERR_UNSUPPORTED, "sgd has no state '%s'", which);
}

static int64_t sgd_get_step(void *state) { return ((sgd_state *)state)->step; }
static void sgd_set_step(void *state, int64_t step) { ((sgd_state *)state)->step = step; }

/* What this rank holds, in the ZeRO paper's accounting: the core's
 * parameter and gradient storage counts here too (4 bytes each per
 * element), plus one fp32 momentum. A tied copy sharing its original's
 * storage has only its own gradient, which the core sums into the
 * original's: a working buffer, as adam reports it. */
static void sgd_memory(void *state, plait_optim_memory *m) {
    sgd_state *s = state;
    plait_optim_memory mine = {.struct_size = sizeof mine};
    for (int32_t i = 0; i < s->params->n_params; i++) {
        const plait_param *p = &s->params->params[i];
        uint64_t bytes = (uint64_t)p->numel * sizeof(float);
        if (plait_optim_tied_to_local(s->params, p)) {
            mine.buffer_bytes += bytes;
            continue;
        }
        mine.param_bytes += bytes;
        mine.grad_bytes += bytes;
        mine.state_bytes += bytes;
    }
    plait_fill_versioned(m, &mine, (uint32_t)sizeof mine);
}

static const char *const sgd_state_names[] = {"momentum", NULL};

static const plait_optim_ops sgd_ops = {
    .struct_size = sizeof(plait_optim_ops),
    .state_names = sgd_state_names,
    .create = sgd_create,
    .materialize = sgd_materialize,
    .step = sgd_step,
    .export_tensor = sgd_export,
    .get_step = sgd_get_step,
    .set_step = sgd_set_step,
    .memory = sgd_memory,
    .destroy = sgd_destroy,
    .check = sgd_check,
};

static const plait_key_decl sgd_keys[] = {
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "momentum", PLAIT_KEY_FLOAT, "0.9", 0, 1, NULL,
     "momentum factor"},
};

static const plait_plugin_desc sgd_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = 3, /* keeps tensors in device memory (ABI 1.3); cores before 1.3 refuse it */
    .kind = PLAIT_KIND_OPTIM,
    .name = "sgd",
    .version = "1.3.0",
    .description = "SGD with momentum, schedule and clipping (example out-of-tree plugin)",
    .keys = sgd_keys,
    .n_keys = 1,
    .key_size = sizeof(plait_key_decl),
    .ops = &sgd_ops,
};

static const plait_plugin_desc *const sgd_list[] = {&sgd_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *h,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    host = h;
    *descs = sgd_list;
    *count = 1;
    return PLAIT_OK;
}
