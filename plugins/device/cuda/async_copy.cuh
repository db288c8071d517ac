/*
 * Asynchronous copies from global to shared memory (cp.async, from sm_80
 * on), which the attention kernels (attention_tc.cu) use to load a tile while
 * they compute on the one before. A thread issues copies, closes them into
 * a group (commit), and later waits until at most N of its newest groups
 * are pending (wait_group N): only then may it read what its copies wrote,
 * and another thread only after a barrier that follows the writer's wait.
 * Each thread waits for its own copies alone; reading a destination before
 * its copy completed, or changing a source while its copy is pending, is
 * undefined (NVIDIA's PTX ISA, "Data Movement and Conversion Instructions:
 * cp.async" and the sections after it).
 *
 * Under PLAIT_CUDA_EMU (tests/cuda_emu) each is its stand-in: copies are
 * queued per thread and performed at the latest moment PTX allows, their
 * destinations NaN until then, so a read that skips a wait comes out wrong
 * there (emu_sched.h).
 */
#ifndef PLAIT_PCUDA_ASYNC_COPY_CUH
#define PLAIT_PCUDA_ASYNC_COPY_CUH

#include <stdint.h>

/* 16 bytes from `global` (device memory) to `shared`, both 16-byte aligned
 * (else the launch fails: misaligned address); cached in L2 only (.cg: a
 * tile is read once per block). */
__device__ inline void pc_cp_async16(void *shared, const void *global) {
#ifdef PLAIT_CUDA_EMU
    pc_emu_cp_async_global(shared, global, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(shared)),
                 "l"(__cvta_generic_to_global(global))
                 : "memory");
#endif
}

/* 4 bytes, both 4-byte aligned (.ca: .cg takes 16-byte copies only). */
__device__ inline void pc_cp_async4(void *shared, const void *global) {
#ifdef PLAIT_CUDA_EMU
    pc_emu_cp_async_global(shared, global, 4);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((uint32_t)__cvta_generic_to_shared(shared)),
                 "l"(__cvta_generic_to_global(global))
                 : "memory");
#endif
}

/* Close the thread's copies issued since the last commit into a group. */
__device__ inline void pc_cp_async_commit(void) {
#ifdef PLAIT_CUDA_EMU
    pc_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Wait until at most N of the thread's newest groups are pending: every
 * older group's copies are complete and visible to this thread. */
template <int N> __device__ inline void pc_cp_async_wait(void) {
    static_assert(N >= 0, "cp.async.wait_group takes a count of groups");
#ifdef PLAIT_CUDA_EMU
    pc_emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif
