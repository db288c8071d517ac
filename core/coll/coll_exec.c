/*
 * Running one collective: pick the algorithm (AUTO by size and group size,
 * or the one requested where it exists for that collective), verify the
 * fingerprint when [comm] check_collectives is on, use the plugin's native
 * collective when it has one, and release what a failure left in flight.
 *
 * AUTO's crossovers come from `plait bench comm --algo A` over the TCP
 * plugin on loopback, 2 to 8 ranks sharing 2 cores; the figures are in
 * docs/measurements/2026-11-22-collectives-tcp-loopback.md.
 *
 * Why the tree wins small allreduces here: with ranks sharing cores, what
 * costs is the total number of messages and bytes moved (reduce + broadcast
 * send 2(n-1) messages, recursive doubling n·log2 n), not the depth; up to 4
 * ranks it holds to 16 MiB (tie there), beyond that to 4 MiB. The
 * pipelined Rabenseifner (rhd) wins large ones; the ring only takes over
 * past 32 MiB when the group is larger than 4 (its 2(n-1) steps cost
 * latency, Rabenseifner's fold costs a full extra transfer per folded pair).
 * Broadcast numbers are back-to-back throughput (the root does not wait for
 * the receivers), which favours direct sends from the root; for groups
 * larger than 4 the pipelined chain is used for large messages instead (the
 * root's link would otherwise carry n-1 copies).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "commstate/comm_device.h"
#include "commstate/comm_watchdog.h"
#include "coll/compress.h"
#include "commstate/request.h"
#include "runtime/error.h"
#include "runtime/log.h"

#define KiB (1u << 10)
#define MiB (1u << 20)


typedef plait_status (*algo_fn)(plait_coll_ctx *);

/* Bytes of the whole operation in the nccl-tests sense (for AUTO). */
static size_t op_bytes(const plait_coll_args *a, int n) {
    size_t b = a->count * plait_dtype_size(a->dtype);
    switch (a->kind) {
    case PLAIT_COLL_REDUCE_SCATTER:
    case PLAIT_COLL_ALLGATHER:
    case PLAIT_COLL_GATHER:
    case PLAIT_COLL_SCATTER:
    case PLAIT_COLL_ALLTOALL: return b * (size_t)n;
    default: return b;
    }
}

plait_coll_algo plait_coll_auto_algo(plait_coll_kind kind, size_t bytes, int n) {
    switch (kind) {
    case PLAIT_COLL_ALLREDUCE:
        if (bytes < (n <= 4 ? 16 * MiB : 4 * MiB)) return PLAIT_ALGO_TREE;
        return n > 4 && bytes >= 32 * MiB ? PLAIT_ALGO_RING : PLAIT_ALGO_RHD;
    case PLAIT_COLL_REDUCE_SCATTER:
    case PLAIT_COLL_ALLGATHER:
        /* bytes = the whole buffer (n blocks) */
        return bytes >= 32 * MiB && (n > 4 || kind == PLAIT_COLL_REDUCE_SCATTER) ? PLAIT_ALGO_RING : PLAIT_ALGO_RHD;
    case PLAIT_COLL_BROADCAST:
        if (n <= 4) return bytes < 64 * KiB ? PLAIT_ALGO_TREE : PLAIT_ALGO_DIRECT;
        return bytes < 1 * MiB ? PLAIT_ALGO_TREE : PLAIT_ALGO_RING;
    case PLAIT_COLL_REDUCE: return bytes < 1 * MiB ? PLAIT_ALGO_TREE : PLAIT_ALGO_RING;
    case PLAIT_COLL_GATHER:
    case PLAIT_COLL_SCATTER: return bytes < 64 * KiB ? PLAIT_ALGO_TREE : PLAIT_ALGO_DIRECT;
    case PLAIT_COLL_ALLTOALL: return bytes < 64 * KiB ? PLAIT_ALGO_DIRECT : PLAIT_ALGO_RING;
    default: return PLAIT_ALGO_DIRECT;
    }
}

/* The implementation of (kind, algo), or NULL where that pair does not
 * exist (the caller then uses AUTO's choice). */
