/* The cross-rank rules of parallel plans (see plan_check.h). */
#include "train/plan_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/parallel.h>

#include "runtime/error.h"

typedef struct rank_plan {
    int32_t dp_rank, tp_rank, pp_rank;
    int32_t *layer_stage, *layer_chunk, chunks;
    plait_shard *shards;
    int32_t *param_layer;
    int32_t micro_batches;
    int64_t first_mb;
    plait_instr *schedule;
    size_t n_instr;
} rank_plan;

struct plait_plan_set {
    int dp, tp, pp, n;
    int32_t n_layers, n_params;
    int64_t global_mbs; /* micro-batches of one step over the whole world */
    rank_plan *r;
    int oom;
};

static void *dup_mem(const void *src, size_t bytes, int *oom) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) *oom = 1;
    else if (bytes) memcpy(p, src, bytes);
    return p;
}

void plait_plan_set_add(void *set, const plait_layout_rank *lr) {
    plait_plan_set *ps = set;
    const plait_mesh *m = lr->mesh;
    const plait_plan *p = lr->plan;
    if (ps->n >= m->world_size) return;
    rank_plan *r = &ps->r[ps->n++];
    r->dp_rank = m->dp_rank, r->tp_rank = m->tp_rank, r->pp_rank = m->pp_rank;
    ps->n_layers = p->n_layers, ps->n_params = p->n_params;
    ps->global_mbs = plait_batch_micro_batches(lr->batch);
    r->layer_stage = dup_mem(p->layer_stage, (size_t)p->n_layers * sizeof(int32_t), &ps->oom);
    r->layer_chunk = dup_mem(p->layer_chunk, (size_t)p->n_layers * sizeof(int32_t), &ps->oom);
    r->shards = dup_mem(p->shards, (size_t)p->n_params * sizeof(plait_shard), &ps->oom);
    r->param_layer = malloc(((size_t)p->n_params + 1) * sizeof(int32_t));
    if (!r->param_layer) ps->oom = 1;
    for (int32_t i = 0; r->param_layer && i < p->n_params && i < lr->spec->n_params; i++) {
        r->param_layer[i] = lr->spec->params[i].layer;
        /* an expert tensor's split over ep is the core's own (the prefilled
         * plan), not a tp slice: the tp rules see it whole, or at tp × ep
         * its width's split (the plan's second) */
        if (r->shards && (lr->spec->params[i].flags & PLAIT_PARAM_EXPERT) && m->ep > 1)
            r->shards[i] =
                p->second_shards && p->second_shards[i].dim > 0
                    ? p->second_shards[i]
                    : (plait_shard){.dim = -1, .parts = 1, .groups = 1, .padded_len = lr->spec->params[i].shape[0]};
    }
    r->chunks = p->chunks;
    r->micro_batches = p->micro_batches;
    r->first_mb = p->first_micro_batch;
    r->schedule = dup_mem(p->schedule, p->n_instr * sizeof(plait_instr), &ps->oom);
    r->n_instr = p->n_instr;
}

void plait_plan_set_free(plait_plan_set *ps) {
    if (!ps) return;
    for (int i = 0; ps->r && i < ps->n; i++) {
        free(ps->r[i].layer_stage);
        free(ps->r[i].layer_chunk);
        free(ps->r[i].shards);
        free(ps->r[i].param_layer);
        free(ps->r[i].schedule);
    }
    free(ps->r);
    free(ps);
}

/* ---- the checks: each returns 0 or writes why into `why` ------------------ */

static int check_layers(const plait_plan_set *ps, char *why, size_t cap) {
    const rank_plan *r0 = &ps->r[0];
    int V = ps->pp * r0->chunks, prev = 0;
    for (int i = 1; i < ps->n; i++)
        if (memcmp(ps->r[i].layer_stage, r0->layer_stage, (size_t)ps->n_layers * sizeof(int32_t)) ||
            memcmp(ps->r[i].layer_chunk, r0->layer_chunk, (size_t)ps->n_layers * sizeof(int32_t)) ||
            ps->r[i].chunks != r0->chunks)
            return snprintf(why, cap, "ranks 0 and %d (dp %d, tp %d, pp %d) disagree on which stage runs which layer",
                            i, ps->r[i].dp_rank, ps->r[i].tp_rank, ps->r[i].pp_rank), -1;
    for (int32_t l = 0; l < ps->n_layers; l++) {
        int s = r0->layer_stage[l], c = r0->layer_chunk[l];
        if (s < 0 || s >= ps->pp || c < 0 || c >= r0->chunks)
            return snprintf(why, cap, "layer %d is given stage %d chunk %d (pp %d, %d chunks)", l, s, c, ps->pp,
                            r0->chunks), -1;
        int k = c * ps->pp + s;
        if (k != prev && k != prev + 1)
            return snprintf(why, cap, "layer %d runs on virtual stage %d (chunk %d of stage %d) after virtual stage "
                            "%d: in model order they must run 0, 1, ..., %d with none skipped", l, k, c, s, prev,
                            V - 1), -1;
        if (l == 0 && k != 0)
            return snprintf(why, cap, "layer 0 (the embedding) runs on virtual stage %d, not 0", k), -1;
        prev = k;
    }
    if (prev != V - 1)
        return snprintf(why, cap, "the last layer runs on virtual stage %d of %d: stages without layers", prev, V), -1;
    return 0;
}

