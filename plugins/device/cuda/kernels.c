/*
 * The plait_kernels table on device memory (plait/kernels.h states every
 * kernel's contract; the core's CPU kernels in core/kernels/kernels_*.c are
 * the reference the gpu tests compare against). This file composes the
 * products (gemm.c) and the CUDA kernels (*.cu) into the table's entries;
 * everything is queued on the device's stream and returns at once, except
 * sumsq, which returns its double and so waits for the stream. Each entry
 * of the table takes one lock and makes the device current on the calling
 * thread (below), so different threads may call them at once.
 *
 * Attention comes twice: fused (attention.cu, flash-style: the scores
 * stay on chip, each row's log-sum-exp is kept for the backward), which
 * the model uses, and the table's older entries, which materialise the
 * scores: per sequence, one batched product over the heads computes Q·Kᵀ
 * for all T×T pairs, a causal softmax kernel turns them into
 * probabilities (zeros above the diagonal, as the CPU kernel leaves
 * them), and a second batched product applies them to V.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "pcuda.h"

/* ---- BLAS and vector helpers --------------------------------------------- */

static void k_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    pc_gemm g = {.trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .A = A,
                 .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc, .batch = 1};
    pc_gemm_run(&g);
}

static void k_zero(float *x, size_t n) {
    if (n && cudaMemsetAsync(x, 0, n * sizeof *x, pc.stream) != cudaSuccess) pc_check_launch("zero");
}

static void k_zero_f64(double *x, size_t n) {
    if (n && cudaMemsetAsync(x, 0, n * sizeof *x, pc.stream) != cudaSuccess) pc_check_launch("zero_f64");
}

static void k_copy(float *dst, const float *src, size_t n) {
    if (n && dst != src &&
        cudaMemcpyAsync(dst, src, n * sizeof *dst, cudaMemcpyDeviceToDevice, pc.stream) != cudaSuccess)
        pc_check_launch("copy");
}

static double k_sumsq(const float *x, size_t n) {
    pc_launch_sumsq(x, n);
    cudaError_t e = cudaMemcpyAsync(pc.reduce_host, pc.reduce_partials, sizeof(double), cudaMemcpyDeviceToHost,
                                    pc.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(pc.stream);
    if (e != cudaSuccess) {
        pc_fail("cuda: sumsq: %s", cudaGetErrorString(e));
        return NAN;
    }
    return *pc.reduce_host;
}

/* The scalars of one update computed on the host exactly as the CPU
 * kernel computes them (bias corrections in double, then float). */
static void k_adamw(float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_args *a) {
    const double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    pc_launch_adamw(param, grad, m, v, n, a->beta1, a->beta2, (float)((double)a->lr / bc1), (float)sqrt(bc2),
                    1.0f - a->lr * a->weight_decay, a->grad_scale, a->eps);
}

/* One AdamW step over a list of tensors: the scalars as k_adamw's, each
 * tensor's weight decay applied on the device. */
static void k_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *a,
                          const float *scale) {
    const double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    pc_launch_adamw_multi(tensors, count, total, a->beta1, a->beta2, (float)((double)a->lr / bc1), (float)sqrt(bc2),
                          a->lr, a->eps, scale);
}

/* ---- linear layers ---------------------------------------------------------- */

static void k_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t BT,
                             int64_t C, int64_t OC) {
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = 0.0f, .A = inp, .lda = C, .B = weight,
                 .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias};
    pc_gemm_run(&g);
}

static void k_matmul_forward_residual(float *out, const float *res, const float *inp, const float *weight,
                                      const float *bias, int64_t BT, int64_t C, int64_t OC) {
    /* res is cuBLASLt's C and out its D: no copy of the residual */
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = 1.0f, .A = inp, .lda = C, .B = weight,
                 .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias, .res = res};
    pc_gemm_run(&g);
}

static void k_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int64_t BT, int64_t C, int64_t OC) {
    if (dinp) {
        pc_gemm g = {.M = BT, .N = C, .K = OC, .alpha = 1.0f, .beta = 0.0f, .A = dout, .lda = OC, .B = weight,
                     .ldb = C, .C = dinp, .ldc = C, .batch = 1};
        pc_gemm_run(&g);
    }
    if (dweight) {
        pc_gemm g = {.trans_a = 1, .M = OC, .N = C, .K = BT, .alpha = 1.0f, .beta = 1.0f, .A = dout, .lda = OC,
                     .B = inp, .ldb = C, .C = dweight, .ldc = C, .batch = 1};
        pc_gemm_run(&g);
    }
    if (dbias) pc_launch_bias_backward(dbias, dout, BT, OC);
}

/* pre = inp·weightᵀ + bias, out = GELU(pre): one product with cuBLASLt's
 * GELU_AUX_BIAS epilogue where it can (gemm.c). */
static void k_matmul_forward_gelu(float *out, float *pre, const float *inp, const float *weight, const float *bias,
                                  int64_t BT, int64_t C, int64_t OC) {
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = 0.0f, .A = inp, .lda = C, .B = weight,
                 .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias, .gelu = PC_GELU_FORWARD, .aux = pre};
    pc_gemm_run(&g);
}

/* matmul_backward with dinp = (dout·weight) ⊙ GELU'(pre): the input
 * gradient's product with cuBLASLt's DGELU epilogue where it can. */
static void k_matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                   const float *weight, const float *pre, int64_t BT, int64_t C, int64_t OC) {
    if (dinp) {
        pc_gemm g = {.M = BT, .N = C, .K = OC, .alpha = 1.0f, .beta = 0.0f, .A = dout, .lda = OC, .B = weight,
                     .ldb = C, .C = dinp, .ldc = C, .batch = 1, .gelu = PC_GELU_BACKWARD, .aux = (float *)pre};
        pc_gemm_run(&g);
    }
    k_matmul_backward(NULL, dweight, dbias, dout, inp, NULL, BT, C, OC);
}

