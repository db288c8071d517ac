/*
 * The CPU references of the kernel table's bf16-activation entries
 * (plait/kernels.h, ABI 1.8, 1.9, 1.22, 1.25 and 1.29; from_bf16 of 1.23), for the kernel
 * tests. The core's CPU device has no such entries (it keeps float32
 * activations); a test fills them into its copy of the CPU table with
 * kref_bf16_fill. Each reference is
 * the contract written out: the bf16 inputs widened to float32 exactly,
 * the float32 entry of the same name, each bf16 output rounded once to
 * nearest even. Host memory only; each thread has its own scratch, which
 * kref_bf16_release frees (a thread that used the references calls it
 * before it ends).
 */
#ifndef PLAIT_TEST_KREF_BF16_H
#define PLAIT_TEST_KREF_BF16_H

#include <stddef.h>

#include <plait/kernels.h>

/* float32 -> bf16, round to nearest even (NaN stays NaN), and back. */
plait_bf16 kref_bf16_of(float x);
float kref_float_of(plait_bf16 h);

/* Point t's bf16-activation entries at the references, which call t's own
 * float32 entries (copied at this call). */
void kref_bf16_fill(plait_kernels *t);
/* Free the calling thread's scratch (the references allocate it again
 * when called again). */
void kref_bf16_release(void);

#endif
