/*
 * A cuBLASLt stand-in for the CUDA emulator (test infrastructure, never
 * installed): the 14 functions the cuda device plugin looks up (LT_SYMBOLS
 * in plugins/device/cuda/lt.c), compiled against the toolkit's own
 * <cublasLt.h> so every type, enum value and signature is NVIDIA's, computing
 * on the CPU. "Device memory" is host memory under the emulator, so the
 * operands are read in place. cublasLtMatmul checks everything at the call
 * and queues the product on its stream through the emulated runtime
 * (plait_cublaslt_emu_set_queue), so it runs in stream order, later, as on
 * a GPU; without a runtime (test_cublaslt_emu) it runs before returning.
 *
 * What it computes (NVIDIA's cuBLASLt semantics, column-major throughout):
 *   D = alpha * op(A) * op(B) + beta * C (+ bias[row])
 * with op() = TRANSA/TRANSB (N or T), scale type CUDA_R_32F, compute
 * CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32 (32F operands only),
 * and the types of the rows of NVIDIA's cublasLtMatmul table for 32F
 * compute that plait uses: A/B CUDA_R_32F with C/D CUDA_R_32F, A/B
 * CUDA_R_16BF with C/D CUDA_R_32F, A/B CUDA_R_16BF with C/D CUDA_R_16BF.
 * C and D are of one type (the table has no row where they differ), and
 * the table has no bf16 output from float32 operands: both are refused.
 * A bf16 D is the float epilogue's result rounded once to nearest even. The
 * bias and GELU's auxiliary matrix are of D's type: <cublasLt.h> says so of
 * BIAS_DATA_TYPE and EPILOGUE_AUX_DATA_TYPE when unset, and lists
 * exceptions only for integer (IMMA) and fp8 kernels, so setting either to
 * another type than D's is refused here. Strided batches (BATCH_COUNT,
 * STRIDED_BATCH_OFFSET in elements), epilogue DEFAULT or BIAS (one value
 * of D's type per row of D, broadcast across D's columns, per batch at
 * BIAS_BATCH_STRIDE), GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU,
 * and the bias gradients BGRADA and BGRADB: one value of C's type per row
 * of D (BGRADA: the sum over k of op(A)'s row) or per column of D
 * (BGRADB: over k of op(B)'s column) written to BIAS_POINTER, a float sum
 * in ascending k of the widened operand; one batch, and alpha 1 (the
 * header does not say whether alpha scales it, so another alpha is
 * refused).
 * beta == 0 does not read C: NaN in C stays out of D, as BLAS and cuBLAS
 * specify for beta == 0. The GELU epilogues, as NVIDIA's header documents
 * them: the bias is added first, then D = GELU(x); the _AUX ones also store
 * x, GELU's input, into the auxiliary matrix (EPILOGUE_AUX_POINTER, D's
 * shape at EPILOGUE_AUX_LD, batches at EPILOGUE_AUX_BATCH_STRIDE, both
 * divisible by 8, LD >= D's rows; of D's type); DGELU reads
 * that matrix back and stores D = GELU'(aux) · x, "the GELU gradient". The
 * header does not say which GELU: the emulator computes the tanh form
 * (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))), GPT-2's and plait's CPU
 * kernel's; a GPU run's kernel tests would show a library computing the
 * erf form (they differ by up to ~1e-3, past the 1e-5 bound). DGELU_BGRAD
 * and the ReLU epilogues are refused as not emulated.
 *
 * Arithmetic: the operands are widened to float (bf16 exactly, TF32 by
 * rounding, see tf32_round) and op(A)·op(B) is one single-call OpenBLAS
 * sgemm with alpha 1 into a scratch tile, so each element is a float sum in
 * the order of OpenBLAS's kernel for that shape: the same call gives the
 * same bits. alpha, beta·C and the bias are then applied per element as
 * alpha·t, fmaf(beta, c, ·), + bias (written out, so no compiler contracts
 * them differently).
 *
 * Strictness is the point: a GPU library misused tends to give wrong numbers
 * or a crash far away, so every call checks what NVIDIA documents (and a
 * little more, marked "stricter than cuBLASLt" where real cuBLASLt would
 * accept) and refuses with CUBLAS_STATUS_INVALID_VALUE or NOT_SUPPORTED and
 * one line on stderr, "cublasLt-emu: <function>: <why>", leaving D
 * untouched. Alignment promises: the heuristic records in the opaque
 * cublasLtMatmulAlgo_t the MIN_ALIGNMENT_{A,B,C,D}_BYTES of the preference
 * it was given (and the bias pointer's alignment it saw, see
 * BIAS_ALIGN_CAP), the preference's MAX_WORKSPACE_BYTES, the compute type,
 * operand types and epilogue; cublasLtMatmul refuses pointers less aligned
 * than promised, a workspace above the promised maximum and a descriptor
 * that no longer matches the algorithm. The heuristic offers up to ALGOS
 * candidates (requestedAlgoCount of them at most), told apart by an id in
 * the algo and computing the same bits; test hooks make one slow and count
 * the calls of each (plait_cublaslt_emu_slow_algo, _algo_calls), and the
 * environment's PLAIT_CUBLASLT_EMU_NO_EPILOGUE withholds one epilogue.
 *
 * This file holds the objects, the heuristic and the product; validate.c
 * what a matmul's descriptor and layouts must satisfy (lt_internal.h).
 *
 * Thread-safety: descriptors and handles are plain heap objects with no
 * shared state; concurrent calls on distinct objects are safe, as in
 * cuBLASLt. Errors: the cublasStatus_t of each function, as above.
 */
