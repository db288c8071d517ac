/*
 * The NCCL plugin's data path: requests and their CUDA events, queued
 * point-to-point launched as one NCCL group, test/wait with polls (a short
 * spin, then sleeps)
 * and NCCL's asynchronous error state, abort and release. Collectives and
 * streams are nccl_coll.c. See pnccl.h for the concurrency rules.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pnccl.h"

void pnccl_sleep_us(double us) {
    if (us < 1) us = 1;
    struct timespec ts = {(time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void pnccl_peer_name(const pnccl_comm *c, int peer, char *buf, size_t cap) {
    if (peer < 0 || peer >= c->size)
        snprintf(buf, cap, "rank %d (outside communicator %u of %d ranks)", peer, c->id, c->size);
    else if (c->is_world)
        snprintf(buf, cap, "rank %d", peer);
    else
        snprintf(buf, cap, "rank %d of communicator %u (world rank %d)", peer, c->id, c->world_of[peer]);
}

int pnccl_settle(pnccl_comm *c, ncclResult_t r, double deadline) {
    if (r != ncclInProgress) return (int)r;
    double us = 2;
    for (;;) {
        if (!c->nc || c->aborted) return -1;
        ncclResult_t state = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(c->nc, &state);
        if (q != ncclSuccess) return (int)q;
        if (state != ncclInProgress) return (int)state;
        double left = deadline - c->host->now();
        if (left <= 0) return (int)ncclInProgress;
        pthread_mutex_unlock(&c->mu);
        pnccl_sleep_us(us < left * 1e6 ? us : left * 1e6);
        pthread_mutex_lock(&c->mu);
        us = us * 2 < c->cfg.poll_us ? us * 2 : c->cfg.poll_us;
    }
}

/* ---- requests (mu held) -------------------------------------------------- */

static void req_done(pnccl_req *r, plait_status st, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static void req_done(pnccl_req *r, plait_status st, const char *fmt, ...) {
    if (r->state == PNCCL_DONE) return;
    r->state = PNCCL_DONE;
    r->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
    }
}

/* "send of 4096 bytes (tag 7) to rank 1" / "allreduce of 1024 f32 elements". */
void pnccl_req_describe(const pnccl_comm *c, const pnccl_req *r, char *buf, size_t cap) {
    if (r->kind == PNCCL_SEND || r->kind == PNCCL_RECV) {
        char name[96];
        pnccl_peer_name(c, r->peer, name, sizeof name);
        snprintf(buf, cap, "%s of %zu bytes (tag %u) %s %s", r->kind == PNCCL_SEND ? "send" : "receive", r->bytes,
                 r->tag, r->kind == PNCCL_SEND ? "to" : "from", name);
    } else {
        snprintf(buf, cap, "%s on communicator %u (%d ranks)", r->what, c->id, c->size);
    }
}

/* A request from the pool, listed as active; NULL with the error set. Needs
 * the communicator's device current (events belong to a device). */
pnccl_req *pnccl_req_get(pnccl_comm *c, int kind) {
    pnccl_req *r = c->free_reqs;
    if (r) {
        c->free_reqs = r->qnext;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) {
            c->host->set_error(PLAIT_ERR_NO_MEMORY, "nccl: out of memory");
            return NULL;
        }
        cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            free(r);
            c->host->set_error(PLAIT_ERR_SYSTEM, "nccl: cudaEventCreate on GPU %d: %s", c->device,
                               cudaGetErrorString(e));
            return NULL;
        }
    }
    cudaEvent_t ev = r->ev;
    memset(r, 0, sizeof *r);
    r->ev = ev;
    r->kind = kind;
    r->state = PNCCL_QUEUED;
    r->next = c->active;
    if (c->active) c->active->prev = r;
    c->active = r;
    return r;
}

void pnccl_req_put(pnccl_comm *c, pnccl_req *r) {
    if (r->tmp) { /* a staging buffer from cudaMalloc: its kernels are done (or aborted) */
        cudaFree(r->tmp);
        r->tmp = NULL;
    }
    if (r->prev) r->prev->next = r->next;
    else if (c->active == r) c->active = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->qnext = c->free_reqs;
    c->free_reqs = r;
}

/* Fail every unfinished request with `why`. With `credit_completed`, a
 * launched request whose event already completed counts as done: its
 * kernels finished before the communicator went down. */
static void fail_active(pnccl_comm *c, plait_status st, const char *why, int credit_completed) {
    for (pnccl_req *r = c->active; r; r = r->next) {
        if (r->state == PNCCL_DONE) continue;
        if (credit_completed && r->state == PNCCL_LAUNCHED && cudaEventQuery(r->ev) == cudaSuccess) {
            req_done(r, PLAIT_OK, NULL);
            continue;
        }
        char d[256];
        pnccl_req_describe(c, r, d, sizeof d);
        req_done(r, st, "nccl: %s failed: %s", d, why);
    }
    (void)cudaGetLastError();
    c->queued = c->queued_tail = c->launching = NULL;
}

