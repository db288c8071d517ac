/*
 * One training step: forward, backward, reduce, step, in the order this
 * rank's schedule (the parallel plugin's plan) gives them, then the step's
 * loss. plait_run_step is the main line; run_schedule reads the
 * instructions; below it, a chunk's forward and backward through its layers
 * with the plugins' per-layer calls. The pipeline's sends, receives and
 * activation slots are step_pipeline.c.
 *
 * Where the time goes (plait_step_timing: compute + comm + idle = step):
 * idle is time blocked on pipeline neighbours (receives, and sends whose
 * buffers are needed again); communication is time in the plugins'
 * per-layer calls (layer_call below: the optimizer's hooks, the parallel
 * plugin's gradient-ready call), the gradient reduction, the optimizer
 * step's own waits and the loss all-reduce (TP all-reduces inside the
 * layers are added from the parallel plugin's count); compute is the rest:
 * the layers, the optimizer's arithmetic, the bookkeeping between them.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "device/device_trace.h"
#include "layout/grad_order.h"
#include "model/tied.h"
#include "plugin/loader.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/trace.h"
#include "runtime/trace_nvtx.h"
#include "train/data.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "train/step_pipeline.h"

/* A pass over the schedule: a training step, or an evaluation's forwards
 * over the validation data. */
typedef enum pass { TRAIN, EVAL } pass;

static plait_status run_schedule(plait_run *run, pass p, int64_t step, plait_step_timing *t,
                                 plait_optim_step_out *out);
static plait_status global_loss(plait_run *run, double *loss, plait_step_timing *t, const plait_optim_step_out *out,
                                double *sumsq);
static void take_plugin_stats(plait_run *run, const plait_optim_step_out *out, plait_step_result *res);

/* The targets that count in a pass's loss (every one but those [data]
 * eod_mask_loss leaves out), counted by every rank from the data alone,
 * and the head's gradient scale to match: each counted target weighs
 * 1 / their number, so the loss is their mean on every layout alike. */
static plait_status count_targets(plait_run *run, plait_data_split split, int64_t step) {
    plait_status st = plait_data_step_targets(plait_run_data_of(run, split), split, step, run->work.batch.global_batch,
                                              run->model.block_size, &run->exec.loss_targets);
    if (st != PLAIT_OK) return st;
    if (run->exec.loss_targets < 1) run->exec.loss_targets = 1; /* a batch of nothing but document ends */
    /* (unmasked, the scale the run set up: 1 / the batch's tokens, rounded alike) */
    if (run->model.instance)
        plait_model_set_target_scale(run->model.instance, 1.0f / (float)((double)run->exec.loss_targets));
    return PLAIT_OK;
}

/* The optimizer left the step's global Σg² on the device (ABI 1.7). */
static int norm_on_device(const plait_optim_step_out *out) {
    return out->struct_size >= offsetof(plait_optim_step_out, norm_on_device) + sizeof out->norm_on_device &&
           out->norm_on_device;
}