#include <cblas.h>
#include <cublasLt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lt_internal.h"

/* The test hook: calls of each candidate accepted by cublasLtMatmul, and
 * the one made slow (g_slow_ms milliseconds more when it runs). */
static _Atomic uint64_t g_algo_calls[ALGOS];
static _Atomic int g_slow_algo = -1;
static _Atomic unsigned g_slow_ms;

cublasStatus_t lt_refuse(cublasStatus_t s, const char *fn, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cublasLt-emu: %s: %s\n", fn, msg);
    return s;
}

/* ---- objects ------------------------------------------------------------ */

/* Handles, layouts, descriptors and preferences are calloc'd structs whose
 * first member is their kind's magic, so a pointer of the wrong kind, or one
 * already destroyed, is refused rather than used. */
static void *obj_new(size_t size, uint32_t magic) {
    uint32_t *p = calloc(1, size);
    if (p) *p = magic;
    return p;
}

static cublasStatus_t obj_destroy(void *obj, uint32_t magic, const char *fn) {
    uint32_t *p = obj;
    if (!p) return CUBLAS_STATUS_SUCCESS; /* as free(NULL) */
    if (*p != magic) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not an object of the kind it destroys");
    *p = 0;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- handle and status ---------------------------------------------- */

LT_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    if (!handle) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "lightHandle is NULL");
    struct cublasLtContext *h = obj_new(sizeof *h, MAGIC_HANDLE);
    if (!h) return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtCreate", "out of memory");
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

LT_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle || handle->magic != MAGIC_HANDLE)
        return lt_refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy", "not a handle from cublasLtCreate");
    return obj_destroy(handle, MAGIC_HANDLE, "cublasLtDestroy");
}

LT_EXPORT const char *cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
    }
    return "unknown status";
}

/* ---- attribute plumbing ---------------------------------------------- */

/* cuBLASLt's SetAttribute contract: buf non-NULL and sizeInBytes exactly
 * the attribute's size, else INVALID_VALUE. */
static cublasStatus_t take(void *dst, size_t want, const void *buf, size_t size, const char *fn, const char *attr) {
    if (!buf) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: buf is NULL", attr);
    if (size != want)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: sizeInBytes %zu, the attribute is %zu bytes", attr, size,
                      want);
    memcpy(dst, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

#define TAKE(field, name) take(&(field), sizeof(field), buf, sizeInBytes, fn, name)

/* ---- matrix layouts --------------------------------------------------- */

lt_layout *lt_as_layout(cublasLtMatrixLayout_t l) {
    lt_layout *p = (lt_layout *)(void *)l;
    return p && p->magic == MAGIC_LAYOUT ? p : NULL;
}

LT_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                                    uint64_t rows, uint64_t cols, int64_t ld) {
    if (!matLayout) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "matLayout is NULL");
    lt_layout *l = obj_new(sizeof *l, MAGIC_LAYOUT);
    if (!l) return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatrixLayoutCreate", "out of memory");
    *l = (lt_layout){.magic = MAGIC_LAYOUT, .type = type, .order = CUBLASLT_ORDER_COL, .rows = rows,
                     .cols = cols, .ld = ld, .batch = 1};
    *matLayout = (cublasLtMatrixLayout_t)(void *)l;
    return CUBLAS_STATUS_SUCCESS;
}

