#include "train/preflight.h"

#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "runtime/error.h"
#include "train/batch_skip.h"
#include "train/data.h"
#include "train/plan_check.h"
#include "train/precision.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "train/run_trace.h"
#include "train/val_sets.h"

/* Release what plait_run_load_parallel built for one rank. */
static void release_plan(plait_run *run) {
    if (run->parallel.ops && run->parallel.state) run->parallel.ops->destroy(run->parallel.state);
    run->parallel.state = NULL;
    free(run->work.plan.shards);
    free(run->work.plan.second_shards);
    free(run->work.plan.layer_stage);
    free(run->work.plan.layer_chunk);
    free(run->work.plan.schedule);
    memset(&run->work.plan, 0, sizeof run->work.plan);
    free(run->work.first_layer);
    free(run->work.last_layer);
    run->work.first_layer = run->work.last_layer = NULL;
}

/* Periodic evaluation needs a validation split: caught here rather than by
 * every rank at its first evaluation, after training time was spent. */
static plait_status check_evaluation(const plait_config *cfg) {
    plait_val_sets sets;
    plait_status st = plait_val_sets_parse(cfg, &sets);
    if (st != PLAIT_OK) return st;
    int64_t eval_every = plait_config_int(cfg, "run", "eval_every");
    if (eval_every == 0 || plait_config_float(cfg, "data", "val_fraction") > 0 || sets.n > 0) return PLAIT_OK;
    const char *val_path = plait_config_str(cfg, "data", "val_path");
    if (val_path && *val_path) return PLAIT_OK; /* held out in a file of its own: val_fraction is not used */
    const char *ev_where = "", *vf_where = "";
    plait_config_origin(cfg, "run", "eval_every", &ev_where);
    plait_config_origin(cfg, "data", "val_fraction", &vf_where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [run] eval_every = %lld asks for a validation loss, but %s: [data] val_fraction = 0 "
                           "holds no data out for it; set val_fraction above 0 (e.g. 0.1) or eval_every = 0 (with "
                           "val_fraction = 0 the run then trains on all the data and skips evaluation)",
                           ev_where, (long long)eval_every, vf_where);
}

/* [data] eod_mask_loss needs the token it masks after: a real one. */
static plait_status check_eod(const plait_config *cfg) {
    if (!plait_config_bool(cfg, "data", "eod_mask_loss")) return PLAIT_OK;
    const int64_t eod = plait_config_int(cfg, "data", "eod_token"),
                  vocab = plait_config_int(cfg, "model", "vocab_size");
    const char *tokenizer = plait_config_str(cfg, "data", "tokenizer");
    if ((eod >= 0 && eod < vocab) || (eod == -1 && tokenizer && *tokenizer)) return PLAIT_OK; /* the tokenizer's */
    const char *where = "", *tok_where = "";
    plait_config_origin(cfg, "data", "eod_mask_loss", &where);
    plait_config_origin(cfg, "data", "eod_token", &tok_where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [data] eod_mask_loss = true leaves out the target after each [data] eod_token, but "
                           "%s: eod_token = %lld is no token of [model] vocab_size = %lld: give the id the data's "
                           "documents end with (GPT-2's <|endoftext|> is 50256; 10, a newline, for bytes), name the "
                           "[data] tokenizer whose <|endoftext|> it is, or set eod_mask_loss = false",
                           where, tok_where, (long long)eod, (long long)vocab);
}

/* A gathered save passes every tensor through world rank 0 as it is
 * gathered: no rank has a snapshot of its own to write in the background. */
static plait_status check_ckpt_async(const plait_config *cfg) {
    if (!plait_config_bool(cfg, "run", "ckpt_async") || !strcmp(plait_config_str(cfg, "run", "ckpt_format"), "sharded"))
        return PLAIT_OK;
    const char *where = "";
    plait_config_origin(cfg, "run", "ckpt_async", &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [run] ckpt_async = true needs [run] ckpt_format = sharded: a gathered save passes "
                           "every tensor through world rank 0 as it is gathered, so no rank has a snapshot of its own "
                           "to write in the background (set ckpt_format = sharded, or ckpt_async = false)",
                           where);
}

