/*
 * The copies of offload = host on a device with streams and events
 * (plait/device.h, ABI 1.4): one thread of the store's that moves each
 * piece's gradient and parameter slices to page-locked host mirrors on the
 * communication stream, in the order they are posted (which the host's
 * AdamW follows: the update is element-wise), and the
 * updated parameters back as the update releases each piece. The update of
 * piece i waits for piece i's copy only (not the whole device), so the
 * copies of the pieces after it and the copies back of those before it run
 * while it computes.
 *
 * Ordering: each post's copies start after an event recorded on the
 * compute stream when it is posted (a layer's final gradients, from the
 * optimizer's after_backward, or the rest when the step begins). The
 * copies back either all run before the step returns (finish without
 * `defer`), or run on after it, beside the next forward: then the layer's
 * forward waits for its own (offload_copy_ready: the host until the copy
 * thread has copied them, the compute stream on the device for an event
 * recorded after them), and anything else that reads the parameters first
 * waits for all of them (offload_copy_drain).
 *
 * Ownership: the mirrors and the thread belong to the copier, made by
 * offload_copy_open and freed by offload_copy_close (which joins the
 * thread). Thread-safety: one training thread calls post (once or
 * more), then wait_in for each piece in order and release for each piece
 * once updated (in any order: the copies back follow it), then finish,
 * once per step; ready and drain from the same thread. Errors: the message
 * of a failed copy is set on the training thread by wait_in or finish.
 */
#ifndef PLAIT_OPTIM_OFFLOAD_COPY_H
#define PLAIT_OPTIM_OFFLOAD_COPY_H

#include <stddef.h>
#include <stdint.h>

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
    int32_t layer; /* the model layer whose forward reads `param` (-1: none said) */
} offload_piece;

/* NULL (the message set) on failure. `numel` elements per mirror; the
 * parameter mirror only `with_param`. */
offload_copy *offload_copy_open(const plait_host *host, const char *who, size_t numel, int with_param);
void offload_copy_close(offload_copy *c);

/* The host mirrors, indexed by state position. */
float *offload_copy_grad(offload_copy *c);
float *offload_copy_param(offload_copy *c);

/* Queue pieces (copied; the caller's array may go) whose gradients are
 * final once what the compute stream holds now has run: an event recorded
 * there now orders their copies. Pieces are numbered in the order posted,
 * from 0 each step. */
plait_status offload_copy_post(offload_copy *c, const offload_piece *pieces, size_t n);
/* Piece i of those posted this step into *out: 1, or 0 past the last. */
int offload_copy_piece(offload_copy *c, size_t i, offload_piece *out);
/* Block until piece i's slices are in the mirrors. */
plait_status offload_copy_wait_in(offload_copy *c, size_t i);
/* Piece i is updated: its parameters may go back (after those released
 * before it). */
void offload_copy_release(offload_copy *c, size_t i);
/* The step's end. Without `defer`: offload_copy_drain. With it: return once
 * every piece is in; the copies back go on, and before the next read of
 * the parameters the caller calls offload_copy_ready (a layer's forward)
 * or offload_copy_drain (anything else). */
plait_status offload_copy_finish(offload_copy *c, int defer);
/* Wait until the copies back of the pieces of `layer` have run, and order
 * the compute stream after them. Immediate when none is pending. */
plait_status offload_copy_ready(offload_copy *c, int32_t layer);
/* Wait for every copy back, order the compute stream after them, and start
 * the next step's numbering. post calls it first. */
plait_status offload_copy_drain(offload_copy *c);

#endif