/* ---- linear layers on bf16 activations (ABI 1.8) --------------------------
 * The entries above with operands stored in bf16: handed to cuBLASLt as
 * they are (pc_gemm.in_bf16), a bf16 output written by it (out_bf16),
 * float32 accumulation; the weight gradient accumulates into float32. */

static void k_matmul_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight,
                                  const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = 0.0f, .A = inp, .lda = C, .B = weight,
                 .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias, .in_bf16 = 1, .out_bf16 = 1};
    pc_gemm_run(&g);
}

static void k_matmul_forward_residual_bf16(float *out, const float *res, const plait_bf16 *inp,
                                           const plait_bf16 *weight, const float *bias, int64_t BT, int64_t C,
                                           int64_t OC) {
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = res ? 1.0f : 0.0f, .A = inp,
                 .lda = C, .B = weight, .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias, .res = res,
                 .in_bf16 = 1};
    pc_gemm_run(&g);
}

static void k_matmul_forward_gelu_bf16(plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp,
                                       const plait_bf16 *weight, const plait_bf16 *bias, int64_t BT, int64_t C,
                                       int64_t OC) {
    pc_gemm g = {.trans_b = 1, .M = BT, .N = OC, .K = C, .alpha = 1.0f, .beta = 0.0f, .A = inp, .lda = C, .B = weight,
                 .ldb = C, .C = out, .ldc = OC, .batch = 1, .bias = bias, .gelu = PC_GELU_FORWARD, .aux = pre,
                 .in_bf16 = 1, .out_bf16 = 1};
    pc_gemm_run(&g);
}

/* The input gradient (bf16; with GELU's gradient when pre is given) */
static void matmul_dinp_bf16(plait_bf16 *dinp, const plait_bf16 *dout, const plait_bf16 *weight,
                             const plait_bf16 *pre, int64_t BT, int64_t C, int64_t OC) {
    pc_gemm g = {.M = BT, .N = C, .K = OC, .alpha = 1.0f, .beta = 0.0f, .A = dout, .lda = OC, .B = weight, .ldb = C,
                 .C = dinp, .ldc = C, .batch = 1, .gelu = pre ? PC_GELU_BACKWARD : PC_GELU_NONE,
                 .aux = (plait_bf16 *)pre, .in_bf16 = 1, .out_bf16 = 1};
    pc_gemm_run(&g);
}

/* dweight += doutᵀ·inp in float32, dbias += dout's column sums: from the
 * product where cuBLASLt can (pc_gemm.bgrad), which reads dout anyway */
static void matmul_dparams_bf16(float *dweight, float *dbias, const plait_bf16 *dout, const plait_bf16 *inp,
                                int64_t BT, int64_t C, int64_t OC) {
    if (dweight) {
        pc_gemm g = {.trans_a = 1, .M = OC, .N = C, .K = BT, .alpha = 1.0f, .beta = 1.0f, .A = dout, .lda = OC,
                     .B = inp, .ldb = C, .C = dweight, .ldc = C, .batch = 1, .in_bf16 = 1, .bgrad = dbias};
        pc_gemm_run(&g);
    } else if (dbias) {
        pc_launch_bias_backward_bf16(dbias, dout, BT, OC);
    }
}

static void k_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                   const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C,
                                   int64_t OC) {
    if (dinp) matmul_dinp_bf16(dinp, dout, weight, NULL, BT, C, OC);
    matmul_dparams_bf16(dweight, dbias, dout, inp, BT, C, OC);
}

static void k_matmul_backward_gelu_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                        const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre,
                                        int64_t BT, int64_t C, int64_t OC) {
    if (dinp) matmul_dinp_bf16(dinp, dout, weight, pre, BT, C, OC);
    matmul_dparams_bf16(dweight, dbias, dout, inp, BT, C, OC);
}

static void k_add_bias_residual(float *x, const float *res, const float *bias, int64_t BT, int64_t C) {
    pc_launch_res_bias(x, res, bias, BT, C, 1);
}

/* ---- attention ----------------------------------------------------------- */

/* scores[b,h] = scale · q[b,h] · k[b,h]ᵀ, all T×T, one batched product per sequence */
static void attention_scores(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const int64_t Cl = NH * HS, C3 = 3 * Cl;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3;
        pc_gemm g = {.trans_b = 1, .M = T, .N = T, .K = HS, .alpha = scale, .beta = 0.0f, .A = q, .lda = C3,
                     .stride_a = HS, .B = q + Cl, .ldb = C3, .stride_b = HS, .C = att + b * NH * T * T, .ldc = T,
                     .stride_c = T * T, .batch = NH};
        pc_gemm_run(&g);
    }
    pc_launch_softmax_causal(att, B * NH, T);
}

static void k_attention_probs(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    attention_scores(att, qkv, B, T, NH, HS);
}

static void k_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                int64_t HS) {
    const int64_t Cl = NH * HS, C3 = 3 * Cl;
    attention_scores(att, qkv, B, T, NH, HS);
    for (int64_t b = 0; b < B; b++) {
        pc_gemm g = {.M = T, .N = HS, .K = T, .alpha = 1.0f, .beta = 0.0f, .A = att + b * NH * T * T, .lda = T,
                     .stride_a = T * T, .B = qkv + b * T * C3 + 2 * Cl, .ldb = C3, .stride_b = HS,
                     .C = out + b * T * Cl, .ldc = Cl, .stride_c = HS, .batch = NH};
        pc_gemm_run(&g);
    }
}