plait_status plait_run_step(plait_run *run, plait_step_result *res) {
    memset(res, 0, sizeof *res);
    /* a traced step: the device times its kernels and copies from here
     * (it waits for the work queued before, outside the step's time) */
    if (plait_trace_on()) {
        plait_status dt = plait_device_trace_begin();
        if (dt != PLAIT_OK)
            return plait_wrap_error(dt, "step %lld: the device's timing for [run] trace", (long long)run->step + 1);
    }
    /* one clock read for the step's time and its span (the trace and
     * metrics.csv split the same intervals) */
    uint64_t t0 = plait_clock_now_ns();
    if (run->model.instance) (void)plait_model_take_cp_wait_ns(run->model.instance); /* not an evaluation's */
    char step_name[32];
    snprintf(step_name, sizeof step_name, "step %lld", (long long)run->step + 1);
    int nvtx = plait_trace_range_push(step_name);
    if (run->params.grad_flat) plait_device_kernels()->zero(run->params.grad_flat, run->params.flat_numel);
    plait_status st = PLAIT_OK;
    if (run->parallel.ops->begin_step) st = run->parallel.ops->begin_step(run->parallel.state, run->step);
    /* forward, backward, reduce and the optimizer step */
    plait_optim_step_out out = {.struct_size = sizeof out};
    if (st == PLAIT_OK) st = count_targets(run, PLAIT_DATA_TRAIN, run->step);
    if (st == PLAIT_OK) st = run_schedule(run, TRAIN, run->step, &res->t, &out);
    /* the loss, with every stage's times in the same all-reduce */
    if (st == PLAIT_OK)
        plait_stage_times_put(run->exec.stage_times, run->world.mesh.pp, run->work.stage,
                              1.0 / ((double)run->world.mesh.dp * run->world.mesh.tp), &res->t);
    double sumsq = NAN;
    if (st == PLAIT_OK) st = global_loss(run, &res->loss, &res->t, &out, &sumsq);
    /* steps numbered as metrics.csv numbers them, from 1 */
    if (st == PLAIT_OK && norm_on_device(&out) && !isfinite(sumsq))
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "%s: the gradient norm at step %lld is not finite (NaN or Inf gradients): training "
                             "diverged; no parameter was changed. Lower [optim] lr, or check the data",
                             plait_config_str(run->cfg, "optim", "plugin"), (long long)run->step + 1);
    /* a non-finite loss: the parameters already hold NaN or Inf (an
     * optimizer plugin that writes them without checking its norm, or a
     * rate that overflowed them); stopped here, before the row and any
     * checkpoint, as Megatron stops on a NaN loss */
    if (st == PLAIT_OK && !isfinite(res->loss))
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "the loss at step %lld is %s: the parameters hold non-finite values (written by the last "
                             "update of [optim] plugin %s, or grown from too high an lr); the run stops before "
                             "saving them. Resume from the last checkpoint with a lower [optim] lr, or fix the "
                             "optimizer",
                             (long long)run->step + 1, isnan(res->loss) ? "NaN" : "infinite",
                             plait_config_str(run->cfg, "optim", "plugin"));
    /* the experts' routes summed, their selection bias moved */
    if (st == PLAIT_OK) st = plait_run_moe_step(run, run->step + 1);
    plait_trace_range_pop(nvtx);
    if (st != PLAIT_OK) return plait_wrap_error(st, "step %lld", (long long)run->step + 1);
    plait_stage_timing_take(&run->timing, run->exec.stage_times, res);
    take_plugin_stats(run, &out, res);
    if (norm_on_device(&out)) res->grad_norm = sqrt(sumsq);
    /* a traced step ends when its device work ends: the device's spans
     * lie inside the step's (trace_end waits for the streams) */
    if (plait_trace_on() && (st = plait_device_trace_end()) != PLAIT_OK)
        return plait_wrap_error(st, "step %lld: the device's spans for [run] trace", (long long)run->step + 1);
    uint64_t t1 = plait_clock_now_ns();
    res->t.step_s = 1e-9 * (double)(t1 - t0);
    res->t.compute_s = res->t.step_s - res->t.comm_s - res->t.idle_s;
    run->timing.last_step = res->t;
    run->step++;
    if (plait_trace_on()) {
        plait_trace_args ta = PLAIT_TRACE_ARGS;
        ta.tag = run->step; /* numbered from 1 */
        plait_trace_span(PLAIT_TRACE_STEP, step_name, t0, t1, &ta);
    }
    return PLAIT_OK;
}

plait_status plait_run_eval(plait_run *run, double *val_loss, int64_t *sequences) {
    int64_t batches = plait_config_int(run->cfg, "run", "eval_batches");
    /* Each evaluation pass runs the same forward schedule over a fixed set of
     * validation micro-batches (indexed by the pass, not the training step). */
    double total = 0;
    plait_step_timing t = {0};
    int64_t per_pass = run->exec.n_micro_batches;
    int64_t passes = (batches + per_pass - 1) / per_pass;
    /* no backward follows: the head computes no gradient */
    if (run->model.instance) plait_model_forward_only(run->model.instance, 1);
    plait_status st = PLAIT_OK;
    for (int64_t p = 0; p < passes && st == PLAIT_OK; p++) {
        st = count_targets(run, PLAIT_DATA_VAL, p);
        if (st == PLAIT_OK) st = run_schedule(run, EVAL, p, &t, NULL);
        double loss = 0;
        if (st == PLAIT_OK) st = global_loss(run, &loss, &t, NULL, NULL);
        total += loss;
    }
    if (run->model.instance) plait_model_forward_only(run->model.instance, 0);
    if (st != PLAIT_OK) return plait_wrap_error(st, "evaluation");
    *val_loss = total / (double)passes;
    if (sequences) *sequences = passes * run->work.batch.global_batch;
    return PLAIT_OK;
}

plait_status plait_run_eval_set(plait_run *run, int k, double *val_loss) {
    if (k < 0 || k >= run->n_val_sets)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "validation set %d of %d", k, run->n_val_sets);
    run->eval_data = run->val_data[k];
    plait_status st = plait_run_eval(run, val_loss, NULL);
    run->eval_data = NULL;
    return st == PLAIT_OK ? st : plait_wrap_error(st, "validation set %s", run->val_names[k]);
}

