/*
 * plait SDK — the balanced partition of a model's layers into pipeline
 * chunks (ABI 1.32): the rule plait's pp plugin cuts the layers by, and by
 * which `plait plan` predicts each stage's work, so that a plan and the run
 * it describes hold the same layers on each stage. A third-party pipeline
 * plugin that uses it is planned as it runs. Since 1.33 also the text of
 * a partition, the ranges `[parallel.pp] stages` takes: its parser
 * (plait_partition_parse, plait_partition_ranges), by which the pp plugin
 * takes an explicit partition and `plait plan` predicts it, and its
 * writer (plait_partition_format), whose text the plugin logs and `plait
 * plan --explain` prints for each stage.
 *
 * Header-only: it calls nothing of the core (malloc and free only), so a
 * plugin using it loads in any core of ABI major 1. Reentrant and
 * thread-safe: no globals, no locks. Messages are written into the caller's
 * buffer (err, err_len bytes; may be NULL), truncated to its capacity and
 * always terminated.
 */
#ifndef PLAIT_PARTITION_UTIL_H
#define PLAIT_PARTITION_UTIL_H

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most layers plait_partition_balanced accepts. */
#define PLAIT_PARTITION_MAX_LAYERS 65536

/* Writes the message (printf's format) into err (err_len bytes; nothing
 * where err is NULL or err_len 0), truncated and terminated, and returns
 * st: how the partition's functions, and a plugin's own about its
 * partition, say what is wrong. */
static inline plait_status plait_partition_error(plait_status st, char *err, size_t err_len, const char *fmt, ...)
    PLAIT_PRINTF(4, 5);
static inline plait_status plait_partition_error(plait_status st, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Cuts `n` layers of costs[0..n) (e.g. plait_layer.flops_per_token) into
 * k contiguous, non-empty chunks: chunk c holds layers
 * [bounds[c], bounds[c+1]), bounds[0] = 0 and bounds[k] = n (k + 1 bounds
 * written into the caller's array). The largest chunk cost is the least
 * any cut reaches; among the cuts reaching it, the one with the least sum
 * of squared chunk costs (the most even), a tie (to rounding) taking the
 * earlier cut: the earlier chunks the lighter, since the first stages keep
 * the most micro-batches in flight under 1F1B and the interleaved
 * schedules, so a block too many costs them the most memory. Costs must be
 * finite and >= 0; where all are 0 every layer counts 1.
 *
 * Two passes over the prefix sums S (S[i] = cost of layers [0, i)):
 *  1. best[c][i], the least largest chunk of layers [0, i) in c chunks. It
 *     does not fall with i (costs are >= 0) and the last chunk's cost
 *     S[i] - S[j] falls with j, so the best cut j is where the two cross:
 *     a binary search, O(k n log n).
 *  2. Among the cuts whose every chunk costs at most that optimum (with a
 *     relative slack for the prefix sums' rounding), the least sum of
 *     squares: O(k n w), w the widest window of layers within it.
 * Temporary memory O(n k), freed before it returns.
 * Errors: PLAIT_ERR_INVALID_ARG (k < 1, n < k, n over
 * PLAIT_PARTITION_MAX_LAYERS, a negative or non-finite cost),
 * PLAIT_ERR_NO_MEMORY; bounds are then unspecified. */
static inline plait_status plait_partition_balanced(const double *costs, int32_t n, int32_t k, int32_t *bounds,
                                                    char *err, size_t err_len) {
    if (k < 1)
        return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len, "%d chunks requested: need at least 1", k);
    if (n > PLAIT_PARTITION_MAX_LAYERS)
        return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len, "%d layers: at most %d can be partitioned", n,
                                     PLAIT_PARTITION_MAX_LAYERS);
    if (n < k)
        return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len,
                                     "%d layers cannot fill %d pipeline chunks (each needs at least one layer)", n, k);
    int all_zero = 1;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(costs[i]) || costs[i] < 0)
            return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len,
                                         "layer %d has cost %g: costs must be finite and >= 0", i, costs[i]);
        if (costs[i] > 0) all_zero = 0;
    }
    const size_t rows = (size_t)k + 1, cols = (size_t)n + 1;
    double *S = (double *)malloc(cols * sizeof *S);
    double *best = (double *)malloc(rows * cols * sizeof *best);
    double *sq = (double *)malloc(rows * cols * sizeof *sq);
    int32_t *cut = (int32_t *)malloc(rows * cols * sizeof *cut);
    if (!S || !best || !sq || !cut) {
        free(S), free(best), free(sq), free(cut);
        return plait_partition_error(PLAIT_ERR_NO_MEMORY, err, err_len, "out of memory partitioning %d layers", n);
    }
    S[0] = 0;
    for (int32_t i = 0; i < n; i++) S[i + 1] = S[i] + (all_zero ? 1.0 : costs[i]);