static int check_shards(const plait_plan_set *ps, char *why, size_t cap) {
    for (int a = 0; a < ps->n; a++) {
        const rank_plan *ra = &ps->r[a];
        if (ra->tp_rank != 0) continue;
        for (int32_t p = 0; p < ps->n_params; p++) {
            /* the tp group of rank a: same dp and pp rank */
            uint64_t seen = 0;
            const plait_shard *s0 = &ra->shards[p];
            int whole0 = s0->dim < 0 || s0->parts <= 1;
            for (int b = 0; b < ps->n; b++) {
                const rank_plan *rb = &ps->r[b];
                if (rb->dp_rank != ra->dp_rank || rb->pp_rank != ra->pp_rank) continue;
                const plait_shard *s = &rb->shards[p];
                int whole = s->dim < 0 || s->parts <= 1;
                if (whole != whole0 || (!whole && (s->dim != s0->dim || s->parts != ps->tp ||
                                                   s->padded_len != s0->padded_len || s->groups != s0->groups)))
                    return snprintf(why, cap, "parameter %d (layer %d): tp ranks %d and %d slice it differently "
                                    "(dim %d/%d, parts %d/%d; tp is %d)", p, ra->param_layer[p], ra->tp_rank,
                                    rb->tp_rank, s0->dim, s->dim, s0->parts, s->parts, ps->tp), -1;
                if (!whole) {
                    if (s->index < 0 || s->index >= ps->tp || (ps->tp <= 64 && (seen >> s->index & 1u)))
                        return snprintf(why, cap, "parameter %d (layer %d): slice %d is held twice or is out of "
                                        "range over the tp group of dp %d, pp %d", p, ra->param_layer[p], s->index,
                                        ra->dp_rank, ra->pp_rank), -1;
                    if (ps->tp <= 64) seen |= 1ull << s->index; /* wider groups: range checked only */
                }
            }
        }
    }
    return 0;
}

static int check_batches(const plait_plan_set *ps, char *why, size_t cap) {
    for (int a = 0; a < ps->n; a++) {
        const rank_plan *ra = &ps->r[a];
        if (ra->dp_rank != 0) continue;
        /* the dp group of rank a: same tp and pp rank; ranges must tile [0, global) */
        int64_t covered = 0;
        for (int64_t want = 0; want < ps->global_mbs;) {
            int found = 0;
            for (int b = 0; b < ps->n && !found; b++) {
                const rank_plan *rb = &ps->r[b];
                if (rb->tp_rank != ra->tp_rank || rb->pp_rank != ra->pp_rank || rb->first_mb != want ||
                    rb->micro_batches <= 0)
                    continue;
                found = 1;
                want += rb->micro_batches;
                covered += rb->micro_batches;
            }
            if (!found)
                return snprintf(why, cap, "no data-parallel replica (tp %d, pp %d) computes global micro-batch "
                                "%lld of the step's %lld", ra->tp_rank, ra->pp_rank, (long long)want,
                                (long long)ps->global_mbs), -1;
        }
        int64_t total = 0;
        for (int b = 0; b < ps->n; b++)
            if (ps->r[b].tp_rank == ra->tp_rank && ps->r[b].pp_rank == ra->pp_rank) total += ps->r[b].micro_batches;
        if (total != ps->global_mbs || covered != ps->global_mbs)
            return snprintf(why, cap, "the replicas (tp %d, pp %d) compute %lld micro-batches, the step has %lld",
                            ra->tp_rank, ra->pp_rank, (long long)total, (long long)ps->global_mbs), -1;
    }
    for (int a = 0; a < ps->n; a++)
        for (int b = 0; b < ps->n; b++)
            if (ps->r[a].dp_rank == ps->r[b].dp_rank &&
                (ps->r[a].first_mb != ps->r[b].first_mb || ps->r[a].micro_batches != ps->r[b].micro_batches))
                return snprintf(why, cap, "ranks %d and %d of data-parallel replica %d compute different micro-batches",
                                a, b, ps->r[a].dp_rank), -1;
    return 0;
}

