/*
 * The warp-level tensor-core instructions the plugin's own matrix kernels
 * use (attention_tc.cu): ldmatrix (8x8 tiles of 16-bit values from shared
 * memory into the fragments an mma reads, optionally transposed) and
 * mma.sync m16n8k16 with bf16 operands and fp32 accumulators. Both exist
 * from sm_80 (Ampere) on and run on Hopper (as HMMA: Hopper's faster
 * wgmma needs a warpgroup and sm_90a, docs/gpu.md says why it is not used
 * yet). Under PLAIT_CUDA_EMU (tests/cuda_emu) each is its stand-in, which
 * computes what NVIDIA's PTX ISA documents for the whole warp at once.
 *
 * Fragments, per lane (groupID g = lane / 4, t = lane % 4): a 16x16 A
 * operand is 4 registers of bf16 pairs (rows g and g+8, columns 2t, 2t+1
 * and 2t+8, 2t+9); a 16x8 B operand 2 registers (rows 2t, 2t+1 and 2t+8,
 * 2t+9 of column g); a 16x8 fp32 accumulator 4 floats (rows g, g+8,
 * columns 2t, 2t+1).
 */
#ifndef PLAIT_PCUDA_MMA_CUH
#define PLAIT_PCUDA_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>

/* Four 8x8 b16 matrices: lane l supplies the address of row l % 8 of
 * matrix l / 8 (16-byte aligned, in shared memory); r[j] receives this
 * lane's pair of matrix j (row l/4, columns 2(l%4), 2(l%4)+1), or with
 * TRANS of matrix j transposed (rows 2(l%4), 2(l%4)+1 of column l/4). */
template <bool TRANS> __device__ inline void pc_ldmatrix_x4_(uint32_t r[4], const void *row) {
#ifdef PLAIT_CUDA_EMU
    pc_emu_ldmatrix(r, row, 4, TRANS);
#else
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}
__device__ inline void pc_ldmatrix_x4(uint32_t r[4], const void *row) { pc_ldmatrix_x4_<false>(r, row); }
__device__ inline void pc_ldmatrix_x4_trans(uint32_t r[4], const void *row) { pc_ldmatrix_x4_<true>(r, row); }

/* d[16x8] += a[16x16] · b[16x8] (fp32 accumulation). */
__device__ inline void pc_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef PLAIT_CUDA_EMU
    pc_emu_mma_bf16_16816(d, a, b, d);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* x rounded to bfloat16 (nearest even), as its 16 bits. */
__device__ inline uint32_t pc_bf16_bits(float x) { return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/* Two floats as one register of a bf16 pair (lo in the lower half). */
__device__ inline uint32_t pc_pack_bf16(float lo, float hi) { return pc_bf16_bits(lo) | pc_bf16_bits(hi) << 16; }

#endif