static algo_fn lookup(plait_coll_kind kind, plait_coll_algo algo) {
    switch (kind) {
    case PLAIT_COLL_ALLREDUCE:
        switch (algo) {
        case PLAIT_ALGO_RING: return plait_ring_allreduce;
        case PLAIT_ALGO_RHD: return plait_rhd_allreduce;
        case PLAIT_ALGO_TREE: return plait_tree_allreduce;
        case PLAIT_ALGO_DIRECT: /* direct exchange with owners = the ordered algorithm */
        case PLAIT_ALGO_ORDERED: return plait_ordered_allreduce;
        default: return NULL;
        }
    case PLAIT_COLL_REDUCE_SCATTER:
        switch (algo) {
        case PLAIT_ALGO_RING: return plait_ring_reduce_scatter;
        case PLAIT_ALGO_RHD: return plait_rhd_reduce_scatter;
        case PLAIT_ALGO_DIRECT:
        case PLAIT_ALGO_ORDERED: return plait_ordered_reduce_scatter;
        default: return NULL;
        }
    case PLAIT_COLL_ALLGATHER:
        switch (algo) {
        case PLAIT_ALGO_RING: return plait_ring_allgather;
        case PLAIT_ALGO_RHD: return plait_rhd_allgather;
        case PLAIT_ALGO_DIRECT: return plait_direct_allgather;
        default: return NULL;
        }
    case PLAIT_COLL_BROADCAST:
        switch (algo) {
        case PLAIT_ALGO_RING: return plait_chain_broadcast;
        case PLAIT_ALGO_TREE:
        case PLAIT_ALGO_RHD: return plait_tree_broadcast;
        case PLAIT_ALGO_DIRECT: return plait_direct_broadcast;
        default: return NULL;
        }
    case PLAIT_COLL_REDUCE:
        switch (algo) {
        case PLAIT_ALGO_RING: return plait_chain_reduce;
        case PLAIT_ALGO_TREE:
        case PLAIT_ALGO_RHD: return plait_tree_reduce;
        case PLAIT_ALGO_DIRECT:
        case PLAIT_ALGO_ORDERED: return plait_ordered_reduce;
        default: return NULL;
        }
    case PLAIT_COLL_GATHER:
        return algo == PLAIT_ALGO_TREE ? plait_tree_gather : algo == PLAIT_ALGO_DIRECT ? plait_direct_gather : NULL;
    case PLAIT_COLL_SCATTER:
        return algo == PLAIT_ALGO_TREE ? plait_tree_scatter : algo == PLAIT_ALGO_DIRECT ? plait_direct_scatter : NULL;
    case PLAIT_COLL_ALLTOALL:
        return algo == PLAIT_ALGO_RING ? plait_pairwise_alltoall : algo == PLAIT_ALGO_DIRECT ? plait_direct_alltoall : NULL;
    case PLAIT_COLL_BARRIER: return plait_dissemination_barrier;
    default: return NULL;
    }
}

/* The core algorithm for `a` (native collectives aside): the requested
 * one where it exists for this collective, else AUTO's choice. */
static plait_coll_algo resolve(const plait_comm *comm, const plait_coll_args *a, algo_fn *fn) {
    plait_coll_algo requested = a->algo == PLAIT_ALGO_AUTO ? comm->settings.algorithm : a->algo;
    size_t bytes = op_bytes(a, comm->size);
    if (a->compression != PLAIT_COMPRESS_NONE && a->kind == PLAIT_COLL_ALLGATHER) {
        /* encoded blocks through an allgather of their own (coll_compress.c) */
        *fn = plait_compress_allgather;
        return plait_coll_auto_algo(a->kind, bytes, comm->size);
    }
    /* onebit keeps its error feedback per contribution: only the ordered
     * algorithm sends each contribution whole, once */
    if (a->compression != PLAIT_COMPRESS_ONEBIT && (*fn = plait_hier_choose(comm, a->kind, requested, bytes)) != NULL)
        return PLAIT_ALGO_HIER;
    if (a->compression != PLAIT_COMPRESS_NONE) {
        /* compressed sums: the ordered (direct) algorithm encodes what it
         * sends, as the hierarchical one does (coll/compress.h) */
        *fn = lookup(a->kind, PLAIT_ALGO_ORDERED);
        return PLAIT_ALGO_ORDERED;
    }
    if (requested != PLAIT_ALGO_AUTO && requested != PLAIT_ALGO_NATIVE && (*fn = lookup(a->kind, requested)))
        return requested;
    plait_coll_algo algo = plait_coll_auto_algo(a->kind, bytes, comm->size);
    *fn = lookup(a->kind, algo);
    return algo;
}

