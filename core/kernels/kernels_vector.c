#include "kernels/kernels_vector.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

/* Element blocks of the threaded vector kernels: a fixed cut, and each
 * element's result depends on that element alone (or, for the exact Σx²,
 * on integer sums that any order gives exactly), so every thread count
 * gives the same bits. */
#define VEC_CHUNK PLAIT_ELEMWISE_CHUNK

typedef struct vec_job {
    float *y, *m, *v;
    const float *x;
    float a;
    const plait_adamw_args *args;
    plait_sumsq_acc *acc;
} vec_job;

void plait_k_zero(float *x, size_t n) { memset(x, 0, n * sizeof *x); }

void plait_k_zero_f64(double *x, size_t n) { memset(x, 0, n * sizeof *x); }

void plait_k_copy(float *dst, const float *src, size_t n) {
    if (dst != src) memmove(dst, src, n * sizeof *dst);
}

static void scale_range(void *vj, int64_t lo, int64_t hi) {
    const vec_job *j = vj;
    float *restrict x = j->y;
    const float a = j->a;
    for (int64_t i = lo; i < hi; i++) x[i] *= a;
}

void plait_k_scale(float *x, size_t n, float a) {
    vec_job j = {.y = x, .a = a};
    plait_pool_for((int64_t)n, VEC_CHUNK, scale_range, &j);
}

static void axpy_range(void *vj, int64_t lo, int64_t hi) {
    const vec_job *j = vj;
    float *restrict y = j->y;
    const float *restrict x = j->x;
    const float a = j->a;
    for (int64_t i = lo; i < hi; i++) y[i] += a * x[i];
}

void plait_k_axpy(float *y, const float *x, size_t n, float a) {
    vec_job j = {.y = y, .x = x, .a = a};
    plait_pool_for((int64_t)n, VEC_CHUNK, axpy_range, &j);
}

double plait_k_sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

/* Decoupled weight decay, then Adam with bias correction, in the order
 * PyTorch's AdamW (foreach=False) applies them, in float32. */
PLAIT_SIMD_CLONES static void adamw_span(float *restrict param, const float *restrict grad, float *restrict m,
                                         float *restrict v, int64_t n, const plait_adamw_consts *cp) {
    const plait_adamw_consts c = *cp; /* a copy: the stores cannot alias it */
    for (int64_t i = 0; i < n; i++) plait_adamw_elem(&param[i], grad[i], &m[i], &v[i], &c);
}

/* Each element on its own, so the clones (and their vector lanes) give the
 * bits of one element at a time: GCC contracts nothing to FMA in ISO C. */
static void adamw_range(void *vj, int64_t lo, int64_t hi) {
    const vec_job *j = vj;
    const plait_adamw_consts c = plait_adamw_consts_of(j->args);
    adamw_span(j->y + lo, j->x + lo, j->m + lo, j->v + lo, hi - lo, &c);
}

void plait_k_adamw(float *param, const float *grad, float *m, float *v, size_t n,
                   const plait_adamw_args *a) {
    vec_job j = {.y = param, .m = m, .v = v, .x = grad, .args = a};
    plait_pool_for((int64_t)n, VEC_CHUNK, adamw_range, &j);
}

/* x = m · 2^(e-150) with m < 2^24 (implicit bit added for normals; denormals
 * share bin 1's scale), so x² = m² · 2^(2e-300) and m² < 2^48: the bin for
 * exponent e accumulates Σ m² exactly in 128 bits (2^80 additions before
 * overflow). */
static void sumsq_exact_small(plait_sumsq_acc *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        uint32_t e = (bits >> 23) & 0xffu;
        uint64_t mant = bits & 0x7fffffu;
        if (e == 0xffu) {
            acc->nonfinite++;
            continue;
        }
        if (e == 0) {
            if (mant == 0) continue;
            e = 1;
        } else {
            mant |= 1u << 23;
        }
        uint64_t sq = mant * mant;
        uint64_t lo = acc->bin[e][0] + sq;
        acc->bin[e][1] += lo < sq;
        acc->bin[e][0] = lo;
    }
}

