/* The search over a space of layouts: rules, costs from the model's shape, the best confirmed. */
#include "cost/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/memo.h"
#include "cost/stages.h"
#include "layout/batch.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* A layout weighed from the model's shape. */
typedef struct weighed {
    size_t index;          /* into the enumeration */
    double tokens_per_s;
    double mem;
    int fits;
    size_t kept; /* 1 + its figures' index among the kept rows, 0 = not kept */
} weighed;

/* The figures of every fitting layout as weighed, for `--top all` to show
 * without weighing them again (the rows past the confirmed ones: at
 * 3,072 ranks thousands, weighed again a quarter of the search's time). */
typedef struct kept_rows {
    plait_cost_result *r;
    size_t n, cap;
} kept_rows;

/* 1 + the index of the copy of *r kept, or 0 when out of memory (then
 * that row is weighed again). */
static size_t keep_row(kept_rows *k, const plait_cost_result *r) {
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        plait_cost_result *n = realloc(k->r, cap * sizeof *n);
        if (!n) return 0;
        k->r = n, k->cap = cap;
    }
    k->r[k->n] = *r;
    return ++k->n;
}

typedef struct families {
    plait_cost_family *f;
    size_t n, cap;
    size_t last;           /* the family the previous layout joined: the enumeration keeps families together */
} families;

/* A layout set aside joins its family (by name: the first reason given
 * stands for the family). */
static int add_family(families *fs, const char *name, const char *why, int over_memory) {
    if (fs->last < fs->n && !strcmp(fs->f[fs->last].name, name)) {
        fs->f[fs->last].layouts++;
        return 0;
    }
    for (size_t i = 0; i < fs->n; i++)
        if (!strcmp(fs->f[i].name, name)) {
            fs->f[i].layouts++;
            fs->last = i;
            return 0;
        }
    if (fs->n == fs->cap) {
        size_t cap = fs->cap ? 2 * fs->cap : 64;
        plait_cost_family *f = realloc(fs->f, cap * sizeof *f);
        if (!f) return -1;
        fs->f = f;
        fs->cap = cap;
    }
    plait_cost_family *f = &fs->f[fs->n];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->why, sizeof f->why, "%s", why);
    f->layouts = 1;
    f->over_memory = over_memory;
    fs->last = fs->n++;
    return 0;
}

static int by_weight(const void *a, const void *b) {
    const weighed *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->tokens_per_s != y->tokens_per_s) return x->tokens_per_s < y->tokens_per_s ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The rule no plan is needed for that layout `l` breaks, written to why
 * with the family it sets aside, or 0. */
/* "dp8 tp8 pp16" ("cpN" after it with context parallelism) and `extra` */
static void family_of(const plait_cost_layout *l, const char *extra, char *family, size_t flen) {
    char cp[32] = "";
    int n = l->cp > 1 ? snprintf(cp, sizeof cp, " cp%d", l->cp) : 0;
    if (l->ep > 1) snprintf(cp + n, sizeof cp - (size_t)n, " ep%d", l->ep);
    snprintf(family, flen, "dp%d tp%d pp%d%s%s", l->dp, l->tp, l->pp, cp, extra);
}

/* A rule that sets aside every layout of dp x tp x pp (x cp): 1, the family named. */
static int whole_family(const plait_cost_layout *l, char *family, size_t flen) {
    family_of(l, "", family, flen);
    return 1;
}

