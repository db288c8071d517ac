/*
 * The per-communicator executor: collectives run one at a time in issue
 * order, inline on the caller's thread when the communicator is idle and the
 * call is blocking, otherwise on a worker thread that sleeps when idle.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "coll/compress.h"
#include "coll/reduce.h"
#include "staging/coll_staging.h"
#include "commstate/comm_device.h"
#include "comm/comm_p2p.h"
#include "commstate/request.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/trace.h"
#include "runtime/trace_nvtx.h"

/* The bytes a collective's values take as they travel: count x element
 * size, or its wire format's bytes where it is compressed (a bf16 run's
 * tensor-parallel activations: half the float32 bytes). */
static int64_t coll_bytes(const plait_coll_args *a) {
    if (a->compression != PLAIT_COMPRESS_NONE) return (int64_t)plait_compress_bytes(a->compression, a->count);
    return (int64_t)(a->count * plait_dtype_size(a->dtype));
}

/* A collective's span, on the thread that ran it: its bytes (coll_bytes),
 * its algorithm, and the communicator's identity (name,
 * first world rank, sequence number: one collective on every member). */
static void trace_coll(const plait_comm *comm, const plait_coll_args *a, uint64_t t0, uint64_t t1) {
    char name[48];
    snprintf(name, sizeof name, "%s%s%s", plait_coll_kind_name(a->kind), *a->label ? " " : "", a->label);
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.bytes = coll_bytes(a);
    ta.tag = (int64_t)a->seq;
    ta.group = comm->world_ranks[0];
    ta.members = comm->size;
    ta.posted_ns = a->posted_ns ? (int64_t)a->posted_ns : PLAIT_TRACE_NONE;
    ta.comm = comm->name;
    ta.detail = plait_coll_algo_name((plait_coll_algo)atomic_load(&comm->last_algo));
    plait_trace_span(PLAIT_TRACE_COLL, name, t0, t1, &ta);
}

/* Run one collective on this thread; on a fatal error mark the
 * communicator failed (the message stays the thread's error). Its span
 * runs from `span0` (the caller's clock reading, 0: none) to the reading
 * returned in *end (NULL: not wanted), so that the caller's count of the
 * time blocked (wait_ns) and the trace are the same interval. With
 * PLAIT_LOG_LEVEL=coll=debug each one logs when it started and how long it
 * ran: where a step's communication goes, bucket by bucket. */
static plait_status run_one(plait_comm *comm, const plait_coll_args *args, uint64_t span0, uint64_t *end) {
    plait_status st = plait_comm_check_usable(comm);
    if (st != PLAIT_OK) {
        plait_comm_ready_release(plait_comm_device_of(comm), args->ready, args->own_ready);
        if (end) *end = plait_clock_now_ns();
        return st;
    }
    int trace = plait_log_enabled_for(PLAIT_LOG_DEBUG, "coll");
    uint64_t t0 = trace ? plait_clock_now_ns() : 0, sent0 = trace ? atomic_load(&comm->bytes_sent) : 0;
    int nvtx = 0;
    if (span0 && plait_trace_range_on()) {
        char name[48];
        snprintf(name, sizeof name, "%s%s%s", plait_coll_kind_name(args->kind), *args->label ? " " : "", args->label);
        nvtx = plait_trace_range_push(name);
    }
    st = plait_coll_run(comm, args);
    plait_trace_range_pop(nvtx);
    uint64_t t1 = span0 || end ? plait_clock_now_ns() : 0;
    if (end) *end = t1;
    if (span0 && plait_trace_on()) trace_coll(comm, args, span0, t1);
    if (trace)
        plait_log(PLAIT_LOG_DEBUG, "coll", "%s #%llu '%s' on '%s': %zu values, %s%s%s, %llu bytes sent, %.3f ms",
                  plait_coll_kind_name(args->kind), (unsigned long long)args->seq, args->label, comm->name,
                  args->count, plait_coll_algo_name((plait_coll_algo)atomic_load(&comm->last_algo)),
                  args->compression ? " " : "", args->compression ? plait_compress_name(args->compression) : "",
                  (unsigned long long)(atomic_load(&comm->bytes_sent) - sent0), 1e-6 * (double)(plait_clock_now_ns() - t0));
    plait_comm_ready_release(plait_comm_device_of(comm), args->ready, args->own_ready);
    if (st != PLAIT_OK && st != PLAIT_ERR_UNSUPPORTED && st != PLAIT_ERR_NO_MEMORY)
        plait_comm_fail(comm, st, plait_last_error());
    return st;
}

