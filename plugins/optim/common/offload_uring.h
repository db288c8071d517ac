/*
 * io_uring behind offload_io.h (offload_io.c uses it where the ring can be
 * made): one ring of `depth` entries, each request one read or write SQE
 * that is resubmitted for its remainder when the kernel moves part of it.
 *
 * Not thread-safe: the one thread that submits also waits, and reaps the
 * completions of other requests while it waits for one. Requests live in
 * the caller's memory until waited for; destroy waits for those still in
 * flight.
 */
#ifndef PLAIT_OPTIM_OFFLOAD_URING_H
#define PLAIT_OPTIM_OFFLOAD_URING_H

#include "offload_io.h"

typedef struct offload_uring offload_uring;

/* 0 and *out set, or the errno of the failure (io_uring_queue_init's:
 * EPERM or ENOSYS where seccomp or the kernel blocks io_uring; ENOSYS in a
 * build without liburing). */
int offload_uring_create(unsigned depth, offload_uring **out);
void offload_uring_destroy(offload_uring *u);
void offload_uring_submit(offload_uring *u, offload_req *r);
int offload_uring_wait(offload_uring *u, offload_req *r);

#endif
