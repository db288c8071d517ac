/*
 * A traced run ([run] trace, docs/trace.md): which steps are recorded,
 * every rank's clock against rank 0's, and the files at the end of the
 * traced steps (each rank's own, then rank 0's merge into trace.json).
 *
 * Called by train_loop.c on every rank, in the same order (the start-up's
 * clock exchange and the end's barrier are collective over the world).
 * The recorder itself is runtime/trace.h; its buffer is freed with the
 * run (plait_run_close), once the communicators' threads, which may still
 * be finishing a span, are gone.
 */
#ifndef PLAIT_CORE_TRAIN_RUN_TRACE_H
#define PLAIT_CORE_TRAIN_RUN_TRACE_H

#include <stdint.h>

#include "config/config.h"
#include "train/run.h"

/* Parse [run] trace into *first and *last (numbered from 1; both 0 when
 * the key is empty) and check them against the run's steps
 * [from, steps]: a range outside them, or a value that is not N or
 * FIRST:LAST, is PLAIT_ERR_INVALID_CONFIG naming the file and line, the
 * key and the run's steps. steps <= 0 (not known yet, as before a
 * launcher knows whether it starts a training or a benchmark): the
 * value's form alone. */
plait_status plait_run_trace_range(const plait_config *cfg, int64_t from, int64_t steps, int64_t *first,
                                   int64_t *last);

/* Before step 1 of a traced run (run->trace_first > 0; else nothing):
 * <out_dir>/trace/ made (a file in its way refused, naming it), the
 * recorder's buffer opened, and this rank's clock measured against rank
 * 0's through the world communicator (Cristian's algorithm: the round trip
 * of the fewest of a few rounds). Collective over the world. */
plait_status plait_run_trace_start(plait_run *run, const char *out_dir);

/* Around one step (numbered from 1): recording on when it is traced; at
 * the end of the last traced step the rank's file is written, the world
 * meets, and rank 0 merges trace.json (collective then). */
void plait_run_trace_step_begin(plait_run *run, int64_t step);
plait_status plait_run_trace_step_end(plait_run *run, int64_t step, const char *out_dir);

/* A failing rank: whatever it recorded goes to its file (the run's
 * failure path; never collective). */
void plait_run_trace_flush(void);

#endif