static void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                 int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const int64_t Cl = NH * HS, C3 = 3 * Cl, TT = T * T;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++) { /* d(att) = dout · vᵀ */
        pc_gemm g = {.trans_b = 1, .M = T, .N = T, .K = HS, .alpha = 1.0f, .beta = 0.0f, .A = dout + b * T * Cl,
                     .lda = Cl, .stride_a = HS, .B = qkv + b * T * C3 + 2 * Cl, .ldb = C3, .stride_b = HS,
                     .C = scratch + b * NH * TT, .ldc = T, .stride_c = TT, .batch = NH};
        pc_gemm_run(&g);
    }
    pc_launch_softmax_causal_backward(scratch, att, B * NH, T); /* d(scores), zero above the diagonal */
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *datt = scratch + b * NH * TT, *p = att + b * NH * TT;
        float *dq = dqkv + b * T * C3;
        pc_gemm gq = {.M = T, .N = HS, .K = T, .alpha = scale, .beta = 0.0f, .A = datt, .lda = T, .stride_a = TT,
                      .B = q + Cl, .ldb = C3, .stride_b = HS, .C = dq, .ldc = C3, .stride_c = HS, .batch = NH};
        pc_gemm gk = {.trans_a = 1, .M = T, .N = HS, .K = T, .alpha = scale, .beta = 0.0f, .A = datt, .lda = T,
                      .stride_a = TT, .B = q, .ldb = C3, .stride_b = HS, .C = dq + Cl, .ldc = C3, .stride_c = HS,
                      .batch = NH};
        pc_gemm gv = {.trans_a = 1, .M = T, .N = HS, .K = T, .alpha = 1.0f, .beta = 0.0f, .A = p, .lda = T,
                      .stride_a = TT, .B = dout + b * T * Cl, .ldb = Cl, .stride_b = HS, .C = dq + 2 * Cl, .ldc = C3,
                      .stride_c = HS, .batch = NH};
        pc_gemm_run(&gq);
        pc_gemm_run(&gk);
        pc_gemm_run(&gv);
    }
}

/* The fused attention (attention.cu): bf16 runs on the tensor cores,
 * fp32 and tf32 runs in fp32 arithmetic (tf32 tensor-core kernels would
 * be a tuning step; fp32 and tf32 runs are not where speed is sought).
 * The forward needs no scratch; the backward keeps D_i = dout_i·out_i
 * there. */
static size_t k_attention_fused_scratch(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    (void)HS;
    return (size_t)(B * NH * T);
}

static void k_attention_fused_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t HS) {
    (void)scratch;
    pc_launch_attention_fused_forward(out, lse, qkv, B, T, NH, HS, pc.precision == PLAIT_PRECISION_BF16);
}

static void k_attention_fused_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                       int64_t HS) {
    pc_launch_attention_fused_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS,
                                       pc.precision == PLAIT_PRECISION_BF16);
}

/* Grouped-query attention (ABI 1.10): the same kernels with NKV key/value
 * heads read in place; with NKV = NH the fused entries' bits (the tensor
 * cores in bf16 runs), else the fp32 kernels in every precision. */
static void k_attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                    int64_t NH, int64_t NKV, int64_t HS) {
    (void)scratch;
    pc_launch_attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS, pc.precision == PLAIT_PRECISION_BF16);
}

static void k_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                     const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    pc_launch_attention_gqa_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HS,
                                     pc.precision == PLAIT_PRECISION_BF16);
}

/* The bf16-activation forms (ABI 1.8): the same kernels on bf16 q, k, v,
 * out, dout and dqkv, on the tensor cores at head sizes 32, 64 and 128
 * whatever the run's precision (the operands are bf16 already); scratch
 * as above. */
static void k_attention_fused_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv,
                                           int64_t B, int64_t T, int64_t NH, int64_t HS) {
    (void)scratch;
    pc_launch_attention_fused_forward_bf16(out, lse, qkv, B, T, NH, HS);
}

/* The Llama family's on bf16 activations (ABI 1.22): the grouped-query
 * kernels on bf16 q, k, v, out, dout and dqkv; with NKV = NH the fused
 * bf16 entries' (the tensor cores at their head sizes), else the fp32
 * kernels widening bf16 on load (the tensor-core kernels take multi-head
 * attention only); scratch as above. */
static void k_attention_gqa_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                         int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    (void)scratch;
    pc_launch_attention_gqa_forward_bf16(out, lse, qkv, B, T, NH, NKV, HS);
}

/* ---- embeddings ------------------------------------------------------------ */

static void k_embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int64_t B,
                                int64_t T, int64_t C) {
    pc_launch_embedding_forward(out, tokens, wte, 0, INT64_MAX, wpe, B, T, C);
}

static void k_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t B,
                                 int64_t T, int64_t C) {
    pc_launch_embedding_backward(dwte, dwpe, dout, tokens, 0, INT64_MAX, B, T, C);
}

/* ---- the table's entries: any thread, one at a time ---------------------------
 *
 * plait/kernels.h lets different threads call the kernels at once. The
 * plugin's kernels share state between calls (the cached products and their
 * descriptors, the bf16 operand copies, the column-sum scratch, sumsq's
 * partials and pinned result) and queue on one stream, so each entry holds
 * g_entry for its whole host side: a call's launches then sit together on
 * the stream, and what it leaves in shared scratch is read by its own
 * kernels before the next call's overwrite them (stream order). Queueing is
 * cheap, so the lock is held briefly, except by sumsq, which waits for its
 * result. The device is made current on the calling thread first (CUDA's
 * current device is per thread). */
static pthread_mutex_t g_entry = PTHREAD_MUTEX_INITIALIZER;
/* The running entry's span in a traced step (trace.c), or -1. */
static int g_span = -1;

static void enter(const char *what) {
    pthread_mutex_lock(&g_entry);
    pc_gemm_entry_begin();
    if (!pc_make_current()) pc_fail("cuda: %s: cudaSetDevice(%d) failed on the calling thread: %s", what, pc.ordinal,
                                    cudaGetErrorString(cudaGetLastError()));
    /* a profile (profile.c) charges what the stream ran since the last
     * entry to work queued outside the table, and an entry's work past its
     * launchers' own marks (memsets, copies) to the entry */
    if (pc_profile_on) {
        pc_profile_mark("(outside the kernel table)", "copies, fills, waits for other streams");
        pc_profile_entry(what);
    }
    g_span = pc_trace_span_begin(PLAIT_STREAM_COMPUTE, what, 0, 0);
}