LT_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    return obj_destroy(matLayout, MAGIC_LAYOUT, "cublasLtMatrixLayoutDestroy");
}

LT_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                          cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                          size_t sizeInBytes) {
    static const char fn[] = "cublasLtMatrixLayoutSetAttribute";
    lt_layout *l = lt_as_layout(matLayout);
    if (!l) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not a layout from cublasLtMatrixLayoutCreate");
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return TAKE(l->type, "TYPE"); /* uint32_t: the same 4 bytes */
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return TAKE(l->order, "ORDER");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return TAKE(l->rows, "ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return TAKE(l->cols, "COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return TAKE(l->ld, "LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return TAKE(l->batch, "BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return TAKE(l->stride, "STRIDED_BATCH_OFFSET");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return TAKE(l->batch_mode, "BATCH_MODE");
    default: break;
    }
    return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "layout attribute %d is not emulated (TYPE, ORDER, ROWS, COLS, "
                  "LD, BATCH_COUNT, STRIDED_BATCH_OFFSET and BATCH_MODE are)", (int)attr);
}

/* ---- matmul descriptors ----------------------------------------------- */

lt_desc *lt_as_desc(cublasLtMatmulDesc_t d) {
    lt_desc *p = (lt_desc *)(void *)d;
    return p && p->magic == MAGIC_DESC ? p : NULL;
}

LT_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                                  cudaDataType_t scaleType) {
    if (!matmulDesc) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate", "matmulDesc is NULL");
    lt_desc *d = obj_new(sizeof *d, MAGIC_DESC);
    if (!d) return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulDescCreate", "out of memory");
    *d = (lt_desc){.magic = MAGIC_DESC, .compute = computeType, .scale = scaleType,
                   .pointer_mode = CUBLASLT_POINTER_MODE_HOST, .trans_a = CUBLAS_OP_N, .trans_b = CUBLAS_OP_N,
                   .trans_c = CUBLAS_OP_N, .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias_type = -1,
                   .aux_type = -1};
    *matmulDesc = (cublasLtMatmulDesc_t)(void *)d;
    return CUBLAS_STATUS_SUCCESS;
}

LT_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    return obj_destroy(matmulDesc, MAGIC_DESC, "cublasLtMatmulDescDestroy");
}

LT_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                        cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                        size_t sizeInBytes) {
    static const char fn[] = "cublasLtMatmulDescSetAttribute";
    lt_desc *d = lt_as_desc(matmulDesc);
    if (!d) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not a descriptor from cublasLtMatmulDescCreate");
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return TAKE(d->compute, "COMPUTE_TYPE");
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return TAKE(d->scale, "SCALE_TYPE");
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return TAKE(d->pointer_mode, "POINTER_MODE");
    case CUBLASLT_MATMUL_DESC_TRANSA: return TAKE(d->trans_a, "TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return TAKE(d->trans_b, "TRANSB");
    case CUBLASLT_MATMUL_DESC_TRANSC: return TAKE(d->trans_c, "TRANSC");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return TAKE(d->epilogue, "EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return TAKE(d->bias, "BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return TAKE(d->bias_stride, "BIAS_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return TAKE(d->bias_type, "BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return TAKE(d->aux, "EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return TAKE(d->aux_ld, "EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return TAKE(d->aux_stride, "EPILOGUE_AUX_BATCH_STRIDE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return TAKE(d->aux_type, "EPILOGUE_AUX_DATA_TYPE");
    default: break;
    }
    return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "matmul attribute %d is not emulated (COMPUTE_TYPE, SCALE_TYPE, "
                  "POINTER_MODE, TRANSA/B/C, EPILOGUE, BIAS_POINTER, BIAS_BATCH_STRIDE, BIAS_DATA_TYPE and "
                  "EPILOGUE_AUX_POINTER/LD/BATCH_STRIDE/DATA_TYPE are)", (int)attr);
}

/* ---- heuristic preferences -------------------------------------------- */

static lt_pref *as_pref(cublasLtMatmulPreference_t p) {
    lt_pref *q = (lt_pref *)(void *)p;
    return q && q->magic == MAGIC_PREF ? q : NULL;
}

LT_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "pref is NULL");
    lt_pref *p = obj_new(sizeof *p, MAGIC_PREF);
    if (!p) return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmulPreferenceCreate", "out of memory");
    /* NVIDIA's defaults: best fit, no workspace, every reduction scheme and
     * implementation, 256-byte alignment of every matrix */
    *p = (lt_pref){.magic = MAGIC_PREF, .search_mode = CUBLASLT_SEARCH_BEST_FIT,
                   .reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK, .impl_mask = UINT64_MAX,
                   .align = {DEFAULT_ALIGN, DEFAULT_ALIGN, DEFAULT_ALIGN, DEFAULT_ALIGN}};
    *pref = (cublasLtMatmulPreference_t)(void *)p;
    return CUBLAS_STATUS_SUCCESS;
}

LT_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    return obj_destroy(pref, MAGIC_PREF, "cublasLtMatmulPreferenceDestroy");
}

