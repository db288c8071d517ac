/*
 * The exact Σx² accumulator (plait_sumsq_acc) on the device, with the CPU's
 * binning bit for bit (core/kernels/kernels_vector.c): x = m · 2^(e-150), the
 * square's mantissa m² < 2^48 is added exactly into the 128-bit bin of
 * exponent e. Integer sums are exact in any order, so the accumulator
 * equals the CPU's for the same values, whatever the split.
 *
 * Each lane keeps its own 64-bit sums for a window of SUMSQ_WINDOW
 * exponents below its warp's `top` (a column of shared memory no other
 * lane touches), so binning a value is a shared load, an add and a store:
 * no warp collective, no atomic. Gradients are values of similar size in
 * long runs (a tensor at a time), so a window of 16 exponents (2^32 in the
 * squares) under the largest value a warp has met holds nearly all of
 * them; a value outside it goes straight into the accumulator with 64-bit
 * integer atomics on device memory. The warp moves its window when a
 * group's largest value leaves it far below or passes its top, first
 * adding its sums into the accumulator. At the end each warp's sums go
 * into the block's bins, and the block's bins into the accumulator.
 *
 * (Finding the lanes of one exponent with __match_any_sync and summing
 * them with __reduce_add_sync costs a chain of warp collectives a value:
 * on an H100 nine times the time GPT-2 124M's gradients take to read
 * (docs/gpu.md, "What the plugin implements"). 64-bit atomics on shared memory are
 * a compare-and-swap loop on sm_80 and sm_90, so nothing here uses them.)
 */
#include "kcommon.cuh"

typedef unsigned long long u64;

#define SUMSQ_WARPS (PC_THREADS / PC_WARP)
/* values a lane loads before binning any (one 16-byte load where x is
 * 16-byte aligned), and a block's values an iteration */
#define SUMSQ_LOADS 4
#define SUMSQ_GROUP (SUMSQ_LOADS * PC_THREADS)
/* exponents a lane's sums cover: top, top - 1, ..., top - SUMSQ_WINDOW + 1 */
#define SUMSQ_WINDOW 16
/* A lane adds at most SUMSQ_LOADS squares (each < 2^48) to one sum an
 * iteration, so 2^14 iterations a block keep every sum below 2^64. */
#define SUMSQ_MAX_ITERS (1u << 14)

/* the 128-bit integer (*lo, *hi) += (vlo, vhi) */
__device__ static inline void add128(u64 *lo, u64 *hi, u64 vlo, u64 vhi) {
    const u64 sum = *lo + vlo;
    *hi += vhi + (sum < vlo);
    *lo = sum;
}

/* bin e of the accumulator in device memory += (lo, hi), by integer atomics:
 * the low word's carry is added to the high word, so concurrent additions
 * leave the exact sum modulo 2^128 in any order */
__device__ static inline void add_to_acc(u64 *bins, unsigned e, u64 lo, u64 hi) {
    if (lo) {
        const u64 old = atomicAdd(&bins[2 * e], lo);
        hi += old + lo < old;
    }
    if (hi) atomicAdd(&bins[2 * e + 1], hi);
}

/* The exact sum over the warp of each lane's 64-bit v, in lane 0: three
 * 22-bit slices summed by __reduce_add_sync (32 x 2^22 fits in 32 bits). */
__device__ static inline void warp_sum64(u64 v, u64 *lo, u64 *hi) {
    const u64 a = __reduce_add_sync(0xffffffffu, (unsigned)(v & 0x3fffffu));
    const u64 b = __reduce_add_sync(0xffffffffu, (unsigned)(v >> 22 & 0x3fffffu));
    const u64 c = __reduce_add_sync(0xffffffffu, (unsigned)(v >> 44));
    *lo = a + (b << 22); /* < 2^50 */
    *hi = 0;
    add128(lo, hi, c << 44, c >> 20);
}

/* The warp's window sums (sums[k][thread] for exponent top - k) into bins
 * (device memory when `atomic`, else the block's shared bins, which only
 * this warp writes meanwhile), zeroing them. The whole warp calls it. */
__device__ static inline void flush_window(u64 (*sums)[PC_THREADS], unsigned top, u64 *bins, int atomic) {
    const unsigned lane = threadIdx.x % PC_WARP;
    PC_UNROLL
    for (unsigned k = 0; k < SUMSQ_WINDOW; k++) {
        const u64 v = sums[k][threadIdx.x];
        sums[k][threadIdx.x] = 0;
        if (!__any_sync(0xffffffffu, v != 0)) continue;
        u64 lo, hi;
        warp_sum64(v, &lo, &hi);
        if (lane == 0) {
            if (atomic) add_to_acc(bins, top - k, lo, hi);
            else add128(&bins[2 * (top - k)], &bins[2 * (top - k) + 1], lo, hi);
        }
    }
}

/* x's binary exponent field (0 for zero: nothing to add; 1 for subnormals,
 * which share bin 1, as on the CPU) and its mantissa's square; *bad counts
 * an Inf or NaN */
__device__ static inline unsigned square_of(float v, u64 *sq, unsigned *bad) {
    const uint32_t bits = __float_as_uint(v);
    const uint32_t ex = (bits >> 23) & 0xffu;
    u64 mant = bits & 0x7fffffu;
    *sq = 0;
    if (ex == 0xffu) {
        (*bad)++;
        return 0;
    }
    if (ex == 0 && mant == 0) return 0;
    if (ex != 0) mant |= 1u << 23;
    *sq = mant * mant;
    return ex ? ex : 1u;
}

