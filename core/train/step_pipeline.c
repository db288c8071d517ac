/*
 * The step executor's activation slots and the pipeline's sends and
 * receives (step_pipeline.h). Time blocked on a pipeline neighbour is the
 * step's idle time; the bytes sent count as pipeline traffic.
 *
 * On a bf16 run the boundaries travel in bf16, as Megatron-LM's pipeline
 * sends its bf16 activations (pipeline_dtype): the float32 residual stream
 * and its gradient rounded once as they leave a stage, widened exactly on
 * arrival (plait_comm_p2p_bf16), half the bytes. The residual stream stays
 * float32 inside a stage (docs/parallelism.md, "What crosses ranks")
 * unless `[run] residual = bf16` rounds it, when a received boundary is
 * stored in the slot in bf16 as soon as it arrives
 * (plait_model_boundary_store).
 */
#include "train/step_pipeline.h"

#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/trace.h"

/* ---- activation slots and the sends in flight ------------------------- */

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

/* The i-th oldest send of kind k in flight (its ring, exec.sends); its
 * buffer stays out of the pool until the send is waited for. */
static struct plait_step_send *send_at(plait_step_exec *e, int k, int32_t i) {
    return &e->sends[(size_t)k * (size_t)e->send_window + (size_t)((e->send_head[k] + i) % e->send_window)];
}

/* The oldest send of kind k waited for, its buffer given back to the pool. */
static plait_status send_retire(plait_run *run, int k) {
    plait_step_exec *e = &run->exec;
    struct plait_step_send *x = send_at(e, k, 0);
    plait_status st = x->req ? plait_request_wait(x->req) : PLAIT_OK;
    plait_model_boundary_give(run->model.instance, x->buf);
    *x = (struct plait_step_send){0};
    e->send_head[k] = (e->send_head[k] + 1) % e->send_window;
    e->send_n[k]--;
    return st;
}

plait_status plait_step_wait_all_sends(plait_run *run, plait_step_timing *t) {
    uint64_t t0 = plait_clock_now_ns();
    plait_status st = PLAIT_OK;
    for (int k = 0; k < 2; k++)
        while (run->exec.send_n[k] > 0) {
            plait_status w = send_retire(run, k);
            if (st == PLAIT_OK) st = w;
        }
    add_idle(t, "wait pending sends", t0);
    return st;
}

/* The window (schedule.h, "Sends in flight"): one send a link with one
 * chunk a stage; pp + 1 where several chunks a stage alternate forwards
 * and backwards (interleaved), as many as the step sends where every
 * forward comes first (looped gpipe), which then never waits before the
 * step's end. */
int32_t plait_step_send_window(const plait_plan *plan, int32_t pp) {
    if (plan->chunks <= 1 || pp < 2) return 1;
    size_t last_forward = 0, first_backward = plan->n_instr;
    for (size_t i = 0; i < plan->n_instr; i++) {
        uint32_t op = plan->schedule[i].op;
        if (op == PLAIT_INSTR_FORWARD) last_forward = i;
        if ((op == PLAIT_INSTR_BACKWARD || op == PLAIT_INSTR_BACKWARD_INPUT) && i < first_backward) first_backward = i;
    }
    return first_backward < last_forward ? pp + 1 : plan->chunks * plan->micro_batches;
}

/* A slot is laid out for one chunk's layers (an interleaved stage's
 * chunks do not each pay for the others' activations), and the chunks of
 * a stage whose layers are alike (plait_model_layers_alike: a block each,
 * say) share their slots: a micro-batch takes a free slot laid out for its
 * chunk, else one laid out for an alike chunk, which moves to its layers
 * in the memory it holds, else one never used. So the slots a stage
 * allocates for alike chunks are the most of their micro-batches alive at
 * once, not each chunk's most summed (the planner counts the same,
 * cost/stages.c's live_slots, cost/rank_cost.c), as an allocator that
 * hands a chunk's freed activations to any other (PyTorch's, under
 * Megatron-LM) keeps them. chunks x m slots suffice: each (chunk, mb)
 * takes one once per step. No send reads a slot's own memory (what
 * crosses a stage lives in the model's boundary pool), so a free slot is
 * free to take. */