static int refused(plait_cost_model *m, const plait_cost_axes *axes, const plait_cost_ctx *x, int T,
                   const plait_cost_layout *l, char *family, size_t flen, char *why, size_t wlen) {
    if (plait_cost_cp_refuses(l, T, plait_cost_model_attention(m), why, wlen)) return whole_family(l, family, flen);
    /* the experts' rule reads ep, dp and cp alone: no optimizer escapes it */
    if (plait_cost_ep_refuses(l, axes->experts, why, wlen)) return whole_family(l, family, flen);
    plait_batch b;
    if (plait_batch_solve(x->global_batch, l->micro_batch, 0, l->dp, &b) != PLAIT_OK) {
        snprintf(why, wlen, "%s", plait_last_error());
        plait_clear_error();
        /* a global batch dp does not divide sets aside every micro-batch */
        if (x->global_batch % l->dp != 0) return whole_family(l, family, flen);
        char mb[32];
        snprintf(mb, sizeof mb, " mb%lld", (long long)l->micro_batch);
        family_of(l, mb, family, flen);
        return 1;
    }
    const plait_cluster *c = x->cluster;
    int per_node = plait_cluster_ranks_per_node(c, axes->ranks);
    /* tensor parallelism all-reduces every block's activations: across
     * nodes it runs at the network's speed (Megatron-LM's first rule:
     * tp within a node). Bounding --tp weighs such layouts anyway. */
    if (c->nodes > 1 && l->tp > per_node && axes->n[PLAIT_AXIS_N_TP] == 0) {
        snprintf(why, wlen,
                 "tp %d spans nodes of %d ranks: tensor parallelism stays on a node's %s (give --tp to weigh "
                 "it across the %s)",
                 l->tp, per_node, c->intra.kind, c->inter.kind);
        return whole_family(l, family, flen);
    }
    if (plait_cost_model_refuses(m, l->tp, 1, 1, why, wlen)) return whole_family(l, family, flen);
    if (l->sp && plait_cost_sp_refuses(l, T, why, wlen)) {
        family_of(l, " sp", family, flen);
        return 1;
    }
    if (plait_cost_model_refuses(m, 1, l->pp, l->chunks, why, wlen)) {
        /* too few layers for the stages sets the whole family aside, for
         * the chunks of interleaving only that schedule */
        if (l->chunks > 1) {
            char v[40];
            snprintf(v, sizeof v, " %s v%d", l->schedule, l->chunks);
            family_of(l, v, family, flen);
            return 1;
        }
        return whole_family(l, family, flen);
    }
    return 0;
}

/* The rules above read a layout's dp, tp, pp, cp, ep, micro-batch, sp,
 * schedule and chunks alone; the enumeration varies the optimizer, the
 * recompute mode, the bucket and the comm plugin innermost, so a layout
 * equal to the one before it in these is refused, or not, as it was, with
 * the same family (at 3,072 ranks most of the search's layouts are
 * refused, and writing each refusal's reason was most of its time). */
static int same_rules(const plait_cost_layout *a, const plait_cost_layout *b) {
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->cp == b->cp && a->ep == b->ep &&
           a->micro_batch == b->micro_batch && a->sp == b->sp && a->chunks == b->chunks &&
           !strcmp(a->schedule, b->schedule);
}

/* What a search works out once for the layouts of one dp x tp x pp (x cp
 * x ep) family (the enumeration keeps a family's layouts together): the
 * rules' verdicts and the stages from the model's shape, each kept by the
 * settings it reads. Forgotten when the next family starts, so that it
 * holds one family's stages at most. */
typedef struct search_memo {
    plait_cost_memo *rules, *stages;
    plait_cost_layout family; /* its dp, tp, pp, cp and ep */
} search_memo;

static void memo_family(search_memo *s, const plait_cost_layout *l) {
    const plait_cost_layout *f = &s->family;
    if (f->dp == l->dp && f->tp == l->tp && f->pp == l->pp && f->cp == l->cp && f->ep == l->ep) return;
    plait_cost_memo_clear(s->rules);
    plait_cost_memo_clear(s->stages);
    s->family = *l;
}

/* A rules verdict: set aside or not, and the family it joined. */
typedef struct verdict {
    int aside;
    size_t family;
} verdict;

/* The settings the rules read (same_rules's), the others zero: the
 * optimizers, recompute modes, buckets and comm plugins of one such
 * setting share its verdict. */
static void rules_key(const plait_cost_layout *l, plait_cost_layout *key) {
    memset(key, 0, sizeof *key);
    key->dp = l->dp, key->tp = l->tp, key->pp = l->pp, key->cp = l->cp, key->ep = l->ep;
    key->micro_batch = l->micro_batch, key->sp = l->sp, key->chunks = l->chunks;
    memcpy(key->schedule, l->schedule, sizeof key->schedule);
}

/* Layout lay[i] against the rules: 1 when set aside (joining its family),
 * 0 when it is to be weighed, -1 out of memory. *prev: whether lay[i - 1]
 * was set aside. A layout the rules read as one weighed before gets its
 * verdict (the optimizers and recompute modes of a refused family: formatting the same
 * reason again was most of the rules' time). */
