/* Building a run: plugins, plan, parameters, model, optimizer, data. */
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "train/run_source.h"

/* The single-process plan every parallel plugin starts from: nothing split,
 * every layer on stage 0, forward then backward per micro-batch. */
plait_status plait_run_prefill_plan(plait_run *run) {
    const plait_model_spec *spec = run->spec;
    plait_plan *plan = &run->plan;
    memset(plan, 0, sizeof *plan);
    plan->struct_size = sizeof *plan;
    plan->n_params = spec->n_params;
    plan->shards = calloc((size_t)spec->n_params, sizeof *plan->shards);
    plan->n_layers = spec->n_layers;
    plan->layer_stage = calloc((size_t)spec->n_layers, sizeof(int32_t));
    plan->layer_chunk = calloc((size_t)spec->n_layers, sizeof(int32_t));
    plan->micro_batches = (int32_t)run->batch.accumulation;
    plan->capacity = 2 * (size_t)plan->micro_batches + 2;
    plan->schedule = calloc(plan->capacity, sizeof(plait_instr));
    if (!plan->shards || !plan->layer_stage || !plan->layer_chunk || !plan->schedule)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory planning");
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        plan->shards[g] = (plait_shard){.dim = -1, .parts = 1, .index = 0, .groups = 1,
                                        .padded_len = p->ndim > 0 ? p->shape[0] : 1};
    }
    plan->chunks = 1;
    plan->vocab_padded = spec->vocab_size;
    plan->first_micro_batch = 0;
    size_t n = 0;
    for (int32_t mb = 0; mb < plan->micro_batches; mb++) {
        plan->schedule[n++] = (plait_instr){PLAIT_INSTR_FORWARD, 0, mb};
        plan->schedule[n++] = (plait_instr){PLAIT_INSTR_BACKWARD, 0, mb};
    }
    plan->schedule[n++] = (plait_instr){PLAIT_INSTR_REDUCE_GRADS, 0, -1};
    plan->schedule[n++] = (plait_instr){PLAIT_INSTR_OPTIM_STEP, 0, -1};
    plan->n_instr = n;
    plan->bubble_formula = -1;
    return PLAIT_OK;
}

static plait_status run_plugin_plan(plait_run *run) {
    plait_status st = run->par->plan(run->par_state, &run->plan);
    if (st == PLAIT_ERR_NO_MEMORY && run->plan.n_instr > run->plan.capacity) {
        size_t cap = run->plan.n_instr;
        plait_instr *bigger = realloc(run->plan.schedule, cap * sizeof *bigger);
        if (!bigger) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the schedule");
        run->plan.schedule = bigger;
        run->plan.capacity = cap;
        run->plan.n_instr = 0;
        st = run->par->plan(run->par_state, &run->plan);
    }
    return st;
}

static const char *const axis_label[3] = {"dp", "tp", "pp"};

plait_status plait_run_load_parallel(plait_run *run) {
    const char *name = plait_config_str(run->cfg, "parallel", "plugin");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_PARALLEL, name);
    if (!d) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[parallel] plugin = %s", name);
    run->par = d->ops;
    int sizes[3] = {run->mesh.dp, run->mesh.tp, run->mesh.pp};
    const uint32_t bits[3] = {PLAIT_PARALLEL_AXIS_DP, PLAIT_PARALLEL_AXIS_TP, PLAIT_PARALLEL_AXIS_PP};
    for (int a = 0; a < 3; a++)
        if (sizes[a] > 1 && !(run->par->axes & bits[a]))
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "[parallel] %s = %d, but plugin '%s' does not implement %s parallelism; use "
                                   "plugin = hybrid to combine dp, tp and pp",
                                   axis_label[a], sizes[a], name, axis_label[a]);
    plait_parallel_init init = {.struct_size = sizeof init,
                                .host = plait_plugin_host(),
                                .config = run->cfg,
                                .mesh = &run->mesh,
                                .model = run->spec,
                                .deterministic = run->deterministic};
    plait_status st = run->par->create(&init, &run->par_state);
    if (st == PLAIT_OK) st = plait_run_prefill_plan(run);
    if (st == PLAIT_OK) st = run_plugin_plan(run);
    if (st != PLAIT_OK) return plait_wrap_error(st, "parallel plugin %s", name);
    run->stage = run->mesh.pp_rank;
    for (int32_t c = 0; c < 64; c++) run->first_layer[c] = run->last_layer[c] = -1;
    if (run->plan.chunks < 1 || run->plan.chunks > 64)
        return plait_set_error(PLAIT_ERR_INTERNAL, "plan has %d model chunks per stage (1..64)", run->plan.chunks);
    for (int32_t l = 0; l < run->spec->n_layers; l++) {
        if (run->plan.layer_stage[l] != run->stage) continue;
        int32_t c = run->plan.layer_chunk[l];
        if (run->first_layer[c] < 0) run->first_layer[c] = l;
        if (run->last_layer[c] >= 0 && run->last_layer[c] != l - 1)
            return plait_set_error(PLAIT_ERR_INTERNAL, "plan: chunk %d of stage %d is not contiguous", c, run->stage);
        run->last_layer[c] = l;
    }
    return PLAIT_OK;
}

