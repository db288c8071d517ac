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
    double max_minutes;             /* start no layout after this many minutes (0 = no limit) */
    const char *csv;                /* results (required) */
    int csv_is_scratch;             /* the CSV is removed after the sweep: the table is the result */
    const char *log_dir;            /* each layout's output, <log_dir>/<n>.log */
    double mem_limit;               /* bytes per rank, for the memory plot's line */
} plait_sweep_opts;

/* What one layout measured (the slowest rank's medians, as bench train). */
typedef struct plait_sweep_row {
    plait_cost_result predicted;         /* the prediction (and the layout) */
    int state;                       /* 0 not run, 1 measured, 2 failed */
    char note[256];                  /* why it failed */
    double ms_per_step, tokens_per_s, mfu, compute_ms, comm_ms, idle_ms;
    double dp_mb, tp_mb, pp_mb, peak_mib;
} plait_sweep_row;

/* Run the valid, fitting layouts of rows[0..n) (already holding their
 * predictions) whose results the CSV does not hold yet; fill every row's
 * measurement. Progress lines go to `progress`. Returns PLAIT_OK unless the
 * CSV cannot be read or written (a layout that fails is recorded, not an
 * error). */
plait_status plait_sweep_run(const plait_sweep_opts *o, plait_sweep_row *rows, size_t n, FILE *progress);

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

/* Sort measured rows first by measured tokens/s, best first (equal ones
 * by name). */
void plait_sweep_rank(plait_sweep_row *rows, size_t n);

/* The ranked table, prediction beside measurement, and the model's
 * agreement: Spearman's rank correlation of predicted and measured tokens/s,
 * the largest step-time and peak-memory errors. */
void plait_sweep_print(FILE *out, const plait_sweep_row *rows, size_t n);

/* Spearman's rho of x and y (n >= 2; average ranks for ties). */
double plait_spearman(const double *x, const double *y, size_t n);

/* PNG plots through gnuplot and report.md in `dir` (created). Errors name
 * the file or say gnuplot is missing. */
plait_status plait_sweep_report(const char *dir, const plait_sweep_opts *o, const plait_sweep_row *rows, size_t n,
                                const char *header);

#endif
