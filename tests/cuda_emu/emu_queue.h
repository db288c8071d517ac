/*
 * The CUDA emulator's streams: each a queue of work (copies, memsets,
 * kernels, products, event marks) that runs later, in the stream's order,
 * when a host thread synchronises with it (a stream, event or device
 * synchronisation, a copy that CUDA completes before returning, a free) or
 * when another stream's queued wait needs it. Nothing runs at the call that
 * queues it, so plugin code that reads a result, or reuses a page-locked
 * buffer a queued copy still reads, before it has waited shows it (as a
 * GPU would, but every time instead of sometimes).
 *
 * With PLAIT_CUDA_EMU_EAGER=1 each item runs instead as soon as it is
 * queued (after its queue's earlier items): a device that is never
 * behind, against which a kernel that should have waited for another
 * thread's copy reads the memory before that copy.
 *
 * Work runs on whichever host thread synchronises, one item at a time in
 * the whole process (one lock: the kernels' __shared__ arrays are static
 * storage). Test infrastructure only (never installed).
 *
 * Thread-safety: every function may be called from any thread, also from
 * inside queued work (the lock is recursive). Queues are reference
 * counted: pc_emu_queue_unref drops one reference; the last runs what is
 * left and frees the queue.
 */
#ifndef PLAIT_CUDA_EMU_QUEUE_H
#define PLAIT_CUDA_EMU_QUEUE_H

#include <stdint.h>

typedef struct emu_queue emu_queue;

/* A new queue with one reference, or NULL without memory. */
emu_queue *pc_emu_queue_new(void);
void pc_emu_queue_ref(emu_queue *q);
void pc_emu_queue_unref(emu_queue *q);

/* Queues run(ctx), then drop(ctx) once it ran (or drop alone if the queue
 * is freed first, which it never is with work left); returns the item's
 * position (1, 2, ...), or 0 without memory (drop(ctx) called). drop may
 * be NULL. */
uint64_t pc_emu_queue_push(emu_queue *q, void (*run)(void *), void (*drop)(void *), void *ctx);

/* The position of the last item queued (0: none yet). */
uint64_t pc_emu_queue_last(emu_queue *q);

/* 1 if the item at `pos` has run. */
int pc_emu_queue_done(emu_queue *q, uint64_t pos);

/* Runs the queue's items up to and including `pos` (UINT64_MAX: all). */
void pc_emu_queue_run(emu_queue *q, uint64_t pos);

/* Runs every queue to its end (a device synchronisation). */
void pc_emu_queue_run_all(void);

#endif
