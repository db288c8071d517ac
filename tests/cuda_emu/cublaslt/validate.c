/*
 * The cuBLASLt stand-in's validation (lt_internal.h): what a matmul's
 * descriptor and four layouts must satisfy before the heuristic or
 * cublasLtMatmul accepts them, each refusal naming the rule.
 */
#include <stdint.h>
#include <stdio.h>

#include "lt_internal.h"


/* The epilogues emulated, and what each reads or writes beyond D. */
int lt_epi_known(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU || lt_epi_bgrad(e);
}
int lt_epi_bgrad(uint32_t e) { return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB; }
int lt_epi_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
int lt_epi_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
int lt_epi_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

const char *lt_type_name(int32_t t) {
    switch (t) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_64F: return "CUDA_R_64F";
    default: return "a type the emulator does not name";
    }
}

size_t lt_type_size(int32_t t) { return t == CUDA_R_16BF ? 2 : 4; }

/* One layout on its own: column order, positive shape, ld >= rows (NVIDIA:
 * "must be large enough so that matrix memory locations are not
 * overlapping"), a batch count >= 1 with a non-negative stride. */
static cublasStatus_t check_layout(const lt_layout *l, const char *name, const char *fn) {
    if (!l) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s is not a layout from cublasLtMatrixLayoutCreate", name);
    if (l->order != CUBLASLT_ORDER_COL)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "%s: order %d; only CUBLASLT_ORDER_COL is emulated", name,
                      l->order);
    if (l->batch_mode != CUBLASLT_BATCH_MODE_STRIDED)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "%s: batch mode %u; only strided batches are emulated", name,
                      l->batch_mode);
    if (l->rows == 0 || l->cols == 0 || l->rows > INT32_MAX || l->cols > INT32_MAX)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: %llu x %llu; rows and columns must be in 1..2^31-1",
                      name, (unsigned long long)l->rows, (unsigned long long)l->cols);
    if (l->ld < 0 || (uint64_t)l->ld < l->rows)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: ld %lld < rows %llu (column-major: ld must be >= rows)",
                      name, (long long)l->ld, (unsigned long long)l->rows);
    if (l->batch < 1) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: batch count %d < 1", name, l->batch);
    if (l->stride < 0)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "%s: batch stride %lld < 0", name, (long long)l->stride);
    return CUBLAS_STATUS_SUCCESS;
}

/* The first batch b > 0 of `l` holding an element of batch 0, or 0 when
 * the batches are disjoint. Batches may interleave (the plugin's attention
 * heads: stride = rows, ld = rows x heads), so this is not a range test:
 * batch b shares an element with batch 0 iff b*stride = di + dj*ld for some
 * |di| < rows, |dj| < cols, and since ld >= rows only dj = q and q + 1 (q,
 * r = divmod(b*stride, ld)) can give such a di. */
static int64_t batches_collide(const lt_layout *l) {
    int64_t rows = (int64_t)l->rows, cols = (int64_t)l->cols;
    for (int64_t b = 1; b < l->batch; b++) {
        int64_t d = b * l->stride, q = d / l->ld, r = d % l->ld;
        if ((r < rows && q < cols) || (l->ld - r < rows && q + 1 < cols)) return b;
    }
    return 0;
}

/* The matmul's descriptor and four layouts together: what cuBLASLt
 * supports in the set the emulator implements, and dimensions that agree. */
