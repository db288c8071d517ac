/*
 * `plait trace compare MEASURED PREDICTED` (trace_compare.h): both traces
 * split as the summary splits them (trace_summary.h), per traced step,
 * and their differences sorted by size.
 */
#include "cli/trace_compare.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/trace_summary.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

/* The index of `rank`'s row in rows[0..n) (ascending ranks, as the split
 * reads them), or -1. */
static int index_of(const plait_trace_split *rows, int n, int rank) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (rows[mid].rank < rank) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && rows[lo].rank == rank ? lo : -1;
}

/* The pipeline stage of each row of `rows` (the predicted trace's), from
 * its plait_rank events ("stage"); -1 where it says none. */
static void read_stages(const char *path, const plait_trace_split *rows, int n, int *stage) {
    for (int i = 0; i < n; i++) stage[i] = -1;
    FILE *f;
    if (plait_fopen_regular(path, "trace", PLAIT_ERR_INVALID_ARG, &f) != PLAIT_OK) {
        plait_clear_error(); /* the split read it already: only the stages are lost */
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"name\":\"plait_rank\"");
        const char *r = p ? strstr(p, "\"rank\":") : NULL, *s = p ? strstr(p, "\"stage\":") : NULL;
        if (!r || !s) continue;
        long rank = strtol(r + 7, NULL, 10), st = strtol(s + 8, NULL, 10);
        int i = rank >= 0 && rank < INT_MAX ? index_of(rows, n, (int)rank) : -1;
        if (i >= 0) stage[i] = st >= 0 && st < INT_MAX ? (int)st : -1;
    }
    fclose(f);
}

typedef struct diff {
    int rank, part;
    double measured, predicted;
} diff;

static int by_size(const void *a, const void *b) {
    const diff *x = a, *y = b;
    double dx = fabs(x->measured - x->predicted), dy = fabs(y->measured - y->predicted);
    return dx < dy ? 1 : dx > dy ? -1 : (x->rank != y->rank ? x->rank - y->rank : x->part - y->part);
}

static const plait_trace_split *row_of(const plait_trace_split *rows, int n, int rank) {
    int i = index_of(rows, n, rank);
    return i >= 0 ? &rows[i] : NULL;
}

/* The differences of the ranks in both (each part of each rank), and of
 * the parts' means over those ranks (rank -1). */
static int collect(const plait_trace_split *m, int nm, const plait_trace_split *p, int np, diff *d, int *shared) {
    int n = 0;
    double mean_m[PLAIT_TRACE_PARTS] = {0}, mean_p[PLAIT_TRACE_PARTS] = {0};
    *shared = 0;
    for (int i = 0; i < nm; i++) {
        const plait_trace_split *q = row_of(p, np, m[i].rank);
        if (!q) continue;
        (*shared)++;
        for (int k = 0; k < PLAIT_TRACE_PARTS; k++) {
            d[n++] = (diff){m[i].rank, k, m[i].ms[k], q->ms[k]};
            mean_m[k] += m[i].ms[k];
            mean_p[k] += q->ms[k];
        }
    }
    for (int k = 0; *shared && k < PLAIT_TRACE_PARTS; k++)
        d[n++] = (diff){-1, k, mean_m[k] / *shared, mean_p[k] / *shared};
    return n;
}

/* The parts' means over the ranks (means = 1), or the ranks' own rows, the
 * first `top` of them. */
static void print_rows(FILE *out, const diff *d, int n, int means, int top, const plait_trace_split *p, int np,
                       const int *stage) {
    fprintf(out, "\n%s\n%-6s %5s  %-8s %11s %11s %11s %8s\n",
            means ? "each part, mean over the ranks:" : "each rank's parts, largest differences first:", "rank",
            "stage", "part", "measured", "predicted", "difference", "ratio");
    for (int i = 0, shown = 0; i < n && shown < top; i++) {
        if ((d[i].rank < 0) != means) continue;
        shown++;
        char who[16] = "all", st_text[8] = "-", ratio[16] = "-";
        if (d[i].rank >= 0) snprintf(who, sizeof who, "%d", d[i].rank);
        int row = d[i].rank >= 0 ? index_of(p, np, d[i].rank) : -1;
        if (row >= 0 && stage[row] >= 0) snprintf(st_text, sizeof st_text, "%d", stage[row]);
        if (d[i].predicted > 1e-6) snprintf(ratio, sizeof ratio, "%.2fx", d[i].measured / d[i].predicted);
        fprintf(out, "%-6s %5s  %-8s %11.3f %11.3f %+11.3f %8s\n", who, st_text, plait_trace_part_names[d[i].part],
                d[i].measured, d[i].predicted, d[i].measured - d[i].predicted, ratio);
    }
}

plait_status plait_trace_compare(const char *measured, const char *predicted, int top, FILE *out) {
    plait_trace_split *m = NULL, *p = NULL;
    int nm = 0, np = 0, shared = 0;
    plait_status st = plait_trace_split_read(measured, &m, &nm);
    if (st == PLAIT_OK) st = plait_trace_split_read(predicted, &p, &np);
    diff *d = st == PLAIT_OK ? calloc((size_t)(nm + 1) * PLAIT_TRACE_PARTS, sizeof *d) : NULL;
    int *stage = st == PLAIT_OK ? malloc(sizeof(int) * (size_t)(np + 1)) : NULL;
    if (st == PLAIT_OK && (!d || !stage)) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory comparing traces");
    int n = st == PLAIT_OK ? collect(m, nm, p, np, d, &shared) : 0;
    if (st == PLAIT_OK && shared == 0)
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "%s (ranks %d..%d) and %s (ranks %d..%d) share no rank: compare the trace of a run with "
                             "the prediction of its own layout (`plait plan CONFIG --ranks N --explain LAYOUT --trace "
                             "FILE`)",
                             measured, m[0].rank, m[nm - 1].rank, predicted, p[0].rank, p[np - 1].rank);
    if (st == PLAIT_OK) {
        read_stages(predicted, p, np, stage);
        if (nm != np)
            fprintf(out, "note: %s has %d ranks, %s %d: only the %d in both are compared (another layout?)\n", measured,
                    nm, predicted, np, shared);
        qsort(d, (size_t)n, sizeof *d, by_size);
        fprintf(out,
                "%s (measured, %d traced step%s) against %s (predicted): ms per step, largest differences "
                "first (wait: on pipeline neighbours, the bubble; parts as `plait trace summary` splits them)\n",
                measured, m[0].steps, m[0].steps == 1 ? "" : "s", predicted);
        print_rows(out, d, n, 1, PLAIT_TRACE_PARTS, p, np, stage);
        print_rows(out, d, n, 0, top, p, np, stage);
    }
    free(m);
    free(p);
    free(d);
    free(stage);
    return st;
}
