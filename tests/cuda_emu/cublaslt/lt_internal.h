/*
 * Shared by the cuBLASLt stand-in's files (cublaslt.c: the objects, the
 * heuristic and the product; validate.c: what a matmul's descriptor and
 * layouts must satisfy): its objects, what an emulated algorithm records,
 * and the checks. Not installed; test infrastructure.
 */
#ifndef PLAIT_CUBLASLT_EMU_INTERNAL_H
#define PLAIT_CUBLASLT_EMU_INTERNAL_H

#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

/* The exported functions (exports.map keeps every other symbol local). */
#define LT_EXPORT __attribute__((visibility("default")))

enum { MAGIC_HANDLE = 0x4c54484e, MAGIC_LAYOUT = 0x4c544c59, MAGIC_DESC = 0x4c544453, MAGIC_PREF = 0x4c545046 };
#define ALGO_MAGIC 0x706c61697445ull /* "plaitE": an algo this library's heuristic wrote */
/* cuBLASLt's default for every MIN_ALIGNMENT_*_BYTES preference. */
#define DEFAULT_ALIGN 256u
/* The bias has no preference of its own: NVIDIA says the heuristic reads
 * the BIAS_POINTER value to learn its alignment. A NULL pointer says
 * nothing, so the emulated algorithm assumes what 16-byte vector loads
 * need (NULL_BIAS_ALIGN); a non-NULL pointer's alignment counts up to the alignment cuBLASLt
 * assumes of operands by default (DEFAULT_ALIGN), the most an algorithm
 * may rely on: a product whose first bias lay 256-byte aligned is refused
 * a later, 128-byte aligned bias, as an algorithm chosen for it may refuse
 * or mis-read one on a GPU. The aux pointer likewise. */
#define BIAS_ALIGN_CAP DEFAULT_ALIGN
#define NULL_BIAS_ALIGN 16u

struct cublasLtContext {
    uint32_t magic;
};

typedef struct lt_layout {
    uint32_t magic;
    int32_t type; /* cudaDataType */
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
    uint32_t batch_mode;
} lt_layout;

typedef struct lt_desc {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, trans_a, trans_b, trans_c;
    uint32_t epilogue;
    const void *bias; /* of D's type (bias_type -1 or D's) */
    int64_t bias_stride;
    int32_t bias_type; /* -1: D's type */
    void *aux;         /* EPILOGUE_AUX_POINTER */
    int64_t aux_ld, aux_stride;
    int32_t aux_type; /* -1: D's type */
} lt_desc;

typedef struct lt_pref {
    uint32_t magic;
    uint32_t search_mode, reduction_mask;
    uint64_t max_workspace, impl_mask;
    uint32_t align[4]; /* A, B, C, D */
    float max_waves;
} lt_pref;

/* What the heuristic promised, inside cublasLtMatmulAlgo_t's 64 bytes. */
typedef struct algo_rec {
    uint64_t magic;
    uint64_t max_workspace;
    uint32_t align[4];
    uint32_t bias_align;
    uint32_t aux_align; /* what the AUX_POINTER the heuristic saw promised */
    uint32_t epilogue;
    int32_t compute, ab_type;
    uint32_t id; /* which of the heuristic's ALGOS candidates */
} algo_rec;
_Static_assert(sizeof(algo_rec) <= sizeof(cublasLtMatmulAlgo_t), "algo_rec must fit cublasLtMatmulAlgo_t");

/* The heuristic's candidates: ALGOS algorithms, told apart by algo_rec.id
 * and computing the same bits (a GPU's differ in speed and, with split-K,
 * in summation order; here only in the test hook's delay). */
#define ALGOS 3

/* One matmul, validated: the dimensions of D = op(A)[m,k] · op(B)[k,n]. */
typedef struct problem {
    const lt_desc *d;
    const lt_layout *a, *b, *c, *dl;
    int64_t m, n, k;
} problem;

/* Prints why on stderr (naming the function) and returns s. */
__attribute__((format(printf, 3, 4))) cublasStatus_t lt_refuse(cublasStatus_t s, const char *fn, const char *fmt,
                                                               ...);
/* The object behind a handle, or NULL if it is not one of its kind. */
lt_layout *lt_as_layout(cublasLtMatrixLayout_t l);
lt_desc *lt_as_desc(cublasLtMatmulDesc_t d);

/* ---- validate.c ---- */

/* The epilogues emulated, and what each reads or writes beyond D. */
int lt_epi_known(uint32_t e);
int lt_epi_bias(uint32_t e);
int lt_epi_gelu(uint32_t e);
int lt_epi_aux(uint32_t e);
/* BGRADA, BGRADB: the bias gradient written to BIAS_POINTER */
int lt_epi_bgrad(uint32_t e);
const char *lt_type_name(int32_t t);
size_t lt_type_size(int32_t t);
/* The matmul's descriptor and four layouts together (validate.c says what
 * is checked); *p the validated problem. */
cublasStatus_t lt_check_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, problem *p, const char *fn);
/* The largest power of two dividing the address, capped at `cap`. */
uint32_t lt_addr_align(const void *ptr, uint32_t cap);
/* The numerical implementation the emulated algorithm reports
 * (cublasLtNumericalImplFlags_t), for the preference's IMPL_MASK. */
uint64_t lt_impl_flags(const problem *p);

#endif
