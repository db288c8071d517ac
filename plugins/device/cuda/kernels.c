/*
 * The plait_kernels table on device memory (plait/kernels.h states every
 * kernel's contract; the core's CPU kernels in core/model/kernels_*.c are
 * the reference the gpu tests compare against). This file composes the
 * products (gemm.c) and the CUDA kernels (*.cu) into the table's entries;
 * everything is queued on the device's stream and returns at once, except
 * sumsq, which returns its double and so waits for the stream.
 *
 * Attention materialises the scores: per sequence, one batched product
 * over the heads computes Q·Kᵀ for all T×T pairs, a causal softmax kernel
 * turns them into probabilities (zeros above the diagonal, as the CPU
 * kernel leaves them), and a second batched product applies them to V. A
 * fused flash-style kernel is the performance path (docs/gpu.md).
 *
 * Not yet run on a GPU (docs/gpu.md).
 */
#include <math.h>
#include <string.h>

#include "pcuda.h"

/* ---- BLAS and vector helpers --------------------------------------------- */

static void k_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    pc_gemm g = {trans_a, trans_b, M, N, K, alpha, beta, A, lda, 0, B, ldb, 0, C, ldc, 0, 1, NULL};
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

/* Σ over bins of bin · 2^(2e-300), in long double from the lowest
 * exponent up: a fixed procedure over the integers, so equal accumulators
 * (whichever device filled them) give equal doubles. */
static double k_sumsq_value(const plait_sumsq_acc *acc) {
    if (acc->nonfinite) return INFINITY;
    long double total = 0;
    for (int e = 1; e < PLAIT_SUMSQ_BINS; e++) {
        uint64_t lo = acc->bin[e][0], hi = acc->bin[e][1];
        if (lo | hi) total += ldexpl(ldexpl((long double)hi, 64) + (long double)lo, 2 * e - 300);
    }
    return (double)total;
}

/* ---- linear layers ---------------------------------------------------------- */

static void k_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t BT,
                             int64_t C, int64_t OC) {
    pc_gemm g = {0, 1, BT, OC, C, 1.0f, 0.0f, inp, C, 0, weight, C, 0, out, OC, 0, 1, bias};
    pc_gemm_run(&g);
}

static void k_matmul_forward_residual(float *out, const float *res, const float *inp, const float *weight,
                                      const float *bias, int64_t BT, int64_t C, int64_t OC) {
    k_copy(out, res, (size_t)(BT * OC));
    pc_gemm g = {0, 1, BT, OC, C, 1.0f, 1.0f, inp, C, 0, weight, C, 0, out, OC, 0, 1, bias};
    pc_gemm_run(&g);
}

static void k_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int64_t BT, int64_t C, int64_t OC) {
    if (dinp) {
        pc_gemm g = {0, 0, BT, C, OC, 1.0f, 0.0f, dout, OC, 0, weight, C, 0, dinp, C, 0, 1, NULL};
        pc_gemm_run(&g);
    }
    if (dweight) {
        pc_gemm g = {1, 0, OC, C, BT, 1.0f, 1.0f, dout, OC, 0, inp, C, 0, dweight, C, 0, 1, NULL};
        pc_gemm_run(&g);
    }
    if (dbias) pc_launch_bias_backward(dbias, dout, BT, OC);
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
        pc_gemm g = {0, 1, T, T, HS, scale, 0.0f, q, C3, HS, q + Cl, C3, HS, att + b * NH * T * T, T, T * T, NH,
                     NULL};
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
        pc_gemm g = {0, 0, T, HS, T, 1.0f, 0.0f, att + b * NH * T * T, T, T * T, qkv + b * T * C3 + 2 * Cl, C3, HS,
                     out + b * T * Cl, Cl, HS, NH, NULL};
        pc_gemm_run(&g);
    }
}

static void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                 int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const int64_t Cl = NH * HS, C3 = 3 * Cl, TT = T * T;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++) { /* d(att) = dout · vᵀ */
        pc_gemm g = {0, 1, T, T, HS, 1.0f, 0.0f, dout + b * T * Cl, Cl, HS, qkv + b * T * C3 + 2 * Cl, C3, HS,
                     scratch + b * NH * TT, T, TT, NH, NULL};
        pc_gemm_run(&g);
    }
    pc_launch_softmax_causal_backward(scratch, att, B * NH, T); /* d(scores), zero above the diagonal */
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *datt = scratch + b * NH * TT, *p = att + b * NH * TT;
        float *dq = dqkv + b * T * C3;
        pc_gemm gq = {0, 0, T, HS, T, scale, 0.0f, datt, T, TT, q + Cl, C3, HS, dq, C3, HS, NH, NULL};
        pc_gemm gk = {1, 0, T, HS, T, scale, 0.0f, datt, T, TT, q, C3, HS, dq + Cl, C3, HS, NH, NULL};
        pc_gemm gv = {1, 0, T, HS, T, 1.0f, 0.0f, p, T, TT, dout + b * T * Cl, Cl, HS, dq + 2 * Cl, C3, HS, NH, NULL};
        pc_gemm_run(&gq);
        pc_gemm_run(&gk);
        pc_gemm_run(&gv);
    }
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

static const plait_kernels g_table = {
    .struct_size = sizeof(plait_kernels),
    .sgemm = k_sgemm,
    .zero = k_zero,
    .copy = k_copy,
    .scale = pc_launch_scale,
    .axpy = pc_launch_axpy,
    .sumsq = k_sumsq,
    .adamw = k_adamw,
    .sumsq_exact = pc_launch_sumsq_exact,
    .sumsq_merge = pc_launch_sumsq_merge,
    .sumsq_value = k_sumsq_value,
    .matmul_forward = k_matmul_forward,
    .matmul_backward = k_matmul_backward,
    .layernorm_forward = pc_launch_layernorm_forward,
    .layernorm_backward = pc_launch_layernorm_backward,
    .gelu_forward = pc_launch_gelu_forward,
    .gelu_backward = pc_launch_gelu_backward,
    .attention_forward = k_attention_forward,
    .attention_backward = k_attention_backward,
    .embedding_forward = k_embedding_forward,
    .embedding_backward = k_embedding_backward,
    .crossentropy = pc_launch_crossentropy,
    .matmul_forward_residual = k_matmul_forward_residual,
    .add_bias_residual = k_add_bias_residual,
    .bias_backward = pc_launch_bias_backward,
    .attention_probs = k_attention_probs,
    .embedding_forward_vocab = pc_launch_embedding_forward,
    .embedding_backward_vocab = pc_launch_embedding_backward,
    .add_positions = pc_launch_add_positions,
    .logits_rowmax = pc_launch_logits_rowmax,
    .logits_sumexp = pc_launch_logits_sumexp,
    .logits_target = pc_launch_logits_target,
    .loss_rows = pc_launch_loss_rows,
    .crossentropy_backward = pc_launch_crossentropy_backward,
    .zero_f64 = k_zero_f64,
};

const plait_kernels *pc_kernels(void) { return &g_table; }
