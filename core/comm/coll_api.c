/*
 * The core's collectives on a communicator (comm/comm.h: plait_comm_allreduce,
 * ...), which the core calls directly and plugins reach through the
 * plait_coll_api table (host->coll): argument checks, normalisation of
 * in-place forms, and hand-off to the communicator's executor.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"

#include "coll/coll.h"
#include "commstate/comm_device.h"
#include "coll/compress.h"
#include "runtime/error.h"

int plait_comm_rank(const plait_comm *comm) { return comm->rank; }
int plait_comm_size(const plait_comm *comm) { return comm->size; }
int plait_comm_world_rank(const plait_comm *comm, int rank) {
    return rank >= 0 && rank < comm->size ? comm->world_ranks[rank] : -1;
}
const char *plait_comm_name(const plait_comm *comm) { return comm->name; }

static int has_reduction(plait_coll_kind k) {
    return k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_REDUCE_SCATTER || k == PLAIT_COLL_REDUCE;
}
static int has_root(plait_coll_kind k) {
    return k == PLAIT_COLL_BROADCAST || k == PLAIT_COLL_REDUCE || k == PLAIT_COLL_GATHER ||
           k == PLAIT_COLL_SCATTER;
}

/* Byte ranges [a, a+na) and [b, b+nb) overlap without being the same start. */
static int partial_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (!a || !b || !na || !nb || x == y) return 0;
    return x < y + nb && y < x + na;
}

/* A compressed collective (plait/coll.h, coll/compress.h): which ones exist. */
static plait_status check_compression(const plait_comm *comm, const plait_coll_args *a) {
    const char *what = plait_coll_kind_name(a->kind), *scheme = plait_compress_name(a->compression);
    if ((unsigned)a->compression > PLAIT_COMPRESS_ONEBIT)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': unknown compression %u", what, comm->name,
                               (unsigned)a->compression);
    int reduces = a->kind == PLAIT_COLL_ALLREDUCE || a->kind == PLAIT_COLL_REDUCE_SCATTER;
    if (a->dtype != PLAIT_F32 || !(reduces ? a->op == PLAIT_SUM : a->kind == PLAIT_COLL_ALLGATHER))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s on '%s': %s compression carries float32 sums (allreduce, reduce_scatter) and "
                               "float32 allgathers, not %s%s%s", what, comm->name, scheme,
                               plait_dtype_name(a->dtype), reduces ? " " : "", reduces ? plait_redop_name(a->op) : "");
    if (a->kind == PLAIT_COLL_ALLGATHER && a->compression != PLAIT_COMPRESS_BF16)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "allgather on '%s': %s compression is for sums; an allgather "
                                                      "takes bf16 only", comm->name, scheme);
    if (a->compression == PLAIT_COMPRESS_ONEBIT && !a->residual && a->count)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': onebit compression needs its error-feedback "
                                                      "state (plait_coll_opts.residual)", what, comm->name);
    return PLAIT_OK;
}

