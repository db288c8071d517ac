/*
 * `plait bench sweep`: measure every valid layout `plait plan` found, one
 * after another, each as its own `plait bench train` job (the same
 * machinery: this binary is started again with the layout's overrides and
 * starts the layout's ranks), and put the measurement beside the prediction.
 *
 * Results go to a CSV, one row per layout, appended as each finishes; a
 * sweep started again with the same CSV skips the layouts it already holds
 * (an interrupted sweep continues). Not thread-safe (it starts processes
 * and waits for them).
 */
#ifndef PLAIT_CORE_BENCH_SWEEP_H
#define PLAIT_CORE_BENCH_SWEEP_H

#include <stdio.h>

#include "cost/layouts.h"

typedef struct plait_sweep_opts {
    const char *config;             /* the config file */
    char *const *overrides;         /* the user's section.key=value, applied before each layout's */
    int n_overrides;
    int64_t global_batch;           /* the config's, kept by every layout */
    int steps, warmup;              /* per layout, as `bench train --steps --warmup` */
    int repeat;                     /* runs per layout (>= 1), in rounds over all layouts */
    double max_minutes;             /* start no layout after this many minutes (0 = no limit) */
    const char *csv;                /* results (required) */
    int csv_is_scratch;             /* the CSV is removed after the sweep: the table is the result */
    const char *log_dir;            /* each layout's output, <log_dir>/<n>.log */
    double mem_limit;               /* bytes per rank, for the memory plot's line */
    int trace;                      /* [run] trace is set: each layout writes its trace into its own
                                     * out_dir, <log_dir>/<n>, and the report links it */
} plait_sweep_opts;

#define PLAIT_SWEEP_MAX_RUNS 16

/* One `bench train` run of a layout (the slowest rank's medians). */
typedef struct plait_sweep_sample {
    double ms_per_step, tokens_per_s, mfu, compute_ms, comm_ms, idle_ms;
    double dp_mb, tp_mb, pp_mb, peak_mib;
} plait_sweep_sample;

/* What one layout measured: its runs, and as its figures the run with the
 * median tokens/s (a whole run, so its step split still adds up to its
 * step time); the spread is the runs' lowest and highest tokens/s. */
typedef struct plait_sweep_row {
    plait_cost_result predicted;     /* the prediction (and the layout) */
    int state;                       /* 0 not run, 1 measured, 2 failed */
    char note[256];                  /* why it failed */
    int n_runs;                      /* runs measured (each also a CSV row) */
    plait_sweep_sample runs[PLAIT_SWEEP_MAX_RUNS];
    double ms_per_step, tokens_per_s, mfu, compute_ms, comm_ms, idle_ms; /* the median run's */
    double dp_mb, tp_mb, pp_mb, peak_mib;
    double tokens_min, tokens_max;   /* the spread over the runs */
    char trace[1100];                /* with plait_sweep_opts.trace: its last run's trace.json, once written */
} plait_sweep_row;

/* Run the valid, fitting layouts of rows[0..n) (already holding their
 * predictions) o->repeat times each, in rounds (every layout once, then
 * every layout again, so that a change in the machine's load falls on all
 * of them alike), skipping the runs the CSV already holds; fill every
 * row's measurement. Progress lines go to `progress`. Returns PLAIT_OK
 * unless the CSV cannot be read or written (a layout that fails is
 * recorded, not an error; a failed layout is not run again). */
plait_status plait_sweep_run(const plait_sweep_opts *o, plait_sweep_row *rows, size_t n, FILE *progress);

/* The runs a sweep's CSV at `path` already holds (a sweep started again
 * continues): each row of status "ok" whose layout column is the
 * plait_cost_layout_name of rows[i].predicted.layout is added to rows[i]'s
 * runs (up to PLAIT_SWEEP_MAX_RUNS; state 1, note naming the line); other
 * rows are skipped. No file at `path` is not an error (nothing measured
 * yet). Errors: PLAIT_ERR_INVALID_ARG naming the file when it is not a
 * regular file of its own (a link, a FIFO, a hard-linked file) or a CSV whose header does not start with
 * "layout,". Owns nothing: the file is closed before it returns. Used by
 * plait_sweep_run; public so that the reader can be fuzzed. */
plait_status plait_sweep_load_csv(const char *path, plait_sweep_row *rows, size_t n);

/* A measured row as the table, the plots and the report show it. */
typedef struct plait_sweep_view {
    char name[128];       /* plait_cost_layout_name */
    double pred_ms;       /* predicted ms per step */
    double pred_mib;      /* predicted memory of the largest rank */
    double step_err;      /* (predicted - measured) / measured */
    double mem_err;
} plait_sweep_view;
/* Fill `v` for a measured row and return 1; 0 (v untouched) otherwise. */
int plait_sweep_row_view(const plait_sweep_row *r, plait_sweep_view *v);

/* Sort measured rows first by measured (median) tokens/s, best first
 * (equal ones by name). */
void plait_sweep_rank(plait_sweep_row *rows, size_t n);

/* Ranked rows (plait_sweep_rank) that cannot be told apart: group[i] is
 * the rank (from 1) of the first row of the group row i belongs to. A row
 * joins the group of the row above when their spreads (lowest to highest
 * tokens/s) overlap; a row of one run has no spread and joins none.
 * Returns the number of groups. */
size_t plait_sweep_groups(const plait_sweep_row *rows, size_t n, int *group);

/* The ranked table, prediction beside measurement (median tokens/s, the
 * spread, the group of rows indistinguishable within it), then the model's
 * agreement: Spearman's rank correlation of predicted and measured tokens/s,
 * how far apart the measured layouts are, where the model's first choice
 * landed, the largest step-time and peak-memory errors. */
void plait_sweep_print(FILE *out, const plait_sweep_row *rows, size_t n);

/* Spearman's rho of x and y (n >= 2; average ranks for ties). */
double plait_spearman(const double *x, const double *y, size_t n);

/* PNG plots through gnuplot and report.md in `dir` (created). Errors name
 * the file or say gnuplot is missing. */
/* Whether `dir` may take a report: not a run's or a checkpoint's
 * directory, and any report.md there a sweep's (out_file.h). Checked before
 * the sweep starts, and again before writing. */
plait_status plait_sweep_report_check(const char *dir);
plait_status plait_sweep_report(const char *dir, const plait_sweep_opts *o, const plait_sweep_row *rows, size_t n,
                                const char *header);

#endif
