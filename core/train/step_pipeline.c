/*
 * The step executor's activation slots and the pipeline's sends and
 * receives (step_pipeline.h). Time blocked on a pipeline neighbour is the
 * step's idle time; the bytes sent count as pipeline traffic.
 *
 * On a bf16 run the boundaries travel in bf16, as Megatron-LM's pipeline
 * sends its bf16 activations (pipeline_dtype): the float32 residual stream
 * and its gradient rounded once as they leave a stage, widened exactly on
 * arrival (plait_comm_p2p_bf16), half the bytes. The residual stream stays
 * float32 inside a stage (docs/parallelism.md, "What crosses ranks").
 */
#include "train/step_pipeline.h"

#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/trace.h"

/* ---- activation slots ------------------------------------------------ */

static plait_status wait_sends(plait_run *run, int32_t slot) {
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

/* Time blocked on a pipeline neighbour from t0: the step's idle time, and
 * the same interval in the trace. */
static void add_idle(plait_step_timing *t, const char *what, uint64_t t0) {
    uint64_t t1 = plait_clock_now_ns();
    t->idle_s += 1e-9 * (double)(t1 - t0);
    if (!plait_trace_on()) return;
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.comm = "pp";
    ta.detail = "pipeline"; /* a neighbour's, not a collective's */
    plait_trace_span(PLAIT_TRACE_WAIT, what, t0, t1, &ta);
}

plait_status plait_step_wait_all_sends(plait_run *run, plait_step_timing *t) {
    uint64_t t0 = plait_clock_now_ns();
    plait_status st = PLAIT_OK;
    for (int32_t s = 0; s < run->exec.max_slots; s++) {
        plait_status w = wait_sends(run, s);
        if (st == PLAIT_OK) st = w;
    }
    add_idle(t, "wait pending sends", t0);
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

/* A freed slot whose send is still in flight is never waited for here:
 * under a rendezvous transport (large messages) that send completes only
 * when the neighbour posts its receive, which may come after the neighbour
 * needs something from this stage, so waiting could deadlock (schedule.h).
 * Chunk c owns slots [c*m, (c+1)*m), laid out for its layers only (an
 * interleaved stage's chunks do not each pay for the other's activations);
 * m per chunk suffice: each (chunk, mb) takes a slot once per step, and
 * sends are all finished at the end of every step. */
plait_status plait_step_slot(plait_run *run, int32_t chunk, int32_t mb, int32_t *slot) {
    int32_t m = run->work.plan.micro_batches;
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
        st = plait_model_slot_layers(run->model.instance, s, run->work.first_layer[chunk], run->work.last_layer[chunk]);
        if (st != PLAIT_OK) return st;
        run->exec.slot_busy[s] = 1;
        run->exec.slot_of[key] = s;
        if (s + 1 > run->exec.n_slots_used) run->exec.n_slots_used = s + 1;
        *slot = s;
        return PLAIT_OK;
    }
    return plait_set_error(PLAIT_ERR_INTERNAL, "schedule holds more than %d micro-batches in flight", run->exec.max_slots);
}

void plait_step_release_slot(plait_run *run, int32_t chunk, int32_t mb) {
    int32_t key = chunk * run->work.plan.micro_batches + mb;
    if (run->exec.slot_of[key] >= 0) run->exec.slot_busy[run->exec.slot_of[key]] = 0;
    run->exec.slot_of[key] = -1;
}

void plait_step_reset_slots(plait_run *run) {
    for (int32_t k = 0; k < run->work.plan.chunks * run->work.plan.micro_batches; k++) run->exec.slot_of[k] = -1;
    memset(run->exec.slot_busy, 0, (size_t)run->exec.max_slots);
}

/* ---- pipeline neighbours ---------------------------------------------- */

/* What crosses a stage boundary; also the index of its pending send in a
 * slot (exec.send_req). */
typedef enum crossing { ACTIVATION = 0, GRADIENT = 1 } crossing;

/* Stage (pp rank) that runs global layer `layer`. */
static int32_t stage_of(const plait_run *run, int32_t layer) { return run->work.plan.layer_stage[layer]; }

/* Tag of what crosses the boundary after layer `boundary` for local
 * micro-batch `mb`; both sides compute it from the same facts. */
static uint32_t pp_tag(crossing what, int32_t boundary, int32_t mb) {
    return ((uint32_t)what << 30) | ((uint32_t)boundary << 16) | ((uint32_t)mb & 0xffffu);
}

int plait_step_pp_bf16(const plait_run *run) {
    if (run->world.mesh.pp < 2 || plait_device_precision(run->cfg) != PLAIT_PRECISION_BF16) return 0;
    if (plait_comm_p2p_bf16_carried(run->world.mesh.pp_comm, plait_device_mem_kind())) return 1;
    const plait_kernels *k = plait_device_kernels();
    return k && PLAIT_KERNELS_HAS_FROM_BF16(k) ? 2 : 0;
}

/* A boundary as bf16 tensors (exec.pp_bf16 == 2), on a transport that
 * moves device memory itself: rounded on the compute stream before the
 * send's ready point into buffer `wire` (free: the slot's last send of this
 * kind ended), NCCL's bf16 point-to-point, a receive widened on the compute
 * stream once it ended (receives block). Nothing is summed: the bits are
 * those of the core's wire format. */
static plait_status pp_p2p16(plait_run *run, int is_send, const float *buf, int32_t stage, uint32_t tag, size_t wire,
                             plait_request **req) {
    const size_t n = plait_model_boundary_numel(run->model.instance);
    const plait_kernels *k = plait_device_kernels();
    plait_bf16 **w = &run->exec.pp_wire[wire];
    if (!*w && !(*w = plait_device_alloc(n * sizeof(plait_bf16), "pp bf16 messages"))) return PLAIT_ERR_NO_MEMORY;
    if (is_send) k->to_bf16(*w, buf, n);
    plait_status st = plait_comm_p2p(run->world.mesh.pp_comm, is_send, *w, n, PLAIT_BF16, stage, tag,
                                     plait_device_mem_kind(), req);
    if (st == PLAIT_OK && !is_send) k->from_bf16((float *)(uintptr_t)buf, *w, n);
    return st;
}

/* One boundary's send or receive, in bf16 or float32 (exec.pp_bf16);
 * `wire`: its bf16 buffer where it travels as a bf16 tensor. */
static plait_status pp_p2p(plait_run *run, int is_send, const float *buf, int32_t stage, uint32_t tag, size_t wire,
                           plait_request **req) {
    const size_t n = plait_model_boundary_numel(run->model.instance);
    if (run->exec.pp_bf16 == 2) return pp_p2p16(run, is_send, buf, stage, tag, wire, req);
    if (run->exec.pp_bf16)
        return plait_comm_p2p_bf16(run->world.mesh.pp_comm, is_send, buf, n, stage, tag, plait_device_mem_kind(), req);
    return plait_comm_p2p(run->world.mesh.pp_comm, is_send, buf, n, PLAIT_F32, stage, tag, plait_device_mem_kind(),
                          req);
}

static plait_status pp_recv(plait_run *run, float *buf, int32_t from_stage, uint32_t tag, plait_step_timing *t) {
    uint64_t t0 = plait_clock_now_ns();
    plait_status st = pp_p2p(run, 0, buf, from_stage, tag, (size_t)run->exec.max_slots * 2, NULL);
    add_idle(t, tag >> 30 ? "wait recv gradient" : "wait recv activation", t0);
    return st;
}

static plait_status pp_send(plait_run *run, int32_t slot, crossing what, const float *buf, int32_t to_stage,
                            uint32_t tag, plait_step_timing *t) {
    /* At most one pending send of each kind per slot. A slot sends one
     * activation and one gradient per step, so this never waits in practice;
     * the other kind's send is left alone (waiting for it could deadlock as
     * in plait_step_slot). */
    plait_request **r = &run->exec.send_req[slot * 2 + what];
    if (*r) {
        plait_status w = plait_request_wait(*r);
        *r = NULL;
        if (w != PLAIT_OK) return w;
    }
    t->pp_bytes += plait_model_boundary_numel(run->model.instance) * (run->exec.pp_bf16 ? 2 : sizeof(float));
    return pp_p2p(run, 1, buf, to_stage, tag, (size_t)slot * 2 + what, r);
}

plait_status plait_step_recv_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.first_layer[chunk] - 1, slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    return pp_recv(run, plait_model_boundary(run->model.instance, slot, b), stage_of(run, b),
                   pp_tag(ACTIVATION, b, mb), t);
}

plait_status plait_step_send_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.last_layer[chunk], slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    return pp_send(run, slot, ACTIVATION, plait_model_boundary(run->model.instance, slot, b), stage_of(run, b + 1),
                   pp_tag(ACTIVATION, b, mb), t);
}

plait_status plait_step_recv_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.last_layer[chunk], slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    return pp_recv(run, plait_model_boundary_grad(run->model.instance, slot, b), stage_of(run, b + 1),
                   pp_tag(GRADIENT, b, mb), t);
}

plait_status plait_step_send_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.first_layer[chunk] - 1, slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    return pp_send(run, slot, GRADIENT, plait_model_boundary_grad(run->model.instance, slot, b), stage_of(run, b),
                   pp_tag(GRADIENT, b, mb), t);
}
