/*
 * The pipeline-parallel plugin ("pp"): splits the model's layers into
 * contiguous stages (balanced by cost or given explicitly), builds this
 * stage's instruction list (schedule.h) and sums the tied embedding's
 * gradient between the first and the last stage (Megatron's embedding
 * group). The trainer executes the list and moves activations; this plugin
 * does no communication except that sum.
 *
 * Order with other axes: finish_grads expects each half of the tied
 * gradient to be complete for the step (already reduced over DP when there
 * is a DP axis: the hybrid plugin calls DP's finish_grads first, and a ZeRO
 * optimizer reduces the half at its last backward), so the result is
 * (Σ embedding part) + (Σ head part), as one process computes it.
 */
#include <stdio.h>
#include <string.h>

#include <plait/plugin.h>
#include <plait/parallel.h>
#include <plait/device_util.h>
#include <plait/partition_util.h>

#include "partition.h"
#include "schedule.h"

#define COMPONENT "pp"
#define SECTION "parallel.pp"

static const char *const schedule_choices[] = {"gpipe", "1f1b", "interleaved", "zb1", NULL};

static const plait_key_decl pp_keys[] = {
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "schedule", PLAIT_KEY_ENUM, "1f1b", 1, 0,
     schedule_choices,
     "pipeline schedule: gpipe (all forward, then all backward), 1f1b, interleaved (needs "
     "virtual_stages >= 2), zb1 (zero bubble ZB-H1: 1f1b with each backward split into input and "
     "weight gradients, the weight halves filling the bubble)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "virtual_stages", PLAIT_KEY_INT, "1", 1,
     PP_MAX_CHUNKS, NULL,
     "model chunks per stage: >= 2 with schedule = interleaved (or looped gpipe), 1 otherwise"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "stages", PLAIT_KEY_STRING, "", 1, 0, NULL,
     "explicit partition: pp x virtual_stages layer ranges in model order, e.g. 0-3,4-7 (layer 0 = "
     "embedding, n_layer+1 = head); empty = balanced by compute cost"},
};

/* A tied parameter whose original and copy sit on different stages. */
typedef struct tied_pair {
    int32_t orig, copy;   /* global parameter indices */
    int32_t local;        /* this rank's one of them, or -1 */
} tied_pair;

typedef struct pp_state {
    const plait_host *host;
    const plait_mesh *mesh;
    const plait_model_spec *model;
    const plait_config *config; /* create()'s, for where a key was set */
    pp_schedule_kind kind;
    int32_t p, v, stage;
    int deterministic;
    int32_t *bounds;          /* p*v + 1 */
    tied_pair *tied;
    int32_t n_tied;
    plait_param_set *params;  /* from bind */
    plait_parallel_stats stats; /* this step */
} pp_state;

static int32_t stage_of_layer(const pp_state *s, int32_t layer) {
    for (int32_t k = 0; k < s->p * s->v; k++)
        if (layer < s->bounds[k + 1]) return k % s->p;
    return -1;
}

static void pp_destroy(void *state) {
    pp_state *s = state;
    if (!s) return;
    const plait_host *h = s->host;
    h->free(s->bounds);
    h->free(s->tied);
    h->free(s);
}

/* "FILE:LINE: " (or "command line '...': ") where [section] key was set,
 * into buf; "" from a core without config_where. */
static const char *where(const pp_state *s, const char *section, const char *key, char *buf, size_t n) {
    const char *w = PLAIT_HOST_HAS(s->host, config_where) ? s->host->config_where(s->config, section, key) : NULL;
    snprintf(buf, n, "%s%s", w ? w : "", w ? ": " : "");
    return buf;
}

