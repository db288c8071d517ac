/*
 * plait SDK — communication plugins (kind PLAIT_KIND_COMM).
 *
 * A comm plugin moves bytes between ranks: point-to-point sends and receives
 * on a communicator. The core builds every collective (allreduce, allgather,
 * ...) on top of that p2p layer, once, for all transports. A plugin whose
 * hardware has better collectives (NCCL) may also provide native ones in
 * `plait_comm_coll_ops`; the core calls those when present and falls back to
 * its own algorithms when one is NULL or answers PLAIT_ERR_UNSUPPORTED for a
 * given dtype, operator or memory kind.
 *
 * Threading model, for every function below unless stated otherwise:
 *   - one communicator is used by at most one core thread at a time
 *     (the core serialises its own calls per communicator);
 *   - different communicators of the same plugin may be used concurrently
 *     from different threads;
 *   - a plugin may run its own progress threads (the TCP plugin does).
 * Errors: a function returning anything but PLAIT_OK has called
 * host->set_error() with a message naming the peer and what failed.
 *
 * Point-to-point rules (what the core's collectives rely on; `plait plugin
 * test` checks each of them and names the rule a failure breaks):
 *   [order]    Messages of one (sender, receiver, communicator, tag) are
 *              matched to receives in the order both sides posted them.
 *              Nothing is promised across different tags or peers.
 *   [delivery] Every send whose request completed is delivered to a matching
 *              receive; no message is lost, duplicated or altered.
 *   [posting]  Sends and receives may be posted in either order, at every
 *              size: a message that arrives before its irecv is held (or its
 *              sender is held) until the receive comes, never dropped. An
 *              isend need NOT complete before its irecv is posted: a
 *              transport may hold a large send until the receiver is ready
 *              (tcp's single-copy path does), and the core never waits on a
 *              send before posting the receives its peers need.
 *   [grouping] A transport may hand everything posted between two of its
 *              test/wait calls (or a collective) to the network as one
 *              batch that completes as a whole: nccl does (one
 *              ncclGroupStart/End on one stream). Waiting on one request
 *              may then wait on every request posted with it, a receive on
 *              a send beside it. So a caller posts a send no earlier than
 *              the step at which its peer posts the matching receive, and
 *              never waits before the peer can post it without this rank's
 *              progress past that wait: a ring step posts its receive and
 *              its send together, an exchange posts all its receives and
 *              sends before its first wait. The core's users keep to this
 *              (docs/transport.md, "Posting order").
 *   [progress] Without PLAIT_COMM_ASYNC_PROGRESS, the plugin moves data only
 *              inside its own calls: every isend, irecv, test and wait call
 *              (on any communicator of the plugin) must advance every pending
 *              request, not just the one it is about. Repeated test() calls
 *              alone must complete a request whose peer does its part; the
 *              core relies on that while it computes. wait() on one request
 *              must keep the others moving (a rank waiting on a receive is
 *              often the only thing that can flush its own send).
 *   [timeout]  wait() with a timeout that expires returns PLAIT_ERR_TIMEOUT
 *              and leaves the request pending: a later wait/test may still
 *              complete it. The core watches its isend, irecv, test and
 *              wait calls and the posting of native collectives: one still
 *              inside the plugin past its timeout + 5 s + a tenth of the
 *              timeout (isend, irecv, test, posting: the communicator's
 *              timeout) ends the rank, naming the plugin and the call, since
 *              its thread cannot be taken back.
 *   [setup]    init() and derive() give up within the bootstrap's
 *              timeout_s (the job's [comm] timeout) when a member does not
 *              come, returning PLAIT_ERR_TIMEOUT; destroy() returns within
 *              the communicator's timeout even when its peers are gone. The
 *              core watches these calls as it watches wait(): one still
 *              inside the plugin past that timeout + 5 s + a tenth of it
 *              ends the rank, naming the plugin and the call. abort()
 *              (rule [loss]) is watched the same way. None of these calls,
 *              nor the loading of the plugin's file, may change the
 *              process's working directory or the environment variables
 *              plait reads (PLAIT_* and the few others plait/plugin.h
 *              names): the core refuses a call that did. (Nor may any
 *              later call: a run fails after the step it was made in.)
 *   [loss]     When a peer dies, every pending and later request with that
 *              peer fails with PLAIT_ERR_PEER_LOST within the wait's timeout,
 *              naming the peer. abort() makes every pending and later request
 *              of the communicator fail at once.
 *   [cleanup]  After destroy() of every communicator, the plugin holds no
 *              file descriptors, threads or memory it created for them.
 *   [tags]     Tags are full 32-bit values: every uint32_t is a valid tag and
 *              distinct tags never match each other; a transport must not
 *              reserve tag bits for itself. The core's collectives use tags
 *              with bit 31 set (1<<31 | (sequence mod 4)<<7 | phase < 128:
 *              at most 512 per communicator); user send/recv tags are below
 *              2^31. A transport may keep state per (peer, communicator,
 *              tag) until the communicator is destroyed: the set of tags in
 *              use is bounded, never an ever-growing counter.
 *   [zero]     Zero-byte messages are real messages: they match and complete
 *              receives and keep their place in the [order] rule.
 *
 * Delegating to another transport. A plugin may use another comm plugin for
 * some peers, typically shared memory within a host and the network across
 * hosts: in init(), read the host map (plait_bootstrap.host_of, ABI v1.1),
 * get the other plugin's table with host->plugin_ops(PLAIT_KIND_COMM, "tcp")
 * and call its init() with the same `plait_comm_init` (it is collective over
 * all ranks, so every rank must create the delegate, even one with no remote
 * peer); derive() and destroy() likewise forward to the delegate's derive()
 * and destroy(). Each request then belongs to one of the two transports; the
 * delegating plugin wraps the delegate's request handle with a tag saying
 * whose it is, and its test()/wait() must advance both (the [progress] rule
 * holds for the pair). The delegate's own bootstrap keys are namespaced by
 * the core per communicator, not per plugin: prefix your keys with your
 * plugin's name ("tcp." is taken by tcp), and call the bootstrap's
 * allgather/barrier in the same order on every rank.
 */