/* Where each (op, chunk, micro-batch) first appears in a rank's schedule,
 * and how often: built in one pass, so that checking every micro-batch of
 * a long accumulation stays linear in the schedule's length (a scan of the
 * whole schedule for each micro-batch took minutes at 100,000). */
#define N_OPS 11 /* plait_instr_op values 1 .. 10 */
typedef struct instr_index {
    long *first; /* -1: never */
    int *count;
    int chunks, mbs;
} instr_index;

static size_t cell(const instr_index *x, int op, int chunk, int mb) {
    return ((size_t)chunk * (size_t)x->mbs + (size_t)mb) * N_OPS + (size_t)op;
}

static int index_build(const rank_plan *r, instr_index *x) {
    x->chunks = r->chunks > 0 ? r->chunks : 0;
    x->mbs = r->micro_batches > 0 ? r->micro_batches : 0;
    size_t cells = (size_t)x->chunks * (size_t)x->mbs * N_OPS + 1;
    x->first = malloc(cells * sizeof *x->first);
    x->count = calloc(cells, sizeof *x->count);
    if (!x->first || !x->count) return -1;
    for (size_t i = 0; i < cells; i++) x->first[i] = -1;
    for (size_t i = 0; i < r->n_instr; i++) {
        const plait_instr *in = &r->schedule[i];
        if (in->op < 1 || in->op >= N_OPS || in->chunk >= x->chunks || in->mb < 0 || in->mb >= x->mbs)
            continue; /* matches no (op, chunk, mb) asked; the range check below names a compute one */
        size_t c = cell(x, in->op, in->chunk, in->mb);
        if (x->first[c] < 0) x->first[c] = (long)i;
        x->count[c]++;
    }
    return 0;
}

static void index_free(instr_index *x) {
    free(x->first);
    free(x->count);
}

/* Position of the first (op, chunk, mb) in the schedule, or -1. */
static long find_instr(const instr_index *x, int op, int chunk, int mb) { return x->first[cell(x, op, chunk, mb)]; }

static int count_instr(const instr_index *x, int op, int chunk, int mb) { return x->count[cell(x, op, chunk, mb)]; }