LT_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                              cublasLtMatmulPreferenceAttributes_t attr,
                                                              const void *buf, size_t sizeInBytes) {
    static const char fn[] = "cublasLtMatmulPreferenceSetAttribute";
    lt_pref *p = as_pref(pref);
    if (!p) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not a preference from cublasLtMatmulPreferenceCreate");
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return TAKE(p->search_mode, "SEARCH_MODE");
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return TAKE(p->max_workspace, "MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return TAKE(p->reduction_mask, "REDUCTION_SCHEME_MASK");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return TAKE(p->align[0], "MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return TAKE(p->align[1], "MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return TAKE(p->align[2], "MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return TAKE(p->align[3], "MIN_ALIGNMENT_D_BYTES");
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return TAKE(p->max_waves, "MAX_WAVES_COUNT");
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return TAKE(p->impl_mask, "IMPL_MASK");
    default: break;
    }
    return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "preference attribute %d is not emulated", (int)attr);
}

/* ---- the heuristic ----------------------------------------------------- */

LT_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                        cublasLtMatmulDesc_t operationDesc,
                                                        cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                        cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                        cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                                        cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                        int *returnAlgoCount) {
    static const char fn[] = "cublasLtMatmulAlgoGetHeuristic";
    if (returnAlgoCount) *returnAlgoCount = 0;
    if (!lightHandle || lightHandle->magic != MAGIC_HANDLE)
        return lt_refuse(CUBLAS_STATUS_NOT_INITIALIZED, fn, "not a handle from cublasLtCreate");
    if (requestedAlgoCount < 1)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "requestedAlgoCount %d < 1", requestedAlgoCount);
    if (!heuristicResultsArray || !returnAlgoCount)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "heuristicResultsArray or returnAlgoCount is NULL");
    const lt_pref *pref = as_pref(preference);
    if (!pref) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not a preference from cublasLtMatmulPreferenceCreate");
    problem p;
    cublasStatus_t s = lt_check_problem(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p, fn);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (pref->search_mode != CUBLASLT_SEARCH_BEST_FIT)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "search mode %u; only CUBLASLT_SEARCH_BEST_FIT is emulated",
                      pref->search_mode);
    for (int i = 0; i < 4; i++)
        if (pref->align[i] == 0 || (pref->align[i] & (pref->align[i] - 1)))
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "MIN_ALIGNMENT_%c_BYTES %u is not a power of two",
                          "ABCD"[i], pref->align[i]);
    /* the candidates share one implementation: no split-K (any reduction mask admits it), no
     * workspace, one wave; a preference excluding its implementation or
     * asking for fewer waves leaves nothing, which cuBLASLt answers with
     * NOT_SUPPORTED */
    uint64_t impl = lt_impl_flags(&p);
    if ((impl & pref->impl_mask) != impl)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "IMPL_MASK 0x%llx excludes the only algorithm (0x%llx)",
                      (unsigned long long)pref->impl_mask, (unsigned long long)impl);
    if (pref->max_waves > 0.0f && pref->max_waves < 1.0f)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "MAX_WAVES_COUNT %g excludes the only algorithm (1 wave)",
                      (double)pref->max_waves);
    /* a library (or GPU) without the epilogue: PLAIT_CUBLASLT_EMU_NO_EPILOGUE
     * names one (its cublasLtEpilogue_t value) the heuristic then offers no
     * algorithm for, so a test can run a caller's path around it */
    const char *none = getenv("PLAIT_CUBLASLT_EMU_NO_EPILOGUE");
    if (none && *none && strtoul(none, NULL, 10) == p.d->epilogue)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue %u: PLAIT_CUBLASLT_EMU_NO_EPILOGUE says no "
                      "algorithm offers it", p.d->epilogue);
    algo_rec r = {.magic = ALGO_MAGIC,
                  .max_workspace = pref->max_workspace,
                  .align = {pref->align[0], pref->align[1], pref->align[2], pref->align[3]},
                  .bias_align = p.d->bias ? lt_addr_align(p.d->bias, BIAS_ALIGN_CAP) : NULL_BIAS_ALIGN,
                  .aux_align = p.d->aux ? lt_addr_align(p.d->aux, BIAS_ALIGN_CAP) : NULL_BIAS_ALIGN,
                  .epilogue = p.d->epilogue,
                  .compute = p.d->compute,
                  .ab_type = p.a->type};
    int n = requestedAlgoCount < ALGOS ? requestedAlgoCount : ALGOS;
    for (int i = 0; i < n; i++) {
        cublasLtMatmulHeuristicResult_t *res = &heuristicResultsArray[i];
        r.id = (uint32_t)i;
        memset(res, 0, sizeof *res);
        memcpy(res->algo.data, &r, sizeof r);
        res->workspaceSize = 0;
        res->state = CUBLAS_STATUS_SUCCESS;
        res->wavesCount = 1.0f;
    }
    *returnAlgoCount = n;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the product -------------------------------------------------------- */