static int set_aside(plait_cost_model *m, const plait_cost_axes *axes, const plait_cost_ctx *x, int T,
                     const plait_cost_layout *lay, size_t i, int *prev, families *fs, plait_cost_memo *memo) {
    if (*prev && same_rules(&lay[i], &lay[i - 1])) { /* its family is the one the last joined */
        fs->f[fs->last].layouts++;
        return 1;
    }
    plait_cost_layout key;
    rules_key(&lay[i], &key);
    const verdict *v = plait_cost_memo_find(memo, &key);
    if (v) {
        if (v->aside) fs->f[v->family].layouts++, fs->last = v->family;
        return *prev = v->aside;
    }
    char family[96], why[512];
    *prev = refused(m, axes, x, T, &lay[i], family, sizeof family, why, sizeof why);
    if (*prev && add_family(fs, family, why, 0) != 0) return -1;
    /* add_family leaves fs->last at the family joined; not kept: asked again */
    plait_cost_memo_keep(memo, &key, &(verdict){.aside = *prev, .family = fs->last}, sizeof(verdict));
    return *prev;
}

/* What a layout's costs read from the config, by its ZeRO stage: the
 * bucket and the wire's compression. Read once a search per stage (a
 * config's lookups for each of tens of thousands of layouts were a
 * tenth of a large search's time). */
typedef struct config_reads {
    int have[4];
    double bucket[4], grad_wire[4], param_wire[4];
} config_reads;

static int reads_of(const plait_config *cfg, const plait_cost_layout *l, config_reads *k) {
    int zero = plait_cost_zero_stage(l->optim);
    if (zero < 0 || zero > 3) zero = 0;
    if (k->have[zero]) return zero;
    char sec[48];
    snprintf(sec, sizeof sec, zero ? "optim.%s" : "parallel.dp", l->optim);
    plait_value v;
    /* the optimizer's section exists only when the config selects it; else
     * the plugins' default: [parallel.dp] "25M", 25 MiB as a bytes key
     * reads it; [optim.zeroN] 0 (plait_cost_zero_unit_bytes) */
    k->bucket[zero] = plait_config_get(cfg, sec, "bucket_size", &v) == PLAIT_OK ? (double)v.i
                      : zero                                                    ? 0
                                                                                : 25.0 * 1024 * 1024;
    plait_cost_wire(cfg, zero, &k->grad_wire[zero], &k->param_wire[zero]);
    k->have[zero] = 1;
    return zero;
}

/* The stages of layout `l` from the model's shape into `stages`; 0, or -1
 * when out of memory. plait_cost_model_stages reads every setting of a
 * layout but the optimizer, its bucket and the comm plugin, so the layouts
 * differing in those alone share their stages, worked out once (memo NULL:
 * every time). */
static int stages_of(plait_cost_model *m, plait_cost_memo *memo, const plait_cost_ctx *x, const plait_cost_layout *l,
                     plait_cost_rank *stages) {
    plait_cost_layout key;
    memset(&key, 0, sizeof key);
    key.dp = l->dp, key.tp = l->tp, key.pp = l->pp, key.chunks = l->chunks, key.micro_batch = l->micro_batch;
    key.recompute = l->recompute, key.sp = l->sp, key.cp = l->cp, key.ep = l->ep;
    memcpy(key.schedule, l->schedule, sizeof key.schedule);
    size_t size = (size_t)l->pp * sizeof *stages;
    const plait_cost_rank *kept = memo ? plait_cost_memo_find(memo, &key) : NULL;
    if (kept) {
        memcpy(stages, kept, size);
        return 0;
    }
    if (plait_cost_model_stages(m, l, x->global_batch, x->precision, &x->device, stages) != 0) return -1;
    if (memo) plait_cost_memo_keep(memo, &key, stages, size); /* not kept: worked out again */
    return 0;
}

/* Layout `l`'s figures from the model's shape into *r (the stages in
 * `stages`); 0, or -1 when out of memory. The step time of a layout over
 * the memory limit is left at 0 unless `timed` (a search that shows only
 * fitting layouts never ranks those). */
static int weigh_shape(plait_cost_model *m, plait_cost_memo *memo, plait_config *cfg, config_reads *reads,
                       const plait_cost_ctx *x, const plait_cost_layout *l, int block_size, int timed,
                       plait_cost_rank *stages, plait_cost_result *r) {
    if (stages_of(m, memo, x, l, stages) != 0) return -1;
    int z = reads_of(cfg, l, reads);
    for (int k = 0; k < l->pp; k++)
        stages[k].grad_wire = reads->grad_wire[z], stages[k].param_wire = reads->param_wire[z];
    double bucket = l->bucket_mb > 0 ? l->bucket_mb * 1e6 : reads->bucket[z];
    plait_cost_finish_memory(stages, l, x, bucket, block_size, r);
    if (r->fits || timed) plait_cost_finish_time(stages, l, x, bucket, r);
    else memset(&r->time, 0, sizeof r->time), r->tokens_per_s = 0;
    r->layout = *l;
    return 0;
}

