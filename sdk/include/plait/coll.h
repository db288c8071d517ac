/*
 * plait SDK — the core's collectives, as plugins see them (host->coll).
 *
 * Every communicator (world, and the DP/TP/PP groups split from it) is a
 * core `plait_comm`. Collectives run the core's algorithms over the comm
 * plugin's p2p, or the plugin's native collective when it has one.
 *
 * Rules shared by every collective:
 *   - All members call it in the same order with matching arguments
 *     (count, dtype, op, root); `[comm] check_collectives = true` verifies this.
 *   - `req == NULL` makes the call blocking. Otherwise it returns at once with
 *     a request the caller must finish with wait() (or test() until done);
 *     buffers stay untouched by the caller until then. The request is owned
 *     by the caller until that wait (or the test that reports done) releases
 *     it. A request never finished still runs, and comm_free waits for it,
 *     but its memory is never released: finish every request. Collectives on one
 *     communicator execute in issue order; a blocking call waits for earlier
 *     asynchronous ones on the same communicator.
 *   - `send == recv` means in place where MPI allows it.
 *   - A wait longer than the communicator's timeout fails with
 *     PLAIT_ERR_TIMEOUT, and a lost peer with PLAIT_ERR_PEER_LOST; the message
 *     names the operation, its sequence number, size and the peers waited on.
 *     After such an error the communicator is unusable (every later call fails).
 *   - Thread safety: calls on one communicator from several threads are
 *     serialised by the core; different communicators are independent.
 */
#ifndef PLAIT_COLL_H
#define PLAIT_COLL_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Algorithm choice (`[comm] algorithm`, or per call). */
typedef enum plait_coll_algo {
    PLAIT_ALGO_AUTO = 0,    /* by message size and group size */
    PLAIT_ALGO_RING = 1,    /* chunked, pipelined ring: bandwidth-optimal */
    PLAIT_ALGO_RHD = 2,     /* recursive halving-doubling: latency-optimal */
    PLAIT_ALGO_TREE = 3,    /* binomial tree (rooted ops, small messages) */
    PLAIT_ALGO_DIRECT = 4,  /* every rank exchanges with every other directly */
    /* Reductions in one canonical order that depends only on the group size:
     * the result for element i is the left-complete pairwise tree over member
     * contributions in rank order. Bit-identical across runs and algorithms;
     * used by deterministic mode. */
    PLAIT_ALGO_ORDERED = 5,
    PLAIT_ALGO_NATIVE = 6,  /* the comm plugin's own collective */
    /* Within each host, across hosts with one rank per host, within each
     * host again (allreduce, reduce_scatter, allgather on communicators whose
     * members span several hosts with equally many on each; elsewhere the
     * AUTO choice). Added after 1.0: an older core refuses it as unknown. */
    PLAIT_ALGO_HIER = 7
} plait_coll_algo;

/* ABI 1.6: how the float32 values of a sum travel between ranks (the
 * collective's wire format, so every comm plugin carries it). Reductions
 * still add in float32; only what crosses a link is compressed. Each value
 * is compressed once where it enters a link (a rank's contribution, or a
 * partial or final sum), and the sender keeps the value the receivers
 * decode, so every rank ends with the same result:
 *   allreduce       every rank gets the same values (the sum's compressed form);
 *   reduce_scatter  each block's owner gets the float32 sum of the
 *                   compressed contributions;
 *   allgather       (bf16 only) every block as its compressed form, the
 *                   sender's own block too.
 * Only PLAIT_F32 with PLAIT_SUM (allgather: any f32), and only over a
 * transport that moves host memory (the core's algorithms run them:
 * ordered/direct within a host or in deterministic mode, hierarchical
 * across hosts, where only the links between hosts carry compressed data
 * in the hierarchical form); PLAIT_ERR_INVALID_ARG / _UNSUPPORTED otherwise.
 * Deterministic for a given group, algorithm and host placement; bf16 is
 * per element, int8 and onebit scale blocks (256 and 64 values) counted
 * from each message's start. */
