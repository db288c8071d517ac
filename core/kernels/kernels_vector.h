/*
 * Vector kernels used by optimizers: fills, copies, axpy, sums of squares
 * (plain and exact), and the AdamW update. scale, axpy, adamw and
 * sumsq_exact run on the kernels' threads over fixed element blocks; the
 * others are single-threaded (memory-bound). All
 * deterministic (fixed order), reentrant. Entries of host->kernels.
 */
#ifndef PLAIT_CORE_KERNELS_VECTOR_H
#define PLAIT_CORE_KERNELS_VECTOR_H

#include <plait/kernels.h>

void plait_k_zero(float *x, size_t n);
void plait_k_zero_f64(double *x, size_t n);
void plait_k_copy(float *dst, const float *src, size_t n);
void plait_k_scale(float *x, size_t n, float a);
void plait_k_axpy(float *y, const float *x, size_t n, float a);
double plait_k_sumsq(const float *x, size_t n);
void plait_k_adamw(float *param, const float *grad, float *m, float *v, size_t n,
                   const plait_adamw_args *args);
void plait_k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n);
void plait_k_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src);
double plait_k_sumsq_value(const plait_sumsq_acc *acc);

#endif
