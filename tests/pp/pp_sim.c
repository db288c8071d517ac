/* The pipeline instruction-list simulator: see pp_sim.h. */
#include "pp/pp_sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ACT = 0, GRAD = 1 };

typedef struct message {
    int32_t chunk, mb;    /* as the receiver names it */
    int32_t from_chunk;   /* the sender's chunk */
    int64_t time;         /* when the data exists */
    int64_t taken;        /* the receiver's clock when it received it */
} message;

typedef struct link_queue {
    message *items;
    size_t head, tail;
} link_queue;

typedef struct sim {
    const pp_sim_config *cfg;
    const plait_instr *const *lists;
    const size_t *lens;
    int32_t p, v, m;
    int64_t V; /* virtual stages */
    pp_sim_result *res;
    /* per stage */
    size_t *pc;
    int64_t *clock, *live, *reduce_arrive, *outstanding, *last_received;
    uint8_t *reduced, *stepped;
    /* per (stage, chunk, mb) */
    uint8_t *recv_act, *fwd, *sent_act, *recv_grad, *bwd, *sent_grad;
    uint8_t *split, *wgt; /* BACKWARD_INPUT ran (the weight half is due); weights done */
    int64_t *fwd_start, *bwd_end, *act_taken, *grad_taken;
    link_queue *links; /* (src * p + dst) * 2 + kind */
} sim;

static const char *const op_names[] = {"?", "FORWARD", "BACKWARD", "RECV_ACT", "SEND_ACT",
                                       "RECV_GRAD", "SEND_GRAD", "REDUCE_GRADS", "OPTIM_STEP",
                                       "BACKWARD_INPUT", "BACKWARD_WEIGHT"};

const char *pp_sim_op_name(int op) { return op >= 1 && op <= PLAIT_INSTR_BACKWARD_WEIGHT ? op_names[op] : "?"; }

const char *pp_sim_verdict_name(pp_sim_verdict v) {
    static const char *const names[] = {"ok", "bad instruction", "dependency", "order",
                                        "deadlock", "unmatched", "incomplete"};
    return (unsigned)v <= PP_SIM_INCOMPLETE ? names[v] : "?";
}

static int report(sim *S, pp_sim_verdict verdict, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static int report(sim *S, pp_sim_verdict verdict, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->res->message, sizeof S->res->message, fmt, ap);
    va_end(ap);
    S->res->verdict = verdict;
    return -1;
}

static size_t at(const sim *S, int32_t s, int32_t c, int32_t j) {
    return ((size_t)s * (size_t)S->v + (size_t)c) * (size_t)S->m + (size_t)j;
}

static link_queue *link_of(sim *S, int32_t src, int32_t dst, int kind) {
    return &S->links[((size_t)src * (size_t)S->p + (size_t)dst) * 2 + (size_t)kind];
}

static void describe(const plait_instr *in, char *buf, size_t len) {
    if (in->op == PLAIT_INSTR_REDUCE_GRADS || in->op == PLAIT_INSTR_OPTIM_STEP)
        snprintf(buf, len, "%s", pp_sim_op_name(in->op));
    else
        snprintf(buf, len, "%s(chunk %u, mb %d)", pp_sim_op_name(in->op), (unsigned)in->chunk, (int)in->mb);
}

/* Why stage s cannot run its current instruction, for deadlock messages.
 * Sets *unmatched when the stage waits on a peer that has finished. */
static void explain_wait(sim *S, int32_t s, char *buf, size_t len, int *unmatched) {
    const plait_instr *in = &S->lists[s][S->pc[s]];
    char what[64];
    describe(in, what, sizeof what);
    if (in->op == PLAIT_INSTR_RECV_ACT || in->op == PLAIT_INSTR_RECV_GRAD) {
        int64_t k = (int64_t)in->chunk * S->p + s;
        int32_t peer = (int32_t)((in->op == PLAIT_INSTR_RECV_ACT ? k - 1 : k + 1) % S->p);
        int done = S->pc[peer] >= S->lens[peer];
        if (done) *unmatched = 1;
        char peer_at[64] = "has finished its list";
        if (!done) {
            char pw[48];
            describe(&S->lists[peer][S->pc[peer]], pw, sizeof pw);
            snprintf(peer_at, sizeof peer_at, "is at #%zu %s", S->pc[peer], pw);
        }
        snprintf(buf, len, "stage %d waits at #%zu %s from stage %d, which %s", s, S->pc[s], what, peer,
                 peer_at);
        return;
    }
    /* REDUCE_GRADS: an unreceived send, or the embedding partner. */
    for (int32_t d = 0; d < S->p; d++)
        for (int kind = 0; kind < 2; kind++) {
            link_queue *q = link_of(S, s, d, kind);
            if (q->head == q->tail) continue;
            int done = S->pc[d] >= S->lens[d];
            if (done) *unmatched = 1;
            snprintf(buf, len,
                     "stage %d waits at #%zu %s for its %s of (chunk %d, mb %d) to be received by stage %d, "
                     "which %s", s, S->pc[s], what, kind == ACT ? "activation" : "gradient",
                     q->items[q->head].from_chunk, q->items[q->head].mb, d,
                     done ? "has finished its list" : "has not received it");
            return;
        }
    int32_t partner = s == 0 ? S->p - 1 : 0;
    snprintf(buf, len, "stage %d waits at #%zu %s for stage %d (embedding group) to reach REDUCE_GRADS", s,
             S->pc[s], what, partner);
}

