/* Building a run: plugins, plan, parameters, model, optimizer, data. */
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "device/device.h"
#include "host/host_table.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/optim_abi.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "train/run_source.h"

/* The single-process plan every parallel plugin starts from: nothing split,
 * every layer on stage 0, forward then backward per micro-batch. */
plait_status plait_run_prefill_plan(plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    plait_plan *plan = &run->work.plan;
    memset(plan, 0, sizeof *plan);
    plan->struct_size = sizeof *plan;
    plan->n_params = spec->n_params;
    plan->shards = calloc((size_t)spec->n_params, sizeof *plan->shards);
    plan->second_shards = calloc((size_t)spec->n_params + 1, sizeof *plan->second_shards);
    plan->n_layers = spec->n_layers;
    plan->layer_stage = calloc((size_t)spec->n_layers, sizeof(int32_t));
    plan->layer_chunk = calloc((size_t)spec->n_layers, sizeof(int32_t));
    plan->micro_batches = (int32_t)run->work.batch.accumulation;
    plan->capacity = 2 * (size_t)plan->micro_batches + 2;
    plan->schedule = calloc(plan->capacity, sizeof(plait_instr));
    if (!plan->shards || !plan->second_shards || !plan->layer_stage || !plan->layer_chunk || !plan->schedule)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory planning");
    const plait_mesh *mesh = &run->world.mesh;
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        plan->shards[g] = (plait_shard){.dim = -1, .parts = 1, .index = 0, .groups = 1,
                                        .padded_len = p->ndim > 0 ? p->shape[0] : 1};
        plan->second_shards[g] = plan->shards[g];
        /* expert parallelism: the ep ranks hold the experts in turn */
        if ((p->flags & PLAIT_PARAM_EXPERT) && mesh->ep > 1)
            plan->shards[g] = (plait_shard){
                .dim = 0, .parts = mesh->ep, .index = mesh->ep_rank, .groups = 1, .padded_len = p->shape[0]};
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

/* At tp × ep a tp plugin has split an expert tensor's width in `shards`,
 * over the core's ep split: that split becomes the tensor's second
 * (plait_plan.second_shards) and the ep split its first again, so every
 * rule keyed on the expert split (dp's and ZeRO's groups, the norm, the
 * checkpoints) holds. */
static void fold_expert_splits(plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    const plait_mesh *mesh = &run->world.mesh;
    plait_plan *plan = &run->work.plan;
    if (mesh->ep <= 1) return;
    for (int32_t g = 0; g < spec->n_params; g++) {
        plait_shard *sh = &plan->shards[g];
        if (!(spec->params[g].flags & PLAIT_PARAM_EXPERT) || sh->dim <= 0 || sh->parts <= 1) continue;
        plan->second_shards[g] = *sh;
        *sh = (plait_shard){
            .dim = 0, .parts = mesh->ep, .index = mesh->ep_rank, .groups = 1, .padded_len = spec->params[g].shape[0]};
    }
}

static plait_status run_plugin_plan(plait_run *run) {
    plait_status st = run->parallel.ops->plan(run->parallel.state, &run->work.plan);
    if (st == PLAIT_ERR_NO_MEMORY && run->work.plan.n_instr > run->work.plan.capacity) {
        size_t cap = run->work.plan.n_instr;
        plait_instr *bigger = realloc(run->work.plan.schedule, cap * sizeof *bigger);
        if (!bigger) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the schedule");
        run->work.plan.schedule = bigger;
        run->work.plan.capacity = cap;
        run->work.plan.n_instr = 0;
        st = run->parallel.ops->plan(run->parallel.state, &run->work.plan);
    }
    if (st == PLAIT_OK) fold_expert_splits(run);
    return st;
}

static const char *const axis_label[5] = {"dp", "tp", "pp", "cp", "ep"};

/* Context parallelism splits the attention of a gpt or llama model's
 * sequences into 2cp chunks (on a device with ring attention, which the
 * model checks): anything else is refused
 * here, before any rank starts, naming the keys and what would work. */
static plait_status check_cp(const plait_run *run) {
    const int cp = run->world.mesh.cp;
    const char *where = "";
    plait_config_origin(run->cfg, "parallel", "cp", &where);
    const char *arch = plait_config_str(run->cfg, "model", "arch");
    if (strcmp(arch, "gpt") != 0 && strcmp(arch, "llama") != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel] cp = %d splits each sequence's attention over a ring of ranks, and "
                               "[model] arch = %s has no attention to split; use arch gpt or llama, or cp = 1",
                               where, cp, arch);
    int64_t T = plait_config_int(run->cfg, "model", "block_size");
    if (T % (2 * cp) != 0) {
        int64_t up = (T / (2 * cp) + 1) * 2 * cp;
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel] cp = %d holds each sequence as 2cp = %d equal chunks, but [model] "
                               "block_size = %lld does not split into %d; set block_size to a multiple of %d (%lld "
                               "or %lld) or cp to a value whose 2cp divides it",
                               where, cp, 2 * cp, (long long)T, 2 * cp, 2 * cp, (long long)(up - 2 * cp),
                               (long long)up);
    }
    return PLAIT_OK;
}