/* The next result of `out`, ranked by layout `l`'s shape alone: its
 * figures as kept (`kept` of weighed), else weighed again. */
static int shape_row(plait_cost_model *m, plait_config *cfg, config_reads *reads, const plait_cost_ctx *x,
                     const plait_cost_layout *l, int block_size, plait_cost_rank *stages, const kept_rows *rows,
                     size_t kept, plait_cost_search *out) {
    plait_cost_result *r = &out->results[out->n];
    if (kept) *r = rows->r[kept - 1];
    else memset(r, 0, sizeof *r);
    if (!kept && weigh_shape(m, NULL, cfg, reads, x, l, block_size, 1, stages, r) != 0) return -1;
    out->shape_only++;
    out->n++;
    return 0;
}

void plait_cost_search_free(plait_cost_search *s) {
    free(s->results);
    free(s->families);
    memset(s, 0, sizeof *s);
}

/* Per dp x tp x pp (x cp x ep) family, the least memory of its layouts
 * and whether one fits. */
typedef struct triple {
    int dp, tp, pp, cp, ep, fits;
    double least;
    size_t least_index;
    size_t members; /* its layouts weighed (the enumeration keeps a family's together) */
    int other;      /* the reason (a `reasons` index) a layout within the memory limit
                       does not fit, as a rule of its keys says; -1: none */
} triple;

static triple triple_of(const plait_cost_layout *l, double mem, size_t i) {
    return (triple){
        .dp = l->dp, .tp = l->tp, .pp = l->pp, .cp = l->cp, .ep = l->ep, .least = mem, .least_index = i, .other = -1};
}

/* The distinct reasons other than memory that layouts do not fit for:
 * few (the rules of the config's keys), each kept once. */
typedef struct reasons {
    char (*text)[sizeof(((plait_cost_result *)0)->why)];
    int n, cap;
} reasons;

/* The index of `why` in `r`, added where new; -1 when out of memory. */
static int reason_of(reasons *r, const char *why) {
    for (int k = 0; k < r->n; k++)
        if (strcmp(r->text[k], why) == 0) return k;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 4;
        void *t = realloc(r->text, (size_t)cap * sizeof *r->text);
        if (!t) return -1;
        r->text = t;
        r->cap = cap;
    }
    snprintf(r->text[r->n], sizeof *r->text, "%s", why);
    return r->n++;
}

/* Each family none of whose weighed layouts fits, said once and counting
 * them all: with its least memory where that is over the `limit` (bytes),
 * else with the rule that set its layouts aside; 0, or -1 when out of
 * memory. */
static int unfit_families(const triple *tri, size_t nt, const plait_cost_layout *lay, double limit,
                          const reasons *other, families *fs) {
    for (size_t k = 0; k < nt; k++) {
        if (tri[k].fits) continue;
        char family[96], why[512], least[128];
        family_of(&lay[tri[k].least_index], "", family, sizeof family);
        plait_cost_layout_name(&lay[tri[k].least_index], least, sizeof least);
        if (tri[k].other >= 0 && !(limit > 0 && tri[k].least > limit))
            snprintf(why, sizeof why, "none fits: %s", other->text[tri[k].other]);
        else
            snprintf(why, sizeof why,
                     "none fits: the least memory, %.1f MiB per rank (%s), is over the %.1f MiB allowed",
                     tri[k].least / 1048576.0, least, limit / 1048576.0);
        if (add_family(fs, family, why, 1) != 0) return -1;
        fs->f[fs->last].layouts = tri[k].members;
    }
    return 0;
}