static plait_status read_config(pp_state *s, const plait_parallel_init *init, const char **stages) {
    const plait_host *h = s->host;
    plait_value val;
    plait_status st = h->config_get(init->config, SECTION, "schedule", &val);
    if (st != PLAIT_OK) return st;
    char w[512];
    if (pp_schedule_parse(val.s, &s->kind) != 0)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG, "%s[%s] schedule = %s: use gpipe, 1f1b, interleaved or zb1",
                            where(s, SECTION, "schedule", w, sizeof w), SECTION, val.s ? val.s : "");
    if ((st = h->config_get(init->config, SECTION, "virtual_stages", &val)) != PLAIT_OK) return st;
    s->v = (int32_t)val.i;
    if ((st = h->config_get(init->config, SECTION, "stages", &val)) != PLAIT_OK) return st;
    *stages = val.s ? val.s : "";
    return PLAIT_OK;
}

static plait_status check_layout(const pp_state *s) {
    const plait_host *h = s->host;
    char w[512];
    if (s->kind == PP_SCHEDULE_INTERLEAVED && s->v < 2)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "%s[%s] schedule = interleaved needs virtual_stages >= 2 (it is %d); "
                            "with one chunk per stage use schedule = 1f1b",
                            where(s, SECTION, "schedule", w, sizeof w), SECTION, s->v);
    if ((s->kind == PP_SCHEDULE_1F1B || s->kind == PP_SCHEDULE_ZB1) && s->v != 1)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "%s[%s] virtual_stages = %d needs schedule = interleaved (%s runs one model "
                            "chunk per stage)",
                            where(s, SECTION, "virtual_stages", w, sizeof w), SECTION, s->v, pp_schedule_name(s->kind));
    if (s->v > 1 && s->p < 2)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG, "%s[%s] virtual_stages = %d needs [parallel] pp >= 2 (pp is %d)",
                            where(s, SECTION, "virtual_stages", w, sizeof w), SECTION, s->v, s->p);
    int64_t chunks = (int64_t)s->p * s->v;
    if (s->model->n_layers < chunks)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "%s[parallel] pp = %d x [%s] virtual_stages = %d makes %lld model chunks, but the "
                            "model has only %d layers (embedding, %d blocks, head) and each chunk needs one; "
                            "lower pp or virtual_stages, or raise [model] n_layer",
                            where(s, "parallel", "pp", w, sizeof w), s->p, SECTION, s->v, (long long)chunks,
                            s->model->n_layers, s->model->n_layer);
    return PLAIT_OK;
}

static plait_status make_partition(pp_state *s, const char *stages) {
    const plait_host *h = s->host;
    int32_t k = s->p * s->v, n = s->model->n_layers;
    char err[512] = "";
    plait_status st;
    if (stages && *stages) {
        st = plait_partition_parse(stages, n, k, s->bounds, err, sizeof err);
        char w[512];
        if (st != PLAIT_OK)
            return h->set_error(st, "%s[%s] %s", where(s, SECTION, "stages", w, sizeof w), SECTION, err);
        return PLAIT_OK;
    }
    double *costs = h->alloc((size_t)n * sizeof *costs, PLAIT_MEM_HOST, 0, "pp plan");
    if (!costs) return PLAIT_ERR_NO_MEMORY;
    for (int32_t i = 0; i < n; i++) costs[i] = s->model->layers[i].flops_per_token;
    st = plait_partition_balanced(costs, n, k, s->bounds, err, sizeof err);
    h->free(costs);
    if (st != PLAIT_OK) return h->set_error(st, "pipeline partition of %d layers into %d chunks: %s", n, k, err);
    return PLAIT_OK;
}

/* The partition, its costliest chunk and how far that is from an even
 * share, in the log (rank 0's). */