/* Check, normalise and submit. `a` has kind, buffers, count, dtype, op, root. */
static plait_status issue(plait_comm *comm, plait_coll_args *a, const plait_coll_opts *opts,
                          plait_request **req) {
    const char *what = plait_coll_kind_name(a->kind);
    if (req) *req = NULL;
    if (!comm) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: NULL communicator", what);
    if (opts) {
        if (opts->struct_size >= offsetof(plait_coll_opts, algo) + sizeof opts->algo) a->algo = opts->algo;
        if (opts->struct_size >= offsetof(plait_coll_opts, mem_kind) + sizeof opts->mem_kind)
            a->mem_kind = opts->mem_kind;
        if (opts->struct_size >= offsetof(plait_coll_opts, stream) + sizeof opts->stream)
            a->stream = opts->stream;
        if (opts->struct_size >= offsetof(plait_coll_opts, label) + sizeof opts->label && opts->label)
            snprintf(a->label, sizeof a->label, "%s", opts->label);
        if (opts->struct_size >= offsetof(plait_coll_opts, ready) + sizeof opts->ready) a->ready = opts->ready;
        if (opts->struct_size >= offsetof(plait_coll_opts, residual) + sizeof opts->residual) {
            a->compression = (plait_compression)opts->compression;
            a->residual = opts->residual;
        }
    }
    int n = comm->size, r = comm->rank;
    size_t esz = plait_dtype_size(a->dtype);
    if ((unsigned)a->algo > PLAIT_ALGO_HIER)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': unknown algorithm %d", what,
                               comm->name, (int)a->algo);
    if (a->kind == PLAIT_COLL_BARRIER) {
        a->count = 0;
        a->dtype = PLAIT_U8;
        return plait_comm_submit(comm, a, req);
    }
    if (!esz)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': unknown dtype %d", what,
                               comm->name, (int)a->dtype);
    if (has_reduction(a->kind) && (unsigned)a->op >= PLAIT_REDOP_COUNT_V1)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': unknown reduction operator %d",
                               what, comm->name, (int)a->op);
    if (a->compression != PLAIT_COMPRESS_NONE) {
        plait_status st = check_compression(comm, a);
        if (st != PLAIT_OK) return st;
    }
    if (has_root(a->kind) && (a->root < 0 || a->root >= n))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': root %d is not a rank (size %d)",
                               what, comm->name, a->root, n);
    if (a->count > SIZE_MAX / esz / (size_t)n)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': count %zu overflows", what,
                               comm->name, a->count);
    size_t blk = a->count * esz;
    int root = a->root == r;
    /* which buffers this rank needs */
    int need_send = 1, need_recv = 1;
    switch (a->kind) {
    case PLAIT_COLL_BROADCAST: need_send = 0; break;
    case PLAIT_COLL_REDUCE:
    case PLAIT_COLL_GATHER: need_recv = root; break;
    case PLAIT_COLL_SCATTER: need_send = root; break;
    default: break;
    }
    if (a->count && ((need_send && !a->send) || (need_recv && !a->recv)))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s' rank %d: NULL %s buffer", what,
                               comm->name, r, need_send && !a->send ? "send" : "receive");
    /* in-place forms */
    switch (a->kind) {
    case PLAIT_COLL_ALLREDUCE:
        if (partial_overlap(a->send, blk, a->recv, blk))
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s on '%s': send and receive buffers "
                                                          "overlap without being the same", what, comm->name);
        break;
    case PLAIT_COLL_ALLGATHER:
        /* send == recv (MPI_IN_PLACE) or send == block `rank` of recv (NCCL) */
        if (a->send == a->recv) a->send = (char *)a->recv + (size_t)r * blk;
        break;
    case PLAIT_COLL_GATHER:
        if (root && a->send == a->recv) a->send = (char *)a->recv + (size_t)r * blk;
        break;
    case PLAIT_COLL_SCATTER:
        if (root && a->send == a->recv) a->recv = (char *)(uintptr_t)a->send + (size_t)r * blk;
        break;
    case PLAIT_COLL_BROADCAST: a->send = a->recv; break;
    default: break;
    }
    /* the point after which the device buffers may be touched: taken here,
     * on the caller's thread, at the call (plait/device.h) */
    a->ready = a->count ? plait_comm_ready_take(plait_comm_device_of(comm), a->mem_kind, a->ready, &a->own_ready) : NULL;
    return plait_comm_submit(comm, a, req);
}

