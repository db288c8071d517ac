/*
 * Internal interface of the collective algorithms (coll_*.c): the execution
 * context of one running collective, the point-to-point helpers the
 * algorithms are written with, and the algorithm entry points.
 *
 * An algorithm runs on one thread (the executor's), owns the communicator's
 * plugin communicator `pcoll` for its duration, and returns a plait_status
 * with the thread's error set. It never sends to itself, posts receives
 * before it blocks on sends (so it cannot deadlock on a transport that only
 * completes a send once the receive is posted: the in-process transport
 * behaves that way on purpose), and blocks only in plait_coll_wait*(), which
 * sleep in the plugin with the communicator's timeout.
 */
#ifndef PLAIT_CORE_COMM_COLL_H
#define PLAIT_CORE_COMM_COLL_H

#include "commstate/comm_state.h"
#include "coll/reduce.h"

/* One in-flight plugin request of the running collective. */
typedef struct plait_coll_slot {
    void *preq;
    size_t bytes;
    int peer;
    int is_send;
    int next_free;
} plait_coll_slot;

typedef struct plait_coll_ctx {
    plait_comm *comm;
    const plait_coll_args *a;
    plait_coll_algo algo;  /* resolved */
    int rank, size;
    size_t esz;            /* element size */
    plait_coll_slot *slots;
    int n_slots, free_slot, active;
} plait_coll_ctx;

/* Handles are small ints (-1 = none); a completed handle is set to -1. */
plait_status plait_coll_isend(plait_coll_ctx *c, const void *buf, size_t bytes, int peer,
                              unsigned phase, int *handle);
plait_status plait_coll_irecv(plait_coll_ctx *c, void *buf, size_t bytes, int peer, unsigned phase,
                              int *handle);
/* Block (sleeping, with the timeout) until the request completes. A receive
 * that delivers a length other than the posted one fails with
 * PLAIT_ERR_PROTOCOL (the ranks disagree about the collective's arguments). */
plait_status plait_coll_wait(plait_coll_ctx *c, int *handle);
plait_status plait_coll_waitall(plait_coll_ctx *c, int *handles, int n);
/* Non-blocking; *done = 1 once complete (handle then -1). */
plait_status plait_coll_test(plait_coll_ctx *c, int *handle, int *done);
/* Post a receive from `src` and a send to `dst`, wait for both. */
plait_status plait_coll_sendrecv(plait_coll_ctx *c, const void *sbuf, size_t sbytes, int dst,
                                 void *rbuf, size_t rbytes, int src, unsigned phase);
/* Scratch memory owned by the communicator, valid until the collective ends;
 * 64-byte aligned; NULL with the error set when out of memory. */
void *plait_coll_scratch(plait_coll_ctx *c, size_t bytes);
/* "allreduce #12 'dp bucket 3' (4096 B, f32 sum, ring) on comm 'world' rank 1/4 (world rank 1)" */
void plait_coll_describe(const plait_coll_ctx *c, char *buf, size_t len);
/* Release what a failed collective left in flight (after an abort). */
void plait_coll_drain(plait_coll_ctx *c);

/* Runs one collective on buffers the transport takes (coll_exec.c). */
plait_status plait_coll_execute(plait_comm *comm, const plait_coll_args *args);
/* [comm] check_collectives for `args` alone (what plait_coll_execute does
 * first), over a transport that moves host memory: every rank's call
 * compared, a mismatch named; PLAIT_OK when the check is off, the call is
 * internal or the group has one rank. For callers that run a collective as
 * another one (coll_staging.c). */
plait_status plait_coll_check(plait_comm *comm, const plait_coll_args *args);

/* The check's two halves for a caller that carries the exchange itself
 * (coll_staging.c, on a transport that moves device memory only): this
 * rank's fingerprint of `a`, and every rank's (`all`, comm->size of them)
 * compared, a mismatch named with `algo` in the collective's description. */
typedef struct plait_coll_fingerprint {
    uint32_t kind, dtype, op;
    int32_t root;
    uint64_t count, seq;
    uint32_t compression, pad;
} plait_coll_fingerprint;
plait_coll_fingerprint plait_coll_fingerprint_of(const plait_coll_args *a);
plait_status plait_coll_fingerprints_agree(plait_comm *comm, const plait_coll_args *a, plait_coll_algo algo,
                                          const plait_coll_fingerprint *all);

/* The algorithm AUTO runs for a collective of `kind` moving `bytes` (the
 * nccl-tests size: the whole buffer, n blocks for reduce_scatter, allgather,
 * gather, scatter and alltoall) on `n` ranks; the crossovers and their
 * measurements are in coll_exec.c. */
plait_coll_algo plait_coll_auto_algo(plait_coll_kind kind, size_t bytes, int n);
/* The core algorithm plait_coll_execute runs for `a` on host buffers when
 * no native collective takes it (the staging pins chunks to it). */