static void log_partition(const pp_state *s, int explicit) {
    const plait_host *h = s->host;
    const int32_t k = s->p * s->v, n = s->model->n_layers;
    double *costs = h->alloc((size_t)n * sizeof *costs, PLAIT_MEM_HOST, 0, "pp plan"), total = 0;
    if (!costs) return; /* out of memory: no log line, nothing else depends on it */
    for (int32_t i = 0; i < n; i++) total += costs[i] = s->model->layers[i].flops_per_token;
    const double worst = pp_partition_max_cost(costs, k, s->bounds);
    h->free(costs);
    char text[512];
    size_t need = plait_partition_format(s->bounds, k, 0, 1, text, sizeof text);
    h->log(PLAIT_LOG_INFO, COMPONENT,
           "%d stages x %d chunk%s, schedule %s; %s partition of layers %s%s; costliest chunk %.3g "
           "flops/token = %.2f x the even share",
           s->p, s->v, s->v == 1 ? "" : "s", pp_schedule_name(s->kind), explicit ? "explicit" : "balanced", text,
           need >= sizeof text ? "..." : "", worst, total > 0 ? worst * k / total : 1.0);
}

/* Tied copies whose original lives on another stage: the embedding group's
 * business. A pair split across stages other than the first and last could
 * not be summed over the embedding group, so it is refused. */
static plait_status find_tied(pp_state *s) {
    const plait_host *h = s->host;
    const plait_model_spec *md = s->model;
    int32_t n = 0;
    for (int32_t i = 0; i < md->n_params; i++)
        if (plait_tied_original(&md->params[i]) >= 0) n++;
    if (!n) return PLAIT_OK;
    s->tied = h->alloc((size_t)n * sizeof *s->tied, PLAIT_MEM_HOST, 0, "pp plan");
    if (!s->tied) return PLAIT_ERR_NO_MEMORY;
    for (int32_t i = 0; i < md->n_params; i++) {
        const plait_param *copy = &md->params[i];
        int32_t o = plait_tied_original(copy);
        if (o < 0) continue;
        if (o >= md->n_params)
            return h->set_error(PLAIT_ERR_INTERNAL, "parameter %s is tied to index %d of %d", copy->name, o,
                                md->n_params);
        const plait_param *orig = &md->params[o];
        int32_t so = stage_of_layer(s, orig->layer), sc = stage_of_layer(s, copy->layer);
        if (so == sc) continue; /* one rank holds both: the core sums them locally */
        if (!((so == 0 && sc == s->p - 1) || (so == s->p - 1 && sc == 0)))
            return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                                "tied parameters %s (stage %d) and %s (stage %d) must sit on the first and "
                                "last pipeline stages to share a gradient", orig->name, so, copy->name, sc);
        s->tied[s->n_tied++] = (tied_pair){
            .orig = orig->index, .copy = copy->index,
            .local = so == s->stage ? orig->index : sc == s->stage ? copy->index : -1};
    }
    return PLAIT_OK;
}

static plait_status pp_create(const plait_parallel_init *init, void **state) {
    if (!init || !init->host) return PLAIT_ERR_INVALID_ARG;
    const plait_host *h = init->host;
    if (init->struct_size < offsetof(plait_parallel_init, deterministic) + sizeof(int) || !init->mesh ||
        !init->model || !init->config)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "pp: create called without mesh, model or config");
    const plait_mesh *mesh = init->mesh;
    if (mesh->pp < 1 || mesh->pp_rank < 0 || mesh->pp_rank >= mesh->pp)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "pp: mesh has pp = %d, pp_rank = %d", mesh->pp, mesh->pp_rank);
    pp_state *s = h->alloc(sizeof *s, PLAIT_MEM_HOST, 0, "pp plan");
    if (!s) return PLAIT_ERR_NO_MEMORY;
    memset(s, 0, sizeof *s);
    s->stats.struct_size = sizeof s->stats;
    s->host = h;
    s->mesh = mesh;
    s->model = init->model;
    s->config = init->config;
    s->p = mesh->pp;
    s->stage = mesh->pp_rank;
    s->deterministic = init->deterministic;
    const char *stages = "";
    plait_status st = read_config(s, init, &stages);
    if (st == PLAIT_OK) st = check_layout(s);
    if (st == PLAIT_OK) {
        s->bounds = h->alloc(((size_t)s->p * s->v + 1) * sizeof *s->bounds, PLAIT_MEM_HOST, 0, "pp plan");
        st = s->bounds ? make_partition(s, stages) : PLAIT_ERR_NO_MEMORY;
    }
    if (st == PLAIT_OK) st = find_tied(s);
    if (st != PLAIT_OK) {
        pp_destroy(s);
        return st;
    }
    if (mesh->world_rank == 0) log_partition(s, stages && *stages);
    *state = s;
    return PLAIT_OK;
}

