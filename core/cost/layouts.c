/* Enumerating layouts along the chosen axes and evaluating each. */
#include "cost/layouts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/compress.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "layout/mesh.h"
#include "model/model.h"
#include "cost/rank_cost.h"
#include "runtime/error.h"
#include "train/preflight.h"

const char *const plait_cost_axis_names[PLAIT_AXIS_N_COUNT] = {"dp",        "tp",    "pp",          "schedule",
                                                               "chunks",    "optim", "micro_batch", "recompute",
                                                               "bucket_mb", "comm",  "sp",          "cp",
                                                               "ep"};
static const char *const recompute_names[] = {"none", "selective", "full", NULL};

const char *plait_cost_recompute_name(int recompute) {
    return recompute >= 0 && recompute <= 2 ? recompute_names[recompute] : "none";
}

static int recompute_of(const char *name) {
    for (int i = 0; recompute_names[i]; i++)
        if (strcmp(recompute_names[i], name) == 0) return i;
    return -1;
}

int plait_cost_zero_stage(const char *optim) { return strncmp(optim, "zero", 4) == 0 ? atoi(optim + 4) : 0; }

static int axis_index(const char *name, size_t len) {
    for (int a = 0; a < PLAIT_AXIS_N_COUNT; a++)
        if (strlen(plait_cost_axis_names[a]) == len && strncmp(plait_cost_axis_names[a], name, len) == 0) return a;
    return -1;
}

static plait_status unknown_axis(const char *name, size_t len) {
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "unknown axis '%.*s' (axes: dp, tp, pp, schedule, chunks, optim, micro_batch, "
                           "recompute, bucket_mb, comm, sp, cp, ep; or all)",
                           (int)len, name);
}

plait_status plait_cost_axes_parse(plait_cost_axes *axes, const char *list) {
    axes->vary = 0;
    if (strcmp(list, "all") == 0) {
        /* the search space: everything but the bucket and the comm plugin */
        for (int a = 0; a < PLAIT_AXIS_N_COUNT; a++)
            if (a != PLAIT_AXIS_N_BUCKET_MB && a != PLAIT_AXIS_N_COMM) axes->vary |= 1u << a;
        return PLAIT_OK;
    }
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
    return a == PLAIT_AXIS_N_SCHEDULE || a == PLAIT_AXIS_N_OPTIM || a == PLAIT_AXIS_N_RECOMPUTE ||
           a == PLAIT_AXIS_N_COMM;
}

plait_status plait_cost_axes_values(plait_cost_axes *axes, const char *axis, const char *values) {
    int a = axis_index(axis, strlen(axis));
    if (a < 0) return unknown_axis(axis, strlen(axis));
    static const char *const schedules[] = {"gpipe", "1f1b", "interleaved", "zb1", NULL};
    static const char *const optims[] = {"adam", "zero1", "zero2", "zero3", NULL};
    if (!*values) return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s needs a value or a list of them (1,2,4)", axis);
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
            const char *const *allowed = a == PLAIT_AXIS_N_SCHEDULE ? schedules
                                         : a == PLAIT_AXIS_N_OPTIM    ? optims
                                         : a == PLAIT_AXIS_N_RECOMPUTE ? recompute_names
                                                                       : NULL;
            int ok = !allowed;
            for (int i = 0; allowed && allowed[i]; i++) ok |= strcmp(allowed[i], axes->text[a][k]) == 0;
            if (!ok)
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s: '%s' is not one of %s", axis, axes->text[a][k],
                                       a == PLAIT_AXIS_N_SCHEDULE ? "gpipe, 1f1b, interleaved, zb1"
                                       : a == PLAIT_AXIS_N_OPTIM  ? "adam, zero1, zero2, zero3"
                                                                  : "none, selective, full");
        } else {
            char buf[32], *end = NULL;
            snprintf(buf, sizeof buf, "%.*s", (int)len, p);
            errno = 0;
            long long v = strtoll(buf, &end, 10);
            int lo = a == PLAIT_AXIS_N_BUCKET_MB || a == PLAIT_AXIS_N_SP ? 0 : 1;
            long long hi = a == PLAIT_AXIS_N_SP ? 1 : 1000000;
            if (errno || !end || *end || v < lo || v > hi)
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "--%s: '%s' is not a whole number in %d..%lld%s", axis,
                                       buf, lo, hi,
                                       a == PLAIT_AXIS_N_SP ? " (0: without sequence parallelism, 1: with)" : "");
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
            for (int v = 2; v <= 8; v *= 2) num[n++] = v;
        break;
    case PLAIT_AXIS_N_RECOMPUTE:
        if (!vary) {
            text[n++] = recompute_names[x->base.recompute];
        } else {
            for (int i = 0; recompute_names[i]; i++) text[n++] = recompute_names[i];
        }
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
    case PLAIT_AXIS_N_SP:
        if (!vary) num[n++] = x->base.sp;
        else
            for (int v = 0; v <= 1; v++) num[n++] = v;
        break;
    case PLAIT_AXIS_N_CP: /* the sizes a model's sequence and attention allow (layouts.h) */
        if (!vary || x->seq <= 0 || !x->attention) {
            num[n++] = x->base.cp > 1 ? x->base.cp : 1;
            break;
        }
        for (int d = 1; d <= x->ranks && n < PLAIT_COST_MAX_VALUES; d++)
            if (x->ranks % d == 0 &&
                (d == 1 || d == x->base.cp || (x->seq % (2 * d) == 0 && x->seq / d >= PLAIT_COST_CP_MIN_TOKENS)))
                num[n++] = d; /* and the config's own */
        break;
    case PLAIT_AXIS_N_EP: /* the sizes the model's experts allow (layouts.h) */
        if (!vary || x->experts <= 0) {
            num[n++] = x->base.ep > 1 ? x->base.ep : 1;
            break;
        }
        for (int d = 1; d <= x->ranks && d <= PLAIT_MODEL_MAX_EP && n < PLAIT_COST_MAX_VALUES; d++)
            if (x->ranks % d == 0 && (x->experts % d == 0 || d == x->base.ep)) num[n++] = d;
        break;
    }
    return n;
}

