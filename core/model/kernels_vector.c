#include "model/kernels_vector.h"

#include <math.h>
#include <string.h>

void plait_k_zero(float *x, size_t n) { memset(x, 0, n * sizeof *x); }

void plait_k_copy(float *dst, const float *src, size_t n) {
    if (dst != src) memmove(dst, src, n * sizeof *dst);
}

void plait_k_scale(float *x, size_t n, float a) {
    for (size_t i = 0; i < n; i++) x[i] *= a;
}

void plait_k_axpy(float *y, const float *x, size_t n, float a) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

double plait_k_sumsq(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

/* Decoupled weight decay, then Adam with bias correction, in the order
 * PyTorch's AdamW (foreach=False) applies them, in float32. */
void plait_k_adamw(float *param, const float *grad, float *m, float *v, size_t n,
                   const plait_adamw_args *a) {
    const float b1 = a->beta1, b2 = a->beta2;
    const double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    const float step_size = (float)((double)a->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay = 1.0f - a->lr * a->weight_decay;
    const float gs = a->grad_scale;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * gs;
        float p = param[i] * decay;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + a->eps;
        param[i] = p - step_size * (mi / denom);
    }
}

/* x = m · 2^(e-150) with m < 2^24 (implicit bit added for normals; denormals
 * share bin 1's scale), so x² = m² · 2^(2e-300) and m² < 2^48: the bin for
 * exponent e accumulates Σ m² exactly in 128 bits (2^80 additions before
 * overflow). */
void plait_k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
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

void plait_k_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) {
        uint64_t lo = dst->bin[e][0] + src->bin[e][0];
        dst->bin[e][1] += src->bin[e][1] + (lo < src->bin[e][0]);
        dst->bin[e][0] = lo;
    }
    dst->nonfinite += src->nonfinite;
}

double plait_k_sumsq_value(const plait_sumsq_acc *acc) {
    if (acc->nonfinite) return INFINITY;
    long double total = 0;
    for (int e = 1; e < PLAIT_SUMSQ_BINS; e++) {
        if (!acc->bin[e][0] && !acc->bin[e][1]) continue;
        long double bin = (long double)acc->bin[e][1] * 18446744073709551616.0L + (long double)acc->bin[e][0];
        total += ldexpl(bin, 2 * e - 300);
    }
    return (double)total;
}