cublasStatus_t lt_check_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                    cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, problem *p, const char *fn) {
    cublasStatus_t s;
    const lt_desc *d = lt_as_desc(desc);
    if (!d) return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "not a matmul descriptor from cublasLtMatmulDescCreate");
    p->d = d;
    p->a = lt_as_layout(A), p->b = lt_as_layout(B), p->c = lt_as_layout(C), p->dl = lt_as_layout(D);
    if ((s = check_layout(p->a, "Adesc", fn)) || (s = check_layout(p->b, "Bdesc", fn)) ||
        (s = check_layout(p->c, "Cdesc", fn)) || (s = check_layout(p->dl, "Ddesc", fn)))
        return s;
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "compute type %d; the emulator implements CUBLAS_COMPUTE_32F "
                      "and CUBLAS_COMPUTE_32F_FAST_TF32", d->compute);
    if (d->scale != CUDA_R_32F)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "scale type %s; 32F compute scales in CUDA_R_32F",
                      lt_type_name(d->scale));
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "pointer mode %d; only CUBLASLT_POINTER_MODE_HOST is emulated",
                      d->pointer_mode);
    if (d->trans_c != CUBLAS_OP_N)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "TRANSC %d; cuBLASLt supports only CUBLAS_OP_N", d->trans_c);
    if ((d->trans_a != CUBLAS_OP_N && d->trans_a != CUBLAS_OP_T) ||
        (d->trans_b != CUBLAS_OP_N && d->trans_b != CUBLAS_OP_T))
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "TRANSA %d / TRANSB %d; real operands take CUBLAS_OP_N or "
                      "CUBLAS_OP_T", d->trans_a, d->trans_b);
    if (!lt_epi_known(d->epilogue))
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue %u; the emulator implements DEFAULT, BIAS, GELU, "
                      "GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, BGRADA and BGRADB", d->epilogue);
    /* types: NVIDIA's table for 32F compute has A/B 32F or 16BF (the same
     * for both) with C/D 32F; FAST_TF32 takes 32F operands only */
    const lt_layout *a = p->a, *b = p->b, *c = p->c, *dl = p->dl;
    if ((a->type != CUDA_R_32F && a->type != CUDA_R_16BF) || b->type != a->type)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "A %s with B %s; the emulator takes A and B both CUDA_R_32F "
                      "or both CUDA_R_16BF", lt_type_name(a->type), lt_type_name(b->type));
    if (c->type != dl->type)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "C %s, D %s; C and D must be of one type", lt_type_name(c->type),
                      lt_type_name(dl->type));
    if (dl->type != CUDA_R_32F && dl->type != CUDA_R_16BF)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "C %s, D %s; the emulator takes C and D of CUDA_R_32F or "
                      "CUDA_R_16BF", lt_type_name(c->type), lt_type_name(dl->type));
    if (dl->type == CUDA_R_16BF && a->type != CUDA_R_16BF)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "D CUDA_R_16BF with A/B %s; a bf16 D takes CUDA_R_16BF A and "
                      "B", lt_type_name(a->type));
    if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F)
        return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "CUBLAS_COMPUTE_32F_FAST_TF32 with %s operands; it takes "
                      "CUDA_R_32F operands", lt_type_name(a->type));
    /* dimensions: op(A) m x k, op(B) k x n, C and D m x n */
    int64_t am = (int64_t)(d->trans_a == CUBLAS_OP_N ? a->rows : a->cols);
    int64_t ak = (int64_t)(d->trans_a == CUBLAS_OP_N ? a->cols : a->rows);
    int64_t bk = (int64_t)(d->trans_b == CUBLAS_OP_N ? b->rows : b->cols);
    int64_t bn = (int64_t)(d->trans_b == CUBLAS_OP_N ? b->cols : b->rows);
    if (ak != bk)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "op(A) is %lld x %lld but op(B) is %lld x %lld: inner "
                      "dimensions differ", (long long)am, (long long)ak, (long long)bk, (long long)bn);
    if ((int64_t)dl->rows != am || (int64_t)dl->cols != bn)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "D is %llu x %llu but op(A)·op(B) is %lld x %lld",
                      (unsigned long long)dl->rows, (unsigned long long)dl->cols, (long long)am, (long long)bn);
    if (c->rows != dl->rows || c->cols != dl->cols)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "C is %llu x %llu but D is %llu x %llu",
                      (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)dl->rows,
                      (unsigned long long)dl->cols);
    if (a->batch != dl->batch || b->batch != dl->batch || c->batch != dl->batch)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "batch counts differ: A %d, B %d, C %d, D %d", a->batch,
                      b->batch, c->batch, dl->batch);
    /* stricter than cuBLASLt, which does not check: D's batches must not
     * share an element, or the batches' writes race on a GPU */
    int64_t shared = batches_collide(dl);
    if (shared)
        return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "D's batches overlap: batch 0 and batch %lld share an element "
                      "(stride %lld, ld %lld, %llu x %llu)", (long long)shared, (long long)dl->stride,
                      (long long)dl->ld, (unsigned long long)dl->rows, (unsigned long long)dl->cols);
    if (lt_epi_aux(d->epilogue)) {
        /* NVIDIA: GELU's input matrix has D's type unless set; its LD and
         * batch stride are divisible by 8, the LD no less than D's rows */
        if (d->aux_type != -1 && d->aux_type != dl->type)
            return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "aux data type %s; with D of %s the emulator takes a GELU "
                          "input matrix of D's type", lt_type_name(d->aux_type), lt_type_name(dl->type));
        if (d->aux_ld % 8 || d->aux_ld < (int64_t)dl->rows)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "EPILOGUE_AUX_LD %lld: must be divisible by 8 and no "
                          "less than D's %llu rows", (long long)d->aux_ld, (unsigned long long)dl->rows);
        if (d->aux_stride % 8 || d->aux_stride < 0 ||
            (dl->batch > 1 && d->aux_stride < d->aux_ld * (int64_t)dl->cols))
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "EPILOGUE_AUX_BATCH_STRIDE %lld: must be divisible by "
                          "8 (and, stricter than cuBLASLt, keep %d batches of %lld x %llu apart)",
                          (long long)d->aux_stride, dl->batch, (long long)d->aux_ld, (unsigned long long)dl->cols);
    }
    if (lt_epi_bias(d->epilogue)) {
        /* NVIDIA: the bias has D's type unless set (other types only for
         * integer and fp8 kernels) */
        if (d->bias_type != -1 && d->bias_type != dl->type)
            return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "bias data type %s; with D of %s the emulator takes a "
                          "bias of D's type", lt_type_name(d->bias_type), lt_type_name(dl->type));
        if (d->bias_stride < 0)
            return lt_refuse(CUBLAS_STATUS_INVALID_VALUE, fn, "bias batch stride %lld < 0", (long long)d->bias_stride);
    }
    if (lt_epi_bgrad(d->epilogue)) {
        /* NVIDIA: the bias gradient's elements are of C's type (other
         * types only for integer kernels); how it would be laid out per
         * batch the header does not say, so one batch only here */
        if (d->bias_type != -1 && d->bias_type != dl->type)
            return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "bias data type %s with epilogue %u; a bias gradient "
                          "is of C's type (%s)", lt_type_name(d->bias_type), d->epilogue, lt_type_name(dl->type));
        if (dl->batch != 1)
            return lt_refuse(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue %u with %d batches; the emulator computes a "
                          "bias gradient of one batch", d->epilogue, dl->batch);
    }
    p->m = am, p->n = bn, p->k = ak;
    return CUBLAS_STATUS_SUCCESS;
}

/* The largest power of two dividing the address, capped at `cap`. */
uint32_t lt_addr_align(const void *ptr, uint32_t cap) {
    uintptr_t v = (uintptr_t)ptr | cap;
    return (uint32_t)(v & (~v + 1));
}

/* The numerical implementation the emulated algorithm reports
 * (cublasLtNumericalImplFlags_t), for the preference's IMPL_MASK. */
uint64_t lt_impl_flags(const problem *p) {
    if (p->a->type == CUDA_R_16BF)
        return CUBLASLT_NUMERICAL_IMPL_FLAGS_HMMA | CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F |
               CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF;
    if (p->d->compute == CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLASLT_NUMERICAL_IMPL_FLAGS_HMMA | CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F |
               CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32;
    return CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA | CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F |
           CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_32F;
}