#ifndef PLAIT_COMM_H
#define PLAIT_COMM_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rendezvous services the core lends a plugin while it creates a
 * communicator: a key-value store shared by the communicator's members
 * (hosted by world rank 0; keys are namespaced per communicator by the core,
 * so plugins may use short names such as "addr.3"). Valid only during the
 * init/derive call it is passed to. All functions are blocking and
 * thread-safe; they fail with PLAIT_ERR_TIMEOUT after `timeout_s`. */
typedef struct plait_bootstrap {
    uint32_t struct_size;
    int rank;           /* this process's rank in the communicator being built */
    int size;           /* number of members */
    int local_rank;     /* index among members on this host */
    int local_size;     /* members on this host */
    uint32_t comm_id;   /* equal on all members, unique within the job; 0 = world */
    double timeout_s;   /* the job's [comm] timeout */
    void *ctx;          /* pass back to the functions below */
    /* Store `len` bytes under `key` (copied). */
    plait_status (*set)(void *ctx, const char *key, const void *value, size_t len);
    /* Wait until `key` exists, then copy at most `cap` bytes into `value`;
     * `*len` receives the stored length (which may exceed `cap`). */
    plait_status (*get)(void *ctx, const char *key, void *value, size_t cap, size_t *len);
    /* Every member contributes `bytes` from `mine`; `all` (size*bytes) receives
     * the contributions in rank order. */
    plait_status (*allgather)(void *ctx, const void *mine, void *all, size_t bytes);
    /* Returns when every member has entered. */
    plait_status (*barrier)(void *ctx);

    /* --- ABI v1.1 (check PLAIT_BOOTSTRAP_HAS_HOSTS before reading) ------- */
    /* Which members share a host: `size` entries, host_of[i] is a number
     * for member i's host (hostname + kernel boot id), equal for members on
     * the same host and different otherwise; the same number on every member
     * and in every communicator of the job (the job numbers its hosts
     * 0, 1, ... by their lowest world rank). Owned by the bootstrap. A
     * transport uses it to pick a shared-memory path for same-host peers and
     * the network for the others (see "Delegating" below). */
    const int *host_of;
} plait_bootstrap;

/* True if `bs` (from a possibly older core) carries the host map. */
#define PLAIT_BOOTSTRAP_HAS_HOSTS(bs)                                                              \
    ((bs)->struct_size >= offsetof(plait_bootstrap, host_of) + sizeof(const int *) && (bs)->host_of != NULL)

