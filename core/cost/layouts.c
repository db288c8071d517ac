/* Enumerating layouts along the chosen axes and evaluating each. */
#include "cost/layouts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/compress.h"
#include "cost/rank_cost.h"
#include "runtime/error.h"
#include "train/preflight.h"

const char *const plait_cost_axis_names[PLAIT_AXIS_N_COUNT] = {"dp", "tp", "pp", "schedule", "chunks",
                                                              "optim", "micro_batch", "bucket_mb", "comm"};

static int axis_index(const char *name, size_t len) {
    for (int a = 0; a < PLAIT_AXIS_N_COUNT; a++)
        if (strlen(plait_cost_axis_names[a]) == len && strncmp(plait_cost_axis_names[a], name, len) == 0) return a;
    return -1;
}

static plait_status unknown_axis(const char *name, size_t len) {
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "unknown axis '%.*s' (axes: dp, tp, pp, schedule, chunks, optim, micro_batch, "
                           "bucket_mb, comm)",
                           (int)len, name);
}

plait_status plait_cost_axes_parse(plait_cost_axes *axes, const char *list) {
    axes->vary = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int a = axis_index(p, len);
        if (a < 0) return unknown_axis(p, len);
        axes->vary |= 1u << a;
        p += len + (p[len] == ',');
    }
    return PLAIT_OK;
}

static int is_text_axis(int a) {
    return a == PLAIT_AXIS_N_SCHEDULE || a == PLAIT_AXIS_N_OPTIM || a == PLAIT_AXIS_N_COMM;
}

plait_status plait_cost_axes_values(plait_cost_axes *axes, const char *axis, const char *values) {
    int a = axis_index(axis, strlen(axis));
    if (a < 0) return unknown_axis(axis, strlen(axis));
    static const char *const schedules[] = {"gpipe", "1f1b", "interleaved", "zb1", NULL};
    static const char *const optims[] = {"adam", "zero1", "zero2", "zero3", NULL};
    axes->n[a] = 0;
    for (const char *p = values; *p;) {
        size_t len = strcspn(p, ",");
        if (axes->n[a] == PLAIT_COST_MAX_VALUES)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s: at most %d values", axis, PLAIT_COST_MAX_VALUES);
        if (len == 0 || len >= 32)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s '%s': an empty or too long value", axis, values);
        int k = axes->n[a];
        if (is_text_axis(a)) {
            snprintf(axes->text[a][k], 32, "%.*s", (int)len, p);
            const char *const *allowed = a == PLAIT_AXIS_N_SCHEDULE ? schedules : a == PLAIT_AXIS_N_OPTIM ? optims : NULL;
            int ok = !allowed;
            for (int i = 0; allowed && allowed[i]; i++) ok |= strcmp(allowed[i], axes->text[a][k]) == 0;
            if (!ok)
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s: '%s' is not one of %s", axis, axes->text[a][k],
                                       a == PLAIT_AXIS_N_SCHEDULE ? "gpipe, 1f1b, interleaved, zb1"
                                                                  : "adam, zero1, zero2, zero3");
        } else {
            char buf[32], *end = NULL;
            snprintf(buf, sizeof buf, "%.*s", (int)len, p);
            errno = 0;
            long long v = strtoll(buf, &end, 10);
            if (errno || !end || *end || v < (a == PLAIT_AXIS_N_BUCKET_MB ? 0 : 1) || v > 1000000)
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s: '%s' is not a whole number in 1..1000000", axis,
                                       buf);
            axes->num[a][k] = v;
        }
        axes->n[a]++;
        p += len + (p[len] == ',');
    }
    axes->vary |= 1u << a;
    return PLAIT_OK;
}

