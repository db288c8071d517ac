/*
 * Inline float helpers the compiler can vectorise without -ffast-math or
 * -march: an exp with explicit range reduction (no libm call in the loop)
 * and row reductions over a fixed set of 8 lanes, so every sum is computed
 * in one fixed order (deterministic, and independent of the vector width
 * the compiler picks).
 *
 * Thread-safety: pure inline functions.
 */
#ifndef PLAIT_CORE_KERNELS_MATH_H
#define PLAIT_CORE_KERNELS_MATH_H

#include <stdint.h>
#include <string.h>

/* Float comparisons with a select do not vectorise under GCC's default
 * -ftrapping-math (a compare may raise an FP exception), integer ones do.
 * These work on the bit patterns instead. */

/* x with |x| clamped to 87 (NaN becomes ±87). */
static inline float plait_clamp87(float x) {
    int32_t b;
    memcpy(&b, &x, sizeof b);
    int32_t sign = b & (int32_t)0x80000000u, mag = b & 0x7fffffff;
    mag = mag > 0x42ae0000 ? 0x42ae0000 : mag; /* 87.0f */
    b = sign | mag;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* A signed integer with the same order as the float (NaN-free input). */
static inline int32_t plait_float_key(float x) {
    int32_t b;
    memcpy(&b, &x, sizeof b);
    return b ^ ((b >> 31) & 0x7fffffff);
}

static inline float plait_key_float(int32_t k) {
    int32_t b = k ^ ((k >> 31) & 0x7fffffff);
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* e^x, relative error about 2 ulp (Cephes' expf polynomial after reduction
 * by ln 2). |x| is clamped to 87: e^-87 (~1.6e-38) stands for anything
 * smaller and e^87 for anything larger; callers use it where that is
 * negligible (softmax after max subtraction, sigmoid). */
static inline float plait_expf(float x) {
    x = plait_clamp87(x);
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
    int32_t bits = (int32_t)((uint32_t)((int32_t)n + 127) << 23);
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

/* Σ x[i]·y[i]·z[i], in plait_dot's order. */
static inline float plait_dot3(const float *x, const float *y, const float *z, int64_t n) {
    float acc[PLAIT_LANES] = {0};
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) acc[l] += x[i + l] * y[i + l] * z[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += x[i] * y[i] * z[i];
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
    int32_t acc[PLAIT_LANES];
    int32_t k0 = plait_float_key(x[0]);
    for (int l = 0; l < PLAIT_LANES; l++) acc[l] = k0;
    int64_t i = 0;
    for (; i + PLAIT_LANES <= n; i += PLAIT_LANES)
        for (int l = 0; l < PLAIT_LANES; l++) {
            int32_t k = plait_float_key(x[i + l]);
            acc[l] = k > acc[l] ? k : acc[l];
        }
    for (int l = 0; i < n; i++, l++) {
        int32_t k = plait_float_key(x[i]);
        acc[l] = k > acc[l] ? k : acc[l];
    }
    int32_t m = acc[0];
    for (int l = 1; l < PLAIT_LANES; l++) m = acc[l] > m ? acc[l] : m;
    return plait_key_float(m);
}

#endif
