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
/* ABI 1.7 (plait/kernels.h): the norm's value and clipping factor, and
 * AdamW over a list of tensors (each exactly as plait_k_adamw computes it). */
void plait_k_sumsq_clip(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip);
void plait_k_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *args,
                         const float *scale);

#endif
