/*
 * metrics.csv: one row per step (written by rank 0), columns fixed at open.
 * Columns are added by name before the first row; values are doubles
 * (integers print without decimals, NaN prints as an empty cell).
 * Appending to a file whose header differs (a run resumed under another
 * layout has other per-stage columns) rewrites it once with the union of
 * both headers (old columns first; cells a run did not have stay empty), so
 * the file stays one table.
 * Not thread-safe; flushed every row so a crash loses at most one row.
 */
#ifndef PLAIT_CORE_METRICS_H
#define PLAIT_CORE_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include <plait/types.h>

#define PLAIT_METRICS_MAX_COLUMNS 64

typedef struct plait_metrics {
    FILE *file;
    int n;
    char names[PLAIT_METRICS_MAX_COLUMNS][32];
    double values[PLAIT_METRICS_MAX_COLUMNS];
    int header_written;
    char path[4096];
} plait_metrics;

/* Open `path` for writing; `append` continues an existing file (resume) and
 * then checks its header matches. With append, rows of steps after
 * `resumed_step` (written by the run that went on past the checkpoint it is
 * resumed from, then died) are dropped first, so every step appears once and
 * the table holds the history the resumed run continues; the file is
 * rewritten through a temporary file and a rename, never left half-written. */
plait_status plait_metrics_open(plait_metrics *m, const char *path, int append, int64_t resumed_step);
/* Add a column (before the first row). Returns its index, or -1 when full. */
int plait_metrics_column(plait_metrics *m, const char *name);
/* Set a value of the current row by index or name (unknown names ignored). */
void plait_metrics_set(plait_metrics *m, int column, double value);
void plait_metrics_set_named(plait_metrics *m, const char *name, double value);
/* Write the current row and clear it to NaN. */
plait_status plait_metrics_row(plait_metrics *m);
void plait_metrics_close(plait_metrics *m);

#endif