typedef enum plait_compression {
    PLAIT_COMPRESS_NONE = 0,
    PLAIT_COMPRESS_BF16 = 1,  /* 2 bytes a value, round to nearest even */
    PLAIT_COMPRESS_INT8 = 2,  /* 1 byte a value + a float scale (max|x|/127) per 256 */
    PLAIT_COMPRESS_ONEBIT = 3 /* sign bits + a float scale (root mean square) per 64, with error
                               * feedback: needs plait_coll_opts.residual */
} plait_compression;

/* The schemes' names in enum order, NULL-terminated: the choices of a
 * plugin's PLAIT_KEY_ENUM key ("grad_compression"), whose index is the
 * plait_compression value. */
#define PLAIT_COMPRESSION_NAMES {"none", "bf16", "int8", "onebit", NULL}

/* Floats of the error-feedback state (plait_coll_opts.residual) a
 * PLAIT_COMPRESS_ONEBIT collective of `count` elements on `n` ranks needs:
 * an allreduce 2*count (what its contribution lost, what its sums lost), a
 * reduce_scatter n*count (its whole input). */
static inline size_t plait_coll_residual_allreduce(size_t count, int n) { (void)n; return 2 * count; }
static inline size_t plait_coll_residual_reduce_scatter(size_t count, int n) { return (size_t)n * count; }

/* Per-call options; NULL means all defaults. */
typedef struct plait_coll_opts {
    uint32_t struct_size;
    plait_coll_algo algo;   /* AUTO = the communicator's configured choice */
    plait_mem_kind mem_kind;/* of both send and recv buffers */
    plait_stream *stream;   /* device collectives only */
    const char *label;      /* short name for errors and traces ("dp bucket 3"); may be NULL */
    /* ABI 1.4. Device buffers: the collective (and a send or receive) reads
     * and writes them only after this event of the open device
     * (plait/device.h), recorded on the compute stream after the last kernel
     * that writes or reads them (a DP bucket: after its last gradient's
     * backward kernel). NULL: the point of the call (the core records an
     * event there). Ignored for host memory and on a device without events.
     * The caller keeps the event alive, and does not record it again,
     * until the request finishes. */
    struct plait_device_event *ready;
    /* ABI 1.6: the wire format (plait_compression; 0 = float32 as given).
     * Check the core's minor (host->abi_version) before setting it: an
     * older core ignores the field. */
    uint32_t compression;
    /* ABI 1.6, PLAIT_COMPRESS_ONEBIT: the caller's error-feedback state,
     * plait_coll_residual_*() floats in the buffers' memory, zero before the
     * first call, kept untouched between the calls of one reduction (one
     * per tensor or bucket it reduces every step); the collective reads and
     * updates it. Required by onebit (PLAIT_ERR_INVALID_ARG without it),
     * ignored by the other schemes. */
    float *residual;
} plait_coll_opts;

/* Counters kept per communicator since its creation. */
typedef struct plait_comm_stats {
    uint32_t struct_size;
    uint64_t bytes_sent;     /* payload bytes this rank handed to the transport (a native
                              * collective: its whole input buffer, as the plugin's own
                              * algorithm moves it out of the core's sight) */
    uint64_t bytes_received;
    uint64_t collectives;    /* collectives started */
    double wait_seconds;     /* time the calling threads spent blocked in wait */
} plait_comm_stats;

