/* Training batches a run never reads (batch_skip.h). */
#include "train/batch_skip.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

static int by_lo(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* One item, "N" or "A-B", into lo..hi; 0, or -1 when it is neither. */
static int parse_item(const char *p, size_t len, int64_t *lo, int64_t *hi) {
    char word[48], *end = NULL;
    if (len == 0 || len >= sizeof word) return -1;
    memcpy(word, p, len);
    word[len] = '\0';
    errno = 0;
    long long a = strtoll(word, &end, 10), b = a;
    if (end == word || errno) return -1;
    if (*end == '-') {
        const char *second = end + 1;
        b = strtoll(second, &end, 10);
        if (end == second || errno) return -1;
    }
    if (*end || a < 1 || b < a || b > (1ll << 50)) return -1;
    *lo = a;
    *hi = b;
    return 0;
}

plait_status plait_batch_skip_parse(const plait_config *cfg, plait_batch_skip *out) {
    out->n = 0;
    const char *value = plait_config_str(cfg, "data", "skip_batches");
    if (!value || !*value) return PLAIT_OK;
    const char *where = "config";
    plait_config_origin(cfg, "data", "skip_batches", &where);
    int64_t pairs[PLAIT_SKIP_MAX][2];
    int n = 0;
    for (const char *p = value; *p;) {
        p += strspn(p, ", \t\n");
        if (!*p) break;
        size_t len = strcspn(p, ", \t\n");
        if (n == PLAIT_SKIP_MAX)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] skip_batches lists more than %d ranges; merge them (A-B covers every "
                                   "step from A to B)",
                                   where, PLAIT_SKIP_MAX);
        if (parse_item(p, len, &pairs[n][0], &pairs[n][1]) != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] skip_batches = %s: '%.*s' is not a step N or a range A-B of steps "
                                   "from 1 (A <= B), as metrics.csv numbers them (e.g. 1200-1350, 1500)",
                                   where, value, (int)len, p);
        n++;
        p += len;
    }
    qsort(pairs, (size_t)n, sizeof pairs[0], by_lo);
    for (int i = 0; i < n; i++) {
        if (out->n > 0 && pairs[i][0] <= out->hi[out->n - 1] + 1) {
            if (pairs[i][1] > out->hi[out->n - 1]) out->hi[out->n - 1] = pairs[i][1];
            continue;
        }
        out->lo[out->n] = pairs[i][0];
        out->hi[out->n] = pairs[i][1];
        out->n++;
    }
    return PLAIT_OK;
}

int64_t plait_batch_skip_map(const plait_batch_skip *k, int64_t step) {
    int64_t b = step + 1; /* as metrics.csv numbers it */
    for (int i = 0; k && i < k->n; i++)
        if (b >= k->lo[i]) b += k->hi[i] - k->lo[i] + 1;
    return b - 1;
}

int64_t plait_batch_skip_count(const plait_batch_skip *k) {
    int64_t c = 0;
    for (int i = 0; i < k->n; i++) c += k->hi[i] - k->lo[i] + 1;
    return c;
}