plait_coll_algo plait_coll_resolve_algo(const plait_comm *comm, const plait_coll_args *a) {
    algo_fn fn;
    return resolve(comm, a, &fn);
}

/* ---- check_collectives ----------------------------------------------- */

plait_coll_fingerprint plait_coll_fingerprint_of(const plait_coll_args *a) {
    plait_coll_fingerprint f = {(uint32_t)a->kind, (uint32_t)a->dtype, 0, 0, a->count, a->seq,
                                (uint32_t)a->compression, 0};
    if (a->kind == PLAIT_COLL_BARRIER) f.dtype = 0, f.count = 0;
    if (a->kind == PLAIT_COLL_ALLREDUCE || a->kind == PLAIT_COLL_REDUCE_SCATTER ||
        a->kind == PLAIT_COLL_REDUCE)
        f.op = (uint32_t)a->op;
    if (a->kind == PLAIT_COLL_BROADCAST || a->kind == PLAIT_COLL_REDUCE ||
        a->kind == PLAIT_COLL_GATHER || a->kind == PLAIT_COLL_SCATTER)
        f.root = a->root;
    return f;
}

static int describe_fp(const plait_coll_fingerprint *f, char *buf, size_t len) {
    plait_coll_kind k = (plait_coll_kind)f->kind;
    return snprintf(buf, len, "%s(count %llu, %s%s%s, root %d%s%s)", plait_coll_kind_name(k),
                    (unsigned long long)f->count, plait_dtype_name((plait_dtype)f->dtype),
                    f->op || k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_REDUCE_SCATTER ||
                            k == PLAIT_COLL_REDUCE
                        ? " "
                        : "",
                    f->op || k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_REDUCE_SCATTER ||
                            k == PLAIT_COLL_REDUCE
                        ? plait_redop_name((plait_redop)f->op)
                        : "",
                    f->root, f->compression ? ", compressed " : "",
                    f->compression ? plait_compress_name((plait_compression)f->compression) : "");
}

/* Every rank's fingerprint into `all`, over the transport's point-to-point
 * on host memory. A transport that moves device memory only (nccl) cannot
 * carry it here: the staging layer checks such calls before they reach
 * this one (plait_coll_fingerprints_agree). */
static plait_status gather_fingerprints(plait_coll_ctx *c, const plait_coll_fingerprint *mine,
                                        plait_coll_fingerprint *all) {
    const plait_comm *comm = c->comm;
    if (comm->ops->mem_kinds & (PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED)))
        return plait_rhd_allgather_bytes(c, mine, all, sizeof *mine, PLAIT_PHASE_CHECK);
    return plait_set_error(PLAIT_ERR_INTERNAL, "check_collectives on '%s': the transport moves device memory "
                                               "only, so the fingerprints travel through the staging layer",
                           comm->name);
}

/* Every rank's fingerprint against rank 0's; a mismatch named. */
static plait_status compare_fingerprints(const plait_coll_ctx *c, const plait_coll_fingerprint *all) {
    int n = c->size;
    int bad = 0;
    for (int q = 0; q < n; q++) bad += memcmp(&all[q], &all[0], sizeof *all) != 0;
    if (!bad) return PLAIT_OK;
    char msg[1536], d[128];
    size_t used = 0;
    plait_coll_describe(c, msg, sizeof msg);
    used = strlen(msg);
    used += (size_t)snprintf(msg + used, sizeof msg - used,
                             ": the ranks called different collectives at this point:");
    int shown = 0;
    for (int q = 0; q < n && used < sizeof msg && shown < 8;) {
        int last = q; /* a run of ranks with the same call */
        while (last + 1 < n && !memcmp(&all[last + 1], &all[q], sizeof *all)) last++;
        describe_fp(&all[q], d, sizeof d);
        if (last == q)
            used += (size_t)snprintf(msg + used, sizeof msg - used, " rank %d called %s;", q, d);
        else
            used += (size_t)snprintf(msg + used, sizeof msg - used, " ranks %d-%d called %s;", q,
                                     last, d);
        shown++;
        q = last + 1;
    }
    return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s", msg);
}

