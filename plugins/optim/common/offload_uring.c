/*
 * The io_uring ring behind offload_uring.h. A transfer the kernel cuts
 * short (a signal, a file system's own limit) is resubmitted for what is
 * left, as the threads' pread/pwrite loop does; a write that moves nothing
 * is a full disk, a read that moves nothing a file cut short.
 */
#include "offload_uring.h"

#include <errno.h>
#include <stdlib.h>

#ifdef PLAIT_HAVE_LIBURING
#include <liburing.h>

/* one SQE moves at most this much (its length is 32 bits) */
#define MAX_SQE_BYTES (1u << 30)

struct offload_uring {
    struct io_uring ring;
    unsigned inflight;
    int broken; /* errno of a failed submission: later requests fail with it */
};

int offload_uring_create(unsigned depth, offload_uring **out) {
    *out = NULL;
    offload_uring *u = calloc(1, sizeof *u);
    if (!u) return ENOMEM;
    int e = io_uring_queue_init(depth, &u->ring, 0);
    if (e < 0) {
        free(u);
        return -e;
    }
    *out = u;
    return 0;
}

static void fail(offload_req *r, int err) {
    r->err = err;
    r->done = 1;
}

/* Queue what is left of r and hand it to the kernel. */
static void queue(offload_uring *u, offload_req *r) {
    if (u->broken) {
        fail(r, u->broken);
        return;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) { /* not while the ring is deeper than the requests the store can have in flight */
        fail(r, EBUSY);
        return;
    }
    size_t left = r->bytes - r->moved;
    unsigned n = left > MAX_SQE_BYTES ? MAX_SQE_BYTES : (unsigned)left;
    char *p = (char *)r->buf + r->moved;
    off_t off = r->off + (off_t)r->moved;
    if (r->write) io_uring_prep_write(sqe, r->fd, p, n, (__u64)off);
    else io_uring_prep_read(sqe, r->fd, p, n, (__u64)off);
    io_uring_sqe_set_data(sqe, r);
    int e;
    while ((e = io_uring_submit(&u->ring)) == -EINTR) {}
    if (e < 0) {
        /* the SQE may stay queued: no later submission may carry it to a
         * request that is gone */
        u->broken = -e;
        fail(r, -e);
        return;
    }
    u->inflight++;
}

void offload_uring_submit(offload_uring *u, offload_req *r) {
    r->done = r->bytes == 0;
    r->err = 0;
    r->moved = 0;
    if (!r->done) queue(u, r);
}

static void complete(offload_uring *u, struct io_uring_cqe *cqe) {
    offload_req *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    u->inflight--;
    if (res == -EINTR || res == -EAGAIN) queue(u, r);
    else if (res < 0) fail(r, -res);
    else if (res == 0) fail(r, r->write ? ENOSPC : EIO);
    else if ((r->moved += (size_t)res) < r->bytes) queue(u, r);
    else r->done = 1;
}

/* Reap one completion; the errno of a failed wait, else 0. */
static int reap(offload_uring *u) {
    struct io_uring_cqe *cqe;
    int e;
    while ((e = io_uring_wait_cqe(&u->ring, &cqe)) == -EINTR) {}
    if (e < 0) return -e;
    complete(u, cqe);
    return 0;
}

int offload_uring_wait(offload_uring *u, offload_req *r) {
    while (!r->done) {
        int e = reap(u);
        if (e) fail(r, e);
    }
    return r->err;
}

void offload_uring_destroy(offload_uring *u) {
    if (!u) return;
    while (u->inflight > 0 && reap(u) == 0) {}
    io_uring_queue_exit(&u->ring);
    free(u);
}

#else /* a build without liburing: the threads always */

int offload_uring_create(unsigned depth, offload_uring **out) {
    (void)depth;
    *out = NULL;
    return ENOSYS;
}
void offload_uring_destroy(offload_uring *u) { (void)u; }
void offload_uring_submit(offload_uring *u, offload_req *r) {
    (void)u;
    r->done = 1;
    r->err = ENOSYS;
}
int offload_uring_wait(offload_uring *u, offload_req *r) {
    (void)u;
    return r->err;
}

#endif
