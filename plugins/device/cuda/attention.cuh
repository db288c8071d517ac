/*
 * What the fused attention's two files share: attention.cu (the fp32
 * kernels, the pass for D and the entries, which choose between the two
 * implementations) and attention_tc.cu (the tensor-core kernels). A kernel
 * template is instantiated in the file that launches it, so each file
 * launches its own kernels: the entries call the tensor-core launches
 * declared here, which attention_tc.cu instantiates for float and
 * plait_bf16 activations.
 */
#ifndef PLAIT_PCUDA_ATTENTION_CUH
#define PLAIT_PCUDA_ATTENTION_CUH

#include <stdint.h>

#include "kcommon.cuh"

#define AT_TILE 64 /* query rows and keys per tile */

/* Every kernel's grid but the pass for D: one block per (tile, b, h). */
static inline unsigned at_blocks(int64_t B, int64_t T, int64_t NH) {
    return (unsigned)(B * NH * ((T + AT_TILE - 1) / AT_TILE));
}

/* The tensor cores take head sizes 32, 64 and 128 (D a multiple of 32:
 * two k-steps per ldmatrix). */
static inline int at_tc_size(int64_t HS) { return HS == 32 || HS == 64 || HS == 128; }

/* attention_tc.cu: the tensor-core forward, and the backward's kernels
 * for dK and dV and for dQ once Dv holds D; a head size at_tc_size takes,
 * B * T * NH > 0, E float or plait_bf16. */
template <typename E>
void at_forward_tc(E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS);
template <typename E>
void at_backward_tc(E *dqkv, const float *Dv, const E *dout, const E *qkv, const float *lse, int64_t B, int64_t T,
                    int64_t NH, int64_t HS);

#endif