static void leave(void) {
    pc_trace_span_end(g_span);
    g_span = -1;
    if (pc_profile_on) {
        pc_profile_mark("(the entry's own copies and fills)", NULL);
        pc_profile_entry(NULL);
    }
    pthread_mutex_unlock(&g_entry);
}

#define PC_ENTRY(name, impl, params, args)                                                                           \
    static void e_##name params {                                                                                    \
        enter(#name);                                                                                                \
        impl args;                                                                                                   \
        leave();                                                                                                     \
    }
#define PC_ENTRY_RET(type, name, impl, params, args)                                                                 \
    static type e_##name params {                                                                                    \
        enter(#name);                                                                                                \
        type r = impl args;                                                                                          \
        leave();                                                                                                     \
        return r;                                                                                                    \
    }

/* the mixture of experts' grouped product (ABI 1.21): a cuBLASLt product
 * an expert, over the host's offsets; above the entries, whose macros
 * end in no `;` */
static void k_moe_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                                 const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            k_matmul_forward(out + r0 * OC, inp + r0 * C, weight + e * OC * C, bias ? bias + e * OC : NULL, n, C, OC);
    }
}
static void k_moe_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            k_matmul_backward(dinp ? dinp + r0 * C : NULL, dweight ? dweight + e * OC * C : NULL,
                              dbias ? dbias + e * OC : NULL, dout + r0 * OC, inp + r0 * C,
                              weight ? weight + e * OC * C : NULL, n, C, OC);
    }
}

/* One expert's product of the bf16 grouped entries below: C = op(A)·op(B)
 * over bf16 A and B with float32 accumulation, one batch, C bf16 unless
 * the caller asks float32. */
static pc_gemm moe_gemm_bf16(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const plait_bf16 *A,
                             int64_t lda, const plait_bf16 *B, int64_t ldb, void *C, int64_t ldc) {
    return (pc_gemm){.trans_a = trans_a,
                     .trans_b = trans_b,
                     .M = M,
                     .N = N,
                     .K = K,
                     .alpha = 1.0f,
                     .A = A,
                     .lda = lda,
                     .B = B,
                     .ldb = ldb,
                     .C = C,
                     .ldc = ldc,
                     .batch = 1,
                     .in_bf16 = 1,
                     .out_bf16 = 1};
}

/* the grouped product on bf16 (ABI 1.29): a cuBLASLt bf16 product an
 * expert, as the dense bf16 entries run, out's (dout's) rows ldo apart */
static void k_moe_matmul_forward_bf16(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const plait_bf16 *bias, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n <= 0) continue;
        pc_gemm g = moe_gemm_bf16(0, 1, n, OC, C, inp + r0 * C, C, weight + e * OC * C, C, out + r0 * ldo, ldo);
        if (bias) g.bias = bias + e * OC;
        pc_gemm_run(&g);
    }
}
static void k_moe_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                       int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                       const plait_bf16 *pre, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n <= 0) continue;
        const plait_bf16 *d = dout + r0 * ldo;
        if (dinp) { /* with GELU's derivative where pre is given */
            pc_gemm g = moe_gemm_bf16(0, 0, n, C, OC, d, ldo, weight + e * OC * C, C, dinp + r0 * C, C);
            if (pre) g.gelu = PC_GELU_BACKWARD, g.aux = (plait_bf16 *)pre + r0 * C;
            pc_gemm_run(&g);
        }
        float *dw = dweight ? dweight + e * OC * C : NULL;
        if (ldo == OC) { /* the dense entry's weight and bias gradients */
            matmul_dparams_bf16(dw, dbias ? dbias + e * OC : NULL, d, inp + r0 * C, n, C, OC);
        } else if (dw) { /* no bias where the rows are strided (kernels.h) */
            pc_gemm g = moe_gemm_bf16(1, 0, OC, C, n, d, ldo, inp + r0 * C, C, dw, C);
            g.beta = 1.0f, g.out_bf16 = 0; /* float32, added to */
            pc_gemm_run(&g);
        }
    }
}

