/*
 * Where a collective's buffers go: straight to the transport when it moves
 * their memory kind (plait_comm_ops.mem_kinds), else, for device memory on a
 * host-memory transport (tcp, verbs, threads), through pinned host staging,
 * and for host memory on a transport that moves device memory only (nccl),
 * through device scratch memory (through_device, below).
 * The core never hands a transport a kind it did not declare: pinned host
 * memory goes as plain host memory to a transport that declares only that.
 *
 * Staging. The device buffers are cut into chunks of about [comm]
 * staging_chunk bytes (m elements; for collectives whose buffers hold one
 * block per rank, m elements of every block, so the host side of a chunk is
 * at most staging_chunk bytes). Each chunk is one collective of the same
 * kind and algorithm on pinned host buffers, so the reduction happens in
 * host memory exactly as it does for host buffers. Two chunk slots
 * alternate (a double buffer per direction: slot k%2 has an input and an
 * output buffer). The communicator's copy thread (staging.h) makes every
 * device copy, in FIFO order: while this thread transfers chunk k, the copy
 * thread copies chunk k+1 out of the device and chunk k-1's result back in.
 * Before chunk k runs, this thread waits only for the jobs queued up to
 * chunk k's copy-out (which include chunk k-2's copy-back, the last reader
 * of slot k%2).
 *
 * Bit-identical to host buffers. A chunk runs the algorithm the whole
 * message would run (AUTO resolved once, for the whole size), and every
 * element keeps its block, so it is combined in the same order whenever
 * that order does not depend on where the element sits in the buffer
 * (tree, chain, direct, ordered; ring and recursive halving per block for
 * reduce_scatter). Where it does (floating-point allreduce by ring or
 * recursive halving-doubling, hierarchical reductions, or a plugin's native
 * collective, whose order is its own), the message is staged whole: one
 * chunk, the pool grown to it, the copies still done by the copy thread but
 * with nothing to overlap. Two ranks are exempt for sums, products and
 * averages: a + b and b + a are the same IEEE number. Compressed
 * collectives are staged whole too (their blocks count from the buffer's
 * start), with onebit's error feedback copied in before and back after.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "staging/coll_staging.h"

#include "coll/coll.h"
#include "commstate/comm_device.h"
#include "staging/staging.h"
#include "runtime/error.h"
#include "runtime/memory.h"

static int declared(const plait_comm *comm, plait_mem_kind kind) {
    return (comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(kind)) != 0;
}

/* Does the transport move host memory (pinned memory counts)? */
static int moves_host(const plait_comm *comm) {
    return declared(comm, PLAIT_MEM_HOST) || declared(comm, PLAIT_MEM_HOST_PINNED);
}

/* [comm] check_collectives for `a` as called (what plait_coll_execute does
 * first), `algo` named in a mismatch: over the transport's point-to-point
 * where it moves host memory (coll_exec.c), else as an internal allgather
 * of host bytes that the transport carries through device memory
 * (through_device, below) like the run's other control data. */
static plait_status check(plait_comm *comm, const plait_coll_args *a, plait_coll_algo algo) {
    if (moves_host(comm)) return plait_coll_check(comm, a);
    if (!comm->settings.check_collectives || a->internal || comm->size <= 1) return PLAIT_OK;
    plait_coll_fingerprint mine = plait_coll_fingerprint_of(a);
    plait_coll_fingerprint *all = malloc((size_t)comm->size * sizeof *all);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_coll_args x = {.kind = PLAIT_COLL_ALLGATHER,
                         .send = &mine,
                         .recv = all,
                         .count = sizeof mine,
                         .dtype = PLAIT_U8,
                         .algo = PLAIT_ALGO_AUTO,
                         .mem_kind = PLAIT_MEM_HOST,
                         .label = "check_collectives",
                         .seq = a->seq,
                         .internal = 1};
    plait_status st = plait_coll_run(comm, &x);
    if (st != PLAIT_OK)
        st = plait_wrap_error(st, "exchanging collective fingerprints");
    else
        st = plait_coll_fingerprints_agree(comm, a, algo, all);
    free(all);
    return st;
}

/* plait_coll_execute, checked here first where the transport moves device
 * memory only (its fingerprints cannot travel inside the algorithms). */
static plait_status execute(plait_comm *comm, const plait_coll_args *a) {
    if (moves_host(comm) || a->internal) return plait_coll_execute(comm, a);
    plait_status st = check(comm, a, a->algo == PLAIT_ALGO_AUTO ? comm->settings.algorithm : a->algo);
    if (st != PLAIT_OK) return st;
    plait_coll_args c = *a;
    c.internal = 1; /* checked */
    return plait_coll_execute(comm, &c);
}

