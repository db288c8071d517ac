/*
 * The NCCL plugin's native collectives (plait_native_coll_ops) and streams.
 *
 * Every collective checks what it can before touching anything, so an
 * unsupported dtype, operator or memory kind answers PLAIT_ERR_UNSUPPORTED
 * without side effects (the core then uses its own algorithm or reports
 * that device memory needs this plugin). Then it launches queued sends and
 * receives (issue order is NCCL's matching order), hands the collective to
 * NCCL on the caller's stream (or the communicator's), settles a nonblocking
 * launch, and records the request's event on that stream.
 *
 * In-place forms NCCL lacks are staged through a temporary device buffer on
 * the same stream: plait's reduce_scatter with recv == send (MPI's form;
 * NCCL wants recv == send + rank*count), an allgather whose input overlaps
 * the output elsewhere than block `rank`, and an in-place alltoall (built
 * from grouped sends and receives, which must not overlap).
 */
#include <stdio.h>
#include <string.h>

#include "pnccl.h"

static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
static const char *const redop_names[] = {"sum", "prod", "min", "max", "avg"};

static size_t dtype_size(plait_dtype d) {
    switch (d) {
    case PLAIT_F64:
    case PLAIT_I64: return 8;
    case PLAIT_F32:
    case PLAIT_I32: return 4;
    case PLAIT_F16:
    case PLAIT_BF16: return 2;
    case PLAIT_U8: return 1;
    default: return 0;
    }
}

typedef enum coll_kind { ALLREDUCE, REDUCE_SCATTER, ALLGATHER, BROADCAST, REDUCE, ALLTOALL } coll_kind;
static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                         "alltoall"};

typedef struct coll_call {
    coll_kind kind;
    const plait_buffer *send, *recv; /* broadcast: recv only */
    size_t count;
    plait_dtype dtype;
    plait_redop op;
    int root;
    plait_stream *stream;
} coll_call;

/* A device buffer for NCCL: kind, device, NULL. UNSUPPORTED for host
 * memory (the core falls back), INVALID_ARG for the rest. */
static plait_status check_buffer(const pnccl_comm *c, const plait_buffer *b, size_t need, const char *what,
                                 const char *role) {
    const plait_host *h = c->host;
    if (b->kind != PLAIT_MEM_CUDA)
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "nccl: %s: the %s buffer is %s memory; NCCL moves CUDA device memory",
                            what, role, b->kind == PLAIT_MEM_HOST ? "host" : b->kind == PLAIT_MEM_HOST_PINNED
                                                                              ? "pinned host" : "unknown");
    if (b->device >= 0 && b->device != c->device)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s: the %s buffer is on GPU %d, the communicator drives GPU %d",
                            what, role, b->device, c->device);
    if (!b->ptr && need)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s: NULL %s buffer for %zu bytes", what, role, need);
    if (b->bytes < need)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s: the %s buffer holds %zu bytes, %zu needed", what, role,
                            b->bytes, need);
    return PLAIT_OK;
}

/* Temporary device memory ordered on stream `s`; freed on `s` right after
 * its last use (or, without stream-ordered allocation, when the request is
 * released). */
static void *tmp_alloc(pnccl_comm *c, pnccl_req *r, size_t bytes, cudaStream_t s, cudaError_t *e) {
    void *p = NULL;
    if (c->async_alloc) {
        *e = cudaMallocAsync(&p, bytes ? bytes : 1, s);
    } else {
        *e = cudaMalloc(&p, bytes ? bytes : 1);
        if (*e == cudaSuccess) r->tmp = p;
    }
    return *e == cudaSuccess ? p : NULL;
}

static void tmp_free(pnccl_comm *c, void *p, cudaStream_t s) {
    if (p && c->async_alloc) cudaFreeAsync(p, s);
}

/* long: one collective from its checks to its request: the overlap rules by
 * kind, the staging, the NCCL call by kind and the teardown when it fails
 * share the stream, the temporary buffers and the request */