/* Try to run stage s's current instruction: 0 done, 1 blocked, -1 error. */
static int step(sim *S, int32_t s) {
    const plait_instr *in = &S->lists[s][S->pc[s]];
    size_t i = S->pc[s];
    char what[64];
    describe(in, what, sizeof what);
    int op = in->op;
    if (op < PLAIT_INSTR_FORWARD || op > PLAIT_INSTR_BACKWARD_WEIGHT)
        return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: unknown op %d", s, i, op);
    if (S->stepped[s])
        return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s after OPTIM_STEP", s, i, what);
    if (S->reduced[s] && op != PLAIT_INSTR_OPTIM_STEP)
        return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s after REDUCE_GRADS (only OPTIM_STEP may follow)",
                      s, i, what);
    if (op == PLAIT_INSTR_REDUCE_GRADS || op == PLAIT_INSTR_OPTIM_STEP) {
        if (in->mb != -1 || in->chunk != 0)
            return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s must carry chunk 0, mb -1 (has %u, %d)", s, i,
                          what, (unsigned)in->chunk, (int)in->mb);
        if (op == PLAIT_INSTR_OPTIM_STEP) {
            if (!S->reduced[s])
                return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: OPTIM_STEP before REDUCE_GRADS", s, i);
            S->stepped[s] = 1;
            return 0;
        }
        for (int32_t c = 0; c < S->v; c++)
            for (int32_t j = 0; j < S->m; j++) {
                size_t x = at(S, s, c, j);
                if (!S->bwd[x] || !S->wgt[x])
                    return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: REDUCE_GRADS before %s(chunk %d, mb %d)", s,
                                  i, S->split[x] ? "BACKWARD_WEIGHT" : "BACKWARD", c, j);
            }
        if (S->reduce_arrive[s] < 0) S->reduce_arrive[s] = S->clock[s];
        if (S->outstanding[s] > 0) return 1;
        int64_t done = S->clock[s];
        if (S->last_received[s] > done) done = S->last_received[s];
        if (S->p >= 2 && (s == 0 || s == S->p - 1)) {
            int32_t partner = s == 0 ? S->p - 1 : 0;
            if (S->reduce_arrive[partner] < 0) return 1;
            if (S->reduce_arrive[partner] > done) done = S->reduce_arrive[partner];
        }
        S->res->stage[s].sync_wait += done - S->clock[s];
        S->clock[s] = done;
        S->reduced[s] = 1;
        return 0;
    }
    int32_t c = in->chunk, j = in->mb;
    if (c >= S->v || j < 0 || j >= S->m)
        return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s is outside %d chunks x %d micro-batches", s, i,
                      what, S->v, S->m);
    int64_t k = (int64_t)c * S->p + s;
    size_t x = at(S, s, c, j);
    pp_sim_stage *st = &S->res->stage[s];
    switch (op) {
    case PLAIT_INSTR_FORWARD:
        if (S->fwd[x]) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s twice", s, i, what);
        if (k > 0 && !S->recv_act[x])
            return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s before its input activation was received", s,
                          i, what);
        S->fwd[x] = 1;
        S->fwd_start[x] = S->clock[s];
        S->clock[s] += S->cfg->t_forward;
        st->busy += S->cfg->t_forward;
        if (++S->live[s] > st->peak_live) st->peak_live = S->live[s];
        return 0;
    case PLAIT_INSTR_BACKWARD:
    case PLAIT_INSTR_BACKWARD_INPUT:
        if (S->bwd[x]) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s twice (a backward ran already)", s, i, what);
        if (!S->fwd[x]) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s before its FORWARD", s, i, what);
        if (k < S->V - 1 && !S->recv_grad[x])
            return report(S, PP_SIM_DEPENDENCY,
                          "stage %d #%zu: %s before the gradient of its output was received", s, i, what);
        S->bwd[x] = 1;
        S->clock[s] += S->cfg->t_backward;
        st->busy += S->cfg->t_backward;
        S->bwd_end[x] = S->clock[s];
        if (op == PLAIT_INSTR_BACKWARD_INPUT) {
            S->split[x] = 1; /* live until its weight half */
            return 0;
        }
        S->wgt[x] = 1;
        S->live[s]--;
        return 0;
    case PLAIT_INSTR_BACKWARD_WEIGHT:
        if (S->wgt[x]) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s twice (weights done already)", s, i, what);
        if (!S->split[x])
            return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s before its BACKWARD_INPUT", s, i, what);
        S->wgt[x] = 1;
        S->clock[s] += S->cfg->t_weight;
        st->busy += S->cfg->t_weight;
        S->bwd_end[x] = S->clock[s];
        S->live[s]--;
        return 0;
    case PLAIT_INSTR_SEND_ACT:
    case PLAIT_INSTR_SEND_GRAD: {
        int act = op == PLAIT_INSTR_SEND_ACT;
        if (act ? k == S->V - 1 : k == 0)
            return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s: virtual stage %lld has no %s", s, i, what,
                          (long long)k, act ? "successor" : "predecessor");
        if (!(act ? S->fwd[x] : S->bwd[x]))
            return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s before its %s", s, i, what,
                          act ? "FORWARD" : "BACKWARD");
        uint8_t *sent = act ? &S->sent_act[x] : &S->sent_grad[x];
        if (*sent) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s twice", s, i, what);
        int64_t to = act ? k + 1 : k - 1;
        link_queue *q = link_of(S, s, (int32_t)(to % S->p), act ? ACT : GRAD);
        /* a send window: the sends before the last `send_window` on the
         * link must have been received (the executor waits for them) */
        if (S->cfg->send_window && S->cfg->send_window[s] > 0) {
            size_t w = (size_t)S->cfg->send_window[s];
            if (q->tail - q->head >= w) return 1;
            int64_t taken = q->tail >= w ? q->items[q->tail - w].taken : 0;
            if (taken > S->clock[s]) {
                st->recv_wait += taken - S->clock[s];
                S->clock[s] = taken;
            }
        }
        *sent = 1;
        q->items[q->tail++] = (message){.chunk = (int32_t)(to / S->p), .mb = j, .from_chunk = c,
                                        .time = S->clock[s]};
        S->outstanding[s]++;
        return 0;
    }
    case PLAIT_INSTR_RECV_ACT:
    case PLAIT_INSTR_RECV_GRAD: {
        int act = op == PLAIT_INSTR_RECV_ACT;
        if (act ? k == 0 : k == S->V - 1)
            return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: %s: virtual stage %lld has no %s", s, i, what,
                          (long long)k, act ? "predecessor" : "successor");
        uint8_t *got = act ? &S->recv_act[x] : &S->recv_grad[x];
        if (*got) return report(S, PP_SIM_DEPENDENCY, "stage %d #%zu: %s twice", s, i, what);
        int64_t from = act ? k - 1 : k + 1;
        int32_t src = (int32_t)(from % S->p), src_chunk = (int32_t)(from / S->p);
        link_queue *q = link_of(S, src, s, act ? ACT : GRAD);
        if (q->head == q->tail) return 1;
        message msg = q->items[q->head];
        if (msg.chunk != c || msg.mb != j)
            return report(S, PP_SIM_ORDER,
                          "stage %d #%zu: %s from stage %d, but the next %s on that link is (chunk %d, mb %d) "
                          "(sent by its chunk %d)", s, i, what, src, act ? "activation" : "gradient",
                          msg.chunk, msg.mb, msg.from_chunk);
        q->head++;
        *got = 1;
        if (msg.time > S->clock[s]) {
            st->recv_wait += msg.time - S->clock[s];
            S->clock[s] = msg.time;
        }
        q->items[q->head - 1].taken = S->clock[s];
        /* The sender's send completes now. */
        S->outstanding[src]--;
        if (S->clock[s] > S->last_received[src]) S->last_received[src] = S->clock[s];
        size_t y = at(S, src, src_chunk, j);
        (act ? S->act_taken : S->grad_taken)[y] = S->clock[s];
        return 0;
    }
    default:
        return report(S, PP_SIM_BAD_INSTR, "stage %d #%zu: unknown op %d", s, i, op);
    }
}

