/*
 * The step executor: runs this rank's instruction list (the plan's schedule)
 * — forward and backward of model chunks per micro-batch with the optimizer's
 * layer hooks and the parallel plugin's gradient-ready calls, pipeline sends
 * and receives, gradient reduction and the optimizer step — and accounts the
 * step's time as compute, communication and idle.
 *
 * The three add up to the step: idle is time blocked on pipeline neighbours
 * (receives, and sends whose buffers are needed again), communication is
 * time blocked on every other exchange (the optimizer's layer hooks, the
 * parallel plugin's gradient hooks and reduction, TP all-reduces inside the
 * layers, the optimizer step's own waits, the loss all-reduce), and compute
 * is the rest — the layers, the optimizer's arithmetic and the bookkeeping
 * between them (batch loading, activation slots).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/clock.h"
#include "comm/comm.h"
#include "layout/grad_order.h"
#include "model/tied.h"
#include "device/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/run.h"
#include "train/run_internal.h"

static double now_s(void) { return plait_clock_now(); }

/* ---- activation slots ------------------------------------------------ */

static plait_status wait_slot_sends(plait_run *run, int32_t slot) {
    plait_status st = PLAIT_OK;
    for (int k = 0; k < 2; k++) {
        plait_request **r = &run->exec.send_req[slot * 2 + k];
        if (*r) {
            plait_status w = plait_request_wait(*r);
            if (st == PLAIT_OK) st = w;
            *r = NULL;
        }
    }
    return st;
}

/* 1 once every send posted from the slot's buffers has completed (polls,
 * never blocks). */
static plait_status slot_sends_done(plait_run *run, int32_t slot, int *done) {
    *done = 1;
    for (int k = 0; k < 2; k++) {
        plait_request **r = &run->exec.send_req[slot * 2 + k];
        if (!*r) continue;
        int d = 0;
        plait_status st = plait_request_test(*r, &d);
        if (st != PLAIT_OK) {
            *r = NULL; /* test released it */
            return st;
        }
        if (d) *r = NULL;
        else *done = 0;
    }
    return PLAIT_OK;
}

/* A slot for (chunk, mb): its own if it has one this step, else a free slot
 * of the chunk's pool whose sends have completed. A freed slot whose send
 * is still in flight is never waited for here: under a rendezvous transport
 * (large messages) that send completes only when the neighbour posts its
 * receive, which may come after the neighbour needs something from this
 * stage, so waiting could deadlock (schedule.h). Chunk c owns slots
 * [c*m, (c+1)*m), laid out for its layers only (an interleaved stage's
 * chunks do not each pay for the other's activations); m per chunk suffice:
 * each (chunk, mb) takes a slot once per step, and sends are all finished
 * at the end of every step. */
static plait_status get_slot(plait_run *run, int32_t chunk, int32_t mb, int32_t *slot) {
    int32_t m = run->layout.plan.micro_batches;
    int32_t key = chunk * m + mb;
    if (run->exec.slot_of[key] >= 0) {
        *slot = run->exec.slot_of[key];
        return PLAIT_OK;
    }
    for (int32_t s = chunk * m; s < (chunk + 1) * m && s < run->exec.max_slots; s++) {
        if (run->exec.slot_busy[s]) continue;
        int done = 0;
        plait_status st = slot_sends_done(run, s, &done);
        if (st != PLAIT_OK) return st;
        if (!done) continue; /* its buffers are still being sent */
        st = plait_model_slot_layers(run->model.instance, s, run->layout.first_layer[chunk], run->layout.last_layer[chunk]);
        if (st != PLAIT_OK) return st;
        run->exec.slot_busy[s] = 1;
        run->exec.slot_of[key] = s;
        if (s + 1 > run->exec.n_slots_used) run->exec.n_slots_used = s + 1;
        *slot = s;
        return PLAIT_OK;
    }
    return plait_set_error(PLAIT_ERR_INTERNAL, "schedule holds more than %d micro-batches in flight", run->exec.max_slots);
}

static void release_slot(plait_run *run, int32_t chunk, int32_t mb) {
    int32_t key = chunk * run->layout.plan.micro_batches + mb;
    if (run->exec.slot_of[key] >= 0) run->exec.slot_busy[run->exec.slot_of[key]] = 0;
    run->exec.slot_of[key] = -1;
}

/* ---- pipeline neighbours ---------------------------------------------- */

