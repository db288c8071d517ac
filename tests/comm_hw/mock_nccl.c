/* The stand-in's NCCL functions; see mock_gpu.h. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_gpu_internal.h"

/* ---- NCCL ----------------------------------------------------------------------------- */

ncclResult_t ncclGetVersion(int *v) {
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : g.last; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    ncclResult_t r = clique_new_id(id);
    if (r != ncclSuccess) {
        LOCK();
        snprintf(g.last, sizeof g.last, "mock: cannot create a shared segment for a unique id");
        UNLOCK();
    }
    return r;
}

/* A call on communicator `c`: live, not in progress, this thread's device. */
static int usable(struct ncclComm *c, const char *what) {
    if (!c || c->aborted || c->destroyed) {
        misuse("%s on a communicator that was %s", what, !c ? "NULL" : c->aborted ? "aborted" : "destroyed");
        return 0;
    }
    if (c->state == ncclInProgress) misuse("%s on a communicator whose last call is still in progress", what);
    if (tl_dev != c->dev) misuse("%s on a communicator of GPU %d with GPU %d current", what, c->dev, tl_dev);
    return 1;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    if (memcmp(id.internal, "MOCKNCCL", 8) != 0 || n < 1 || n > MAXR || rank < 0 || rank >= n) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank;
    c->n = n;
    c->dev = tl_dev;
    c->blocking = !cfg || cfg->blocking != 0;
    LOCK();
    char why[256];
    ncclResult_t res = clique_join(c, &id, why, sizeof why);
    if (res != ncclSuccess) {
        snprintf(g.last, sizeof g.last, "%s", why);
        UNLOCK();
        free(c);
        return res;
    }
    c->all_next = g.comms;
    g.comms = c;
    *out = c;
    if (!c->blocking) {
        c->state = ncclInProgress;
        c->polls = g.inprog_polls;
        res = ncclInProgress;
    } else {
        /* every member joins from its own thread or process: poll */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (clique_joined(c) < n) {
            UNLOCK();
            nanosleep(&(struct timespec){0, 200000}, NULL);
            LOCK();
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec >= 30) {
                snprintf(c->last, sizeof c->last, "mock: timed out waiting for %d ranks", n - clique_joined(c));
                res = ncclSystemError;
                break;
            }
        }
        clique_sweep_created(0);
    }
    UNLOCK();
    return res;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    LOCK();
    pump();
    if (!c || c->aborted || c->destroyed) {
        misuse("ncclCommGetAsyncError on a %s communicator", !c ? "NULL" : c->aborted ? "aborted" : "destroyed");
        UNLOCK();
        return ncclInvalidArgument;
    }
    clique_sweep_created(0);
    char why[256];
    if (c->async_err == ncclSuccess && clique_peer_failed(c, why, sizeof why)) {
        c->async_err = ncclRemoteError;
        snprintf(c->last, sizeof c->last, "%s", why);
    }
    if (c->async_err != ncclSuccess) {
        *err = c->async_err;
        UNLOCK();
        return ncclSuccess;
    }
    if (c->state == ncclInProgress) {
        if (c->polls > 0) {
            c->polls--;
        } else if (c->pending) {
            place(c->pending->stream, c->pending);
            c->pending = NULL;
            g.launches++;
            c->state = ncclSuccess;
            pump();
        } else if (c->finalizing) {
            int busy = 0;
            for (struct CUstream_st *s = g.streams; s; s = s->all_next)
                for (size_t i = s->head; i < s->n; i++)
                    if (s->ops[i]->kind == OP_GROUP && s->ops[i]->nsub && s->ops[i]->subs[0]->comm == c &&
                        !s->ops[i]->done)
                        busy = 1;
            if (!busy) c->state = ncclSuccess;
        } else if (clique_joined(c) == c->n) {
            c->state = ncclSuccess; /* init done */
        }
    }
    *err = c->state;
    UNLOCK();
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    LOCK();
    g.aborts++;
    if (!c || c->aborted || c->destroyed) {
        misuse("ncclCommAbort on a communicator that was already released");
        UNLOCK();
        return ncclInvalidArgument;
    }
    c->aborted = 1;
    c->pending = NULL;
    clique_leave(c, 1); /* the peers see a remote error */
    pump();             /* its kernels end */
    mock_write_stats();
    UNLOCK();
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
    LOCK();
    if (!usable(c, "ncclCommFinalize")) {
        UNLOCK();
        return ncclInvalidArgument;
    }
    c->finalizing = 1;
    ncclResult_t r = ncclSuccess;
    if (!c->blocking) {
        c->state = ncclInProgress;
        c->polls = 0;
        r = ncclInProgress;
    }
    UNLOCK();
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    LOCK();
    pump();
    if (!c || c->aborted || c->destroyed) misuse("ncclCommDestroy on a released communicator");
    else {
        if (c->state == ncclInProgress) misuse("ncclCommDestroy while in progress");
        for (struct CUstream_st *s = g.streams; s; s = s->all_next)
            for (size_t i = s->head; i < s->n; i++)
                if (s->ops[i]->kind == OP_GROUP && s->ops[i]->nsub && s->ops[i]->subs[0]->comm == c &&
                    !s->ops[i]->done)
                    misuse("ncclCommDestroy with operations pending");
        c->destroyed = 1;
        clique_leave(c, 0);
        mock_write_stats();
    }
    UNLOCK();
    return ncclSuccess;
}