typedef struct span_event {
    int64_t time;
    int delta;
} span_event;

static int cmp_event(const void *a, const void *b) {
    const span_event *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    return x->delta - y->delta; /* releases (-1) before acquisitions (+1) at the same time */
}

/* Peak number of (chunk, mb) slots held at once on stage s: from FORWARD's
 * start until its BACKWARD ended and its sends were received. */
static int64_t peak_held(sim *S, int32_t s) {
    size_t n = (size_t)S->v * (size_t)S->m;
    span_event *ev = malloc(2 * n * sizeof *ev);
    if (!ev) return -1;
    size_t e = 0;
    for (int32_t c = 0; c < S->v; c++)
        for (int32_t j = 0; j < S->m; j++) {
            size_t x = at(S, s, c, j);
            int64_t k = (int64_t)c * S->p + s, end = S->bwd_end[x];
            if (k < S->V - 1 && S->act_taken[x] > end) end = S->act_taken[x];
            if (k > 0 && S->grad_taken[x] > end) end = S->grad_taken[x];
            ev[e++] = (span_event){S->fwd_start[x], +1};
            ev[e++] = (span_event){end, -1};
        }
    qsort(ev, e, sizeof *ev, cmp_event);
    int64_t cur = 0, peak = 0;
    for (size_t i = 0; i < e; i++) {
        cur += ev[i].delta;
        if (cur > peak) peak = cur;
    }
    free(ev);
    return peak;
}

