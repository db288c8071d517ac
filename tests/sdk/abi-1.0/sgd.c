/*
 * Example third-party plugin: SGD with momentum (PyTorch's formulation:
 * buf = momentum*buf + grad; param -= lr*buf), decoupled weight decay off.
 * It uses only the SDK: parameters, gradients and their DP reduction are the
 * core's; this plugin keeps one momentum buffer per parameter and reads
 * `[optim] lr` (constant: no schedule) and its own `[optim.sgd] momentum`.
 * A minimal template: no clipping, no sharding.
 */
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>

static const plait_host *host;

typedef struct sgd_state {
    plait_param_set *params;
    float **momentum;
    double lr, mu;
    int64_t step;
} sgd_state;

static plait_status sgd_create(const plait_optim_init *init, void **out) {
    sgd_state *s = calloc(1, sizeof *s);
    if (!s) return host->set_error(PLAIT_ERR_NO_MEMORY, "sgd: out of memory");
    s->params = init->params;
    s->lr = plait_cfg_float(host, init->config, "optim", "lr");
    s->mu = plait_cfg_float(host, init->config, "optim.sgd", "momentum");
    s->momentum = calloc((size_t)init->params->n_params, sizeof *s->momentum);
    if (!s->momentum) {
        free(s);
        return host->set_error(PLAIT_ERR_NO_MEMORY, "sgd: out of memory");
    }
    *out = s;
    return PLAIT_OK;
}

static plait_status sgd_materialize(void *state, const plait_value_source *src) {
    sgd_state *s = state;
    for (int32_t i = 0; i < s->params->n_params; i++) {
        plait_param *p = &s->params->params[i];
        s->momentum[i] = host->alloc(p->numel * sizeof(float), PLAIT_MEM_HOST, 64, "optimizer state");
        if (!s->momentum[i]) return PLAIT_ERR_NO_MEMORY;
        if (src->read(src->ctx, p->index, "momentum", 0, p->numel, s->momentum[i]) != PLAIT_OK)
            memset(s->momentum[i], 0, p->numel * sizeof(float));
    }
    return PLAIT_OK;
}

/* A tied copy (the output head's view of the token embedding) living on the
 * same rank as its original shares its storage: update it only once. */
static int shares_storage_with_original(const plait_param_set *set, const plait_param *p) {
    if (!(p->flags & PLAIT_PARAM_TIED_COPY)) return 0;
    for (int32_t j = 0; j < set->n_params; j++)
        if (set->params[j].index == p->tied_to) return set->params[j].data == p->data;
    return 0;
}

static plait_status sgd_step(void *state, const plait_optim_step_in *in, plait_optim_step_out *out) {
    sgd_state *s = state;
    for (int32_t i = 0; i < s->params->n_params; i++) {
        plait_param *p = &s->params->params[i];
        if (shares_storage_with_original(s->params, p)) continue; /* updated through the original */
        host->kernels->scale(s->momentum[i], p->numel, (float)s->mu);
        host->kernels->axpy(s->momentum[i], p->grad, p->numel, 1.0f);
        host->kernels->axpy(p->data, s->momentum[i], p->numel, (float)-s->lr);
    }
    s->step = in->step + 1;
    out->lr = s->lr;
    out->grad_norm = 0;
    out->bytes_sent = 0;
    return PLAIT_OK;
}

static plait_status sgd_export(void *state, int32_t index, const char *which, float *dst) {
    sgd_state *s = state;
    for (int32_t i = 0; i < s->params->n_params; i++) {
        plait_param *p = &s->params->params[i];
        if (p->index != index) continue;
        if (!dst) return PLAIT_OK;
        if (strcmp(which, "param") == 0) memcpy(dst, p->data, p->numel * sizeof(float));
        else if (strcmp(which, "momentum") == 0) memcpy(dst, s->momentum[i], p->numel * sizeof(float));
        else return host->set_error(PLAIT_ERR_UNSUPPORTED, "sgd has no state '%s'", which);
        return PLAIT_OK;
    }
    return host->set_error(PLAIT_ERR_INVALID_ARG, "sgd: parameter %d is not local", index);
}

static int64_t sgd_get_step(void *state) { return ((sgd_state *)state)->step; }
static void sgd_set_step(void *state, int64_t step) { ((sgd_state *)state)->step = step; }

static void sgd_memory(void *state, plait_optim_memory *m) {
    sgd_state *s = state;
    m->state_bytes = s->params->numel * sizeof(float);
}

static void sgd_destroy(void *state) {
    sgd_state *s = state;
    for (int32_t i = 0; i < s->params->n_params; i++) host->free(s->momentum[i]);
    free(s->momentum);
    free(s);
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
};

static const plait_param_decl sgd_params[] = {
    {sizeof(plait_param_decl), PLAIT_PARAM_SAME_ON_ALL, "momentum", PLAIT_PARAM_FLOAT, "0.9", 0, 1, NULL,
     "momentum factor"},
};

static const plait_plugin_desc sgd_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = "sgd",
    .version = "1.0.0",
    .description = "SGD with momentum (example out-of-tree plugin)",
    .params = sgd_params,
    .n_params = 1,
    .param_size = sizeof(plait_param_decl),
    .ops = &sgd_ops,
};

static const plait_plugin_desc *const sgd_list[] = {&sgd_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *h,
                                            const plait_plugin_desc *const **descs, size_t *count);
PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *h,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    host = h;
    *descs = sgd_list;
    *count = 1;
    return PLAIT_OK;
}