static plait_status check_fingerprint(plait_coll_ctx *c) {
    int n = c->size;
    plait_coll_fingerprint mine = plait_coll_fingerprint_of(c->a);
    plait_coll_fingerprint *all = malloc((size_t)n * sizeof *all);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = gather_fingerprints(c, &mine, all);
    if (st != PLAIT_OK) {
        free(all);
        return plait_wrap_error(st, "exchanging collective fingerprints");
    }
    st = compare_fingerprints(c, all);
    free(all);
    return st;
}

plait_status plait_coll_fingerprints_agree(plait_comm *comm, const plait_coll_args *args, plait_coll_algo algo,
                                          const plait_coll_fingerprint *all) {
    plait_coll_ctx c = {.comm = comm, .a = args, .algo = algo, .rank = comm->rank, .size = comm->size,
                        .esz = plait_dtype_size(args->dtype), .free_slot = -1};
    return compare_fingerprints(&c, all);
}

/* ---- native collectives ---------------------------------------------- */

static plait_status run_native(plait_coll_ctx *c, int *used) {
    const plait_coll_args *a = c->a;
    plait_comm *comm = c->comm;
    const plait_native_coll_ops *co = comm->ops->native_coll;
    *used = 0;
    if (!co) return PLAIT_OK;
    size_t n = (size_t)c->size, b = a->count * c->esz;
    plait_buffer s = {.ptr = (void *)(uintptr_t)a->send, .bytes = b, .kind = a->mem_kind, .device = -1};
    plait_buffer r = {.ptr = a->recv, .bytes = b, .kind = a->mem_kind, .device = -1};
    void *preq = NULL;
    plait_status st = plait_comm_ready_native(plait_comm_device_of(comm), comm->ops, comm->pcoll, a->mem_kind, a->ready, a->stream);
    if (st != PLAIT_OK) return st;
    st = PLAIT_ERR_UNSUPPORTED;
    plait_watchdog_enter_comm(comm, plait_coll_kind_name(a->kind), -1, 0);
#define HAS(f) (co->struct_size >= offsetof(plait_native_coll_ops, f) + sizeof co->f && co->f)
    switch (a->kind) {
    case PLAIT_COLL_ALLREDUCE:
        if (HAS(allreduce)) st = co->allreduce(comm->pcoll, &s, &r, a->count, a->dtype, a->op, a->stream, &preq);
        break;
    case PLAIT_COLL_REDUCE_SCATTER:
        s.bytes = b * n;
        if (HAS(reduce_scatter))
            st = co->reduce_scatter(comm->pcoll, &s, &r, a->count, a->dtype, a->op, a->stream, &preq);
        break;
    case PLAIT_COLL_ALLGATHER:
        r.bytes = b * n;
        if (HAS(allgather)) st = co->allgather(comm->pcoll, &s, &r, a->count, a->dtype, a->stream, &preq);
        break;
    case PLAIT_COLL_BROADCAST:
        if (HAS(broadcast)) st = co->broadcast(comm->pcoll, &r, a->count, a->dtype, a->root, a->stream, &preq);
        break;
    case PLAIT_COLL_REDUCE:
        if (HAS(reduce))
            st = co->reduce(comm->pcoll, &s, &r, a->count, a->dtype, a->op, a->root, a->stream, &preq);
        break;
    case PLAIT_COLL_ALLTOALL:
        s.bytes = r.bytes = b * n;
        if (HAS(alltoall)) st = co->alltoall(comm->pcoll, &s, &r, a->count, a->dtype, a->stream, &preq);
        break;
    default: break;
    }
#undef HAS
    plait_watchdog_leave();
    if (st == PLAIT_ERR_UNSUPPORTED) return PLAIT_OK;
    *used = 1;
    char d[512];
    plait_coll_describe(c, d, sizeof d);
    if (st != PLAIT_OK) return plait_wrap_error(st, "%s: the plugin's native collective", d);
    /* posted: a waiter for the device may go on once its end is marked on
     * the plugin's stream; this thread still waits for it on the host (errors,
     * timeouts, the plugin's request) before the next collective */
    if (a->req) plait_request_mark_posted(a->req, plait_comm_done_mark(plait_comm_device_of(comm), comm->ops, comm->pcoll,
                                                                     a->mem_kind, a->stream));
    plait_watchdog_enter_comm(comm, "wait", -1, comm->settings.timeout_s);
    st = comm->ops->wait(comm->pcoll, preq, comm->settings.timeout_s, NULL);
    plait_watchdog_leave();
    if (st == PLAIT_ERR_TIMEOUT) {
        plait_set_error(st, "%s: the plugin's native collective did not finish within %g s", d,
                        comm->settings.timeout_s);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        plait_comm_fail(comm, st, msg);
        if (comm->ops->abort) {
            plait_watchdog_enter_comm(comm, "wait", -1, 2.0);
            (void)comm->ops->wait(comm->pcoll, preq, 2.0, NULL);
            plait_watchdog_leave();
        } else {
            comm->scratch_leaked = 1;
        }
        return plait_set_error(st, "%s", msg);
    }
    if (st != PLAIT_OK) return plait_wrap_error(st, "%s: the plugin's native collective", d);
    /* what this rank handed the transport and got back (its own algorithm
     * moves the bytes out of sight): the input and the output buffers */
    int root = a->root == c->rank;
    size_t in = s.bytes, out = r.bytes;
    if (a->kind == PLAIT_COLL_BROADCAST) {
        in = root ? b : 0;
        out = root ? 0 : b;
    }
    if (a->kind == PLAIT_COLL_REDUCE && !root) out = 0;
    atomic_fetch_add(&comm->bytes_sent, in);
    atomic_fetch_add(&comm->bytes_received, out);
    return PLAIT_OK;
}