static void sim_free(sim *S) {
    if (S->links)
        for (size_t l = 0; l < (size_t)S->p * (size_t)S->p * 2; l++) free(S->links[l].items);
    free(S->links);
    free(S->pc), free(S->clock), free(S->live), free(S->reduce_arrive), free(S->outstanding);
    free(S->last_received), free(S->reduced), free(S->stepped);
    free(S->recv_act), free(S->fwd), free(S->sent_act), free(S->recv_grad), free(S->bwd), free(S->sent_grad);
    free(S->fwd_start), free(S->bwd_end), free(S->act_taken), free(S->grad_taken);
    free(S->split), free(S->wgt);
}

static int sim_alloc(sim *S) {
    size_t p = (size_t)S->p, n = p * (size_t)S->v * (size_t)S->m, per_link = (size_t)S->v * (size_t)S->m;
    S->pc = calloc(p, sizeof *S->pc);
    S->clock = calloc(p, sizeof(int64_t));
    S->live = calloc(p, sizeof(int64_t));
    S->reduce_arrive = malloc(p * sizeof(int64_t));
    S->outstanding = calloc(p, sizeof(int64_t));
    S->last_received = calloc(p, sizeof(int64_t));
    S->reduced = calloc(p, 1);
    S->stepped = calloc(p, 1);
    S->recv_act = calloc(n, 1), S->fwd = calloc(n, 1), S->sent_act = calloc(n, 1);
    S->recv_grad = calloc(n, 1), S->bwd = calloc(n, 1), S->sent_grad = calloc(n, 1);
    S->split = calloc(n, 1), S->wgt = calloc(n, 1);
    S->fwd_start = calloc(n, sizeof(int64_t)), S->bwd_end = calloc(n, sizeof(int64_t));
    S->act_taken = calloc(n, sizeof(int64_t)), S->grad_taken = calloc(n, sizeof(int64_t));
    S->links = calloc(p * p * 2, sizeof *S->links);
    if (!S->pc || !S->clock || !S->live || !S->reduce_arrive || !S->outstanding || !S->last_received ||
        !S->reduced || !S->stepped || !S->recv_act || !S->fwd || !S->sent_act || !S->recv_grad || !S->bwd ||
        !S->sent_grad || !S->fwd_start || !S->bwd_end || !S->act_taken || !S->grad_taken || !S->links ||
        !S->split || !S->wgt)
        return -1;
    for (size_t s = 0; s < p; s++) S->reduce_arrive[s] = -1;
    for (size_t l = 0; l < p * p * 2; l++)
        if (!(S->links[l].items = malloc(per_link * sizeof(message)))) return -1;
    return 0;
}

