/*
 * The planner's predicted step as a trace (predicted_trace.h): each
 * stage's spans simulated in the order of the instruction list the pp
 * plugin runs (plugins/parallel/pp/schedule.c), then written once per
 * rank of the stage.
 */
#include "cost/predicted_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/trace_merge.h"
/* plugins/parallel/pp's schedules, compiled into libplait too (core/CMakeLists.txt) */
#include "schedule.h"

enum { MAIN_TID = 1, DP_TID = 2 };

typedef struct pspan {
    int tid;
    double t0, t1; /* seconds from the step's start */
    const char *cat, *name, *comm, *detail;
    int mb, chunk;
    double bytes; /* < 0: none */
} pspan;

typedef struct stage_plan {
    pspan *s;
    size_t n, cap;
    double cursor;    /* where the stage's thread is */
    plait_instr *ops; /* the schedule's compute instructions, in its order */
    size_t n_ops, next;
} stage_plan;

typedef struct sim {
    const plait_cost_result *r;
    const plait_cost_rank *stages;
    int p, m, v; /* stages, micro-batches, chunks per stage */
    stage_plan *st;
    /* [v*p][m], by virtual stage k = chunk*p + stage: when a chunk's
     * forward input, or its backward's gradient, arrives; < 0 not yet */
    double *f_ready, *b_ready;
    int oom;
} sim;

static void add(sim *x, int s, pspan e) {
    stage_plan *sp = &x->st[s];
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 64;
        pspan *grown = realloc(sp->s, cap * sizeof *grown);
        if (!grown) {
            x->oom = 1;
            return;
        }
        sp->s = grown;
        sp->cap = cap;
    }
    sp->s[sp->n++] = e;
}

static pspan span(int tid, double t0, double t1, const char *cat, const char *name, const char *comm,
                  const char *detail) {
    return (pspan){tid, t0, t1, cat, name, comm, detail, -1, -1, -1};
}

/* Stage s's times per chunk and micro-batch: forward, backward (whole, or
 * its input half and weight half), the TP all-reduces ending a forward or
 * a backward's input half, one pipeline send. */
typedef struct stage_times {
    double fwd, bwd, bwd_input, bwd_weight, tp, cp, send, tp_bytes, send_bytes;
} stage_times;

static stage_times times_of(const sim *x, int s) {
    const plait_cost_time *t = &x->r->time;
    const plait_cost_rank *st = &x->stages[s], *busy = &x->stages[t->busiest];
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    stage_times o = {0};
    double mv = (double)x->m * x->v;
    /* the busiest stage's compute is the planner's; the others' by their FLOPs */
    double comp = busy->flops > 0 ? t->compute * st->flops / busy->flops : 0;
    double rec = busy->flops > 0 ? t->compute * st->recompute_flops / busy->flops : 0;
    o.fwd = (comp - rec) / 3 / mv;
    o.bwd = comp / mv - o.fwd;
    /* a split backward: the weight gradients' products take a forward's
     * time, the input half the rest (the recomputed forwards with it) */
    o.bwd_weight = o.fwd;
    o.bwd_input = o.bwd - o.bwd_weight;
    if (busy->tp_msgs > 0) o.tp = t->tp_s * st->tp_msgs / busy->tp_msgs / (2 * mv);
    /* ring attention's exposed transfers (cp > 1), inside the layers' forward and backward */
    if (busy->cp_passes > 0) o.cp = t->cp_s * st->cp_passes / busy->cp_passes / (2 * mv);
    double wire = t->wire_bytes > 0 ? t->wire_bytes : b.message; /* what the step time counted */
    o.tp_bytes = wire * st->tp_msg_elems;
    if (busy->pp_msgs > 0) o.send = t->pp_s / busy->pp_msgs;
    o.send_bytes = wire * st->pp_msg_elems;
    return o;
}

/* Stage s's next compute instruction, if its input has arrived: the span
 * of the wait for it, of the compute with its TP all-reduce, and of its
 * send to the virtual stage it feeds. */