typedef struct plait_coll_api {
    uint32_t struct_size;

    /* Rank of the caller and member count. Never fail. */
    int (*rank)(const plait_comm *comm);
    int (*size)(const plait_comm *comm);
    /* World rank of member `rank` (for messages). */
    int (*world_rank)(const plait_comm *comm, int rank);
    /* Short name of the communicator ("world", "dp", "tp", "pp", ...). */
    const char *(*name)(const plait_comm *comm);

    plait_status (*allreduce)(plait_comm *comm, const void *send, void *recv, size_t count,
                              plait_dtype dtype, plait_redop op, const plait_coll_opts *opts,
                              plait_request **req);
    /* send: size*count elements; recv: count elements (this rank's block). */
    plait_status (*reduce_scatter)(plait_comm *comm, const void *send, void *recv, size_t count,
                                   plait_dtype dtype, plait_redop op, const plait_coll_opts *opts,
                                   plait_request **req);
    /* send: count elements; recv: size*count elements in rank order. */
    plait_status (*allgather)(plait_comm *comm, const void *send, void *recv, size_t count,
                              plait_dtype dtype, const plait_coll_opts *opts, plait_request **req);
    plait_status (*broadcast)(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                              int root, const plait_coll_opts *opts, plait_request **req);
    /* recv is only written (and may be NULL) on non-root ranks. */
    plait_status (*reduce)(plait_comm *comm, const void *send, void *recv, size_t count,
                           plait_dtype dtype, plait_redop op, int root,
                           const plait_coll_opts *opts, plait_request **req);
    /* root's recv: size*count elements; others' recv may be NULL. */
    plait_status (*gather)(plait_comm *comm, const void *send, void *recv, size_t count,
                           plait_dtype dtype, int root, const plait_coll_opts *opts,
                           plait_request **req);
    /* root's send: size*count elements; others' send may be NULL. */
    plait_status (*scatter)(plait_comm *comm, const void *send, void *recv, size_t count,
                            plait_dtype dtype, int root, const plait_coll_opts *opts,
                            plait_request **req);
    /* send and recv: size*count elements; block j of send goes to rank j. */
    plait_status (*alltoall)(plait_comm *comm, const void *send, void *recv, size_t count,
                             plait_dtype dtype, const plait_coll_opts *opts, plait_request **req);
    plait_status (*barrier)(plait_comm *comm, const plait_coll_opts *opts, plait_request **req);

    /* Point-to-point on a communicator (peer = rank in `comm`). Matching is by
     * (peer, tag); order is kept per (peer, tag). */
    plait_status (*send)(plait_comm *comm, const void *buf, size_t count, plait_dtype dtype,
                         int peer, uint32_t tag, const plait_coll_opts *opts, plait_request **req);
    plait_status (*recv)(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                         int peer, uint32_t tag, const plait_coll_opts *opts, plait_request **req);

    /* Finish a request: wait blocks (sleeping) and releases it; test releases
     * it once *done is 1. Errors release the request. */
    plait_status (*wait)(plait_request *req);
    plait_status (*test)(plait_request *req, int *done);

    /* Collective over `comm`: members with equal `color` form a new
     * communicator, ordered by (key, old rank). color < 0: the caller joins
     * none and *out is NULL. The new communicator is named `name` (copied).
     * The caller owns *out and releases it with comm_free(). */
    plait_status (*split)(plait_comm *comm, int color, int key, const char *name,
                          plait_comm **out);
    /* Release a communicator from split(). Not collective. */
    void (*comm_free)(plait_comm *comm);

    /* Copy the communicator's counters into *out (fills up to out->struct_size). */
    void (*stats)(const plait_comm *comm, plait_comm_stats *out);

    /* ABI 1.5 (check PLAIT_COLL_HAS(coll, wait_device); fall back to wait).
     * Finish a request whose result only the open device's compute stream
     * will read (kernels queued after this call, or copies through the
     * device, which follow that stream). Where the operation's completion
     * is marked by a device event — device memory moved by a comm plugin
     * that records one on its stream (plait_comm_ops.record_event: nccl) —
     * this returns as soon as the mark exists (the collective was posted),
     * after making the compute stream wait for it on the device
     * (plait_device_ops.event_wait): no host thread waits for the transfer.
     * Elsewhere — host memory, a host transport, whose result arrives
     * through the host (staged device memory is copied back before the
     * request completes), a device or plugin without events — it is wait().
     * Either way the request is released and the buffers belong to the
     * caller again, for work on the compute stream; the host must not read
     * device memory behind the stream's back. Errors: as wait(); a
     * collective that fails after its mark made the communicator unusable,
     * and the next call or wait on it reports the error. */
    plait_status (*wait_device)(plait_request *req);
} plait_coll_api;

/* True if `coll` (a table from a possibly older core) has member `field`. */
#define PLAIT_COLL_HAS(coll, field)                                                  \
    ((coll)->struct_size >= offsetof(plait_coll_api, field) + sizeof((coll)->field) && \
     (coll)->field != NULL)

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_COLL_H */