/* One side of a staged collective on this rank: the caller's buffer (NULL
 * when this rank has none) and its blocks of `count` elements. */
typedef struct side {
    char *buf;
    int blocks;
} side;

/* Blocks per rank-sized buffer of `kind`: n where a buffer holds one block
 * per rank on some rank, else 1. The same on every rank (the chunk size
 * derives from it). */
static int max_blocks(plait_coll_kind kind, int n) {
    switch (kind) {
    case PLAIT_COLL_REDUCE_SCATTER:
    case PLAIT_COLL_ALLGATHER:
    case PLAIT_COLL_GATHER:
    case PLAIT_COLL_SCATTER:
    case PLAIT_COLL_ALLTOALL: return n;
    default: return 1;
    }
}

static void sides_of(const plait_comm *comm, const plait_coll_args *a, side *in, side *out) {
    int n = comm->size, root = a->root == comm->rank;
    char *s = (char *)(uintptr_t)a->send, *r = a->recv;
    *in = (side){s, 1};
    *out = (side){r, 1};
    switch (a->kind) {
    case PLAIT_COLL_REDUCE_SCATTER: in->blocks = n; break;
    case PLAIT_COLL_ALLGATHER: out->blocks = n; break;
    case PLAIT_COLL_BROADCAST: /* in place on recv: the root's goes out, the others' come back */
        *in = (side){root ? r : NULL, 1};
        *out = (side){root ? NULL : r, 1};
        break;
    case PLAIT_COLL_REDUCE: out->buf = root ? r : NULL; break;
    case PLAIT_COLL_GATHER: *out = (side){root ? r : NULL, n}; break;
    case PLAIT_COLL_SCATTER: *in = (side){root ? s : NULL, n}; break;
    case PLAIT_COLL_ALLTOALL: in->blocks = out->blocks = n; break;
    default: break;
    }
}

static int is_float(plait_dtype t) {
    return t == PLAIT_F32 || t == PLAIT_F64 || t == PLAIT_F16 || t == PLAIT_BF16;
}

/* Must the message be staged whole to stay bit-identical (see the top)? */
static int staging_whole(const plait_comm *comm, const plait_coll_args *a, plait_coll_algo algo) {
    plait_coll_algo requested = a->algo == PLAIT_ALGO_AUTO ? comm->settings.algorithm : a->algo;
    if (a->compression != PLAIT_COMPRESS_NONE) return 1; /* blocks and parts count from the whole buffer */
    if (comm->ops->native_coll && (requested == PLAIT_ALGO_AUTO || requested == PLAIT_ALGO_NATIVE)) return 1;
    if (a->kind != PLAIT_COLL_ALLREDUCE && a->kind != PLAIT_COLL_REDUCE_SCATTER) return 0;
    if (algo == PLAIT_ALGO_HIER) return 1;
    if (a->kind == PLAIT_COLL_REDUCE_SCATTER || !is_float(a->dtype)) return 0;
    if (algo != PLAIT_ALGO_RING && algo != PLAIT_ALGO_RHD) return 0;
    return !(comm->size == 2 && (a->op == PLAIT_SUM || a->op == PLAIT_PROD || a->op == PLAIT_AVG));
}

/* The communicator's device copy, or NULL when it has no device. */
static plait_comm_copy_fn device_copy(const plait_comm *comm) {
    const plait_comm_device *dev = plait_comm_device_of(comm);
    return dev ? dev->copy : NULL;
}

static plait_staging_copy job_of(const plait_comm *comm, plait_copy_dir dir, char *host, const side *sd, size_t count,
                               size_t off, size_t m, size_t esz, int on_comm) {
    return (plait_staging_copy){.dir = dir,
                              .host = host,
                              .dev = sd->buf + off * esz,
                              .bytes = m * esz,
                              .host_stride = m * esz,
                              .dev_stride = count * esz,
                              .blocks = sd->blocks,
                              .on_comm = on_comm,
                              .device = plait_comm_device_of(comm)};
}

/* A group of one on device memory: a device-to-device copy. */
static plait_status run_alone_on_device(const plait_comm *comm, const plait_coll_args *a) {
    if (a->kind == PLAIT_COLL_BROADCAST || a->kind == PLAIT_COLL_BARRIER || a->send == a->recv || !a->recv)
        return PLAIT_OK;
    plait_comm_copy_fn copy = device_copy(comm);
    if (!copy)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s of device memory, but no device is open to copy it",
                               plait_coll_kind_name(a->kind));
    return copy(a->recv, a->send, a->count * plait_dtype_size(a->dtype), PLAIT_COPY_ON_DEVICE);
}

