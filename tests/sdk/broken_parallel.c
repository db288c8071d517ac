/*
 * Deliberately broken parallel plugins for the conformance kit's tests:
 * each wraps plait's hybrid plugin (every call forwarded) and breaks one
 * rule of plait/parallel.h, chosen at compile time:
 *   BREAK_LAYERS    pp > 1: layer 1 runs on the last stage (model order broken)
 *   BREAK_SHARDS    tp > 1: every tp rank holds slice 0 of each split parameter
 *   BREAK_BATCHES   dp > 1: every replica computes micro-batches from 0
 *   BREAK_SCHEDULE  the last BACKWARD of the schedule is dropped
 *   BREAK_LOSSES    plans are right, but gradients are never finished
 *                   (no data-parallel reduction): replicas drift apart
 * Each declares only the axis its break needs, so the kit runs few layouts.
 */
#include <string.h>

#include <plait/plugin.h>

#ifndef BROKEN_NAME
#error BROKEN_NAME must name the plugin
#endif

/* the host the core handed the entry (the same table every init carries) */
static const plait_host *broken_host;

typedef struct broken {
    const plait_parallel_ops *real;
    void *state;
} broken;

static plait_status b_create(const plait_parallel_init *init, void **state) {
    const plait_host *h = init->host;
    const plait_parallel_ops *real = h->plugin_ops(PLAIT_KIND_PARALLEL, "hybrid");
    if (!real) return PLAIT_ERR_UNSUPPORTED;
    broken *b = h->alloc(sizeof *b, PLAIT_MEM_HOST, 64, "broken parallel");
    if (!b) return PLAIT_ERR_NO_MEMORY;
    b->real = real;
    plait_status st = real->create(init, &b->state);
    if (st != PLAIT_OK) {
        h->free(b);
        return st;
    }
    *state = b;
    return PLAIT_OK;
}

static plait_status b_plan(void *state, plait_plan *plan) {
    broken *b = state;
    plait_status st = b->real->plan(b->state, plan);
    if (st != PLAIT_OK) return st;
#if defined(BREAK_LAYERS)
    int32_t last = 0;
    for (int32_t l = 0; l < plan->n_layers; l++)
        if (plan->layer_stage[l] > last) last = plan->layer_stage[l];
    if (plan->n_layers > 2) plan->layer_stage[1] = last;
#elif defined(BREAK_SHARDS)
    for (int32_t i = 0; i < plan->n_params; i++)
        if (plan->shards[i].parts > 1) plan->shards[i].index = 0;
#elif defined(BREAK_BATCHES)
    plan->first_micro_batch = 0;
#elif defined(BREAK_SCHEDULE)
    for (size_t i = plan->n_instr; i-- > 0;)
        if (plan->schedule[i].op == PLAIT_INSTR_BACKWARD) {
            memmove(&plan->schedule[i], &plan->schedule[i + 1], (plan->n_instr - i - 1) * sizeof plan->schedule[0]);
            plan->n_instr--;
            break;
        }
#endif
    return PLAIT_OK;
}

static plait_status b_bind(void *state, const plait_parallel_bind *bind) {
    broken *b = state;
    return b->real->bind(b->state, bind);
}
static plait_status b_begin_step(void *state, int64_t step) {
    broken *b = state;
    return b->real->begin_step(b->state, step);
}
static plait_status b_grads_ready(void *state, int32_t layer, int32_t mb, int last) {
    broken *b = state;
#if defined(BREAK_LOSSES)
    (void)b, (void)layer, (void)mb, (void)last;
    return PLAIT_OK;
#else
    return b->real->grads_ready(b->state, layer, mb, last);
#endif
}
static plait_status b_finish_grads(void *state) {
    broken *b = state;
#if defined(BREAK_LOSSES)
    (void)b;
    return PLAIT_OK;
#else
    return b->real->finish_grads(b->state);
#endif
}
static void b_step_stats(void *state, plait_parallel_stats *out) {
    broken *b = state;
    b->real->step_stats(b->state, out);
}
static void b_destroy(void *state) {
    broken *b = state;
    if (!b) return;
    b->real->destroy(b->state);
    broken_host->free(b);
}

#if defined(BREAK_LAYERS) || defined(BREAK_SCHEDULE)
#define AXES PLAIT_PARALLEL_AXIS_PP
#elif defined(BREAK_SHARDS)
#define AXES PLAIT_PARALLEL_AXIS_TP
#else
#define AXES PLAIT_PARALLEL_AXIS_DP
#endif

static const plait_parallel_ops b_ops = {
    .struct_size = sizeof(plait_parallel_ops), .axes = AXES, .create = b_create, .plan = b_plan, .bind = b_bind,
    .begin_step = b_begin_step, .grads_ready = b_grads_ready, .finish_grads = b_finish_grads,
    .step_stats = b_step_stats, .destroy = b_destroy};

static const char *const b_uses[] = {"hybrid", "dp", "tp", "pp", NULL};

static const plait_plugin_desc b_desc = {
    .struct_size = sizeof(plait_plugin_desc), .magic = PLAIT_PLUGIN_MAGIC, .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = 0, .kind = PLAIT_KIND_PARALLEL, .name = BROKEN_NAME, .version = "0.0.1",
    .description = "a deliberately broken parallel plugin (conformance kit test)", .ops = &b_ops, .uses = b_uses};

static const plait_plugin_desc *const b_list[] = {&b_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    broken_host = host;
    *descs = b_list;
    *count = 1;
    return PLAIT_OK;
}