/* A name into a layout's field, cut to fit: the enumeration writes three
 * for each of up to a few hundred thousand layouts, where snprintf's
 * format parsing was a tenth of a large search's time. */
static void copy_name(char *dst, size_t len, const char *src) {
    size_t n = strlen(src);
    if (n >= len) n = len - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

size_t plait_cost_enumerate(const plait_cost_axes *x, plait_cost_layout *out, size_t cap) {
    int64_t v[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    const char *t[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    size_t count = 0;
    int nd = axis_values(x, PLAIT_AXIS_N_DP, 0, 0, v[0], t[0]);
    int nt = axis_values(x, PLAIT_AXIS_N_TP, 0, 0, v[1], t[1]);
    int np = axis_values(x, PLAIT_AXIS_N_PP, 0, 0, v[2], t[2]);
    int64_t cps[PLAIT_COST_MAX_VALUES];
    const char *unused[PLAIT_COST_MAX_VALUES];
    int ncp = axis_values(x, PLAIT_AXIS_N_CP, 0, 0, cps, unused);
    int64_t eps[PLAIT_COST_MAX_VALUES];
    int nep = axis_values(x, PLAIT_AXIS_N_EP, 0, 0, eps, unused);
    for (int a = 0; a < nd; a++)
        for (int b = 0; b < nt; b++)
            for (int c = 0; c < np; c++)
                for (int e = 0; e < ncp * nep; e++) {
                    int dp = (int)v[0][a], tp = (int)v[1][b], pp = (int)v[2][c], cp = (int)cps[e / nep];
                    int ep = (int)eps[e % nep];
                    if ((int64_t)dp * tp * pp * cp != x->ranks) continue;
                    /* ep is carved out of dp x cp; train's other rules are the search's refusals */
                    if ((dp * cp) % ep != 0) continue;
                    int n[PLAIT_AXIS_N_COUNT];
                    for (int k = PLAIT_AXIS_N_SCHEDULE; k < PLAIT_AXIS_N_COUNT; k++)
                        n[k] = axis_values(x, k, dp, pp, v[k], t[k]);
                    n[PLAIT_AXIS_N_CP] = n[PLAIT_AXIS_N_EP] = 1; /* the loop above varies them */
                    /* without a pipeline, schedule and chunks do not apply; without
                 * DP, neither do ZeRO and the bucket */
                    if (pp == 1) n[PLAIT_AXIS_N_SCHEDULE] = n[PLAIT_AXIS_N_CHUNKS] = 1;
                    if (dp == 1) n[PLAIT_AXIS_N_BUCKET_MB] = 1;
                    if (tp == 1) n[PLAIT_AXIS_N_SP] = 1; /* sequence parallelism splits over the tp group */
                    int i[PLAIT_AXIS_N_COUNT] = {0};
                    for (;;) {
                        plait_cost_layout l;
                        memset(&l, 0, sizeof l);
                        l.dp = dp;
                        l.tp = tp;
                        l.pp = pp;
                        const char *sched = pp > 1 ? t[PLAIT_AXIS_N_SCHEDULE][i[PLAIT_AXIS_N_SCHEDULE]] : "";
                        copy_name(l.schedule, sizeof l.schedule, sched ? sched : "");
                        int interleaved = strcmp(l.schedule, "interleaved") == 0;
                        l.chunks = interleaved ? (int)v[PLAIT_AXIS_N_CHUNKS][i[PLAIT_AXIS_N_CHUNKS]] : 1;
                        if (interleaved && l.chunks < 2) l.chunks = 2;
                        const char *opt = t[PLAIT_AXIS_N_OPTIM][i[PLAIT_AXIS_N_OPTIM]];
                        copy_name(l.optim, sizeof l.optim, opt ? opt : "adam");
                        l.micro_batch = v[PLAIT_AXIS_N_MICRO_BATCH][i[PLAIT_AXIS_N_MICRO_BATCH]];
                        const char *rc = t[PLAIT_AXIS_N_RECOMPUTE][i[PLAIT_AXIS_N_RECOMPUTE]];
                        l.recompute = rc && recompute_of(rc) >= 0 ? recompute_of(rc) : 0;
                        l.bucket_mb = dp > 1 ? (int)v[PLAIT_AXIS_N_BUCKET_MB][i[PLAIT_AXIS_N_BUCKET_MB]] : 0;
                        const char *comm = t[PLAIT_AXIS_N_COMM][i[PLAIT_AXIS_N_COMM]];
                        copy_name(l.comm, sizeof l.comm, comm ? comm : "tcp");
                        l.sp = tp > 1 && v[PLAIT_AXIS_N_SP][i[PLAIT_AXIS_N_SP]] > 0;
                        l.cp = cp;
                        l.ep = ep;
                        /* chunks other than the first only differ for interleaved;
                     * ZeRO with one replica is plain Adam (but for ZeRO-3
                     * offloading its parameters): skip the repeats */
                        int repeat = (!interleaved && i[PLAIT_AXIS_N_CHUNKS] > 0) ||
                                     (dp == 1 && strcmp(l.optim, "adam") != 0 &&
                                      ((x->vary >> PLAIT_AXIS_N_OPTIM) & 1u) &&
                                      !(x->offload_params && strcmp(l.optim, "zero3") == 0));
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

static void name_of(const plait_cost_layout *l, int every, char *buf, size_t len) {
    int n = snprintf(buf, len, "dp%d tp%d pp%d", l->dp, l->tp, l->pp);
    if (n >= 0 && (size_t)n < len && l->cp > 1) n += snprintf(buf + n, len - (size_t)n, " cp%d", l->cp);
    if (n >= 0 && (size_t)n < len && l->ep > 1) n += snprintf(buf + n, len - (size_t)n, " ep%d", l->ep);
    if (n < 0 || (size_t)n >= len) return;
    if (l->pp > 1) n += snprintf(buf + n, len - (size_t)n, " %s", l->schedule);
    if ((size_t)n < len && l->chunks > 1) n += snprintf(buf + n, len - (size_t)n, " v%d", l->chunks);
    if ((size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " mb%lld %s", (long long)l->micro_batch, l->optim);
    if ((size_t)n < len && (every || l->recompute > 0))
        n += snprintf(buf + n, len - (size_t)n, " %s", plait_cost_recompute_name(l->recompute));
    if ((size_t)n < len && l->sp) n += snprintf(buf + n, len - (size_t)n, " sp");
    if ((size_t)n < len && l->bucket_mb > 0) n += snprintf(buf + n, len - (size_t)n, " b%dM", l->bucket_mb);
    if ((size_t)n < len && strcmp(l->comm, "tcp") != 0) snprintf(buf + n, len - (size_t)n, " %s", l->comm);
}

void plait_cost_layout_name(const plait_cost_layout *l, char *buf, size_t len) { name_of(l, 0, buf, len); }

void plait_cost_layout_name_every(const plait_cost_layout *l, char *buf, size_t len) { name_of(l, 1, buf, len); }

/* "dp12" -> 12 when `word` is `prefix` and a whole number >= 1 */
static int number_after(const char *word, const char *prefix, long long *v) {
    size_t k = strlen(prefix);
    if (strncmp(word, prefix, k) != 0 || !word[k]) return 0;
    char *end = NULL;
    errno = 0;
    *v = strtoll(word + k, &end, 10);
    return !errno && end && *end == 0 && *v >= 1 && *v <= 100000000;
}

/* "b25M" -> 25 */
static int bucket_of(const char *word, long long *v) {
    char num[32];
    size_t len = strlen(word);
    if (len < 3 || len > sizeof num) return 0;
    snprintf(num, sizeof num, "%.*s", (int)(len - 1), word);
    return number_after(num, "b", v);
}

plait_status plait_cost_layout_parse(const char *text, const plait_cost_layout *base, plait_cost_layout *out) {
    *out = *base;
    out->sp = 0; /* a name without "sp" has none (plait plan names it where it is on) */
    out->cp = 1; /* nor one without "cpN" context parallelism */
    out->ep = 1; /* nor "epN" expert parallelism */
    int has_mb = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *w = strtok_r(buf, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
        long long v;
        size_t wl = strlen(w);
        if (number_after(w, "dp", &v)) out->dp = (int)v;
        else if (number_after(w, "tp", &v)) out->tp = (int)v;
        else if (number_after(w, "pp", &v)) out->pp = (int)v;
        else if (number_after(w, "cp", &v)) out->cp = (int)v;
        else if (number_after(w, "ep", &v)) out->ep = (int)v;
        else if (number_after(w, "mb", &v)) out->micro_batch = v, has_mb = 1;
        else if (number_after(w, "v", &v)) out->chunks = (int)v;
        else if (w[0] == 'b' && wl > 2 && w[wl - 1] == 'M' && bucket_of(w, &v)) out->bucket_mb = (int)v;
        else if (!strcmp(w, "gpipe") || !strcmp(w, "1f1b") || !strcmp(w, "interleaved") || !strcmp(w, "zb1"))
            snprintf(out->schedule, sizeof out->schedule, "%s", w);
        else if (!strcmp(w, "adam") || (!strncmp(w, "zero", 4) && w[4] >= '1' && w[4] <= '3' && !w[5]))
            snprintf(out->optim, sizeof out->optim, "%s", w);
        else if (recompute_of(w) >= 0) out->recompute = recompute_of(w);
        else if (!strcmp(w, "sp")) out->sp = 1;
        else if (!strcmp(w, "tcp") || !strcmp(w, "nccl") || !strcmp(w, "verbs"))
            snprintf(out->comm, sizeof out->comm, "%s", w);
        else
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "layout '%s': '%s' is not a layout word (dpN tpN ppN cpN epN, a schedule gpipe|1f1b|"
                                   "interleaved|zb1, vN chunks, mbN, adam|zero1|zero2|zero3, none|selective|full, "
                                   "sp, bNM bucket, tcp|nccl|verbs), as plait plan prints them",
                                   text, w);
    }
    if (out->sp && out->tp < 2)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "layout '%s': sp (sequence parallelism) splits the sequence over the tp group: it "
                               "needs tp 2 or more, not tp %d",
                               text, out->tp);
    if (out->pp <= 1) {
        out->schedule[0] = 0;
        out->chunks = 1;
    } else if (!out->schedule[0]) {
        snprintf(out->schedule, sizeof out->schedule, "1f1b");
    }
    if (strcmp(out->schedule, "interleaved") == 0 && out->chunks < 2) out->chunks = 2;
    if (strcmp(out->schedule, "interleaved") != 0) out->chunks = 1;
    if (!has_mb) out->micro_batch = 0; /* the default for the layout: set by the caller */
    return PLAIT_OK;
}

int plait_cost_layout_overrides(const plait_cost_layout *l, int64_t global_batch, char out[][96]) {
    int n = 0;
    snprintf(out[n++], 96, "parallel.dp=%d", l->dp);
    snprintf(out[n++], 96, "parallel.tp=%d", l->tp);
    snprintf(out[n++], 96, "parallel.pp=%d", l->pp);
    snprintf(out[n++], 96, "parallel.cp=%d", plait_cost_layout_cp(l));
    snprintf(out[n++], 96, "parallel.ep=%d", l->ep > 1 ? l->ep : 1);
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
    snprintf(out[n++], 96, "model.recompute=%s", plait_cost_recompute_name(l->recompute));
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
    plait_precision precision;
    const plait_cost_device *device;
    int sp; /* the layout's sequence parallelism */
    int cp; /* its context parallelism */
    const plait_config *cfg; /* the layout's: its experts, read at the first rank */
    plait_cost_moe moe;
    int moe_read;
} collect;

static void visit(void *ctx, const plait_layout_rank *r) {
    collect *c = ctx;
    if (!c->moe_read && c->cfg) plait_cost_moe_of(c->cfg, r->spec->ffn_hidden, &c->moe), c->moe_read = 1;
    if (c->n < c->cap) plait_cost_rank_from_plan(r, c->precision, c->device, c->sp, c->cp, &c->moe, &c->ranks[c->n++]);
}

void plait_cost_model_dims(const plait_config *cfg, int64_t *T, int64_t *HS) {
    int64_t C = plait_config_int(cfg, "model", "n_embd"), NH = plait_config_int(cfg, "model", "n_head");
    *T = plait_config_int(cfg, "model", "block_size");
    *HS = strcmp(plait_config_str(cfg, "model", "arch"), "gpt") == 0 && NH > 0 ? C / NH : C;
}

void plait_cost_device_planned(const plait_config *cfg, int gpu, plait_cost_device *out) {
    int64_t T, HS;
    plait_cost_model_dims(cfg, &T, &HS);
    if (gpu) plait_cost_device_cuda(T, HS, out);
    else plait_cost_device_of(plait_kernels_table(), T, HS, out);
}

double plait_cost_mem_limit(const plait_cluster *c, int ranks) {
    return c->gpu ? c->memory : c->memory / plait_cluster_ranks_per_node(c, ranks);
}

/* The optimizer's ZeRO stage and the bucket its gradients move in: the
 * layout's bucket, else the config's ([parallel.dp] or [optim.zeroN]
 * bucket_size), else the plugins' default 25 MB. */
static void optim_of(const plait_config *cfg, int bucket_mb, int *zero, double *bucket) {
    const char *optim = plait_config_str(cfg, "optim", "plugin");
    *zero = plait_cost_zero_stage(optim);
    *bucket = bucket_mb > 0 ? bucket_mb * 1e6 : 25.0 * 1024 * 1024; /* "25M" */
    plait_value v;
    char sec[48];
    snprintf(sec, sizeof sec, *zero ? "optim.%s" : "parallel.dp", optim);
    if (bucket_mb == 0 && plait_config_get(cfg, sec, "bucket_size", &v) == PLAIT_OK) *bucket = (double)v.i;
}

/* (coll/compress.h's sizes) */
void plait_cost_wire(const plait_config *cfg, int zero, double *grad, double *param) {
    char sec[48];
    snprintf(sec, sizeof sec, zero ? "optim.zero%d" : "parallel.dp", zero);
    plait_value v;
    int g = plait_config_get(cfg, sec, "grad_compression", &v) == PLAIT_OK ? (int)v.i : 0;
    int p = zero && plait_config_get(cfg, sec, "param_gather", &v) == PLAIT_OK && v.i ? PLAIT_COMPRESS_BF16 : 0;
    const size_t n = 1u << 20;
    *grad = (double)plait_compress_bytes((plait_compression)g, n) / (4.0 * n);
    *param = (double)plait_compress_bytes((plait_compression)p, n) / (4.0 * n);
}

void plait_cost_offload_of(const plait_config *cfg, int *offload, double *buffer, int *params) {
    plait_value v;
    *offload = plait_config_get(cfg, "optim", "offload", &v) == PLAIT_OK ? (int)v.i : 0;
    *buffer = plait_config_get(cfg, "optim", "offload_buffer", &v) == PLAIT_OK ? (double)v.i : 0;
    *params = plait_config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK && v.i;
}

static int world_of(const plait_config *cfg) {
    return (int)(plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "tp") *
                 plait_config_int(cfg, "parallel", "pp"));
}

/* The cost of every rank (all = 1), or of one rank per pipeline stage,
 * through the preflight (col->ranks allocated here; col's precision and
 * device set by the caller). */
static plait_status rank_costs(plait_config *cfg, int all, collect *col) {
    int want = all ? world_of(cfg) : (int)plait_config_int(cfg, "parallel", "pp");
    col->n = 0;
    col->cap = want;
    col->ranks = calloc((size_t)want, sizeof(plait_cost_rank));
    if (!col->ranks) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = all ? plait_layout_preflight_visit(cfg, visit, col) : plait_layout_preflight_stages(cfg, visit, col);
    if (st == PLAIT_OK && col->n != want)
        st = plait_set_error(PLAIT_ERR_INTERNAL, "the preflight planned %d of %d ranks", col->n, want);
    return st;
}

const char *plait_cost_ep_refuses(const plait_cost_layout *l, int64_t experts, char *why, size_t len) {
    int ep = l->ep > 1 ? l->ep : 1, dpcp = l->dp * plait_cost_layout_cp(l);
    if (ep == 1) return NULL;
    if (experts <= 0)
        snprintf(why, len,
                 "[parallel] ep = %d splits a mixture-of-experts model's experts, and this model has none ([model] "
                 "moe_experts = 0; allowed: ep = 1)",
                 ep);
    else if (experts % ep != 0 || dpcp % ep != 0 || ep > PLAIT_MODEL_MAX_EP)
        snprintf(why, len,
                 "[parallel] ep = %d must divide [model] moe_experts = %lld and dp x cp = %d, at most %d (each ep rank "
                 "holds moe_experts / ep experts)",
                 ep, (long long)experts, dpcp, PLAIT_MODEL_MAX_EP);
    else if (l->tp > 1)
        snprintf(why, len,
                 "[parallel] ep = %d with tp = %d: the experts are not split over tensor-parallel ranks (allowed "
                 "with ep > 1: tp = 1)",
                 ep, l->tp);
    else return NULL;
    return why;
}

int plait_cost_layout_cp(const plait_cost_layout *l) { return l->cp > 1 ? l->cp : 1; }

int plait_cost_layout_ranks(const plait_cost_layout *l) { return l->dp * plait_cost_layout_cp(l) * l->tp * l->pp; }

const char *plait_cost_sp_refuses(const plait_cost_layout *l, int64_t T, char *why, size_t len) {
    if (!l->sp) return NULL;
    int cp = plait_cost_layout_cp(l);
    if (l->tp < 2)
        snprintf(why, len, "sequence parallelism splits the sequence over the tp group: it needs tp 2 or more");
    else if (T % cp == 0 && (T / cp) % l->tp != 0)
        snprintf(why, len,
                 "sequence parallelism splits the sequence over the tp group: [model] block_size %lld%s does not "
                 "divide by tp %d (a block_size of a multiple of %d, or another tp)",
                 (long long)T, cp > 1 ? " / cp, a cp rank's share," : "", l->tp, l->tp * cp);
    else return NULL;
    return why;
}

const char *plait_cost_cp_refuses(const plait_cost_layout *l, int64_t T, int attention, char *why, size_t len) {
    int cp = plait_cost_layout_cp(l);
    if (cp == 1) return NULL;
    if (!attention)
        snprintf(why, len,
                 "[parallel] cp = %d splits each sequence's attention over a ring of ranks, and the model has no "
                 "attention to split (arch gpt or llama, or cp = 1)",
                 cp);
    else if (T % (2 * cp) != 0)
        snprintf(why, len,
                 "[parallel] cp = %d holds each sequence as 2cp = %d equal chunks, but [model] block_size = %lld "
                 "does not split into %d (a block_size of a multiple of %d, or another cp)",
                 cp, 2 * cp, (long long)T, 2 * cp, 2 * cp);
    else return NULL;
    return why;
}

int plait_cost_config_sp(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "parallel.tp", "sequence_parallel", &v) == PLAIT_OK && v.i != 0;
}

/* The index among the ranks the preflight plans (world order, a cp
 * group's rank 0 alone) of world rank w's cp rank 0 peer, whose plan and
 * memory it shares. */
static int planned_index(int w, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES]) {
    int c[PLAIT_MESH_AXES];
    plait_mesh_coords(w, sizes, axes, c);
    c[PLAIT_AXIS_CP] = 0;
    int peer = plait_mesh_rank_of(c, sizes, axes), index = 0;
    for (int r = 0; r < peer; r++) {
        plait_mesh_coords(r, sizes, axes, c);
        index += c[PLAIT_AXIS_CP] == 0;
    }
    return index;
}

plait_status plait_cost_config_memory(plait_config *cfg, const plait_cluster *c, const plait_cost_device *dev,
                                      plait_cost_mem *per_rank, int cap, int *n) {
    plait_precision precision = plait_device_precision(cfg);
    collect col = {.precision = precision,
                   .device = dev,
                   .sp = plait_cost_config_sp(cfg),
                   .cp = (int)plait_config_int(cfg, "parallel", "cp"),
                   .cfg = cfg};
    plait_status st = rank_costs(cfg, 1, &col);
    int zero;
    double bucket, gw, pw;
    optim_of(cfg, 0, &zero, &bucket);
    plait_cost_wire(cfg, zero, &gw, &pw);
    *n = 0;
    plait_cost_job j = {.dp = (int)plait_config_int(cfg, "parallel", "dp"),
                        .tp = (int)plait_config_int(cfg, "parallel", "tp"),
                        .pp = (int)plait_config_int(cfg, "parallel", "pp"),
                        .cp = col.cp,
                        .zero = zero,
                        .bucket_bytes = bucket,
                        .precision = precision};
    plait_cost_offload_of(cfg, &j.offload, &j.offload_buffer, &j.offload_params);
    /* every world rank: a cp rank's memory is its cp rank 0 peer's */
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    if (st == PLAIT_OK) st = plait_mesh_shape(cfg, sizes, axes);
    int world = col.n * (col.cp > 1 ? col.cp : 1);
    for (int w = 0; st == PLAIT_OK && w < world && w < cap; w++) {
        int i = col.cp > 1 ? planned_index(w, sizes, axes) : w;
        col.ranks[i].grad_wire = gw;
        col.ranks[i].param_wire = pw;
        plait_cost_memory(&col.ranks[i], &j, c->process_bytes, &per_rank[w]);
        *n = w + 1;
    }
    free(col.ranks);
    return st;
}

void plait_cost_job_of(const plait_cost_layout *l, const plait_cost_ctx *x, double bucket_bytes, plait_cost_job *out) {
    *out = (plait_cost_job){.dp = l->dp,
                            .tp = l->tp,
                            .pp = l->pp,
                            .cp = plait_cost_layout_cp(l),
                            .ep = l->ep > 1 ? l->ep : 1,
                            .zero = plait_cost_zero_stage(l->optim),
                            .bucket_bytes = bucket_bytes,
                            .precision = x->precision,
                            .hierarchical = x->hierarchical,
                            .offload = x->offload,
                            .offload_buffer = x->offload_buffer,
                            .offload_params = x->offload_params,
                            .wire_bytes = x->precision == PLAIT_PRECISION_BF16 && strcmp(l->comm, "nccl") != 0 ? 2 : 0};
}

void plait_cost_finish(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                       double bucket_bytes, int block_size, plait_cost_result *out) {
    plait_cost_job j;
    plait_cost_job_of(l, x, bucket_bytes, &j);
    out->valid = 1;
    out->mem.total = 0;
    out->flops_per_step = 0;
    for (int s = 0; s < l->pp; s++) {
        plait_cost_mem m;
        plait_cost_memory(&stages[s], &j, x->cluster->process_bytes, &m);
        if (m.total > out->mem.total) {
            out->mem = m;
            out->mem_stage = s;
        }
        out->flops_per_step += stages[s].flops * l->dp * plait_cost_layout_cp(l) * l->tp;
    }
    plait_cost_step_time(stages, &j, x->cluster, &out->time);
    out->tokens_per_step = (double)x->global_batch * block_size;
    out->tokens_per_s = out->time.step > 0 ? out->tokens_per_step / out->time.step : 0;
    double limit = x->mem_limit > 0 ? x->mem_limit : plait_cost_mem_limit(x->cluster, plait_cost_layout_ranks(l));
    out->fits = !(limit > 0 && out->mem.total > limit);
    out->why[0] = 0;
    if (!out->fits)
        snprintf(out->why, sizeof out->why, "memory over the limit: %.1f MiB per rank predicted, %.1f MiB allowed",
                 out->mem.total / 1048576.0, limit / 1048576.0);
    /* offload = nvme: the node's ranks share offload_path's disk */
    int per_node = plait_cluster_ranks_per_node(x->cluster, plait_cost_layout_ranks(l));
    double disk = out->mem.disk * (per_node > 0 ? per_node : 1);
    if (out->fits && x->offload_disk_free > 0 && disk > x->offload_disk_free) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why,
                 "disk over the limit: %.1f MiB of offloaded optimizer state per node, %.1f MiB free in offload_path",
                 disk / 1048576.0, x->offload_disk_free / 1048576.0);
    }
    if (x->offload_params && j.zero != 3) { /* the optimizer refuses it (plugins/optim/README.md) */
        out->fits = 0;
        snprintf(out->why, sizeof out->why, "[optim] offload_params = true: only zero3 shards the parameters");
    }
}

