/*
 * Asynchronous file reads and writes for the offloaded optimizer state: a
 * few threads running pread/pwrite (the form that works everywhere: where
 * io_uring is blocked, as in many containers, and on file systems that
 * refuse O_DIRECT, as tmpfs). A request is submitted, runs on a pool
 * thread, and is waited for by the submitter; a short or failed transfer
 * is reported with its errno.
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
    /* set by the pool */
    int done;
    int err; /* errno of a failed transfer (ENOSPC for a short write), 0 if it completed */
    struct offload_req *next;
} offload_req;

/* NULL (errno set) if the threads cannot start. */
offload_io *offload_io_create(int threads);
void offload_io_destroy(offload_io *io);
void offload_io_submit(offload_io *io, offload_req *r);
/* Block until `r` is done; returns its err. A request never submitted
 * (bytes 0) is done at once. */
int offload_io_wait(offload_io *io, offload_req *r);

#endif