/* Stage (pp rank) that runs global layer `layer`. */
static int32_t stage_of(const plait_run *run, int32_t layer) { return run->layout.plan.layer_stage[layer]; }

/* Tag of the activation (dir 0) or gradient (dir 1) crossing the boundary
 * after layer `boundary` for local micro-batch `mb`; both sides compute it
 * from the same facts. */
static uint32_t pp_tag(int dir, int32_t boundary, int32_t mb) {
    return ((uint32_t)dir << 30) | ((uint32_t)boundary << 16) | ((uint32_t)mb & 0xffffu);
}

static plait_status pp_recv(plait_run *run, float *buf, int32_t from_stage, uint32_t tag, const char *what,
                            plait_step_timing *t) {
    double t0 = now_s();
    (void)what; /* point-to-point operations carry no label */
    plait_status st = plait_comm_p2p(run->world.mesh.pp_comm, 0, buf, plait_model_boundary_numel(run->model.instance),
                                     PLAIT_F32, from_stage, tag, plait_device_mem_kind(), NULL);
    t->idle_s += now_s() - t0;
    return st;
}

static plait_status pp_send(plait_run *run, int32_t slot, int k, const float *buf, int32_t to_stage, uint32_t tag,
                            const char *what, plait_step_timing *t) {
    /* At most one pending send of each kind per slot. A slot sends one
     * activation and one gradient per step, so this never waits in practice;
     * the other kind's send is left alone (waiting for it could deadlock as
     * in get_slot). */
    plait_request **r = &run->exec.send_req[slot * 2 + k];
    if (*r) {
        plait_status w = plait_request_wait(*r);
        *r = NULL;
        if (w != PLAIT_OK) return w;
    }
    (void)what; /* point-to-point operations carry no label */
    t->pp_bytes += plait_model_boundary_numel(run->model.instance) * sizeof(float);
    return plait_comm_p2p(run->world.mesh.pp_comm, 1, buf, plait_model_boundary_numel(run->model.instance), PLAIT_F32,
                          to_stage, tag, plait_device_mem_kind(), r);
}

/* ---- the executor's state ----------------------------------------------- */

int plait_plan_splits_backward(const plait_plan *plan) {
    for (size_t i = 0; i < plan->n_instr; i++)
        if (plan->schedule[i].op == PLAIT_INSTR_BACKWARD_INPUT) return 1;
    return 0;
}

plait_status plait_run_check_split_device(void) {
    const plait_plugin_desc *d = plait_device_desc_open();
    if (!d || d->abi_minor >= 6) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "the pipeline schedule splits each backward into input and weight halves, which "
                           "calls the device's backward kernels with one half's outputs NULL (plait ABI 1.6), "
                           "but device plugin '%s' declares ABI %u.%u; use a schedule without the split "
                           "([parallel.pp] schedule = 1f1b) or a device plugin built for 1.6",
                           d->name, (unsigned)d->abi_major, (unsigned)d->abi_minor);
}

plait_status plait_step_exec_open(plait_run *run) {
    plait_step_exec *e = &run->exec;
    e->max_slots = run->layout.plan.chunks * run->layout.plan.micro_batches;
    e->split_backward = plait_plan_splits_backward(&run->layout.plan);
    int64_t n_global = run->layout.batch.global_batch / run->layout.batch.micro_batch;
    size_t bt = (size_t)run->layout.batch.micro_batch * (size_t)run->model.block_size;
    e->slot_of = malloc(sizeof(int32_t) * (size_t)e->max_slots);
    e->slot_busy = calloc((size_t)e->max_slots, 1);
    e->send_req = calloc((size_t)e->max_slots * 2, sizeof(plait_request *));
    e->step_sums = calloc((size_t)(n_global + plait_stage_times_len(run->world.mesh.pp)), sizeof(double));
    e->tokens = malloc(bt * sizeof(int32_t));
    e->targets = malloc(bt * sizeof(int32_t));
    e->mb_loss_dev = plait_device_alloc(sizeof(double) * (size_t)n_global, "activations");
    if (!e->slot_of || !e->slot_busy || !e->send_req || !e->step_sums || !e->tokens || !e->targets ||
        !e->mb_loss_dev)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the step executor");
    e->mb_loss = e->step_sums;
    e->stage_times = e->step_sums + n_global;
    return PLAIT_OK;
}