/* nccl.h declares these without `(void)` */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void) {
    if (tl_depth++ == 0) {
        LOCK();
        tl_gop = new_op(OP_GROUP);
        UNLOCK();
    }
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (tl_depth == 0) return ncclInvalidUsage;
    if (--tl_depth > 0) return ncclSuccess;
    LOCK();
    mop *o = tl_gop;
    tl_gop = NULL;
    ncclResult_t r = ncclSuccess;
    if (o->nsub == 0) {
        o->done = 1;
    } else {
        struct ncclComm *c = o->subs[0]->comm;
        struct CUstream_st *s = o->stream;
        for (int i = 1; i < o->nsub; i++)
            if (o->subs[i]->comm != c) misuse("a group mixes communicators");
        if (!c->blocking && g.inprog_polls > 0) {
            c->state = ncclInProgress;
            c->polls = g.inprog_polls;
            c->pending = o;
            o->stream = s;
            r = ncclInProgress;
        } else {
            place(s, o);
            g.launches++;
            pump();
        }
    }
    UNLOCK();
    return r;
}

/* Add one operation to the thread's group (opening one if needed). */
static ncclResult_t add(msub *x, cudaStream_t s, const char *what) {
    int own = tl_depth == 0;
    if (own) ncclGroupStart();
    LOCK();
    ncclResult_t r = ncclSuccess;
    if (!usable(x->comm, what)) {
        r = ncclInvalidArgument;
        free(x);
    } else if (!s) {
        misuse("%s on the legacy default stream", what);
        r = ncclInvalidArgument;
        free(x);
    } else {
        if (tl_gop->nsub && tl_gop->stream != s) misuse("a group spans several streams");
        tl_gop->stream = s;
        x->owner = tl_gop;
        tl_gop->subs[tl_gop->nsub++] = x;
        if (x->kind == SUB_COLL) x->seq = x->comm->coll_seq++;
        else if (x->kind == SUB_SEND) x->seq = x->comm->send_seq[x->peer]++;
        else x->seq = x->comm->recv_seq[x->peer]++;
    }
    UNLOCK();
    if (own) {
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess) r = e;
    }
    return r;
}

static msub *sub(int kind, int ckind, ncclComm_t c, const void *send, void *recv, size_t count, ncclDataType_t dt,
                 ncclRedOp_t op, int root, int peer) {
    msub *x = calloc(1, sizeof *x);
    *x = (msub){.kind = kind, .ckind = ckind, .comm = c, .send = send, .recv = recv, .count = count, .dt = dt,
                .op = op, .root = root, .peer = peer};
    return x;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
    return add(sub(SUB_COLL, C_ALLREDUCE, c, s, r, n, t, op, 0, 0), st, "ncclAllReduce");
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
    if (root < 0 || root >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_COLL, C_REDUCE, c, s, r, n, t, op, root, 0), st, "ncclReduce");
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st) {
    if (root < 0 || root >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_COLL, C_BCAST, c, s, r, n, t, ncclSum, root, 0), st, "ncclBroadcast");
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    return add(sub(SUB_COLL, C_ALLGATHER, c, s, r, n, t, ncclSum, 0, 0), st, "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
    return add(sub(SUB_COLL, C_RS, c, s, r, n, t, op, 0, 0), st, "ncclReduceScatter");
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    if (peer < 0 || peer >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_SEND, 0, c, s, NULL, n, t, ncclSum, 0, peer), st, "ncclSend");
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    if (peer < 0 || peer >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_RECV, 0, c, NULL, r, n, t, ncclSum, 0, peer), st, "ncclRecv");
}
