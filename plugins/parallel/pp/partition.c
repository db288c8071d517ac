/* Contiguous layer partitions: balanced by cost, or parsed from text. */
#include "partition.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static plait_status fail(plait_status st, char *err, size_t err_len, const char *fmt, ...)
    PLAIT_PRINTF(4, 5);
static plait_status fail(plait_status st, char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- balanced ------------------------------------------------------------ */

/* Two passes over prefix sums S (S[i] = cost of layers [0, i)):
 *  1. best[c][i] = smallest possible max cost of layers [0, i) cut into c
 *     non-empty chunks. It is non-decreasing in i (costs are >= 0), and the
 *     last chunk's cost S[i]-S[j] falls with j, so the best cut j is where
 *     the two cross: found by binary search, O(k n log n).
 *  2. Among partitions whose every chunk costs <= the optimum (with a
 *     relative slack for rounding in the prefix sums), minimise the sum of
 *     squared chunk costs: O(k n w) with w the widest feasible window. */
plait_status pp_partition_balanced(const double *costs, int32_t n, int32_t k, int32_t *bounds,
                                   char *err, size_t err_len) {
    if (k < 1) return fail(PLAIT_ERR_INVALID_ARG, err, err_len, "%d chunks requested: need at least 1", k);
    if (n > PP_PARTITION_MAX_LAYERS)
        return fail(PLAIT_ERR_INVALID_ARG, err, err_len, "%d layers: at most %d can be partitioned", n,
                    PP_PARTITION_MAX_LAYERS);
    if (n < k)
        return fail(PLAIT_ERR_INVALID_ARG, err, err_len,
                    "%d layers cannot fill %d pipeline chunks (each needs at least one layer)", n, k);
    int all_zero = 1;
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(costs[i]) || costs[i] < 0)
            return fail(PLAIT_ERR_INVALID_ARG, err, err_len,
                        "layer %d has cost %g: costs must be finite and >= 0", i, costs[i]);
        if (costs[i] > 0) all_zero = 0;
    }
    size_t rows = (size_t)k + 1, cols = (size_t)n + 1;
    double *S = malloc(cols * sizeof *S);
    double *best = malloc(rows * cols * sizeof *best);
    double *sq = malloc(rows * cols * sizeof *sq);
    int32_t *cut = malloc(rows * cols * sizeof *cut);
    if (!S || !best || !sq || !cut) {
        free(S), free(best), free(sq), free(cut);
        return fail(PLAIT_ERR_NO_MEMORY, err, err_len, "out of memory partitioning %d layers", n);
    }
    S[0] = 0;
    for (int32_t i = 0; i < n; i++) S[i + 1] = S[i] + (all_zero ? 1.0 : costs[i]);
#define AT(a, c, i) (a)[(size_t)(c) * cols + (size_t)(i)]
    /* Pass 1: the optimal maximum. */
    for (int32_t i = 1; i <= n; i++) AT(best, 1, i) = S[i];
    for (int32_t c = 2; c <= k; c++) {
        for (int32_t i = c; i <= n - (k - c); i++) {
            /* j in [c-1, i-1]: find the first j with best[c-1][j] >= S[i]-S[j]. */
            int32_t lo = c - 1, hi = i - 1;
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (AT(best, c - 1, mid) >= S[i] - S[mid]) hi = mid;
                else lo = mid + 1;
            }
            double v = fmax(AT(best, c - 1, lo), S[i] - S[lo]);
            if (lo > c - 1) v = fmin(v, fmax(AT(best, c - 1, lo - 1), S[i] - S[lo - 1]));
            AT(best, c, i) = v;
        }
    }
    double limit = AT(best, k, n);
    limit += limit * 1e-12 + 1e-300;
    /* Pass 2: most even partition within the limit. */
    for (int32_t i = 1; i <= n; i++) {
        double x = S[i];
        AT(sq, 1, i) = x <= limit ? x * x : INFINITY;
        AT(cut, 1, i) = 0;
    }
    for (int32_t c = 2; c <= k; c++) {
        for (int32_t i = c; i <= n - (k - c); i++) {
            double bv = INFINITY;
            int32_t bj = -1;
            for (int32_t j = i - 1; j >= c - 1; j--) {
                double x = S[i] - S[j];
                if (x > limit) break; /* earlier cuts only make the chunk dearer */
                double v = AT(sq, c - 1, j) + x * x;
                /* a tie (to rounding) takes the earlier cut: chunk c the
                 * longer, the earlier chunks the lighter */
                if (v <= bv + bv * 1e-12) bv = fmin(bv, v), bj = j;
            }
            AT(sq, c, i) = bv;
            AT(cut, c, i) = bj;
        }
    }
    plait_status st = PLAIT_OK;
    if (!isfinite(AT(sq, k, n))) {
        st = fail(PLAIT_ERR_INTERNAL, err, err_len, "layer partition: no partition within the optimum %g", limit);
    } else {
        bounds[k] = n;
        for (int32_t c = k, i = n; c >= 1; c--) {
            i = AT(cut, c, i);
            bounds[c - 1] = i;
        }
    }
#undef AT
    free(S), free(best), free(sq), free(cut);
    return st;
}