static plait_status run(pnccl_comm *c, const coll_call *a, void **req_out) {
    const plait_host *h = c->host;
    *req_out = NULL;
    ncclDataType_t dt;
    ncclRedOp_t op = ncclSum;
    size_t esz = dtype_size(a->dtype);
    int reduces = a->kind == ALLREDUCE || a->kind == REDUCE_SCATTER || a->kind == REDUCE;
    char what[96];
    snprintf(what, sizeof what, "%s of %zu %s elements%s%s", coll_names[a->kind], a->count,
             (unsigned)a->dtype < PLAIT_DTYPE_COUNT_V1 ? dtype_names[a->dtype] : "?", reduces ? " " : "",
             reduces ? ((unsigned)a->op < PLAIT_REDOP_COUNT_V1 ? redop_names[a->op] : "?") : "");
    if (!pnccl_dtype(a->dtype, &dt) || !esz)
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "nccl: %s: dtype %d has no NCCL type", what, (int)a->dtype);
    if (reduces && !pnccl_redop(a->op, &op))
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "nccl: %s: operator %d has no NCCL counterpart", what, (int)a->op);
    size_t blk = a->count * esz, n = (size_t)c->size;
    size_t send_need = a->kind == REDUCE_SCATTER || a->kind == ALLTOALL ? blk * n : blk;
    size_t recv_need = a->kind == ALLGATHER || a->kind == ALLTOALL ? blk * n : blk;
    plait_status st = PLAIT_OK;
    if (a->kind == BROADCAST) {
        st = check_buffer(c, a->recv, blk, what, "broadcast");
    } else {
        st = check_buffer(c, a->send, send_need, what, "send");
        /* reduce: only the root's recv is written, others may pass NULL */
        if (st == PLAIT_OK && !(a->kind == REDUCE && a->root != c->rank))
            st = check_buffer(c, a->recv, recv_need, what, "receive");
    }
    if (st != PLAIT_OK) return st;
    if ((a->kind == BROADCAST || a->kind == REDUCE) && (a->root < 0 || a->root >= c->size))
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s: root %d outside communicator %u of %d ranks", what,
                            a->root, c->id, c->size);
    const void *sp = a->kind == BROADCAST ? a->recv->ptr : a->send->ptr;
    void *rp = a->recv ? a->recv->ptr : NULL;
    pnccl_overlap overlap = PNCCL_SEPARATE;
    switch (a->kind) {
    case ALLREDUCE:
    case BROADCAST: overlap = pnccl_overlap_same_size(sp, rp, blk); break;
    case REDUCE: overlap = rp ? pnccl_overlap_same_size(sp, rp, blk) : PNCCL_SEPARATE; break;
    case REDUCE_SCATTER: overlap = pnccl_overlap_reduce_scatter(sp, rp, blk, c->size, c->rank); break;
    case ALLGATHER: overlap = pnccl_overlap_allgather(sp, rp, blk, c->size, c->rank); break;
    case ALLTOALL: overlap = pnccl_overlap_alltoall(sp, rp, blk, c->size); break;
    }
    if (overlap == PNCCL_BAD_OVERLAP)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s: send and receive buffers overlap partially", what);

    pthread_mutex_lock(&c->mu);
    if (c->aborted) {
        st = h->set_error(c->fail_status, "nccl: %s on communicator %u: %s", what, c->id, c->why);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    cudaSetDevice(c->device);
    st = pnccl_launch_queued(c, 1);
    pnccl_req *r = st == PLAIT_OK ? pnccl_req_get(c, PNCCL_COLL) : NULL;
    if (!r) {
        if (st == PLAIT_OK) st = PLAIT_ERR_NO_MEMORY;
        else st = h->set_error(st, "nccl: %s on communicator %u: %s", what, c->id, c->why);
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    cudaStream_t s = a->stream ? (cudaStream_t)(void *)a->stream : c->stream;
    r->stream = s;
    r->bytes = recv_need;
    snprintf(r->what, sizeof r->what, "%s", what);
    double deadline = h->now() + c->cfg.timeout_s;

    /* staging */
    cudaError_t ce = cudaSuccess;
    void *tmp = NULL;
    const void *nsend = sp;
    void *nrecv = rp;
    if (overlap == PNCCL_STAGING) {
        if (a->kind == REDUCE_SCATTER) { /* result into tmp, copied to recv after */
            tmp = tmp_alloc(c, r, blk, s, &ce);
            nrecv = tmp;
        } else { /* allgather / alltoall: a private copy of the input */
            tmp = tmp_alloc(c, r, send_need, s, &ce);
            if (tmp) ce = cudaMemcpyAsync(tmp, sp, send_need, cudaMemcpyDeviceToDevice, s);
            nsend = tmp;
        }
    }
    ncclResult_t nr = ncclSuccess;
    if (ce == cudaSuccess) {
        switch (a->kind) {
        case ALLREDUCE: nr = ncclAllReduce(nsend, nrecv, a->count, dt, op, c->nc, s); break;
        case REDUCE_SCATTER: nr = ncclReduceScatter(nsend, nrecv, a->count, dt, op, c->nc, s); break;
        case ALLGATHER: nr = ncclAllGather(nsend, nrecv, a->count, dt, c->nc, s); break;
        case BROADCAST: nr = ncclBroadcast(nrecv, nrecv, a->count, dt, a->root, c->nc, s); break;
        case REDUCE: nr = ncclReduce(nsend, nrecv, a->count, dt, op, a->root, c->nc, s); break;
        case ALLTOALL: {
            ncclResult_t first = ncclSuccess;
            ncclGroupStart();
            for (int p = 0; p < c->size; p++) {
                ncclResult_t x = ncclSend((const char *)nsend + (size_t)p * blk, a->count, dt, p, c->nc, s);
                ncclResult_t y = ncclRecv((char *)nrecv + (size_t)p * blk, a->count, dt, p, c->nc, s);
                if (first == ncclSuccess && x != ncclSuccess && x != ncclInProgress) first = x;
                if (first == ncclSuccess && y != ncclSuccess && y != ncclInProgress) first = y;
            }
            nr = ncclGroupEnd();
            if (first != ncclSuccess) nr = first;
            break;
        }
        }
    }
    int res = ce != cudaSuccess ? ncclSuccess : pnccl_settle(c, nr, deadline);
    if (ce == cudaSuccess && res == ncclSuccess && overlap == PNCCL_STAGING && a->kind == REDUCE_SCATTER)
        ce = cudaMemcpyAsync(rp, tmp, blk, cudaMemcpyDeviceToDevice, s);
    if (tmp) tmp_free(c, tmp, s);
    if (ce == cudaSuccess && res == ncclSuccess) {
        r->qnext = NULL;
        pnccl_record_events(c, r);
        if (r->state == PNCCL_LAUNCHED) {
            *req_out = r;
            pthread_mutex_unlock(&c->mu);
            return PLAIT_OK;
        }
        st = h->set_error(r->status, "%s", r->err);
    } else {
        char why[512];
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(why, sizeof why, "staging an in-place %s on GPU %d: %s", coll_names[a->kind], c->device,
                     cudaGetErrorString(ce));
            st = PLAIT_ERR_SYSTEM;
        } else if (res < 0) {
            snprintf(why, sizeof why, "%s", c->why);
            st = c->fail_status;
        } else if (res == ncclInProgress) {
            snprintf(why, sizeof why, "NCCL did not finish launching it within %g s", c->cfg.timeout_s);
            st = PLAIT_ERR_TIMEOUT;
        } else {
            snprintf(why, sizeof why, "NCCL reports \"%s\" (%s): %s", ncclGetErrorString((ncclResult_t)res),
                     pnccl_result_hint((ncclResult_t)res), ncclGetLastError(c->nc));
            st = pnccl_status((ncclResult_t)res);
        }
        /* the communicator's state is unknown now: take it down */
        pnccl_go_down(c, st, why, 0);
        st = h->set_error(st, "nccl: %s on communicator %u (rank %d of %d) failed: %s", what, c->id, c->rank, c->size,
                          why);
    }
    pnccl_req_put(c, r);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static plait_status op_allreduce(void *comm, const plait_buffer *send, const plait_buffer *recv, size_t count,
                                 plait_dtype dtype, plait_redop op, plait_stream *stream, void **req) {
    coll_call a = {ALLREDUCE, send, recv, count, dtype, op, 0, stream};
    return run(comm, &a, req);
}

static plait_status op_reduce_scatter(void *comm, const plait_buffer *send, const plait_buffer *recv, size_t count,
                                      plait_dtype dtype, plait_redop op, plait_stream *stream, void **req) {
    coll_call a = {REDUCE_SCATTER, send, recv, count, dtype, op, 0, stream};
    return run(comm, &a, req);
}

static plait_status op_allgather(void *comm, const plait_buffer *send, const plait_buffer *recv, size_t count,
                                 plait_dtype dtype, plait_stream *stream, void **req) {
    coll_call a = {ALLGATHER, send, recv, count, dtype, PLAIT_SUM, 0, stream};
    return run(comm, &a, req);
}

static plait_status op_broadcast(void *comm, const plait_buffer *buf, size_t count, plait_dtype dtype, int root,
                                 plait_stream *stream, void **req) {
    coll_call a = {BROADCAST, NULL, buf, count, dtype, PLAIT_SUM, root, stream};
    return run(comm, &a, req);
}

static plait_status op_reduce(void *comm, const plait_buffer *send, const plait_buffer *recv, size_t count,
                              plait_dtype dtype, plait_redop op, int root, plait_stream *stream, void **req) {
    coll_call a = {REDUCE, send, recv, count, dtype, op, root, stream};
    return run(comm, &a, req);
}

static plait_status op_alltoall(void *comm, const plait_buffer *send, const plait_buffer *recv, size_t count,
                                plait_dtype dtype, plait_stream *stream, void **req) {
    coll_call a = {ALLTOALL, send, recv, count, dtype, PLAIT_SUM, 0, stream};
    return run(comm, &a, req);
}

const plait_native_coll_ops pnccl_coll_ops = {
    .struct_size = sizeof(plait_native_coll_ops),
    .allreduce = op_allreduce,
    .reduce_scatter = op_reduce_scatter,
    .allgather = op_allgather,
    .broadcast = op_broadcast,
    .reduce = op_reduce,
    .alltoall = op_alltoall,
};

/* ---- streams ------------------------------------------------------------------ */

plait_status pnccl_stream_create(void *comm, plait_stream **stream) {
    pnccl_comm *c = comm;
    pthread_mutex_lock(&c->mu);
    cudaSetDevice(c->device);
    cudaStream_t s = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    pthread_mutex_unlock(&c->mu);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *stream = NULL;
        return c->host->set_error(PLAIT_ERR_SYSTEM, "nccl: cudaStreamCreate on GPU %d: %s", c->device,
                                  cudaGetErrorString(e));
    }
    *stream = (plait_stream *)(void *)s;
    return PLAIT_OK;
}