/* Axes the mesh accepts that training cannot run yet: refused by name. */
static plait_status check_mesh_axes(const plait_run *run) {
    const plait_mesh *m = &run->world.mesh;
    plait_status st = plait_run_moe_check_layout(run);
    if (st != PLAIT_OK) return st;
    return m->cp > 1 ? check_cp(run) : PLAIT_OK;
}

plait_status plait_run_load_parallel(plait_run *run) {
    plait_status ast = check_mesh_axes(run);
    if (ast != PLAIT_OK) return ast;
    const char *name = plait_config_str(run->cfg, "parallel", "plugin");
    const plait_plugin_desc *d = plait_plugin_load_usable(PLAIT_KIND_PARALLEL, name);
    if (!d) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[parallel] plugin = %s", name);
    if (plait_device_check_plugin(d) != PLAIT_OK) return PLAIT_ERR_ABI;
    run->parallel.ops = d->ops;
    const plait_mesh *m = &run->world.mesh;
    int sizes[5] = {m->dp, m->tp, m->pp, m->cp, m->ep};
    const uint32_t bits[5] = {PLAIT_PARALLEL_AXIS_DP, PLAIT_PARALLEL_AXIS_TP, PLAIT_PARALLEL_AXIS_PP,
                              PLAIT_PARALLEL_AXIS_CP, PLAIT_PARALLEL_AXIS_EP};
    for (int a = 0; a < 5; a++)
        if (sizes[a] > 1 && !(run->parallel.ops->axes & bits[a])) {
            const char *where = NULL;
            plait_config_origin(run->cfg, "parallel", axis_label[a], &where);
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [parallel] %s = %d, but plugin '%s' does not implement %s parallelism; "
                                   "use plugin = hybrid, which combines dp, cp, tp and pp (plugin dp splits dp "
                                   "and cp only)",
                                   where, axis_label[a], sizes[a], name, axis_label[a]);
        }
    plait_parallel_init init = {.struct_size = sizeof init,
                                .host = plait_plugin_host(),
                                .config = run->cfg,
                                .mesh = &run->world.mesh,
                                .model = run->model.spec,
                                .deterministic = run->deterministic,
                                .optim_reduces_grads = (run->optim.flags & PLAIT_OPTIM_REDUCES_GRADS) != 0};
    plait_plugin_call call;
    plait_plugin_call_enter(&call, PLAIT_KIND_PARALLEL, run->parallel.ops, "create");
    plait_status st = plait_plugin_call_leave(&call, run->parallel.ops->create(&init, &run->parallel.state));
    if (st == PLAIT_OK) st = plait_run_prefill_plan(run);
    if (st == PLAIT_OK) st = run_plugin_plan(run);
    if (st != PLAIT_OK) return plait_wrap_error(st, "parallel plugin %s", name);
    /* initial values of a slice cut twice map through both splits */
    run->model.init.second = run->work.plan.second_shards;
    run->model.init.n_second = run->work.plan.n_params;
    plait_host_attach_init_rule(&run->model.init);
    run->work.stage = run->world.mesh.pp_rank;
    int32_t chunks = run->work.plan.chunks;
    if (chunks < 1)
        return plait_set_error(PLAIT_ERR_INTERNAL, "plan has %d model chunks per stage (at least 1)", chunks);
    free(run->work.first_layer);
    free(run->work.last_layer);
    run->work.first_layer = malloc(sizeof(int32_t) * (size_t)chunks);
    run->work.last_layer = malloc(sizeof(int32_t) * (size_t)chunks);
    if (!run->work.first_layer || !run->work.last_layer)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for %d model chunks", chunks);
    for (int32_t c = 0; c < chunks; c++) run->work.first_layer[c] = run->work.last_layer[c] = -1;
    for (int32_t l = 0; l < run->model.spec->n_layers; l++) {
        if (run->work.plan.layer_stage[l] != run->work.stage) continue;
        int32_t c = run->work.plan.layer_chunk[l];
        if (run->work.first_layer[c] < 0) run->work.first_layer[c] = l;
        if (run->work.last_layer[c] >= 0 && run->work.last_layer[c] != l - 1)
            return plait_set_error(PLAIT_ERR_INTERNAL, "plan: chunk %d of stage %d is not contiguous", c, run->work.stage);
        run->work.last_layer[c] = l;
    }
    return PLAIT_OK;
}

