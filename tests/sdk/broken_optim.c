/*
 * Deliberately broken ZeRO optimizers for the conformance kit's tests: each
 * wraps plait's zero1 (every call forwarded) and breaks one rule of
 * plait/optim.h, chosen at compile time:
 *   BREAK_AVERAGE   the group's gradients are averaged, not summed (each
 *                   rank's gradient is divided by the group size before
 *                   zero1 reduces it)
 *   BREAK_MEMORY    memory() reports the whole optimizer state, not the
 *                   rank's shard
 *   BREAK_NAN       each step writes NaN into the first parameter's first
 *                   element after updating it (an optimizer that never
 *                   checks what it writes)
 *   BREAK_STEPCHDIR its 3rd step() changes the working directory to
 *                   $BROKEN_CHDIR_TO, on every rank
 *   BREAK_STEPENV   its 3rd step() on DP rank 1 sets PLAIT_STEP_SETTING
 *                   (a setting) and PLAIT_JOB_TOKEN (a secret)
 *   BREAK_CHECK     its check() refuses every configuration, those its
 *                   create() takes too
 *   BREAK_SILENTCREATE  create() returns PLAIT_ERR_SYSTEM without calling
 *                   host->set_error
 *   BREAK_SILENTSTEP its 3rd step() returns PLAIT_ERR_INTERNAL without
 *                   calling host->set_error (after zero1 read a checkpoint-
 *                   less value source, whose message is still the thread's)
 * (the last two break no rule of plait/optim.h but one of the process's,
 * runtime/process_state.h)
 */
#include <stdlib.h>
#include <unistd.h>

#include <plait/device_util.h>
#include <plait/optim.h>
#include <plait/plugin.h>

#ifndef BROKEN_NAME
#error BROKEN_NAME must name the plugin
#endif

static const plait_optim_ops *real(const plait_host *h) { return h->plugin_ops(PLAIT_KIND_OPTIM, "zero1"); }

/* the host the core handed the entry */
static const plait_host *broken_host;

static plait_param_set *g_params; /* the run's parameters (one instance at a time) */
static int g_size, g_rank;

static plait_status b_create(const plait_optim_init *init, void **state) {
    const plait_optim_ops *r = real(init->host);
    g_params = init->params;
    g_size = init->dp_comm ? init->host->coll->size(init->dp_comm) : 1;
    g_rank = init->dp_comm ? init->host->coll->rank(init->dp_comm) : 0;
#if defined(BREAK_SILENTCREATE)
    (void)r;
    (void)state;
    return PLAIT_ERR_SYSTEM;
#else
    return r ? r->create(init, state) : PLAIT_ERR_UNSUPPORTED;
#endif
}
static plait_status b_materialize(void *s, const plait_value_source *src) {
    return real(broken_host)->materialize(s, src);
}
static plait_status b_finish_grads(void *s) { return real(broken_host)->finish_grads(s); }
static plait_status b_after_backward(void *s, int32_t layer, int32_t mb, int last) {
    const plait_optim_ops *r = real(broken_host);
#if defined(BREAK_AVERAGE)
    for (int32_t i = 0; i < g_params->n_params; i++)
        if (g_params->params[i].layer == layer && g_params->params[i].grad)
            broken_host->kernels->scale(g_params->params[i].grad, g_params->params[i].numel, 1.0f / (float)g_size);
#endif
    return r->after_backward ? r->after_backward(s, layer, mb, last) : PLAIT_OK;
}
static plait_status b_step(void *s, const plait_optim_step_in *in, plait_optim_step_out *out) {
    plait_status st = real(broken_host)->step(s, in, out);
#if defined(BREAK_SILENTSTEP)
    if (st == PLAIT_OK && in->step == 2) return PLAIT_ERR_INTERNAL;
#endif
#if defined(BREAK_NAN)
    const float nan = __builtin_nanf("");
    if (st == PLAIT_OK && g_params->n_params > 0 && g_params->params[0].data)
        st = plait_tensor_from_host(broken_host, g_params->params[0].data, &nan, 1);
#endif
#if defined(BREAK_STEPCHDIR) || defined(BREAK_STEPENV)
    static int steps;
    if (st == PLAIT_OK && ++steps == 3) {
#if defined(BREAK_STEPCHDIR)
        const char *to = getenv("BROKEN_CHDIR_TO");
        if (!to || chdir(to) != 0) st = broken_host->set_error(PLAIT_ERR_SYSTEM, "chdir to $BROKEN_CHDIR_TO");
#else
        if (g_rank == 1) {
            setenv("PLAIT_STEP_SETTING", "3", 1);
            setenv("PLAIT_JOB_TOKEN", "hunter2", 1);
        }
#endif
    }
#endif
    return st;
}
static plait_status b_export(void *s, int32_t i, const char *which, float *dst) {
    return real(broken_host)->export_tensor(s, i, which, dst);
}
static int64_t b_get_step(void *s) { return real(broken_host)->get_step(s); }
static void b_set_step(void *s, int64_t step) { real(broken_host)->set_step(s, step); }
static void b_memory(void *s, plait_optim_memory *out) {
    real(broken_host)->memory(s, out);
#if defined(BREAK_MEMORY)
    out->state_bytes = 2 * out->param_bytes;
    out->padding_elems = 0;
#endif
}
static void b_destroy(void *s) { real(broken_host)->destroy(s); }

static const char *const state_names[] = {"exp_avg", "exp_avg_sq", NULL};

#if defined(BREAK_CHECK)
static plait_status b_check(const plait_host *host, const plait_config *cfg, const plait_optim_layout *layout) {
    (void)cfg;
    return host->set_error(PLAIT_ERR_INVALID_CONFIG, BROKEN_NAME ": refused on dp %d", (int)layout->dp);
}
#define B_CHECK b_check
#else
#define B_CHECK NULL
#endif

static const plait_optim_ops b_ops = {.struct_size = sizeof(plait_optim_ops),
                                      .flags = PLAIT_OPTIM_REDUCES_GRADS,
                                      .state_names = state_names,
                                      .create = b_create,
                                      .materialize = b_materialize,
                                      .after_backward = b_after_backward,
                                      .finish_grads = b_finish_grads,
                                      .step = b_step,
                                      .export_tensor = b_export,
                                      .get_step = b_get_step,
                                      .set_step = b_set_step,
                                      .memory = b_memory,
                                      .destroy = b_destroy,
                                      .check = B_CHECK};

static const char *const b_uses[] = {"zero1", NULL};

#if defined(BREAK_PROBE)
/* says it cannot run on this machine: never selected */
static plait_status b_probe(const plait_host *host) {
    return host->set_error(PLAIT_ERR_UNSUPPORTED, "no widget found");
}
#define B_PROBE b_probe
#else
#define B_PROBE NULL
#endif

static const plait_plugin_desc b_desc = {.struct_size = sizeof(plait_plugin_desc),
                                         .magic = PLAIT_PLUGIN_MAGIC,
                                         .abi_major = PLAIT_ABI_MAJOR,
                                         .abi_minor = 0,
                                         .kind = PLAIT_KIND_OPTIM,
                                         .name = BROKEN_NAME,
                                         .version = "0.0.1",
                                         .description = "a deliberately broken ZeRO optimizer (conformance kit test)",
                                         .probe = B_PROBE,
                                         .ops = &b_ops,
                                         .uses = b_uses};

static const plait_plugin_desc *const b_list[] = {&b_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    broken_host = host;
    *descs = b_list;
    *count = 1;
    return PLAIT_OK;
}
