/*
 * Inline float helpers the compiler can vectorise without -ffast-math or
 * -march: an exp with explicit range reduction (no libm call in the loop)
 * and row reductions over a fixed set of 8 lanes, so every sum is computed
 * in one fixed order (deterministic, and independent of the vector width
 * the compiler picks).
 */
#ifndef PLAIT_CORE_KERNELS_MATH_H
#define PLAIT_CORE_KERNELS_MATH_H

#include <stdint.h>
#include <string.h>

/* e^x for x in float range, relative error about 2 ulp (Cephes' expf
 * polynomial after reduction by ln 2). Inputs below -87 give e^-87
 * (~1.6e-38) and above 88 give e^88: callers use it where such values are
 * negligible (softmax after max subtraction, sigmoid). */
static inline float plait_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* round(x / ln2) with the 1.5*2^23 trick (no SSE4.1 rounding needed) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#define PLAIT_LANES 8

/* Σ x[i], i < n, in a fixed order: 8 strided partial sums, then a fixed tree. */
static inline float plait_sum(const float *x, int64_t n) {
    float acc[PLAIT_LANES] = {0};
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) acc[l] += x[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Σ x[i]*y[i] in the same fixed order. */
static inline float plait_dot(const float *x, const float *y, int64_t n) {
    float acc[PLAIT_LANES] = {0};
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) acc[l] += x[i + l] * y[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i] * y[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Σ (x[i]-c)^2. */
static inline float plait_sumsq_centered(const float *x, float c, int64_t n) {
    float acc[PLAIT_LANES] = {0};
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) {
            float d = x[i + l] - c;
            acc[l] += d * d;
        }
    for (int l = 0; i < n; i++, l++) {
        float d = x[i] - c;
        acc[l] += d * d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* max x[i] (n >= 1); NaN-free inputs assumed. */
static inline float plait_max(const float *x, int64_t n) {
    float acc[PLAIT_LANES];
    for (int l = 0; l < PLAIT_LANES; l++) acc[l] = x[0];
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
    for (int l = 0; i < n; i++, l++) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
    float m = acc[0];
    for (int l = 1; l < PLAIT_LANES; l++) m = acc[l] > m ? acc[l] : m;
    return m;
}

#endif