/* Block b bins x[b·chunk, (b+1)·chunk) (chunk a multiple of SUMSQ_GROUP, at
 * most SUMSQ_MAX_ITERS of them): runs of similar values stay in one
 * block's window, and a block's groups stay 16-byte aligned with x. */
template <int VEC>
PC_KERNEL_T(PC_THREADS)
sumsq_exact_kernel(plait_sumsq_acc *acc, const float *x, size_t n, size_t chunk) {
    __shared__ u64 sums[SUMSQ_WINDOW][PC_THREADS]; /* 32 KiB; column t is thread t's */
    __shared__ u64 bins[PLAIT_SUMSQ_BINS * 2];       /* the block's, filled at the end */
    u64 *out = (u64 *)acc->bin;
    PC_UNROLL
    for (unsigned k = 0; k < SUMSQ_WINDOW; k++) sums[k][threadIdx.x] = 0;
    for (unsigned k = threadIdx.x; k < PLAIT_SUMSQ_BINS * 2; k += blockDim.x) bins[k] = 0;
    unsigned top = 0, bad = 0; /* top: the warp's, 0 until it meets a value */
    const size_t first = (size_t)blockIdx.x * chunk, end = first + chunk < n ? first + chunk : n;
    for (size_t base = first; base < end; base += SUMSQ_GROUP) { /* the same trip count for every lane */
        const size_t i = base + (size_t)threadIdx.x * SUMSQ_LOADS;
        float v[SUMSQ_LOADS];
        if (VEC && i + SUMSQ_LOADS <= end) {
            pc_ld(v, x + i);
        } else {
            PC_UNROLL
            for (int u = 0; u < SUMSQ_LOADS; u++) v[u] = i + u < end ? x[i + u] : 0.0f;
        }
        unsigned e[SUMSQ_LOADS], most = 0;
        u64 sq[SUMSQ_LOADS];
        PC_UNROLL
        for (int u = 0; u < SUMSQ_LOADS; u++) {
            e[u] = square_of(v[u], &sq[u], &bad);
            most = e[u] > most ? e[u] : most;
        }
        /* Move the window (the same decision in every lane) when the
         * group's largest value passes its top, or lies half a window
         * below it: the window then keeps 15 exponents under that value. */
        const unsigned gmax = __reduce_max_sync(0xffffffffu, most);
        if (gmax > top || (gmax != 0 && gmax + SUMSQ_WINDOW / 2 < top)) {
            if (top) flush_window(sums, top, out, 1);
            top = gmax;
        }
        PC_UNROLL
        for (int u = 0; u < SUMSQ_LOADS; u++) {
            const unsigned k = top - e[u]; /* wraps when e > top: outside */
            if (e[u] != 0 && k < SUMSQ_WINDOW) sums[k][threadIdx.x] += sq[u];
            else if (e[u] != 0) add_to_acc(out, e[u], sq[u], 0);
        }
    }
    /* each warp's sums into the block's bins, one warp at a time */
    for (unsigned w = 0; w < SUMSQ_WARPS; w++) {
        __syncthreads();
        if (threadIdx.x / PC_WARP == w && top) flush_window(sums, top, bins, 0);
    }
    const unsigned bad_warp = __reduce_add_sync(0xffffffffu, bad);
    if (threadIdx.x % PC_WARP == 0 && bad_warp) atomicAdd((u64 *)&acc->nonfinite, (u64)bad_warp);
    __syncthreads();
    for (unsigned e = threadIdx.x; e < PLAIT_SUMSQ_BINS; e += blockDim.x) add_to_acc(out, e, bins[2 * e], bins[2 * e + 1]);
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
    /* enough blocks to fill the GPU, each taking at least 4 groups (a block
     * adds its bins once), and enough that none takes more than
     * SUMSQ_MAX_ITERS */
    const size_t groups = (n + SUMSQ_GROUP - 1) / SUMSQ_GROUP;
    size_t blocks = (groups + 3) / 4;
    if (blocks > (size_t)pc.sm_count * 4) blocks = (size_t)pc.sm_count * 4;
    if (blocks < (groups + SUMSQ_MAX_ITERS - 1) / SUMSQ_MAX_ITERS) blocks = (groups + SUMSQ_MAX_ITERS - 1) / SUMSQ_MAX_ITERS;
    if (!blocks) blocks = 1;
    const size_t chunk = (groups + blocks - 1) / blocks * SUMSQ_GROUP;
    blocks = (n + chunk - 1) / chunk;
    if (pc_aligned16(x))
        PC_LAUNCH_T(sumsq_exact_kernel<1>, (unsigned)blocks, PC_THREADS, PC_THREADS)(acc, x, n, chunk);
    else
        PC_LAUNCH_T(sumsq_exact_kernel<0>, (unsigned)blocks, PC_THREADS, PC_THREADS)(acc, x, n, chunk);
    pc_check_launch("sumsq_exact");
}

void pc_launch_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    PC_LAUNCH(sumsq_merge_kernel, 1, PLAIT_SUMSQ_BINS)(dst, src);
    pc_check_launch("sumsq_merge");
}

} /* extern "C" */
