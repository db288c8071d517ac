/*
 * Step timing: where a step's time went (compute, communication, pipeline
 * idle) and the pipeline bubble measured across stages. The step executor
 * (run_step.c) fills a plait_step_timing while it runs; this module turns
 * every stage's busy time into the measured bubble and keeps the sums for
 * the end-of-run line. Owned by the run (plait_run.timing); not thread-safe:
 * the thread that drives the run uses it.
 */
#ifndef PLAIT_CORE_STEP_TIMING_H
#define PLAIT_CORE_STEP_TIMING_H

#include <stdint.h>

#include <plait/types.h>

/* Time and traffic of the last step, split as metrics.csv reports it:
 * compute_s + comm_s + idle_s = step_s (run_step.c says what lands where). */
typedef struct plait_step_timing {
    double step_s;       /* wall time of the whole step */
    double compute_s;    /* the rest: forward, backward, optimizer arithmetic, bookkeeping */
    double comm_s;       /* blocked on communication not hidden by compute (DP/ZeRO/TP, ring
                          * attention's cp transfers, the optimizer step's waits, the loss
                          * all-reduce) */
    double idle_s;       /* blocked waiting for pipeline neighbours (the bubble) */
    double tp_s;         /* of comm_s: blocked in TP all-reduces inside forward/backward */
    /* The pipeline phase (schedule start to REDUCE_GRADS): this rank's busy
     * time in forward/backward (layer hooks and TP all-reduces included) and
     * when its last backward ended, both from the start of the schedule.
     * A stage's idle time is the phase's span over all stages minus its
     * busy time (the simulator's definition of the bubble). */
    double fb_s, pipe_end_s;
    /* Bytes this rank sent per axis: dp and tp as the parallel plugin counts
     * them; pp is the pipeline's activations and gradients (payload) plus
     * the embedding group's tied-gradient all-reduce (the plugin's count). */
    uint64_t dp_bytes, tp_bytes, pp_bytes, optim_bytes;
    uint32_t reductions, early_reductions;
} plait_step_timing;

/* Result of one step. */
typedef struct plait_step_result {
    double loss;         /* mean token loss over the global batch (every rank) */
    double lr;
    double grad_norm;
    plait_step_timing t;
    /* Measured pipeline bubble of the step (every rank gets the same): the
     * span of the pipeline phase (slowest stage) and the mean over stages of
     * idle / span. Per-stage idle seconds are in plait_stage_timing.stage_idle_s. */
    double pipe_span_s;
    double bubble;
} plait_step_result;

/* The measured bubble over the run: the last step's idle seconds of each
 * stage, and sums over the steps after the first (which warms caches). */
typedef struct plait_stage_timing {
    int32_t pp;
    double *stage_idle_s;   /* [pp] last step */
    double *stage_idle_sum; /* [pp] */
    double pipe_span_sum;
    int64_t bubble_steps;   /* steps seen, the first included */
    plait_step_timing last_step; /* of the last training step (memory.csv's bytes per axis) */
} plait_stage_timing;

/* Allocate for `pp` stages (PLAIT_ERR_NO_MEMORY); free with _close (safe on
 * a zeroed or closed struct). */
plait_status plait_stage_timing_open(plait_stage_timing *st, int32_t pp);
void plait_stage_timing_close(plait_stage_timing *st);

/* Number of doubles the stage times take in the step's summed buffer. */
static inline int64_t plait_stage_times_len(int32_t pp) { return 2 * (int64_t)pp; }

/* Write this rank's share (`share` = 1 / ranks of the stage) of its stage's
 * busy time and pipeline end into `times` [2 * pp], zeroed before; the
 * world sum of every rank's `times` then holds each stage's mean. */
void plait_stage_times_put(double *times, int32_t pp, int32_t stage, double share, const plait_step_timing *t);

/* From the summed `times`: the phase spans until the last stage finishes; a
 * stage is idle for the span minus its busy time. Sets res->pipe_span_s,
 * res->bubble and the per-stage idle seconds, and adds to the sums. */
void plait_stage_timing_take(plait_stage_timing *st, const double *times, plait_step_result *res);

#endif
