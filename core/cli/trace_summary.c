/*
 * `plait trace summary` (trace_summary.h): the merged trace's "X" events
 * read back line by line, each rank's main-thread spans sorted by start,
 * and each span's own time (less the spans nested in it) in its bucket.
 */
#include "cli/trace_summary.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "runtime/trace_merge.h"

typedef plait_trace_event event;

static int bucket_of(const event *e);

/* The buckets of a span's own time: the parts after STEP, before IDLE. */
enum { COMPUTE, DP, TP, PP, CP, OTHER, WAIT, BUCKETS };

typedef struct rank_row {
    int rank, main_tid, steps;
    double step_us, b[BUCKETS];
} rank_row;

/* The value after "key": on the line (numbers and strings plait wrote). */
static const char *after_key(const char *line, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

static int num_of(const char *line, const char *key, double *v) {
    const char *p = after_key(line, key);
    if (!p) return 0;
    char *end;
    *v = strtod(p, &end);
    return end != p;
}

/* 1 if v is a whole number from `least` to INT_MAX. */
static int whole(double v, double least) { return v >= least && v <= INT_MAX && v == floor(v); }

static void str_of(const char *line, const char *key, char *out, size_t cap) {
    const char *p = after_key(line, key);
    out[0] = '\0';
    if (!p || *p != '"') return;
    p++;
    size_t n = strcspn(p, "\"");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static int cmp_event(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->rank != y->rank) return x->rank - y->rank;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->dur > y->dur ? -1 : x->dur < y->dur; /* the outer span first */
}

static int axis_of(const event *e) {
    if (strcmp(e->comm, "dp") == 0) return DP;
    if (strcmp(e->comm, "tp") == 0) return TP;
    if (strcmp(e->comm, "pp") == 0 || strcmp(e->comm, "embed") == 0) return PP;
    if (strcmp(e->comm, "cp") == 0) return CP;
    return OTHER;
}

static int is_comm(const event *e) { return strcmp(e->cat, "coll") == 0 || strcmp(e->cat, "wait") == 0; }

plait_status plait_trace_events_read(const char *path, event **out, size_t *n_out) {
    FILE *f;
    plait_status st = plait_fopen_regular(path, "trace", PLAIT_ERR_INVALID_ARG, &f);
    if (st != PLAIT_OK) return st;
    char line[2048];
    size_t n = 0, cap = 0;
    event *ev = NULL;
    int ln = 0;
    while (st == PLAIT_OK && fgets(line, sizeof line, f)) {
        ln++;
        if (ln == 1 && strncmp(line, PLAIT_TRACE_JSON_FIRST_LINE, strlen(PLAIT_TRACE_JSON_FIRST_LINE)) != 0) {
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s:1: not a trace merged by plait (one starts with %s; "
                                 "`plait trace merge DIR` writes DIR/trace.json)",
                                 path, PLAIT_TRACE_JSON_FIRST_LINE);
            break;
        }
        if (!strstr(line, "\"ph\":\"X\"")) continue;
        event e = {0};
        double pid, tid;
        if (!num_of(line, "pid", &pid) || !num_of(line, "tid", &tid) || !num_of(line, "ts", &e.ts) ||
            !num_of(line, "dur", &e.dur)) {
            st = plait_set_error(PLAIT_ERR_INVALID_ARG, "%s:%d: an \"X\" event without pid, tid, ts and dur", path, ln);
            break;
        }
        if (!whole(pid, 1) || !whole(tid, 0) || !isfinite(e.ts) || !isfinite(e.dur) || e.dur < 0) {
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s:%d: an \"X\" event with pid %g, tid %g, ts %g, dur %g: plait writes a rank + 1 "
                                 "from 1 as pid, a thread from 0 as tid, finite times and a duration from 0",
                                 path, ln, pid, tid, e.ts, e.dur);
            break;
        }
        e.rank = (int)pid - 1; /* rank r is process r + 1 (trace_merge.c) */
        e.tid = (int)tid;
        if (!num_of(line, "bytes", &e.bytes)) e.bytes = -1;
        str_of(line, "cat", e.cat, sizeof e.cat);
        str_of(line, "name", e.name, sizeof e.name);
        str_of(line, "comm", e.comm, sizeof e.comm);
        str_of(line, "detail", e.detail, sizeof e.detail);
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            event *grown = realloc(ev, cap * sizeof *ev);
            if (!grown) {
                st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", path);
                break;
            }
            ev = grown;
        }
        ev[n++] = e;
    }
    fclose(f);
    if (st != PLAIT_OK) {
        free(ev);
        return st;
    }
    qsort(ev, n, sizeof *ev, cmp_event);
    *out = ev;
    *n_out = n;
    return PLAIT_OK;
}