PC_ENTRY(sgemm, k_sgemm, (int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc), (trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
PC_ENTRY(zero, k_zero, (float *x, size_t n), (x, n))
PC_ENTRY(copy, k_copy, (float *dst, const float *src, size_t n), (dst, src, n))
PC_ENTRY(scale, pc_launch_scale, (float *x, size_t n, float a), (x, n, a))
PC_ENTRY(axpy, pc_launch_axpy, (float *y, const float *x, size_t n, float a), (y, x, n, a))
PC_ENTRY_RET(double, sumsq, k_sumsq, (const float *x, size_t n), (x, n))
PC_ENTRY(adamw, k_adamw, (float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_args *args), (param, grad, m, v, n, args))
PC_ENTRY(sumsq_exact, pc_launch_sumsq_exact, (plait_sumsq_acc *acc, const float *x, size_t n), (acc, x, n))
PC_ENTRY(sumsq_merge, pc_launch_sumsq_merge, (plait_sumsq_acc *dst, const plait_sumsq_acc *src), (dst, src))
PC_ENTRY(matmul_forward, k_matmul_forward, (float *out, const float *inp, const float *weight, const float *bias, int64_t BT, int64_t C, int64_t OC), (out, inp, weight, bias, BT, C, OC))
PC_ENTRY(matmul_backward, k_matmul_backward, (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int64_t BT, int64_t C, int64_t OC), (dinp, dweight, dbias, dout, inp, weight, BT, C, OC))
PC_ENTRY(layernorm_forward, pc_launch_layernorm_forward, (float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int64_t BT, int64_t C), (out, mean, rstd, inp, weight, bias, BT, C))
PC_ENTRY(layernorm_backward, pc_launch_layernorm_backward, (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int64_t BT, int64_t C), (dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C))
PC_ENTRY(gelu_forward, pc_launch_gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n))
PC_ENTRY(gelu_backward, pc_launch_gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n))
PC_ENTRY(attention_forward, k_attention_forward, (float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS), (out, att, qkv, B, T, NH, HS))
PC_ENTRY(attention_backward, k_attention_backward, (float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att, int64_t B, int64_t T, int64_t NH, int64_t HS), (dqkv, scratch, dout, qkv, att, B, T, NH, HS))
PC_ENTRY(embedding_forward, k_embedding_forward, (float *out, const int32_t *tokens, const float *wte, const float *wpe, int64_t B, int64_t T, int64_t C), (out, tokens, wte, wpe, B, T, C))
PC_ENTRY(embedding_backward, k_embedding_backward, (float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t B, int64_t T, int64_t C), (dwte, dwpe, dout, tokens, B, T, C))
PC_ENTRY(crossentropy, pc_launch_crossentropy, (float *losses, float *dlogits, const float *logits, const int32_t *targets, int64_t BT, int64_t V, float dloss_scale), (losses, dlogits, logits, targets, BT, V, dloss_scale))
PC_ENTRY(matmul_forward_residual, k_matmul_forward_residual, (float *out, const float *res, const float *inp, const float *weight, const float *bias, int64_t BT, int64_t C, int64_t OC), (out, res, inp, weight, bias, BT, C, OC))
PC_ENTRY(add_bias_residual, k_add_bias_residual, (float *x, const float *res, const float *bias, int64_t BT, int64_t C), (x, res, bias, BT, C))
PC_ENTRY(bias_backward, pc_launch_bias_backward, (float *dbias, const float *dout, int64_t BT, int64_t OC), (dbias, dout, BT, OC))
PC_ENTRY(attention_probs, k_attention_probs, (float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS), (att, qkv, B, T, NH, HS))
PC_ENTRY(embedding_forward_vocab, pc_launch_embedding_forward, (float *out, const int32_t *tokens, const float *wte, int64_t vocab_start, int64_t n_rows, const float *wpe, int64_t B, int64_t T, int64_t C), (out, tokens, wte, vocab_start, n_rows, wpe, B, T, C))
PC_ENTRY(embedding_backward_vocab, pc_launch_embedding_backward, (float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int64_t vocab_start, int64_t n_rows, int64_t B, int64_t T, int64_t C), (dwte, dwpe, dout, tokens, vocab_start, n_rows, B, T, C))
PC_ENTRY(add_positions, pc_launch_add_positions, (float *out, const float *wpe, int64_t B, int64_t T, int64_t C), (out, wpe, B, T, C))
PC_ENTRY(logits_rowmax, pc_launch_logits_rowmax, (float *rowmax, const float *logits, int64_t BT, int64_t Vl, int64_t n_valid), (rowmax, logits, BT, Vl, n_valid))
PC_ENTRY(logits_sumexp, pc_launch_logits_sumexp, (float *sumexp, const float *logits, const float *rowmax, int64_t BT, int64_t Vl, int64_t n_valid), (sumexp, logits, rowmax, BT, Vl, n_valid))
PC_ENTRY(logits_target, pc_launch_logits_target, (float *tlogit, const float *logits, const int32_t *targets, int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid), (tlogit, logits, targets, vocab_start, BT, Vl, n_valid))
PC_ENTRY(loss_rows, pc_launch_loss_rows, (float *losses, float *lse, const float *rowmax, const float *sumexp, const float *tlogit, const int32_t *targets, int64_t BT, double *loss_sum), (losses, lse, rowmax, sumexp, tlogit, targets, BT, loss_sum))
PC_ENTRY(crossentropy_backward, pc_launch_crossentropy_backward, (float *dlogits, const float *logits, const float *lse, const int32_t *targets, int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid, float scale), (dlogits, logits, lse, targets, vocab_start, BT, Vl, n_valid, scale))
PC_ENTRY(zero_f64, k_zero_f64, (double *dst, size_t n), (dst, n))
PC_ENTRY(crossentropy_fused, pc_launch_crossentropy_fused, (float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits, const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale), (losses, lse, loss_sum, dlogits, logits, targets, BT, Vl, n_valid, scale))
PC_ENTRY(layernorm_backward_fused, pc_launch_layernorm_backward_fused, (float *dinp, const float *dres, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int64_t BT, int64_t C), (dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C))
PC_ENTRY(matmul_forward_gelu, k_matmul_forward_gelu, (float *out, float *pre, const float *inp, const float *weight, const float *bias, int64_t BT, int64_t C, int64_t OC), (out, pre, inp, weight, bias, BT, C, OC))
PC_ENTRY(matmul_backward_gelu, k_matmul_backward_gelu, (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, const float *pre, int64_t BT, int64_t C, int64_t OC), (dinp, dweight, dbias, dout, inp, weight, pre, BT, C, OC))
PC_ENTRY(sumsq_clip, pc_launch_sumsq_clip, (double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip), (sumsq, scale, acc, grad_clip))
PC_ENTRY(adamw_multi, k_adamw_multi, (const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *args, const float *scale), (tensors, count, total, args, scale))
PC_ENTRY(attention_fused_forward, k_attention_fused_forward, (float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS), (out, lse, scratch, qkv, B, T, NH, HS))
PC_ENTRY(attention_fused_backward, k_attention_fused_backward, (float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out, const float *lse, int64_t B, int64_t T, int64_t NH, int64_t HS), (dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS))
/* the bf16-activation row kernels (ABI 1.8): norm.cu, attention.cu, loss.cu */
PC_ENTRY(layernorm_forward_bf16, pc_launch_layernorm_forward_bf16, (plait_bf16 *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int64_t BT, int64_t C), (out, mean, rstd, inp, weight, bias, BT, C))
PC_ENTRY(layernorm_backward_fused_bf16, pc_launch_layernorm_backward_fused_bf16, (float *dinp, const float *dres, float *dweight, float *dbias, const plait_bf16 *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int64_t BT, int64_t C), (dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C))
/* ABI 1.9: the same, dinp also stored in bf16 */
PC_ENTRY(layernorm_backward_fused_bf16_copy, pc_launch_layernorm_backward_fused_bf16_copy, (float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight, float *dbias, const plait_bf16 *dout, const float *inp, const float *weight, const float *mean, const float *rstd, int64_t BT, int64_t C), (dinp, dinp_bf, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C))
PC_ENTRY(attention_fused_forward_bf16, k_attention_fused_forward_bf16, (plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS), (out, lse, scratch, qkv, B, T, NH, HS))
PC_ENTRY(attention_fused_backward_bf16, pc_launch_attention_fused_backward_bf16, (plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout, const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH, int64_t HS), (dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS))
PC_ENTRY(crossentropy_fused_bf16, pc_launch_crossentropy_fused_bf16, (float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits, const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale), (losses, lse, loss_sum, dlogits, logits, targets, BT, Vl, n_valid, scale))

