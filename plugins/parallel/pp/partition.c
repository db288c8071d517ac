/* Contiguous layer partitions parsed from text, and what bounds make. */
#include "partition.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/partition_util.h>

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
    if (k < 1)
        return plait_partition_error(PLAIT_ERR_INVALID_ARG, err, err_len, "%d chunks requested: need at least 1", k);
    if (!text || !*skip_space(text))
        return plait_partition_error(bad, err, err_len, "stages: empty: give %d layer ranges like 0-3,4-7", k);
    const char *s = text;
    int32_t count = 0;
    long prev_hi = -1;
    for (;;) {
        count++;
        const char *item = skip_space(s);
        long lo, hi;
        const char *q = parse_index(item, &lo);
        if (!q)
            return plait_partition_error(bad, err, err_len,
                                         "stages: range %d ('%.*s'): expected a layer index or a range a-b", count,
                                         (int)strcspn(item, ","), item);
        if (*q == '-') {
            q = parse_index(q + 1, &hi);
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