/* Arguments of plait_comm_ops.init: the world communicator. */
typedef struct plait_comm_init {
    uint32_t struct_size;
    const struct plait_host *host;
    const plait_config *config; /* read the plugin's own section through host->config_get */
    const plait_bootstrap *bootstrap;
    int world_rank, world_size;
} plait_comm_init;

/* Arguments of plait_comm_ops.derive: a communicator over a subset of the
 * parent's members, in the order given by `members` (parent ranks). */
typedef struct plait_comm_derive {
    uint32_t struct_size;
    const plait_bootstrap *bootstrap; /* over the child's members */
    int size;                         /* members in the child */
    const int *members;               /* size entries: parent rank of child rank i */
    int rank;                         /* this process's rank in the child */
} plait_comm_derive;

/* Native collectives a plugin may offer. Each pointer may be NULL. Buffers
 * follow the MPI/NCCL conventions: counts are element counts; reduce_scatter's
 * `count` is the per-rank result count (send holds size*count elements);
 * allgather's `count` is the per-rank contribution. `send` may equal `recv`
 * (in place) where the buffers' placement allows it. The operation is asynchronous: it
 * returns a request completed through plait_comm_ops.test/wait. Returning
 * PLAIT_ERR_UNSUPPORTED without side effects makes the core use its own
 * algorithm for that call. */
typedef struct plait_native_coll_ops {
    uint32_t struct_size;
    plait_status (*allreduce)(void *comm, const plait_buffer *send, const plait_buffer *recv,
                              size_t count, plait_dtype dtype, plait_redop op,
                              plait_stream *stream, void **req);
    plait_status (*reduce_scatter)(void *comm, const plait_buffer *send, const plait_buffer *recv,
                                   size_t count, plait_dtype dtype, plait_redop op,
                                   plait_stream *stream, void **req);
    plait_status (*allgather)(void *comm, const plait_buffer *send, const plait_buffer *recv,
                              size_t count, plait_dtype dtype, plait_stream *stream, void **req);
    plait_status (*broadcast)(void *comm, const plait_buffer *buf, size_t count, plait_dtype dtype,
                              int root, plait_stream *stream, void **req);
    plait_status (*reduce)(void *comm, const plait_buffer *send, const plait_buffer *recv,
                           size_t count, plait_dtype dtype, plait_redop op, int root,
                           plait_stream *stream, void **req);
    plait_status (*alltoall)(void *comm, const plait_buffer *send, const plait_buffer *recv,
                             size_t count, plait_dtype dtype, plait_stream *stream, void **req);
} plait_native_coll_ops;

/* Capability flags of a comm plugin. */
enum {
    /* Requests complete without the caller calling test/wait (a progress
     * thread or hardware drives them). Without it the core calls test()
     * periodically while overlapping communication with compute. */
    PLAIT_COMM_ASYNC_PROGRESS = 1u << 0,
    /* The plugin's streams are CUDA streams (plait_stream* is a cudaStream_t). */
    PLAIT_COMM_CUDA_STREAMS = 1u << 1
};