plait_status pnccl_stream_sync(void *comm, plait_stream *stream, double timeout_s) {
    pnccl_comm *c = comm;
    pthread_mutex_lock(&c->mu);
    plait_status st = PLAIT_OK;
    pnccl_req *r = NULL;
    if (c->aborted) {
        st = c->host->set_error(c->fail_status, "nccl: stream sync on communicator %u: %s", c->id, c->why);
    } else {
        cudaSetDevice(c->device);
        r = pnccl_req_get(c, PNCCL_SYNC);
        if (!r) st = PLAIT_ERR_NO_MEMORY;
    }
    if (r) {
        r->stream = stream ? (cudaStream_t)(void *)stream : c->stream;
        snprintf(r->what, sizeof r->what, "stream synchronisation");
        pnccl_record_events(c, r);
        if (r->state != PNCCL_LAUNCHED) {
            st = c->host->set_error(r->status, "%s", r->err);
            pnccl_req_put(c, r);
            r = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!r) return st;
    st = pnccl_wait(c, r, timeout_s, NULL);
    if (st == PLAIT_ERR_TIMEOUT) { /* nobody will wait again: recycle it (re-recording the event is fine) */
        pthread_mutex_lock(&c->mu);
        pnccl_req_put(c, r);
        pthread_mutex_unlock(&c->mu);
    }
    return st;
}

void pnccl_stream_destroy(void *comm, plait_stream *stream) {
    pnccl_comm *c = comm;
    if (!stream) return;
    pthread_mutex_lock(&c->mu);
    cudaSetDevice(c->device);
    cudaStreamDestroy((cudaStream_t)(void *)stream);
    pthread_mutex_unlock(&c->mu);
}

/* An event and a stream of the communicator's GPU (NULL: its own), under
 * its mutex: `record` the event there, else make the stream wait for it. */
static plait_status event_on_stream(pnccl_comm *c, plait_stream *stream, void *native_event, int record) {
    const char *what = record ? "cudaEventRecord" : "cudaStreamWaitEvent";
    pthread_mutex_lock(&c->mu);
    plait_status st = PLAIT_OK;
    if (c->aborted) {
        st = c->host->set_error(c->fail_status, "nccl: %s on communicator %u: %s", what, c->id, c->why);
    } else {
        cudaSetDevice(c->device);
        /* an event recorded before a launch still in progress would precede it */
        if (record) st = pnccl_launch_queued(c, 1);
        cudaStream_t s = stream ? (cudaStream_t)(void *)stream : c->stream;
        cudaError_t e = cudaSuccess;
        if (st == PLAIT_OK)
            e = record ? cudaEventRecord((cudaEvent_t)native_event, s) : cudaStreamWaitEvent(s, (cudaEvent_t)native_event, 0);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = c->host->set_error(PLAIT_ERR_SYSTEM, "nccl: %s on GPU %d: %s", what, c->device, cudaGetErrorString(e));
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ABI 1.4: the core hands over a device event (a cudaEvent_t recorded on
 * the compute stream after the kernels that produce a buffer): the stream
 * that will run the next operation waits for it on the GPU, so no host
 * thread blocks on the compute stream. Queued point-to-point operations run
 * on c->stream too, so waiting there covers them. */
plait_status pnccl_wait_event(void *comm, plait_stream *stream, void *native_event) {
    return native_event ? event_on_stream(comm, stream, native_event, 0) : PLAIT_OK;
}

/* ABI 1.5: the core marks a collective's end on the stream it was posted
 * on, so the compute stream can wait for it on the GPU (plait/coll.h,
 * wait_device). */
plait_status pnccl_record_event(void *comm, plait_stream *stream, void *native_event) {
    pnccl_comm *c = comm;
    if (!native_event) return c->host->set_error(PLAIT_ERR_INVALID_ARG, "nccl: record_event of a NULL event");
    return event_on_stream(c, stream, native_event, 1);
}
