/*
 * The core communicator: one `plait_comm` per group of ranks (the world and
 * every split of it), running the core's collective algorithms over a comm
 * plugin's point-to-point layer, or the plugin's native collectives.
 *
 * Life cycle
 *   1. The launcher/world bootstrap (transport side) gives each process a
 *      `plait_bootstrap` over the world (comm_id 0) and a
 *      `plait_bootstrap_factory` that can make bootstraps for child
 *      communicators (store-backed, keys namespaced by comm id).
 *   2. plait_comm_create_world() calls the plugin's init() with the world
 *      bootstrap, then derive()s a second plugin communicator over the same
 *      members for user point-to-point traffic (see "Two plugin
 *      communicators" below).
 *   3. plait_comm_split() (also host->coll->split) allgathers (color, key)
 *      over the parent, orders each color's members by (key, parent rank),
 *      asks the factory for a bootstrap over them and derive()s the child's
 *      plugin communicators from the parent's.
 *   4. plait_comm_free() releases a communicator (children before parents).
 *
 * Execution model
 *   Collectives on one communicator execute one at a time, in issue order.
 *   A blocking call on an idle communicator runs inline on the caller's
 *   thread (lowest latency). Asynchronous calls (and blocking calls issued
 *   while asynchronous ones are queued) go to a per-communicator worker
 *   thread, started on first use, which sleeps on a condition variable when
 *   idle; request wait() sleeps, test() never blocks. Each collective gets a
 *   sequence number at issue time (named in every error) and its messages
 *   carry tags derived from it (plait_coll_tag).
 *
 * Two plugin communicators
 *   The comm plugin ABI lets one thread at a time use a plugin communicator,
 *   and collective algorithms block in the plugin's wait(). User send/recv
 *   (pipeline activations) must not queue behind a long collective, nor can
 *   they be posted while the worker is inside the plugin. So each core
 *   communicator owns two plugin communicators over the same members:
 *   `pcoll` (collectives: worker or inline caller, never both) and `pp2p`
 *   (user point-to-point, serialised by a mutex).
 *
 * Errors
 *   Every wait has the communicator's timeout. A failed collective or p2p
 *   operation (timeout, peer lost, protocol) makes the communicator unusable:
 *   the core aborts its plugin communicators (so pending requests fail fast
 *   and peers see the loss) and every later call fails with the first error.
 *   Messages name the rank, the operation, its sequence number, size, dtype,
 *   algorithm and the peers waited on.
 */
#ifndef PLAIT_CORE_COMM_H
#define PLAIT_CORE_COMM_H

#include "commstate/comm_state.h"
#include "config/config.h"

/* ---- settings -------------------------------------------------------- */

/* timeout 300 s, AUTO, no checks, 4 MiB staging chunks. */
void plait_comm_settings_default(plait_comm_settings *s);
/* Read the [comm] keys of a finalized configuration. */
plait_status plait_comm_settings_from_config(const plait_config *cfg, plait_comm_settings *s);
/* ---- the communicator ------------------------------------------------ */

/* Create the world communicator: calls ops->init with `bootstrap` (comm_id 0)
 * and derives the p2p communicator through `factory`. Collective over all
 * ranks. `config` is passed to the plugin (it reads its own section) and may
 * be NULL only for plugins that read no configuration (the in-process one).
 * `settings` NULL = defaults. The factory is copied; its ctx must outlive
 * every communicator of this world. The bootstrap is used during the call
 * only. On success *out is owned by the caller (plait_comm_free). */
plait_status plait_comm_create_world(const plait_comm_ops *ops, const plait_config *config,
                                     const plait_bootstrap *bootstrap,
                                     const plait_bootstrap_factory *factory,
                                     const plait_comm_settings *settings, const char *name,
                                     plait_comm **out);

/* split(): see coll.h. Collective over `comm`. */
plait_status plait_comm_split(plait_comm *comm, int color, int key, const char *name,
                              plait_comm **out);

/* Release a communicator (any, including the world). Waits for its queued
 * collectives, stops the worker, destroys the plugin communicators. Children
 * must be freed first (a live child is reported and leaked). NULL is ignored. */
void plait_comm_free(plait_comm *comm);

void plait_comm_get_stats(const plait_comm *comm, plait_comm_stats *out);

/* The algorithm the latest collective on `comm` ran (PLAIT_ALGO_NATIVE for
 * the plugin's own), after AUTO or [comm] algorithm was resolved for its
 * size; -1 before the first one or when it moved nothing (a group of one,
 * count 0). For `plait bench comm` and tests; thread-safe, but only
 * meaningful to the thread that waited for that collective. */
int plait_comm_last_algorithm(const plait_comm *comm);

/* Override the algorithm or timeout after creation (tests, bench). Not
 * thread-safe with running collectives. */
void plait_comm_set_algorithm(plait_comm *comm, plait_coll_algo algo);
void plait_comm_set_timeout(plait_comm *comm, double timeout_s);

