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

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <plait/coll.h>
#include <plait/comm.h>

#include "config/config.h"

/* ---- bootstrap factory (provided by the world bootstrap) ----------------- */

/* Makes bootstraps for child communicators. The transport side's rendezvous
 * store implements it (keys namespaced by comm_id); comm_threads.c has an
 * in-process one for tests and `plait bench comm --comm threads`.
 * Both functions are called from the thread creating a communicator, on
 * every member, with identical comm_id, size and world_ranks. */
typedef struct plait_bootstrap_factory {
    void *ctx;
    /* A bootstrap over `size` members (member i is world rank world_ranks[i]);
     * the caller is member `rank`. comm_id is equal on all members and unique
     * within the job (never 0, the world's). The factory fills local_rank /
     * local_size and timeout_s. Not collective itself; the members meet in
     * the bootstrap's set/get/allgather. */
    plait_status (*create)(void *ctx, uint32_t comm_id, int rank, int size,
                           const int *world_ranks, plait_bootstrap **out);
    /* Release a bootstrap from create(). */
    void (*destroy)(void *ctx, plait_bootstrap *bootstrap);
} plait_bootstrap_factory;

/* ---- settings -------------------------------------------------------- */

typedef struct plait_comm_settings {
    double timeout_s;           /* [comm] timeout: every wait */
    plait_coll_algo algorithm;  /* [comm] algorithm: default for AUTO calls */
    int check_collectives;      /* [comm] check_collectives */
    size_t staging_chunk;       /* [comm] staging_chunk: bytes per staged chunk of device buffers */
} plait_comm_settings;

/* timeout 300 s, AUTO, no checks, 4 MiB staging chunks. */
void plait_comm_settings_default(plait_comm_settings *s);
/* Read the [comm] keys of a finalized configuration. */
plait_status plait_comm_settings_from_config(const plait_config *cfg, plait_comm_settings *s);
/* "auto", "ring", ... ("native" for PLAIT_ALGO_NATIVE); "?" if unknown. */
const char *plait_coll_algo_name(plait_coll_algo algo);
/* Parse an algorithm name; -1 if unknown. */
int plait_coll_algo_parse(const char *name);

/* ---- internal collective descriptor --------------------------------- */

typedef enum plait_coll_kind {
    PLAIT_COLL_ALLREDUCE = 0,
    PLAIT_COLL_REDUCE_SCATTER,
    PLAIT_COLL_ALLGATHER,
    PLAIT_COLL_BROADCAST,
    PLAIT_COLL_REDUCE,
    PLAIT_COLL_GATHER,
    PLAIT_COLL_SCATTER,
    PLAIT_COLL_ALLTOALL,
    PLAIT_COLL_BARRIER,
    PLAIT_COLL_KIND_COUNT
} plait_coll_kind;

/* "allreduce", ... */
const char *plait_coll_kind_name(plait_coll_kind kind);

/* One collective call, as queued. Buffers are normalised by the API layer
 * (coll_api.c): `send` always points at this rank's own contribution (for an
 * in-place allgather, block `rank` of recv), never NULL when count > 0. */
typedef struct plait_coll_args {
    plait_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    plait_dtype dtype;
    plait_redop op;
    int root;
    plait_coll_algo algo; /* as requested; AUTO = the communicator's setting */
    plait_mem_kind mem_kind;
    plait_stream *stream;
    char label[48];
    uint64_t seq;     /* set at issue */
    int internal;     /* core-internal (split's exchange): no fingerprint check */
    /* device buffers: touched only after this compute-stream event
     * (plait_coll_opts.ready; comm_device.h); NULL = compute-stream order */
    struct plait_device_event *ready;
    int own_ready;    /* the core recorded `ready` at the call: released when the collective ends */
    /* the queued request this runs for (NULL: a blocking call run inline):
     * a native collective marks it posted (comm_exec.c) */
    struct plait_request *req;
    /* the wire format (plait_coll_opts.compression, comm/compress.h) and
     * onebit's error-feedback state (host memory once it reaches an
     * algorithm: staging copies a device one in and out) */
    plait_compression compression;
    float *residual;
} plait_coll_args;

/* ---- the communicator ------------------------------------------------ */

typedef struct plait_request plait_request;
typedef struct plait_stage plait_stage; /* comm_stage.h */

struct plait_comm {
    char name[32];
    int rank, size;
    int *world_ranks;     /* member -> world rank */
    int *host_of;         /* member -> host index (comm_topo.h); NULL = all on one host */
    int n_hosts;
    uint32_t id;          /* comm id of pcoll's bootstrap (0 = world) */
    struct plait_comm *parent;
    int children;         /* live children (freed before this one) */
    uint32_t n_splits;    /* split() calls so far (equal on all members) */

    const plait_comm_ops *ops;
    void *pcoll;          /* plugin communicator for collectives */
    void *pp2p;           /* plugin communicator for user send/recv */
    plait_comm_settings settings;
    plait_bootstrap_factory factory;