/* ---- the schedule -------------------------------------------------------- */

static plait_status forward_chunk(plait_run *run, pass p, int64_t step, int32_t chunk, int32_t mb,
                                  plait_step_timing *t);
static plait_status backward_chunk(plait_run *run, plait_instr_op op, int32_t chunk, int32_t mb,
                                   plait_step_timing *t);
static plait_status reduce_grads(plait_run *run, plait_step_timing *t);

static int is_head_chunk(const plait_run *run, int32_t chunk) {
    return run->work.last_layer[chunk] == run->model.spec->n_layers - 1;
}

/* The pipeline phase runs from the schedule's start to REDUCE_GRADS: its
 * span, and this stage's work in it (time blocked on pipeline neighbours
 * excluded), measure the bubble (step_timing.h). */
typedef struct pipeline_phase {
    double start, idle_before;
    int ended;
} pipeline_phase;

static void end_phase(pipeline_phase *ph, plait_step_timing *t) {
    t->pipe_end_s = plait_clock_now() - ph->start;
    t->fb_s = t->pipe_end_s - (t->idle_s - ph->idle_before);
    ph->ended = 1;
}

static const char *const instr_names[] = {"?", "FORWARD", "BACKWARD", "RECV_ACT", "SEND_ACT", "RECV_GRAD",
                                          "SEND_GRAD", "REDUCE_GRADS", "OPTIM_STEP", "BACKWARD_INPUT",
                                          "BACKWARD_WEIGHT"};

/* One instruction of the schedule as the trace shows it: its op, chunk
 * (in `layer`: trace_merge.c names it so) and micro-batch. */
static const char *instr_name(const plait_instr *in) {
    return in->op < sizeof instr_names / sizeof instr_names[0] ? instr_names[in->op] : "?";
}

static void trace_instr(const plait_instr *in, uint64_t t0) {
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.layer = in->chunk;
    ta.mb = in->mb;
    plait_trace_end(PLAIT_TRACE_INSTR, instr_name(in), t0, &ta);
}

/* A layer's forward or backward. */
static void trace_layer(const char *what, int32_t layer, int32_t mb, uint64_t t0) {
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.layer = layer;
    ta.mb = mb;
    plait_trace_end(PLAIT_TRACE_COMPUTE, what, t0, &ta);
}

/* One pass over this rank's instructions. A training pass runs them all;
 * an evaluation pass runs the forwards and their activations' sends, and
 * releases each slot as soon as nothing more reads it. Loss sums land in
 * exec.mb_loss_dev. */