/* A plan the preflight made, by the layout's settings it reads: every
 * one but the optimizer and its bucket, which the preflight never looks
 * at (they change only the job's memory and time, plait_cost_finish). */
typedef struct plan_entry {
    plait_cost_layout key;
    int valid;
    char why[512];
    plait_cost_rank *ranks;
    int n;
} plan_entry;

struct plait_cost_plans {
    plan_entry *e;
    size_t n, cap;
};

plait_cost_plans *plait_cost_plans_new(void) { return calloc(1, sizeof(plait_cost_plans)); }

void plait_cost_plans_free(plait_cost_plans *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) free(p->e[i].ranks);
    free(p->e);
    free(p);
}

static void plan_key(const plait_cost_layout *l, plait_cost_layout *key) {
    memset(key, 0, sizeof *key);
    key->dp = l->dp, key->tp = l->tp, key->pp = l->pp, key->chunks = l->chunks;
    key->micro_batch = l->micro_batch, key->recompute = l->recompute, key->sp = l->sp, key->cp = l->cp;
    key->ep = l->ep;
    memcpy(key->schedule, l->schedule, sizeof key->schedule);
    memcpy(key->comm, l->comm, sizeof key->comm);
}

static plan_entry *plan_find(plait_cost_plans *p, const plait_cost_layout *key) {
    for (size_t i = 0; p && i < p->n; i++)
        if (!memcmp(&p->e[i].key, key, sizeof *key)) return &p->e[i];
    return NULL;
}

