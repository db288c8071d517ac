/*
 * host->kernels: the table, and the thread setting shared by all kernels.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

static void sgemm_entry(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc) {
    plait_k_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static const plait_kernels g_table = {
    .struct_size = sizeof(plait_kernels),
    .sgemm = sgemm_entry,
    .zero = plait_k_zero,
    .copy = plait_k_copy,
    .scale = plait_k_scale,
    .axpy = plait_k_axpy,
    .sumsq = plait_k_sumsq,
    .adamw = plait_k_adamw,
    .sumsq_exact = plait_k_sumsq_exact,
    .sumsq_merge = plait_k_sumsq_merge,
    .sumsq_value = plait_k_sumsq_value,
    .matmul_forward = plait_k_matmul_forward,
    .matmul_backward = plait_k_matmul_backward,
    .layernorm_forward = plait_k_layernorm_forward,
    .layernorm_backward = plait_k_layernorm_backward,
    .gelu_forward = plait_k_gelu_forward,
    .gelu_backward = plait_k_gelu_backward,
    .attention_forward = plait_k_attention_forward,
    .attention_backward = plait_k_attention_backward,
    .embedding_forward = plait_k_embedding_forward,
    .embedding_backward = plait_k_embedding_backward,
    .crossentropy = plait_k_crossentropy,
    .matmul_forward_residual = plait_k_matmul_forward_residual,
    .add_bias_residual = plait_k_add_bias_residual,
    .bias_backward = plait_k_bias_backward,
    .attention_probs = plait_k_attention_probs,
    .embedding_forward_vocab = plait_k_embedding_forward_vocab,
    .embedding_backward_vocab = plait_k_embedding_backward_vocab,
    .add_positions = plait_k_add_positions,
    .logits_rowmax = plait_k_logits_rowmax,
    .logits_sumexp = plait_k_logits_sumexp,
    .logits_target = plait_k_logits_target,
    .loss_rows = plait_k_loss_rows,
    .crossentropy_backward = plait_k_crossentropy_backward,
    .zero_f64 = plait_k_zero_f64,
    .attention_fused_scratch = plait_k_attention_fused_scratch,
    .attention_fused_forward = plait_k_attention_fused_forward,
    .attention_fused_backward = plait_k_attention_fused_backward,
    .sumsq_clip = plait_k_sumsq_clip,
    .adamw_multi = plait_k_adamw_multi,
    .crossentropy_fused = plait_k_crossentropy_fused,
    .layernorm_backward_fused = plait_k_layernorm_backward_fused,
    .matmul_forward_gelu = plait_k_matmul_forward_gelu,
    .matmul_backward_gelu = plait_k_matmul_backward_gelu,
    .rmsnorm_forward = plait_k_rmsnorm_forward,
    .rmsnorm_backward = plait_k_rmsnorm_backward,
    .rope = plait_k_rope,
    .swiglu_forward = plait_k_swiglu_forward,
    .swiglu_backward = plait_k_swiglu_backward,
    .attention_gqa_forward = plait_k_attention_gqa_forward,
    .attention_gqa_backward = plait_k_attention_gqa_backward,
    .ring_attention_forward = plait_k_ring_attention_forward,
    .ring_attention_finish = plait_k_ring_attention_finish,
    .ring_attention_backward = plait_k_ring_attention_backward,
    .copy_rows = plait_k_copy_rows,
    .moe_route = plait_k_moe_route,
    .moe_permute = plait_k_moe_permute,
    .moe_unpermute = plait_k_moe_unpermute,
    .moe_unpermute_backward = plait_k_moe_unpermute_backward,
    .moe_permute_backward = plait_k_moe_permute_backward,
    .moe_route_backward = plait_k_moe_route_backward,
    .moe_matmul_forward = plait_k_moe_matmul_forward,
    .moe_matmul_backward = plait_k_moe_matmul_backward,
    .to_bf16 = plait_k_to_bf16,
    .from_bf16 = plait_k_from_bf16,
    .layernorm_forward_bf16 = plait_k_layernorm_forward_bf16,
    .matmul_forward_bf16 = plait_k_matmul_forward_bf16,
    .matmul_forward_residual_bf16 = plait_k_matmul_forward_residual_bf16,
    .matmul_forward_gelu_bf16 = plait_k_matmul_forward_gelu_bf16,
    .matmul_backward_bf16 = plait_k_matmul_backward_bf16,
    .matmul_backward_gelu_bf16 = plait_k_matmul_backward_gelu_bf16,
    .attention_fused_forward_bf16 = plait_k_attention_fused_forward_bf16,
    .attention_fused_backward_bf16 = plait_k_attention_fused_backward_bf16,
    .layernorm_backward_fused_bf16 = plait_k_layernorm_backward_fused_bf16,
    .crossentropy_fused_bf16 = plait_k_crossentropy_fused_bf16,
    .gelu_forward_bf16 = plait_k_gelu_forward_bf16,
    .layernorm_backward_fused_bf16_copy = plait_k_layernorm_backward_fused_bf16_copy,
    .rmsnorm_forward_bf16 = plait_k_rmsnorm_forward_bf16,
    .rmsnorm_backward_bf16 = plait_k_rmsnorm_backward_bf16,
    .rope_bf16 = plait_k_rope_bf16,
    .swiglu_forward_bf16 = plait_k_swiglu_forward_bf16,
    .swiglu_backward_bf16 = plait_k_swiglu_backward_bf16,
    .attention_gqa_forward_bf16 = plait_k_attention_gqa_forward_bf16,
    .attention_gqa_backward_bf16 = plait_k_attention_gqa_backward_bf16,
    .ring_attention_forward_bf16 = plait_k_ring_attention_forward_bf16,
    .ring_attention_backward_bf16 = plait_k_ring_attention_backward_bf16,
    .moe_permute_bf16 = plait_k_moe_permute_bf16,
    .moe_unpermute_bf16 = plait_k_moe_unpermute_bf16,
    .moe_unpermute_backward_bf16 = plait_k_moe_unpermute_backward_bf16,
    .moe_permute_backward_bf16 = plait_k_moe_permute_backward_bf16,
    .moe_matmul_forward_bf16 = plait_k_moe_matmul_forward_bf16,
    .moe_matmul_backward_bf16 = plait_k_moe_matmul_backward_bf16,
};

const plait_kernels *plait_kernels_table(void) { return &g_table; }

static plait_kernels_log_fn g_log;

void plait_kernels_set_log(plait_kernels_log_fn fn) { g_log = fn; }

void plait_kernels_warn(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_log)
        g_log(PLAIT_LOG_WARN, "kernels", "%s", line);
    else
        fprintf(stderr, "plait: warning: kernels: %s\n", line);
}

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;

static void init_once(void) { openblas_set_num_threads(1); }

void plait_kernels_ensure_init(void) { pthread_once(&g_init_once, init_once); }

void plait_kernels_set_threads(int threads) {
    plait_kernels_ensure_init();
    plait_pool_set_threads(threads < 1 ? 1 : threads);
}

int plait_kernels_threads(void) { return plait_pool_threads(); }