void plait_step_exec_close(plait_step_exec *e) {
    free(e->slot_of);
    free(e->slot_busy);
    free(e->send_req);
    free(e->step_sums);
    free(e->tokens);
    free(e->targets);
    plait_device_free(e->mb_loss_dev);
    *e = (plait_step_exec){0};
}

/* ---- compute ------------------------------------------------------------ */

/* [run] debug_compute_sleep_ms: extra "compute" that costs no CPU, so the
 * ranks of a test sharing few cores keep the schedule's timing (a forward
 * takes `units` = 1 of it, a backward 2, as the simulator's tests assume). */
static void debug_sleep(const plait_run *run, int units, plait_step_timing *t) {
    if (run->debug_sleep_s <= 0) return;
    double t0 = now_s();
    plait_clock_sleep(run->debug_sleep_s * units);
    t->compute_s += now_s() - t0;
}

static int chunk_has(const plait_run *run, int32_t chunk, int32_t layer) {
    return run->layout.first_layer[chunk] <= layer && layer <= run->layout.last_layer[chunk];
}

static plait_status load_batch(plait_run *run, int32_t slot, int32_t chunk, int split, int64_t step,
                               int64_t global_mb) {
    int32_t head = run->model.spec->n_layers - 1;
    if (!chunk_has(run, chunk, 0) && !chunk_has(run, chunk, head)) return PLAIT_OK;
    plait_status st = plait_run_fetch_batch(run, split, step, global_mb, run->exec.tokens, run->exec.targets);
    if (st != PLAIT_OK) return st;
    return plait_model_set_batch(run->model.instance, slot, run->exec.tokens, run->exec.targets);
}

static plait_status forward_chunk(plait_run *run, int32_t chunk, int32_t mb, int split, int64_t step,
                                  int64_t global_mb, plait_step_timing *t) {
    int32_t slot;
    plait_status st = get_slot(run, chunk, mb, &slot);
    if (st == PLAIT_OK) st = load_batch(run, slot, chunk, split, step, global_mb);
    /* Optimizer hooks are communication (ZeRO-3 gathers, ZeRO-2 reductions):
     * their time counts as such; the layers' is compute. */
    for (int32_t l = run->layout.first_layer[chunk]; st == PLAIT_OK && l <= run->layout.last_layer[chunk]; l++) {
        if (run->exec.on_layer) run->exec.on_layer(run->exec.on_layer_ctx, 0, l, mb);
        double t0 = now_s();
        if (run->optim.ops->before_forward) st = run->optim.ops->before_forward(run->optim.state, l, mb);
        double t1 = now_s();
        if (st == PLAIT_OK) st = plait_model_forward_layer(run->model.instance, l, slot);
        double t2 = now_s();
        if (st == PLAIT_OK && run->optim.ops->after_forward) st = run->optim.ops->after_forward(run->optim.state, l, mb);
        t->comm_s += (t1 - t0) + (now_s() - t2);
    }
    /* the loss sum stays on the device until the step's end (global_loss) */
    if (st == PLAIT_OK && chunk_has(run, chunk, run->model.spec->n_layers - 1) && run->world.mesh.tp_rank == 0) {
        const double *sum = plait_model_loss_sum_device(run->model.instance, slot);
        if (sum)
            st = plait_device_copy(run->exec.mb_loss_dev + global_mb, sum, sizeof(double), PLAIT_COPY_ON_DEVICE);
    }
    if (st == PLAIT_OK) debug_sleep(run, 1, t);
    return st;
}

/* Deterministic mode: a layer's gradients of one micro-batch go to scratch
 * and are folded into the canonical tree right after its backward. */
static void redirect_grads(plait_run *run, int32_t layer, int to_scratch) {
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (p->layer != layer) continue;
        if (to_scratch) {
            p->grad = run->params.grad_scratch + p->flat_offset;
            plait_device_kernels()->zero(p->grad, p->numel);
        } else {
            p->grad = run->params.grad_flat + p->flat_offset;
        }
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
    double t0 = now_s();
    plait_status st = PLAIT_OK;
    if (run->optim.ops->before_forward) st = run->optim.ops->before_forward(run->optim.state, l, mb);
    double t1 = now_s();
    if (st == PLAIT_OK) st = plait_model_backward_input(run->model.instance, l, slot);
    double t2 = now_s();
    if (st == PLAIT_OK && run->optim.ops->after_forward) st = run->optim.ops->after_forward(run->optim.state, l, mb);
    t->comm_s += (t1 - t0) + (now_s() - t2);
    return st;
}