/* the Llama family (ABI 1.10): llama.cu, and attention.cu's grouped-query attention */
PC_ENTRY(rmsnorm_forward, pc_launch_rmsnorm_forward,
         (float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C, float eps),
         (out, rstd, inp, weight, BT, C, eps))
PC_ENTRY(rmsnorm_backward, pc_launch_rmsnorm_backward,
         (float *dinp, const float *dres, float *dweight, const float *dout, const float *inp, const float *weight,
          const float *rstd, int64_t BT, int64_t C),
         (dinp, dres, dweight, dout, inp, weight, rstd, BT, C))
PC_ENTRY(rope, pc_launch_rope,
         (float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
          int inverse),
         (x, cs, B, T, row_stride, n_heads, HS, inverse))
PC_ENTRY(swiglu_forward, pc_launch_swiglu_forward, (float *out, const float *gate, const float *up, size_t n),
         (out, gate, up, n))
PC_ENTRY(swiglu_backward, pc_launch_swiglu_backward,
         (float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n),
         (dgate, dup, dout, gate, up, n))
PC_ENTRY(attention_gqa_forward, k_attention_gqa_forward,
         (float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV,
          int64_t HS),
         (out, lse, scratch, qkv, B, T, NH, NKV, HS))
PC_ENTRY(attention_gqa_backward, k_attention_gqa_backward,
         (float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out, const float *lse,
          int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS),
         (dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HS))
/* the Llama family on bf16 activations (ABI 1.22); clang-format would
 * read a parameter list's `plait_bf16 *out` in a macro's argument as a
 * product */
/* clang-format off */
PC_ENTRY(rmsnorm_forward_bf16, pc_launch_rmsnorm_forward_bf16,
         (plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C, float eps),
         (out, rstd, inp, weight, BT, C, eps))
PC_ENTRY(rmsnorm_backward_bf16, pc_launch_rmsnorm_backward_bf16,
         (float *dinp, const float *dres, float *dweight, const plait_bf16 *dout, const float *inp,
          const float *weight, const float *rstd, int64_t BT, int64_t C),
         (dinp, dres, dweight, dout, inp, weight, rstd, BT, C))
PC_ENTRY(rope_bf16, pc_launch_rope_bf16,
         (plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
          int inverse),
         (x, cs, B, T, row_stride, n_heads, HS, inverse))
PC_ENTRY(swiglu_forward_bf16, pc_launch_swiglu_forward_bf16,
         (plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F), (out, gu, BT, F))
PC_ENTRY(swiglu_backward_bf16, pc_launch_swiglu_backward_bf16,
         (plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT, int64_t F),
         (dgu, dout, gu, BT, F))
PC_ENTRY(attention_gqa_forward_bf16, k_attention_gqa_forward_bf16,
         (plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B, int64_t T, int64_t NH,
          int64_t NKV, int64_t HS),
         (out, lse, scratch, qkv, B, T, NH, NKV, HS))
PC_ENTRY(attention_gqa_backward_bf16, pc_launch_attention_gqa_backward_bf16,
         (plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout, const plait_bf16 *qkv, const plait_bf16 *out,
          const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS),
         (dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HS))
/* clang-format on */

/* ring attention (ABI 1.18): ring.cu */
PC_ENTRY(ring_attention_forward, pc_launch_ring_attention_forward,
         (float *out, float *mx, float *l, const float *qkv, const float *kv, int64_t kv_stride, int64_t B, int64_t T,
          int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk),
         (out, mx, l, qkv, kv, kv_stride, B, T, NH, NKV, HS, blk))
PC_ENTRY(ring_attention_finish, pc_launch_ring_attention_finish,
         (float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH, int64_t HS),
         (out, mx, l, B, T, NH, HS))
PC_ENTRY(ring_attention_backward, pc_launch_ring_attention_backward,
         (float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride, const float *dout,
          const float *out, const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
          const plait_ring_block *blk),
         (dqkv, dkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, blk))
/* on bf16 activations (ABI 1.25) */
PC_ENTRY(ring_attention_forward_bf16, pc_launch_ring_attention_forward_bf16,
         (float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv, int64_t kv_stride, int64_t B,
          int64_t T, int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk),
         (out, mx, l, qkv, kv, kv_stride, B, T, NH, NKV, HS, blk))
PC_ENTRY(ring_attention_backward_bf16, pc_launch_ring_attention_backward_bf16,
         (float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv, int64_t kv_stride,
          const plait_bf16 *dout, const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH,
          int64_t NKV, int64_t HS, const plait_ring_block *blk),
         (dqkv, dkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, blk))
PC_ENTRY(copy_rows, pc_launch_copy_rows,
         (float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows, int64_t width),
         (dst, dst_stride, src, src_stride, rows, width))

