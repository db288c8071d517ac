/*
 * cuBLASLt as loaded by lt.c (dlopen at open(), see there why), and the
 * GEMM layer's cache of prepared products (gemm.c). Internal to the plugin.
 */
#ifndef PLAIT_PCUDA_LT_H
#define PLAIT_PCUDA_LT_H

#include <cublasLt.h>

#include "pcuda.h"

#define PC_CUBLAS_MAJOR CUBLAS_VER_MAJOR

typedef struct pc_lt_api {
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*destroy)(cublasLtHandle_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                             cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                             const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                             const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*layout_set)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *,
                               size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t[], int *);
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
} pc_lt_api;

extern pc_lt_api pc_lt;

/* Drop every cached product (gemm.c); called before the handle goes. */
void pc_gemm_forget(void);

#endif