static plait_status run_schedule(plait_run *run, pass p, int64_t step, plait_step_timing *t,
                                 plait_optim_step_out *out) {
    const plait_plan *plan = &run->work.plan;
    int train = p == TRAIN;
    memset(run->exec.step_sums, 0, sizeof(double) * (size_t)(run->exec.n_micro_batches +
                                                             plait_stage_times_len(run->world.mesh.pp)));
    plait_device_kernels()->zero_f64(run->exec.mb_loss_dev, (size_t)run->exec.n_micro_batches);
    plait_step_reset_slots(run);
    pipeline_phase phase = {plait_clock_now(), t->idle_s, 0};
    t->pipe_end_s = t->fb_s = 0;
    plait_status st = PLAIT_OK;
    for (size_t i = 0; st == PLAIT_OK && i < plan->n_instr; i++) {
        const plait_instr *in = &plan->schedule[i];
        int32_t c = in->chunk, mb = in->mb;
        uint64_t span0 = plait_trace_begin();
        int nvtx = plait_trace_range_push(instr_name(in));
        switch ((plait_instr_op)in->op) {
        case PLAIT_INSTR_FORWARD:
            st = forward_chunk(run, p, step, c, mb, t);
            if (st == PLAIT_OK && !train && is_head_chunk(run, c)) plait_step_release_slot(run, c, mb);
            break;
        case PLAIT_INSTR_BACKWARD:
        case PLAIT_INSTR_BACKWARD_INPUT:
        case PLAIT_INSTR_BACKWARD_WEIGHT:
            if (train) st = backward_chunk(run, (plait_instr_op)in->op, c, mb, t);
            break;
        case PLAIT_INSTR_RECV_ACT: st = plait_step_recv_activation(run, c, mb, t); break;
        case PLAIT_INSTR_SEND_ACT:
            st = plait_step_send_activation(run, c, mb, t);
            if (st == PLAIT_OK && !train) plait_step_release_slot(run, c, mb);
            break;
        case PLAIT_INSTR_RECV_GRAD:
            if (train) st = plait_step_recv_gradient(run, c, mb, t);
            break;
        case PLAIT_INSTR_SEND_GRAD:
            if (!train) break;
            st = plait_step_send_gradient(run, c, mb, t);
            /* a split backward keeps the slot for its weight half */
            if (!run->exec.split_backward) plait_step_release_slot(run, c, mb);
            break;
        case PLAIT_INSTR_REDUCE_GRADS:
            end_phase(&phase, t);
            if (train) st = reduce_grads(run, t);
            break;
        case PLAIT_INSTR_OPTIM_STEP:
            if (train) {
                plait_optim_step_in sin = {.struct_size = sizeof sin, .step = step,
                                           .sumsq_dev = run->exec.mb_loss_dev + run->exec.n_micro_batches};
                uint64_t o0 = plait_trace_begin();
                int onv = plait_trace_range_push("optimizer step");
                if (run->snapshot_fence) { /* the step writes what a checkpoint's snapshot is still copying */
                    st = plait_device_events_open()->event_wait(run->snapshot_fence, PLAIT_STREAM_COMPUTE);
                    run->snapshot_fence = NULL;
                }
                if (st == PLAIT_OK) {
                    uint64_t sets = plait_error_sets();
                    st = plait_plugin_said(PLAIT_KIND_OPTIM, run->optim.ops, "step", sets,
                                           run->optim.ops->step(run->optim.state, &sin, out));
                }
                plait_trace_range_pop(onv);
                plait_trace_end(PLAIT_TRACE_OPTIM, "optimizer step", o0, NULL);
                t->comm_s += out->wait_seconds; /* 0 from a plugin that predates the field */
                /* the bf16 copies of the weights are made again at each layer's next forward */
                plait_model_weights_changed(run->model.instance);
            }
            break;
        default:
            st = plait_set_error(PLAIT_ERR_INTERNAL, "schedule instruction %zu has unknown op %u", i, in->op);
        }
        plait_trace_range_pop(nvtx);
        if (span0) trace_instr(in, span0);
    }
    if (!phase.ended) end_phase(&phase, t); /* a schedule without REDUCE_GRADS */
    /* Sends still in flight finish before the buffers are touched again. */
    plait_status w = plait_step_wait_all_sends(run, t);
    return st == PLAIT_OK ? w : st;
}

/* ---- a chunk's forward and backward ---------------------------------------- */

/* The plugins' per-layer calls around a layer's forward and backward. They
 * communicate (ZeRO-3 gathers, ZeRO-2 reductions, the parallel plugin's
 * bucketed all-reduces), so their time counts as communication. */
typedef enum layer_call { BEFORE_FORWARD, AFTER_FORWARD, BEFORE_BACKWARD, AFTER_BACKWARD } layer_call;

static const char *const hook_names[] = {"before_forward", "after_forward", "before_backward", "after_backward"};

static plait_status call_plugins(plait_run *run, layer_call call, int32_t l, int32_t mb, plait_step_timing *t) {
    const plait_optim_ops *o = run->optim.ops;
    void *s = run->optim.state;
    int last = mb == run->work.plan.micro_batches - 1;
    uint64_t t0 = plait_clock_now_ns();
    plait_status st = PLAIT_OK;
    int called = 1;
    switch (call) {
    case BEFORE_FORWARD:
        if (o->before_forward) st = o->before_forward(s, l, mb);
        else called = 0;
        break;
    case AFTER_FORWARD:
        if (o->after_forward) st = o->after_forward(s, l, mb);
        else called = 0;
        break;
    case BEFORE_BACKWARD:
        if (o->before_backward) st = o->before_backward(s, l, mb);
        else called = 0;
        break;
    case AFTER_BACKWARD: /* then the layer's gradients are ready for the parallel plugin */
        if (o->after_backward) st = o->after_backward(s, l, mb, last);
        if (st == PLAIT_OK && run->parallel.ops->grads_ready)
            st = run->parallel.ops->grads_ready(run->parallel.state, l, mb, last);
        called = o->after_backward || run->parallel.ops->grads_ready;
        break;
    }
    uint64_t t1 = plait_clock_now_ns();
    t->comm_s += 1e-9 * (double)(t1 - t0);
    /* the same interval in the trace: communication over DP as the summary
     * counts it (ZeRO's gathers and reductions, the gradient buckets) */
    if (called && plait_trace_on()) {
        plait_trace_args ta = PLAIT_TRACE_ARGS;
        ta.layer = l;
        ta.mb = mb;
        ta.comm = "dp";
        ta.detail = "hook";
        plait_trace_span(PLAIT_TRACE_WAIT, hook_names[call], t0, t1, &ta);
    }
    return st;
}