/* The function table of a comm plugin (plait_plugin_desc.ops). */
typedef struct plait_comm_ops {
    uint32_t struct_size;
    uint32_t flags;     /* PLAIT_COMM_* */
    uint32_t mem_kinds; /* PLAIT_MEM_KIND_BIT() of kinds isend/irecv accept directly */

    /* Create the world communicator. Collective over all ranks: every rank
     * calls it with the same bootstrap. On success *comm is the plugin's
     * state, owned by the plugin until destroy(). */
    plait_status (*init)(const plait_comm_init *args, void **comm);

    /* Create a child communicator over a subset of `parent`'s members
     * (the core's split()). Collective over the child's members only. The
     * child may share connections with the parent; it must keep its traffic
     * separate (different frames, tags or queues). Required. */
    plait_status (*derive)(void *parent, const plait_comm_derive *args, void **child);

    /* Release a communicator. Every request on it has completed or failed.
     * Children are destroyed before their parent. Never fails. */
    void (*destroy)(void *comm);

    /* Fail every pending and future operation on `comm` quickly with
     * PLAIT_ERR_PEER_LOST and `reason`. Called by the core, from any thread,
     * when the job is going down. Optional (NULL: the core waits for timeouts). */
    void (*abort)(void *comm, const char *reason);

    /* Register memory with the transport (RDMA, GPUDirect). Optional: NULL
     * means buffers need no registration and `mr` is always NULL. The handle
     * stays valid until dereg(); the memory must outlive it. */
    plait_status (*reg)(void *comm, const plait_buffer *buf, void **mr);
    void (*dereg)(void *comm, void *mr);

    /* Post a send of `buf` to `peer` with `tag`. The buffer must stay untouched
     * until the request completes. Messages between one (sender, receiver,
     * tag) triple are delivered in the order posted. `mr` is from reg() or NULL.
     * Zero-byte messages are legal and must still match a receive. */
    plait_status (*isend)(void *comm, const plait_buffer *buf, int peer, uint32_t tag,
                          void *mr, void **req);

    /* Post a receive into `buf` from `peer` with `tag`. A message longer than
     * `buf->bytes` fails the request with PLAIT_ERR_PROTOCOL (never an overrun);
     * a shorter one completes with its actual length. */
    plait_status (*irecv)(void *comm, const plait_buffer *buf, int peer, uint32_t tag,
                          void *mr, void **req);

    /* Non-blocking check. On completion (*done = 1) the request is released
     * and *bytes (if not NULL) holds the bytes moved; on an error return the
     * request is released too. */
    plait_status (*test)(void *comm, void *req, int *done, size_t *bytes);

    /* Block until the request completes. Ranks oversubscribe cores, so a
     * wait must sleep rather than spin; a short, bounded poll before sleeping
     * is fine (the tcp plugin polls up to [comm.tcp] spin_us, 50 us by
     * default, yielding the core between polls). Returns PLAIT_ERR_TIMEOUT after `timeout_s` with
     * the request still pending (the caller may wait again or abort); any
     * other return releases the request. */
    plait_status (*wait)(void *comm, void *req, double timeout_s, size_t *bytes);

    /* Native collectives; NULL when the plugin has none. ("coll" alone names
     * the core's collectives, host->coll; SDK 1.0 called this field `coll`,
     * which stays as an alias of the same pointer unless
     * PLAIT_NO_SDK_1_0_NAMES is defined.) */
#ifdef PLAIT_NO_SDK_1_0_NAMES
    const plait_native_coll_ops *native_coll;
#else
    union {
        const plait_native_coll_ops *native_coll;
        const plait_native_coll_ops *coll;
    };
#endif

    /* Streams for device memory (PLAIT_COMM_CUDA_STREAMS). All optional. */
    plait_status (*stream_create)(void *comm, plait_stream **stream);
    plait_status (*stream_sync)(void *comm, plait_stream *stream, double timeout_s);
    void (*stream_destroy)(void *comm, plait_stream *stream);

    /* --- ABI 1.4 ------------------------------------------------------- */
    /* Make `stream` (NULL: the communicator's own) wait on the device, not
     * on the host, for `native_event` — a device event's native handle
     * (plait_device_ops.event_native: a cudaEvent_t under
     * PLAIT_COMM_CUDA_STREAMS) — before the next operation posted on it
     * runs. The core calls it just before handing the plugin a native
     * collective or a send/receive of device memory whose plait_coll_opts
     * named a ready event, from the thread that posts it. Optional: NULL
     * makes the core wait for the event on the host first. */
    plait_status (*wait_event)(void *comm, plait_stream *stream, void *native_event);

    /* --- ABI 1.5 ------------------------------------------------------- */
    /* Record `native_event` (a device event's native handle, as for
     * wait_event) on `stream` (NULL: the communicator's own) after every
     * operation posted on it so far, so that the device's compute stream
     * can wait for their completion on the device instead of a host thread
     * waiting for them (plait_coll_api.wait_device, plait/coll.h). The core
     * calls it right after a native collective was posted, from the thread
     * that posted it, and keeps the event alive (never recording it
     * elsewhere) until that collective's request completed. Errors: a
     * status with the message set; the core then falls back to its host
     * wait. Optional: NULL means the consumers of this plugin's results
     * always wait on the host. */
    plait_status (*record_event)(void *comm, plait_stream *stream, void *native_event);
} plait_comm_ops;

#ifndef PLAIT_NO_SDK_1_0_NAMES
typedef plait_native_coll_ops plait_comm_coll_ops; /* the SDK 1.0 name */
#endif

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_COMM_H */