/* ---- execute ------------------------------------------------------------- */

/* A group of one: copies only. */
static void run_alone(const plait_coll_args *a, size_t esz) {
    size_t b = a->count * esz;
    switch (a->kind) {
    case PLAIT_COLL_BROADCAST:
    case PLAIT_COLL_BARRIER: return;
    default: plait_coll_copy(a->recv, a->send, b); return;
    }
}

/* In-place forms an algorithm cannot take directly get a temporary buffer:
 * reduce_scatter with the result at the front of its input (MPI style; the
 * NCCL form, recv = send + rank*count, runs in place) and alltoall. */
static plait_status fix_in_place(plait_coll_ctx *c, plait_coll_args *a, void **temp, void **user_recv) {
    size_t blk = a->count * c->esz, n = (size_t)c->size;
    if (a->kind == PLAIT_COLL_REDUCE_SCATTER && a->recv == a->send && c->rank != 0) {
        *temp = malloc(blk);
        *user_recv = a->recv;
        a->recv = *temp;
    } else if (a->kind == PLAIT_COLL_ALLTOALL && a->recv == a->send) {
        *temp = malloc(blk * n);
        if (*temp) memcpy(*temp, a->send, blk * n);
        a->send = *temp;
    } else {
        return PLAIT_OK;
    }
    if (!*temp)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for an in-place %s of %zu bytes",
                               plait_coll_kind_name(a->kind), blk);
    return PLAIT_OK;
}

/* After a failure with requests in flight: fail fast (abort so what is in
 * flight completes with an error), then release them; this thread's
 * message is kept. */
static void release(plait_coll_ctx *c, plait_status st) {
    if (st == PLAIT_OK || !c->active) return;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", plait_last_error());
    plait_comm_fail(c->comm, st, msg);
    plait_coll_drain(c);
    plait_set_error(st, "%s", msg);
}

