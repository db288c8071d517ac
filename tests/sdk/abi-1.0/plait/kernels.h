/*
 * plait SDK — the core's CPU kernel library, as plugins see it (host->kernels).
 *
 * float32, row-major, host memory. Shapes follow llm.c's naming: B batch,
 * T time (sequence), C channels, OC output channels, NH heads, HS head size,
 * V vocabulary. Matrix products go through OpenBLAS (cblas_sgemm) with the
 * thread count the core set for this rank.
 *
 * Conventions for every backward kernel: gradients of *parameters* are
 * accumulated (+=) so micro-batches can accumulate; gradients of *inputs*
 * are overwritten unless stated (layernorm_backward accumulates dinp: it
 * feeds the residual stream). Pointers must not alias unless stated. No
 * kernel allocates or fails; preconditions are checked with assertions in
 * debug builds only. Kernels are reentrant: different threads may call them
 * on different data.
 *
 * Determinism: every result is bit-identical whatever the rank's thread
 * count. The core threads matrix products itself over a partition that
 * depends only on the shapes (OpenBLAS's own threading does not give
 * thread-count-invariant results), and sums every reduction in a fixed
 * order.
 */
#ifndef PLAIT_KERNELS_H
#define PLAIT_KERNELS_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hyperparameters of one AdamW update (decoupled weight decay, as PyTorch). */
typedef struct plait_adamw_args {
    uint32_t struct_size;
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;        /* 1-based step for bias correction */
    float grad_scale;    /* gradient multiplier applied first (clipping); 1 = none */
} plait_adamw_args;

/* Exact, order-independent accumulator of Σ x² over float32 values.
 * Each x² is added exactly into a 128-bit bin chosen by x's exponent, so the
 * total does not depend on how elements are split across ranks or in which
 * order partial accumulators are merged: the global gradient norm comes out
 * bit-identical for every layout. 4 KiB; zero it (memset) before use. */
#define PLAIT_SUMSQ_BINS 256
typedef struct plait_sumsq_acc {
    uint64_t bin[PLAIT_SUMSQ_BINS][2]; /* [exponent][lo, hi] of Σ mantissa² */
    uint64_t nonfinite;                /* count of NaN/Inf elements seen */
} plait_sumsq_acc;

typedef struct plait_kernels {
    uint32_t struct_size;

    /* --- BLAS-level --------------------------------------------------- */
    /* C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major, like cblas_sgemm
     * (trans_a/trans_b nonzero = transposed). Threaded, deterministic. */
    void (*sgemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                  float *C, int64_t ldc);

    /* --- vector helpers (used by optimizers) -------------------------- */
    void (*zero)(float *x, size_t n);
    void (*copy)(float *dst, const float *src, size_t n);
    void (*scale)(float *x, size_t n, float a);               /* x *= a */
    void (*axpy)(float *y, const float *x, size_t n, float a); /* y += a*x */
    /* Σ x[i]^2 accumulated in double, in index order (deterministic). */
    double (*sumsq)(const float *x, size_t n);
    /* One AdamW update of n elements in place. m, v are the moments. */
    void (*adamw)(float *param, const float *grad, float *m, float *v, size_t n,
                  const plait_adamw_args *args);
    /* acc += Σ x[i]^2, exactly (see plait_sumsq_acc). */
    void (*sumsq_exact)(plait_sumsq_acc *acc, const float *x, size_t n);
    /* dst += src, exactly. */
    void (*sumsq_merge)(plait_sumsq_acc *dst, const plait_sumsq_acc *src);
    /* The accumulated value rounded to double (a fixed procedure: equal
     * accumulators give equal doubles); +Inf if any element was not finite. */
    double (*sumsq_value)(const plait_sumsq_acc *acc);

    /* --- model ops: forward, and backward beside it ------------------ */
    /* out[BT,OC] = inp[BT,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t BT, int64_t C, int64_t OC);
    /* dinp (overwritten; may be NULL), dweight += , dbias += (may be NULL). */
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int64_t BT, int64_t C,
                            int64_t OC);
    /* LayerNorm over C with eps 1e-5; saves mean and rstd [BT] for backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int64_t BT, int64_t C);
    /* dinp += (residual stream), dweight += , dbias += . */
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int64_t BT, int64_t C);
    /* GELU, tanh approximation. out may equal inp; dinp may equal dout. */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* Causal self-attention, softmax scaled by 1/sqrt(HS). qkv[B,T,3*NH*HS]
     * holds q, k, v blocks (head h at columns h*HS of each); out[B,T,NH*HS].
     * att[B,NH,T,T] receives the softmax probabilities (saved for backward;
     * zeros above the diagonal). */
    void (*attention_forward)(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                              int64_t NH, int64_t HS);
    /* dqkv overwritten; `scratch` holds B*NH*T*T floats. */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int64_t B, int64_t T, int64_t NH, int64_t HS);
    /* out[B,T,C] = wte[token] + wpe[t]. */
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int64_t B, int64_t T, int64_t C);
    /* dwte += , dwpe += (dwpe may be NULL). */
    void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                               int64_t B, int64_t T, int64_t C);
    /* Softmax cross-entropy over V classes. losses[BT] (natural log);
     * dlogits[BT,V] = (softmax - onehot) * dloss_scale (may be NULL for
     * evaluation). logits may be overwritten by dlogits (same pointer allowed).
     * A negative target marks a row without loss (loss 0, gradient 0). */
    void (*crossentropy)(float *losses, float *dlogits, const float *logits,
                         const int32_t *targets, int64_t BT, int64_t V, float dloss_scale);
} plait_kernels;

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_KERNELS_H */
