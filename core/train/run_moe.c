/*
 * The mixture of experts at a step's end (run_moe.h). One all-reduce of
 * n_layer·experts + 3 doubles over the world a step: every global
 * micro-batch's routes are counted on the ranks that ran its sparse
 * blocks, each block's on its own pipeline stage, so the world's sum is
 * the global batch's, and every rank holding a block moves its bias by
 * the same counts.
 */
#include "train/run_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/optim.h>

#include "comm/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/run.h"

/* A router has collapsed when one expert took this share of a block's
 * tokens (each token counted once, whatever its k). */
#define COLLAPSE_SHARE 0.9
/* Steps between two collapse warnings. */
#define COLLAPSE_EVERY 100

static void warn_collapse(plait_run *run, int64_t step) {
    plait_run_moe *mo = &run->moe;
    const int32_t E = mo->experts, k = (int32_t)plait_config_int(run->cfg, "model", "moe_top_k");
    if (mo->warned_at >= 0 && step - mo->warned_at < COLLAPSE_EVERY) return;
    for (int32_t l = 0; l < mo->n_layer; l++) {
        const double *c = mo->sums + (size_t)l * (size_t)E;
        double total = 0.0;
        int32_t top = 0;
        for (int32_t e = 0; e < E; e++) {
            total += c[e];
            top = c[e] > c[top] ? e : top;
        }
        const double tokens = total / k;
        if (total <= 0 || c[top] < COLLAPSE_SHARE * tokens) continue;
        char list[512];
        size_t used = 0;
        for (int32_t e = 0; e < E && used < sizeof list; e++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%.0f", e ? " " : "", c[e]);
        PLAIT_WARN("train",
                   "step %lld: the router of block h.%d collapsed: expert %d took %.0f of %.0f tokens (routes per "
                   "expert: %s); raise [model] moe_aux_loss or set moe_bias_rate",
                   (long long)step, (int)l, (int)top, c[top], tokens, list);
        mo->warned_at = step;
    }
}

plait_status plait_run_moe_step(plait_run *run, int64_t step) {
    plait_run_moe *mo = &run->moe;
    const int32_t E = run->model.desc ? plait_model_moe_experts(run->model.desc) : 0;
    if (E == 0 || !run->model.instance) return PLAIT_OK;
    const size_t n = (size_t)run->model.spec->n_layer * (size_t)E;
    if (!mo->sums) {
        mo->sums = calloc(n + 3, sizeof *mo->sums);
        if (!mo->sums) return plait_set_error(PLAIT_ERR_NO_MEMORY, "the experts' counts: out of memory");
        mo->experts = E;
        mo->n_layer = run->model.spec->n_layer;
        mo->warned_at = -1;
    }
    plait_model_moe_take(run->model.instance, mo->sums, mo->sums + n);
    plait_status st = PLAIT_OK;
    if (run->world.mesh.world_size > 1) {
        plait_coll_opts opts = {.struct_size = sizeof opts, .label = "experts' counts"};
        st = plait_comm_allreduce(run->world.comm, mo->sums, mo->sums, n + 3, PLAIT_F64, PLAIT_SUM, &opts, NULL);
    }
    if (st == PLAIT_OK) st = plait_model_moe_balance(run->model.instance, mo->sums);
    if (st != PLAIT_OK) return plait_wrap_error(st, "the experts' counts of step %lld", (long long)step);
    if (run->world.mesh.world_rank == 0) warn_collapse(run, step);
    return PLAIT_OK;
}

plait_status plait_run_moe_check_layout(const plait_run *run) {
    const plait_mesh *m = &run->world.mesh;
    const int64_t E = plait_config_int(run->cfg, "model", "moe_experts");
    const char *where = "";
    if (m->ep > 1) {
        plait_config_origin(run->cfg, "parallel", "ep", &where);
        if (E == 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [parallel] ep = %d: expert parallelism splits a mixture-of-experts model's "
                                   "experts, and this model has none ([model] moe_experts = 0); set ep = 1, or give "
                                   "the model experts (docs/models.md)",
                                   where, m->ep);
        if (E % m->ep != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [parallel] ep = %d does not divide [model] moe_experts = %lld: each ep rank "
                                   "would hold moe_experts / ep experts (allowed: an ep dividing both %lld and dp x cp "
                                   "= %d)",
                                   where, m->ep, (long long)E, (long long)E, m->dp * m->cp);
        if (m->ep > PLAIT_MODEL_MAX_EP)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [parallel] ep = %d: a sparse block trades its tokens over at most %d ranks "
                                   "(allowed: ep from 1 to %d dividing moe_experts = %lld and dp x cp = %d)",
                                   where, m->ep, PLAIT_MODEL_MAX_EP, PLAIT_MODEL_MAX_EP, (long long)E, m->dp * m->cp);
    }
    if (E == 0) return PLAIT_OK;
    const int64_t F = plait_config_int(run->cfg, "model", "moe_ffn_hidden");
    if (m->tp > 1 && F % m->tp != 0) { /* each expert's width splits over tp, as a dense MLP's */
        plait_config_origin(run->cfg, "model", "moe_ffn_hidden", &where);
        char allowed[160];
        size_t used = 0;
        for (int t = 1; t <= F && t <= 64 && used < sizeof allowed; t++)
            if (F % t == 0)
                used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%d", t > 1 ? ", " : "", t);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] moe_ffn_hidden = %lld is not divisible by [parallel] tp = %d: each "
                               "expert's width is split over the tensor-parallel ranks (allowed: tp in {%s}, or "
                               "moe_ffn_hidden a multiple of %d)",
                               where, (long long)F, m->tp, allowed, m->tp);
    }
    /* the routing and the ep trades run on any device whose kernel table has
     * the experts' entries (the model refuses one without) */
    return PLAIT_OK;
}