static plait_status pp_plan(void *state, plait_plan *plan) {
    pp_state *s = state;
    const plait_host *h = s->host;
    if (plan->struct_size < offsetof(plait_plan, bubble_formula) + sizeof(double))
        return h->set_error(PLAIT_ERR_ABI, "pp: the core's plan (%u bytes) lacks the pipeline fields",
                            plan->struct_size);
    if (plan->n_layers != s->model->n_layers || !plan->layer_stage || !plan->layer_chunk)
        return h->set_error(PLAIT_ERR_INTERNAL, "pp: plan has %d layers, model %d", plan->n_layers,
                            s->model->n_layers);
    int32_t m = plan->micro_batches;
    char err[256] = "";
    if (pp_schedule_check(s->kind, s->p, s->stage, m, s->v, err, sizeof err) != PLAIT_OK)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG, "pp: %s", err);
    size_t n = 0;
    plait_status st = pp_schedule_build(s->kind, s->p, s->stage, m, s->v, plan->schedule, plan->capacity,
                                        &n, err, sizeof err);
    if (st == PLAIT_ERR_NO_MEMORY) {
        plan->n_instr = n;
        return h->set_error(st, "pp: %s", err);
    }
    if (st != PLAIT_OK) return h->set_error(st, "pp: %s", err);
    plan->n_instr = n;
    pp_partition_assign(s->bounds, s->p, s->v, plan->layer_stage, plan->layer_chunk);
    plan->chunks = s->v;
    double bubble = pp_schedule_bubble(s->kind, s->p, m, s->v);
    plan->bubble_formula = bubble;
    char vtext[24] = "";
    if (s->v > 1) snprintf(vtext, sizeof vtext, " v=%d", s->v);
    snprintf(plan->summary, sizeof plan->summary, "pp=%d %s%s m=%d: bubble %s = %.1f%%", s->p,
             pp_schedule_name(s->kind), vtext, m, pp_schedule_bubble_formula(s->kind, s->p, m, s->v),
             100.0 * bubble);
    if (s->v > 1 && m < s->p && s->mesh->world_rank == 0)
        h->log(PLAIT_LOG_WARN, COMPONENT,
               "%d micro-batch%s a step, fewer than the %d stages: the bubble is %.1f%%; with %d (m = pp: a "
               "smaller [data] micro_batch or more accumulation) it would be %.1f%% ((p-1)/(v*m+p-1))",
               m, m == 1 ? "" : "es", s->p, 100.0 * bubble, s->p,
               100.0 * pp_schedule_bubble(s->kind, s->p, s->p, s->v));
    return PLAIT_OK;
}

static plait_status pp_bind(void *state, const plait_parallel_bind *bind) {
    pp_state *s = state;
    const plait_host *h = s->host;
    if (!bind || !bind->params) return h->set_error(PLAIT_ERR_INVALID_ARG, "pp: bind without parameters");
    s->params = bind->params;
    for (int32_t t = 0; t < s->n_tied; t++) {
        if (s->tied[t].local < 0) continue;
        int found = 0;
        for (int32_t i = 0; i < s->params->n_params && !found; i++) found = s->params->params[i].index == s->tied[t].local;
        if (!found)
            return h->set_error(PLAIT_ERR_INTERNAL, "pp: stage %d should hold parameter %s but its set lacks it",
                                s->stage, s->model->params[s->tied[t].local].name);
    }
    return PLAIT_OK;
}

