/*
 * Hybrid (3-D) parallelism by composition: the dp, tp and pp plugins each
 * handle their axis of the mesh and this plugin calls them in a fixed order —
 * plans dp, tp, pp (each edits its own part of the plan); gradients finish in
 * the core's order (host->grad_finish_order: dp, then pp, then tp). An axis of size 1 is not loaded at all,
 * so `plugin = hybrid` works with whichever plugins a layout needs.
 */
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>


enum { AX_DP, AX_TP, AX_PP, N_AX };
static const char *const ax_name[N_AX] = {"dp", "tp", "pp"};

typedef struct hybrid_state {
    const plait_parallel_ops *ops[N_AX];
    void *state[N_AX];
    int finish[N_AX]; /* the axes in the core's gradient finish order */
    int n_finish;
} hybrid_state;

/* The axes in the order the core finishes gradients (plait_grad_finisher). */
static plait_status finish_order(const plait_host *host, hybrid_state *s) {
    if (!PLAIT_HOST_HAS(host, grad_finish_order))
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "hybrid: the host has no grad_finish_order (ABI 1.2); this core is ABI %u.%u",
                               PLAIT_ABI_VERSION_MAJOR(host->abi_version), PLAIT_ABI_VERSION_MINOR(host->abi_version));
    const plait_grad_finisher *order;
    int32_t n = host->grad_finish_order(&order);
    for (int32_t i = 0; i < n; i++) {
        int a = order[i] == PLAIT_GRAD_FINISH_DP ? AX_DP
                : order[i] == PLAIT_GRAD_FINISH_PP ? AX_PP
                : order[i] == PLAIT_GRAD_FINISH_TP ? AX_TP
                                                   : -1; /* the optimizer's and the core's steps follow ours */
        if (a >= 0 && s->n_finish < N_AX) s->finish[s->n_finish++] = a;
    }
    return PLAIT_OK;
}

static void hybrid_destroy(void *state) {
    hybrid_state *s = state;
    if (!s) return;
    for (int a = 0; a < N_AX; a++)
        if (s->ops[a] && s->state[a]) s->ops[a]->destroy(s->state[a]);
    free(s);
}

static plait_status hybrid_create(const plait_parallel_init *init, void **out) {
    const plait_host *host = init->host;
    hybrid_state *s = calloc(1, sizeof *s);
    if (!s) return host->set_error(PLAIT_ERR_NO_MEMORY, "hybrid: out of memory");
    plait_status fst = finish_order(host, s);
    if (fst != PLAIT_OK) {
        free(s);
        return fst;
    }
    const int sizes[N_AX] = {init->mesh->dp, init->mesh->tp, init->mesh->pp};
    /* without pipeline stages the pp plugin is not created, and its
     * settings would be silently ignored: refused as the pp plugin would */
    plait_value v;
    if (sizes[AX_PP] == 1 && host->config_get(init->config, "parallel.pp", "virtual_stages", &v) == PLAIT_OK &&
        v.i != 1) {
        hybrid_destroy(s);
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[parallel.pp] virtual_stages = %lld needs [parallel] pp >= 2 (pp is 1)", (long long)v.i);
    }
    if (sizes[AX_PP] == 1 && host->config_get(init->config, "parallel.pp", "stages", &v) == PLAIT_OK && v.s && *v.s) {
        hybrid_destroy(s);
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[parallel.pp] stages = %s partitions the layers over pipeline stages, but [parallel] "
                               "pp = 1 has none: set [parallel] pp >= 2 (one range a stage), or leave stages empty",
                               v.s);
    }
    for (int a = 0; a < N_AX; a++) {
        if (a != AX_DP && sizes[a] == 1) continue;
        s->ops[a] = host->plugin_ops(PLAIT_KIND_PARALLEL, ax_name[a]);
        if (!s->ops[a]) {
            hybrid_destroy(s);
            return PLAIT_ERR_INVALID_CONFIG; /* the loader's message says why */
        }
        plait_status st = s->ops[a]->create(init, &s->state[a]);
        if (st != PLAIT_OK) {
            hybrid_destroy(s);
            return st;
        }
    }
    *out = s;
    return PLAIT_OK;
}

