/*
 * Shared by the kernel files only.
 */
#ifndef PLAIT_CORE_KERNELS_INTERNAL_H
#define PLAIT_CORE_KERNELS_INTERNAL_H

#include <stdint.h>

/* One-time setup before the first BLAS call: OpenBLAS to one thread (plait
 * threads products itself, deterministically). Cheap after the first call;
 * thread-safe. */
void plait_kernels_ensure_init(void);

/* One cblas_sgemm call on the calling thread (row-major), no splitting. */
void plait_k_blas_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc);

/* Elements per work item of threaded elementwise kernels (fixed, so the
 * split never depends on the thread count). */
#define PLAIT_ELEMWISE_CHUNK 16384

#endif