/* [run] debug_compute_sleep_ms: extra "compute" that costs no CPU, so the
 * ranks of a test sharing few cores keep the schedule's timing (a forward
 * takes `units` = 1 of it, a backward 2, as the simulator's tests assume). */
static void debug_sleep(const plait_run *run, int units, plait_step_timing *t) {
    if (run->debug_sleep_s <= 0) return;
    double t0 = plait_clock_now();
    plait_clock_sleep(run->debug_sleep_s * units);
    t->compute_s += plait_clock_now() - t0;
}

static int chunk_has(const plait_run *run, int32_t chunk, int32_t layer) {
    return run->work.first_layer[chunk] <= layer && layer <= run->work.last_layer[chunk];
}

/* The micro-batch's tokens and targets, for a chunk with the embedding or the head. */
static plait_status load_batch(plait_run *run, pass p, int64_t step, int32_t chunk, int64_t global_mb, int32_t slot) {
    int32_t head = run->model.spec->n_layers - 1;
    if (!chunk_has(run, chunk, 0) && !chunk_has(run, chunk, head)) return PLAIT_OK;
    plait_status st = plait_run_fetch_batch(run, p == TRAIN ? PLAIT_DATA_TRAIN : PLAIT_DATA_VAL, step, global_mb,
                                            run->exec.tokens, run->exec.targets);
    if (st != PLAIT_OK) return st;
    const plait_mesh *m = &run->world.mesh;
    if (m->cp > 1) { /* this rank's 2 chunks of every sequence (model/ring_attention.h) */
        const int64_t B = run->work.batch.micro_batch, Tl = run->model.block_size / m->cp;
        plait_cp_take_local(run->exec.tokens, B, Tl, m->cp, m->cp_rank);
        plait_cp_take_local(run->exec.targets, B, Tl, m->cp, m->cp_rank);
    }
    return plait_model_set_batch(run->model.instance, slot, run->exec.tokens, run->exec.targets);
}

static plait_status forward_chunk(plait_run *run, pass p, int64_t step, int32_t chunk, int32_t mb,
                                  plait_step_timing *t) {
    int64_t global_mb = run->work.plan.first_micro_batch + mb;
    int32_t slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st == PLAIT_OK) st = load_batch(run, p, step, chunk, global_mb, slot);
    for (int32_t l = run->work.first_layer[chunk]; st == PLAIT_OK && l <= run->work.last_layer[chunk]; l++) {
        if (run->exec.on_layer) run->exec.on_layer(run->exec.on_layer_ctx, 0, l, mb);
        st = call_plugins(run, BEFORE_FORWARD, l, mb, t);
        uint64_t span0 = plait_trace_begin();
        int nvtx = plait_trace_range_push("forward");
        if (st == PLAIT_OK) st = plait_model_forward_layer(run->model.instance, l, slot);
        plait_trace_range_pop(nvtx);
        if (span0) trace_layer("forward", l, mb, span0);
        if (st == PLAIT_OK) st = call_plugins(run, AFTER_FORWARD, l, mb, t);
    }
    /* the loss sum stays on the device until the step's end (global_loss) */
    if (st == PLAIT_OK && is_head_chunk(run, chunk) && run->world.mesh.tp_rank == 0) {
        const double *sum = plait_model_loss_sum_device(run->model.instance, slot);
        if (sum)
            st = plait_device_copy(run->exec.mb_loss_dev + global_mb, sum, sizeof(double), PLAIT_COPY_ON_DEVICE);
    }
    if (st == PLAIT_OK) debug_sleep(run, 1, t);
    return st;
}

/* Deterministic mode: a layer's gradients of one micro-batch go to scratch
 * and are folded into the canonical tree right after its backward. */
static void grads_to_scratch(plait_run *run, int32_t layer) {
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (p->layer != layer) continue;
        p->grad = run->params.grad_scratch + p->flat_offset;
        plait_device_kernels()->zero(p->grad, p->numel);
    }
}

static void grads_to_flat(plait_run *run, int32_t layer) {
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (p->layer == layer) p->grad = run->params.grad_flat + p->flat_offset;
    }
}