static void *worker_main(void *arg) {
    plait_comm *comm = arg;
    char name[16];
    snprintf(name, sizeof name, "plait-%s", comm->name);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&comm->lock);
    for (;;) {
        while (!comm->stopping && (!comm->head || comm->busy))
            pthread_cond_wait(&comm->work_cond, &comm->lock);
        if (!comm->head) break; /* stopping and drained */
        plait_request *r = comm->head;
        comm->head = r->next;
        if (!comm->head) comm->tail = NULL;
        comm->busy = 1;
        pthread_mutex_unlock(&comm->lock);

        plait_status st = run_one(comm, &r->args, plait_trace_begin(), NULL);
        char *msg = st == PLAIT_OK ? NULL : strdup(plait_last_error());

        pthread_mutex_lock(&comm->lock);
        comm->busy = 0;
        r->status = st;
        r->message = msg;
        r->done = 1;
        pthread_cond_broadcast(&comm->done_cond);
        if (r->detached) {
            /* its waiter is gone (wait_device): a failure after the mark
             * must still reach the next call on this communicator */
            pthread_mutex_unlock(&comm->lock);
            if (st != PLAIT_OK) plait_comm_fail(comm, st, msg ? msg : "collective failed");
            plait_comm_ready_release(plait_comm_device_of(r->comm), r->done_ev, 1);
            free(msg);
            free(r);
            pthread_mutex_lock(&comm->lock);
        }
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

/* Called with comm->lock held. */
static plait_status ensure_worker(plait_comm *comm) {
    if (comm->worker_started) return PLAIT_OK;
    int rc = pthread_create(&comm->worker, NULL, worker_main, comm);
    if (rc != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the worker thread of communicator "
                                                 "'%s': %s", comm->name, strerror(rc));
    comm->worker_started = 1;
    return PLAIT_OK;
}

/* Time the caller blocked on a queued collective (its exposed part):
 * [t0, t1], the interval wait_ns counts. */
static void trace_wait(const plait_request *r, uint64_t t0, uint64_t t1) {
    if (!plait_trace_on()) return;
    char name[48];
    snprintf(name, sizeof name, "wait %s%s%s", plait_coll_kind_name(r->args.kind), *r->args.label ? " " : "",
             r->args.label);
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.bytes = coll_bytes(&r->args);
    ta.tag = (int64_t)r->args.seq;
    ta.comm = r->comm->name;
    plait_trace_span(PLAIT_TRACE_WAIT, name, t0, t1, &ta);
}

/* With `block`, wait for it; the time blocked counts (wait_ns, and the
 * trace's wait span) from `since` (0: now), where the caller began
 * waiting. */
static plait_status finish_coll(plait_request *r, int *done, int block, uint64_t since) {
    plait_comm *comm = r->comm;
    uint64_t t0 = block ? (since ? since : plait_clock_now_ns()) : 0;
    pthread_mutex_lock(&comm->lock);
    if (block)
        while (!r->done) pthread_cond_wait(&comm->done_cond, &comm->lock);
    int is_done = r->done;
    pthread_mutex_unlock(&comm->lock);
    if (block) {
        uint64_t t1 = plait_clock_now_ns();
        atomic_fetch_add(&comm->wait_ns, t1 - t0);
        trace_wait(r, t0, t1);
    }
    if (done) *done = is_done;
    if (!is_done) return PLAIT_OK;
    plait_status st = r->status;
    if (st != PLAIT_OK) plait_set_error(st, "%s", r->message ? r->message : "collective failed");
    plait_comm_ready_release(plait_comm_device_of(r->comm), r->done_ev, 1);
    free(r->message);
    free(r);
    return st;
}

plait_status plait_request_wait_device(plait_request *r) {
    if (!r) return plait_set_error(PLAIT_ERR_INVALID_ARG, "wait_device() on a NULL request");
    if (r->kind == PLAIT_REQ_P2P) return plait_p2p_wait(r);
    plait_comm *comm = r->comm;
    uint64_t t0 = plait_clock_now_ns();
    int blocked = 0;
    pthread_mutex_lock(&comm->lock);
    while (!r->done && !r->posted) {
        blocked = 1;
        pthread_cond_wait(&comm->done_cond, &comm->lock);
    }
    int posted_only = !r->done;
    pthread_mutex_unlock(&comm->lock);
    /* done: the whole wait is finish_coll's (one interval, counted and
     * traced once) */
    if (!posted_only) return finish_coll(r, NULL, 1, t0);
    uint64_t t1 = plait_clock_now_ns();
    atomic_fetch_add(&comm->wait_ns, t1 - t0);
    if (blocked) trace_wait(r, t0, t1);
    /* done_ev stays the request's until it is released: the running
     * thread does not touch it before `detached` */
    if (plait_comm_done_wait(plait_comm_device_of(comm), r->done_ev) != PLAIT_OK)
        return finish_coll(r, NULL, 1, 0); /* the host, then */
    pthread_mutex_lock(&comm->lock);
    int done = r->done;
    if (!done) r->detached = 1;
    pthread_mutex_unlock(&comm->lock);
    if (done) return finish_coll(r, NULL, 1, 0);
    return plait_comm_check_usable(comm);
}

plait_status plait_comm_submit(plait_comm *comm, const plait_coll_args *args, plait_request **req) {
    if (req) *req = NULL;
    pthread_mutex_lock(&comm->lock);
    if (comm->failed != PLAIT_OK) {
        pthread_mutex_unlock(&comm->lock);
        plait_comm_ready_release(plait_comm_device_of(comm), args->ready, args->own_ready);
        return plait_comm_check_usable(comm);
    }
    uint64_t seq = ++comm->next_seq;
    uint64_t posted = plait_trace_begin();
    atomic_fetch_add(&comm->collectives, 1);
    if (!req && !comm->busy && !comm->head) {
        /* idle and blocking: run inline */
        comm->busy = 1;
        pthread_mutex_unlock(&comm->lock);
        plait_coll_args a = *args;
        a.seq = seq;
        a.posted_ns = posted;
        uint64_t t0 = plait_clock_now_ns(), t1 = 0;
        plait_status st = run_one(comm, &a, t0, &t1);
        atomic_fetch_add(&comm->wait_ns, t1 - t0);
        pthread_mutex_lock(&comm->lock);
        comm->busy = 0;
        pthread_cond_broadcast(&comm->work_cond);
        pthread_cond_broadcast(&comm->done_cond);
        pthread_mutex_unlock(&comm->lock);
        return st;
    }
    plait_request *r = calloc(1, sizeof *r);
    if (!r) {
        pthread_mutex_unlock(&comm->lock);
        plait_comm_ready_release(plait_comm_device_of(comm), args->ready, args->own_ready);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory queueing a collective");
    }
    r->kind = PLAIT_REQ_COLL;
    r->comm = comm;
    r->args = *args;
    r->args.seq = seq;
    r->args.posted_ns = posted;
    r->args.req = req ? r : NULL; /* a blocking caller waits for the end anyway */
    plait_status st = ensure_worker(comm);
    if (st != PLAIT_OK) {
        /* the sequence number is taken: the communicator cannot stay consistent */
        pthread_mutex_unlock(&comm->lock);
        free(r);
        plait_comm_ready_release(plait_comm_device_of(comm), args->ready, args->own_ready);
        plait_comm_fail(comm, st, plait_last_error());
        return st;
    }
    if (comm->tail)
        comm->tail->next = r;
    else
        comm->head = r;
    comm->tail = r;
    pthread_cond_broadcast(&comm->work_cond);
    pthread_mutex_unlock(&comm->lock);
    if (req) {
        *req = r;
        return PLAIT_OK;
    }
    return finish_coll(r, NULL, 1, 0);
}

plait_status plait_request_wait(plait_request *req) {
    if (!req) return plait_set_error(PLAIT_ERR_INVALID_ARG, "wait() on a NULL request");
    if (req->kind == PLAIT_REQ_P2P) return plait_p2p_wait(req);
    return finish_coll(req, NULL, 1, 0);
}

plait_status plait_request_test(plait_request *req, int *done) {
    *done = 0;
    if (!req) return plait_set_error(PLAIT_ERR_INVALID_ARG, "test() on a NULL request");
    if (req->kind == PLAIT_REQ_P2P) return plait_p2p_test(req, done);
    return finish_coll(req, done, 0, 0);
}
