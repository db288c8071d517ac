/*
 * Slurm host lists ("node[01-03,7],gpu-a,rack[1-2]-n[1-2]"), as found in
 * SLURM_STEP_NODELIST and SLURM_NODELIST: comma-separated names, each with
 * any number of bracket groups of comma-separated numbers and ranges; a
 * range keeps the lower bound's zero padding ("[08-10]" gives 08 09 10).
 * Expansion order is Slurm's: names left to right, within a name the
 * leftmost bracket varies slowest.
 *
 * Pure functions; thread-safe. Errors (PLAIT_ERR_INVALID_CONFIG, the
 * message quoting the list and what is wrong): unbalanced brackets, an empty
 * name or number, a range whose end is below its start, a number of more
 * than 9 digits, more than PLAIT_HOSTLIST_MAX names in all.
 */
#ifndef PLAIT_CORE_LAUNCH_HOSTLIST_H
#define PLAIT_CORE_LAUNCH_HOSTLIST_H

#include <stddef.h>
#include <plait/types.h>

#define PLAIT_HOSTLIST_MAX 65536

/* Expand `list` (named `what` in messages, e.g. "SLURM_NODELIST") into a
 * malloc'd array of *n malloc'd names; free with plait_hostlist_free. */
plait_status plait_hostlist_expand(const char *list, const char *what, char ***names, int *n);
void plait_hostlist_free(char **names, int n);

/* Only the first name, into out (cap bytes; longer is an error). */
plait_status plait_hostlist_first(const char *list, const char *what, char *out, size_t cap);

#endif