/* float -> TF32 (8-bit exponent, 10-bit mantissa, kept in a float): round
 * to nearest with ties away from zero on the 13 dropped bits. Chosen
 * because it is what the GPU's conversion instruction cvt.rna.tf32.f32
 * does, which the sm_80+ TF32 GEMM kernels use to feed fp32 operands to the
 * tensor cores (truncation, what a tensor core does with raw fp32 bits, and
 * round-to-even differ from it only in the last TF32 bit). A carry into the
 * exponent is the right answer (to the next power of two, or to infinity
 * past the largest finite TF32, as cvt.rna without .satfinite). Inf and NaN
 * pass unchanged (a NaN keeps a mantissa bit set so it stays a NaN). */
static float tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        if (u & 0x007fffffu) u |= 0x00400000u;
    } else {
        u = (u + 0x1000u) & ~0x1fffu;
    }
    memcpy(&x, &u, 4);
    return x;
}

/* bf16 is float's upper half: widening is exact */
static float bf16_to_float(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* float -> bf16, round to nearest even (NaN stays NaN): how a bf16 D,
 * aux or C is stored */
static uint16_t float_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Element `idx` of a CUDA_R_32F or CUDA_R_16BF array, as float, and stored. */
static float elem_get(const void *base, int32_t type, size_t idx) {
    if (type == CUDA_R_16BF) return bf16_to_float(((const uint16_t *)base)[idx]);
    return ((const float *)base)[idx];
}
static void elem_set(void *base, int32_t type, size_t idx, float v) {
    if (type == CUDA_R_16BF)
        ((uint16_t *)base)[idx] = float_to_bf16(v);
    else
        ((float *)base)[idx] = v;
}

/* Matrix `l`'s batch `bi` at `base` as floats, column-major with leading
 * dimension *ld: the memory itself when no conversion is due, else a packed
 * copy in `scratch` (rows x cols). */
static const float *operand(const void *base, const lt_layout *l, int64_t bi, int tf32, float *scratch, int64_t *ld) {
    size_t esz = lt_type_size(l->type);
    const char *m = (const char *)base + (size_t)(bi * l->stride) * esz;
    if (l->type == CUDA_R_32F && !tf32) {
        *ld = l->ld;
        return (const float *)(const void *)m;
    }
    int64_t rows = (int64_t)l->rows, cols = (int64_t)l->cols;
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) {
            size_t off = (size_t)(i + j * l->ld);
            float v;
            if (l->type == CUDA_R_16BF) {
                uint16_t h;
                memcpy(&h, m + off * 2, 2);
                v = bf16_to_float(h);
            } else {
                memcpy(&v, m + off * 4, 4);
                v = tf32_round(v);
            }
            scratch[i + j * rows] = v;
        }
    *ld = rows;
    return scratch;
}

