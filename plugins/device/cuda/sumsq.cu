/*
 * The exact Σx² accumulator (plait_sumsq_acc) on the device, with the CPU's
 * binning bit for bit (core/model/kernels_vector.c): x = m · 2^(e-150), the
 * square's mantissa m² < 2^48 is added exactly into the 128-bit bin of
 * exponent e. Integer sums are exact in any order, so the blocks may merge
 * with integer atomics (the one place atomics are used: on integers, where
 * order cannot change the result) and the accumulator equals the CPU's for
 * the same values, whatever the split. Not yet run on a GPU.
 */
#include "kcommon.cuh"

typedef unsigned long long u64;

/* bin[e] += v exactly: the low word with a carry into the high word */
__device__ static inline void add128(u64 *lo, u64 *hi, u64 v) {
    u64 old = atomicAdd(lo, v);
    if (old + v < old) atomicAdd(hi, 1ull);
}

PC_KERNEL(sumsq_exact_kernel, PC_THREADS)(plait_sumsq_acc *acc, const float *x, size_t n) {
    __shared__ u64 bins[PLAIT_SUMSQ_BINS][2];
    __shared__ u64 nonfinite;
    for (int e = threadIdx.x; e < PLAIT_SUMSQ_BINS; e += blockDim.x) bins[e][0] = bins[e][1] = 0;
    if (threadIdx.x == 0) nonfinite = 0;
    __syncthreads();
    PC_GRID_STRIDE(i, n) {
        uint32_t bits = __float_as_uint(x[i]);
        uint32_t e = (bits >> 23) & 0xffu;
        u64 mant = bits & 0x7fffffu;
        if (e == 0xffu) {
            atomicAdd(&nonfinite, 1ull);
            continue;
        }
        if (e == 0) {
            if (mant == 0) continue;
            e = 1;
        } else {
            mant |= 1u << 23;
        }
        add128(&bins[e][0], &bins[e][1], mant * mant);
    }
    __syncthreads();
    u64 *out = (u64 *)acc->bin;
    for (int e = threadIdx.x; e < PLAIT_SUMSQ_BINS; e += blockDim.x) {
        if (bins[e][0]) add128(&out[2 * e], &out[2 * e + 1], bins[e][0]);
        if (bins[e][1]) atomicAdd(&out[2 * e + 1], bins[e][1]);
    }
    if (threadIdx.x == 0 && nonfinite) atomicAdd((u64 *)&acc->nonfinite, nonfinite);
}

/* dst += src, one thread per bin */
PC_KERNEL(sumsq_merge_kernel, PLAIT_SUMSQ_BINS)(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    int e = threadIdx.x;
    if (e < PLAIT_SUMSQ_BINS) {
        u64 lo = dst->bin[e][0] + src->bin[e][0];
        dst->bin[e][1] += src->bin[e][1] + (lo < src->bin[e][0]);
        dst->bin[e][0] = lo;
    }
    if (e == 0) dst->nonfinite += src->nonfinite;
}

extern "C" {

void pc_launch_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
    if (!n) return;
    /* enough blocks to fill the GPU; each merges its 256 bins once */
    size_t want = (n + 4 * PC_THREADS - 1) / (4 * PC_THREADS);
    unsigned blocks = (unsigned)(want < (size_t)pc.sm_count * 4 ? want : (size_t)pc.sm_count * 4);
    PC_LAUNCH(sumsq_exact_kernel, blocks ? blocks : 1, PC_THREADS)(acc, x, n);
    pc_check_launch("sumsq_exact");
}

void pc_launch_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    PC_LAUNCH(sumsq_merge_kernel, 1, PLAIT_SUMSQ_BINS)(dst, src);
    pc_check_launch("sumsq_merge");
}

} /* extern "C" */