/* Take the communicator down (mu held): fail what is pending, then abort
 * the NCCL communicator so no kernel keeps touching user buffers. */
void pnccl_go_down(pnccl_comm *c, plait_status st, const char *why, int credit_completed) {
    if (c->aborted) return;
    c->aborted = 1;
    c->fail_status = st;
    snprintf(c->why, sizeof c->why, "%s", why);
    cudaSetDevice(c->device);
    fail_active(c, st, c->why, credit_completed);
    if (c->nc) {
        ncclCommAbort(c->nc);
        c->nc = NULL;
    }
}

/* NCCL's asynchronous state (mu held): takes the communicator down on an
 * error. Returns PLAIT_OK while healthy (or still in progress). */
plait_status pnccl_check_async(pnccl_comm *c) {
    if (c->aborted) return c->fail_status;
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(c->nc, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess || state == ncclInProgress) return PLAIT_OK;
    char why[512];
    snprintf(why, sizeof why, "NCCL reports \"%s\" on GPU %d (%s): %s", ncclGetErrorString(state), c->device,
             pnccl_result_hint(state), ncclGetLastError(c->nc));
    c->host->log(PLAIT_LOG_ERROR, PNCCL_COMPONENT, "communicator %u (rank %d of %d): %s; aborting it", c->id, c->rank,
                 c->size, why);
    pnccl_go_down(c, pnccl_status(state), why, 0);
    return c->fail_status;
}

/* Record the events of a group that is now on its streams. */
void pnccl_record_events(pnccl_comm *c, pnccl_req *list) {
    for (pnccl_req *r = list, *nx; r; r = nx) {
        nx = r->qnext;
        r->qnext = NULL;
        if (r->state == PNCCL_DONE) continue;
        cudaError_t e = cudaEventRecord(r->ev, r->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            char d[256];
            pnccl_req_describe(c, r, d, sizeof d);
            req_done(r, PLAIT_ERR_SYSTEM, "nccl: %s: cudaEventRecord on GPU %d: %s", d, c->device,
                     cudaGetErrorString(e));
        } else {
            r->state = PNCCL_LAUNCHED;
        }
    }
}

/* Move the queued sends and receives to NCCL (mu held, device current).
 * `block`: settle an in-progress launch before returning (collectives need
 * the communicator idle); otherwise an in-progress launch stays in
 * `launching` and a later call finishes it. Returns PLAIT_OK unless the
 * communicator failed. */
plait_status pnccl_launch_queued(pnccl_comm *c, int block) {
    if (c->aborted) return c->fail_status;
    if (c->launching) {
        ncclResult_t state = ncclInProgress;
        int res;
        if (block) {
            res = pnccl_settle(c, ncclInProgress, c->host->now() + c->cfg.timeout_s);
        } else {
            ncclResult_t q = ncclCommGetAsyncError(c->nc, &state);
            res = q != ncclSuccess ? (int)q : (int)state;
        }
        if (res < 0 || c->aborted) return c->fail_status;
        if (res == ncclInProgress) {
            if (!block) return PLAIT_OK;
            char why[256];
            snprintf(why, sizeof why, "NCCL did not finish launching sends and receives within %g s",
                     c->cfg.timeout_s);
            pnccl_go_down(c, PLAIT_ERR_TIMEOUT, why, 0);
            return c->fail_status;
        }
        if (res != ncclSuccess) return pnccl_check_async(c);
        pnccl_req *list = c->launching;
        c->launching = NULL;
        pnccl_record_events(c, list);
    }
    if (!c->queued) return PLAIT_OK;
    pnccl_req *list = c->queued;
    c->queued = c->queued_tail = NULL;
    ncclResult_t first_err = ncclSuccess;
    ncclGroupStart();
    for (pnccl_req *r = list; r; r = r->qnext) {
        ncclResult_t x = r->kind == PNCCL_SEND ? ncclSend(r->buf, r->bytes, ncclUint8, r->peer, c->nc, r->stream)
                                               : ncclRecv(r->buf, r->bytes, ncclUint8, r->peer, c->nc, r->stream);
        if (x != ncclSuccess && x != ncclInProgress && first_err == ncclSuccess) first_err = x;
    }
    ncclResult_t g = ncclGroupEnd();
    if (first_err == ncclSuccess && g != ncclSuccess && g != ncclInProgress) first_err = g;
    if (first_err != ncclSuccess) {
        char why[512];
        snprintf(why, sizeof why, "launching sends and receives: NCCL reports \"%s\" (%s)",
                 ncclGetErrorString(first_err), ncclGetLastError(c->nc));
        for (pnccl_req *r = list; r; r = r->qnext) r->state = PNCCL_LAUNCHING; /* so go_down fails them */
        pnccl_go_down(c, pnccl_status(first_err), why, 0);
        return c->fail_status;
    }
    for (pnccl_req *r = list; r; r = r->qnext) r->state = PNCCL_LAUNCHING;
    if (g == ncclInProgress) {
        c->launching = list;
        return block ? pnccl_launch_queued(c, 1) : PLAIT_OK;
    }
    pnccl_record_events(c, list);
    return PLAIT_OK;
}

