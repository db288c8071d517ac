/* Layouts as values: the axes and their values, enumerating the candidates,
 * a layout's name and the overrides that set it, and what a layout cannot
 * be (layout_eval.c evaluates one). */
#include "cost/layouts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "runtime/error.h"

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
        if (!vary) {
            num[n++] = x->base.chunks;
            break;
        }
        /* in increasing order: 2, 4, 8 and the divisors of a stage's blocks */
        for (int v = 2; v <= PLAIT_COST_MAX_CHUNKS; v++) {
            int pow2 = v <= 8 && (v & (v - 1)) == 0;
            int whole = pp > 0 && x->layers > 0 && x->layers % pp == 0 && (x->layers / pp) % v == 0;
            if (pow2 || whole) num[n++] = v;
        }
        break;
    case PLAIT_AXIS_N_RECOMPUTE:
        if (!vary) {
            text[n++] = recompute_names[x->base.recompute];
        } else {
            for (int i = 0; recompute_names[i]; i++)
                if (!x->recompute_offload || i == 2) text[n++] = recompute_names[i];
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

/* The layout of dp, tp, pp, cp and ep (sizes) at the other axes' value
 * indices i (a schedule and an optimizer of the enumeration's choosing). */
static void layout_at(const int sizes[5], const char *sched, int interleaved, const char *opt,
                      int64_t v[][PLAIT_COST_MAX_VALUES], const char *t[][PLAIT_COST_MAX_VALUES], const int *i,
                      plait_cost_layout *l) {
    memset(l, 0, sizeof *l);
    l->dp = sizes[0], l->tp = sizes[1], l->pp = sizes[2], l->cp = sizes[3], l->ep = sizes[4];
    copy_name(l->schedule, sizeof l->schedule, sched ? sched : "");
    l->chunks = interleaved ? (int)v[PLAIT_AXIS_N_CHUNKS][i[PLAIT_AXIS_N_CHUNKS]] : 1;
    if (interleaved && l->chunks < 2) l->chunks = 2;
    copy_name(l->optim, sizeof l->optim, opt);
    l->micro_batch = v[PLAIT_AXIS_N_MICRO_BATCH][i[PLAIT_AXIS_N_MICRO_BATCH]];
    const char *rc = t[PLAIT_AXIS_N_RECOMPUTE][i[PLAIT_AXIS_N_RECOMPUTE]];
    l->recompute = rc && recompute_of(rc) >= 0 ? recompute_of(rc) : 0;
    l->bucket_mb = l->dp > 1 ? (int)v[PLAIT_AXIS_N_BUCKET_MB][i[PLAIT_AXIS_N_BUCKET_MB]] : 0;
    const char *comm = t[PLAIT_AXIS_N_COMM][i[PLAIT_AXIS_N_COMM]];
    copy_name(l->comm, sizeof l->comm, comm ? comm : "tcp");
    l->sp = l->tp > 1 && v[PLAIT_AXIS_N_SP][i[PLAIT_AXIS_N_SP]] > 0;
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
                        const char *sched = pp > 1 ? t[PLAIT_AXIS_N_SCHEDULE][i[PLAIT_AXIS_N_SCHEDULE]] : "";
                        int interleaved = sched && strcmp(sched, "interleaved") == 0;
                        const char *opt = t[PLAIT_AXIS_N_OPTIM][i[PLAIT_AXIS_N_OPTIM]];
                        if (!opt) opt = "adam";
                        /* chunks other than the first only differ for interleaved;
                         * ZeRO with one replica is plain Adam (but for ZeRO-3
                         * offloading its parameters): skip the repeats */
                        int repeat = (!interleaved && i[PLAIT_AXIS_N_CHUNKS] > 0) ||
                                     (dp == 1 && strcmp(opt, "adam") != 0 && ((x->vary >> PLAIT_AXIS_N_OPTIM) & 1u) &&
                                      !(x->offload_params && strcmp(opt, "zero3") == 0));
                        if (!repeat) {
                            /* counting alone (out NULL), no layout is written */
                            if (count < cap) {
                                const int sizes[5] = {dp, tp, pp, cp, ep};
                                layout_at(sizes, sched, interleaved, opt, v, t, i, &out[count]);
                            }
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
    long long given_v = 0; /* a "vN" word's N */
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
        else if (number_after(w, "v", &v)) out->chunks = (int)v, given_v = v;
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
    /* a chunk count the layout cannot run is refused, as train refuses
     * it, never explained as another layout */
    if (given_v > 1 && out->pp <= 1)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "layout '%s': v%lld (model chunks a pipeline stage) needs a pipeline: pp 2 or more, "
                               "not pp %d",
                               text, given_v, out->pp);
    if (given_v > 1 && out->pp > 1 && strcmp(out->schedule, "interleaved") != 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "layout '%s': v%lld (model chunks a stage) is weighed for the interleaved schedule, "
                               "and %s runs one chunk a stage here (write interleaved v%lld, or leave v%lld out)",
                               text, given_v, out->schedule[0] ? out->schedule : "1f1b", given_v, given_v);
    if (given_v == 1 && out->pp > 1 && strcmp(out->schedule, "interleaved") == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "layout '%s': interleaved runs 2 or more model chunks a stage, not v1 (write v2 or "
                               "more, or 1f1b)",
                               text);
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
    else return NULL; /* tp too: each expert's width over tp inside its ep holder */
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

int plait_cost_config_residual_bf16(const plait_config *cfg) {
    return strcmp(plait_config_str(cfg, "run", "residual"), "bf16") == 0;
}

int plait_cost_config_recompute_offload(const plait_config *cfg) {
    return strcmp(plait_config_str(cfg, "model", "recompute_offload"), "host") == 0;
}