/* The values an axis takes for a layout with sizes dp/pp fixed so far. */
static int axis_values(const plait_cost_axes *x, int a, int dp, int pp, int64_t *num, const char **text) {
    int vary = (x->vary >> a) & 1u, n = 0;
    if (vary && x->n[a] > 0) {
        for (int i = 0; i < x->n[a]; i++) {
            num[n] = x->num[a][i];
            text[n] = x->text[a][i];
            n++;
        }
        return n;
    }
    switch (a) {
    case PLAIT_AXIS_N_DP:
    case PLAIT_AXIS_N_TP:
    case PLAIT_AXIS_N_PP: {
        int64_t base = a == PLAIT_AXIS_N_DP ? x->base.dp : a == PLAIT_AXIS_N_TP ? x->base.tp : x->base.pp;
        if (!vary) {
            num[n++] = base;
            break;
        }
        for (int d = 1; d <= x->ranks && n < PLAIT_COST_MAX_VALUES; d++)
            if (x->ranks % d == 0) num[n++] = d;
        break;
    }
    case PLAIT_AXIS_N_SCHEDULE:
        if (!vary) {
            text[n++] = x->base.schedule;
        } else {
            static const char *const all[] = {"gpipe", "1f1b", "interleaved"};
            for (int i = 0; i < 3; i++) text[n++] = all[i];
        }
        break;
    case PLAIT_AXIS_N_CHUNKS:
        if (!vary) num[n++] = x->base.chunks;
        else
            for (int v = 2; v <= 4; v += 2) num[n++] = v;
        break;
    case PLAIT_AXIS_N_OPTIM:
        if (!vary) {
            text[n++] = x->base.optim;
        } else {
            static const char *const all[] = {"adam", "zero1", "zero2", "zero3"};
            for (int i = 0; i < 4; i++) text[n++] = all[i];
        }
        break;
    case PLAIT_AXIS_N_MICRO_BATCH: {
        int64_t per = dp > 0 ? x->global_batch / dp : x->global_batch;
        if (!vary || per < 1) {
            num[n++] = pp > 1 ? 1 : (per > 0 ? per : 1);
            break;
        }
        for (int64_t m = 1; m <= per && n < PLAIT_COST_MAX_VALUES; m++)
            if (per % m == 0) num[n++] = m;
        break;
    }
    case PLAIT_AXIS_N_BUCKET_MB:
        if (!vary) num[n++] = x->base.bucket_mb;
        else {
            static const int all[] = {1, 5, 25};
            for (int i = 0; i < 3; i++) num[n++] = all[i];
        }
        break;
    case PLAIT_AXIS_N_COMM:
        text[n++] = x->base.comm;
        break;
    }
    return n;
}