static int step_stage(sim *x, int s) {
    stage_plan *sp = &x->st[s];
    if (sp->next >= sp->n_ops) return 0;
    const plait_instr *in = &sp->ops[sp->next];
    int mb = in->mb, chunk = in->chunk, V = x->v * x->p, k = chunk * x->p + s;
    int fwd = in->op == PLAIT_INSTR_FORWARD, weight = in->op == PLAIT_INSTR_BACKWARD_WEIGHT;
    /* a weight half follows its own input half, earlier on this stage */
    double ready = weight ? 0 : fwd ? x->f_ready[k * x->m + mb] : x->b_ready[k * x->m + mb];
    if (ready < 0) return 0;
    stage_times tt = times_of(x, s);
    double t = sp->cursor;
    if (ready > t)
        add(x, s, span(MAIN_TID, t, ready, "wait", fwd ? "recv activation" : "recv gradient", "pp", "pipeline"));
    t = ready > t ? ready : t;
    static const char *const names[] = {[PLAIT_INSTR_FORWARD] = "forward",
                                        [PLAIT_INSTR_BACKWARD] = "backward",
                                        [PLAIT_INSTR_BACKWARD_INPUT] = "backward_input",
                                        [PLAIT_INSTR_BACKWARD_WEIGHT] = "backward_weight"};
    double work = fwd ? tt.fwd : in->op == PLAIT_INSTR_BACKWARD_INPUT ? tt.bwd_input : weight ? tt.bwd_weight : tt.bwd;
    double tp = weight ? 0 : tt.tp, cp = weight ? 0 : tt.cp;
    double end = t + work + cp + tp;
    pspan c = span(MAIN_TID, t, end, "compute", names[in->op], NULL, NULL);
    c.mb = mb;
    c.chunk = chunk;
    add(x, s, c);
    if (cp > 0)
        add(x, s, span(MAIN_TID, end - tp - cp, end - tp, "wait", fwd ? "wait cp K/V" : "wait cp dK/dV", "cp", NULL));
    if (tp > 0) {
        pspan a = span(MAIN_TID, end - tp, end, "coll", fwd ? "allreduce tp (forward)" : "allreduce tp (backward)",
                       "tp", "predicted");
        a.bytes = tt.tp_bytes;
        add(x, s, a);
    }
    int to = weight ? -1 : fwd ? k + 1 : k - 1;
    if (to >= 0 && to < V) {
        pspan w = span(MAIN_TID, end, end + tt.send, "wait", fwd ? "send activation" : "send gradient", "pp", NULL);
        w.bytes = tt.send_bytes;
        w.mb = mb;
        w.chunk = chunk;
        add(x, s, w);
        end += tt.send;
        (fwd ? x->f_ready : x->b_ready)[to * x->m + mb] = end;
    }
    /* the last virtual stage's backward follows its own forward */
    if (fwd && k == V - 1) x->b_ready[k * x->m + mb] = end;
    sp->cursor = end;
    sp->next++;
    return 1;
}

/* After its backwards: the DP reduction (hidden beside the backwards,
 * then exposed) and the optimizer. */
static void finish_stage(sim *x, int s) {
    const plait_cost_time *t = &x->r->time;
    stage_plan *sp = &x->st[s];
    double c = sp->cursor;
    if (t->dp_hidden > 0) {
        double from = c - t->dp_hidden > 0 ? c - t->dp_hidden : 0;
        add(x, s, span(DP_TID, from, c, "coll", "reduce gradients (behind the backward)", "dp", "predicted"));
    }
    if (t->dp_exposed > 0) {
        pspan e = span(MAIN_TID, c, c + t->dp_exposed, "coll", "reduce gradients (exposed)", "dp", "predicted");
        e.bytes = t->dp_bytes;
        add(x, s, e);
        c += t->dp_exposed;
    }
    add(x, s, span(MAIN_TID, c, c + t->optim, "optim", "optimizer step", NULL, NULL));
    sp->cursor = c + t->optim;
}

/* Stage s's compute instructions as plugins/parallel/pp runs them
 * (schedule.c's lists; without a pipeline, one forward and one backward a
 * micro-batch). */