/* ---- point to point --------------------------------------------------------- */

static plait_status post_p2p(pnccl_comm *c, int kind, const plait_buffer *buf, int peer, uint32_t tag,
                             pnccl_req **out) {
    const plait_host *h = c->host;
    *out = NULL;
    if (buf->kind != PLAIT_MEM_CUDA)
        return h->set_error(PLAIT_ERR_UNSUPPORTED,
                            "nccl: moves CUDA device memory only, not %s memory; use [comm] plugin = tcp (or verbs) "
                            "for host buffers", buf->kind == PLAIT_MEM_HOST ? "host" : "pinned host");
    if (!buf->ptr && buf->bytes)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: NULL buffer of %zu bytes", buf->bytes);
    if (buf->device >= 0 && buf->device != c->device)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: buffer on GPU %d, but this rank's communicator drives GPU %d",
                            buf->device, c->device);
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: %s peer %d: must be another rank of communicator %u (%d ranks)",
                            kind == PNCCL_SEND ? "send to" : "receive from", peer, c->id, c->size);
    pthread_mutex_lock(&c->mu);
    plait_status st = PLAIT_OK;
    if (c->aborted) {
        char name[96];
        pnccl_peer_name(c, peer, name, sizeof name);
        st = h->set_error(c->fail_status, "nccl: %s %s: %s", kind == PNCCL_SEND ? "send to" : "receive from", name,
                          c->why);
    } else {
        cudaSetDevice(c->device);
        pnccl_req *r = pnccl_req_get(c, kind);
        if (!r) {
            st = PLAIT_ERR_NO_MEMORY;
        } else {
            r->buf = buf->ptr;
            r->bytes = buf->bytes;
            r->peer = peer;
            r->tag = tag;
            r->stream = c->stream;
            if (c->queued_tail) c->queued_tail->qnext = r;
            else c->queued = r;
            c->queued_tail = r;
            *out = r;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

plait_status pnccl_isend(pnccl_comm *c, const plait_buffer *buf, int peer, uint32_t tag, pnccl_req **out) {
    return post_p2p(c, PNCCL_SEND, buf, peer, tag, out);
}

plait_status pnccl_irecv(pnccl_comm *c, const plait_buffer *buf, int peer, uint32_t tag, pnccl_req **out) {
    return post_p2p(c, PNCCL_RECV, buf, peer, tag, out);
}

/* ---- completion ------------------------------------------------------------ */

/* One look at `r` (mu held): launch what is queued, query its event, check
 * NCCL's state. *done = 1 when it finished (status in r). */
static void poll_req(pnccl_comm *c, pnccl_req *r, int *done) {
    *done = 0;
    if (r->state != PNCCL_DONE && !c->aborted) {
        cudaSetDevice(c->device);
        pnccl_launch_queued(c, 0);
    }
    if (r->state == PNCCL_LAUNCHED) {
        cudaError_t e = cudaEventQuery(r->ev);
        if (e == cudaSuccess) {
            req_done(r, PLAIT_OK, NULL);
        } else if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            char why[384], d[256];
            snprintf(why, sizeof why, "CUDA reports %s on GPU %d: %s", cudaGetErrorName(e), c->device,
                     cudaGetErrorString(e));
            pnccl_req_describe(c, r, d, sizeof d);
            req_done(r, PLAIT_ERR_SYSTEM, "nccl: %s failed: %s", d, why);
            pnccl_go_down(c, PLAIT_ERR_SYSTEM, why, 0);
        }
    }
    if (r->state != PNCCL_DONE && !c->aborted) pnccl_check_async(c);
    if (r->state != PNCCL_DONE && c->aborted) {
        char d[256];
        pnccl_req_describe(c, r, d, sizeof d);
        req_done(r, c->fail_status, "nccl: %s failed: %s", d, c->why);
    }
    *done = r->state == PNCCL_DONE;
}

/* Hand a finished request back (mu held). */
static plait_status release(pnccl_comm *c, pnccl_req *r, size_t *bytes) {
    plait_status st = r->status;
    if (bytes) *bytes = st == PLAIT_OK ? r->bytes : 0;
    if (st != PLAIT_OK) c->host->set_error(st, "%s", r->err);
    pnccl_req_put(c, r);
    return st;
}

plait_status pnccl_test(pnccl_comm *c, pnccl_req *r, int *done, size_t *bytes) {
    pthread_mutex_lock(&c->mu);
    poll_req(c, r, done);
    plait_status st = *done ? release(c, r, bytes) : PLAIT_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

plait_status pnccl_wait(pnccl_comm *c, pnccl_req *r, double timeout_s, size_t *bytes) {
    const plait_host *h = c->host;
    const double start = h->now(), deadline = start + (timeout_s > 0 ? timeout_s : 0);
    double us = 2;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int done = 0;
        poll_req(c, r, &done);
        if (done) {
            plait_status st = release(c, r, bytes);
            pthread_mutex_unlock(&c->mu);
            return st;
        }
        double now = h->now(), left = deadline - now;
        if (left <= 0) break;
        pthread_mutex_unlock(&c->mu);
        /* the first spin_us without sleeping: a sleep, however short it
         * asks, lasts the kernel's timer slack (50 us by default), which
         * was the whole latency of a small collective (70 us for 8 bytes
         * on one H100 rank) */
        if ((now - start) * 1e6 < c->cfg.spin_us) {
            sched_yield();
            pthread_mutex_lock(&c->mu);
            continue;
        }
        pnccl_sleep_us(us < left * 1e6 ? us : left * 1e6);
        us = us * 2 < c->cfg.poll_us ? us * 2 : c->cfg.poll_us;
        pthread_mutex_lock(&c->mu);
    }
    char d[256];
    pnccl_req_describe(c, r, d, sizeof d);
    plait_status st = h->set_error(PLAIT_ERR_TIMEOUT,
                                   "nccl: %s did not complete within %.3g s (%s; NCCL reports no error, so a peer "
                                   "has probably not issued the matching operation)",
                                   d, timeout_s,
                                   r->state == PNCCL_QUEUED      ? "not yet handed to NCCL"
                                   : r->state == PNCCL_LAUNCHING ? "NCCL is still launching it"
                                                                 : "running on the GPU");
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- abort and release ------------------------------------------------------ */

void pnccl_abort_comm(pnccl_comm *c, plait_status status, const char *why) {
    pthread_mutex_lock(&c->mu);
    pnccl_go_down(c, status, why, 1);
    pthread_mutex_unlock(&c->mu);
}

void pnccl_release(pnccl_comm *c) {
    const plait_host *h = c->host;
    pthread_mutex_lock(&c->mu);
    cudaSetDevice(c->device);
    int leftover = 0;
    for (pnccl_req *r = c->active; r; r = r->next) leftover += r->state != PNCCL_DONE;
    if (leftover)
        h->log(PLAIT_LOG_WARN, PNCCL_COMPONENT,
               "communicator %u released with %d unfinished request%s; aborting it", c->id, leftover,
               leftover == 1 ? "" : "s");
    if (c->nc && !leftover && c->cfg.nonblocking) {
        /* flush and leave the peers cleanly, but never wait past the timeout */
        ncclResult_t r = ncclCommFinalize(c->nc);
        int res = r == ncclSuccess || r == ncclInProgress ? pnccl_settle(c, r, h->now() + c->cfg.timeout_s) : (int)r;
        if (res == ncclSuccess && c->nc) {
            ncclCommDestroy(c->nc);
            c->nc = NULL;
        } else if (c->nc) {
            h->log(PLAIT_LOG_WARN, PNCCL_COMPONENT, "communicator %u: ncclCommFinalize %s; aborting it", c->id,
                   res == ncclInProgress ? "did not finish within the timeout" : ncclGetErrorString((ncclResult_t)res));
        }
    } else if (c->nc && !leftover) {
        ncclCommDestroy(c->nc); /* blocking mode: local only, nothing is pending */
        c->nc = NULL;
    }
    if (c->nc) {
        fail_active(c, PLAIT_ERR_PEER_LOST, "communicator released", 0);
        ncclCommAbort(c->nc);
        c->nc = NULL;
    }
    for (pnccl_req *r = c->active, *nx; r; r = nx) {
        nx = r->next;
        if (r->tmp) cudaFree(r->tmp);
        cudaEventDestroy(r->ev);
        free(r);
    }
    c->active = NULL;
    for (pnccl_req *r = c->free_reqs, *nx; r; r = nx) {
        nx = r->qnext;
        cudaEventDestroy(r->ev);
        free(r);
    }
    c->free_reqs = NULL;
    if (c->stream) cudaStreamDestroy(c->stream);
    c->stream = NULL;
    (void)cudaGetLastError();
    pthread_mutex_unlock(&c->mu);
}
