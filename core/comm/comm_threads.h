/*
 * An in-process transport: every rank is a thread of one process and
 * messages are copied between their buffers. It backs the collective
 * conformance tests (the whole matrix runs in one process, also under ASan)
 * and `plait bench comm --comm threads` (algorithm cost without a network).
 *
 * Semantics are deliberately strict: a send completes only when the
 * matching receive has been posted and the data copied (no eager
 * buffering), so an algorithm that relies on sends completing before the
 * peer posts its receive deadlocks here instead of on a cluster. Matching is
 * FIFO per (sender, receiver, tag). abort() fails the member's pending
 * operations and those of peers waiting on it with PLAIT_ERR_PEER_LOST, as a
 * closed TCP connection would.
 *
 * A "world" holds the shared state (message queues per communicator, the
 * key-value store behind the bootstraps) for `size` ranks. All functions
 * are thread-safe.
 */
#ifndef PLAIT_CORE_COMM_THREADS_H
#define PLAIT_CORE_COMM_THREADS_H

#include "comm/comm.h"

typedef struct plait_threads_world plait_threads_world;

/* A world for `size` ranks; bootstrap waits time out after timeout_s. NULL
 * when out of memory. Free after every rank has freed its communicators. */
plait_threads_world *plait_threads_world_new(int size, double timeout_s);
void plait_threads_world_free(plait_threads_world *w);

/* The transport's function table (a comm plugin's ops, built into the core). */
const plait_comm_ops *plait_threads_comm_ops(void);

/* A bootstrap over `size` members for comm_id (0 = the world), for member
 * `rank`; release with plait_threads_bootstrap_free. */
plait_status plait_threads_bootstrap_new(plait_threads_world *w, uint32_t comm_id, int rank, int size,
                                         plait_bootstrap **out);
void plait_threads_bootstrap_free(plait_bootstrap *bs);
/* A factory making such bootstraps (for splits). */
plait_bootstrap_factory plait_threads_factory(plait_threads_world *w);

/* The world communicator of `rank` (call from that rank's thread; collective
 * over all ranks). settings NULL = defaults. */
plait_status plait_threads_comm_world(plait_threads_world *w, int rank,
                                      const plait_comm_settings *settings, plait_comm **out);

/* The world communicator of `rank` over transport `ops` (a comm plugin's,
 * with its [comm.<name>] keys in `config`), its members the world's threads
 * and bootstrapped through the world's store (call from that rank's thread;
 * collective over all ranks). settings NULL = defaults. */
plait_status plait_threads_world_of(plait_threads_world *w, int rank, const plait_comm_ops *ops,
                                    const plait_config *config, const plait_comm_settings *settings,
                                    plait_comm **out);

/* Run fn(rank, arg) on `size` threads and join them. Returns PLAIT_OK, or
 * PLAIT_ERR_SYSTEM if a thread could not be started. */
plait_status plait_threads_run(int size, void (*fn)(int rank, void *arg), void *arg);

#endif
