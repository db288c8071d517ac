/*
 * The copies of offload = host on a device with streams and events
 * (plait/device.h, ABI 1.4): one thread of the store's that moves each
 * piece's gradient and parameter slices to page-locked host mirrors on the
 * communication stream, in the order the host's AdamW walks them, and the
 * updated parameters back as the update releases each piece. The update of
 * piece i waits for piece i's copy only (not the whole device), so the
 * copies of the pieces after it and the copies back of those before it run
 * while it computes.
 *
 * Ordering: the copies start after an event recorded on the compute stream
 * when the step begins (the backward's gradients, the reductions ordered
 * into that stream); the compute stream waits, on the device, for an event
 * recorded on the communication stream after the last copy back, before
 * the next kernel that reads a parameter.
 *
 * Ownership: the mirrors and the thread belong to the copier, made by
 * offload_copy_open and freed by offload_copy_close (which joins the
 * thread). Thread-safety: one training thread calls begin, wait_in,
 * release and finish, in that order, once per step. Errors: the message
 * of a failed copy is set on the training thread by wait_in or finish.
 */
#ifndef PLAIT_OPTIM_OFFLOAD_COPY_H
#define PLAIT_OPTIM_OFFLOAD_COPY_H

#include <stddef.h>

#include <plait/host.h>

typedef struct offload_copy offload_copy;

/* One contiguous run the step updates: state positions [at, at + n) of the
 * mirrors, and where it lives in tensor memory (param NULL: not copied,
 * the store holds the parameters). */
typedef struct offload_piece {
    float *param;
    const float *grad;
    size_t at, n;
    float weight_decay;
} offload_piece;

/* NULL (the message set) on failure. `numel` elements per mirror; the
 * parameter mirror only `with_param`. */
offload_copy *offload_copy_open(const plait_host *host, const char *who, size_t numel, int with_param);
void offload_copy_close(offload_copy *c);

/* The host mirrors, indexed by state position. */
float *offload_copy_grad(offload_copy *c);
float *offload_copy_param(offload_copy *c);

/* Start a step's copies of `pieces` (kept by the caller until finish). */
plait_status offload_copy_begin(offload_copy *c, const offload_piece *pieces, size_t n);
/* Block until piece i's slices are in the mirrors. */
plait_status offload_copy_wait_in(offload_copy *c, size_t i);
/* Pieces [0, i] are updated: their parameters may go back. */
void offload_copy_release(offload_copy *c, size_t i);
/* Wait for every copy back, and order the compute stream after them. */
plait_status offload_copy_finish(offload_copy *c);

#endif