/* [optim] offload's companions: the parameters' shards go where the
 * state goes, and an offloaded state is float32 (the optimizers'
 * offload.h and bf16_moments.h). */
static plait_status check_offload(const plait_config *cfg) {
    const char *offload = plait_config_str(cfg, "optim", "offload"), *where = "";
    const int none = !offload || !strcmp(offload, "none");
    if (none && plait_config_bool(cfg, "optim", "offload_params")) {
        plait_config_origin(cfg, "optim", "offload_params", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] offload_params = true needs [optim] offload = host or nvme, where the "
                               "parameter shards go beside the optimizer state; offload is none (set offload, or "
                               "offload_params = false)",
                               where);
    }
    if (!none && !strcmp(plait_config_str(cfg, "optim", "moments"), "bf16")) {
        plait_config_origin(cfg, "optim", "moments", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] moments = bf16 with [optim] offload = %s: the offloaded state is "
                               "float32; use moments = fp32 with offload, or offload = none with bf16 moments",
                               where, offload);
    }
    return PLAIT_OK;
}

/* [run] residual = bf16 rounds the stream to the products' bf16: a run
 * that is not bf16 has none. Not a rule between the core's keys: plait
 * plan trains in the cluster's precision where the config sets none. The
 * device's part (kernels that widen bf16) is the model's, and config
 * check's, which asks the device. */
plait_status plait_check_residual(const plait_config *cfg) {
    const char *precision = plait_config_str(cfg, "run", "precision"), *where = "config", *p_where = "config";
    if (strcmp(plait_config_str(cfg, "run", "residual"), "bf16") != 0 || !strcmp(precision, "bf16")) return PLAIT_OK;
    plait_config_origin(cfg, "run", "residual", &where);
    plait_config_origin(cfg, "run", "precision", &p_where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [run] residual = bf16 needs [run] precision = bf16, and precision = %s (%s): the "
                           "residual stream rounds to bf16 and is widened again where a layer reads it (set "
                           "precision = bf16, or residual = fp32, which keeps it float32)",
                           where, precision, p_where);
}

/* The decaying schedules go from [optim] lr to min_lr: a floor above the
 * peak would raise the rate as the run goes on, which no schedule means
 * (Megatron-LM asserts the same). wsd's final decay must fit between the
 * warmup and the decay's end: one that reached into the warmup would cut
 * the warmup short. */
static plait_status check_lr(const plait_config *cfg) {
    const double lr = plait_config_float(cfg, "optim", "lr"), min_lr = plait_config_float(cfg, "optim", "min_lr");
    const char *schedule = plait_config_str(cfg, "optim", "lr_schedule");
    if (min_lr > lr && strcmp(schedule, "constant") != 0) {
        const char *min_where = "", *lr_where = "";
        const int min_default = plait_config_origin(cfg, "optim", "min_lr", &min_where) == PLAIT_ORIGIN_DEFAULT;
        plait_config_origin(cfg, "optim", "lr", &lr_where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] min_lr = %g%s is above lr = %g: the %s schedule decays from lr to "
                               "min_lr; set min_lr <= lr (with lr = 0, min_lr = 0 keeps the weights still), or "
                               "lr_schedule = constant",
                               min_default ? lr_where : min_where, min_lr, min_default ? " (its default)" : "", lr,
                               schedule);
    }
    if (strcmp(schedule, "wsd") != 0) return PLAIT_OK;
    const int64_t k = plait_config_int(cfg, "optim", "lr_wsd_decay_steps"),
                  w = plait_config_int(cfg, "optim", "warmup_steps");
    int64_t d = plait_config_int(cfg, "optim", "lr_decay_steps");
    const char *d_key = "[optim] lr_decay_steps";
    if (d == 0) {
        d = plait_config_int(cfg, "run", "steps");
        d_key = "[run] steps (lr_decay_steps = 0)";
    }
    if (k >= 1 && k <= d - w) return PLAIT_OK;
    const char *where = "";
    if (d - w < 1) {
        plait_config_origin(cfg, "optim", "lr_schedule", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] lr_schedule = wsd: its decay ends at step %lld (%s), not after the warmup "
                               "(warmup_steps = %lld), so no step is left for it; raise the decay's end above the "
                               "warmup",
                               where, (long long)d, d_key, (long long)w);
    }
    plait_config_origin(cfg, "optim", k >= 1 ? "lr_wsd_decay_steps" : "lr_schedule", &where);
    if (k < 1)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] lr_schedule = wsd needs lr_wsd_decay_steps, the steps of its final "
                               "decay to min_lr (1 to %lld here: %s = %lld less warmup_steps = %lld; runs commonly "
                               "decay over the last 10-20%%)",
                               where, (long long)(d - w), d_key, (long long)d, (long long)w);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [optim] lr_wsd_decay_steps = %lld is longer than the steps between the warmup and the "
                           "decay's end (%s = %lld less warmup_steps = %lld: %lld); set it at most that, or raise "
                           "the decay's end",
                           where, (long long)k, d_key, (long long)d, (long long)w, (long long)(d - w));
}

