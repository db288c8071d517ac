/*
 * `plait trace compare MEASURED PREDICTED` (trace_compare.h): both traces
 * split as the summary splits them (trace_summary.h), per traced step,
 * and their differences sorted by size.
 */
#include "cli/trace_compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/trace_summary.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

/* The pipeline stage of each rank, from a predicted trace's plait_rank
 * events ("stage"); -1 where it says none. */
static void read_stages(const char *path, int *stage, int n) {
    for (int r = 0; r < n; r++) stage[r] = -1;
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
        int rank = atoi(r + 7);
        if (rank >= 0 && rank < n) stage[rank] = atoi(s + 8);
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
    for (int i = 0; i < n; i++)
        if (rows[i].rank == rank) return &rows[i];
    return NULL;
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
static void print_rows(FILE *out, const diff *d, int n, int means, int top, const int *stage, int max_rank) {
    fprintf(out, "\n%s\n%-6s %5s  %-8s %11s %11s %11s %8s\n",
            means ? "each part, mean over the ranks:" : "each rank's parts, largest differences first:", "rank",
            "stage", "part", "measured", "predicted", "difference", "ratio");
    for (int i = 0, shown = 0; i < n && shown < top; i++) {
        if ((d[i].rank < 0) != means) continue;
        shown++;
        char who[16] = "all", st_text[8] = "-", ratio[16] = "-";
        if (d[i].rank >= 0) snprintf(who, sizeof who, "%d", d[i].rank);
        if (d[i].rank >= 0 && d[i].rank <= max_rank && stage[d[i].rank] >= 0)
            snprintf(st_text, sizeof st_text, "%d", stage[d[i].rank]);
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
    int max_rank = 0;
    for (int i = 0; i < np; i++)
        if (p[i].rank > max_rank) max_rank = p[i].rank;
    int *stage = st == PLAIT_OK ? malloc(sizeof(int) * (size_t)(max_rank + 1)) : NULL;
    if (st == PLAIT_OK && (!d || !stage)) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory comparing traces");
    int n = st == PLAIT_OK ? collect(m, nm, p, np, d, &shared) : 0;
    if (st == PLAIT_OK && shared == 0)
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "%s (ranks %d..%d) and %s (ranks %d..%d) share no rank: compare the trace of a run with "
                             "the prediction of its own layout (`plait plan CONFIG --ranks N --explain LAYOUT --trace "
                             "FILE`)",
                             measured, m[0].rank, m[nm - 1].rank, predicted, p[0].rank, p[np - 1].rank);
    if (st == PLAIT_OK) {
        read_stages(predicted, stage, max_rank + 1);
        if (nm != np)
            fprintf(out, "note: %s has %d ranks, %s %d: only the %d in both are compared (another layout?)\n", measured,
                    nm, predicted, np, shared);
        qsort(d, (size_t)n, sizeof *d, by_size);
        fprintf(out,
                "%s (measured, %d traced step%s) against %s (predicted): ms per step, largest differences "
                "first (wait: on pipeline neighbours, the bubble; parts as `plait trace summary` splits them)\n",
                measured, m[0].steps, m[0].steps == 1 ? "" : "s", predicted);
        print_rows(out, d, n, 1, PLAIT_TRACE_PARTS, stage, max_rank);
        print_rows(out, d, n, 0, top, stage, max_rank);
    }
    free(m);
    free(p);
    free(d);
    free(stage);
    return st;
}