static plait_status load_optim(plait_run *run) {
    const char *name = plait_config_str(run->cfg, "optim", "plugin");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, name);
    if (!d) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[optim] plugin = %s", name);
    run->opt = d->ops;
    run->opt_flags = run->opt->flags;
    return PLAIT_OK;
}

static plait_status create_optim(plait_run *run, const plait_value_source *src) {
    plait_optim_init init = {.struct_size = sizeof init,
                             .host = plait_plugin_host(),
                             .config = run->cfg,
                             .params = &run->params,
                             .dp_comm = run->mesh.dp_comm,
                             .world = run->world,
                             .local_micro_batches = run->plan.micro_batches,
                             .deterministic = run->deterministic};
    plait_status st = run->opt->create(&init, &run->opt_state);
    if (st == PLAIT_OK) st = run->opt->materialize(run->opt_state, src);
    return st != PLAIT_OK ? plait_wrap_error(st, "optimizer %s", plait_config_str(run->cfg, "optim", "plugin")) : st;
}

static plait_status alloc_step_scratch(plait_run *run) {
    int32_t m = run->plan.micro_batches;
    run->max_slots = run->plan.chunks * m;
    int64_t n_global = run->batch.global_batch / run->batch.micro_batch;
    size_t bt = (size_t)run->batch.micro_batch * (size_t)run->block_size;
    run->slot_of = malloc(sizeof(int32_t) * (size_t)run->max_slots);
    run->slot_busy = calloc((size_t)run->max_slots, 1);
    run->send_req = calloc((size_t)run->max_slots * 2, sizeof(plait_request *));
    run->mb_loss = calloc((size_t)n_global + 2 * (size_t)run->mesh.pp, sizeof(double));
    run->stage_idle_s = calloc((size_t)run->mesh.pp, sizeof(double));
    run->stage_idle_sum = calloc((size_t)run->mesh.pp, sizeof(double));
    run->tokens = malloc(bt * sizeof(int32_t));
    run->targets = malloc(bt * sizeof(int32_t));
    if (!run->slot_of || !run->slot_busy || !run->send_req || !run->mb_loss || !run->stage_idle_s ||
        !run->stage_idle_sum || !run->tokens || !run->targets)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (run->deterministic && m > 1 && run->grad_flat) {
        plait_status st = plait_sum_tree_create(run->flat_numel, PLAIT_F32, PLAIT_SUM, m, "deterministic accumulation",
                                                &run->tree);
        if (st != PLAIT_OK) return st;
        run->grad_scratch = plait_alloc(run->flat_numel * sizeof(float) + 64, PLAIT_MEM_HOST, 64,
                                        "deterministic accumulation");
        if (!run->grad_scratch) return PLAIT_ERR_NO_MEMORY;
    }
    return PLAIT_OK;
}

