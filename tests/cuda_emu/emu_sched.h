/*
 * The CUDA emulator's thread scheduler: runs a kernel's threads on the CPU,
 * each GPU thread on its own small stack (a fiber), the blocks one after
 * the other on the calling OS thread. Test infrastructure only (never
 * installed): it lets the cuda device plugin's own kernel source run where
 * there is no GPU, so the kernels' indexing, reductions and barriers are
 * exercised in CI (docs/gpu.md, "The CUDA emulator").
 *
 * What it models: 1-D grids and blocks (what the plugin launches), the
 * block barrier (__syncthreads) and full-warp shuffles, each waited for by
 * exactly the threads that must reach it, and each thread's asynchronous
 * copies (cp.async), which land only when the thread waits for them. Threads run until they block, in
 * a shuffled order that changes from launch to launch, so a result that
 * depends on an order the hardware does not promise (a missing barrier, a
 * read of another thread's write) tends to come out wrong instead of
 * happening to work. What it does not model: memory-model races inside
 * one step, timing, occupancy, and the GPU's floating-point library (expf
 * and friends are the host's, a few ulp from CUDA's).
 *
 * Errors (a barrier not reached by every thread, a shuffle with a lane that
 * exited or sits at another barrier, a bad launch shape) abandon the launch,
 * print one line naming the kernel, block and thread, and are kept for
 * pc_emu_take_failure(): the emulated runtime turns them into CUDA's
 * sticky launch failure.
 *
 * Thread-safety: launches from any OS thread, one at a time (a lock: the
 * kernels' __shared__ arrays are static storage, one block's at a time);
 * kernels must not be launched from inside a kernel.
 */
#ifndef PLAIT_CUDA_EMU_SCHED_H
#define PLAIT_CUDA_EMU_SCHED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most dynamic shared memory a block may opt in to (a GPU of compute
 * capability 9.0: 227 KiB). */
#define PC_EMU_SHARED_OPTIN (227u << 10)

/* Run body(ctx) once for every thread of a grid of `grid` blocks of
 * `block` threads (the y and z extents must be 1), each block with
 * `shared` bytes of dynamic shared memory (at most PC_EMU_SHARED_OPTIN).
 * Returns 0, or -1 after a failure (printed and recorded). */
int pc_emu_run(const char *kernel, const unsigned grid[3], const unsigned block[3], size_t shared,
               void (*body)(void *), void *ctx);

/* Inside a kernel: its block's dynamic shared memory (extern __shared__),
 * 16-byte aligned, the launch's bytes of it ending at a page no access may
 * touch (one past the end faults the process), 0xff bytes (NaN) when each
 * block starts: what a GPU leaves there is undefined. A kernel launched
 * with none fails the launch. */
void *pc_emu_dynamic_shared(void);

/* Inside a kernel: the running thread's threadIdx, blockIdx, blockDim and
 * gridDim (which = 0..3), three values each. Outside one: aborts. */
const unsigned *pc_emu_builtin(int which);

/* Inside a kernel: __syncthreads(). */
void pc_emu_syncthreads(void);

/* Inside a kernel: a full-warp shuffle. Publishes `bytes` (at most 8) of
 * `mine`, waits for every lane of the warp, and copies lane `src_lane`'s
 * value into `out`. `mask` must be 0xffffffff (all the plugin uses). */
void pc_emu_shuffle(unsigned mask, const void *mine, void *out, size_t bytes, unsigned src_lane);

/* One lane's part in a warp collective: its value (up to 8 bytes, zero
 * padded) and its mask. */
typedef struct pc_emu_lane {
    unsigned char value[8];
    unsigned mask;
} pc_emu_lane;

/* Inside a kernel: a warp collective (__ballot_sync, __match_any_sync,
 * __reduce_add_sync, __syncwarp). Publishes `bytes` (at most 8) of `mine`
 * with `mask` (the lanes it involves, the calling lane among them), waits
 * for every lane of the warp (the emulator needs the whole warp there,
 * stricter than CUDA, which waits for the mask's lanes only), and returns
 * the 32 lanes' values and masks: one table for the warp, which the
 * emulator's OS thread owns and the next gather of any warp overwrites,
 * so read it before the lane's next warp collective or barrier. Lanes
 * named in a mask must give the same mask (CUDA's rule), else the launch
 * fails. */
const pc_emu_lane *pc_emu_warp_gather(unsigned mask, const void *mine, size_t bytes);

/* Inside a kernel: a warp-wide instruction (the stand-ins of the tensor
 * cores' ldmatrix and mma, emu_kernel.h). Every lane of the warp calls it
 * with the same `op` and its own `mine`; once all 32 wait here, op(lanes)
 * runs once, lanes[i] being lane i's `mine` (every lane is suspended, so
 * op may read and write what each points to), and the lanes go on. op
 * returns NULL, or what is wrong (a misaligned address): the launch then
 * fails with that message, naming the kernel. */
typedef const char *(*pc_emu_warp_fn)(void *const lanes[32]);
void pc_emu_warp_op(void *mine, pc_emu_warp_fn op);

/* Inside a kernel: the calling thread's asynchronous copies (cp.async,
 * sm_80 on; plugins/device/cuda/async_copy.cuh's stand-ins, emu_kernel.h).
 * pc_emu_cp_async issues a copy of `bytes` (4, 8 or 16) from `src` to
 * `dst`: both must be aligned to `bytes`, `dst` outside the threads'
 * stacks (shared memory), and no other pending copy of the thread may
 * write the same bytes (PTX orders neither against the other), else the
 * launch fails. The source is read at the issue; the destination holds
 * 0xff bytes (NaN) from the issue until the copy is performed, which is
 * the latest moment PTX allows: when the thread's
 * pc_emu_cp_async_wait(n) leaves at most n groups newer than the copy's
 * pending. So a read before the wait (or, by another thread, before the
 * wait and a barrier after it), and a copy issued into a buffer other
 * threads still read, see NaN. A source that changed while its copy was
 * pending fails the launch (undefined in PTX). pc_emu_cp_async_commit
 * closes the thread's current group (an empty group is complete at once).
 * Copies still pending when the thread exits are never performed: PTX
 * does not forbid exiting with copies in flight, and nothing may read them
 * without a wait. */
void pc_emu_cp_async(void *dst, const void *src, unsigned bytes);
void pc_emu_cp_async_commit(void);
void pc_emu_cp_async_wait(unsigned n);

/* Inside a kernel: the launch fails, naming the kernel, block, thread and
 * `what`; the calling thread does not return. */
void pc_emu_fault(const char *what) __attribute__((noreturn));

/* The first failure recorded by any launch in this process, or NULL; the
 * string stays valid for the life of the process. Thread-safe. */
const char *pc_emu_failure(void);

#ifdef __cplusplus
}
#endif
#endif
