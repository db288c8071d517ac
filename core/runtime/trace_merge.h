/*
 * One trace file for a job (docs/trace.md): the ranks' files written by
 * trace.c (<out_dir>/trace/rank-NNNNN.trace) merged into
 * <out_dir>/trace.json, Chrome's trace-event format (what Perfetto and
 * chrome://tracing open): a process per rank, a track per thread, "X"
 * spans on rank 0's clock (each rank's measured offset applied), and
 * flow events ("s" then "f", one id) from each point-to-point send to the
 * receive that took it (the n-th send from a to b with a tag is the n-th
 * receive at b from a with that tag: point-to-point messages between two
 * ranks do not overtake each other).
 *
 * Thread-safe (no shared state). Errors name the file and line read, or
 * the file written (out_file.c's rules: never through a link, a
 * temporary file renamed into place, never over a file plait did not
 * write).
 */
#ifndef PLAIT_CORE_RUNTIME_TRACE_MERGE_H
#define PLAIT_CORE_RUNTIME_TRACE_MERGE_H

#include <stdio.h>
#include <plait/types.h>

/* Merge every rank file of `out_dir`/trace into `out_dir`/trace.json.
 * *ranks: how many rank files were merged (NULL: not wanted); none is an
 * error. A rank missing from 0..max is warned about, not refused (a run
 * whose rank died before writing its file). */
plait_status plait_trace_merge(const char *out_dir, int *ranks);

/* Write a trace-event JSON file at `path` as the merge writes its own:
 * refused over a file plait did not write (one not starting with
 * PLAIT_TRACE_JSON_FIRST_LINE), `write` filling a temporary file beside
 * it, renamed into place once complete. `what` names the file in errors
 * ("the merged trace", "the predicted trace"). */
plait_status plait_trace_json_write(const char *path, const char *what, void (*write)(FILE *f, void *ctx), void *ctx);

/* The merged file's first line (a file plait wrote starts with it). */
#define PLAIT_TRACE_JSON_FIRST_LINE "{\"traceEvents\":["

#endif