static int check_rank_schedule(const plait_plan_set *ps, int a, const instr_index *x, char *why, size_t cap) {
    const rank_plan *r = &ps->r[a];
    int V = ps->pp * r->chunks;
    long last_bwd = -1;
    for (int c = 0; c < r->chunks; c++) {
        int k = c * ps->pp + r->pp_rank;
        for (int mb = 0; mb < r->micro_batches; mb++) {
            int nf = count_instr(x, PLAIT_INSTR_FORWARD, c, mb), nb = count_instr(x, PLAIT_INSTR_BACKWARD, c, mb);
            long f = find_instr(x, PLAIT_INSTR_FORWARD, c, mb), b = find_instr(x, PLAIT_INSTR_BACKWARD, c, mb);
            /* a split backward: its input half stands for the backward
             * (the gradient it sends), its weight half must follow */
            int ni = count_instr(x, PLAIT_INSTR_BACKWARD_INPUT, c, mb);
            int nw = count_instr(x, PLAIT_INSTR_BACKWARD_WEIGHT, c, mb);
            long w = find_instr(x, PLAIT_INSTR_BACKWARD_WEIGHT, c, mb);
            if (nb == 0 && ni == 1 && nw == 1) {
                b = find_instr(x, PLAIT_INSTR_BACKWARD_INPUT, c, mb);
                if (w < b)
                    return snprintf(why, cap, "rank %d (pp %d): chunk %d micro-batch %d computes its weight "
                                    "gradients before its input gradient", a, r->pp_rank, c, mb), -1;
                nb = 1;
            } else if (ni || nw) {
                return snprintf(why, cap, "rank %d (pp %d): chunk %d micro-batch %d has %d backwards, %d input "
                                "halves and %d weight halves (one backward, or one of each half)", a,
                                r->pp_rank, c, mb, nb, ni, nw), -1;
            } else {
                w = b;
            }
            if (nf != 1 || nb != 1 || b < f)
                return snprintf(why, cap, "rank %d (pp %d): chunk %d micro-batch %d has %d forwards and %d "
                                "backwards%s", a, r->pp_rank, c, mb, nf, nb,
                                nf == 1 && nb == 1 ? ", the backward first" : ""), -1;
            if (w > last_bwd) last_bwd = w;
            long ra = find_instr(x, PLAIT_INSTR_RECV_ACT, c, mb), sa = find_instr(x, PLAIT_INSTR_SEND_ACT, c, mb);
            long rg = find_instr(x, PLAIT_INSTR_RECV_GRAD, c, mb), sg = find_instr(x, PLAIT_INSTR_SEND_GRAD, c, mb);
            const char *bad = NULL;
            if (k > 0 && (ra < 0 || ra > f)) bad = "receives its input activation after the forward, or never";
            else if (k < V - 1 && (sa < 0 || sa < f)) bad = "sends its output activation before the forward, or never";
            else if (k < V - 1 && (rg < 0 || rg > b)) bad = "receives its output gradient after the backward, or never";
            else if (k > 0 && (sg < 0 || sg < b)) bad = "sends its input gradient before the backward, or never";
            else if ((k == 0 && (ra >= 0 || sg >= 0)) || (k == V - 1 && (sa >= 0 || rg >= 0)))
                bad = "transfers data beyond the ends of the pipeline";
            if (bad)
                return snprintf(why, cap, "rank %d (pp %d): chunk %d micro-batch %d (virtual stage %d of %d) %s",
                                a, r->pp_rank, c, mb, k, V, bad), -1;
        }
    }
    long red = -1, opt = -1;
    int n_red = 0, n_opt = 0;
    for (size_t i = 0; i < r->n_instr; i++) {
        const plait_instr *in = &r->schedule[i];
        if (in->op == PLAIT_INSTR_REDUCE_GRADS) red = (long)i, n_red++;
        if (in->op == PLAIT_INSTR_OPTIM_STEP) opt = (long)i, n_opt++;
        if ((in->op == PLAIT_INSTR_FORWARD || in->op == PLAIT_INSTR_BACKWARD ||
             in->op == PLAIT_INSTR_BACKWARD_INPUT || in->op == PLAIT_INSTR_BACKWARD_WEIGHT) &&
            (in->chunk >= r->chunks || in->mb < 0 || in->mb >= r->micro_batches))
            return snprintf(why, cap, "rank %d: instruction %zu names chunk %d micro-batch %d (it has %d chunks, "
                            "%d micro-batches)", a, i, in->chunk, in->mb, r->chunks, r->micro_batches), -1;
    }
    if (n_red != 1 || n_opt != 1 || red < last_bwd || opt < red || opt != (long)r->n_instr - 1)
        return snprintf(why, cap, "rank %d: the schedule must end with one REDUCE_GRADS after the last backward "
                        "and one OPTIM_STEP last (found %d and %d)", a, n_red, n_opt), -1;
    return 0;
}

static int check_schedule(const plait_plan_set *ps, char *why, size_t cap) {
    for (int a = 0; a < ps->n; a++) {
        instr_index x;
        int bad = index_build(&ps->r[a], &x);
        if (bad) snprintf(why, cap, "out of memory indexing rank %d's schedule of %zu instructions", a, ps->r[a].n_instr);
        else bad = check_rank_schedule(ps, a, &x, why, cap);
        index_free(&x);
        if (bad) return -1;
    }
    return 0;
}

plait_plan_set *plait_plan_set_new(int dp, int tp, int pp) {
    plait_plan_set *ps = calloc(1, sizeof *ps);
    if (ps) ps->r = calloc((size_t)dp * (size_t)tp * (size_t)pp, sizeof *ps->r);
    if (!ps || !ps->r) {
        free(ps);
        plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    ps->dp = dp, ps->tp = tp, ps->pp = pp;
    return ps;
}

int plait_plan_set_ranks(const plait_plan_set *ps) { return ps->n; }

const char *plait_plan_set_check(const plait_plan_set *ps, char *why, size_t cap) {
    int world = ps->dp * ps->tp * ps->pp;
    if (ps->oom) return snprintf(why, cap, "out of memory copying the plans"), "plan";
    if (ps->n != world) return snprintf(why, cap, "%d of %d ranks planned", ps->n, world), "plan";
    if (check_layers(ps, why, cap)) return "plan";
    if (check_shards(ps, why, cap)) return "plan-shards";
    if (check_batches(ps, why, cap)) return "plan-batches";
    if (check_schedule(ps, why, cap)) return "plan-schedule";
    return NULL;
}