plait_status plait_step_slot(plait_run *run, int32_t chunk, int32_t mb, int32_t *slot) {
    int32_t m = run->work.plan.micro_batches;
    int32_t key = chunk * m + mb;
    if (run->exec.slot_of[key] >= 0) {
        *slot = run->exec.slot_of[key];
        return PLAIT_OK;
    }
    const int32_t first = run->work.first_layer[chunk], last = run->work.last_layer[chunk];
    int32_t pick = -1, best = 3; /* 0: laid out for this chunk, 1: for an alike one, 2: never used */
    for (int32_t s = 0; s < run->exec.max_slots && best > 0; s++) {
        const int32_t c = run->exec.slot_chunk[s];
        if (run->exec.slot_busy[s]) continue;
        int rank = c == chunk ? 0
                   : c < 0    ? 2
                   : plait_model_layers_alike(run->model.instance, run->work.first_layer[c], run->work.last_layer[c],
                                              first, last)
                       ? 1
                       : 3;
        if (rank < best) best = rank, pick = s;
    }
    if (pick < 0)
        return plait_set_error(PLAIT_ERR_INTERNAL, "schedule holds more than %d micro-batches in flight",
                               run->exec.max_slots);
    plait_status st = plait_model_slot_layers(run->model.instance, pick, first, last);
    if (st != PLAIT_OK) return st;
    run->exec.slot_chunk[pick] = chunk;
    run->exec.slot_busy[pick] = 1;
    run->exec.slot_of[key] = pick;
    if (pick + 1 > run->exec.n_slots_used) run->exec.n_slots_used = pick + 1;
    *slot = pick;
    return PLAIT_OK;
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

/* What crosses a stage boundary; also its ring of sends in flight
 * (exec.sends). */
typedef enum crossing { ACTIVATION = 0, GRADIENT = 1 } crossing;

/* Stage (pp rank) that runs global layer `layer`. */
static int32_t stage_of(const plait_run *run, int32_t layer) { return run->work.plan.layer_stage[layer]; }

/* Tag of what crosses the boundary after layer `boundary` for local
 * micro-batch `mb`; both sides compute it from the same facts. */
static uint32_t pp_tag(crossing what, int32_t boundary, int32_t mb) {
    return ((uint32_t)what << 30) | ((uint32_t)boundary << 16) | ((uint32_t)mb & 0xffffu);
}

/* ---- the pipeline's links --------------------------------------------- */

/* A transport on device streams (nccl) runs one communicator's operations
 * in posting order on one stream, each send until its peer posts the
 * matching receive, and matches a pair's messages in posting order, not by
 * tag. Over one pp communicator a pipeline of several chunks a stage then
 * deadlocks (a pending send holds up a later receive) and, at pp 2, pairs
 * an activation with a gradient: the two kinds cross the same two ranks in
 * different orders on the two sides (docs/transport.md, "Posting order").
 * So such a pipeline gives every link its own communicator: link c of a
 * kind joins stage c and stage c + 1 (mod pp), activations flowing up,
 * gradients down. A rank sends on one link of each kind and receives on
 * another, so each of its links carries one direction to one peer, in the
 * order both sides use (schedule.h, "Message order"): what tcp's (peer,
 * tag) matching gives, and a schedule that runs over tcp runs over it. The
 * links are coloured so that a rank's two links of a kind are different
 * communicators: c % 2, and 2 for the last link of an odd pp (it meets
 * link 0 at stage 0). */
static int link_colour(int32_t link, int32_t pp) { return pp % 2 && link == pp - 1 ? 2 : link % 2; }

static const char *const link_names[2][3] = {{"pp act 0", "pp act 1", "pp act 2"},
                                             {"pp grad 0", "pp grad 1", "pp grad 2"}};

plait_status plait_step_links_open(plait_run *run) {
    int32_t pp = run->world.mesh.pp;
    if (pp < 2 || run->work.plan.chunks < 2) return PLAIT_OK;
    plait_comm *group = run->world.mesh.pp_comm;
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < (pp % 2 ? 3 : 2); c++) {
            plait_status st = plait_comm_split(group, 0, plait_comm_rank(group), link_names[k][c],
                                               &run->exec.pp_link[k][c]);
            if (st != PLAIT_OK) return plait_wrap_error(st, "making the pipeline's link '%s'", link_names[k][c]);
        }
    return PLAIT_OK;
}