plait_status plait_coll_check(plait_comm *comm, const plait_coll_args *args) {
    if (!comm->settings.check_collectives || args->internal || comm->size <= 1) return PLAIT_OK;
    plait_coll_ctx c = {.comm = comm, .a = args, .rank = comm->rank, .size = comm->size,
                        .esz = plait_dtype_size(args->dtype), .free_slot = -1};
    plait_status st = check_fingerprint(&c);
    release(&c, st);
    free(c.slots);
    return st;
}

plait_status plait_coll_execute(plait_comm *comm, const plait_coll_args *args) {
    plait_coll_args a = *args;
    plait_coll_ctx c = {.comm = comm, .a = &a, .rank = comm->rank, .size = comm->size,
                        .esz = plait_dtype_size(a.dtype), .free_slot = -1};
    plait_coll_algo requested = a.algo == PLAIT_ALGO_AUTO ? comm->settings.algorithm : a.algo;
    void *temp = NULL, *user_recv = NULL;
    algo_fn fn = NULL;
    c.algo = requested;
    plait_status st = PLAIT_OK;
    if (comm->settings.check_collectives && !a.internal && comm->size > 1) st = check_fingerprint(&c);
    if (st != PLAIT_OK) goto out;
    if (a.kind != PLAIT_COLL_BARRIER && a.count == 0) goto out;
    /* alone, host memory is copied here; device memory only ever reaches
     * this point on a transport that moves it itself (coll_staging.c stages
     * it for the others), and is the plugin's to copy, in its stream's
     * order after the ready event: the host may not touch it, nor run ahead
     * of the kernels that write it */
    if (comm->size == 1 && (plait_mem_is_host(a.mem_kind) || a.kind == PLAIT_COLL_BARRIER)) {
        run_alone(&a, c.esz);
        goto out;
    }
    if (a.compression != PLAIT_COMPRESS_NONE && !plait_mem_is_host(a.mem_kind)) {
        char d[512];
        plait_coll_describe(&c, d, sizeof d);
        st = plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s: %s compression runs the core's algorithms in host memory, "
                                                    "but the comm plugin moves this device memory itself (as nccl "
                                                    "does); use a transport that moves host memory (tcp, verbs) "
                                                    "or no compression", d, plait_compress_name(a.compression));
        goto out;
    }
    if (a.compression == PLAIT_COMPRESS_NONE &&
        (requested == PLAIT_ALGO_NATIVE || (requested == PLAIT_ALGO_AUTO && comm->ops->native_coll))) {
        int used = 0;
        c.algo = PLAIT_ALGO_NATIVE;
        st = run_native(&c, &used);
        if (used) atomic_store(&comm->last_algo, (int)PLAIT_ALGO_NATIVE);
        if (used || st != PLAIT_OK) goto out;
        if (requested == PLAIT_ALGO_NATIVE) {
            char d[512];
            plait_coll_describe(&c, d, sizeof d);
            st = plait_set_error(PLAIT_ERR_UNSUPPORTED,
                                 "%s: the comm plugin has no native %s for this dtype, operator and "
                                 "memory kind", d, plait_coll_kind_name(a.kind));
            goto out;
        }
    }
    if (!plait_mem_is_host(a.mem_kind)) {
        /* reached only when the transport moves this memory itself (coll_staging.c
         * stages it otherwise), but has no native form of this collective */
        char d[512];
        plait_coll_describe(&c, d, sizeof d);
        st = plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s: device buffers on a transport that moves device "
                                                    "memory need its native collectives; the core's "
                                                    "algorithms reduce in host memory", d);
        goto out;
    }
    c.algo = resolve(comm, &a, &fn);
    if ((st = fix_in_place(&c, &a, &temp, &user_recv)) != PLAIT_OK) goto out;
    atomic_store(&comm->last_algo, (int)c.algo);
    st = fn(&c);
    if (st == PLAIT_OK && user_recv) memcpy(user_recv, temp, a.count * c.esz);
out:
    release(&c, st);
    if (!c.active) free(temp); /* else the plugin may still write into it */
    free(c.slots);
    return st;
}
