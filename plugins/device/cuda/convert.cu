/*
 * float32 -> bfloat16 (round to nearest even; NaN stays NaN): the operand
 * copies of bf16 products (gemm.c); and bfloat16 -> float32, exact: a
 * message that crossed ranks in bf16 through NCCL written back into its
 * float32 buffer (kernels.h from_bf16).
 */
#include <cuda_bf16.h>

#include "kcommon.cuh"

/* vec (src 16-byte, dst 8-byte aligned): 4 floats a 16-byte load, 4
 * bfloat16 a store of two pairs, PC_VEC_GROUPS groups loaded a thread a
 * pass before any is stored (kcommon.cuh pc_map's shape), the last n % 4
 * one by one; else one by one. The same rounding either way. */
PC_KERNEL(to_bf16_kernel, PC_THREADS)(__nv_bfloat16 *dst, const float *src, size_t n, int vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        const float4 *s4 = (const float4 *)src;
        __nv_bfloat162 *d2 = (__nv_bfloat162 *)dst;
        for (size_t g0 = (size_t)blockIdx.x * blockDim.x * PC_VEC_GROUPS + threadIdx.x; g0 < n4;
             g0 += stride * PC_VEC_GROUPS) {
            float4 v[PC_VEC_GROUPS] = {};
            PC_UNROLL
            for (int u = 0; u < PC_VEC_GROUPS; u++) {
                const size_t g = g0 + (size_t)u * blockDim.x;
                if (g < n4) v[u] = s4[g];
            }
            PC_UNROLL
            for (int u = 0; u < PC_VEC_GROUPS; u++) {
                const size_t g = g0 + (size_t)u * blockDim.x;
                if (g >= n4) continue;
                d2[2 * g] = __floats2bfloat162_rn(v[u].x, v[u].y);
                d2[2 * g + 1] = __floats2bfloat162_rn(v[u].z, v[u].w);
            }
        }
        done = n4 * 4;
    }
    for (size_t i = done + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" void pc_launch_to_bf16(void *dst, const float *src, size_t n) {
    if (!n) return;
    const int vec = pc_aligned16(src) && ((uintptr_t)dst & 7u) == 0;
    PC_LAUNCH(to_bf16_kernel, pc_map_blocks(n, vec), PC_THREADS)((__nv_bfloat16 *)dst, src, n, vec);
    pc_check_launch("to_bf16");
}

/* One element a thread: the widening is a shift, so the loads, not the
 * arithmetic, bound it, and messages are a few MB. */
PC_KERNEL(from_bf16_kernel, PC_THREADS)(float *dst, const __nv_bfloat16 *src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" void pc_launch_from_bf16(float *dst, const void *src, size_t n) {
    if (!n) return;
    PC_LAUNCH(from_bf16_kernel, pc_map_blocks(n, 0), PC_THREADS)(dst, (const __nv_bfloat16 *)src, n);
    pc_check_launch("from_bf16");
}
