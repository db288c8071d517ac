/*
 * Element-wise reduction kernels for every dtype × operator the collectives
 * support, and the half-precision conversions behind them.
 *
 * f16 and bf16 are reduced by converting each operand to float, applying the
 * operator in float and rounding the result back to nearest-even, so one
 * pairwise step is one correctly rounded operation (what NCCL does on CPUs
 * without native half arithmetic). Integer SUM and PROD wrap modulo 2^bits
 * (computed in unsigned arithmetic: no undefined overflow). AVG reduces like
 * SUM; plait_reduce_finish_avg() divides once at the end.
 *
 * All functions are pure, thread-safe and never fail; callers validate dtype
 * and operator first (plait_dtype_size() returns 0 for an unknown dtype).
 */
#ifndef PLAIT_CORE_COMM_REDUCE_H
#define PLAIT_CORE_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <plait/types.h>

/* Bytes per element; 0 for a value outside plait_dtype. */
size_t plait_dtype_size(plait_dtype dtype);
/* "f32", "bf16", ...; "?" for unknown values. */
const char *plait_dtype_name(plait_dtype dtype);
/* "sum", "avg", ...; "?" for unknown values. */
const char *plait_redop_name(plait_redop op);

/* dst[i] = a[i] op b[i] for i < n (AVG computes the sum). `dst` may be the
 * same pointer as `a` or `b` (exact aliasing only; no partial overlap). The
 * left operand is `a`: every operator here is commutative, but the ordered
 * algorithm documents "left + right" and keeps to it. */
void plait_reduce(void *dst, const void *a, const void *b, size_t n, plait_dtype dtype,
                  plait_redop op);

/* For AVG: buf[i] /= group_size (integers truncate toward zero). */
void plait_reduce_finish_avg(void *buf, size_t n, plait_dtype dtype, int group_size);

/* IEEE binary16 and bfloat16 conversions, round to nearest even; NaN stays
 * NaN (quiet), overflow goes to infinity, subnormals are exact. */
float plait_f16_to_f32(uint16_t h);
uint16_t plait_f32_to_f16(float f);
float plait_bf16_to_f32(uint16_t h);
uint16_t plait_f32_to_bf16(float f);

/* A float's bit pattern and back (no aliasing rules broken). */
static inline uint32_t plait_f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float plait_bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

#endif
