/*
 * A communicator's staging of device buffers for host-memory transports:
 * the pool of pinned host buffers and the copy thread.
 *
 * Why a thread: the device's copy() to the host returns when the bytes are
 * there, so the thread that runs a collective cannot also copy the next
 * chunk out while its transfer is in flight. The copy thread
 * takes copy jobs in FIFO order and makes every device copy of the staged
 * collectives; the collective's thread waits for a job's ticket only
 * before it needs the bytes (coll_staging.c explains the pipeline).
 *
 * The pool: four collective buffers (two chunks in flight, each with an
 * input and an output half), grown to the largest need and kept for the
 * communicator's lifetime, and a cache of point-to-point buffers. All of it
 * is host->alloc(PLAIT_MEM_HOST_PINNED) memory, tagged "comm staging". The
 * other way round, two device buffers carry host control data over a
 * transport that moves device memory only (nccl).
 *
 * Thread-safety: one collective at a time uses the collective buffers and
 * the queue (the communicator's executor guarantees it); borrow/give_back
 * from any thread. Errors set the thread's message.
 */
#ifndef PLAIT_CORE_COMM_STAGE_H
#define PLAIT_CORE_COMM_STAGE_H

#include "commstate/comm_state.h"

/* One copy job: `blocks` pieces of `bytes` each; piece b moves between
 * host + b*host_stride and dev + b*dev_stride in direction `dir`
 * (PLAIT_COPY_TO_HOST: copy-out, PLAIT_COPY_TO_DEVICE: copy-back). */
typedef struct plait_staging_copy {
    plait_copy_dir dir;
    char *host;
    char *dev;
    size_t bytes, host_stride, dev_stride;
    int blocks;
    /* on the device's communication stream (the operation waited for its
     * ready event, comm_device.h); 0: with copy(), in compute-stream order */
    int on_comm;
    const plait_comm_device *device; /* whose copies */
} plait_staging_copy;

/* The communicator's stage, created (thread started) on first use. */
plait_status plait_staging_of(plait_comm *comm, plait_staging **out);

/* Stop the thread and free the pool (communicator teardown). Buffers a
 * failed transfer may still write into (comm->scratch_leaked) are kept. */
void plait_staging_free(plait_staging *s, int leaked);

/* The four collective buffers, each at least `bytes`: bufs[0..1] inputs,
 * bufs[2..3] outputs of chunk slots 0 and 1. Call with no job queued. */
plait_status plait_staging_buffers(plait_staging *s, size_t bytes, char *bufs[4]);

/* Two device buffers (send, recv) of at least the given sizes, from the
 * registered device, for host buffers on a transport that moves device
 * memory only; kept with the pool. */
plait_status plait_staging_device_buffers(plait_staging *s, const plait_comm_device *dev, size_t send_bytes,
                                        size_t recv_bytes, char *out[2]);

/* Queue a copy job; *ticket is its number (1, 2, ...). */
plait_status plait_staging_post(plait_staging *s, const plait_staging_copy *job, uint64_t *ticket);

/* Wait until every job up to `ticket` has run. Returns the first copy
 * error (with its message), which also skips every later job. */
plait_status plait_staging_wait(plait_staging *s, uint64_t ticket);

/* Skip what is queued, wait for the running job, forget the error: the
 * stage is ready for the next collective. */
void plait_staging_cancel(plait_staging *s);

/* The collective's thread marks the transfer of a chunk (on = 1 before,
 * 0 after); a transfer during which a copy was running (one was at its
 * start, or one started or ended before its end) counts as overlapped. */
void plait_staging_mark_transfer(plait_staging *s, int on);
/* Chunk transfers so far, and how many of them overlapped a copy. */
void plait_staging_counts(const plait_staging *s, uint64_t *transfers, uint64_t *overlapped);

/* Tickets posted so far. */
uint64_t plait_staging_posted(const plait_staging *s);

/* A pinned buffer of at least `bytes` for one point-to-point operation;
 * NULL with the message set. Return it with give_back. */
void *plait_staging_borrow(plait_staging *s, size_t bytes);
void plait_staging_give_back(plait_staging *s, void *buf);

/* Copy synchronously on the calling thread (point-to-point staging). */
plait_status plait_staging_copy_now(const plait_staging_copy *job);

#endif