/* GELU (tanh form) and its derivative, in float, written out. */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
static float gelu_tanh(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
static float dgelu_tanh(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

/* One product as cublasLtMatmul accepted it: everything it reads from
 * descriptors copied, so it can run later on its stream. */
typedef struct matmul_job {
    lt_desc d;
    lt_layout a, b, c, dl;
    int64_t m, n, k;
    float fa, fb;
    const void *A, *B, *C;
    void *D;
    const void *bias; /* of D's type, like C and aux */
    void *bgrad;      /* BGRADA/BGRADB: the bias gradient's output, of C's type */
    float *scratch; /* na + nb + m*n floats */
    size_t na, nb;
    uint32_t algo_id;
} matmul_job;

static void matmul_run(void *job) {
    matmul_job *j = job;
    if ((int)j->algo_id == g_slow_algo) {
        unsigned ms = g_slow_ms;
        struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0) {}
    }
    int tf32 = j->d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    float *sa = j->scratch, *sb = j->scratch + j->na, *t = j->scratch + j->na + j->nb;
    const int32_t ty = j->dl.type; /* C's, D's, the bias's and aux's */
    const size_t esz = lt_type_size(ty);
    for (int64_t bi = 0; bi < j->dl.batch; bi++) {
        int64_t lda, ldb;
        const float *a = operand(j->A, &j->a, bi, tf32, sa, &lda), *b = operand(j->B, &j->b, bi, tf32, sb, &ldb);
        cblas_sgemm(CblasColMajor, j->d.trans_a == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
                    j->d.trans_b == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, (blasint)j->m, (blasint)j->n,
                    (blasint)j->k, 1.0f, a, (blasint)lda, b, (blasint)ldb, 0.0f, t, (blasint)j->m);
        const char *cb = j->C ? (const char *)j->C + (size_t)(bi * j->c.stride) * esz : NULL;
        char *db = (char *)j->D + (size_t)(bi * j->dl.stride) * esz;
        const char *bb = j->bias ? (const char *)j->bias + (size_t)(bi * j->d.bias_stride) * esz : NULL;
        const uint32_t e = j->d.epilogue;
        char *ab = lt_epi_aux(e) ? (char *)j->d.aux + (size_t)(bi * j->d.aux_stride) * esz : NULL;
        if (lt_epi_bgrad(e)) { /* one batch (validate.c); the bias pointer is its output */
            const int a_side = e == CUBLASLT_EPILOGUE_BGRADA;
            const int64_t len = a_side ? j->m : j->n;
            for (int64_t x = 0; x < len; x++) {
                float sum = 0.0f;
                for (int64_t q = 0; q < j->k; q++) {
                    /* op(A)[x][q] or op(B)[q][x], column-major */
                    const int op = a_side ? j->d.trans_a : j->d.trans_b;
                    const int64_t row = a_side ? x : q, col = a_side ? q : x, ld = a_side ? lda : ldb;
                    const float *o = a_side ? a : b;
                    sum = sum + (op == CUBLAS_OP_T ? o[col + row * ld] : o[row + col * ld]);
                }
                elem_set(j->bgrad, ty, (size_t)x, sum);
            }
        }
        for (int64_t c = 0; c < j->n; c++)
            for (int64_t i = 0; i < j->m; i++) {
                float v = j->fa * t[i + c * j->m];
                if (j->fb != 0.0f) v = fmaf(j->fb, elem_get(cb, ty, (size_t)(i + c * j->c.ld)), v);
                if (lt_epi_bias(e)) v = v + elem_get(bb, ty, (size_t)i);
                if (e == CUBLASLT_EPILOGUE_DGELU) {
                    v = dgelu_tanh(elem_get(ab, ty, (size_t)(i + c * j->d.aux_ld))) * v;
                } else if (lt_epi_gelu(e)) {
                    if (ab) elem_set(ab, ty, (size_t)(i + c * j->d.aux_ld), v);
                    v = gelu_tanh(v);
                }
                elem_set(db, ty, (size_t)(i + c * j->dl.ld), v); /* a bf16 D: rounded once, here */
            }
    }
}

static void matmul_drop(void *job) {
    matmul_job *j = job;
    free(j->scratch);
    free(j);
}

/* How products are queued on a stream: set by the emulated CUDA runtime
 * (emu_cudart.c) when it creates its first stream; without it (this
 * library's own test) a product runs before cublasLtMatmul returns. */
typedef int (*queue_fn)(void *stream, void (*run)(void *), void (*drop)(void *), void *ctx);
static _Atomic(queue_fn) g_queue;

LT_EXPORT void plait_cublaslt_emu_set_queue(queue_fn queue);
LT_EXPORT void plait_cublaslt_emu_set_queue(queue_fn queue) { g_queue = queue; }

/* Test hooks: candidate `id` (0 .. ALGOS-1; -1 none) takes `ms` more
 * milliseconds each time it runs; how many calls of candidate `id`
 * cublasLtMatmul accepted (0 for an id out of range). Thread-safe. */
LT_EXPORT void plait_cublaslt_emu_slow_algo(int id, unsigned ms);
LT_EXPORT void plait_cublaslt_emu_slow_algo(int id, unsigned ms) {
    g_slow_ms = ms;
    g_slow_algo = id;
}
LT_EXPORT uint64_t plait_cublaslt_emu_algo_calls(int id);
LT_EXPORT uint64_t plait_cublaslt_emu_algo_calls(int id) { return id >= 0 && id < ALGOS ? g_algo_calls[id] : 0; }

static cublasStatus_t check_pointer(const void *ptr, uint32_t promised, char which, const char *fn) {
    if (!ptr) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%c is NULL", which);
    if ((uintptr_t)ptr % promised)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%c at %p is only %u-byte aligned; the algorithm was chosen "
                      "with MIN_ALIGNMENT_%c_BYTES %u", which, ptr, lt_addr_align(ptr, promised), which, promised);
    return CUBLAS_STATUS_SUCCESS;
}

