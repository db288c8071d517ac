/*
 * A communicator's state, shared by every layer of communication: its
 * members, its plugin communicators, its settings and device, its
 * executor's queue, its counters and its failure state; the descriptor of
 * one collective call; the names of collectives and algorithms; the tags of
 * collective messages. comm/comm.h is what callers use (create, split,
 * free, the collectives, point-to-point); the collective algorithms and the
 * staging of device buffers work on this state below it.
 */
#ifndef PLAIT_CORE_COMM_STATE_H
#define PLAIT_CORE_COMM_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <plait/coll.h>
#include <plait/comm.h>

#include "commstate/comm_device.h"

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
    /* the device whose buffers the communicator takes (comm_device.h),
     * copied at creation and inherited by splits; NULL: the rank's open
     * device where its memory is not host memory (none otherwise) */
    const plait_comm_device *device;
} plait_comm_settings;

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
    /* the wire format (plait_coll_opts.compression, coll/compress.h) and
     * onebit's error-feedback state (host memory once it reaches an
     * algorithm: staging copies a device one in and out) */
    plait_compression compression;
    float *residual;
    uint64_t posted_ns; /* when it was issued, while tracing (runtime/trace.h); else 0 */
} plait_coll_args;

/* ---- the communicator ------------------------------------------------ */

typedef struct plait_request plait_request;
typedef struct plait_staging plait_staging; /* staging.h */

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

    /* the device it was handed at creation (settings.device, else the open
     * device); kind PLAIT_MEM_HOST when there is none (plait_comm_device_of) */
    plait_comm_device device;

    /* staging of device buffers for a host-memory transport (staging.h);
     * NULL until first needed */
    plait_staging *staging;

    /* counters */
    _Atomic uint64_t bytes_sent, bytes_received, collectives, wait_ns;
    _Atomic int last_algo;     /* plait_coll_algo the latest collective ran; -1 = none yet */
};

/* Record a fatal error: abort the plugin communicators, remember the message
 * (first one wins). Thread-safe. */
void plait_comm_fail(plait_comm *comm, plait_status status, const char *message);
/* If the communicator has failed, set the thread's error ("communicator
 * 'dp' is unusable after an earlier error: ...") and return the status. */
plait_status plait_comm_check_usable(plait_comm *comm);

/* "comm 'dp' rank 1/4 (world rank 5)" into buf. */
void plait_comm_where(const plait_comm *comm, char *buf, size_t len);

/* The communicator's device (plait_comm.device), or NULL when it has none. */
static inline const plait_comm_device *plait_comm_device_of(const plait_comm *comm) {
    return plait_mem_is_host(comm->device.kind) ? NULL : &comm->device;
}

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
