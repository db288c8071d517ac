/*
 * Row-major matrix products on cuBLASLt (column-major underneath: C = A·B
 * row-major is Cᵀ = Bᵀ·Aᵀ column-major, so the operands swap places).
 *
 * Precision (open()'s [run] precision):
 *   fp32  float32 operands, CUBLAS_COMPUTE_32F;
 *   tf32  float32 operands, CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores);
 *   bf16  the operands are first rounded to bfloat16 into scratch buffers
 *         (round to nearest even), multiplied on bf16 tensor cores with
 *         float32 accumulation and a float32 result.
 *
 * Operands stored in bf16 (pc_gemm.in_bf16: the bf16-activation entries)
 * are handed to cuBLASLt as they are, CUDA_R_16BF with CUBLAS_COMPUTE_32F
 * in every precision: no copy. A bf16 result (out_bf16) is D of
 * CUDA_R_16BF, C with it (NVIDIA requires C and D of one type; beta is 0
 * there), and the bias and GELU's aux are of D's type too, cuBLASLt's
 * default for both; a float32 D keeps its float32 bias (BIAS_DATA_TYPE).
 * Where no epilogue can do a bf16 result's bias or GELU, the product goes
 * to a float32 scratch and gelu.cu's pc_launch_epilogue_bf16 finishes it,
 * so every bf16 value is still rounded once.
 *
 * Determinism: each distinct product (shapes, strides, pointer alignment)
 * is prepared once — descriptors and its algorithm — and reused for the
 * rest of the run, with the fixed workspace of open(); the heuristic sees
 * only what the key holds (promised16: a bias or aux pointer as aligned as
 * the key promises, whichever call came first). In deterministic
 * mode the algorithm is the one cuBLASLt's heuristic returns first, among
 * algorithms without split-K reduction: the heuristic answers the same for
 * the same GPU and library, so two runs use the same algorithms and give
 * the same bits. Nothing is timed there.
 *
 * Otherwise the heuristic is asked for up to CANDIDATES algorithms and the
 * fastest is kept, because its first guess is often not the fastest for a
 * shape (PyTorch's cuBLAS heuristics and autotuning choose likewise). The
 * timing costs no extra work and no host wait: the product's first calls
 * each run a candidate as the real product (every candidate computes the
 * same product), each candidate twice, the second time between two timing
 * events on the compute stream (a kernel's first launch also loads it:
 * CUDA's lazy module loading); later calls use the heuristic's first until
 * cudaEventQuery says the last candidate's end event is reached, then the
 * elapsed times pick the algorithm for the rest of the run. A candidate cuBLASLt refuses at
 * its call is dropped (that call runs the heuristic's first). The pick
 * depends on timings, so two such runs may use different algorithms and
 * differ in the last bits.
 *
 * A bias is added by cuBLASLt's BIAS epilogue when an algorithm offers it,
 * else by a separate kernel after the product. GELU likewise (pc_gemm.gelu):
 * GELU_AUX_BIAS in the forward (GELU's input kept in aux), DGELU in the
 * backward (GELU's gradient applied to the product), when the aux matrix
 * meets NVIDIA's terms (leading dimension divisible by 8; 16-byte aligned
 * here, the alignment the algorithm is chosen for), an algorithm offers
 * the epilogue and the run is not fp32 (the epilogue's GELU is accurate to
 * about 1e-6 only); else the plain product and gelu.cu's kernel after it.
 * A bias gradient (pc_gemm.bgrad) likewise: cuBLASLt's BGRADB epilogue
 * sums the output gradient's columns while the weight gradient's product
 * reads them (the product's B in cuBLASLt's terms), written to a scratch
 * vector (the epilogue writes, it cannot add) then added to the gradient;
 * where no algorithm offers it, the column-sum kernel reads the output
 * gradient again.
 */
#include <stdio.h>
#include <string.h>

#include "lt.h"

#define CACHE_SLOTS 128
/* Algorithms timed for a product in a non-deterministic run */
#define CANDIDATES 4

typedef struct gemm_key {
    int trans_a, trans_b, has_bias, gelu, in_bf16, out_bf16, bgrad;
    int64_t M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
    uint32_t align_a, align_b, align_c;
} gemm_key;