/* Experts with a column of their own. */
static int32_t shown(int32_t experts) {
    return experts < PLAIT_MOE_METRIC_EXPERTS ? experts : PLAIT_MOE_METRIC_EXPERTS;
}

void plait_run_moe_columns(const plait_run *run, plait_metrics *m) {
    const int32_t E = run->model.desc ? plait_model_moe_experts(run->model.desc) : 0;
    if (E == 0) return;
    plait_metrics_column(m, "moe_aux_loss");
    plait_metrics_column(m, "moe_z_loss");
    plait_metrics_column(m, "moe_dropped");
    plait_metrics_column(m, "moe_max_load");
    for (int32_t e = 0; e < shown(E); e++) {
        char name[32];
        snprintf(name, sizeof name, "moe_tokens_%d", (int)e);
        plait_metrics_column(m, name);
    }
}

void plait_run_moe_metrics(const plait_run *run, plait_metrics *m) {
    const plait_run_moe *mo = &run->moe;
    if (!mo->sums) return;
    const int32_t E = mo->experts;
    const size_t n = (size_t)mo->n_layer * (size_t)E;
    plait_metrics_set_named(m, "moe_aux_loss", mo->sums[n]);
    plait_metrics_set_named(m, "moe_z_loss", mo->sums[n + 1]);
    plait_metrics_set_named(m, "moe_dropped", mo->sums[n + 2]);
    /* the busiest expert's routes over the mean, the worst block's */
    double worst = 0.0;
    for (int32_t l = 0; l < mo->n_layer; l++) {
        const double *c = mo->sums + (size_t)l * (size_t)E;
        double total = 0.0, top = 0.0;
        for (int32_t e = 0; e < E; e++) {
            total += c[e];
            top = c[e] > top ? c[e] : top;
        }
        if (total > 0 && top * E / total > worst) worst = top * E / total;
    }
    plait_metrics_set_named(m, "moe_max_load", worst);
    for (int32_t e = 0; e < shown(E); e++) {
        double sum = 0.0;
        for (int32_t l = 0; l < mo->n_layer; l++) sum += mo->sums[(size_t)l * (size_t)E + (size_t)e];
        char name[32];
        snprintf(name, sizeof name, "moe_tokens_%d", (int)e);
        plait_metrics_set_named(m, name, sum);
    }
}

void plait_run_moe_free(plait_run_moe *moe) {
    free(moe->sums);
    memset(moe, 0, sizeof *moe);
}