static plait_status fold_grads(plait_run *run, int32_t layer, int32_t mb) {
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (p->layer != layer) continue;
        plait_status st = plait_sum_tree_add(run->params.tree, mb, run->params.grad_scratch + p->flat_offset,
                                             run->params.grad_flat + p->flat_offset, p->flat_offset, p->numel, NULL);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

/* The input half of a split backward needs the layer's parameters, not
 * their gradients: the optimizer's forward hooks bracket it (ZeRO-3 gathers
 * and releases them; plait/optim.h). */
static plait_status backward_input_layer(plait_run *run, int32_t l, int32_t mb, int32_t slot, plait_step_timing *t) {
    plait_status st = call_plugins(run, BEFORE_FORWARD, l, mb, t);
    uint64_t span0 = plait_trace_begin();
    int nvtx = plait_trace_range_push("backward_input");
    if (st == PLAIT_OK) st = plait_model_backward_input(run->model.instance, l, slot);
    plait_trace_range_pop(nvtx);
    if (span0) trace_layer("backward_input", l, mb, span0);
    if (st == PLAIT_OK) st = call_plugins(run, AFTER_FORWARD, l, mb, t);
    return st;
}

/* The gradients of layer l's parameters for micro-batch mb: the whole
 * backward (BACKWARD), or the weight half of a split one (BACKWARD_WEIGHT). */
static plait_status backward_grads_layer(plait_run *run, plait_instr_op op, int32_t l, int32_t mb, int32_t slot,
                                         plait_step_timing *t) {
    plait_status st = call_plugins(run, BEFORE_BACKWARD, l, mb, t);
    if (st != PLAIT_OK) return st;
    if (run->params.tree) grads_to_scratch(run, l);
    uint64_t span0 = plait_trace_begin();
    const char *what = op == PLAIT_INSTR_BACKWARD_WEIGHT ? "backward_weight" : "backward";
    int nvtx = plait_trace_range_push(what);
    st = op == PLAIT_INSTR_BACKWARD_WEIGHT ? plait_model_backward_weight(run->model.instance, l, slot)
                                           : plait_model_backward_layer(run->model.instance, l, slot);
    plait_trace_range_pop(nvtx);
    if (span0) trace_layer(what, l, mb, span0);
    if (run->params.tree) {
        grads_to_flat(run, l);
        if (st == PLAIT_OK) st = fold_grads(run, l, mb);
    }
    if (st == PLAIT_OK) st = call_plugins(run, AFTER_BACKWARD, l, mb, t);
    return st;
}

/* BACKWARD, BACKWARD_INPUT or BACKWARD_WEIGHT of (chunk, mb), layers last
 * to first. */
static plait_status backward_chunk(plait_run *run, plait_instr_op op, int32_t chunk, int32_t mb,
                                   plait_step_timing *t) {
    int32_t slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    for (int32_t l = run->work.last_layer[chunk]; st == PLAIT_OK && l >= run->work.first_layer[chunk]; l--) {
        if (run->exec.on_layer) run->exec.on_layer(run->exec.on_layer_ctx, 1, l, mb);
        st = op == PLAIT_INSTR_BACKWARD_INPUT ? backward_input_layer(run, l, mb, slot, t)
                                              : backward_grads_layer(run, op, l, mb, slot, t);
    }
    if (st == PLAIT_OK) debug_sleep(run, op == PLAIT_INSTR_BACKWARD ? 2 : 1, t);
    /* The gradient buffers back to the pool once read: all but the input
     * gradient a chunk sends (given back once that send is waited for), the
     * embedding's after its weight half. A chunk that sends its input
     * gradient keeps the slot until SEND_GRAD, a split one until its weight
     * half. */
    int32_t first = run->work.first_layer[chunk];
    if (st == PLAIT_OK && first > 0 && op != PLAIT_INSTR_BACKWARD_WEIGHT)
        plait_model_boundary_release(run->model.instance, slot, first - 1);
    if (st == PLAIT_OK && first == 0 && op != PLAIT_INSTR_BACKWARD_INPUT)
        plait_model_boundary_release(run->model.instance, slot, -1);
    if (op == PLAIT_INSTR_BACKWARD_WEIGHT || (op == PLAIT_INSTR_BACKWARD && first == 0))
        plait_step_release_slot(run, chunk, mb);
    return st;
}

/* ---- reduce and the step's loss ---------------------------------------------- */

/* Sum the tied copy's gradient into its local original (model/tied.h),
 * when the core owns gradients. */
static void combine_tied_grads(plait_run *run) {
    if (run->optim.flags & PLAIT_OPTIM_REDUCES_GRADS) return; /* the optimizer does it after reducing */
    plait_tied_fold_grads(&run->params.set, plait_device_kernels());
}

static plait_status reduce_grads(plait_run *run, plait_step_timing *t) {
    plait_status st = plait_step_wait_all_sends(run, t);
    /* In the one finish order (layout/grad_order.h). The parallel plugin
     * finishes all its axes in one call, in that order itself. */
    const plait_grad_finisher *order;
    int32_t n_order = plait_grad_finish_order(&order);
    int par_done = 0;
    for (int32_t i = 0; st == PLAIT_OK && i < n_order; i++) {
        uint64_t t0 = plait_clock_now_ns();
        switch (order[i]) {
        case PLAIT_GRAD_FINISH_DP:
        case PLAIT_GRAD_FINISH_PP:
        case PLAIT_GRAD_FINISH_TP:
            if (!par_done && run->parallel.ops->finish_grads) st = run->parallel.ops->finish_grads(run->parallel.state);
            par_done = 1;
            break;
        case PLAIT_GRAD_FINISH_OPTIM:
            if (run->optim.ops->finish_grads) st = run->optim.ops->finish_grads(run->optim.state);
            break;
        case PLAIT_GRAD_FINISH_TIED:
            combine_tied_grads(run);
            continue; /* local arithmetic, not communication */
        }
        uint64_t t1 = plait_clock_now_ns();
        t->comm_s += 1e-9 * (double)(t1 - t0);
        if (plait_trace_on()) {
            plait_trace_args ta = PLAIT_TRACE_ARGS;
            ta.comm = "dp"; /* the reductions' own spans inside name their groups */
            ta.detail = "finish";
            plait_trace_span(PLAIT_TRACE_WAIT, order[i] == PLAIT_GRAD_FINISH_OPTIM ? "optim finish_grads"
                                                                                  : "parallel finish_grads",
                             t0, t1, &ta);
        }
    }
    return st;
}

/* Mean token loss of the step: every global micro-batch's loss sum has one
 * contributor (its last-stage, TP-rank-0 rank), so a world sum of the
 * zero-padded vector is exact; the tree sum then matches one process. The
 * per-stage pipeline times ride along in the same all-reduce (2*pp entries
 * after the losses; each rank adds its share of its stage's mean), so
 * measuring the bubble costs no extra collective. */
static plait_status global_loss(plait_run *run, double *loss, plait_step_timing *t, const plait_optim_step_out *out,
                                double *sumsq) {
    int64_t n = run->exec.n_micro_batches;
    plait_coll_opts opts = {.struct_size = sizeof opts, .label = "step loss"};
    uint64_t t0 = plait_clock_now_ns();
    /* the step's one read: every micro-batch's loss sum at once, and the
     * optimizer's Σg² after them when it left it on the device */
    const int with_norm = out && norm_on_device(out);
    plait_status st = plait_device_copy(run->exec.read_host, run->exec.mb_loss_dev,
                                        sizeof(double) * (size_t)(n + with_norm), PLAIT_COPY_TO_HOST);
    if (st == PLAIT_OK) {
        memcpy(run->exec.mb_loss, run->exec.read_host, sizeof(double) * (size_t)n);
        if (with_norm) *sumsq = run->exec.read_host[n];
    }
    if (st == PLAIT_OK && run->world.mesh.world_size > 1)
        st = plait_comm_allreduce(run->world.comm, run->exec.step_sums, run->exec.step_sums,
                                  (size_t)(n + plait_stage_times_len(run->world.mesh.pp)), PLAIT_F64, PLAIT_SUM, &opts,
                                  NULL);
    uint64_t t1 = plait_clock_now_ns();
    t->comm_s += 1e-9 * (double)(t1 - t0);
    /* the same interval in the trace: the losses' copy from the device
     * and their all-reduce over the world */
    if (plait_trace_on()) {
        plait_trace_args ta = PLAIT_TRACE_ARGS;
        ta.comm = "world";
        ta.detail = "loss";
        plait_trace_span(PLAIT_TRACE_WAIT, "step loss", t0, t1, &ta);
    }
    if (st != PLAIT_OK) return st;
    *loss = plait_sum_tree_f64(run->exec.mb_loss, (int32_t)n) / (double)run->exec.loss_targets;
    return PLAIT_OK;
}

/* The parallel plugin's traffic and waits of the step, and the optimizer's. */
static void take_plugin_stats(plait_run *run, const plait_optim_step_out *out, plait_step_result *res) {
    /* ring attention's waits block inside forward/backward too (cp > 1):
     * the model's count, the readings of its trace spans */
    if (run->model.instance) res->t.comm_s += 1e-9 * (double)plait_model_take_cp_wait_ns(run->model.instance);
    res->lr = out->lr;
    res->grad_norm = out->grad_norm;
    res->t.optim_bytes = out->bytes_sent;
    if (!run->parallel.ops->step_stats) return;
    plait_parallel_stats ps = {.struct_size = sizeof ps};
    run->parallel.ops->step_stats(run->parallel.state, &ps);
    res->t.dp_bytes = ps.axis_bytes[0];
    res->t.tp_bytes = ps.axis_bytes[1];
    res->t.pp_bytes += ps.axis_bytes[2]; /* the trainer counted the pipeline's sends */
    res->t.tp_s = ps.axis_wait_seconds[1];
    res->t.comm_s += ps.axis_wait_seconds[1]; /* TP all-reduces block inside forward/backward */
    res->t.reductions = ps.reductions;
    res->t.early_reductions = ps.early_reductions;
}

/* ---- the executor's state ----------------------------------------------- */

int plait_plan_splits_backward(const plait_plan *plan) {
    for (size_t i = 0; i < plan->n_instr; i++)
        if (plan->schedule[i].op == PLAIT_INSTR_BACKWARD_INPUT) return 1;
    return 0;
}

int plait_split_kernels_ok(uint16_t abi_minor, const plait_kernels *k) {
    /* a table compiled against SDK 1.7 or later (its struct_size reaches
     * the first 1.7 entry) follows the contract its header states, 1.6's
     * halves included, whatever older core its plugin says it can load
     * into (the cuda plugin: 1.3); abi_minor is the oldest core, not the
     * newest contract */
    return abi_minor >= 6 || (k && k->struct_size > offsetof(plait_kernels, attention_fused_scratch));
}

plait_status plait_run_check_split_device(void) {
    const plait_plugin_desc *d = plait_device_desc_open();
    if (!d || plait_split_kernels_ok(d->abi_minor, plait_device_kernels_open())) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "the pipeline schedule splits each backward into input and weight halves, which "
                           "calls the device's backward kernels with one half's outputs NULL (plait ABI 1.6), "
                           "but device plugin '%s' declares ABI %u.%u; use a schedule without the split "
                           "([parallel.pp] schedule = 1f1b) or a device plugin built for 1.6",
                           d->name, (unsigned)d->abi_major, (unsigned)d->abi_minor);
}