plait_status plait_check_key_rules(const plait_config *cfg) {
    int64_t first, last;
    plait_status st = check_evaluation(cfg);
    if (st == PLAIT_OK) st = check_ckpt_async(cfg);
    if (st == PLAIT_OK) st = check_eod(cfg);
    if (st == PLAIT_OK) st = check_offload(cfg);
    if (st == PLAIT_OK) st = check_lr(cfg);
    int sets = 0;
    if (st == PLAIT_OK) st = plait_data_check_weights(cfg, NULL, 0, &sets);
    plait_batch_skip skip;
    if (st == PLAIT_OK) st = plait_batch_skip_parse(cfg, &skip);
    if (st == PLAIT_OK) st = plait_run_trace_range(cfg, 1, 0, &first, &last);
    return st;
}

/* The checks on every rank (all = 1: and the rules between them), or on
 * one rank of each pipeline stage. */
static plait_status preflight(plait_config *cfg, int all, plait_layout_visit visit, void *ctx);

/* This host's CPU and the run's device are checked only for a run on
 * them: a prediction for a cluster judges the cluster's precision and
 * device, not this machine's. */
plait_status plait_layout_preflight(plait_config *cfg) {
    int precision;
    plait_status st = plait_precision_from_config(cfg, &precision);
    if (st == PLAIT_OK) st = preflight(cfg, 1, NULL, NULL); /* the key rules first, as a rank checks them */
    if (st == PLAIT_OK) st = plait_check_residual(cfg);
    return st == PLAIT_OK ? plait_check_run_optimizer(cfg) : st; /* after the batch's own checks */
}

plait_status plait_layout_preflight_visit(plait_config *cfg, plait_layout_visit visit, void *ctx) {
    return preflight(cfg, 1, visit, ctx);
}

plait_status plait_layout_preflight_stages(plait_config *cfg, plait_layout_visit visit, void *ctx) {
    return preflight(cfg, 0, visit, ctx);
}

/* The flags of the optimizer the config names, its table's (1), or 0
 * where it does not load (train names the plugin it cannot load). */
static int optim_flags(const plait_config *cfg, uint32_t *flags) {
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, plait_config_str(cfg, "optim", "plugin"));
    if (!d) {
        plait_clear_error();
        return 0;
    }
    *flags = ((const plait_optim_ops *)d->ops)->flags;
    return 1;
}

const plait_optim_ops *plait_optim_ops_of(const char *optim) {
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, optim);
    if (!d) plait_clear_error(); /* train names the plugin it cannot load */
    return d ? d->ops : NULL;
}

