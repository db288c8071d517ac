/*
 * User point-to-point operations (host->coll->send/recv) on a communicator's
 * p2p plugin communicator. Posting and testing hold comm->p2p_lock briefly;
 * a wait holds it while sleeping in the plugin (the plugin lets one thread
 * use a communicator at a time), so drive one communicator's p2p requests
 * from one thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/reduce.h"
#include "comm/request.h"
#include "runtime/error.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void plait_p2p_describe(const plait_request *r, char *buf, size_t len) {
    char where[128];
    plait_comm_where(r->comm, where, sizeof where);
    snprintf(buf, len, "%s #%llu %s rank %d (world rank %d), tag %u, %zu bytes, on %s",
             r->is_send ? "send" : "recv", (unsigned long long)r->p2p_seq,
             r->is_send ? "to" : "from", r->peer, r->comm->world_ranks[r->peer], r->tag, r->bytes,
             where);
}

static plait_status post(plait_comm *comm, int is_send, void *buf, size_t count, plait_dtype dtype,
                         int peer, uint32_t tag, plait_request **req) {
    if (req) *req = NULL;
    plait_status st = plait_comm_check_usable(comm);
    if (st != PLAIT_OK) return st;
    size_t esz = plait_dtype_size(dtype);
    const char *what = is_send ? "send" : "recv";
    if (!esz) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    if (peer < 0 || peer >= comm->size)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: peer %d is not a rank of communicator "
                                                      "'%s' (size %d)", what, peer, comm->name, comm->size);
    if (peer == comm->rank)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: rank %d of '%s' cannot %s itself", what,
                               peer, comm->name, is_send ? "send to" : "receive from");
    if (tag >= PLAIT_USER_TAG_LIMIT)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tag %u is reserved (user tags are below 2^31)",
                               what, tag);
    if (count && !buf) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: NULL buffer", what);
    if (count > SIZE_MAX / esz) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: count overflows", what);
    plait_request *r = calloc(1, sizeof *r);
    if (!r) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    r->kind = PLAIT_REQ_P2P;
    r->comm = comm;
    r->peer = peer;
    r->is_send = is_send;
    r->bytes = count * esz;
    r->tag = tag;
    plait_buffer b = {.ptr = buf, .bytes = r->bytes, .kind = PLAIT_MEM_HOST, .device = -1};
    pthread_mutex_lock(&comm->p2p_lock);
    r->p2p_seq = ++comm->p2p_seq;
    st = is_send ? comm->ops->isend(comm->pp2p, &b, peer, tag, NULL, &r->preq)
                 : comm->ops->irecv(comm->pp2p, &b, peer, tag, NULL, &r->preq);
    pthread_mutex_unlock(&comm->p2p_lock);
    if (st != PLAIT_OK) {
        char d[256];
        plait_p2p_describe(r, d, sizeof d);
        free(r);
        return plait_wrap_error(st, "%s", d);
    }
    if (is_send) atomic_fetch_add(&comm->bytes_sent, r->bytes);
    if (req) {
        *req = r;
        return PLAIT_OK;
    }
    return plait_p2p_wait(r);
}

plait_status plait_comm_send(plait_comm *comm, const void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req) {
    return post(comm, 1, (void *)(uintptr_t)buf, count, dtype, peer, tag, req);
}

plait_status plait_comm_recv(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req) {
    return post(comm, 0, buf, count, dtype, peer, tag, req);
}

static plait_status finish(plait_request *r, plait_status st, size_t bytes) {
    plait_comm *comm = r->comm;
    if (st == PLAIT_OK) {
        if (!r->is_send) atomic_fetch_add(&comm->bytes_received, bytes);
        free(r);
        return PLAIT_OK;
    }
    char d[256];
    plait_p2p_describe(r, d, sizeof d);
    if (st == PLAIT_ERR_TIMEOUT)
        plait_set_error(st, "%s: timed out after %g s waiting for rank %d (world rank %d)", d,
                        comm->settings.timeout_s, r->peer, comm->world_ranks[r->peer]);
    else
        plait_wrap_error(st, "%s", d);
    if (st == PLAIT_ERR_TIMEOUT) {
        /* The plugin still owns the request: abort releases it. */
        plait_comm_fail(comm, st, plait_last_error());
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        if (comm->ops->abort) {
            pthread_mutex_lock(&comm->p2p_lock);
            (void)comm->ops->wait(comm->pp2p, r->preq, 1.0, NULL);
            pthread_mutex_unlock(&comm->p2p_lock);
            free(r);
        } /* else: leaked on purpose; the plugin may still write the buffer */
        plait_set_error(st, "%s", msg);
        return st;
    }
    plait_comm_fail(comm, st, plait_last_error());
    free(r);
    return st;
}

plait_status plait_p2p_wait(plait_request *r) {
    plait_comm *comm = r->comm;
    size_t bytes = 0;
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&comm->p2p_lock);
    plait_status st = comm->ops->wait(comm->pp2p, r->preq, comm->settings.timeout_s, &bytes);
    pthread_mutex_unlock(&comm->p2p_lock);
    atomic_fetch_add(&comm->wait_ns, now_ns() - t0);
    return finish(r, st, bytes);
}

plait_status plait_p2p_test(plait_request *r, int *done) {
    plait_comm *comm = r->comm;
    size_t bytes = 0;
    int d = 0;
    pthread_mutex_lock(&comm->p2p_lock);
    plait_status st = comm->ops->test(comm->pp2p, r->preq, &d, &bytes);
    pthread_mutex_unlock(&comm->p2p_lock);
    *done = st != PLAIT_OK || d;
    if (st == PLAIT_OK && !d) return PLAIT_OK;
    return finish(r, st, bytes);
}