static plait_status pp_begin_step(void *state, int64_t step) {
    (void)step;
    pp_state *s = state;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.struct_size = sizeof s->stats;
    return PLAIT_OK;
}

static plait_param *local_param(pp_state *s, int32_t index) {
    for (int32_t i = 0; i < s->params->n_params; i++)
        if (s->params->params[i].index == index) return &s->params->params[i];
    return NULL;
}

/* Sum each tied gradient over the embedding group (first and last stage).
 * Both members end with embedding part + head part; with two members every
 * algorithm adds each element once, and IEEE addition is commutative, so the
 * bits equal one process's `wte grad + head grad`. Deterministic mode still
 * asks for the canonical ordered algorithm. */
static plait_status pp_finish_grads(void *state) {
    pp_state *s = state;
    const plait_host *h = s->host;
    int32_t mine = 0;
    for (int32_t t = 0; t < s->n_tied; t++) mine += s->tied[t].local >= 0;
    if (!mine) return PLAIT_OK;
    if (!s->params) return h->set_error(PLAIT_ERR_INVALID_ARG, "pp: finish_grads before bind");
    plait_comm *comm = s->mesh->embed_comm;
    if (!comm || !h->coll)
        return h->set_error(PLAIT_ERR_INTERNAL,
                            "pp: stage %d holds a tied parameter but the core gave no embedding group", s->stage);
    plait_comm_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    h->coll->stats(comm, &before);
    double t0 = h->now();
    plait_coll_opts opts = plait_tensor_coll_opts(h, s->deterministic ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO,
                                                  "pp tied embedding grad");
    for (int32_t t = 0; t < s->n_tied; t++) {
        if (s->tied[t].local < 0) continue;
        plait_param *prm = local_param(s, s->tied[t].local);
        if (!prm || !prm->grad)
            return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                                "pp: the gradient of %s is not held on stage %d (released by a sharding "
                                "optimizer?); the tied embedding needs it whole on the first and last stage",
                                s->model->params[s->tied[t].local].name, s->stage);
        plait_status st = h->coll->allreduce(comm, prm->grad, prm->grad, prm->numel, PLAIT_F32, PLAIT_SUM,
                                             &opts, NULL);
        if (st != PLAIT_OK) return st;
        s->stats.reductions++;
    }
    s->stats.wait_seconds += h->now() - t0;
    h->coll->stats(comm, &after);
    s->stats.bytes_sent += after.bytes_sent - before.bytes_sent;
    return PLAIT_OK;
}

/* Only the embedding group's traffic: activations and their gradients are
 * sent by the trainer, which accounts for them itself. */
static void pp_step_stats(void *state, plait_parallel_stats *out) {
    pp_state *s = state;
    s->stats.axis_bytes[2] = s->stats.bytes_sent;
    s->stats.axis_wait_seconds[2] = s->stats.wait_seconds;
    plait_fill_versioned(out, &s->stats, (uint32_t)sizeof s->stats);
}

static const plait_parallel_ops pp_ops = {
    .struct_size = sizeof(plait_parallel_ops),
    .axes = PLAIT_PARALLEL_AXIS_PP,
    .create = pp_create,
    .plan = pp_plan,
    .bind = pp_bind,
    .begin_step = pp_begin_step,
    .grads_ready = NULL,
    .finish_grads = pp_finish_grads,
    .step_stats = pp_step_stats,
    .destroy = pp_destroy,
};

static const plait_plugin_desc pp_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_PARALLEL,
    .name = "pp",
    .version = "0.1.0",
    .description = "pipeline parallelism: contiguous stages, gpipe / 1f1b / interleaved / zb1 schedules",
    .keys = pp_keys,
    .n_keys = sizeof pp_keys / sizeof pp_keys[0],
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &pp_ops,
    .uses = NULL,
};

PLAIT_PLUGIN_DEFINE_ENTRY("parallel/pp", 0, NULL, &pp_desc)
