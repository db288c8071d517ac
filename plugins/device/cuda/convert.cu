/*
 * float32 -> bfloat16 (round to nearest even; NaN stays NaN): the operand
 * copies of bf16 products (gemm.c).
 */
#include <cuda_bf16.h>

#include "kcommon.cuh"

PC_KERNEL(to_bf16_kernel, PC_THREADS)(__nv_bfloat16 *dst, const float *src, size_t n) {
    PC_GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

extern "C" void pc_launch_to_bf16(void *dst, const float *src, size_t n) {
    if (!n) return;
    PC_LAUNCH(to_bf16_kernel, pc_blocks(n), PC_THREADS)((__nv_bfloat16 *)dst, src, n);
    pc_check_launch("to_bf16");
}