LT_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                        const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                        cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                        cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                        const cublasLtMatmulAlgo_t *algo, void *workspace,
                                        size_t workspaceSizeInBytes, cudaStream_t stream) {
    static const char fn[] = "cublasLtMatmul";
    if (!lightHandle || lightHandle->magic != MAGIC_HANDLE)
        return lt_refuse(CUBLAS_STATUS_NOT_INITIALIZED, fn, "not a handle from cublasLtCreate");
    problem p;
    cublasStatus_t s = lt_check_problem(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p, fn);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (!alpha || !beta) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "alpha or beta is NULL");
    float fa, fb;
    memcpy(&fa, alpha, 4);
    memcpy(&fb, beta, 4);
    /* NVIDIA: a NULL algo makes cublasLtMatmul query the heuristic itself;
     * the emulated one then promises what the pointers give */
    algo_rec r = {.magic = ALGO_MAGIC, .max_workspace = workspaceSizeInBytes, .align = {1, 1, 1, 1},
                  .bias_align = 1, .aux_align = 1, .epilogue = p.d->epilogue, .compute = p.d->compute,
                  .ab_type = p.a->type};
    if (algo) {
        memcpy(&r, algo->data, sizeof r);
        if (r.magic != ALGO_MAGIC || r.id >= ALGOS)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "algo was not written by cublasLtMatmulAlgoGetHeuristic");
        if (r.epilogue != p.d->epilogue || r.compute != p.d->compute || r.ab_type != p.a->type)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "the descriptor no longer matches the algorithm: chosen "
                          "for epilogue %u, compute %d, A/B %s; called with epilogue %u, compute %d, A/B %s",
                          r.epilogue, r.compute, lt_type_name(r.ab_type), p.d->epilogue, p.d->compute,
                          lt_type_name(p.a->type));
    }
    if ((s = check_pointer(A, r.align[0], 'A', fn)) || (s = check_pointer(B, r.align[1], 'B', fn)) ||
        (s = check_pointer(D, r.align[3], 'D', fn)))
        return s;
    /* C is not read when beta is 0 (BLAS semantics), so it may be NULL then */
    if ((C || fb != 0.0f) && (s = check_pointer(C, r.align[2], 'C', fn))) return s;
    /* NVIDIA: in-place (C == D) needs C's layout to be D's */
    if (C == D && (p.c->ld != p.dl->ld || p.c->stride != p.dl->stride))
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "in place (C == D) with C's ld %lld / stride %lld but D's "
                      "%lld / %lld", (long long)p.c->ld, (long long)p.c->stride, (long long)p.dl->ld,
                      (long long)p.dl->stride);
    const void *bias = p.d->bias;
    if (lt_epi_aux(p.d->epilogue)) {
        if (!p.d->aux)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "epilogue %u with a NULL EPILOGUE_AUX_POINTER",
                          p.d->epilogue);
        if ((uintptr_t)p.d->aux % r.aux_align)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "aux at %p is only %u-byte aligned; the algorithm was "
                          "chosen for a %u-byte aligned one", p.d->aux, lt_addr_align(p.d->aux, r.aux_align),
                          r.aux_align);
    }
    if (lt_epi_bgrad(p.d->epilogue) && fa != 1.0f)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue %u with alpha %g; the emulator computes a bias "
                      "gradient with alpha 1 only", p.d->epilogue, (double)fa);
    if (lt_epi_bias(p.d->epilogue) || lt_epi_bgrad(p.d->epilogue)) {
        if (!bias)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "epilogue %s with a NULL BIAS_POINTER",
                             lt_epi_bgrad(p.d->epilogue) ? "BGRADA/BGRADB" : "BIAS");
        if ((uintptr_t)bias % r.bias_align)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "bias at %p is only %u-byte aligned; the algorithm was "
                          "chosen for a %u-byte aligned bias", (const void *)bias, lt_addr_align(bias, r.bias_align),
                          r.bias_align);
    }
    /* stricter than cuBLASLt, which only needs the algorithm's own
     * workspace: a plugin passing a workspace other than the one it
     * promised the heuristic is refused */
    if (workspaceSizeInBytes > r.max_workspace)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "workspaceSizeInBytes %zu exceeds the %llu bytes of "
                      "MAX_WORKSPACE_BYTES the algorithm was chosen with", workspaceSizeInBytes,
                      (unsigned long long)r.max_workspace);
    if (workspaceSizeInBytes && !workspace)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "workspace is NULL with workspaceSizeInBytes %zu",
                      workspaceSizeInBytes);

    matmul_job *j = malloc(sizeof *j);
    if (!j) return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, fn, "no memory for a queued product");
    /* the descriptors as they are now: the caller may change them once
     * this returns, before the product runs */
    *j = (matmul_job){.d = *p.d, .a = *p.a, .b = *p.b, .c = *p.c, .dl = *p.dl, .m = p.m, .n = p.n, .k = p.k,
                      .fa = fa, .fb = fb, .A = A, .B = B, .C = C, .D = D,
                      .bias = lt_epi_bgrad(p.d->epilogue) ? NULL : bias,
                      .bgrad = lt_epi_bgrad(p.d->epilogue) ? (void *)(uintptr_t)bias : NULL};
    int tf32 = p.d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    int convert = tf32 || p.a->type != CUDA_R_32F;
    size_t na = convert ? (size_t)(p.a->rows * p.a->cols) : 0, nb = convert ? (size_t)(p.b->rows * p.b->cols) : 0;
    size_t nt = (size_t)(p.m * p.n);
    j->scratch = malloc((na + nb + nt) * sizeof(float));
    if (!j->scratch) {
        free(j);
        return lt_refuse(CUBLAS_STATUS_ALLOC_FAILED, fn, "no memory for a %zu-float scratch", na + nb + nt);
    }
    j->na = na, j->nb = nb;
    j->algo_id = r.id;
    g_algo_calls[r.id]++;
    queue_fn queue = g_queue;
    if (!queue) {
        matmul_run(j);
        matmul_drop(j);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (queue((void *)stream, matmul_run, matmul_drop, j) != 0)
        return lt_refuse(CUBLAS_STATUS_EXECUTION_FAILED, fn, "the emulated runtime could not queue the product on "
                      "stream %p", (void *)stream);
    return CUBLAS_STATUS_SUCCESS;
}