int plait_trace_event_part(const event *e) {
    int b = bucket_of(e);
    return b < 0 ? -1 : PLAIT_TRACE_PART_COMPUTE + b;
}

/* Where a span's own time goes (-1: nowhere, it only groups others). */
static int bucket_of(const event *e) {
    if (strcmp(e->cat, "compute") == 0 || strcmp(e->cat, "optim") == 0) return COMPUTE;
    if (!is_comm(e)) return -1; /* step, instr, p2p (inside a wait), ckpt */
    if (strcmp(e->detail, "pipeline") == 0) return WAIT;
    return axis_of(e);
}

/* A transfer the step's thread ran or waited for (not a plugin's hook
 * around several, not a pipeline neighbour's wait). */
static int is_transfer(const event *e) {
    return strcmp(e->cat, "coll") == 0 || (strcmp(e->cat, "wait") == 0 && !e->detail[0]);
}

static void keep_top(const event **top, int k, const event *e) {
    if (!top) return;
    for (int j = 0; j < k; j++)
        if (!top[j] || top[j]->dur < e->dur) {
            memmove(&top[j + 1], &top[j], sizeof *top * (size_t)(k - 1 - j));
            top[j] = e;
            return;
        }
}

/* One rank's events [lo, hi) (sorted by start, the outer of two at one
 * start first): its row, each span's own time (less the spans inside it)
 * in its bucket, and its exposed transfers added to `top` (the k longest
 * so far). Steps do not overlap: a span inside one starts after its start,
 * before its end. */
static void sum_rank(const event *ev, size_t lo, size_t hi, rank_row *row, const event **top, int k) {
    row->rank = ev[lo].rank;
    row->main_tid = -1;
    for (size_t i = lo; i < hi; i++)
        if (strcmp(ev[i].cat, "step") == 0) {
            row->main_tid = ev[i].tid;
            row->steps++;
            row->step_us += ev[i].dur;
        }
    enum { DEPTH = 32 };
    typedef struct open_span {
        double end;
        int bucket;
    } open_span;
    open_span open[DEPTH];
    int depth = 0;
    /* only what lies inside a step: not a checkpoint's or an evaluation's
     * work after it */
    const event *step = NULL;
    for (size_t i = lo; i < hi; i++) {
        const event *e = &ev[i];
        if (e->tid != row->main_tid) continue;
        if (strcmp(e->cat, "step") == 0) step = e;
        int b = bucket_of(e);
        if (b < 0 || !step || e->ts >= step->ts + step->dur) continue;
        /* a span starting where the open one ends is its sibling: the
         * file's microseconds to 3 decimals, summed in doubles */
        while (depth > 0 && open[depth - 1].end <= e->ts + 5e-4) depth--;
        if (depth > 0) row->b[open[depth - 1].bucket] -= e->dur;
        row->b[b] += e->dur;
        if (depth < DEPTH) open[depth++] = (open_span){e->ts + e->dur, b};
        if (is_transfer(e)) keep_top(top, k, e);
    }
}

/* Every rank's row of the trace at `path` (those with a step), and the
 * job's `k` longest exposed transfers into top (NULL: not wanted); the
 * events stay in *ev_out for top's pointers (free both). */
