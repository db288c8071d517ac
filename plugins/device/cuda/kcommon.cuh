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

#include <cuda_bf16.h>

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

/* A kernel template whose blocks take `shared` bytes of dynamic shared
 * memory: PC_LAUNCH_T_SHARED(name<...>, blocks, threads, max_threads,
 * shared). Over 48 KiB a block, the kernel must have been allowed that
 * much on the device first (cudaFuncSetAttribute,
 * cudaFuncAttributeMaxDynamicSharedMemorySize), else the launch fails. In
 * the kernel, PC_SHARED_DYNAMIC(name) declares `name`, the block's dynamic
 * shared memory as 16-byte aligned bytes. */
#ifdef PLAIT_CUDA_EMU
#define PC_LAUNCH_T_SHARED(kernel, blocks, threads, max_threads, shared)                               \
    pc_emu_launcher(#kernel, kernel, (blocks), (threads), pc.stream, (max_threads), (shared))
#define PC_SHARED_DYNAMIC(name) unsigned char *const name = (unsigned char *)pc_emu_dynamic_shared()
#else
#define PC_LAUNCH_T_SHARED(kernel, blocks, threads, max_threads, shared)                               \
    kernel<<<(blocks), (threads), (shared), pc.stream>>>
#define PC_SHARED_DYNAMIC(name) extern __shared__ __align__(16) unsigned char name[]
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

/* ---- element-wise passes with 16-byte loads ------------------------------ */

/* V (1 or 4; 8 and bf16 below) consecutive floats at p to or from r:
 * with 4, one 16-byte access (p 16-byte aligned). Row kernels are written
 * for every width. */
__device__ inline void pc_ld(float (&r)[1], const float *p) { r[0] = *p; }
__device__ inline void pc_ld(float (&r)[4], const float *p) {
    const float4 q = *(const float4 *)p;
    r[0] = q.x, r[1] = q.y, r[2] = q.z, r[3] = q.w;
}
__device__ inline void pc_st(float *p, const float (&r)[1]) { *p = r[0]; }
__device__ inline void pc_st(float *p, const float (&r)[4]) {
    float4 q;
    q.x = r[0], q.y = r[1], q.z = r[2], q.w = r[3];
    *(float4 *)p = q;
}

/* ---- bf16 activations (plait_bf16: a bfloat16's bits) -------------------
 * Row kernels templated on the element type T (float or plait_bf16) read
 * and write through these: a bf16 value widens exactly, a float stored as
 * bf16 is rounded once, to nearest even (NaN stays NaN). */
__device__ inline float pc_get(const float *p) { return *p; }
__device__ inline float pc_get(const plait_bf16 *p) { return __uint_as_float((uint32_t)*p << 16); }
__device__ inline plait_bf16 pc_bf16_of(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ inline void pc_put(float *p, float x) { *p = x; }
__device__ inline void pc_put(plait_bf16 *p, float x) { *p = pc_bf16_of(x); }

/* Values of T one 16-byte access holds: 4 floats, 8 bf16. */
template <typename T> struct pc_vec {
    static constexpr int V = 16 / (int)sizeof(T);
};

/* 8 values: two 16-byte accesses of floats, one of bf16 (p 16-byte
 * aligned); and one bf16 value. */
__device__ inline void pc_ld(float (&r)[8], const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w;
    r[4] = b.x, r[5] = b.y, r[6] = b.z, r[7] = b.w;
}
__device__ inline void pc_st(float *p, const float (&r)[8]) {
    *(float4 *)p = make_float4(r[0], r[1], r[2], r[3]);
    *(float4 *)(p + 4) = make_float4(r[4], r[5], r[6], r[7]);
}
__device__ inline void pc_ld(float (&r)[1], const plait_bf16 *p) { r[0] = pc_get(p); }
/* 8 bf16 values already loaded (a uint4) widened to floats */
__device__ inline void pc_widen(float (&r)[8], const uint4 q) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    PC_UNROLL
    for (int k = 0; k < 4; k++) {
        r[2 * k] = __uint_as_float(w[k] << 16);
        r[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ inline void pc_ld(float (&r)[8], const plait_bf16 *p) { pc_widen(r, *(const uint4 *)p); }
/* 4 bf16 values as one 8-byte load (p 8-byte aligned) */
__device__ inline void pc_ld(float (&r)[4], const plait_bf16 *p) {
    const uint2 q = *(const uint2 *)p;
    r[0] = __uint_as_float(q.x << 16), r[1] = __uint_as_float(q.x & 0xffff0000u);
    r[2] = __uint_as_float(q.y << 16), r[3] = __uint_as_float(q.y & 0xffff0000u);
}
__device__ inline void pc_st(plait_bf16 *p, const float (&r)[1]) { *p = pc_bf16_of(r[0]); }
/* 4 values as one 8-byte store (p 8-byte aligned) */
__device__ inline void pc_st(plait_bf16 *p, const float (&r)[4]) {
    *(uint2 *)p = make_uint2((uint32_t)pc_bf16_of(r[0]) | (uint32_t)pc_bf16_of(r[1]) << 16,
                             (uint32_t)pc_bf16_of(r[2]) | (uint32_t)pc_bf16_of(r[3]) << 16);
}
__device__ inline void pc_st(plait_bf16 *p, const float (&r)[8]) {
    uint32_t w[4];
    PC_UNROLL
    for (int k = 0; k < 4; k++) w[k] = (uint32_t)pc_bf16_of(r[2 * k]) | (uint32_t)pc_bf16_of(r[2 * k + 1]) << 16;
    *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Groups of 4 floats a thread loads per pass before it uses any: several
 * 16-byte loads in flight per thread, which a memory-bound kernel needs to
 * come near the device's bandwidth. */
#define PC_VEC_GROUPS 4

/* 1 if p may be read or written as float4 (16-byte aligned). */
__host__ __device__ static inline int pc_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Blocks for pc_map over n floats (vec: its 16-byte path). */
static inline unsigned pc_map_blocks(size_t n, int vec) {
    return pc_blocks(vec ? (n + 4 * PC_VEC_GROUPS - 1) / (4 * PC_VEC_GROUPS) : n);
}

/* out[i] = op(a[i], b ? b[i] : 0) for i < n; out may be a or b (a thread
 * reads an element before it writes it). vec (the launcher's pc_aligned16
 * of out, a and b): groups of 4 elements as float4, PC_VEC_GROUPS of them a
 * thread a pass, then the last n % 4 one by one; else one by one. Each
 * element's arithmetic is the same either way, so the bits are. */
template <typename Op>
__device__ inline void pc_map(float *out, const float *a, const float *b, size_t n, int vec, Op op) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        const float4 *a4 = (const float4 *)a, *b4 = (const float4 *)b;
        float4 *o4 = (float4 *)out;
        for (size_t g0 = (size_t)blockIdx.x * blockDim.x * PC_VEC_GROUPS + threadIdx.x; g0 < n4;
             g0 += stride * PC_VEC_GROUPS) {
            float4 va[PC_VEC_GROUPS] = {}, vb[PC_VEC_GROUPS] = {};
            PC_UNROLL
            for (int u = 0; u < PC_VEC_GROUPS; u++) {
                const size_t g = g0 + (size_t)u * blockDim.x;
                if (g < n4) {
                    va[u] = a4[g];
                    if (b) vb[u] = b4[g];
                }
            }
            PC_UNROLL
            for (int u = 0; u < PC_VEC_GROUPS; u++) {
                const size_t g = g0 + (size_t)u * blockDim.x;
                if (g >= n4) continue;
                float4 r;
                r.x = op(va[u].x, vb[u].x);
                r.y = op(va[u].y, vb[u].y);
                r.z = op(va[u].z, vb[u].z);
                r.w = op(va[u].w, vb[u].w);
                o4[g] = r;
            }
        }
        done = n4 * 4;
    }
    for (size_t i = done + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = op(a[i], b ? b[i] : 0.0f);
}

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