#define EACH_AXIS(s, a) for (int a = 0; a < N_AX; a++) if ((s)->ops[a])

static plait_status hybrid_plan(void *state, plait_plan *plan) {
    hybrid_state *s = state;
    EACH_AXIS(s, a) {
        plait_status st = s->ops[a]->plan(s->state[a], plan);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static plait_status hybrid_bind(void *state, const plait_parallel_bind *bind) {
    hybrid_state *s = state;
    EACH_AXIS(s, a) {
        if (!s->ops[a]->bind) continue;
        plait_status st = s->ops[a]->bind(s->state[a], bind);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static plait_status hybrid_begin_step(void *state, int64_t step) {
    hybrid_state *s = state;
    EACH_AXIS(s, a) {
        if (!s->ops[a]->begin_step) continue;
        plait_status st = s->ops[a]->begin_step(s->state[a], step);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static plait_status hybrid_grads_ready(void *state, int32_t layer, int32_t mb, int last) {
    hybrid_state *s = state;
    EACH_AXIS(s, a) {
        if (!s->ops[a]->grads_ready) continue;
        plait_status st = s->ops[a]->grads_ready(s->state[a], layer, mb, last);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static plait_status hybrid_finish_grads(void *state) {
    hybrid_state *s = state;
    for (int i = 0; i < s->n_finish; i++) {
        int a = s->finish[i];
        if (!s->ops[a] || !s->ops[a]->finish_grads) continue;
        plait_status st = s->ops[a]->finish_grads(s->state[a]);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static void hybrid_step_stats(void *state, plait_parallel_stats *out) {
    hybrid_state *s = state;
    plait_parallel_stats sum = {.struct_size = sizeof sum};
    EACH_AXIS(s, a) {
        if (!s->ops[a]->step_stats) continue;
        plait_parallel_stats one = {.struct_size = sizeof one};
        s->ops[a]->step_stats(s->state[a], &one);
        sum.bytes_sent += one.bytes_sent;
        sum.wait_seconds += one.wait_seconds;
        sum.reductions += one.reductions;
        sum.early_reductions += one.early_reductions;
        sum.axis_bytes[a] = one.bytes_sent;
        sum.axis_wait_seconds[a] = one.wait_seconds;
    }
    plait_fill_versioned(out, &sum, (uint32_t)sizeof sum);
}

static const plait_parallel_ops hybrid_ops = {
    .struct_size = sizeof(plait_parallel_ops),
    /* ep: the dp plugin sums the experts' gradients over edp_comm */
    .axes = PLAIT_PARALLEL_AXIS_DP | PLAIT_PARALLEL_AXIS_TP | PLAIT_PARALLEL_AXIS_PP | PLAIT_PARALLEL_AXIS_CP |
            PLAIT_PARALLEL_AXIS_EP,
    .create = hybrid_create,
    .plan = hybrid_plan,
    .bind = hybrid_bind,
    .begin_step = hybrid_begin_step,
    .grads_ready = hybrid_grads_ready,
    .finish_grads = hybrid_finish_grads,
    .step_stats = hybrid_step_stats,
    .destroy = hybrid_destroy,
};

static const char *const hybrid_uses[] = {"dp", "tp", "pp", NULL};

static const plait_plugin_desc hybrid_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_PARALLEL,
    .name = "hybrid",
    .version = "0.1.0",
    .description = "3-D parallelism: composes the dp, tp and pp plugins over one mesh",
    .ops = &hybrid_ops,
    .uses = hybrid_uses,
};

PLAIT_PLUGIN_DEFINE_ENTRY("parallel/hybrid", 0, NULL, &hybrid_desc)
