/*
 * The planner's predicted step as a trace (`plait plan --explain LAYOUT
 * --trace FILE`, docs/trace.md): the figures `--explain` prints laid out
 * on a timeline in the format of a measured trace (runtime/trace_merge.h),
 * so that Perfetto shows both alike and `plait trace summary` and `plait
 * trace compare` read it as they read a run's.
 *
 * Each stage's step is built from its costs (cost.h): a forward and a
 * backward per chunk and micro-batch (the stage's compute split 1:2 and
 * evenly over its chunks, the forwards a recompute mode runs again in the
 * backward; zb1's backward in an input half and a weight half, the latter
 * a forward's time), each forward and backward ending in its share of the
 * stage's TP all-reduces; a pipeline send after each forward and backward
 * that has a virtual stage to feed; the order of the instruction list the
 * pp plugin runs (plugins/parallel/pp/schedule.c: gpipe, 1f1b, interleaved,
 * zb1); the time a stage waits for its neighbour as a pipeline wait
 * (the bubble); then the DP reduction's exposed part, the optimizer, and
 * a wait until the slowest stage ends the step. The DP reduction's hidden
 * part runs on a track of its own beside the backwards. Ranks are placed
 * as [parallel] order's default places them (tp innermost, then dp, then
 * pp): world rank r runs stage r / (dp x tp).
 *
 * Thread-safe (no shared state). Errors: the file's (trace_merge.h's
 * plait_trace_json_write), PLAIT_ERR_NO_MEMORY.
 */
#ifndef PLAIT_CORE_COST_PREDICTED_TRACE_H
#define PLAIT_CORE_COST_PREDICTED_TRACE_H

#include "cost/layouts.h"

/* Write the predicted step of the valid result `r` (plait_cost_evaluate_stages:
 * stages[0..r->layout.pp)) to `path`. */
plait_status plait_cost_write_trace(const char *path, const plait_cost_result *r, const plait_cost_rank *stages);

#endif