void plait_step_links_close(plait_step_exec *exec) {
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++) {
            if (exec->pp_link[k][c]) plait_comm_free(exec->pp_link[k][c]);
            exec->pp_link[k][c] = NULL;
        }
}

/* The communicator of a boundary of kind `what` between this stage and
 * `peer`: its link where the pipeline has links, else the pp group. An
 * activation's link is named by its sender, a gradient's by its receiver. */
static plait_comm *link_of(const plait_run *run, int what, int is_send, int32_t peer) {
    plait_comm *group = run->world.mesh.pp_comm;
    if (!run->exec.pp_link[what][0]) return group;
    int32_t me = plait_comm_rank(group), lower = what == 0 ? (is_send ? me : peer) : (is_send ? peer : me);
    return run->exec.pp_link[what][link_colour(lower, run->world.mesh.pp)];
}

int plait_step_pp_bf16(const plait_run *run) {
    if (run->world.mesh.pp < 2 || plait_device_precision(run->cfg) != PLAIT_PRECISION_BF16) return 0;
    if (plait_comm_p2p_bf16_carried(run->world.mesh.pp_comm, plait_device_mem_kind())) return 1;
    const plait_kernels *k = plait_device_kernels();
    return k && PLAIT_KERNELS_HAS_FROM_BF16(k) ? 2 : 0;
}

/* A boundary as bf16 tensors (exec.pp_bf16 == 2), on a transport that
 * moves device memory itself: rounded on the compute stream before the
 * send's ready point into buffer `wire` (free: the send that last used
 * that place of the ring was waited for), NCCL's bf16 point-to-point, a receive widened on the compute
 * stream once it ended (receives block). Nothing is summed: the bits are
 * those of the core's wire format. */
static plait_status pp_p2p16(plait_run *run, plait_comm *comm, int is_send, const float *buf, int32_t stage,
                             uint32_t tag, size_t wire, plait_request **req) {
    const size_t n = plait_model_boundary_numel(run->model.instance);
    const plait_kernels *k = plait_device_kernels();
    plait_bf16 **w = &run->exec.pp_wire[wire];
    if (!*w && !(*w = plait_device_alloc(n * sizeof(plait_bf16), "pp bf16 messages"))) return PLAIT_ERR_NO_MEMORY;
    if (is_send) k->to_bf16(*w, buf, n);
    plait_status st = plait_comm_p2p(comm, is_send, *w, n, PLAIT_BF16, stage, tag, plait_device_mem_kind(), req);
    if (st == PLAIT_OK && !is_send) k->from_bf16((float *)(uintptr_t)buf, *w, n);
    return st;
}

/* One boundary's send or receive, in bf16 or float32 (exec.pp_bf16);
 * `wire`: its bf16 buffer where it travels as a bf16 tensor. */
static plait_status pp_p2p(plait_run *run, int is_send, const float *buf, int32_t stage, uint32_t tag, size_t wire,
                           plait_request **req) {
    const size_t n = plait_model_boundary_numel(run->model.instance);
    plait_comm *comm = link_of(run, (int)(tag >> 30), is_send, stage);
    if (run->exec.pp_bf16 == 2) return pp_p2p16(run, comm, is_send, buf, stage, tag, wire, req);
    if (run->exec.pp_bf16) return plait_comm_p2p_bf16(comm, is_send, buf, n, stage, tag, plait_device_mem_kind(), req);
    return plait_comm_p2p(comm, is_send, buf, n, PLAIT_F32, stage, tag, plait_device_mem_kind(), req);
}