plait_status plait_cost_search_run(const plait_cost_axes *axes, plait_config *cfg, const plait_cost_ctx *x,
                                   size_t show, plait_cost_search *out) {
    memset(out, 0, sizeof *out);
    double t0 = plait_clock_now();
    plait_cost_model *m = NULL;
    plait_status st = plait_cost_model_new(cfg, &m);
    if (st != PLAIT_OK) return st;
    size_t count = plait_cost_enumerate(axes, NULL, 0);
    plait_cost_layout *lay = malloc((count + 1) * sizeof *lay);
    weighed *w = malloc((count + 1) * sizeof *w);
    int max_pp = axes->ranks;
    plait_cost_rank *stages = malloc((size_t)max_pp * sizeof *stages);
    plait_cost_result *scratch = malloc(sizeof *scratch);
    triple *tri = calloc(count + 1, sizeof *tri);
    families fs = {0};
    plait_cost_plans *plans = NULL;
    search_memo memo = {.rules = plait_cost_memo_new(), .stages = plait_cost_memo_new()};
    kept_rows rows = {0};
    reasons other = {0};
    const double limit = x->mem_limit > 0 ? x->mem_limit : plait_cost_mem_limit(x->cluster, axes->ranks);
    if (!lay || !w || !stages || !scratch || !tri || !memo.rules || !memo.stages) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory weighing %zu layouts", count);
        goto done;
    }
    plait_cost_enumerate(axes, lay, count);
    out->candidates = count;
    size_t nw = 0, nt = 0;
    int prev_refused = 0;
    config_reads reads = {0};
    int block_size = (int)plait_config_int(cfg, "model", "block_size");
    for (size_t i = 0; i < count; i++) {
        const plait_cost_layout *l = &lay[i];
        memo_family(&memo, l);
        int aside = set_aside(m, axes, x, block_size, lay, i, &prev_refused, &fs, memo.rules);
        if (aside < 0) goto oom;
        out->refused += (size_t)aside;
        if (aside) continue;
        if (show == PLAIT_COST_SHOW_ALL) memset(scratch, 0, sizeof *scratch); /* kept as shape_row weighs it */
        if (weigh_shape(m, memo.stages, cfg, &reads, x, l, block_size, show == 0, stages, scratch) != 0) goto oom;
        w[nw++] = (weighed){.index = i,
                            .tokens_per_s = scratch->tokens_per_s,
                            .mem = scratch->mem.total,
                            .fits = scratch->fits,
                            .kept = show == PLAIT_COST_SHOW_ALL && scratch->fits ? keep_row(&rows, scratch) : 0};
        out->fitting += scratch->fits != 0;
        if (nt == 0 || tri[nt - 1].dp != l->dp || tri[nt - 1].tp != l->tp || tri[nt - 1].pp != l->pp ||
            tri[nt - 1].cp != l->cp || tri[nt - 1].ep != l->ep)
            tri[nt++] = triple_of(l, scratch->mem.total, i);
        triple *t = &tri[nt - 1];
        t->members++;
        t->fits |= scratch->fits;
        if (!scratch->fits && t->other < 0 && !(limit > 0 && scratch->mem.total > limit) &&
            (t->other = reason_of(&other, scratch->why)) < 0)
            goto oom;
        if (scratch->mem.total < t->least) {
            t->least = scratch->mem.total;
            t->least_index = i;
        }
    }
    out->weighed = nw;
    if (unfit_families(tri, nt, lay, limit, &other, &fs) != 0) goto oom;
    qsort(w, nw, sizeof *w, by_weight);
    /* the best through their plugin's plan: its refusal sets a layout
     * aside (and the next one is tried); the figures shown are its */
    size_t keep = show > 0 && show < nw ? show : nw;
    out->results = calloc(keep + 1, sizeof *out->results);
    plans = plait_cost_plans_new();
    if (!out->results || !plans) goto oom;
    for (size_t i = 0; i < nw && out->n < keep; i++) {
        if (show > 0 && !w[i].fits) break;
        plait_cost_result *r = &out->results[out->n];
        if (show == PLAIT_COST_SHOW_ALL && out->confirmed >= PLAIT_COST_CONFIRM) { /* ranked only */
            if (shape_row(m, cfg, &reads, x, &lay[w[i].index], block_size, stages, &rows, w[i].kept, out) != 0)
                goto oom;
            continue;
        }
        st = plait_cost_evaluate_with(&lay[w[i].index], x, plans, r, NULL, 0);
        out->confirmed++;
        if (st != PLAIT_OK) goto done;
        if (!r->valid) {
            char name[128];
            plait_cost_layout_name(&r->layout, name, sizeof name);
            if (add_family(&fs, name, r->why, 0) != 0) goto oom;
            continue;
        }
        /* the plan can need more than the shape foretold: then it is not shown */
        if (show > 0 && !r->fits) {
            out->over_in_plan++;
            continue;
        }
        out->n++;
    }
    plait_cost_sort_results(out->results, out->n);
    goto done;
oom:
    st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory weighing %zu layouts", count);
done:
    plait_cost_plans_free(plans);
    plait_cost_memo_free(memo.rules);
    plait_cost_memo_free(memo.stages);
    free(rows.r);
    out->families = fs.f;
    out->n_families = fs.n;
    free(tri);
    free(other.text);
    free(scratch);
    free(stages);
    free(w);
    free(lay);
    plait_cost_model_free(m);
    out->seconds = plait_clock_now() - t0;
    return st;
}
