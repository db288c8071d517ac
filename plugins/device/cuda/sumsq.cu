/*
 * The exact Σx² accumulator (plait_sumsq_acc) on the device, with the CPU's
 * binning bit for bit (core/kernels/kernels_vector.c): x = m · 2^(e-150), the
 * square's mantissa m² < 2^48 is added exactly into the 128-bit bin of
 * exponent e. Integer sums are exact in any order, so the accumulator
 * equals the CPU's for the same values, whatever the split.
 *
 * Without contended atomics: each warp owns its bins in shared memory.
 * The lanes of a warp holding values of one exponent find each other
 * (__match_any_sync), sum their squares exactly (__reduce_add_sync over
 * 24-bit halves: 32 lanes x 2^24 fit in 32 bits), and the group's lowest
 * lane adds that sum to the warp's bin with plain arithmetic: no other lane
 * writes it. (64-bit atomics on shared memory, the first version, are a
 * compare-and-swap loop on sm_80 and sm_90 (ATOMS.CAST.SPIN.64), and
 * values of similar magnitude all hit one bin.) The block then sums its
 * warps' bins, one thread per bin, and adds them into the accumulator with
 * 64-bit global atomics (native: one per bin and block).
 */
#include "kcommon.cuh"

typedef unsigned long long u64;

#define SUMSQ_WARPS (PC_THREADS / PC_WARP)

/* the 128-bit integer (*lo, *hi) += v */
__device__ static inline void add128(u64 *lo, u64 *hi, u64 v) {
    u64 sum = *lo + v;
    *hi += sum < v;
    *lo = sum;
}

/* One value a lane into the warp's bins; every lane of the warp calls it
 * together (the collectives need the whole warp). A lane with nothing to
 * add passes 0, which adds nothing. */
__device__ static inline void bin_value(u64 (*bins)[2], u64 *nonfinite, unsigned lane, float v) {
    const uint32_t bits = __float_as_uint(v);
    const uint32_t ex = (bits >> 23) & 0xffu;
    u64 mant = bits & 0x7fffffu;
    unsigned e = 0; /* 0: nothing to add (zero, not finite) */
    u64 sq = 0;
    int bad = 0;
    if (ex == 0xffu) {
        bad = 1;
    } else if (ex != 0 || mant != 0) {
        if (ex != 0) mant |= 1u << 23;
        e = ex ? ex : 1u; /* subnormals share bin 1, as on the CPU */
        sq = mant * mant;
    }
    const unsigned bad_lanes = __ballot_sync(0xffffffffu, bad);
    const unsigned group = __match_any_sync(0xffffffffu, e);
    const unsigned lo = __reduce_add_sync(group, (unsigned)(sq & 0xffffffu));
    const unsigned hi = __reduce_add_sync(group, (unsigned)(sq >> 24));
    if (e != 0 && lane == (unsigned)__ffs((int)group) - 1) add128(&bins[e][0], &bins[e][1], ((u64)hi << 24) + lo);
    if (lane == 0) *nonfinite += (u64)__popc(bad_lanes);
    __syncwarp(); /* this lane's write is seen by the next call's writer of the bin */
}

/* SUMSQ_LOADS values a lane are loaded before any is binned (one 16-byte
 * load where x is 16-byte aligned): binning one value is a chain of warp
 * collectives and a shared-memory update, and with one 4-byte load ahead
 * of each chain the kernel waited on memory (1.5 ms for GPT-2 124M's 124M
 * gradients on an H100, 9 times the time its 0.5 GB take to read). The
 * integer sums are exact in any order, so the split changes no bit. */
#define SUMSQ_LOADS 4

template <int VEC>
PC_KERNEL_T(PC_THREADS)
sumsq_exact_kernel(plait_sumsq_acc *acc, const float *x, size_t n) {
    __shared__ u64 bins[SUMSQ_WARPS][PLAIT_SUMSQ_BINS][2]; /* 32 KiB */
    __shared__ u64 nonfinite[SUMSQ_WARPS];
    const unsigned lane = threadIdx.x % PC_WARP, warp = threadIdx.x / PC_WARP;
    for (unsigned k = threadIdx.x; k < SUMSQ_WARPS * PLAIT_SUMSQ_BINS; k += blockDim.x)
        bins[k / PLAIT_SUMSQ_BINS][k % PLAIT_SUMSQ_BINS][0] = bins[k / PLAIT_SUMSQ_BINS][k % PLAIT_SUMSQ_BINS][1] = 0;
    if (threadIdx.x < SUMSQ_WARPS) nonfinite[threadIdx.x] = 0;
    __syncthreads();
    /* groups of SUMSQ_LOADS values; the loop's trip count is the same for
     * every lane */
    const size_t groups = n / SUMSQ_LOADS;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < groups; base += (size_t)gridDim.x * blockDim.x) {
        const size_t g = base + threadIdx.x;
        float v[SUMSQ_LOADS];
        if (g < groups) {
            if (VEC) {
                pc_ld(v, x + g * SUMSQ_LOADS);
            } else {
                PC_UNROLL
                for (int u = 0; u < SUMSQ_LOADS; u++) v[u] = x[g * SUMSQ_LOADS + u];
            }
        } else {
            PC_UNROLL
            for (int u = 0; u < SUMSQ_LOADS; u++) v[u] = 0.0f;
        }
        PC_UNROLL
        for (int u = 0; u < SUMSQ_LOADS; u++) bin_value(bins[warp], &nonfinite[warp], lane, v[u]);
    }
    /* the last n % SUMSQ_LOADS values: block 0's first lanes (the whole
     * block takes part, so every warp's collectives are complete) */
    if (blockIdx.x == 0) {
        const size_t i = groups * SUMSQ_LOADS + threadIdx.x;
        bin_value(bins[warp], &nonfinite[warp], lane, i < n ? x[i] : 0.0f);
    }
    __syncthreads();
    u64 *out = (u64 *)acc->bin;
    for (unsigned e = threadIdx.x; e < PLAIT_SUMSQ_BINS; e += blockDim.x) {
        u64 lo = 0, hi = 0;
        for (unsigned w = 0; w < SUMSQ_WARPS; w++) {
            add128(&lo, &hi, bins[w][e][0]);
            hi += bins[w][e][1];
        }
        if (lo) {
            u64 old = atomicAdd(&out[2 * e], lo);
            hi += old + lo < old; /* the carry out of the low word */
        }
        if (hi) atomicAdd(&out[2 * e + 1], hi);
    }
    if (threadIdx.x == 0) {
        u64 bad = 0;
        for (unsigned w = 0; w < SUMSQ_WARPS; w++) bad += nonfinite[w];
        if (bad) atomicAdd((u64 *)&acc->nonfinite, bad);
    }
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
    size_t want = (n + 4 * SUMSQ_LOADS * PC_THREADS - 1) / (4 * SUMSQ_LOADS * PC_THREADS);
    unsigned blocks = (unsigned)(want < (size_t)pc.sm_count * 4 ? want : (size_t)pc.sm_count * 4);
    if (pc_aligned16(x))
        PC_LAUNCH_T(sumsq_exact_kernel<1>, blocks ? blocks : 1, PC_THREADS, PC_THREADS)(acc, x, n);
    else
        PC_LAUNCH_T(sumsq_exact_kernel<0>, blocks ? blocks : 1, PC_THREADS, PC_THREADS)(acc, x, n);
    pc_check_launch("sumsq_exact");
}

void pc_launch_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    PC_LAUNCH(sumsq_merge_kernel, 1, PLAIT_SUMSQ_BINS)(dst, src);
    pc_check_launch("sumsq_merge");
}

} /* extern "C" */