static plait_status load_optim(plait_run *run) {
    const char *name = plait_config_str(run->cfg, "optim", "plugin");
    const plait_plugin_desc *d = plait_plugin_load_usable(PLAIT_KIND_OPTIM, name);
    if (!d) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[optim] plugin = %s", name);
    if (plait_device_check_plugin(d) != PLAIT_OK) return PLAIT_ERR_ABI;
    run->optim.ops = d->ops;
    run->optim.flags = run->optim.ops->flags;
    if (PLAIT_OPTIM_HAS(run->optim.ops, flags_for)) {
        /* a key of the plugin's may make it keep the gradients itself */
        uint32_t f = run->optim.ops->flags_for(plait_plugin_host(), run->cfg);
        if ((f & ~(uint32_t)PLAIT_OPTIM_OWNS_GRADS) != (run->optim.flags & ~(uint32_t)PLAIT_OPTIM_OWNS_GRADS))
            return plait_set_error(PLAIT_ERR_ABI,
                                   "optimizer plugin %s: flags_for() changed flags other than OWNS_GRADS "
                                   "(0x%x, its table's 0x%x)",
                                   name, f, run->optim.flags);
        run->optim.flags = f;
    }
    run->optim.abi_minor = d->abi_minor;
    return PLAIT_OK;
}

static plait_status create_optim(plait_run *run, const plait_value_source *src) {
    plait_optim_init init = {.struct_size = sizeof init,
                             .host = plait_plugin_host(),
                             .config = run->cfg,
                             .params = &run->params.set,
                             .dp_comm = run->world.mesh.dpcp_comm, /* dp_comm itself when cp = 1 */
                             .world = run->world.comm,
                             .local_micro_batches = run->work.plan.micro_batches,
                             .deterministic = run->deterministic,
                             .edp_comm = run->world.mesh.edp_comm, /* dpcp_comm when ep = 1 */
                             .weight_copy = run->params.weight_copy,
                             .copy_gathered = run->params.copy_gathered,
                             .copy_view = run->params.copy_view};
    plait_plugin_call call;
    plait_plugin_call_enter(&call, PLAIT_KIND_OPTIM, run->optim.ops, "create");
    plait_status st = plait_plugin_call_leave(&call, run->optim.ops->create(&init, &run->optim.state));
    if (st == PLAIT_OK) {
        uint64_t sets = plait_error_sets();
        st = plait_plugin_said(PLAIT_KIND_OPTIM, run->optim.ops, "materialize", sets,
                               run->optim.ops->materialize(run->optim.state, src));
    }
    return st != PLAIT_OK ? plait_wrap_error(st, "optimizer %s", plait_config_str(run->cfg, "optim", "plugin")) : st;
}


plait_status plait_run_open(plait_config *cfg, const char *resume_dir, plait_run **out) {
    plait_run_origin origin = {.resume_dir = resume_dir, .disk_step = -1};
    return plait_run_open_from(cfg, &origin, out);
}

