/*
 * `plait bench train`: steady-state training throughput of a layout.
 *
 * Not thread-safe: the CLI runs one benchmark on its main thread; it sets
 * the process's math threads and drives a run (train/run.h).
 */
#ifndef PLAIT_CORE_BENCH_TRAIN_H
#define PLAIT_CORE_BENCH_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

typedef struct plait_bench_train_opts {
    int64_t warmup;   /* untimed steps */
    int64_t steps;    /* timed steps */
    const char *csv;  /* append a row here (rank 0), or NULL */
} plait_bench_train_opts;

/* Run as this rank of the job (collective); rank 0 prints the table to `out`. */
plait_status plait_bench_train_run(plait_config *cfg, const plait_bench_train_opts *o, FILE *out);

/* The first line of the CSV --csv appends to; an existing file with
 * another first line is refused (runtime/out_file.h), before any rank starts. */
extern const char plait_bench_train_csv_header[];

#endif
