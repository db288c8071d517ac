/*
 * What the emulated CUDA runtime's two files share, hidden inside its
 * library: emu_cudart.c (errors, devices, launch checks, streams and
 * events) and emu_memory.c (the memory it hands out, copies and memsets,
 * which report their errors and queue their work through the first). The
 * runtime's interface is CUDA's (NVIDIA's declarations) and emu_runtime.h.
 */
#ifndef PLAIT_CUDA_EMU_CUDART_H
#define PLAIT_CUDA_EMU_CUDART_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "emu_queue.h"

#pragma GCC visibility push(hidden)

/* The emulated GPU's memory: what it advertises and the most cudaMalloc
 * hands out. */
#define EMU_MEMORY ((size_t)16 << 30)

/* ---- errors (emu_cudart.c) ---------------------------------------------------- */

/* The calling thread's last error (cudaGetLastError). */
extern _Thread_local cudaError_t tl_last;

/* The sticky error: cudaErrorLaunchFailure once a launch or queued work
 * failed, else cudaSuccess. */
cudaError_t sticky(void);

/* Prints why, makes e the calling thread's last error and returns it. */
__attribute__((format(printf, 2, 3))) cudaError_t fail(cudaError_t e, const char *fmt, ...);

/* The sticky error, made the calling thread's last error too if it is one. */
cudaError_t ok_or_sticky(void);

/* A failure found while queued work ran: prints why and makes the launch
 * failure sticky (the first reason is what cudaGetErrorString says). */
__attribute__((format(printf, 1, 2))) void fail_async(const char *fmt, ...);

/* ---- streams (emu_cudart.c) --------------------------------------------------- */

/* A stream behind a cudaStream_t: a magic number that checks the handle,
 * the queue of its work, and its number in the log (0: the legacy default
 * stream, then 1, 2, ... in the order created). */
typedef struct emu_stream {
    unsigned magic;
    emu_queue *q;
    unsigned id;
} emu_stream;

/* With PLAIT_CUDA_EMU_LOG=FILE set: appends "<stream number> <what>" to
 * FILE as work is queued (copy_h2d, copy_d2h, copy_d2d, copy_h2h, memset,
 * kernel, record, wait), in the order the host queued it, so a test can see what
 * one stream had queued when another's work was issued (on a GPU, what ran
 * beside it). A no-op without it. */
void note_queued(const emu_stream *st, const char *what);

/* The stream behind a handle (0: the legacy default stream), or NULL (an
 * error set). */
emu_stream *stream_of(cudaStream_t s);

/* A device-wide synchronisation (counted): every stream's queued work runs. */
void device_sync(void);

#pragma GCC visibility pop

#endif