#define PLAIT_PARTITION_AT_(a, c, i) (a)[(size_t)(c)*cols + (size_t)(i)]
    /* pass 1: the least largest chunk */
    for (int32_t i = 1; i <= n; i++) PLAIT_PARTITION_AT_(best, 1, i) = S[i];
    for (int32_t c = 2; c <= k; c++)
        for (int32_t i = c; i <= n - (k - c); i++) {
            /* j in [c-1, i-1]: the first j with best[c-1][j] >= S[i] - S[j] */
            int32_t lo = c - 1, hi = i - 1;
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (PLAIT_PARTITION_AT_(best, c - 1, mid) >= S[i] - S[mid]) hi = mid;
                else lo = mid + 1;
            }
            double v = fmax(PLAIT_PARTITION_AT_(best, c - 1, lo), S[i] - S[lo]);
            if (lo > c - 1) v = fmin(v, fmax(PLAIT_PARTITION_AT_(best, c - 1, lo - 1), S[i] - S[lo - 1]));
            PLAIT_PARTITION_AT_(best, c, i) = v;
        }
    double limit = PLAIT_PARTITION_AT_(best, k, n);
    limit += limit * 1e-12 + 1e-300;
    /* pass 2: the most even cut within that */
    for (int32_t i = 1; i <= n; i++) {
        double x = S[i];
        PLAIT_PARTITION_AT_(sq, 1, i) = x <= limit ? x * x : INFINITY;
        PLAIT_PARTITION_AT_(cut, 1, i) = 0;
    }
    for (int32_t c = 2; c <= k; c++)
        for (int32_t i = c; i <= n - (k - c); i++) {
            double bv = INFINITY;
            int32_t bj = -1;
            for (int32_t j = i - 1; j >= c - 1; j--) {
                double x = S[i] - S[j];
                if (x > limit) break; /* earlier cuts only make the chunk dearer */
                double v = PLAIT_PARTITION_AT_(sq, c - 1, j) + x * x;
                /* a tie (to rounding) takes the earlier cut: chunk c the
                 * longer, the earlier chunks the lighter */
                if (v <= bv + bv * 1e-12) bv = fmin(bv, v), bj = j;
            }
            PLAIT_PARTITION_AT_(sq, c, i) = bv;
            PLAIT_PARTITION_AT_(cut, c, i) = bj;
        }
    plait_status st = PLAIT_OK;
    if (!isfinite(PLAIT_PARTITION_AT_(sq, k, n))) {
        st = plait_partition_error(PLAIT_ERR_INTERNAL, err, err_len,
                                   "layer partition: no partition within the optimum %g", limit);
    } else {
        bounds[k] = n;
        for (int32_t c = k, i = n; c >= 1; c--) bounds[c - 1] = i = PLAIT_PARTITION_AT_(cut, c, i);
    }
#undef PLAIT_PARTITION_AT_
    free(S), free(best), free(sq), free(cut);
    return st;
}

/* helpers of plait_partition_parse */
static inline const char *plait_partition_skip_(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}
/* a non-negative decimal integer (INT32_MAX where larger); NULL if none */
static inline const char *plait_partition_index_(const char *s, long *out) {
    s = plait_partition_skip_(s);
    if (!isdigit((unsigned char)*s)) return NULL;
    errno = 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (errno == ERANGE || x > INT32_MAX) x = INT32_MAX;
    *out = x;
    return plait_partition_skip_(end);
}

/* The ranges an explicit partition's text gives: its comma-separated
 * items, 0 for an empty or blank text (NULL too). Counts only; whether
 * they make a partition is plait_partition_parse's to say. */
static inline int32_t plait_partition_ranges(const char *text) {
    if (!text || !*plait_partition_skip_(text)) return 0;
    int32_t n = 1;
    for (const char *s = text; *s; s++) n += *s == ',';
    return n;
}

/* Parses an explicit partition, the text `[parallel.pp] stages` takes:
 * "0-3,4-7" (also "5" for a one-layer chunk; spaces and tabs allowed),
 * exactly k ranges of layer indices in model order covering layers
 * 0 .. n_layers - 1 with no gap and no overlap, into k + 1 bounds as
 * plait_partition_balanced writes them. Errors: PLAIT_ERR_INVALID_ARG
 * (k < 1), else PLAIT_ERR_INVALID_CONFIG with a message naming the range
 * and what is wrong (syntax, a reversed range, past the last layer, a gap,
 * an overlap or ranges out of order, the wrong count, a first range not
 * starting at 0 or a last not ending at n_layers - 1), beginning
 * "stages: "; bounds are then unspecified. */
