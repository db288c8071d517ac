/*
 * `plait trace summary FILE`: where each rank's traced steps went, read
 * from a merged trace (runtime/trace_merge.h writes one event a line).
 *
 * Per rank, over its "step" spans, on the thread that ran them, each
 * span's own time (less the spans inside it): compute (the layers'
 * forward and backward, the optimizer step), exposed communication by
 * axis (the collectives this thread ran or waited on, the plugins'
 * per-layer hooks and gradient finish as dp: dp; tp; pp with the tied
 * embedding's group; cp, ring attention's waits for its K/V and dK/dV
 * transfers; other, e.g. the step's loss over the world), waits
 * on pipeline neighbours, and idle (the rest: bookkeeping, data, the gaps
 * between spans), as metrics.csv splits a step (docs/trace.md). Then the
 * largest exposed transfers of the job.
 *
 * Thread-safe (no shared state). Errors: a file that is not a trace plait
 * merged (PLAIT_ERR_INVALID_ARG naming it and the line), or that holds no
 * step.
 */
#ifndef PLAIT_CLI_TRACE_SUMMARY_H
#define PLAIT_CLI_TRACE_SUMMARY_H

#include <stdio.h>
#include <plait/types.h>

/* A rank's step as the summary splits it, in ms per traced step (the
 * parts after STEP add up to it). */
enum {
    PLAIT_TRACE_PART_STEP,
    PLAIT_TRACE_PART_COMPUTE,
    PLAIT_TRACE_PART_DP,
    PLAIT_TRACE_PART_TP,
    PLAIT_TRACE_PART_PP,
    PLAIT_TRACE_PART_CP,
    PLAIT_TRACE_PART_OTHER,
    PLAIT_TRACE_PART_WAIT,
    PLAIT_TRACE_PART_IDLE,
    PLAIT_TRACE_PARTS
};
extern const char *const plait_trace_part_names[PLAIT_TRACE_PARTS];

typedef struct plait_trace_split {
    int rank, steps;
    double ms[PLAIT_TRACE_PARTS];
} plait_trace_split;

/* The rows of the ranks with a step in trace `path`, by ascending rank
 * (one row a rank), into *rows (the caller frees it) and their count into
 * *n. Errors as the summary's. */
plait_status plait_trace_split_read(const char *path, plait_trace_split **rows, int *n);

/* One "X" span of a trace as the summary reads it. */
typedef struct plait_trace_event {
    int rank, tid;
    double ts, dur; /* µs */
    double bytes;   /* < 0: none */
    char cat[12], name[48], comm[24], detail[24];
} plait_trace_event;

/* Every span of trace `path`, sorted by rank, then start (the outer of two
 * at one start first), into *ev (the caller frees it). A span whose pid is
 * not a whole number from 1 to INT_MAX (rank + 1), whose tid is not one
 * from 0, or whose ts or dur is not finite (dur below 0 too) is refused,
 * naming the line. */
plait_status plait_trace_events_read(const char *path, plait_trace_event **ev, size_t *n);

/* The part a span's own time counts in (PLAIT_TRACE_PART_COMPUTE to
 * _WAIT), or -1 for one that only groups others (a step, an
 * instruction, a transfer's own track). */
int plait_trace_event_part(const plait_trace_event *e);

/* Print the summary of merged trace `path` to `out`. */
plait_status plait_trace_summary(const char *path, FILE *out);

#endif