double pp_partition_max_cost(const double *costs, int32_t k, const int32_t *bounds) {
    double worst = 0;
    for (int32_t c = 0; c < k; c++) {
        double sum = 0;
        for (int32_t i = bounds[c]; i < bounds[c + 1]; i++) sum += costs[i];
        if (sum > worst) worst = sum;
    }
    return worst;
}

void pp_partition_assign(const int32_t *bounds, int32_t p, int32_t v, int32_t *layer_stage,
                         int32_t *layer_chunk) {
    for (int32_t k = 0; k < p * v; k++)
        for (int32_t i = bounds[k]; i < bounds[k + 1]; i++) {
            layer_stage[i] = k % p;
            layer_chunk[i] = k / p;
        }
}

size_t pp_partition_format(const int32_t *bounds, int32_t k, char *buf, size_t len) {
    size_t need = 0, used = 0; /* used: bytes written, whole items only */
    int full = 0;
    if (buf && len) buf[0] = '\0';
    for (int32_t c = 0; c < k; c++) {
        char item[40];
        int lo = bounds[c], hi = bounds[c + 1] - 1;
        int w = lo == hi ? snprintf(item, sizeof item, "%s%d", c ? "," : "", lo)
                         : snprintf(item, sizeof item, "%s%d-%d", c ? "," : "", lo, hi);
        need += (size_t)w;
        if (!buf || full) continue;
        if (used + (size_t)w < len) {
            memcpy(buf + used, item, (size_t)w + 1);
            used += (size_t)w;
        } else {
            full = 1;
        }
    }
    return need;
}

/* ---- explicit ------------------------------------------------------------ */

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* Parse a non-negative decimal integer; NULL if there is none. */
static const char *parse_index(const char *s, long *out) {
    s = skip_space(s);
    if (!isdigit((unsigned char)*s)) return NULL;
    errno = 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (errno == ERANGE || x > INT32_MAX) x = INT32_MAX;
    *out = x;
    return skip_space(end);
}

plait_status pp_partition_parse(const char *text, int32_t n_layers, int32_t k, int32_t *bounds,
                                char *err, size_t err_len) {
    const plait_status bad = PLAIT_ERR_INVALID_CONFIG;
    if (k < 1) return fail(PLAIT_ERR_INVALID_ARG, err, err_len, "%d chunks requested: need at least 1", k);
    if (!text || !*skip_space(text))
        return fail(bad, err, err_len, "stages: empty: give %d layer ranges like 0-3,4-7", k);
    const char *s = text;
    int32_t count = 0;
    long prev_hi = -1;
    for (;;) {
        count++;
        const char *item = skip_space(s);
        long lo, hi;
        const char *q = parse_index(item, &lo);
        if (!q)
            return fail(bad, err, err_len,
                        "stages: range %d ('%.*s'): expected a layer index or a range a-b", count,
                        (int)strcspn(item, ","), item);
        if (*q == '-') {
            q = parse_index(q + 1, &hi);
            if (!q)
                return fail(bad, err, err_len, "stages: range %d ('%.*s'): expected a layer index after '-'",
                            count, (int)strcspn(item, ","), item);
        } else {
            hi = lo;
        }
        if (*q != ',' && *q != '\0')
            return fail(bad, err, err_len, "stages: range %d ('%.*s'): unexpected '%c'", count,
                        (int)strcspn(item, ","), item, *q);
        int item_len = (int)(q - item);
        while (item_len > 0 && (item[item_len - 1] == ' ' || item[item_len - 1] == '\t')) item_len--;
        if (hi < lo)
            return fail(bad, err, err_len,
                        "stages: range %d ('%.*s') is empty: it ends before it starts", count, item_len, item);
        if (hi >= n_layers)
            return fail(bad, err, err_len,
                        "stages: range %d ('%.*s') goes past the last layer %d (layers are 0 = embedding "
                        "... %d = head)", count, item_len, item, n_layers - 1, n_layers - 1);
        if (lo <= prev_hi)
            return fail(bad, err, err_len,
                        "stages: range %d ('%.*s') starts at layer %ld, which range %d already holds "
                        "(ranges overlap or are out of model order)", count, item_len, item, lo, count - 1);
        if (lo > prev_hi + 1) {
            if (prev_hi < 0)
                return fail(bad, err, err_len,
                            "stages: the first range must start at layer 0 (the embedding), not %ld", lo);
            char missing[48];
            if (lo == prev_hi + 2) snprintf(missing, sizeof missing, "layer %ld is", prev_hi + 1);
            else snprintf(missing, sizeof missing, "layers %ld-%ld are", prev_hi + 1, lo - 1);
            return fail(bad, err, err_len,
                        "stages: gap: %s in no stage (range %d ends at %ld, range %d starts at %ld)", missing,
                        count - 1, prev_hi, count, lo);
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
        return fail(bad, err, err_len,
                    "stages: %d range%s given, need pp x virtual_stages = %d (one per model chunk, in "
                    "model order)", count, count == 1 ? "" : "s", k);
    if (prev_hi != n_layers - 1) {
        char missing[48];
        if (prev_hi + 1 == n_layers - 1) snprintf(missing, sizeof missing, "layer %d is", n_layers - 1);
        else snprintf(missing, sizeof missing, "layers %ld-%d are", prev_hi + 1, n_layers - 1);
        return fail(bad, err, err_len,
                    "stages: %s in no stage: the last range must end at layer %d (the head)", missing,
                    n_layers - 1);
    }
    return PLAIT_OK;
}