plait_status plait_run_open(plait_config *cfg, const char *resume_dir, plait_run **out) {
    plait_run *run = calloc(1, sizeof *run);
    if (!run) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    run->cfg = cfg;
    run->steps = plait_config_int(cfg, "run", "steps");
    run->seed = (uint64_t)plait_config_int(cfg, "run", "seed");
    run->deterministic = plait_config_bool(cfg, "run", "deterministic");
    run->debug_sleep_s = plait_config_float(cfg, "run", "debug_compute_sleep_ms") / 1e3;
    run->block_size = (int32_t)plait_config_int(cfg, "model", "block_size");
    plait_model_set_seed(run->seed);
    plait_status st = plait_run_open_world(run);
    if (st == PLAIT_OK) st = plait_mesh_build(cfg, run->world, &run->mesh);
    if (st == PLAIT_OK) st = plait_batch_from_config(cfg, &run->batch);
    if (st == PLAIT_OK) st = plait_model_describe(cfg, (int32_t)run->batch.micro_batch, &run->desc);
    if (st == PLAIT_OK) run->spec = plait_model_desc_spec(run->desc);
    if (st == PLAIT_OK) st = plait_run_load_parallel(run);
    if (st == PLAIT_OK) st = load_optim(run);
    if (st == PLAIT_OK) st = plait_run_build_params(run);
    if (st == PLAIT_OK) st = plait_run_alloc_storage(run);
    plait_run_source source;
    int have_source = 0;
    if (st == PLAIT_OK) {
        st = plait_run_source_open(run, resume_dir, &source);
        have_source = st == PLAIT_OK;
    }
    /* Core-owned parameters are filled here; an optimizer owning them fills
     * its shards in materialize() from the same source. */
    if (st == PLAIT_OK && run->data_flat) st = plait_run_source_fill_params(run, &source);
    if (st == PLAIT_OK) {
        plait_model_layout layout = {.plan = &run->plan, .stage = run->stage, .params = &run->params,
                                     .max_slots = run->plan.chunks * run->plan.micro_batches};
        st = plait_model_create(run->desc, &layout, &run->model);
    }
    if (st == PLAIT_OK) st = create_optim(run, &source.source);
    if (st == PLAIT_OK && run->par->bind) {
        plait_parallel_bind bind = {.struct_size = sizeof bind,
                                    .params = &run->params,
                                    .optim_reduces_grads = (run->opt_flags & PLAIT_OPTIM_REDUCES_GRADS) != 0,
                                    .grads_prescaled = 1};
        st = run->par->bind(run->par_state, &bind);
    }
    if (st == PLAIT_OK) st = plait_run_data_open(run);
    if (st == PLAIT_OK) st = alloc_step_scratch(run);
    if (st == PLAIT_OK && have_source) st = plait_run_source_restore_state(run, &source);
    if (have_source) plait_run_source_close(&source);
    if (st == PLAIT_OK)
        plait_model_set_loss_scale(run->model, 1.0f / (float)((double)run->batch.global_batch * run->block_size));
    if (st != PLAIT_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        plait_run_close(run);
        return plait_set_error(st, "%s", msg);
    }
    run->flops_per_token = (uint64_t)plait_run_flops_per_token(run);
    *out = run;
    return PLAIT_OK;
}

void plait_run_close(plait_run *run) {
    if (!run) return;
    plait_run_data_close(run);
    if (run->opt && run->opt_state) run->opt->destroy(run->opt_state);
    if (run->par && run->par_state) run->par->destroy(run->par_state);
    plait_model_free(run->model);
    plait_sum_tree_free(run->tree);
    plait_free(run->grad_scratch);
    plait_run_free_params(run);
    free(run->plan.shards);
    free(run->plan.layer_stage);
    free(run->plan.layer_chunk);
    free(run->plan.schedule);
    free(run->slot_of);
    free(run->slot_busy);
    free(run->send_req);
    free(run->mb_loss);
    free(run->stage_idle_s);
    free(run->stage_idle_sum);
    free(run->tokens);
    free(run->targets);
    plait_model_desc_free(run->desc);
    if (run->world) plait_mesh_release(&run->mesh);
    plait_run_close_world(run);
    free(run);
}