plait_status plait_step_exec_open(plait_run *run) {
    plait_step_exec *e = &run->exec;
    e->max_slots = run->work.plan.chunks * run->work.plan.micro_batches;
    e->split_backward = plait_plan_splits_backward(&run->work.plan);
    e->n_micro_batches = plait_batch_micro_batches(&run->work.batch);
    e->pp_bf16 = plait_step_pp_bf16(run);
    size_t bt = (size_t)run->work.batch.micro_batch * (size_t)run->model.block_size;
    e->slot_of = malloc(sizeof(int32_t) * (size_t)e->max_slots);
    e->slot_busy = calloc((size_t)e->max_slots, 1);
    e->slot_chunk = malloc(sizeof(int32_t) * (size_t)e->max_slots);
    for (int32_t s = 0; e->slot_chunk && s < e->max_slots; s++) e->slot_chunk[s] = -1;
    e->send_window = plait_step_send_window(&run->work.plan, run->world.mesh.pp);
    e->sends = calloc((size_t)e->send_window * 2, sizeof *e->sends);
    e->pp_wire = calloc((size_t)e->send_window * 2 + 1, sizeof(plait_bf16 *));
    e->step_sums = calloc((size_t)(e->n_micro_batches + plait_stage_times_len(run->world.mesh.pp)), sizeof(double));
    e->tokens = malloc(bt * sizeof(int32_t));
    e->targets = malloc(bt * sizeof(int32_t));
    e->mb_loss_dev = plait_device_alloc(sizeof(double) * (size_t)(e->n_micro_batches + 1), "activations");
    e->read_host = malloc(sizeof(double) * (size_t)(e->n_micro_batches + 1));
    if (!e->slot_of || !e->slot_busy || !e->slot_chunk || !e->sends || !e->pp_wire || !e->step_sums || !e->tokens ||
        !e->targets || !e->mb_loss_dev || !e->read_host)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the step executor");
    e->mb_loss = e->step_sums;
    e->stage_times = e->step_sums + e->n_micro_batches;
    return plait_step_links_open(run);
}

void plait_step_exec_close(plait_step_exec *e) {
    plait_step_links_close(e);
    free(e->slot_of);
    free(e->slot_busy);
    free(e->slot_chunk);
    free(e->sends);
    for (int32_t i = 0; e->pp_wire && i < e->send_window * 2 + 1; i++) plait_device_free(e->pp_wire[i]);
    free(e->pp_wire);
    free(e->step_sums);
    free(e->tokens);
    free(e->targets);
    plait_device_free(e->mb_loss_dev);
    free(e->read_host);
    *e = (plait_step_exec){0};
}
