/*
 * How many math threads a rank uses: the one rule, applied by the local
 * launcher to the ranks it starts and by every rank when it joins a job.
 * Thread-safe; no state.
 */
#ifndef PLAIT_CORE_LAUNCH_MATH_THREADS_H
#define PLAIT_CORE_LAUNCH_MATH_THREADS_H

/* The cores this process may run on (its CPU affinity, else the cores
 * online; at least 1): what a host's ranks share. */
int plait_cores_available(void);

/* `given` when it is positive ([run] threads, PLAIT_MATH_THREADS), else this
 * host's available cores shared among its `local_ranks` ranks, at least 1. */
int plait_math_threads_rule(int given, int local_ranks);

#endif