/* Floats of onebit's error-feedback state for `a` (plait/coll.h). */
static size_t residual_floats(const plait_comm *comm, const plait_coll_args *a) {
    if (a->compression != PLAIT_COMPRESS_ONEBIT || !a->residual) return 0;
    return a->kind == PLAIT_COLL_ALLREDUCE ? plait_coll_residual_allreduce(a->count, comm->size)
                                           : plait_coll_residual_reduce_scatter(a->count, comm->size);
}

static plait_status staging_in_chunks(plait_comm *comm, const plait_coll_args *a);

/* A compressed collective's error feedback in device memory comes to the
 * host for it and goes back after (the collective is staged whole). */
static plait_status staged(plait_comm *comm, const plait_coll_args *a) {
    size_t rn = comm->size > 1 ? residual_floats(comm, a) : 0;
    if (!rn) return staging_in_chunks(comm, a);
    plait_comm_copy_fn copy = device_copy(comm);
    float *host = copy ? plait_alloc(rn * sizeof(float), PLAIT_MEM_HOST, 64, "comm staging") : NULL;
    if (!host)
        return plait_set_error(copy ? PLAIT_ERR_NO_MEMORY : PLAIT_ERR_UNSUPPORTED,
                               "%s of device memory: %s for its error feedback (%zu floats)",
                               plait_coll_kind_name(a->kind), copy ? "no host memory" : "no device to copy it", rn);
    plait_coll_args c = *a;
    c.residual = host;
    plait_status st = copy(host, a->residual, rn * sizeof(float), PLAIT_COPY_TO_HOST);
    if (st == PLAIT_OK) st = staging_in_chunks(comm, &c);
    if (st == PLAIT_OK) st = copy(a->residual, host, rn * sizeof(float), PLAIT_COPY_TO_DEVICE);
    if (st == PLAIT_OK || !comm->scratch_leaked) plait_free(host);
    return st;
}

static plait_status staging_in_chunks(plait_comm *comm, const plait_coll_args *a) {
    char what[160];
    snprintf(what, sizeof what, "%s #%llu%s%s%s of %zu elements in device memory, staged through pinned host memory",
             plait_coll_kind_name(a->kind), (unsigned long long)a->seq, a->label[0] ? " '" : "", a->label,
             a->label[0] ? "'" : "", a->count);
    if (!device_copy(comm))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s: no device is open to copy it (device memory kind %d)",
                               what, (int)a->mem_kind);
    if (comm->size == 1) return run_alone_on_device(comm, a);
    plait_staging *sg = NULL;
    plait_status st = plait_staging_of(comm, &sg);
    if (st != PLAIT_OK) return plait_wrap_error(st, "%s", what);

    int n = comm->size;
    size_t esz = plait_dtype_size(a->dtype), count = a->count;
    plait_coll_algo algo = plait_coll_resolve_algo(comm, a);
    int whole = staging_whole(comm, a, algo);
    size_t blocks = (size_t)max_blocks(a->kind, n);
    size_t m = whole ? count : comm->settings.staging_chunk / (esz * blocks);
    if (m == 0) m = 1;
    if (m > count) m = count;
    size_t chunks = (count + m - 1) / m;
    char *buf[4];
    if ((st = plait_staging_buffers(sg, m * esz * blocks, buf)) != PLAIT_OK) return plait_wrap_error(st, "%s", what);

    side in, out;
    sides_of(comm, a, &in, &out);
    int bcast = a->kind == PLAIT_COLL_BROADCAST;
    plait_mem_kind host_kind = declared(comm, PLAIT_MEM_HOST_PINNED) ? PLAIT_MEM_HOST_PINNED : PLAIT_MEM_HOST;
    uint64_t ready[4] = {0}; /* ready[k&3]: the ticket chunk k waits for */
    const char *failed = NULL;
    /* With a ready event (ABI 1.4 device) the copies run on the device's
     * communication stream once the compute stream has passed the event:
     * this thread waits for that point only, never for the whole device,
     * and the compute stream keeps running what was queued after it. */
    int on_comm = a->ready != NULL;
    if (on_comm && (st = plait_comm_ready_wait(plait_comm_device_of(comm), a->ready)) != PLAIT_OK) return plait_wrap_error(st, "%s", what);

