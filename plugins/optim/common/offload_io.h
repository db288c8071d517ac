/*
 * Asynchronous file reads and writes for the offloaded optimizer state,
 * through io_uring (offload_uring.h: no thread of plait's own, the kernel
 * queues O_DIRECT transfers straight to the disk) or, where the ring cannot
 * be made (seccomp in many containers, a kernel without it, a build without
 * liburing) or is not wanted, a few threads running pread/pwrite. A request
 * is submitted, runs, and is waited for by the submitter; a short or failed
 * transfer is reported with its errno.
 *
 * The training thread submits and waits; the pool's threads touch only the
 * requests they run. Requests live in the caller's memory until waited for.
 */
#ifndef PLAIT_OPTIM_OFFLOAD_IO_H
#define PLAIT_OPTIM_OFFLOAD_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct offload_io offload_io;

typedef struct offload_req {
    int fd;
    int write; /* 1: pwrite, 0: pread */
    void *buf;
    size_t bytes;
    off_t off;
    /* set by the pool or the ring */
    int done;
    size_t moved; /* bytes moved so far (the ring's resubmission of a short transfer) */
    int err; /* errno of a failed transfer (ENOSPC for a short write), 0 if it completed */
    struct offload_req *next;
} offload_req;

/* With `ring_depth` > 0 an io_uring of that many entries (at least the
 * requests in flight at once), else, or where the ring cannot be made,
 * `threads` threads; *ring_err receives the ring's errno (0 when it is
 * used or was not asked for). NULL (errno set) if neither can start. */
offload_io *offload_io_create(int threads, unsigned ring_depth, int *ring_err);
/* 1 when the requests go through io_uring. */
int offload_io_uses_ring(const offload_io *io);
void offload_io_destroy(offload_io *io);
void offload_io_submit(offload_io *io, offload_req *r);
/* Block until `r` is done; returns its err. A request never submitted
 * (bytes 0) is done at once. */
int offload_io_wait(offload_io *io, offload_req *r);

#endif