typedef struct gemm_cached {
    gemm_key key;
    int used;
    int bias_epilogue; /* the algorithm adds the bias itself */
    int gelu_epilogue; /* the algorithm applies GELU (key.gelu) itself */
    int bgrad_epilogue; /* the algorithm writes the bias gradient (key.bgrad) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo; /* in use: the heuristic's first until timing picks */
    /* Timing (non-deterministic runs): candidates [0, n_cand) (0 is the
     * heuristic's first), `next` calls of them so far (each runs twice:
     * warm-up, then timed); each timed one's start and end events, NULL
     * once it is dropped (all destroyed with the product: eviction,
     * pc_gemm_forget). n_cand 0: nothing (more) to time. */
    int n_cand, next;
    cublasLtMatmulAlgo_t cand[CANDIDATES];
    cudaEvent_t ev[CANDIDATES][2];
} gemm_cached;

static gemm_cached g_cache[CACHE_SLOTS];
static int g_next_slot;

/* bf16 copies of the two operands (grow-only, reused by every product) */
static pc_buffer g_bf16[2];
/* The float32 result of a bf16 product whose epilogue runs apart */
static pc_buffer g_apart;
/* The bias gradient BGRADB writes, before it is added (M floats) */
static pc_buffer g_bgrad;
/* What each copy holds: the span of `src` it was made from. A product of
 * the same kernel-table entry whose operand is that span reuses it (a
 * layer's input and weight gradients from one call convert their output
 * gradient once). Forgotten when an entry begins (the source may have been
 * written since) and when a product writes over the source. */
static struct {
    const float *src;
    size_t n;
    const void *copy;
} g_bf16_of[2];

void pc_gemm_entry_begin(void) { memset(g_bf16_of, 0, sizeof g_bf16_of); }

static void drop_candidate(gemm_cached *p, int c) {
    for (int i = 0; i < 2; i++)
        if (p->ev[c][i]) cudaEventDestroy(p->ev[c][i]);
    p->ev[c][0] = p->ev[c][1] = NULL;
}

/* Timing over: the events go, `algo` stays for the rest of the run. */
static void timing_end(gemm_cached *p) {
    for (int c = 0; c < p->n_cand; c++) drop_candidate(p, c);
    p->n_cand = p->next = 0;
}

static void cached_release(gemm_cached *p) {
    timing_end(p);
    if (p->desc) pc_lt.desc_destroy(p->desc);
    if (p->la) pc_lt.layout_destroy(p->la);
    if (p->lb) pc_lt.layout_destroy(p->lb);
    if (p->lc) pc_lt.layout_destroy(p->lc);
    memset(p, 0, sizeof *p);
}

void pc_gemm_forget(void) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (g_cache[i].used) cached_release(&g_cache[i]);
    g_next_slot = 0;
    for (int i = 0; i < 2; i++) pc_grow_release(&g_bf16[i]);
    pc_grow_release(&g_apart);
    pc_grow_release(&g_bgrad);
    pc_gemm_entry_begin();
}

/* The largest power of two (at most 16) dividing the address and the byte
 * strides: what the kernels may assume about vector loads. */
static uint32_t alignment(const void *p, int64_t ld, int64_t stride, size_t elem) {
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)ld * elem | (uint64_t)stride * elem | 16u;
    return (uint32_t)(v & (~v + 1));
}