#define CHUNK_LEN(k) ((k) + 1 == chunks ? count - (k) * m : m)
#define POST_OUT(k)                                                                                        \
    do {                                                                                                   \
        if (in.buf) {                                                                                      \
            plait_staging_copy j =                                                                           \
                job_of(comm, PLAIT_COPY_TO_HOST, buf[(k) & 1], &in, count, (k) * m, CHUNK_LEN(k), esz, on_comm); \
            (void)plait_staging_post(sg, &j, &ready[(k) & 3]);                                               \
        } else {                                                                                           \
            ready[(k) & 3] = plait_staging_posted(sg);                                                       \
        }                                                                                                  \
    } while (0)

    POST_OUT(0);
    if (chunks > 1) POST_OUT(1);
    size_t k = 0;
    for (; k < chunks; k++) {
        size_t len = CHUNK_LEN(k);
        if ((st = plait_staging_wait(sg, ready[k & 3])) != PLAIT_OK) {
            failed = "copying out";
            break;
        }
        char *hin = buf[k & 1], *hout = bcast ? hin : buf[2 + (k & 1)];
        plait_coll_args c = *a;
        c.req = NULL; /* one chunk of it */
        c.count = len;
        c.send = in.buf || bcast ? hin : NULL;
        c.recv = out.buf || bcast ? hout : NULL;
        c.mem_kind = host_kind;
        if (!whole) c.algo = algo;
        if (k > 0) c.internal = 1; /* check_collectives looked at the first chunk */
        plait_staging_mark_transfer(sg, 1);
        st = execute(comm, &c);
        plait_staging_mark_transfer(sg, 0);
        if (st != PLAIT_OK) {
            failed = "transferring";
            break;
        }
        if (out.buf) {
            plait_staging_copy j = job_of(comm, PLAIT_COPY_TO_DEVICE, hout, &out, count, k * m, len, esz, on_comm);
            uint64_t t;
            (void)plait_staging_post(sg, &j, &t);
        }
        if (k + 2 < chunks) POST_OUT(k + 2);
    }
#undef POST_OUT
#undef CHUNK_LEN
    if (!failed && (st = plait_staging_wait(sg, plait_staging_posted(sg))) != PLAIT_OK) {
        failed = "copying back";
        k = chunks - 1;
    }
    if (!failed) return PLAIT_OK;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", plait_last_error());
    plait_staging_cancel(sg);
    if (chunks == 1)
        return plait_set_error(st, "%s (whole, %s): %s", what, failed, msg);
    return plait_set_error(st, "%s (chunk %zu of %zu, %s): %s", what, k + 1, chunks, failed, msg);
}

/* Gather and scatter of device memory on a transport that moves it itself
 * through native collectives that lack them (NCCL has neither): a gather is
 * an allgather into the root's buffer (into device scratch elsewhere), a
 * scatter a broadcast of the root's whole buffer (into device scratch
 * elsewhere) followed by a device copy of each rank's block. They serve
 * rare rooted transfers (a checkpoint's shards), so moving n blocks to
 * every rank instead of one does not matter. */
static int rooted_by_native(const plait_comm *comm, const plait_coll_args *a) {
    return (a->kind == PLAIT_COLL_GATHER || a->kind == PLAIT_COLL_SCATTER) && !plait_mem_is_host(a->mem_kind) &&
           comm->ops->native_coll && comm->size > 1 && a->count;
}

static plait_status rooted_on_device(plait_comm *comm, const plait_coll_args *a) {
    /* [comm] check_collectives compares the call as made (a gather on one
     * rank against an allgather elsewhere is a mismatch), not what it
     * becomes here */
    plait_status st = check(comm, a, PLAIT_ALGO_AUTO);
    if (st != PLAIT_OK) return st;
    const plait_comm_device *dev = plait_comm_device_of(comm);
    int root = a->root == comm->rank;
    size_t blk = a->count * plait_dtype_size(a->dtype), all = blk * (size_t)comm->size;
    if (!root && (!dev || !dev->alloc || !dev->free || !dev->copy))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s of device memory on '%s': no device to hold the other "
                                                      "ranks' blocks", plait_coll_kind_name(a->kind), comm->name);
    char *tmp = root ? NULL : dev->alloc(all, "comm gather/scatter scratch");
    if (!root && !tmp)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s on '%s': no device memory for %zu bytes of scratch",
                               plait_coll_kind_name(a->kind), comm->name, all);
    plait_coll_args c = *a;
    c.internal = 1; /* checked above */
    c.req = NULL;   /* its result is not ready when this part was posted */
    if (a->kind == PLAIT_COLL_GATHER) {
        c.kind = PLAIT_COLL_ALLGATHER;
        c.recv = root ? a->recv : tmp;
    } else {
        c.kind = PLAIT_COLL_BROADCAST;
        c.count = a->count * (size_t)comm->size;
        c.recv = root ? (void *)(uintptr_t)a->send : tmp;
        c.send = c.recv;
    }
    st = execute(comm, &c);
    if (st == PLAIT_OK && a->kind == PLAIT_COLL_SCATTER) {
        const char *mine = (const char *)c.recv + (size_t)comm->rank * blk;
        if (mine != (const char *)a->recv) st = dev->copy(a->recv, mine, blk, PLAIT_COPY_ON_DEVICE);
    }
    if (tmp && st != PLAIT_ERR_TIMEOUT) dev->free(tmp); /* else the plugin may still write into it */
    return st;
}