/* The gradients of layer l's parameters for micro-batch mb: the whole
 * backward (BACKWARD), or the weight half of a split one (BACKWARD_WEIGHT),
 * between the optimizer's backward hooks, followed by the parallel plugin's
 * gradient-ready call. */
static plait_status backward_grads_layer(plait_run *run, int32_t l, int32_t mb, int32_t slot, int weight_half,
                                         plait_step_timing *t) {
    int last = mb == run->layout.plan.micro_batches - 1;
    double t0 = now_s();
    plait_status st = PLAIT_OK;
    if (run->optim.ops->before_backward) st = run->optim.ops->before_backward(run->optim.state, l, mb);
    double t1 = now_s();
    if (st == PLAIT_OK && run->params.tree) redirect_grads(run, l, 1);
    if (st == PLAIT_OK)
        st = weight_half ? plait_model_backward_weight(run->model.instance, l, slot)
                         : plait_model_backward_layer(run->model.instance, l, slot);
    if (run->params.tree) {
        redirect_grads(run, l, 0);
        if (st == PLAIT_OK) st = fold_grads(run, l, mb);
    }
    double t2 = now_s();
    if (st == PLAIT_OK && run->optim.ops->after_backward) st = run->optim.ops->after_backward(run->optim.state, l, mb, last);
    if (st == PLAIT_OK && run->parallel.ops->grads_ready) st = run->parallel.ops->grads_ready(run->parallel.state, l, mb, last);
    t->comm_s += (t1 - t0) + (now_s() - t2);
    return st;
}

/* BACKWARD, BACKWARD_INPUT or BACKWARD_WEIGHT of (chunk, mb), layers last
 * to first. */
static plait_status backward_chunk(plait_run *run, plait_instr_op op, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t slot;
    plait_status st = get_slot(run, chunk, mb, &slot);
    for (int32_t l = run->layout.last_layer[chunk]; st == PLAIT_OK && l >= run->layout.first_layer[chunk]; l--) {
        if (run->exec.on_layer) run->exec.on_layer(run->exec.on_layer_ctx, 1, l, mb);
        st = op == PLAIT_INSTR_BACKWARD_INPUT
                 ? backward_input_layer(run, l, mb, slot, t)
                 : backward_grads_layer(run, l, mb, slot, op == PLAIT_INSTR_BACKWARD_WEIGHT, t);
    }
    if (st == PLAIT_OK) debug_sleep(run, op == PLAIT_INSTR_BACKWARD ? 2 : 1, t);
    /* A chunk that sends its input gradient keeps the slot until SEND_GRAD,
     * a split one until its weight half. */
    if (op == PLAIT_INSTR_BACKWARD_WEIGHT || (op == PLAIT_INSTR_BACKWARD && run->layout.first_layer[chunk] == 0))
        release_slot(run, chunk, mb);
    return st;
}

/* Sum the tied copy's gradient into its local original (model/tied.h),
 * when the core owns gradients. */
static void combine_tied_grads(plait_run *run) {
    if (run->optim.flags & PLAIT_OPTIM_REDUCES_GRADS) return; /* the optimizer does it after reducing */
    plait_tied_fold_grads(&run->params.set, plait_device_kernels());
}

static plait_status reduce_grads(plait_run *run, plait_step_timing *t) {
    double t0 = now_s();
    plait_status st = PLAIT_OK;
    for (int32_t s = 0; s < run->exec.max_slots; s++) {
        plait_status w = wait_slot_sends(run, s);
        if (st == PLAIT_OK) st = w;
    }
    t->idle_s += now_s() - t0;
    /* In the one finish order (layout/grad_order.h). The parallel plugin
     * finishes all its axes in one call, in that order itself. */
    const plait_grad_finisher *order;
    int32_t n_order = plait_grad_finish_order(&order);
    int par_done = 0;
    for (int32_t i = 0; st == PLAIT_OK && i < n_order; i++) {
        t0 = now_s();
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
        t->comm_s += now_s() - t0;
    }
    return st;
}

/* Mean token loss of the step: every global micro-batch's loss sum has one
 * contributor (its last-stage, TP-rank-0 rank), so a world sum of the
 * zero-padded vector is exact; the tree sum then matches one process. The
 * per-stage pipeline times ride along in the same all-reduce (2*pp entries
 * after the losses; each rank adds its share of its stage's mean), so
 * measuring the bubble costs no extra collective. */
