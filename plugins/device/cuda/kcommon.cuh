/*
 * Shared pieces of the plugin's CUDA kernels: launch shapes and the
 * reductions. Every reduction here has a fixed shape (lane-strided partial
 * sums, then a butterfly over the warp, then the warps' results in warp
 * order), so the same inputs give the same bits on every run: no atomics
 * on floating-point values anywhere in the plugin.
 */
#ifndef PLAIT_PCUDA_KCOMMON_CUH
#define PLAIT_PCUDA_KCOMMON_CUH

#include <stdint.h>

#include "pcuda.h"

/* Every kernel: PC_KERNEL(name, max_threads)(parameters) { ... }, a
 * __global__ function whose __launch_bounds__ is the most threads a block
 * of it is launched with. Without a bound the compiler may give a thread up
 * to 255 registers, and a block fits on a multiprocessor only while
 * registers x threads stay within its 65536: a launch of more than 256
 * threads could then fail on the GPU alone ("too many resources
 * requested"), and -G builds use about twice the registers. With the bound
 * the compiler keeps every thread within the block's share (spilling if it
 * must). name##_max_threads keeps the bound for the emulator, which refuses
 * a launch over it, and one over 256 threads of a kernel without it, as the
 * GPU would; test_cuda_resources checks registers x bound under -G. */
#define PC_KERNEL(name, max_threads)                                                                   \
    enum : unsigned { name##_max_threads = (max_threads) };                                            \
    __global__ static void __launch_bounds__(max_threads) name

/* Every launch: PC_LAUNCH(kernel, blocks, threads)(arguments...), queued on
 * the compute stream without dynamic shared memory. Under PLAIT_CUDA_EMU
 * (the CPU emulator of tests/cuda_emu, which the host compiler builds this
 * same source for) it runs the kernel there instead: CUDA's <<<>>> is not
 * C++ a host compiler can read; it queues the kernel on the same stream. */
#ifdef PLAIT_CUDA_EMU
#define PC_LAUNCH(kernel, blocks, threads)                                                             \
    pc_emu_launcher(#kernel, kernel, (blocks), (threads), pc.stream, kernel##_max_threads)
#else
#define PC_LAUNCH(kernel, blocks, threads) kernel<<<(blocks), (threads), 0, pc.stream>>>
#endif

/* A kernel template (one per head size, say): `template <...>` then
 * PC_KERNEL_T(max_threads) name(parameters) { ... }, launched with
 * PC_LAUNCH_T(name<...>, blocks, threads, max_threads), the same bound. */
#define PC_KERNEL_T(max_threads) __global__ static void __launch_bounds__(max_threads)
#ifdef PLAIT_CUDA_EMU
#define PC_LAUNCH_T(kernel, blocks, threads, max_threads)                                              \
    pc_emu_launcher(#kernel, kernel, (blocks), (threads), pc.stream, (max_threads))
#else
#define PC_LAUNCH_T(kernel, blocks, threads, max_threads) kernel<<<(blocks), (threads), 0, pc.stream>>>
#endif

/* Unroll the loop that follows (register arrays indexed by its variable
 * stay in registers only when it is unrolled); nothing on the emulator. */
#ifdef PLAIT_CUDA_EMU
#define PC_UNROLL
#else
#define PC_UNROLL _Pragma("unroll")
#endif

#define PC_THREADS 256
#define PC_WARP 32

/* Blocks for n elements at PC_THREADS per block, at most 2^20 (the
 * kernels stride over the rest). */
static inline unsigned pc_blocks(size_t n) {
    size_t b = (n + PC_THREADS - 1) / PC_THREADS;
    if (b < 1) b = 1;
    return b > (1u << 20) ? (1u << 20) : (unsigned)b;
}

#define PC_GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

template <typename T> __device__ inline T pc_warp_sum(T v) {
    for (int o = PC_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float pc_warp_max(float v) {
    for (int o = PC_WARP / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the total. `shared` holds 32 values. */
template <typename T> __device__ inline T pc_block_sum(T v, T *shared) {
    const int lane = threadIdx.x % PC_WARP, warp = threadIdx.x / PC_WARP, warps = blockDim.x / PC_WARP;
    v = pc_warp_sum(v);
    __syncthreads(); /* `shared` may still be read by a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T t = lane < warps ? shared[lane] : T(0);
    return pc_warp_sum(t);
}

__device__ inline float pc_block_max(float v, float *shared) {
    const int lane = threadIdx.x % PC_WARP, warp = threadIdx.x / PC_WARP, warps = blockDim.x / PC_WARP;
    v = pc_warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float t = lane < warps ? shared[lane] : -INFINITY;
    return pc_warp_max(t);
}

#endif