static plait_status pp_recv(plait_run *run, float *buf, int32_t from_stage, uint32_t tag, plait_step_timing *t) {
    uint64_t t0 = plait_clock_now_ns();
    plait_status st = pp_p2p(run, 0, buf, from_stage, tag, (size_t)run->exec.send_window * 2, NULL);
    add_idle(t, tag >> 30 ? "wait recv gradient" : "wait recv activation", t0);
    return st;
}

/* Posts the send of `buf`, a pool buffer detached from its slot: first the
 * oldest send of its kind is waited for while the window is full (a fixed
 * point of the schedule, so the pool's peak is the schedule's: schedule.h,
 * "Sends in flight"), then this one joins the ring, its buffer given back
 * when it is waited for in turn or at the step's end. */
static plait_status pp_send(plait_run *run, crossing what, float *buf, int32_t to_stage, uint32_t tag,
                            plait_step_timing *t) {
    plait_step_exec *e = &run->exec;
    plait_status st = PLAIT_OK;
    if (e->send_n[what] >= e->send_window) {
        uint64_t t0 = plait_clock_now_ns();
        st = send_retire(run, what);
        add_idle(t, what == ACTIVATION ? "wait send activation" : "wait send gradient", t0);
    }
    int32_t at = (e->send_head[what] + e->send_n[what]) % e->send_window;
    struct plait_step_send *x = send_at(e, what, e->send_n[what]);
    *x = (struct plait_step_send){.buf = buf};
    e->send_n[what]++;
    if (st != PLAIT_OK) return st;
    t->pp_bytes += plait_model_boundary_numel(run->model.instance) * (e->pp_bf16 ? 2 : sizeof(float));
    st = pp_p2p(run, 1, buf, to_stage, tag, (size_t)what * (size_t)e->send_window + (size_t)at, &x->req);
    if (st != PLAIT_OK || !e->pp_link[0][0]) return st;
    /* A link's send is handed to the network now: a transport that queues
     * sends until a test or wait on their communicator (nccl) would
     * otherwise hold it while this stage waits on another link. Its buffer
     * stays in the ring all the same, so the pool's use never depends on
     * when a send completes. */
    int done = 0;
    st = plait_request_test(x->req, &done);
    if (st != PLAIT_OK || done) x->req = NULL; /* test released it */
    return st;
}

plait_status plait_step_recv_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.first_layer[chunk] - 1, slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    st = pp_recv(run, plait_model_boundary(run->model.instance, slot, b), stage_of(run, b), pp_tag(ACTIVATION, b, mb),
                 t);
    /* receives block, so it is all there: into the slot's bf16 store, under a bf16 residual stream */
    if (st == PLAIT_OK) st = plait_model_boundary_store(run->model.instance, slot, b);
    return st;
}

/* The slot's boundary buffer `b`, detached for a send of kind `what`. */
static plait_status send_boundary(plait_run *run, crossing what, int32_t chunk, int32_t mb, int32_t b, int32_t to,
                                  plait_step_timing *t) {
    int32_t slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    float *buf = plait_model_boundary_detach(run->model.instance, slot, b);
    if (!buf)
        return plait_set_error(PLAIT_ERR_INTERNAL, "chunk %d, micro-batch %d: no %s of layer %d to send", (int)chunk,
                               (int)mb, what == ACTIVATION ? "output" : "input gradient", (int)b + (what == GRADIENT));
    return pp_send(run, what, buf, to, pp_tag(what, b, mb), t);
}

plait_status plait_step_send_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.last_layer[chunk];
    return send_boundary(run, ACTIVATION, chunk, mb, b, stage_of(run, b + 1), t);
}

plait_status plait_step_recv_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.last_layer[chunk], slot;
    plait_status st = plait_step_slot(run, chunk, mb, &slot);
    if (st != PLAIT_OK) return st;
    return pp_recv(run, plait_model_boundary_grad(run->model.instance, slot, b), stage_of(run, b + 1),
                   pp_tag(GRADIENT, b, mb), t);
}

plait_status plait_step_send_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t) {
    int32_t b = run->work.first_layer[chunk] - 1;
    return send_boundary(run, GRADIENT, chunk, mb, b, stage_of(run, b), t);
}