plait_status plait_run_open_from(plait_config *cfg, const plait_run_origin *origin, plait_run **out) {
    plait_run *run = calloc(1, sizeof *run);
    if (!run) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    /* before any plugin call of the run: what the set-up and each step
     * are compared against */
    plait_process_state_take(&run->process);
    run->cfg = cfg;
    run->resumed_step = -1;
    run->steps = plait_config_int(cfg, "run", "steps");
    run->seed = (uint64_t)plait_config_int(cfg, "run", "seed");
    run->deterministic = plait_config_bool(cfg, "run", "deterministic");
    run->debug_sleep_s = plait_config_float(cfg, "run", "debug_compute_sleep_ms") / 1e3;
    run->model.block_size = (int32_t)plait_config_int(cfg, "model", "block_size");
    plait_status st = plait_run_open_world(run);
    if (st == PLAIT_OK) st = plait_mesh_build(cfg, run->world.comm, &run->world.mesh);
    if (st == PLAIT_OK) st = plait_batch_from_config(cfg, &run->work.batch);
    if (st == PLAIT_OK) st = plait_model_describe(cfg, (int32_t)run->work.batch.micro_batch, &run->model.desc);
    if (st == PLAIT_OK) st = plait_model_check_recompute_offload(cfg, plait_device_mem_kind() != PLAIT_MEM_HOST, "");
    if (st == PLAIT_OK) {
        run->model.spec = plait_model_desc_spec(run->model.desc);
        run->model.init = plait_model_init_rule(run->model.desc, run->seed);
        plait_host_attach_init_rule(&run->model.init);
    }
    /* the optimizer's flags first: the parallel plugin is told at create
     * whether the optimizer reduces the gradients itself */
    if (st == PLAIT_OK) st = load_optim(run);
    if (st == PLAIT_OK) st = plait_run_load_parallel(run);
    /* the optimizer's ABI against the layout's experts and the schedule
     * (an expert tensor's group, the 1.36 schedules): train/optim_abi.h */
    if (st == PLAIT_OK)
        st = plait_check_optim_abi(cfg, run->world.mesh.tp, run->world.mesh.ep, run->optim.flags, run->optim.abi_minor);
    if (st == PLAIT_OK) st = plait_run_build_params(run);
    /* The model before the storage: which bf16 copies it keeps decides
     * which float32 weights the core stores (plait_run_keep_masters); it
     * reads the parameters' storage only when a layer runs. */
    const int split = plait_plan_splits_backward(&run->work.plan);
    if (st == PLAIT_OK && split) st = plait_run_check_split_device();
    if (st == PLAIT_OK) {
        plait_model_create_args args = {.plan = &run->work.plan,
                                        .stage = run->work.stage,
                                        .params = &run->params.set,
                                        .max_slots = run->work.plan.chunks * run->work.plan.micro_batches,
                                        .split_backward = split,
                                        .activations_bf16 = plait_device_precision(run->cfg) == PLAIT_PRECISION_BF16,
                                        .residual_bf16 = !strcmp(plait_config_str(run->cfg, "run", "residual"), "bf16"),
                                        .cp = run->world.mesh.cp,
                                        .cp_rank = run->world.mesh.cp_rank,
                                        .cp_comm = run->world.mesh.cp_comm,
                                        .ep_comm = run->world.mesh.ep_comm,
                                        .params_gathered = (run->optim.flags & PLAIT_OPTIM_OWNS_PARAMS) != 0};
        st = plait_model_create(run->model.desc, &args, &run->model.instance);
    }
    if (st == PLAIT_OK) st = plait_run_keep_masters(run);
    if (st == PLAIT_OK) st = plait_run_lend_copies(run);
    if (st == PLAIT_OK) st = plait_run_alloc_storage(run);
    plait_run_source source;
    int have_source = 0;
    if (st == PLAIT_OK) {
        st = plait_run_source_open(run, origin, &source);
        have_source = st == PLAIT_OK;
    }
    /* Core-owned parameters are filled here; an optimizer owning them fills
     * its shards in materialize() from the same source. */
    if (st == PLAIT_OK && run->params.data_flat) st = plait_run_source_fill_params(run, &source);
    if (st == PLAIT_OK) st = plait_run_source_fill_buffers(run, &source);
    if (st == PLAIT_OK) st = create_optim(run, &source.source);
    if (st == PLAIT_OK && run->parallel.ops->bind) {
        plait_parallel_bind bind = {.struct_size = sizeof bind,
                                    .params = &run->params.set,
                                    .optim_reduces_grads = (run->optim.flags & PLAIT_OPTIM_REDUCES_GRADS) != 0,
                                    .grads_prescaled = 1};
        st = run->parallel.ops->bind(run->parallel.state, &bind);
    }
    if (st == PLAIT_OK) st = plait_run_data_open(run);
    if (st == PLAIT_OK) st = plait_step_exec_open(run);
    if (st == PLAIT_OK) st = plait_stage_timing_open(&run->timing, run->world.mesh.pp);
    if (st == PLAIT_OK) st = plait_run_open_accumulation(run);
    if (st == PLAIT_OK && have_source) st = plait_run_source_restore_state(run, &source);
    if (st == PLAIT_OK) plait_model_weights_changed(run->model.instance); /* whatever the optimizer filled */
    if (have_source) plait_run_source_close(&source);
    if (st == PLAIT_OK)
        plait_model_set_loss_scale(run->model.instance, 1.0f / (float)((double)run->work.batch.global_batch * run->model.block_size));
    run->exec.loss_targets = run->work.batch.global_batch * run->model.block_size; /* until a pass counts them */
    /* each setup call was compared on its own (plugin/loader.h); the
     * others of the set-up (plan, materialize, bind, a restore) here */
    if (st == PLAIT_OK) st = plait_run_check_process(run, "the run's set-up: its calls");
    /* a rank whose set-up failed tells its peers why, as a step's failure does */
    if (st != PLAIT_OK) return plait_run_fail(run, st, "the run's set-up", "train");
    run->model.flops_per_token = (uint64_t)plait_run_flops_per_token(run);
    *out = run;
    return PLAIT_OK;
}