/* Keeps a copy of the preflight's answer (ranks NULL: its refusal, why). */
static void plan_keep(plait_cost_plans *p, const plait_cost_layout *key, const plait_cost_rank *ranks, int n,
                      const char *why) {
    if (!p) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        plan_entry *e = realloc(p->e, cap * sizeof *e);
        if (!e) return; /* not kept: the next one plans again */
        p->e = e, p->cap = cap;
    }
    plan_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->key = *key;
    e->valid = ranks != NULL;
    snprintf(e->why, sizeof e->why, "%s", why ? why : "");
    if (ranks) {
        e->ranks = malloc((size_t)n * sizeof *ranks);
        if (!e->ranks) return;
        memcpy(e->ranks, ranks, (size_t)n * sizeof *ranks);
        e->n = n;
    }
    p->n++;
}

plait_status plait_cost_evaluate(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out) {
    return plait_cost_evaluate_with(l, x, NULL, out, NULL, 0);
}

plait_status plait_cost_evaluate_stages(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out,
                                        plait_cost_rank *stages, int cap) {
    return plait_cost_evaluate_with(l, x, NULL, out, stages, cap);
}

plait_status plait_cost_evaluate_with(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_plans *plans,
                                      plait_cost_result *out, plait_cost_rank *stages, int cap) {
    memset(out, 0, sizeof *out);
    out->layout = *l;
    char ov[16][96];
    char *ptr[16];
    int n = plait_cost_layout_overrides(l, x->global_batch, ov);
    for (int i = 0; i < n; i++) ptr[i] = ov[i];
    plait_config *cfg = NULL;
    collect col = {.precision = x->precision, .device = &x->device, .sp = l->sp, .cp = l->cp};
    plait_cost_layout key;
    plan_key(l, &key);
    const plan_entry *kept = NULL;
    plait_status st = x->load(x->load_ctx, n, ptr, &cfg);
    col.cfg = cfg;
    if (st == PLAIT_OK &&
        (plait_cost_ep_refuses(l, plait_config_int(cfg, "model", "moe_experts"), out->why, sizeof out->why) ||
         plait_cost_sp_refuses(l, plait_config_int(cfg, "model", "block_size"), out->why, sizeof out->why) ||
         plait_cost_cp_refuses(l, plait_config_int(cfg, "model", "block_size"),
                               strcmp(plait_config_str(cfg, "model", "arch"), "mlp") != 0, out->why,
                               sizeof out->why))) {
        plait_config_free(cfg);
        return PLAIT_OK;
    }
    if (st == PLAIT_OK && (kept = plan_find(plans, &key)) != NULL) {
        if (!kept->valid) {
            snprintf(out->why, sizeof out->why, "%s", kept->why);
            plait_config_free(cfg);
            return PLAIT_OK;
        }
        col.ranks = malloc((size_t)kept->n * sizeof *col.ranks);
        if (!col.ranks) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        else memcpy(col.ranks, kept->ranks, (size_t)kept->n * sizeof *col.ranks), col.n = kept->n;
    } else if (st == PLAIT_OK) {
        st = rank_costs(cfg, 0, &col);
        if (st == PLAIT_OK) plan_keep(plans, &key, col.ranks, col.n, NULL);
        else if (st != PLAIT_ERR_NO_MEMORY) plan_keep(plans, &key, NULL, 0, plait_last_error());
    }
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
    int zero;
    double bucket;
    optim_of(cfg, l->bucket_mb, &zero, &bucket);
    double gw, pw;
    plait_cost_wire(cfg, zero, &gw, &pw);
    for (int i = 0; i < col.n; i++) col.ranks[i].grad_wire = gw, col.ranks[i].param_wire = pw;
    plait_cost_finish(col.ranks, l, x, bucket, (int)plait_config_int(cfg, "model", "block_size"), out);
    out->confirmed = 1;
    for (int i = 0; stages && i < col.n && i < cap; i++) stages[i] = col.ranks[i];
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