/* After every list ran: all work done, every message received. */
static void final_checks(sim *S) {
    for (int32_t s = 0; s < S->p; s++) {
        for (int32_t c = 0; c < S->v; c++)
            for (int32_t j = 0; j < S->m; j++) {
                size_t x = at(S, s, c, j);
                if (!S->fwd[x] || !S->bwd[x] || !S->wgt[x]) {
                    report(S, PP_SIM_INCOMPLETE, "stage %d never ran %s(chunk %d, mb %d)", s,
                           !S->fwd[x] ? "FORWARD" : S->split[x] ? "BACKWARD_WEIGHT" : "BACKWARD", c, j);
                    return;
                }
            }
        if (!S->reduced[s] || !S->stepped[s]) {
            report(S, PP_SIM_INCOMPLETE, "stage %d's list ends without %s", s,
                   S->reduced[s] ? "OPTIM_STEP" : "REDUCE_GRADS");
            return;
        }
    }
    for (int32_t src = 0; src < S->p; src++)
        for (int32_t dst = 0; dst < S->p; dst++)
            for (int kind = 0; kind < 2; kind++) {
                link_queue *q = link_of(S, src, dst, kind);
                if (q->head != q->tail) {
                    report(S, PP_SIM_UNMATCHED, "stage %d's %s of (chunk %d, mb %d) to stage %d was never received",
                           src, kind == ACT ? "activation" : "gradient", q->items[q->head].from_chunk,
                           q->items[q->head].mb, dst);
                    return;
                }
            }
}

pp_sim_verdict pp_sim_run(const pp_sim_config *cfg, const plait_instr *const *lists, const size_t *lens,
                          pp_sim_result *res) {
    memset(res, 0, sizeof *res);
    sim S = {.cfg = cfg, .lists = lists, .lens = lens, .p = cfg->stages, .v = cfg->chunks,
             .m = cfg->micro_batches, .res = res};
    S.V = (int64_t)S.p * S.v;
    if (S.p < 1 || S.v < 1 || S.m < 1) {
        report(&S, PP_SIM_BAD_INSTR, "bad simulator configuration p=%d v=%d m=%d", S.p, S.v, S.m);
        return res->verdict;
    }
    res->n_stages = S.p;
    res->stage = calloc((size_t)S.p, sizeof *res->stage);
    if (!res->stage || sim_alloc(&S) != 0) {
        sim_free(&S);
        report(&S, PP_SIM_BAD_INSTR, "simulator out of memory");
        return res->verdict;
    }
    /* Messages on one link never exceed v*m: anything more is a duplicate
     * send, which step() refuses before it could overflow. */
    for (;;) {
        int progressed = 0, remaining = 0, failed = 0;
        for (int32_t s = 0; s < S.p && !failed; s++)
            while (S.pc[s] < lens[s]) {
                int r = step(&S, s);
                if (r < 0) {
                    failed = 1;
                    break;
                }
                if (r > 0) break;
                S.pc[s]++;
                progressed = 1;
            }
        if (failed) break;
        for (int32_t s = 0; s < S.p; s++) remaining += S.pc[s] < lens[s];
        if (!remaining) {
            final_checks(&S);
            break;
        }
        if (!progressed) {
            char text[sizeof res->message] = "";
            size_t used = 0;
            int unmatched = 0;
            for (int32_t s = 0; s < S.p; s++) {
                if (S.pc[s] >= lens[s]) continue;
                char line[256];
                explain_wait(&S, s, line, sizeof line, &unmatched);
                int w = snprintf(text + used, sizeof text - used, "%s%s", used ? "; " : "", line);
                if (w > 0) used += (size_t)w < sizeof text - used ? (size_t)w : sizeof text - used - 1;
            }
            report(&S, unmatched ? PP_SIM_UNMATCHED : PP_SIM_DEADLOCK, "%s", text);
            break;
        }
    }
    if (res->verdict == PP_SIM_OK) {
        for (int32_t s = 0; s < S.p; s++)
            if (S.clock[s] > res->makespan) res->makespan = S.clock[s];
        for (int32_t s = 0; s < S.p; s++) {
            pp_sim_stage *st = &res->stage[s];
            st->finish = S.clock[s];
            st->idle = res->makespan - st->busy;
            st->peak_held = peak_held(&S, s);
        }
    }
    sim_free(&S);
    return res->verdict;
}

void pp_sim_result_free(pp_sim_result *res) {
    free(res->stage);
    res->stage = NULL;
}