plait_status plait_comm_allreduce(plait_comm *comm, const void *send, void *recv, size_t count,
                                  plait_dtype dtype, plait_redop op, const plait_coll_opts *opts,
                                  plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_ALLREDUCE, .send = send, .recv = recv, .count = count,
                         .dtype = dtype, .op = op};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_reduce_scatter(plait_comm *comm, const void *send, void *recv, size_t count,
                                       plait_dtype dtype, plait_redop op,
                                       const plait_coll_opts *opts, plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                         .count = count, .dtype = dtype, .op = op};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_allgather(plait_comm *comm, const void *send, void *recv, size_t count,
                                  plait_dtype dtype, const plait_coll_opts *opts,
                                  plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_ALLGATHER, .send = send, .recv = recv, .count = count,
                         .dtype = dtype};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_broadcast(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                                  int root, const plait_coll_opts *opts, plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_BROADCAST, .send = buf, .recv = buf, .count = count,
                         .dtype = dtype, .root = root};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_reduce(plait_comm *comm, const void *send, void *recv, size_t count,
                               plait_dtype dtype, plait_redop op, int root,
                               const plait_coll_opts *opts, plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_REDUCE, .send = send, .recv = recv, .count = count,
                         .dtype = dtype, .op = op, .root = root};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_gather(plait_comm *comm, const void *send, void *recv, size_t count,
                               plait_dtype dtype, int root, const plait_coll_opts *opts,
                               plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_GATHER, .send = send, .recv = recv, .count = count,
                         .dtype = dtype, .root = root};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_scatter(plait_comm *comm, const void *send, void *recv, size_t count,
                                plait_dtype dtype, int root, const plait_coll_opts *opts,
                                plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_SCATTER, .send = send, .recv = recv, .count = count,
                         .dtype = dtype, .root = root};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_alltoall(plait_comm *comm, const void *send, void *recv, size_t count,
                                 plait_dtype dtype, const plait_coll_opts *opts,
                                 plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_ALLTOALL, .send = send, .recv = recv, .count = count,
                         .dtype = dtype};
    return issue(comm, &a, opts, req);
}

plait_status plait_comm_barrier(plait_comm *comm, const plait_coll_opts *opts, plait_request **req) {
    plait_coll_args a = {.kind = PLAIT_COLL_BARRIER};
    return issue(comm, &a, opts, req);
}

static plait_mem_kind opts_mem_kind(const plait_coll_opts *opts) {
    if (opts && opts->struct_size >= offsetof(plait_coll_opts, mem_kind) + sizeof opts->mem_kind)
        return opts->mem_kind;
    return PLAIT_MEM_HOST;
}

static struct plait_device_event *opts_ready(const plait_coll_opts *opts) {
    if (opts && opts->struct_size >= offsetof(plait_coll_opts, ready) + sizeof opts->ready) return opts->ready;
    return NULL;
}

static plait_status api_send(plait_comm *comm, const void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, const plait_coll_opts *opts,
                             plait_request **req) {
    if (!comm) return plait_set_error(PLAIT_ERR_INVALID_ARG, "send: NULL communicator");
    return plait_comm_p2p_after(comm, 1, buf, count, dtype, peer, tag, opts_mem_kind(opts), opts_ready(opts), req);
}

static plait_status api_recv(plait_comm *comm, void *buf, size_t count, plait_dtype dtype, int peer,
                             uint32_t tag, const plait_coll_opts *opts, plait_request **req) {
    if (!comm) return plait_set_error(PLAIT_ERR_INVALID_ARG, "recv: NULL communicator");
    return plait_comm_p2p_after(comm, 0, buf, count, dtype, peer, tag, opts_mem_kind(opts), opts_ready(opts), req);
}

static plait_status api_split(plait_comm *comm, int color, int key, const char *name,
                              plait_comm **out) {
    if (!comm || !out) return plait_set_error(PLAIT_ERR_INVALID_ARG, "split: NULL argument");
    return plait_comm_split(comm, color, key, name, out);
}

static const plait_coll_api table = {
    .struct_size = sizeof(plait_coll_api),
    .rank = plait_comm_rank,
    .size = plait_comm_size,
    .world_rank = plait_comm_world_rank,
    .name = plait_comm_name,
    .allreduce = plait_comm_allreduce,
    .reduce_scatter = plait_comm_reduce_scatter,
    .allgather = plait_comm_allgather,
    .broadcast = plait_comm_broadcast,
    .reduce = plait_comm_reduce,
    .gather = plait_comm_gather,
    .scatter = plait_comm_scatter,
    .alltoall = plait_comm_alltoall,
    .barrier = plait_comm_barrier,
    .send = api_send,
    .recv = api_recv,
    .wait = plait_request_wait,
    .test = plait_request_test,
    .split = api_split,
    .comm_free = plait_comm_free,
    .stats = plait_comm_get_stats,
    .wait_device = plait_request_wait_device,
};

const plait_coll_api *plait_coll_api_table(void) { return &table; }