/* ---- collectives (coll_api.c) --------------------------------------- */
/* The core calls these directly; plugins reach the same functions through
 * host->coll (plait_coll_api_table). Semantics, blocking/async rules (req
 * NULL = blocking; otherwise *req is owned by the caller until a wait or a
 * test that reports done) and errors are those of sdk/include/plait/coll.h.
 * Thread-safe in the sense of coll.h: one thread issues on a communicator. */
int plait_comm_rank(const plait_comm *comm);
int plait_comm_size(const plait_comm *comm);
int plait_comm_world_rank(const plait_comm *comm, int rank);
const char *plait_comm_name(const plait_comm *comm);
plait_status plait_comm_allreduce(plait_comm *comm, const void *send, void *recv, size_t count,
                                  plait_dtype dtype, plait_redop op, const plait_coll_opts *opts,
                                  plait_request **req);
plait_status plait_comm_reduce_scatter(plait_comm *comm, const void *send, void *recv, size_t count,
                                       plait_dtype dtype, plait_redop op, const plait_coll_opts *opts,
                                       plait_request **req);
plait_status plait_comm_allgather(plait_comm *comm, const void *send, void *recv, size_t count,
                                  plait_dtype dtype, const plait_coll_opts *opts, plait_request **req);
plait_status plait_comm_broadcast(plait_comm *comm, void *buf, size_t count, plait_dtype dtype, int root,
                                  const plait_coll_opts *opts, plait_request **req);
plait_status plait_comm_reduce(plait_comm *comm, const void *send, void *recv, size_t count,
                               plait_dtype dtype, plait_redop op, int root, const plait_coll_opts *opts,
                               plait_request **req);
plait_status plait_comm_gather(plait_comm *comm, const void *send, void *recv, size_t count,
                               plait_dtype dtype, int root, const plait_coll_opts *opts, plait_request **req);
plait_status plait_comm_scatter(plait_comm *comm, const void *send, void *recv, size_t count,
                                plait_dtype dtype, int root, const plait_coll_opts *opts, plait_request **req);
plait_status plait_comm_alltoall(plait_comm *comm, const void *send, void *recv, size_t count,
                                 plait_dtype dtype, const plait_coll_opts *opts, plait_request **req);
plait_status plait_comm_barrier(plait_comm *comm, const plait_coll_opts *opts, plait_request **req);

/* The table of the functions above handed to plugins as host->coll. */
const plait_coll_api *plait_coll_api_table(void);

/* ---- executor (comm_exec.c) ---------------------------------------- */

/* Issue a collective: assigns the sequence number, then runs it inline or
 * queues it. req NULL = blocking. */
plait_status plait_comm_submit(plait_comm *comm, const plait_coll_args *args, plait_request **req);
/* Finish any request (collective or p2p). */
plait_status plait_request_wait(plait_request *req);
plait_status plait_request_test(plait_request *req, int *done);
/* Finish a request for the device's compute stream (plait_coll_api.wait_device,
 * plait/coll.h): a collective marked posted (plait_request_mark_posted) is
 * released once the compute stream waits for its mark; everything else
 * is plait_request_wait. */
plait_status plait_request_wait_device(plait_request *req);

/* User point-to-point (comm_p2p.c). */
plait_status plait_comm_send(plait_comm *comm, const void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req);
plait_status plait_comm_recv(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req);
/* Either, on memory of `kind` (device memory is staged for a host-memory
 * transport). */
plait_status plait_comm_p2p(plait_comm *comm, int is_send, const void *buf, size_t count, plait_dtype dtype,
                            int peer, uint32_t tag, plait_mem_kind kind, plait_request **req);
/* The same, touching device memory only after compute-stream event `ready`
 * (plait_coll_opts.ready; NULL: the point of the call). */
plait_status plait_comm_p2p_after(plait_comm *comm, int is_send, const void *buf, size_t count, plait_dtype dtype,
                                  int peer, uint32_t tag, plait_mem_kind kind, struct plait_device_event *ready,
                                  plait_request **req);
/* plait_comm_p2p of `count` float32 values that travel as bf16 (2 bytes a
 * value, rounded to nearest even; the collectives' bf16 wire format): the
 * sender's values rounded once on the host side of the transport, the
 * receiver's widened back to float32 exactly. Both sides must call it. Needs
 * a transport that moves host memory (device memory is staged);
 * PLAIT_ERR_UNSUPPORTED where the transport moves `kind` itself (nccl's
 * device memory: plait_comm_p2p_bf16_carried says so beforehand). */
plait_status plait_comm_p2p_bf16(plait_comm *comm, int is_send, const float *buf, size_t count, int peer, uint32_t tag,
                                 plait_mem_kind kind, plait_request **req);
/* The same, touching device memory only after compute-stream event `ready`
 * (NULL: the point of the call), as plait_comm_p2p_after. */
plait_status plait_comm_p2p_bf16_after(plait_comm *comm, int is_send, const float *buf, size_t count, int peer,
                                       uint32_t tag, plait_mem_kind kind, struct plait_device_event *ready,
                                       plait_request **req);
/* 1 if plait_comm_p2p_bf16 can carry memory of `kind` on `comm`. */
int plait_comm_p2p_bf16_carried(const plait_comm *comm, plait_mem_kind kind);

#endif