/* the mixture of experts (ABI 1.21): moe.cu */
PC_ENTRY(moe_route, pc_launch_moe_route,
         (float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias, int64_t N,
          int64_t E, int64_t k, int sigmoid),
         (scores, lse, idx, gate, logits, bias, N, E, k, sigmoid))
PC_ENTRY(moe_permute, pc_launch_moe_permute,
         (int32_t * row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx, const float *inp,
          int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity),
         (row, tok, off, routed, x, idx, inp, N, E, k, C, capacity))
PC_ENTRY(moe_unpermute, pc_launch_moe_unpermute,
         (float *out, const float *res, const float *shared, const float *y, const int32_t *row, const float *gate,
          int64_t N, int64_t k, int64_t C),
         (out, res, shared, y, row, gate, N, k, C))
PC_ENTRY(moe_unpermute_backward, pc_launch_moe_unpermute_backward,
         (float *dy_rows, double *dgate, const float *dout, const float *y, const int32_t *row, const float *gate,
          int64_t N, int64_t k, int64_t C),
         (dy_rows, dgate, dout, y, row, gate, N, k, C))
PC_ENTRY(moe_permute_backward, pc_launch_moe_permute_backward,
         (float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C), (dinp, dx, row, N, k, C))
PC_ENTRY(moe_route_backward, pc_launch_moe_route_backward,
         (float *dlogits, const double *dgate, const float *logits, const float *scores, const float *lse,
          const int32_t *idx, const float *gate, const float *routed, int64_t N, int64_t E, int64_t k, int sigmoid,
          double aux, double z, double share),
         (dlogits, dgate, logits, scores, lse, idx, gate, routed, N, E, k, sigmoid, aux, z, share))
PC_ENTRY(moe_matmul_forward, k_moe_matmul_forward,
         (float *out, const float *inp, const float *weight, const float *bias, const int32_t *off, int64_t E,
          int64_t C, int64_t OC),
         (out, inp, weight, bias, off, E, C, OC))
PC_ENTRY(moe_matmul_backward, k_moe_matmul_backward,
         (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight,
          const int32_t *off, int64_t E, int64_t C, int64_t OC),
         (dinp, dweight, dbias, dout, inp, weight, off, E, C, OC))

/* the mixture of experts on bf16 activations (ABI 1.29): moe.cu and the grouped product above */
PC_ENTRY(moe_permute_bf16, pc_launch_moe_permute_bf16,
         (int32_t * row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x, const int32_t *idx, const float *inp,
          int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity),
         (row, tok, off, routed, x, idx, inp, N, E, k, C, capacity))
PC_ENTRY(moe_unpermute_bf16, pc_launch_moe_unpermute_bf16,
         (float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y, const int32_t *row,
          const float *gate, int64_t N, int64_t k, int64_t C),
         (out, res, shared, y, row, gate, N, k, C))
PC_ENTRY(moe_unpermute_backward_bf16, pc_launch_moe_unpermute_backward_bf16,
         (plait_bf16 * dy_rows, double *dgate, const float *dout, const plait_bf16 *y, const int32_t *row,
          const float *gate, int64_t N, int64_t k, int64_t C),
         (dy_rows, dgate, dout, y, row, gate, N, k, C))
PC_ENTRY(moe_permute_backward_bf16, pc_launch_moe_permute_backward_bf16,
         (float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k, int64_t C),
         (dinp, dx, row, N, k, C))
PC_ENTRY(moe_matmul_forward_bf16, k_moe_matmul_forward_bf16,
         (plait_bf16 * out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *bias,
          const int32_t *off, int64_t E, int64_t C, int64_t OC),
         (out, ldo, inp, weight, bias, off, E, C, OC))
PC_ENTRY(moe_matmul_backward_bf16, k_moe_matmul_backward_bf16,
         (plait_bf16 * dinp, float *dweight, float *dbias, const plait_bf16 *dout, int64_t ldo, const plait_bf16 *inp,
          const plait_bf16 *weight, const plait_bf16 *pre, const int32_t *off, int64_t E, int64_t C, int64_t OC),
         (dinp, dweight, dbias, dout, ldo, inp, weight, pre, off, E, C, OC))

/* bf16 activations (ABI 1.8): the products */
PC_ENTRY(to_bf16, pc_launch_to_bf16, (plait_bf16 *dst, const float *src, size_t n), (dst, src, n))
PC_ENTRY(matmul_forward_bf16, k_matmul_forward_bf16, (plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC), (out, inp, weight, bias, BT, C, OC))
PC_ENTRY(matmul_forward_residual_bf16, k_matmul_forward_residual_bf16, (float *out, const float *res, const plait_bf16 *inp, const plait_bf16 *weight, const float *bias, int64_t BT, int64_t C, int64_t OC), (out, res, inp, weight, bias, BT, C, OC))
PC_ENTRY(matmul_forward_gelu_bf16, k_matmul_forward_gelu_bf16, (plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC), (out, pre, inp, weight, bias, BT, C, OC))
PC_ENTRY(matmul_backward_bf16, k_matmul_backward_bf16, (plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout, const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C, int64_t OC), (dinp, dweight, dbias, dout, inp, weight, BT, C, OC))
PC_ENTRY(matmul_backward_gelu_bf16, k_matmul_backward_gelu_bf16, (plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout, const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre, int64_t BT, int64_t C, int64_t OC), (dinp, dweight, dbias, dout, inp, weight, pre, BT, C, OC))
/* a bf16 message's way back into float32 (ABI 1.23) */
PC_ENTRY(from_bf16, pc_launch_from_bf16, (float *dst, const plait_bf16 *src, size_t n), (dst, src, n))
PC_ENTRY(gelu_forward_bf16, pc_launch_gelu_forward_bf16, (plait_bf16 *out, const plait_bf16 *inp, size_t n), (out, inp, n))