static inline plait_status plait_partition_parse(const char *text, int32_t n_layers, int32_t k, int32_t *bounds,
                                                 char *err, size_t err_len) {
    const plait_status bad = PLAIT_ERR_INVALID_CONFIG;
    if (k < 1)
        return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len, "%d chunks requested: need at least 1", k);
    if (!text || !*plait_partition_skip_(text))
        return plait_partition_error(bad, err, err_len, "stages: empty: give %d layer ranges like 0-3,4-7", k);
    const char *s = text;
    int32_t count = 0;
    long prev_hi = -1;
    for (;;) {
        count++;
        const char *item = plait_partition_skip_(s);
        long lo, hi;
        const char *q = plait_partition_index_(item, &lo);
        if (!q)
            return plait_partition_error(bad, err, err_len,
                                         "stages: range %d ('%.*s'): expected a layer index or a range a-b", count,
                                         (int)strcspn(item, ","), item);
        if (*q == '-') {
            q = plait_partition_index_(q + 1, &hi);
            if (!q)
                return plait_partition_error(bad, err, err_len,
                                             "stages: range %d ('%.*s'): expected a layer index after '-'", count,
                                             (int)strcspn(item, ","), item);
        } else {
            hi = lo;
        }
        if (*q != ',' && *q != '\0')
            return plait_partition_error(bad, err, err_len, "stages: range %d ('%.*s'): unexpected '%c'", count,
                                         (int)strcspn(item, ","), item, *q);
        int item_len = (int)(q - item);
        while (item_len > 0 && (item[item_len - 1] == ' ' || item[item_len - 1] == '\t')) item_len--;
        if (hi < lo)
            return plait_partition_error(bad, err, err_len,
                                         "stages: range %d ('%.*s') is empty: it ends before it starts", count,
                                         item_len, item);
        if (hi >= n_layers)
            return plait_partition_error(
                bad, err, err_len,
                "stages: range %d ('%.*s') goes past the last layer %d (layers are 0 = embedding "
                "... %d = head)",
                count, item_len, item, n_layers - 1, n_layers - 1);
        if (lo <= prev_hi)
            return plait_partition_error(bad, err, err_len,
                                         "stages: range %d ('%.*s') starts at layer %ld, which range %d already holds "
                                         "(ranges overlap or are out of model order)",
                                         count, item_len, item, lo, count - 1);
        if (lo > prev_hi + 1) {
            if (prev_hi < 0)
                return plait_partition_error(bad, err, err_len,
                                             "stages: the first range must start at layer 0 (the embedding), not %ld",
                                             lo);
            char missing[48];
            if (lo == prev_hi + 2) snprintf(missing, sizeof missing, "layer %ld is", prev_hi + 1);
            else snprintf(missing, sizeof missing, "layers %ld-%ld are", prev_hi + 1, lo - 1);
            return plait_partition_error(bad, err, err_len,
                                         "stages: gap: %s in no stage (range %d ends at %ld, range %d starts at %ld)",
                                         missing, count - 1, prev_hi, count, lo);
        }
        if (count <= k) {
            bounds[count - 1] = (int32_t)lo;
            bounds[count] = (int32_t)hi + 1;
        }
        prev_hi = hi;
        if (*q == '\0') break;
        s = q + 1;
    }
    if (count != k)
        return plait_partition_error(bad, err, err_len,
                                     "stages: %d range%s given, need pp x virtual_stages = %d (one per model chunk, in "
                                     "model order)",
                                     count, count == 1 ? "" : "s", k);
    if (prev_hi != n_layers - 1) {
        char missing[48];
        if (prev_hi + 1 == n_layers - 1) snprintf(missing, sizeof missing, "layer %d is", n_layers - 1);
        else snprintf(missing, sizeof missing, "layers %ld-%d are", prev_hi + 1, n_layers - 1);
        return plait_partition_error(bad, err, err_len,
                                     "stages: %s in no stage: the last range must end at layer %d (the head)", missing,
                                     n_layers - 1);
    }
    return PLAIT_OK;
}

/* Writes chunks first, first + stride, first + 2 stride, ... (< k) of a
 * partition of k chunks (k + 1 bounds, as plait_partition_balanced makes
 * them) as text: each chunk's layers as "lo-hi", or "lo" for one layer,
 * separated by commas. All k chunks (first 0, stride 1) are the value
 * `[parallel.pp] stages` takes; the chunks of pipeline stage s of p
 * (first s, stride p) are the layers that stage holds. Writes whole items
 * only, as many as fit in len bytes (buf may be NULL or len 0: nothing is
 * written), always terminated; returns the length the whole text needs,
 * as snprintf does, so a result >= len says it was cut short. A stride
 * below 1 counts as 1. */
static inline size_t plait_partition_format(const int32_t *bounds, int32_t k, int32_t first, int32_t stride, char *buf,
                                            size_t len) {
    size_t need = 0, used = 0; /* used: bytes written, whole items only */
    int full = 0;
    if (buf && len) buf[0] = '\0';
    if (stride < 1) stride = 1;
    for (int32_t c = first < 0 ? 0 : first; c < k; c += stride) {
        char item[32];
        int lo = bounds[c], hi = bounds[c + 1] - 1;
        int w = lo == hi ? snprintf(item, sizeof item, "%s%d", need ? "," : "", lo)
                         : snprintf(item, sizeof item, "%s%d-%d", need ? "," : "", lo, hi);
        need += (size_t)w;
        if (!buf || !len || full) continue;
        if (used + (size_t)w < len) {
            memcpy(buf + used, item, (size_t)w + 1);
            used += (size_t)w;
        } else {
            full = 1;
        }
    }
    return need;
}

#ifdef __cplusplus
}
#endif

#endif