static plait_status global_loss(plait_run *run, double *loss, plait_step_timing *t) {
    int64_t n = run->layout.batch.global_batch / run->layout.batch.micro_batch;
    plait_status st = PLAIT_OK;
    plait_coll_opts opts = {.struct_size = sizeof opts, .label = "step loss"};
    double t0 = now_s();
    /* the step's one read of the loss: every micro-batch's sum at once */
    st = plait_device_copy(run->exec.mb_loss, run->exec.mb_loss_dev, sizeof(double) * (size_t)n, PLAIT_COPY_TO_HOST);
    if (st == PLAIT_OK && run->world.mesh.world_size > 1)
        st = plait_comm_allreduce(run->world.comm, run->exec.step_sums, run->exec.step_sums, (size_t)(n + plait_stage_times_len(run->world.mesh.pp)), PLAIT_F64,
                             PLAIT_SUM, &opts, NULL);
    t->comm_s += now_s() - t0;
    if (st != PLAIT_OK) return st;
    *loss = plait_sum_tree_f64(run->exec.mb_loss, (int32_t)n) / ((double)run->layout.batch.global_batch * run->model.block_size);
    return PLAIT_OK;
}

plait_status plait_run_execute(plait_run *run, int split, int64_t step, int train, plait_step_timing *t,
                               plait_optim_step_out *out) {
    const plait_plan *plan = &run->layout.plan;
    int64_t n_global = run->layout.batch.global_batch / run->layout.batch.micro_batch;
    memset(run->exec.step_sums, 0, sizeof(double) * (size_t)(n_global + plait_stage_times_len(run->world.mesh.pp)));
    plait_device_kernels()->zero_f64(run->exec.mb_loss_dev, (size_t)n_global);
    /* The pipeline phase runs from here to REDUCE_GRADS; time blocked on
     * pipeline neighbours inside it is idle, the rest is this stage's work. */
    double phase_start = now_s(), idle_before = t->idle_s;
    t->pipe_end_s = t->fb_s = 0;
    for (int32_t k = 0; k < plan->chunks * plan->micro_batches; k++) run->exec.slot_of[k] = -1;
    memset(run->exec.slot_busy, 0, (size_t)run->exec.max_slots);
    plait_status st = PLAIT_OK;
    for (size_t i = 0; st == PLAIT_OK && i < plan->n_instr; i++) {
        const plait_instr *in = &plan->schedule[i];
        int32_t c = in->chunk, mb = in->mb;
        int64_t gmb = plan->first_micro_batch + mb;
        int32_t slot;
        switch ((plait_instr_op)in->op) {
        case PLAIT_INSTR_FORWARD:
            st = forward_chunk(run, c, mb, split, step, gmb, t);
            if (st == PLAIT_OK && !train && run->layout.last_layer[c] == run->model.spec->n_layers - 1) release_slot(run, c, mb);
            break;
        case PLAIT_INSTR_BACKWARD:
        case PLAIT_INSTR_BACKWARD_INPUT:
        case PLAIT_INSTR_BACKWARD_WEIGHT:
            if (train) st = backward_chunk(run, (plait_instr_op)in->op, c, mb, t);
            break;
        case PLAIT_INSTR_RECV_ACT: {
            int32_t b = run->layout.first_layer[c] - 1;
            st = get_slot(run, c, mb, &slot);
            if (st == PLAIT_OK)
                st = pp_recv(run, plait_model_boundary(run->model.instance, slot, b), stage_of(run, b), pp_tag(0, b, mb),
                             "pipeline activation", t);
            break;
        }
        case PLAIT_INSTR_SEND_ACT: {
            int32_t b = run->layout.last_layer[c];
            st = get_slot(run, c, mb, &slot);
            if (st == PLAIT_OK)
                st = pp_send(run, slot, 0, plait_model_boundary(run->model.instance, slot, b), stage_of(run, b + 1),
                             pp_tag(0, b, mb), "pipeline activation", t);
            if (st == PLAIT_OK && !train) release_slot(run, c, mb);
            break;
        }
        case PLAIT_INSTR_RECV_GRAD: {
            if (!train) break;
            int32_t b = run->layout.last_layer[c];
            st = get_slot(run, c, mb, &slot);
            if (st == PLAIT_OK)
                st = pp_recv(run, plait_model_boundary_grad(run->model.instance, slot, b), stage_of(run, b + 1),
                             pp_tag(1, b, mb), "pipeline gradient", t);
            break;
        }
        case PLAIT_INSTR_SEND_GRAD: {
            if (!train) break;
            int32_t b = run->layout.first_layer[c] - 1;
            st = get_slot(run, c, mb, &slot);
            if (st == PLAIT_OK)
                st = pp_send(run, slot, 1, plait_model_boundary_grad(run->model.instance, slot, b), stage_of(run, b),
                             pp_tag(1, b, mb), "pipeline gradient", t);
            if (!run->exec.split_backward) release_slot(run, c, mb);
            break;
        }
        case PLAIT_INSTR_REDUCE_GRADS:
            t->pipe_end_s = now_s() - phase_start;
            t->fb_s = t->pipe_end_s - (t->idle_s - idle_before);
            st = train ? reduce_grads(run, t) : PLAIT_OK;
            break;
        case PLAIT_INSTR_OPTIM_STEP:
            if (train) {
                plait_optim_step_in sin = {.struct_size = sizeof sin, .step = step};
                st = run->optim.ops->step(run->optim.state, &sin, out);
                t->comm_s += out->wait_seconds; /* 0 from a plugin that predates the field */
            }
            break;
        default:
            st = plait_set_error(PLAIT_ERR_INTERNAL, "schedule instruction %zu has unknown op %u", i, in->op);
        }
    }
    if (t->pipe_end_s == 0) { /* a schedule without REDUCE_GRADS */
        t->pipe_end_s = now_s() - phase_start;
        t->fb_s = t->pipe_end_s - (t->idle_s - idle_before);
    }
    /* Sends still in flight finish before the buffers are touched again. */
    double t0 = now_s();
    for (int32_t s = 0; s < run->exec.max_slots; s++) {
        plait_status w = wait_slot_sends(run, s);
        if (st == PLAIT_OK) st = w;
    }
    t->idle_s += now_s() - t0;
    return st;
}