/* A collective on memory the transport moves itself. */
static plait_status run_declared(plait_comm *comm, const plait_coll_args *a) {
    return rooted_by_native(comm, a) ? rooted_on_device(comm, a) : execute(comm, a);
}

/* Host buffers on a transport that moves device memory only (nccl): the
 * run's control data (a loss, norms, a barrier). Copied whole into the
 * communicator's device scratch, reduced by the plugin's native collective
 * there, copied back; a barrier is a one-element allreduce. [comm]
 * check_collectives compares the call as made, before it becomes another. */
static plait_status through_device(plait_comm *comm, const plait_coll_args *a, const plait_comm_device *dev) {
    if (comm->size == 1) return execute(comm, a); /* host copies only */
    plait_status st = check(comm, a, PLAIT_ALGO_AUTO);
    if (st != PLAIT_OK) return st;
    plait_coll_args c = *a;
    c.internal = 1; /* checked above */
    c.req = NULL;   /* its result is not ready when this part was posted */
    int32_t token = 0, token_out = 0;
    if (a->kind == PLAIT_COLL_BARRIER) {
        c.kind = PLAIT_COLL_ALLREDUCE;
        c.send = &token;
        c.recv = &token_out;
        c.count = 1;
        c.dtype = PLAIT_I32;
        c.op = PLAIT_SUM;
    }
    side in, out;
    sides_of(comm, &c, &in, &out);
    int bcast = c.kind == PLAIT_COLL_BROADCAST;
    size_t esz = plait_dtype_size(c.dtype);
    size_t bin = in.buf ? c.count * esz * (size_t)in.blocks : 0;
    size_t bout = out.buf ? c.count * esz * (size_t)out.blocks : 0;
    if (bcast) bout = bin = c.count * esz;
    plait_staging *sg = NULL;
    char *d[2];
    st = plait_staging_of(comm, &sg);
    if (st == PLAIT_OK) st = plait_staging_device_buffers(sg, dev, bin, bout, d);
    char *din = bcast ? d[1] : d[0];
    if (st == PLAIT_OK && in.buf) st = dev->copy(din, in.buf, bin, PLAIT_COPY_TO_DEVICE);
    if (st == PLAIT_OK) {
        c.send = in.buf || bcast ? din : NULL;
        c.recv = out.buf || bcast ? d[1] : NULL;
        c.mem_kind = dev->kind;
        /* the copy in ran on the compute stream; the transport's own stream
         * (nccl's) follows it only through an event (plait/device.h) */
        c.ready = plait_comm_ready_take(dev, dev->kind, NULL, &c.own_ready);
        st = run_declared(comm, &c);
        plait_comm_ready_release(dev, c.ready, c.own_ready);
    }
    if (st == PLAIT_OK && out.buf) st = dev->copy(out.buf, d[1], bout, PLAIT_COPY_TO_HOST);
    if (st == PLAIT_OK) return st;
    return plait_wrap_error(st, "%s #%llu%s%s%s in host memory, carried through device memory (the comm plugin moves "
                                "device memory only)",
                            plait_coll_kind_name(a->kind), (unsigned long long)a->seq, a->label[0] ? " '" : "",
                            a->label, a->label[0] ? "'" : "");
}

plait_status plait_coll_run(plait_comm *comm, const plait_coll_args *args) {
    plait_mem_kind kind = args->mem_kind;
    if (args->count == 0 && args->kind != PLAIT_COLL_BARRIER) return execute(comm, args);
    if (declared(comm, kind)) return run_declared(comm, args);
    if (!plait_mem_is_host(kind)) return staged(comm, args);
    if (declared(comm, PLAIT_MEM_HOST)) { /* pinned memory is host memory too */
        plait_coll_args a = *args;
        a.mem_kind = PLAIT_MEM_HOST;
        return execute(comm, &a);
    }
    const plait_comm_device *dev = plait_comm_device_of(comm);
    if (dev && dev->alloc && dev->free && declared(comm, dev->kind)) return through_device(comm, args, dev);
    return execute(comm, args); /* the transport refuses it, saying why */
}