static cudaDataType_t operand_type(const gemm_key *k) {
    return k->in_bf16 || pc.precision == PLAIT_PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int lt_ok(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    pc_fail("cuda: cuBLASLt %s: %s", what, pc_lt.status_string(s));
    return 0;
}

static int make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                       int64_t batch, int64_t stride) {
    if (!lt_ok(pc_lt.layout_create(l, t, (uint64_t)rows, (uint64_t)cols, ld), "layout")) return 0;
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        if (!lt_ok(pc_lt.layout_set(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "batch count") ||
            !lt_ok(pc_lt.layout_set(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                   "batch stride"))
            return 0;
    }
    return 1;
}

/* What the heuristic is shown of a bias or aux pointer that a key
 * promises 16-byte aligned and no more: an address of exactly that
 * alignment (the workspace's start, which cudaMalloc aligns to 256 bytes,
 * plus 16), never the first call's own pointer. The heuristic reads these
 * pointers to learn their alignment, so shown the first call's it could
 * choose by where that call's bias happened to lie (a 512-byte aligned
 * expert's bias in one layout, a 256-byte aligned one in another) and give
 * one key two algorithms, and two runs that should agree different bits;
 * or choose one that a later, less aligned call of the key cannot use.
 * With no workspace ([device.cuda] workspace_mib = 0) it is shown the
 * call's own pointer. */
static const void *promised16(const void *ptr) {
    return ptr && pc_lt.workspace ? (const void *)((const char *)pc_lt.workspace + 16) : ptr;
}

/* The first algorithm the heuristic offers for `p` (with the bias
 * epilogue when `bias` is non-NULL: the heuristic reads the bias pointer
 * to know its alignment, and every later call of this shape passes one as
 * aligned, 16 bytes, gemm_key.has_bias, so it is shown promised16's; with
 * a GELU epilogue when `gelu`, its aux pointer likewise; with BGRADB when
 * `bgrad`, `bias` then the vector it writes, g_bgrad's, 256-byte aligned
 * on every call and shown as it is); 0 if none. */
static int choose_algo(gemm_cached *p, const void *bias, int gelu, const void *aux, int bgrad) {
    if (!bgrad) bias = promised16(bias);
    aux = promised16(aux);
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu == PC_GELU_FORWARD) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (gelu == PC_GELU_BACKWARD) epi = CUBLASLT_EPILOGUE_DGELU;
    if (bgrad) epi = CUBLASLT_EPILOGUE_BGRADB;
    if (pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) != CUBLAS_STATUS_SUCCESS)
        return 0;
    if (gelu) {
        int64_t aux_ld = p->key.ldc;
        if (pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) !=
                CUBLAS_STATUS_SUCCESS ||
            pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) !=
                CUBLAS_STATUS_SUCCESS)
            return 0;
    }
    if (bias) { /* a bf16 D's bias: D's type, cuBLASLt's default (aux likewise); a bias gradient: C's, float32 */
        cudaDataType_t bt = CUDA_R_32F;
        if ((!p->key.out_bf16 &&
             pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) != CUBLAS_STATUS_SUCCESS) ||
            pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) != CUBLAS_STATUS_SUCCESS)
            return 0;
    }
    cublasLtMatmulPreference_t pref = NULL;
    if (!lt_ok(pc_lt.pref_create(&pref), "preference")) return 0;
    uint64_t ws = pc_lt.workspace_bytes;
    uint32_t scheme = pc.deterministic ? CUBLASLT_REDUCTION_SCHEME_NONE : CUBLASLT_REDUCTION_SCHEME_MASK;
    /* cuBLASLt's A is our B (see the top) */
    uint32_t aa = p->key.align_b, ab = p->key.align_a;
    int ok = pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0 &&
             pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof scheme) == 0 &&
             pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa) == 0 &&
             pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab) == 0 &&
             pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->key.align_c,
                            sizeof p->key.align_c) == 0 &&
             pc_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->key.align_c,
                            sizeof p->key.align_c) == 0;
    cublasLtMatmulHeuristicResult_t res[CANDIDATES];
    int found = 0;
    p->n_cand = 0;
    if (ok && pc_lt.heuristic(pc_lt.handle, p->desc, p->la, p->lb, p->lc, p->lc, pref,
                              pc.deterministic ? 1 : CANDIDATES, res, &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0 && res[0].state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res[0].algo;
        for (int i = 0; i < found && i < CANDIDATES; i++)
            if (res[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->n_cand++] = res[i].algo;
        if (p->n_cand < 2) p->n_cand = 0; /* one algorithm: nothing to choose */
    } else
        found = 0;
    pc_lt.pref_destroy(pref);
    return found > 0;
}

/* The algorithm for this call of `p`; *trial: the candidate it runs while
 * they are being tried, or -1; *timed: 1 if the call is timed (its start
 * event recorded). Each candidate runs twice, untimed then timed: a
 * kernel's first launch in a process also loads it (CUDA's lazy module
 * loading), which says nothing of its speed. */
static const cublasLtMatmulAlgo_t *algo_for_call(gemm_cached *p, int *trial, int *timed) {
    *trial = -1;
    *timed = 0;
    if (!p->n_cand) return &p->algo;
    if (p->next < 2 * p->n_cand) { /* a candidate's turn: this call's product */
        const int k = p->next++, c = k % p->n_cand;
        *trial = c;
        if (k < p->n_cand) return &p->cand[c]; /* its warm-up */
        if (cudaEventCreate(&p->ev[c][0]) != cudaSuccess || cudaEventCreate(&p->ev[c][1]) != cudaSuccess ||
            cudaEventRecord(p->ev[c][0], pc.stream) != cudaSuccess) {
            timing_end(p); /* no timing then: the heuristic's first for the run */
            *trial = -1;
            return &p->algo;
        }
        *timed = 1;
        return &p->cand[c];
    }
    int last = p->n_cand - 1; /* each candidate's end is in stream order: the last one's covers all */
    while (last >= 0 && !p->ev[last][1]) last--;
    if (last >= 0) {
        cudaError_t q = cudaEventQuery(p->ev[last][1]);
        if (q == cudaErrorNotReady) return &p->algo; /* not yet: never waited for */
        float best = -1.0f;
        for (int c = 0; q == cudaSuccess && c <= last; c++) {
            float ms;
            if (p->ev[c][1] && cudaEventElapsedTime(&ms, p->ev[c][0], p->ev[c][1]) == cudaSuccess &&
                (best < 0.0f || ms < best))
                best = ms, p->algo = p->cand[c];
        }
    }
    timing_end(p);
    return &p->algo;
}

static gemm_cached *prepare(const gemm_key *k, const void *bias, const void *aux, const void *bgrad) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (g_cache[i].used && memcmp(&g_cache[i].key, k, sizeof *k) == 0) return &g_cache[i];
    gemm_cached *p = &g_cache[g_next_slot];
    g_next_slot = (g_next_slot + 1) % CACHE_SLOTS;
    if (p->used) cached_release(p);
    p->key = *k;
    cublasComputeType_t ct =
        pc.precision == PLAIT_PRECISION_TF32 && !k->in_bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t ot = operand_type(k), rt = k->out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    /* column-major: Cᵀ[N,M] = op(B)ᵀ[N,K] · op(A)ᵀ[K,M] */
    cublasOperation_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ok = lt_ok(pc_lt.desc_create(&p->desc, ct, CUDA_R_32F), "descriptor") &&
             lt_ok(pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa") &&
             lt_ok(pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb") &&
             make_layout(&p->la, ot, k->trans_b ? k->K : k->N, k->trans_b ? k->N : k->K, k->ldb, k->batch,
                         k->stride_b) &&
             make_layout(&p->lb, ot, k->trans_a ? k->M : k->K, k->trans_a ? k->K : k->M, k->lda, k->batch,
                         k->stride_a) &&
             make_layout(&p->lc, rt, k->N, k->M, k->ldc, k->batch, k->stride_c);
    if (ok && k->gelu) { /* the bias inside too (a key with gelu has has_bias 0 or 1) */
        p->gelu_epilogue = choose_algo(p, k->has_bias ? bias : NULL, k->gelu, aux, 0);
        p->bias_epilogue = p->gelu_epilogue && k->has_bias;
    }
    if (ok && k->bgrad) p->bgrad_epilogue = choose_algo(p, bgrad, PC_GELU_NONE, NULL, 1);
    if (ok && !p->gelu_epilogue && !p->bgrad_epilogue) {
        p->bias_epilogue = k->has_bias == 1 && choose_algo(p, bias, 0, NULL, 0);
        if (!p->bias_epilogue && !choose_algo(p, NULL, 0, NULL, 0)) {
            pc_fail("cuda: cuBLASLt has no algorithm for a %lldx%lldx%lld product (batch %lld, transposes %d%d)",
                    (long long)k->M, (long long)k->N, (long long)k->K, (long long)k->batch, k->trans_a,
                    k->trans_b);
            ok = 0;
        }
    }
    if (!ok) {
        cached_release(p);
        return NULL;
    }
    p->used = 1;
    return p;
}

/* Elements a row-major operand spans: rows x cols at leading dimension ld, batches at stride. */
static size_t span(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    return (size_t)((batch - 1) * stride + (rows - 1) * ld + cols);
}

/* The operand's span rounded to bfloat16 in scratch `which`, same layout. */
static const void *to_bf16(int which, const float *src, size_t n) {
    if (g_bf16_of[which].src == src && g_bf16_of[which].n == n && g_bf16_of[which].copy == g_bf16[which].ptr)
        return g_bf16_of[which].copy;
    void *copy = pc_grow(&g_bf16[which], n * 2, "bf16 operand");
    g_bf16_of[which].src = NULL;
    if (copy) {
        pc_launch_to_bf16(copy, src, n);
        g_bf16_of[which].src = src;
        g_bf16_of[which].n = n;
        g_bf16_of[which].copy = copy;
    }
    return copy;
}

/* A product wrote [c, c + n): a copy made from there is stale. */
static void bf16_written(const float *c, size_t n) {
    for (int i = 0; i < 2; i++)
        if (g_bf16_of[i].src && g_bf16_of[i].src < c + n && c < g_bf16_of[i].src + g_bf16_of[i].n)
            g_bf16_of[i].src = NULL;
}

/* A bf16 result's bias and GELU without cuBLASLt's epilogue: the
 * product in float32 into scratch, then pc_launch_epilogue_bf16 (each
 * bf16 value rounded once, as the epilogue rounds it). */
static void bf16_apart(const pc_gemm *g) {
    if (g->batch != 1 || g->ldc != g->N) {
        pc_fail("cuda: internal: a bf16 product's epilogue apart needs one batch with ldc == N");
        return;
    }
    float *x = pc_grow(&g_apart, (size_t)g->M * (size_t)g->N * sizeof(float), "bf16 product's float32 result");
    if (!x) return;
    pc_gemm h = *g;
    h.C = x, h.out_bf16 = 0, h.bias = NULL, h.res = NULL, h.beta = 0.0f, h.gelu = PC_GELU_NONE, h.aux = NULL;
    pc_gemm_run(&h);
    pc_launch_epilogue_bf16(g->C, g->aux, x, g->bias, g->M, g->N, g->gelu);
}

/* pc_gemm.gelu without the epilogue: the product (into aux in the
 * forward), then gelu.cu's kernel over the M x N result. */
static void gelu_apart(const pc_gemm *g) {
    if (g->out_bf16) {
        bf16_apart(g);
        return;
    }
    if (g->batch != 1 || g->ldc != g->N) {
        pc_fail("cuda: internal: GELU around a product needs one batch with ldc == N");
        return;
    }
    pc_gemm h = *g;
    h.gelu = PC_GELU_NONE;
    h.aux = NULL;
    if (g->gelu == PC_GELU_FORWARD) h.C = g->aux;
    pc_gemm_run(&h);
    size_t n = (size_t)g->M * (size_t)g->N;
    float *c = g->C, *aux = g->aux;
    if (g->gelu == PC_GELU_FORWARD)
        pc_launch_gelu_forward(c, aux, n);
    else
        pc_launch_gelu_backward(c, aux, c, n);
    bf16_written(c, n);
}

/* A profile's mark for the product just queued: its shape, the types it
 * read and wrote, and what its epilogue did. */
static void profile_mark(const pc_gemm *g, const gemm_cached *p) {
    char detail[96];
    const char *in = g->in_bf16 || pc.precision == PLAIT_PRECISION_BF16 ? "bf16"
                     : pc.precision == PLAIT_PRECISION_TF32             ? "tf32"
                                                                         : "fp32";
    snprintf(detail, sizeof detail, "%lldx%lldx%lld%s%s %s->%s%s%s%s%s", (long long)g->M, (long long)g->N,
             (long long)g->K, g->batch > 1 ? " batched" : "", g->trans_a || g->trans_b ? (g->trans_a ? " At" : " Bt") : "",
             in, g->out_bf16 ? "bf16" : "fp32", p->bias_epilogue ? " +bias" : "",
             p->gelu_epilogue ? (g->gelu == PC_GELU_FORWARD ? " +gelu" : " +dgelu") : "",
             p->bgrad_epilogue ? " +bgrad" : "", g->res && g->beta != 0.0f ? " +res" : g->beta != 0.0f ? " +=C" : "");
    pc_profile_mark("gemm", detail);
}

/* long: one product from its shapes to its launch; whether each epilogue
 * applies reads the decisions before it, as the comments inside say */
void pc_gemm_run(const pc_gemm *g) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return;
    if (g->bgrad && (!g->in_bf16 || !g->trans_a || g->batch != 1 || g->lda != g->M || g->bias || g->gelu ||
                     g->out_bf16)) {
        pc_fail("cuda: internal: a bias gradient from a product needs bf16 operands, A transposed and packed "
                "(lda == M), one batch, and no bias, GELU or bf16 result");
        return;
    }
    if (g->out_bf16 && (!g->in_bf16 || g->beta != 0.0f)) {
        pc_fail("cuda: internal: a bf16 result needs bf16 operands and beta 0");
        return;
    }
    if (g->out_bf16 && g->K <= 0) { /* no product: the bias (or zeros) rounded */
        bf16_apart(g);
        return;
    }
    /* NVIDIA's terms for GELU's input matrix (AUX_LD divisible by 8), one
     * batch, a bias the epilogue can read, the aux pointer as aligned as
     * the algorithm is chosen for, a product (K > 0); else apart. fp32
     * runs take no GELU epilogue: an H100's cuBLASLt computes GELU to
     * about 1e-6 and its gradient to about 4e-6 (normwise, measured), ten
     * times float32's rounding, which fp32 runs exist to avoid; under tf32
     * and bf16 that is far below the operands' own rounding. */
    if (g->gelu && ((pc.precision == PLAIT_PRECISION_FP32 && !g->in_bf16) || g->K <= 0 || g->batch != 1 ||
                    g->ldc % 8 || (uintptr_t)g->aux % 16 ||
                    (g->bias && ((uintptr_t)g->bias % 16 || g->gelu == PC_GELU_BACKWARD)) || g->beta != 0.0f)) {
        gelu_apart(g);
        return;
    }
    if (g->K <= 0) { /* C = beta*C (+ bias): no product; cuBLASLt refuses K = 0 (no rows: no bias gradient) */
        bf16_written(g->C, span(g->M, g->N, g->ldc, g->batch, g->stride_c));
        for (int64_t b = 0; b < g->batch; b++) {
            float *c = (float *)g->C + b * g->stride_c;
            if (g->res && g->res != g->C && g->beta != 0.0f) /* then as in place */
                for (int64_t r = 0; r < g->M; r++)
                    cudaMemcpyAsync(c + r * g->ldc, (const float *)g->res + b * g->stride_c + r * g->ldc,
                                    (size_t)g->N * 4, cudaMemcpyDeviceToDevice, pc.stream);
            if (g->beta == 0.0f) /* as BLAS: beta 0 writes zeros, whatever C held */
                cudaMemset2DAsync(c, (size_t)g->ldc * 4, 0, (size_t)g->N * 4, (size_t)g->M, pc.stream);
            else if (g->beta != 1.0f)
                for (int64_t r = 0; r < g->M; r++) pc_launch_scale(c + r * g->ldc, (size_t)g->N, g->beta);
            if (g->bias) pc_launch_res_bias(c, c, g->bias, g->M, g->N, 0);
        }
        return;
    }
    if (g->bias && g->ldc != g->N) {
        pc_fail("cuda: internal: a product with a bias needs ldc == N (%lld != %lld)", (long long)g->ldc,
                (long long)g->N);
        return;
    }
    int bf16 = pc.precision == PLAIT_PRECISION_BF16;
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.trans_a = g->trans_a;
    k.trans_b = g->trans_b;
    /* the epilogue is only asked to read a 16-byte aligned bias (2: a
     * bias the separate kernel adds) */
    k.has_bias = !g->bias ? 0 : (uintptr_t)g->bias % 16 == 0 ? 1 : 2;
    k.gelu = g->gelu;
    k.in_bf16 = g->in_bf16 != 0, k.out_bf16 = g->out_bf16 != 0;
    k.bgrad = g->bgrad != NULL;
    k.M = g->M, k.N = g->N, k.K = g->K;
    k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.batch = g->batch;
    k.stride_a = g->batch > 1 ? g->stride_a : 0;
    k.stride_b = g->batch > 1 ? g->stride_b : 0;
    k.stride_c = g->batch > 1 ? g->stride_c : 0;
    const void *A = g->A, *B = g->B;
    if (bf16 && !g->in_bf16) {
        A = to_bf16(0, g->A, span(g->trans_a ? g->K : g->M, g->trans_a ? g->M : g->K, g->lda, k.batch, k.stride_a));
        B = to_bf16(1, g->B, span(g->trans_b ? g->N : g->K, g->trans_b ? g->K : g->N, g->ldb, k.batch, k.stride_b));
        if (!A || !B) return;
    }
    /* the alignment of the pointers cuBLASLt is handed (in bf16 the
     * copies'): a cached product promising more than a later call's
     * pointers have is never reused for them, the key holds it */
    size_t esz = bf16 || g->in_bf16 ? 2 : 4, csz = g->out_bf16 ? 2 : 4;
    k.align_a = alignment(A, k.lda, k.stride_a, esz);
    k.align_b = alignment(B, k.ldb, k.stride_b, esz);
    k.align_c = alignment(g->C, k.ldc, k.stride_c, csz);
    const void *cin = g->res ? g->res : g->C; /* cuBLASLt's C; the result goes to D = g->C */
    uint32_t align_res = alignment(cin, k.ldc, k.stride_c, csz);
    if (align_res < k.align_c) k.align_c = align_res;
    float *bgrad = NULL; /* what BGRADB writes */
    if (g->bgrad && !(bgrad = pc_grow(&g_bgrad, (size_t)g->M * sizeof(float), "bias gradient"))) return;
    gemm_cached *p = prepare(&k, g->bias, g->aux, bgrad);
    if (!p) return;
    if ((g->gelu && !p->gelu_epilogue) || (g->out_bf16 && g->bias && !p->bias_epilogue)) {
        gelu_apart(g); /* a bf16 result's bias too (bf16_apart) */
        return;
    }
    if (p->gelu_epilogue &&
        !lt_ok(pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux), "aux"))
        return;
    if (p->bias_epilogue &&
        !lt_ok(pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias), "bias"))
        return;
    if (p->bgrad_epilogue &&
        !lt_ok(pc_lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bgrad, sizeof bgrad), "bias gradient"))
        return;
    int trial, timed;
    const cublasLtMatmulAlgo_t *algo = algo_for_call(p, &trial, &timed);
    cublasStatus_t st = pc_lt.matmul(pc_lt.handle, p->desc, &g->alpha, B, p->la, A, p->lb, &g->beta, cin, p->lc,
                                     g->C, p->lc, algo, pc_lt.workspace, pc_lt.workspace_bytes, pc.stream);
    if (timed && (st != CUBLAS_STATUS_SUCCESS || cudaEventRecord(p->ev[trial][1], pc.stream) != cudaSuccess))
        drop_candidate(p, trial);
    if (trial > 0 && st != CUBLAS_STATUS_SUCCESS) /* a refused candidate computed nothing: the first does it */
        st = pc_lt.matmul(pc_lt.handle, p->desc, &g->alpha, B, p->la, A, p->lb, &g->beta, cin, p->lc, g->C, p->lc,
                          &p->algo, pc_lt.workspace, pc_lt.workspace_bytes, pc.stream);
    if (!lt_ok(st, "matmul")) return;
    if (pc_profile_on) profile_mark(g, p);
    if (bf16) bf16_written(g->C, span(g->M, g->N, g->ldc, k.batch, k.stride_c));
    if (bf16 && g->gelu == PC_GELU_FORWARD) bf16_written(g->aux, span(g->M, g->N, g->ldc, 1, 0));
    if (g->bgrad && p->bgrad_epilogue) pc_launch_axpy(g->bgrad, bgrad, (size_t)g->M, 1.0f);
    else if (g->bgrad) pc_launch_bias_backward_bf16(g->bgrad, g->A, g->K, g->M);
    if (g->bias && !p->bias_epilogue) /* float32 results only (a bf16 one went apart) */
        for (int64_t b = 0; b < g->batch; b++) {
            float *c = (float *)g->C + b * k.stride_c;
            pc_launch_res_bias(c, c, g->bias, g->M, g->N, 0);
        }
}