static plait_status split_file(const char *path, rank_row **rows_out, int *n_rows_out, event **ev_out,
                               const event **top, int k) {
    event *ev = NULL;
    size_t n = 0;
    plait_status st = plait_trace_events_read(path, &ev, &n);
    if (st != PLAIT_OK) return st;
    rank_row *rows = calloc(n + 1, sizeof *rows);
    int n_rows = 0;
    if (!rows) {
        free(ev);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    for (size_t lo = 0; lo < n;) {
        size_t hi = lo;
        while (hi < n && ev[hi].rank == ev[lo].rank) hi++;
        sum_rank(ev, lo, hi, &rows[n_rows], top, k);
        if (rows[n_rows].steps > 0) n_rows++;
        lo = hi;
    }
    if (n_rows == 0) {
        free(ev);
        free(rows);
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s holds no step span: nothing to summarise (was it written by "
                                                      "a run with [run] trace?)", path);
    }
    *rows_out = rows;
    *n_rows_out = n_rows;
    *ev_out = ev;
    return PLAIT_OK;
}

plait_status plait_trace_split_read(const char *path, plait_trace_split **out, int *n_out) {
    rank_row *rows = NULL;
    int n = 0;
    event *ev = NULL;
    plait_status st = split_file(path, &rows, &n, &ev, NULL, 0);
    if (st != PLAIT_OK) return st;
    free(ev);
    plait_trace_split *sp = calloc((size_t)n, sizeof *sp);
    if (!sp) {
        free(rows);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    for (int r = 0; r < n; r++) {
        double busy = 0;
        sp[r].rank = rows[r].rank;
        sp[r].steps = rows[r].steps;
        sp[r].ms[PLAIT_TRACE_PART_STEP] = rows[r].step_us / 1e3 / rows[r].steps;
        for (int b = 0; b < BUCKETS; b++) {
            sp[r].ms[PLAIT_TRACE_PART_COMPUTE + b] = rows[r].b[b] / 1e3 / rows[r].steps;
            busy += rows[r].b[b];
        }
        sp[r].ms[PLAIT_TRACE_PART_IDLE] = (rows[r].step_us - busy) / 1e3 / rows[r].steps;
    }
    free(rows);
    *out = sp;
    *n_out = n;
    return PLAIT_OK;
}

const char *const plait_trace_part_names[PLAIT_TRACE_PARTS] = {"step", "compute", "dp",   "tp",  "pp",
                                                               "cp",   "other",   "wait", "idle"};

plait_status plait_trace_summary(const char *path, FILE *out) {
    enum { TOP = 5 };
    const event *top[TOP + 1] = {0};
    rank_row *rows = NULL;
    int n_rows = 0;
    event *ev = NULL;
    plait_status st = split_file(path, &rows, &n_rows, &ev, top, TOP);
    if (st != PLAIT_OK) return st;
    fprintf(out, "%s: %d rank%s; ms over each rank's traced steps (exposed communication: what the step's thread "
                 "ran or waited for)\n",
            path, n_rows, n_rows == 1 ? "" : "s");
    fprintf(out, "%5s %6s %10s %10s %9s %9s %9s %9s %9s %9s %9s\n", "rank", "steps", "step", "compute", "dp", "tp",
            "pp", "cp", "other", "wait", "idle");
    for (int r = 0; r < n_rows; r++) {
        const rank_row *w = &rows[r];
        double busy = 0;
        for (int b = 0; b < BUCKETS; b++) busy += w->b[b];
        /* never clamped: the columns add up to the step */
        fprintf(out, "%5d %6d %10.3f %10.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", w->rank, w->steps,
                w->step_us / 1e3, w->b[COMPUTE] / 1e3, w->b[DP] / 1e3, w->b[TP] / 1e3, w->b[PP] / 1e3, w->b[CP] / 1e3,
                w->b[OTHER] / 1e3, w->b[WAIT] / 1e3, (w->step_us - busy) / 1e3);
    }
    if (top[0]) fprintf(out, "largest exposed transfers:\n");
    for (int j = 0; j < TOP && top[j]; j++) {
        const event *e = top[j];
        fprintf(out, "  rank %d  %-40s %-6s %12.0f bytes %9.3f ms\n", e->rank, e->name, e->comm[0] ? e->comm : "-",
                e->bytes < 0 ? 0 : e->bytes, e->dur / 1e3);
    }
    free(ev);
    free(rows);
    return PLAIT_OK;
}