plait_status plait_check_optimizer(const plait_config *cfg, const plait_optim_ops *ops, const char *optim, int dp,
                                   int64_t micro_batches, int host_memory) {
    if (!ops) return PLAIT_OK;
    if (PLAIT_OPTIM_HAS(ops, check)) {
        plait_optim_layout layout = {.struct_size = sizeof layout,
                                     .dp = dp,
                                     .local_micro_batches = (int32_t)micro_batches,
                                     .deterministic = plait_config_bool(cfg, "run", "deterministic"),
                                     .host_memory = host_memory};
        return ops->check(plait_plugin_host(), cfg, &layout);
    }
    /* an optimizer built before ops.check: the rule its flags imply, that
     * one keeping every parameter whole has no shards to offload */
    if ((ops->flags & PLAIT_OPTIM_OWNS_PARAMS) || !plait_config_bool(cfg, "optim", "offload_params")) return PLAIT_OK;
    const char *where = "";
    plait_config_origin(cfg, "optim", "offload_params", &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [optim] offload_params = true: the optimizer (%s) keeps every parameter whole where "
                           "the model computes, so it has no shards to keep beside the state; use an optimizer that "
                           "shards the parameters ([optim] plugin = zero3, at any dp), or offload_params = false",
                           where, optim);
}

/* The run's optimizer on the run's layout: dp x cp ranks replicate the
 * parameters, each running the batch's micro-batches, on the device the
 * config names (the cpu device's memory is host memory). */
plait_status plait_check_run_optimizer(plait_config *cfg) {
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    plait_batch b;
    if (plait_mesh_shape(cfg, sizes, axes) != PLAIT_OK || plait_batch_from_config(cfg, &b) != PLAIT_OK) {
        plait_clear_error(); /* the preflight named it */
        return PLAIT_OK;
    }
    const char *optim = plait_config_str(cfg, "optim", "plugin");
    return plait_check_optimizer(cfg, plait_optim_ops_of(optim), optim, sizes[PLAIT_AXIS_DP] * sizes[PLAIT_AXIS_CP],
                                 b.accumulation, strcmp(plait_config_str(cfg, "device", "plugin"), "cpu") == 0);
}