static const plait_kernels g_table = {
    .struct_size = sizeof(plait_kernels),
    .sgemm = e_sgemm,
    .zero = e_zero,
    .copy = e_copy,
    .scale = e_scale,
    .axpy = e_axpy,
    .sumsq = e_sumsq,
    .adamw = e_adamw,
    .sumsq_exact = e_sumsq_exact,
    .sumsq_merge = e_sumsq_merge,
    .sumsq_value = plait_sumsq_acc_value, /* a host copy, the devices' one procedure */
    .matmul_forward = e_matmul_forward,
    .matmul_backward = e_matmul_backward,
    .layernorm_forward = e_layernorm_forward,
    .layernorm_backward = e_layernorm_backward,
    .gelu_forward = e_gelu_forward,
    .gelu_backward = e_gelu_backward,
    .attention_forward = e_attention_forward,
    .attention_backward = e_attention_backward,
    .embedding_forward = e_embedding_forward,
    .embedding_backward = e_embedding_backward,
    .crossentropy = e_crossentropy,
    .matmul_forward_residual = e_matmul_forward_residual,
    .add_bias_residual = e_add_bias_residual,
    .bias_backward = e_bias_backward,
    .attention_probs = e_attention_probs,
    .embedding_forward_vocab = e_embedding_forward_vocab,
    .embedding_backward_vocab = e_embedding_backward_vocab,
    .add_positions = e_add_positions,
    .logits_rowmax = e_logits_rowmax,
    .logits_sumexp = e_logits_sumexp,
    .logits_target = e_logits_target,
    .loss_rows = e_loss_rows,
    .crossentropy_backward = e_crossentropy_backward,
    .zero_f64 = e_zero_f64,
    .attention_fused_scratch = k_attention_fused_scratch,
    .attention_fused_forward = e_attention_fused_forward,
    .attention_fused_backward = e_attention_fused_backward,
    .sumsq_clip = e_sumsq_clip,
    .adamw_multi = e_adamw_multi,
    .crossentropy_fused = e_crossentropy_fused,
    .layernorm_backward_fused = e_layernorm_backward_fused,
    .matmul_forward_gelu = e_matmul_forward_gelu,
    .matmul_backward_gelu = e_matmul_backward_gelu,
    /* bf16 activations (ABI 1.8): the products */
    .to_bf16 = e_to_bf16,
    .matmul_forward_bf16 = e_matmul_forward_bf16,
    .matmul_forward_residual_bf16 = e_matmul_forward_residual_bf16,
    .matmul_forward_gelu_bf16 = e_matmul_forward_gelu_bf16,
    .matmul_backward_bf16 = e_matmul_backward_bf16,
    .matmul_backward_gelu_bf16 = e_matmul_backward_gelu_bf16,
    .gelu_forward_bf16 = e_gelu_forward_bf16,
    /* the bf16-activation row kernels (ABI 1.8) */
    .layernorm_forward_bf16 = e_layernorm_forward_bf16,
    .layernorm_backward_fused_bf16 = e_layernorm_backward_fused_bf16,
    .attention_fused_forward_bf16 = e_attention_fused_forward_bf16,
    .attention_fused_backward_bf16 = e_attention_fused_backward_bf16,
    .crossentropy_fused_bf16 = e_crossentropy_fused_bf16,
    /* ABI 1.9 */
    .layernorm_backward_fused_bf16_copy = e_layernorm_backward_fused_bf16_copy,
    /* the Llama family (ABI 1.10) */
    .rmsnorm_forward = e_rmsnorm_forward,
    .rmsnorm_backward = e_rmsnorm_backward,
    .rope = e_rope,
    .swiglu_forward = e_swiglu_forward,
    .swiglu_backward = e_swiglu_backward,
    .attention_gqa_forward = e_attention_gqa_forward,
    .attention_gqa_backward = e_attention_gqa_backward,
    /* ring attention (ABI 1.18) */
    .ring_attention_forward = e_ring_attention_forward,
    .ring_attention_finish = e_ring_attention_finish,
    .ring_attention_backward = e_ring_attention_backward,
    .copy_rows = e_copy_rows,
    /* the mixture of experts (ABI 1.21) */
    .moe_route = e_moe_route,
    .moe_permute = e_moe_permute,
    .moe_unpermute = e_moe_unpermute,
    .moe_unpermute_backward = e_moe_unpermute_backward,
    .moe_permute_backward = e_moe_permute_backward,
    .moe_route_backward = e_moe_route_backward,
    .moe_matmul_forward = e_moe_matmul_forward,
    .moe_matmul_backward = e_moe_matmul_backward,
    /* the Llama family on bf16 activations (ABI 1.22) */
    .rmsnorm_forward_bf16 = e_rmsnorm_forward_bf16,
    .rmsnorm_backward_bf16 = e_rmsnorm_backward_bf16,
    .rope_bf16 = e_rope_bf16,
    .swiglu_forward_bf16 = e_swiglu_forward_bf16,
    .swiglu_backward_bf16 = e_swiglu_backward_bf16,
    .attention_gqa_forward_bf16 = e_attention_gqa_forward_bf16,
    .attention_gqa_backward_bf16 = e_attention_gqa_backward_bf16,
    /* ABI 1.23 */
    .from_bf16 = e_from_bf16,
    /* ring attention on bf16 activations (ABI 1.25) */
    .ring_attention_forward_bf16 = e_ring_attention_forward_bf16,
    .ring_attention_backward_bf16 = e_ring_attention_backward_bf16,
    /* the mixture of experts on bf16 activations (ABI 1.29) */
    .moe_permute_bf16 = e_moe_permute_bf16,
    .moe_unpermute_bf16 = e_moe_unpermute_bf16,
    .moe_unpermute_backward_bf16 = e_moe_unpermute_backward_bf16,
    .moe_permute_backward_bf16 = e_moe_permute_backward_bf16,
    .moe_matmul_forward_bf16 = e_moe_matmul_forward_bf16,
    .moe_matmul_backward_bf16 = e_moe_matmul_backward_bf16,
};

const plait_kernels *pc_kernels(void) { return &g_table; }
