/*
 * The start-up line that says what the products run on: the CPU and its
 * features, the BLAS and its kernels, the math threads and the precision.
 * Reentrant; never fails (truncates to `len`).
 */
#ifndef PLAIT_CORE_CPU_COMPUTE_LINE_H
#define PLAIT_CORE_CPU_COMPUTE_LINE_H

#include <stddef.h>

/* "AMD EPYC (AVX2), OpenBLAS 0.3.21, Zen kernels (as OpenBLAS detected), 2
 * math threads per rank, precision fp32" */
void plait_compute_line(char *buf, size_t len, int threads, const char *precision);

#endif