static plait_status preflight(plait_config *cfg, int all, plait_layout_visit visit, void *ctx) {
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES], c[PLAIT_MESH_AXES];
    plait_status st = plait_check_key_rules(cfg);
    if (st != PLAIT_OK) return st;
    st = plait_mesh_shape(cfg, sizes, axes);
    if (st != PLAIT_OK) return st;
    /* sequence parallelism needs a tp group: without one no plugin would
     * read the key (the tp plugin is not loaded), and it would be ignored */
    plait_value sp;
    if (sizes[PLAIT_AXIS_TP] == 1 && plait_config_get(cfg, "parallel.tp", "sequence_parallel", &sp) == PLAIT_OK &&
        sp.i) {
        const char *where = "config";
        plait_config_origin(cfg, "parallel.tp", "sequence_parallel", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel.tp] sequence_parallel = true needs tensor parallelism, but [parallel] "
                               "tp = 1: set [parallel] tp >= 2 (dividing [model] n_head and block_size) or "
                               "sequence_parallel = false",
                               where);
    }
    /* likewise a pipeline's settings without pipeline stages, whatever the
     * plugin (dp, which has no pipeline, read none of them) */
    plait_value pv;
    const char *pp_where = "config";
    if (sizes[PLAIT_AXIS_PP] == 1 && plait_config_get(cfg, "parallel.pp", "virtual_stages", &pv) == PLAIT_OK &&
        pv.i != 1) {
        plait_config_origin(cfg, "parallel.pp", "virtual_stages", &pp_where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel.pp] virtual_stages = %lld needs [parallel] pp >= 2 (pp is 1)", pp_where,
                               (long long)pv.i);
    }
    if (sizes[PLAIT_AXIS_PP] == 1 && plait_config_get(cfg, "parallel.pp", "stages", &pv) == PLAIT_OK && pv.s && *pv.s) {
        plait_config_origin(cfg, "parallel.pp", "stages", &pp_where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel.pp] stages = %s partitions the layers over pipeline stages, but "
                               "[parallel] pp = 1 has none: set [parallel] pp >= 2 (one range a stage), or leave "
                               "stages empty",
                               pp_where, pv.s);
    }
    const char *order = plait_config_str(cfg, "parallel", "order");

    plait_run run;
    memset(&run, 0, sizeof run);
    run.cfg = cfg;
    run.deterministic = plait_config_bool(cfg, "run", "deterministic");
    /* the parallel plugin is told whether the optimizer reduces the
     * gradients itself, as at a run's create (ABI 1.35): a setting the
     * optimizer would leave unused is the plugin's to refuse */
    (void)optim_flags(cfg, &run.optim.flags);
    run.model.block_size = (int32_t)plait_config_int(cfg, "model", "block_size");
    st = plait_batch_from_config(cfg, &run.work.batch);
    if (st == PLAIT_OK) st = plait_model_describe(cfg, (int32_t)run.work.batch.micro_batch, &run.model.desc);
    if (st != PLAIT_OK) return st;
    run.model.spec = plait_model_desc_spec(run.model.desc);

    int world = sizes[0] * sizes[1] * sizes[2] * sizes[3], ep = (int)plait_config_int(cfg, "parallel", "ep");
    plait_plan_set *plans = all ? plait_plan_set_new(sizes[PLAIT_AXIS_DP], sizes[PLAIT_AXIS_TP], sizes[PLAIT_AXIS_PP]) : NULL;
    if (all && !plans) st = PLAIT_ERR_NO_MEMORY;
    for (int r = 0; st == PLAIT_OK && r < world; r++) {
        plait_mesh_coords(r, sizes, axes, c);
        /* a cp rank plans as its cp rank 0 peer: the plan is the dp x tp x pp mesh's */
        if (c[PLAIT_AXIS_CP] != 0 || (!all && (c[PLAIT_AXIS_DP] != 0 || c[PLAIT_AXIS_TP] != 0))) continue;
        plait_mesh_fill(&run.world.mesh, r, sizes, axes, ep, order);
        st = plait_run_load_parallel(&run);
        if (st == PLAIT_OK) {
            const char *rc = plait_config_str(cfg, "model", "recompute");
            plait_layout_rank seen = {.mesh = &run.world.mesh, .spec = run.model.spec, .batch = &run.work.batch,
                                      .plan = &run.work.plan,
                                      .recompute = strcmp(rc, "full") == 0 ? 2 : strcmp(rc, "selective") == 0};
            if (plans) plait_plan_set_add(plans, &seen);
            if (visit) visit(ctx, &seen);
        }
        release_plan(&run);
        /* one rank's failure is the layout's unless the others plan fine */
        if (st != PLAIT_OK && r > 0)
            st = plait_wrap_error(st, "rank %d (dp %d, tp %d, pp %d) of the layout", r, c[PLAIT_AXIS_DP],
                                  c[PLAIT_AXIS_TP], c[PLAIT_AXIS_PP]);
    }
    /* each rank's plan was fine alone; now the rules between them */
    char why[512];
    const char *rule = st == PLAIT_OK && all ? plait_plan_set_check(plans, why, sizeof why) : NULL;
    if (rule) {
        const char *where = "";
        plait_config_origin(cfg, "parallel", "plugin", &where);
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "%s: [parallel] plugin = %s: its plans for dp %d x tp %d x pp %d break the rule [%s] of "
                             "plait/parallel.h, so no rank was started: %s (`plait plugin test` checks a plugin "
                             "against every rule)",
                             where, plait_config_str(cfg, "parallel", "plugin"), sizes[PLAIT_AXIS_DP],
                             sizes[PLAIT_AXIS_TP], sizes[PLAIT_AXIS_PP], rule, why);
    }
    plait_plan_set_free(plans);
    plait_model_desc_free(run.model.desc);
    return st;
}