size_t plait_cost_enumerate(const plait_cost_axes *x, plait_cost_layout *out, size_t cap) {
    int64_t v[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    const char *t[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    size_t count = 0;
    int nd = axis_values(x, PLAIT_AXIS_N_DP, 0, 0, v[0], t[0]);
    int nt = axis_values(x, PLAIT_AXIS_N_TP, 0, 0, v[1], t[1]);
    int np = axis_values(x, PLAIT_AXIS_N_PP, 0, 0, v[2], t[2]);
    for (int a = 0; a < nd; a++)
        for (int b = 0; b < nt; b++)
            for (int c = 0; c < np; c++) {
                int dp = (int)v[0][a], tp = (int)v[1][b], pp = (int)v[2][c];
                if ((int64_t)dp * tp * pp != x->ranks) continue;
                int n[PLAIT_AXIS_N_COUNT];
                for (int k = PLAIT_AXIS_N_SCHEDULE; k < PLAIT_AXIS_N_COUNT; k++)
                    n[k] = axis_values(x, k, dp, pp, v[k], t[k]);
                /* without a pipeline, schedule and chunks do not apply; without
                 * DP, neither do ZeRO and the bucket */
                if (pp == 1) n[PLAIT_AXIS_N_SCHEDULE] = n[PLAIT_AXIS_N_CHUNKS] = 1;
                if (dp == 1) n[PLAIT_AXIS_N_BUCKET_MB] = 1;
                int i[PLAIT_AXIS_N_COUNT] = {0};
                for (;;) {
                    plait_cost_layout l;
                    memset(&l, 0, sizeof l);
                    l.dp = dp;
                    l.tp = tp;
                    l.pp = pp;
                    const char *sched = pp > 1 ? t[PLAIT_AXIS_N_SCHEDULE][i[PLAIT_AXIS_N_SCHEDULE]] : "";
                    snprintf(l.schedule, sizeof l.schedule, "%s", sched ? sched : "");
                    int interleaved = strcmp(l.schedule, "interleaved") == 0;
                    l.chunks = interleaved ? (int)v[PLAIT_AXIS_N_CHUNKS][i[PLAIT_AXIS_N_CHUNKS]] : 1;
                    if (interleaved && l.chunks < 2) l.chunks = 2;
                    const char *opt = t[PLAIT_AXIS_N_OPTIM][i[PLAIT_AXIS_N_OPTIM]];
                    snprintf(l.optim, sizeof l.optim, "%s", opt ? opt : "adam");
                    l.micro_batch = v[PLAIT_AXIS_N_MICRO_BATCH][i[PLAIT_AXIS_N_MICRO_BATCH]];
                    l.bucket_mb = dp > 1 ? (int)v[PLAIT_AXIS_N_BUCKET_MB][i[PLAIT_AXIS_N_BUCKET_MB]] : 0;
                    const char *comm = t[PLAIT_AXIS_N_COMM][i[PLAIT_AXIS_N_COMM]];
                    snprintf(l.comm, sizeof l.comm, "%s", comm ? comm : "tcp");
                    /* chunks other than the first only differ for interleaved;
                     * ZeRO with one replica is plain Adam: skip the repeats */
                    int repeat = (!interleaved && i[PLAIT_AXIS_N_CHUNKS] > 0) ||
                                 (dp == 1 && strcmp(l.optim, "adam") != 0 && ((x->vary >> PLAIT_AXIS_N_OPTIM) & 1u));
                    if (!repeat) {
                        if (count < cap) out[count] = l;
                        count++;
                    }
                    int k = PLAIT_AXIS_N_COUNT - 1;
                    while (k >= PLAIT_AXIS_N_SCHEDULE && ++i[k] >= n[k]) i[k--] = 0;
                    if (k < PLAIT_AXIS_N_SCHEDULE) break;
                }
            }
    return count;
}

void plait_cost_layout_name(const plait_cost_layout *l, char *buf, size_t len) {
    int n = snprintf(buf, len, "dp%d tp%d pp%d", l->dp, l->tp, l->pp);
    if (n < 0 || (size_t)n >= len) return;
    if (l->pp > 1) n += snprintf(buf + n, len - (size_t)n, " %s", l->schedule);
    if ((size_t)n < len && l->chunks > 1) n += snprintf(buf + n, len - (size_t)n, " v%d", l->chunks);
    if ((size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " mb%lld %s", (long long)l->micro_batch, l->optim);
    if ((size_t)n < len && l->bucket_mb > 0) n += snprintf(buf + n, len - (size_t)n, " b%dM", l->bucket_mb);
    if ((size_t)n < len && strcmp(l->comm, "tcp") != 0) snprintf(buf + n, len - (size_t)n, " %s", l->comm);
}

int plait_cost_layout_overrides(const plait_cost_layout *l, int64_t global_batch, char out[][96]) {
    int n = 0;
    snprintf(out[n++], 96, "parallel.dp=%d", l->dp);
    snprintf(out[n++], 96, "parallel.tp=%d", l->tp);
    snprintf(out[n++], 96, "parallel.pp=%d", l->pp);
    /* only the hybrid plugin composes TP and PP with DP */
    if (l->tp > 1 || l->pp > 1) snprintf(out[n++], 96, "parallel.plugin=hybrid");
    if (l->pp > 1) {
        snprintf(out[n++], 96, "parallel.pp.schedule=%s", l->schedule);
        snprintf(out[n++], 96, "parallel.pp.virtual_stages=%d", l->chunks);
    }
    snprintf(out[n++], 96, "optim.plugin=%s", l->optim);
    snprintf(out[n++], 96, "data.global_batch=%lld", (long long)global_batch);
    snprintf(out[n++], 96, "data.micro_batch=%lld", (long long)l->micro_batch);
    snprintf(out[n++], 96, "data.accumulation_steps=0");
    if (l->bucket_mb > 0) {
        if (strcmp(l->optim, "adam") == 0) snprintf(out[n++], 96, "parallel.dp.bucket_size=%dM", l->bucket_mb);
        else snprintf(out[n++], 96, "optim.%s.bucket_size=%dM", l->optim, l->bucket_mb);
    }
    snprintf(out[n++], 96, "comm.plugin=%s", l->comm);
    return n;
}

typedef struct collect {
    plait_cost_rank *ranks;
    int n, cap;
} collect;

static void visit(void *ctx, const plait_layout_rank *r) {
    collect *c = ctx;
    if (c->n < c->cap) plait_cost_rank_from_plan(r, &c->ranks[c->n++]);
}

double plait_cost_mem_limit(const plait_cluster *c, int ranks) {
    return c->gpu ? c->memory : c->memory / plait_cluster_ranks_per_node(c, ranks);
}

/* The optimizer's ZeRO stage and the bucket its gradients move in: the
 * layout's bucket, else the config's ([parallel.dp] or [optim.zeroN]
 * bucket_size), else the plugins' default 25 MB. */
static void optim_of(const plait_config *cfg, int bucket_mb, int *zero, double *bucket) {
    const char *optim = plait_config_str(cfg, "optim", "plugin");
    *zero = strncmp(optim, "zero", 4) == 0 ? atoi(optim + 4) : 0;
    *bucket = bucket_mb > 0 ? bucket_mb * 1e6 : 25e6;
    plait_value v;
    char sec[48];
    snprintf(sec, sizeof sec, *zero ? "optim.%s" : "parallel.dp", optim);
    if (bucket_mb == 0 && plait_config_get(cfg, sec, "bucket_size", &v) == PLAIT_OK) *bucket = (double)v.i;
}

/* Bytes on the wire per float32 byte of the gradient reductions and of
 * ZeRO-3's parameter gathers, from the compression keys (coll/compress.h). */
static void wire_of(const plait_config *cfg, int zero, double *grad, double *param) {
    char sec[48];
    snprintf(sec, sizeof sec, zero ? "optim.zero%d" : "parallel.dp", zero);
    plait_value v;
    int g = plait_config_get(cfg, sec, "grad_compression", &v) == PLAIT_OK ? (int)v.i : 0;
    int p = zero == 3 && plait_config_get(cfg, sec, "param_gather", &v) == PLAIT_OK && v.i ? PLAIT_COMPRESS_BF16 : 0;
    const size_t n = 1u << 20;
    *grad = (double)plait_compress_bytes((plait_compression)g, n) / (4.0 * n);
    *param = (double)plait_compress_bytes((plait_compression)p, n) / (4.0 * n);
}

/* Every rank's cost through the preflight (col->ranks allocated here). */
static plait_status rank_costs(plait_config *cfg, collect *col) {
    int world = (int)(plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "tp") *
                      plait_config_int(cfg, "parallel", "pp"));
    col->n = 0;
    col->cap = world;
    col->ranks = calloc((size_t)world, sizeof(plait_cost_rank));
    if (!col->ranks) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_layout_preflight_visit(cfg, visit, col);
    if (st == PLAIT_OK && col->n != world)
        st = plait_set_error(PLAIT_ERR_INTERNAL, "the preflight planned %d of %d ranks", col->n, world);
    return st;
}

plait_status plait_cost_config_memory(plait_config *cfg, const plait_cluster *c, plait_cost_mem *per_rank, int cap,
                                      int *n) {
    collect col;
    plait_status st = rank_costs(cfg, &col);
    int zero;
    double bucket;
    optim_of(cfg, 0, &zero, &bucket);
    *n = 0;
    for (int i = 0; st == PLAIT_OK && i < col.n && i < cap; i++) {
        plait_cost_memory(&col.ranks[i], zero, bucket, c->process_bytes, &per_rank[i]);
        *n = i + 1;
    }
    free(col.ranks);
    return st;
}

plait_status plait_cost_evaluate(const plait_cost_layout *l, int64_t global_batch, plait_cost_loader load,
                                 void *ctx, const plait_cluster *c, double mem_limit, plait_cost_result *out) {
    memset(out, 0, sizeof *out);
    out->layout = *l;
    char ov[16][96];
    char *ptr[16];
    int n = plait_cost_layout_overrides(l, global_batch, ov);
    for (int i = 0; i < n; i++) ptr[i] = ov[i];
    plait_config *cfg = NULL;
    collect col = {0};
    plait_status st = load(ctx, n, ptr, &cfg);
    if (st == PLAIT_OK) st = rank_costs(cfg, &col);
    if (st != PLAIT_OK) {
        if (st == PLAIT_ERR_NO_MEMORY) {
            plait_config_free(cfg);
            free(col.ranks);
            return st;
        }
        snprintf(out->why, sizeof out->why, "%s", plait_last_error());
        plait_clear_error();
        plait_config_free(cfg);
        free(col.ranks);
        return PLAIT_OK;
    }
    out->valid = 1;
    int zero, world = col.n;
    double bucket;
    optim_of(cfg, l->bucket_mb, &zero, &bucket);
    double gw, pw;
    wire_of(cfg, zero, &gw, &pw);
    for (int i = 0; i < world; i++) col.ranks[i].grad_wire = gw, col.ranks[i].param_wire = pw;
    for (int i = 0; i < world; i++) {
        plait_cost_mem m;
        plait_cost_memory(&col.ranks[i], zero, bucket, c->process_bytes, &m);
        if (m.total > out->mem.total) out->mem = m;
        out->flops_per_step += col.ranks[i].flops;
    }
    plait_cost_step_time(col.ranks, world, zero, bucket, c, &out->time);
    out->tokens_per_step = (double)global_batch * (double)plait_config_int(cfg, "model", "block_size");
    out->tokens_per_s = out->time.step > 0 ? out->tokens_per_step / out->time.step : 0;
    double limit = mem_limit > 0 ? mem_limit : plait_cost_mem_limit(c, world);
    out->fits = !(limit > 0 && out->mem.total > limit);
    if (!out->fits)
        snprintf(out->why, sizeof out->why, "memory over the limit: %.1f MiB per rank predicted, %.1f MiB allowed",
                 out->mem.total / 1048576.0, limit / 1048576.0);
    plait_config_free(cfg);
    free(col.ranks);
    return PLAIT_OK;
}

static int by_speed(const void *a, const void *b) {
    const plait_cost_result *x = a, *y = b;
    int kx = x->valid && x->fits, ky = y->valid && y->fits;
    if (kx != ky) return ky - kx;
    if (x->tokens_per_s != y->tokens_per_s) return x->tokens_per_s < y->tokens_per_s ? 1 : -1;
    return memcmp(&x->layout, &y->layout, sizeof x->layout); /* the same order every run */
}

void plait_cost_sort_results(plait_cost_result *r, size_t n) { qsort(r, n, sizeof *r, by_speed); }