plait_coll_algo plait_coll_resolve_algo(const plait_comm *comm, const plait_coll_args *a);

/* An algorithm's entry point. */
typedef plait_status (*plait_coll_algo_fn)(plait_coll_ctx *c);

/* Helpers shared by the algorithms. */
static inline char *plait_byte_ptr(const void *p, size_t elems, size_t esz) {
    return (char *)(uintptr_t)p + elems * esz;
}
/* Balanced split of `count` into `parts`: first element of part i. */
static inline size_t plait_part_offset(size_t count, int parts, int i) {
    return (size_t)((unsigned __int128)count * (unsigned)i / (unsigned)parts);
}
/* Copy unless the pointers are equal. */
void plait_coll_copy(void *dst, const void *src, size_t bytes);

/* Tag phases inside one collective (the tag's low 7 bits): algorithms use
 * 0..63, the check_collectives fingerprint exchange 64..127. */
#define PLAIT_PHASE_CHECK 64

/* ---- algorithms (one family per file) --------------------------------- */
/* Each takes the context (whose args are normalised, count > 0, size > 1). */

/* coll_ring.c: chunked, pipelined ring; pipelined chain for rooted ops. */
plait_status plait_ring_allreduce(plait_coll_ctx *c);
plait_status plait_ring_reduce_scatter(plait_coll_ctx *c);
plait_status plait_ring_allgather(plait_coll_ctx *c);
plait_status plait_chain_broadcast(plait_coll_ctx *c);
plait_status plait_chain_reduce(plait_coll_ctx *c);

/* coll_rhd.c: recursive doubling / halving (Rabenseifner), any group size. */
plait_status plait_rhd_allreduce(plait_coll_ctx *c);
plait_status plait_rhd_reduce_scatter(plait_coll_ctx *c);
plait_status plait_rhd_allgather(plait_coll_ctx *c);
/* Allgather of `bytes` per rank from `mine` into `all` (size*bytes), by
 * recursive doubling, on tag phases [phase, phase+64). For small control
 * exchanges (fingerprints). */
plait_status plait_rhd_allgather_bytes(plait_coll_ctx *c, const void *mine, void *all, size_t bytes,
                                       unsigned phase);

/* coll_tree.c: binomial trees. */
plait_status plait_tree_broadcast(plait_coll_ctx *c);
plait_status plait_tree_reduce(plait_coll_ctx *c);
plait_status plait_tree_gather(plait_coll_ctx *c);
plait_status plait_tree_scatter(plait_coll_ctx *c);
plait_status plait_tree_allreduce(plait_coll_ctx *c);   /* reduce to 0 + broadcast */

/* coll_direct.c: every pair exchanges directly; dissemination barrier. */
plait_status plait_direct_alltoall(plait_coll_ctx *c);
plait_status plait_pairwise_alltoall(plait_coll_ctx *c);
plait_status plait_direct_allgather(plait_coll_ctx *c);
plait_status plait_direct_broadcast(plait_coll_ctx *c);
plait_status plait_direct_gather(plait_coll_ctx *c);
plait_status plait_direct_scatter(plait_coll_ctx *c);
plait_status plait_dissemination_barrier(plait_coll_ctx *c);

/* coll_hier.c: hierarchical (within the host, across hosts, within again). */
plait_status plait_hier_allreduce(plait_coll_ctx *c);
plait_status plait_hier_reduce_scatter(plait_coll_ctx *c);
plait_status plait_hier_allgather(plait_coll_ctx *c);
/* 1 when `comm`'s members span H > 1 hosts with L > 1 on each (*hosts = H,
 * *per_host = L); 0 otherwise (hierarchical does not apply). */
int plait_hier_shape(const plait_comm *comm, int *hosts, int *per_host);
/* The hierarchical implementation to run for `kind` when `requested` is
 * HIER (wherever it applies) or AUTO (where it applies and `bytes`, the
 * nccl-tests size, is large enough to gain from it); NULL = use the flat
 * choice. */
plait_coll_algo_fn plait_hier_choose(const plait_comm *comm, plait_coll_kind kind, plait_coll_algo requested,
                                     size_t bytes);

/* coll_compress.c: a compressed allgather (plait_coll_args.compression):
 * every rank's block encoded once, the encoded blocks allgathered with the
 * algorithm AUTO picks for their size, every block (its own too) decoded.
 * Compressed sums run the ordered and hierarchical algorithms below, which
 * encode what they send (coll/compress.h). */
plait_status plait_compress_allgather(plait_coll_ctx *c);

/* coll_ordered.c: reductions in the canonical order (deterministic mode). */
plait_status plait_ordered_allreduce(plait_coll_ctx *c);
plait_status plait_ordered_reduce_scatter(plait_coll_ctx *c);
plait_status plait_ordered_reduce(plait_coll_ctx *c);

#endif
