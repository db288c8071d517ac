/*
 * The kernels' worker threads: a parallel-for over a fixed list of work
 * items. Work is always cut the same way whatever the thread count (the
 * caller decides the items), so results never depend on how many threads
 * ran them. Idle workers check for the next job for a few tens of
 * microseconds, yielding the core between checks, then sleep on a
 * condition variable: a step's jobs come faster than a sleeping thread
 * wakes, and several ranks share few cores, which spinning would steal.
 */
#ifndef PLAIT_CORE_KERNELS_POOL_H
#define PLAIT_CORE_KERNELS_POOL_H

#include <stdint.h>

/* Runs fn(ctx, i) for every i in [0, n_items), on the calling thread plus up
 * to threads-1 workers, and returns when all items are done. Items must be
 * independent. If another thread is using the pool at the same time (several
 * models in one process), the items run serially on the caller instead:
 * same results, no blocking on each other. fn must not call
 * plait_pool_run itself (nested calls run serially too). */
typedef void (*plait_pool_fn)(void *ctx, int64_t item);
void plait_pool_run(int64_t n_items, plait_pool_fn fn, void *ctx);

/* Runs fn(ctx, lo, hi) over [0, n) cut into ranges of `chunk` (the last
 * one shorter), with plait_pool_run: the cut depends only on n and chunk,
 * so any per-range result is the same for every thread count. */
typedef void (*plait_pool_range_fn)(void *ctx, int64_t lo, int64_t hi);
void plait_pool_for(int64_t n, int64_t chunk, plait_pool_range_fn fn, void *ctx);

/* Sets the number of threads (>= 1) used by plait_pool_run, starting or
 * stopping workers. Must not be called while a plait_pool_run is in
 * progress on another thread. Never fails: if a worker cannot be started,
 * the pool runs with fewer (and logs a warning). */
void plait_pool_set_threads(int threads);
int plait_pool_threads(void);

#endif