/* The same sums, faster on long tensors: element i goes into the 64-bit
 * bins of set i % SUMSQ_SETS, so that neighbours of one exponent (the
 * common case) add along four chains through memory instead of one, with
 * no carry to test: a set takes at most 2^16 squares, each below 2^48,
 * before it is folded into acc's 128-bit bins. A zero adds nothing to
 * bin 1. Integer sums: the same bits as the loop above. */
#define SUMSQ_SETS 4
#define SUMSQ_BLOCK ((size_t)SUMSQ_SETS << 16)

static inline uint64_t sumsq_into(uint64_t *bins, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    const uint32_t e = (bits >> 23) & 0xffu;
    const uint64_t mant = (bits & 0x7fffffu) | (uint64_t)(e != 0) << 23;
    if (e == 0xffu) return 1;
    bins[e + (e == 0)] += mant * mant;
    return 0;
}

static void sumsq_exact_serial(plait_sumsq_acc *acc, const float *x, size_t n) {
    if (n < 4 * PLAIT_SUMSQ_BINS) { /* folding the sets would cost more */
        sumsq_exact_small(acc, x, n);
        return;
    }
    uint64_t bins[SUMSQ_SETS][PLAIT_SUMSQ_BINS];
    for (size_t b0 = 0; b0 < n; b0 += SUMSQ_BLOCK) {
        const size_t b1 = n - b0 < SUMSQ_BLOCK ? n : b0 + SUMSQ_BLOCK;
        memset(bins, 0, sizeof bins);
        uint64_t nonfinite = 0;
        size_t i = b0;
        for (; i + SUMSQ_SETS <= b1; i += SUMSQ_SETS)
            for (int k = 0; k < SUMSQ_SETS; k++) nonfinite += sumsq_into(bins[k], x[i + k]);
        for (; i < b1; i++) nonfinite += sumsq_into(bins[0], x[i]);
        acc->nonfinite += nonfinite;
        for (int k = 0; k < SUMSQ_SETS; k++)
            for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) {
                const uint64_t lo = acc->bin[e][0] + bins[k][e];
                acc->bin[e][1] += lo < bins[k][e];
                acc->bin[e][0] = lo;
            }
    }
}

/* Each block into its own accumulator, merged into the caller's under a
 * lock: integer sums, exact in any merge order. */
static pthread_mutex_t g_sumsq_lock = PTHREAD_MUTEX_INITIALIZER;

static void sumsq_exact_range(void *vj, int64_t lo, int64_t hi) {
    const vec_job *j = vj;
    plait_sumsq_acc part;
    memset(&part, 0, sizeof part);
    sumsq_exact_serial(&part, j->x + lo, (size_t)(hi - lo));
    pthread_mutex_lock(&g_sumsq_lock);
    plait_k_sumsq_merge(j->acc, &part);
    pthread_mutex_unlock(&g_sumsq_lock);
}

void plait_k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
    if (n <= VEC_CHUNK) {
        sumsq_exact_serial(acc, x, n);
        return;
    }
    vec_job j = {.x = x, .acc = acc};
    plait_pool_for((int64_t)n, VEC_CHUNK, sumsq_exact_range, &j);
}

void plait_k_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) {
        uint64_t lo = dst->bin[e][0] + src->bin[e][0];
        dst->bin[e][1] += src->bin[e][1] + (lo < src->bin[e][0]);
        dst->bin[e][0] = lo;
    }
    dst->nonfinite += src->nonfinite;
}

double plait_k_sumsq_value(const plait_sumsq_acc *acc) { return plait_sumsq_acc_value(acc); }

void plait_k_sumsq_clip(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip) {
    const double v = plait_sumsq_acc_value(acc);
    *sumsq = v;
    *scale = isfinite(v) ? plait_clip_factor(grad_clip, v) : NAN;
}

void plait_k_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *args,
                         const float *scale) {
    (void)total;
    if (!isfinite(*scale)) return;
    plait_adamw_args a = *args;
    a.grad_scale = *scale;
    for (size_t i = 0; i < count; i++) {
        a.weight_decay = tensors[i].weight_decay;
        plait_k_adamw(tensors[i].param, tensors[i].grad, tensors[i].m, tensors[i].v, (size_t)tensors[i].n, &a);
    }
}