plait_status plait_run_step(plait_run *run, plait_step_result *res) {
    memset(res, 0, sizeof *res);
    double t0 = now_s();
    if (run->params.grad_flat) plait_device_kernels()->zero(run->params.grad_flat, run->params.flat_numel);
    plait_status st = PLAIT_OK;
    if (run->parallel.ops->begin_step) st = run->parallel.ops->begin_step(run->parallel.state, run->step);
    plait_optim_step_out out = {.struct_size = sizeof out};
    if (st == PLAIT_OK) st = plait_run_execute(run, 0, run->step, 1, &res->t, &out);
    if (st == PLAIT_OK)
        plait_stage_times_put(run->exec.stage_times, run->world.mesh.pp, run->layout.stage,
                              1.0 / ((double)run->world.mesh.dp * run->world.mesh.tp), &res->t);
    if (st == PLAIT_OK) st = global_loss(run, &res->loss, &res->t);
    if (st != PLAIT_OK) return plait_wrap_error(st, "step %lld", (long long)run->step);
    plait_stage_timing_take(&run->timing, run->exec.stage_times, res);
    res->lr = out.lr;
    res->grad_norm = out.grad_norm;
    res->t.optim_bytes = out.bytes_sent;
    if (run->parallel.ops->step_stats) {
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
    res->t.step_s = now_s() - t0;
    res->t.compute_s = res->t.step_s - res->t.comm_s - res->t.idle_s;
    run->timing.last_step = res->t;
    run->step++;
    return PLAIT_OK;
}

plait_status plait_run_eval(plait_run *run, double *val_loss) {
    int64_t batches = plait_config_int(run->cfg, "run", "eval_batches");
    /* Each evaluation pass runs the same forward schedule over a fixed set of
     * validation micro-batches (indexed by the pass, not the training step). */
    double total = 0;
    plait_step_timing t = {0};
    int64_t per_pass = run->layout.batch.global_batch / run->layout.batch.micro_batch;
    int64_t passes = (batches + per_pass - 1) / per_pass;
    for (int64_t p = 0; p < passes; p++) {
        plait_status st = plait_run_execute(run, 1, p, 0, &t, NULL);
        double loss = 0;
        if (st == PLAIT_OK) st = global_loss(run, &loss, &t);
        if (st != PLAIT_OK) return plait_wrap_error(st, "evaluation");
        total += loss;
    }
    *val_loss = total / (double)passes;
    return PLAIT_OK;
}
