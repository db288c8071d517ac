/*
 * `plait trace compare MEASURED PREDICTED`: where a run's step and the
 * planner's prediction of it (`plait plan --explain LAYOUT --trace FILE`,
 * cost/predicted_trace.h) differ most. Both are split per rank as `plait
 * trace summary` splits them (step, compute, dp, tp, pp, cp, other, wait,
 * idle; ms per traced step) and every (rank, part) difference, and each
 * part's mean over the ranks, is listed largest first, with the rank's
 * pipeline stage from the predicted file.
 *
 * Thread-safe (no shared state). Errors: either file's (the summary's),
 * two traces with no rank in common (PLAIT_ERR_INVALID_ARG naming both).
 */
#ifndef PLAIT_CLI_TRACE_COMPARE_H
#define PLAIT_CLI_TRACE_COMPARE_H

#include <stdio.h>
#include <plait/types.h>

/* Print the `top` largest differences of `measured` against `predicted` to `out`. */
plait_status plait_trace_compare(const char *measured, const char *predicted, int top, FILE *out);

#endif