static plait_status schedule_of(sim *x, int s) {
    pp_schedule_kind kind = PP_SCHEDULE_1F1B;
    const char *name = x->r->layout.schedule;
    if (x->p > 1 && name[0] && pp_schedule_parse(name, &kind) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "predicted trace: unknown pipeline schedule '%s'", name);
    size_t n = 0;
    char err[256] = "";
    plait_status st = pp_schedule_build(kind, x->p, s, x->m, x->v, NULL, 0, &n, err, sizeof err);
    if (st != PLAIT_OK && st != PLAIT_ERR_NO_MEMORY)
        return plait_set_error(st, "predicted trace: the %s schedule of stage %d: %s", name, s, err);
    plait_instr *all = malloc((n ? n : 1) * sizeof *all);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the predicted trace");
    st = pp_schedule_build(kind, x->p, s, x->m, x->v, all, n, &n, err, sizeof err);
    if (st != PLAIT_OK) {
        free(all);
        return plait_set_error(st, "predicted trace: the %s schedule of stage %d: %s", name, s, err);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (all[i].op == PLAIT_INSTR_FORWARD || all[i].op == PLAIT_INSTR_BACKWARD ||
            all[i].op == PLAIT_INSTR_BACKWARD_INPUT || all[i].op == PLAIT_INSTR_BACKWARD_WEIGHT)
            all[k++] = all[i];
    x->st[s].ops = all;
    x->st[s].n_ops = k;
    return PLAIT_OK;
}

static plait_status simulate(sim *x) {
    int p = x->p, m = x->m, V = x->v * x->p;
    for (int s = 0; s < p; s++) {
        plait_status st = schedule_of(x, s);
        if (st != PLAIT_OK) return st;
    }
    for (int i = 0; i < V * m; i++) x->f_ready[i] = x->b_ready[i] = -1;
    for (int mb = 0; mb < m; mb++) x->f_ready[mb] = 0;
    for (int progress = 1; progress && !x->oom;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (step_stage(x, s)) progress = 1;
    }
    for (int s = 0; s < p; s++)
        if (x->st[s].next < x->st[s].n_ops)
            return plait_set_error(PLAIT_ERR_INTERNAL, "predicted trace: stage %d's schedule stalls at operation %zu",
                                   s, x->st[s].next);
    double end = 0;
    for (int s = 0; s < p; s++) {
        finish_stage(x, s);
        if (x->st[s].cursor > end) end = x->st[s].cursor;
    }
    /* every stage ends the step with the slowest (the loss's all-reduce) */
    for (int s = 0; s < p; s++) {
        if (x->st[s].cursor < end)
            add(x, s, span(MAIN_TID, x->st[s].cursor, end, "wait", "wait for the last stage", "pp", "pipeline"));
        pspan st = span(MAIN_TID, 0, end, "step", "step 1", NULL, NULL);
        add(x, s, st);
    }
    return x->oom ? plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the predicted trace") : PLAIT_OK;
}

static void write_span(FILE *f, int pid, const pspan *e) {
    /* in whole nanoseconds, so that a span that starts where another ends
     * starts there in the file too (a reader nests them by these numbers) */
    long long t0 = llround(1e9 * e->t0), t1 = llround(1e9 * e->t1);
    fprintf(
        f,
        ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%lld.%03lld,\"dur\":%lld.%03lld,\"cat\":\"%s\",\"name\":\"%s\","
        "\"args\":{",
        pid, e->tid, t0 / 1000, t0 % 1000, (t1 - t0) / 1000, (t1 - t0) % 1000, e->cat, e->name);
    const char *sep = "";
    if (strcmp(e->cat, "step") == 0) fprintf(f, "\"step\":1"), sep = ",";
    if (e->chunk >= 0) fprintf(f, "%s\"chunk\":%d", sep, e->chunk), sep = ",";
    if (e->mb >= 0) fprintf(f, "%s\"mb\":%d", sep, e->mb), sep = ",";
    if (e->bytes >= 0) fprintf(f, "%s\"bytes\":%.0f", sep, e->bytes), sep = ",";
    if (e->comm) fprintf(f, "%s\"comm\":\"%s\"", sep, e->comm), sep = ",";
    if (e->detail) fprintf(f, "%s\"detail\":\"%s\"", sep, e->detail);
    fputs("}}", f);
}

static void write_predicted(FILE *f, void *ctx) {
    const sim *x = ctx;
    const plait_cost_layout *l = &x->r->layout;
    int per_stage = l->dp * plait_cost_layout_cp(l) * l->tp;
    char name[128];
    plait_cost_layout_name(l, name, sizeof name);
    fputs(PLAIT_TRACE_JSON_FIRST_LINE, f);
    for (int r = 0; r < per_stage * x->p; r++) {
        int pid = r + 1, s = r / per_stage; /* rank r is process r + 1, as in a merged trace */
        fprintf(f,
                "%s\n{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d "
                "(stage %d, predicted)\"}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"plait_rank\",\"args\":{\"rank\":%d,\"stage\":%d,"
                "\"predicted\":\"%s\"}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"main\"}},\n"
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"plait-dp\"}}",
                r ? "," : "", pid, r, s, pid, r, pid, r, s, name, pid, MAIN_TID, pid, DP_TID);
        for (size_t i = 0; i < x->st[s].n; i++) write_span(f, pid, &x->st[s].s[i]);
    }
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"plait plan --explain\"}}\n", f);
}

plait_status plait_cost_write_trace(const char *path, const plait_cost_result *r, const plait_cost_rank *stages) {
    int p = r->layout.pp > 0 ? r->layout.pp : 1;
    int m = stages[0].micro_batches > 0 ? stages[0].micro_batches : 1;
    int v = p > 1 && r->layout.chunks > 1 ? r->layout.chunks : 1;
    sim x = {.r = r, .stages = stages, .p = p, .m = m, .v = v};
    x.st = calloc((size_t)p, sizeof *x.st);
    x.f_ready = malloc(sizeof(double) * (size_t)(p * v) * (size_t)m);
    x.b_ready = malloc(sizeof(double) * (size_t)(p * v) * (size_t)m);
    plait_status st = x.st && x.f_ready && x.b_ready
                          ? simulate(&x)
                          : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the predicted trace");
    if (st == PLAIT_OK) st = plait_trace_json_write(path, "the predicted trace", write_predicted, &x);
    for (int s = 0; x.st && s < p; s++) {
        free(x.st[s].s);
        free(x.st[s].ops);
    }
    free(x.st);
    free(x.f_ready);
    free(x.b_ready);
    return st;
}