    /* executor: queue of collectives, worker thread */
    pthread_mutex_t lock;
    pthread_cond_t work_cond;  /* worker: queue changed or busy cleared */
    pthread_cond_t done_cond;  /* waiters: a request finished */
    plait_request *head, *tail;
    int busy;                  /* a collective is running (inline or worker) */
    int worker_started, stopping;
    pthread_t worker;
    uint64_t next_seq;

    /* first fatal error; later calls fail with it */
    plait_status failed;
    char *failure;

    /* user p2p */
    pthread_mutex_t p2p_lock;
    uint64_t p2p_seq;

    /* scratch memory of the running collective (one at a time) */
    void *scratch;
    size_t scratch_bytes;
    int scratch_leaked;        /* a failed op may still be written into it */

    /* staging of device buffers for a host-memory transport (comm_stage.h);
     * NULL until first needed */
    plait_stage *stage;

    /* counters */
    _Atomic uint64_t bytes_sent, bytes_received, collectives, wait_ns;
    _Atomic int last_algo;     /* plait_coll_algo the latest collective ran; -1 = none yet */
};

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

/* Record a fatal error: abort the plugin communicators, remember the message
 * (first one wins). Thread-safe. */
void plait_comm_fail(plait_comm *comm, plait_status status, const char *message);
/* If the communicator has failed, set the thread's error ("communicator
 * 'dp' is unusable after an earlier error: ...") and return the status. */
plait_status plait_comm_check_usable(plait_comm *comm);

/* "comm 'dp' rank 1/4 (world rank 5)" into buf. */
void plait_comm_where(const plait_comm *comm, char *buf, size_t len);

/* Before the comm plugin (`ops`, its communicator `pcomm`) gets device
 * buffers of `kind` directly (a native collective, or a send/receive of
 * memory it declares) whose ready event is `ready` (comm_device.h; NULL:
 * none): its stream (`stream`, NULL = its own) waits for the event on the device where the plugin can
 * (plait_comm_ops.wait_event with the event's native handle), else this
 * thread waits for it. Host memory needs nothing. */
plait_status plait_comm_ready_native(const plait_comm_ops *ops, void *pcomm, plait_mem_kind kind,
                                     struct plait_device_event *ready, plait_stream *stream);

/* Right after the comm plugin (`ops`, `pcomm`) posted an operation on device
 * buffers of `kind` on `stream` (NULL = its own): a device event (from the
 * core's pool) that the plugin recorded there after it
 * (plait_comm_ops.record_event), so the compute stream can wait for the
 * result on the device; NULL where the memory is host memory, the device
 * has no events with native handles, or the plugin cannot record one (a
 * failure is logged once). Release it with plait_comm_ready_release(ev, 1)
 * once the operation completed. */
struct plait_device_event *plait_comm_done_mark(const plait_comm_ops *ops, void *pcomm, plait_mem_kind kind,
                                                plait_stream *stream);

/* A collective running for request `req` (plait_coll_args.req; NULL does
 * nothing) was posted, and `done` (from plait_comm_done_mark) marks its
 * completion on the device: wait_device may return now
 * (plait_request_wait_device). Called by the thread running it. */
void plait_request_mark_posted(struct plait_request *req, struct plait_device_event *done);

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

/* Runs one collective on the calling thread; used by the executor: the
 * buffers go to the transport, or through staging for device memory on a
 * host-memory transport (coll_stage.c). */
plait_status plait_coll_run(plait_comm *comm, const plait_coll_args *args);

/* Runs one collective on buffers the transport takes (coll_exec.c). */
plait_status plait_coll_execute(plait_comm *comm, const plait_coll_args *args);
/* [comm] check_collectives for `args` alone (what plait_coll_execute does
 * first): every rank's call compared, a mismatch named; PLAIT_OK when the
 * check is off, the call is internal or the group has one rank. For
 * callers that run a collective as another one (coll_stage.c). */
plait_status plait_coll_check(plait_comm *comm, const plait_coll_args *args);

/* Tags: user tags live below 2^31; collective messages use
 * 1 << 31 | (seq mod 4) << 7 | phase, phase < 128.
 * Why only seq mod 4: collectives on one communicator run strictly one after
 * another and every algorithm posts its receives from a peer in the order
 * that peer posts its sends (per tag), so FIFO matching per (peer, tag) never
 * mixes two collectives; the sequence bits only keep neighbouring
 * collectives apart (a stray message of the previous one cannot match).
 * Transports keep state per (peer, communicator, tag), so a fresh tag per
 * collective would grow that state without bound over a training run. */
#define PLAIT_USER_TAG_LIMIT 0x80000000u
#define PLAIT_COLL_TAG_SEQ_MASK 3u
static inline uint32_t plait_coll_tag(uint64_t seq, unsigned phase) {
    return 0x80000000u | ((uint32_t)(seq & PLAIT_COLL_TAG_SEQ_MASK) << 7) | (phase & 0x7fu);
}

#endif
