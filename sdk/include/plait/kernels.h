/*
 * plait SDK — the core's CPU kernel library, as plugins see it (host->kernels).
 *
 * float32, row-major. Until ABI 1.2 these were host memory only; from ABI 1.3
 * host->kernels are the kernels of the rank's open device (plait/device.h):
 * every tensor pointer is then the device's memory (host memory on the cpu
 * device), except the sumsq_value accumulator, which is a host copy. Shapes follow llm.c's naming: B batch,
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

#include <math.h>

#include <plait/kernels_moe.h> /* the mixture of experts' entries */
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

/* The host's AdamW, one element at a time (ABI 1.12, header-only): the
 * `adamw` kernel's arithmetic in its order, which the cpu device's kernel
 * runs and an optimizer stepping on the host (offloaded state) shares, so
 * both round alike. Each product and sum is rounded to float; compile the
 * loop that calls it without FMA contraction (-ffp-contract=off) to keep
 * it so. plait_adamw_consts_of derives the per-step constants (the bias
 * corrections in double). */
typedef struct plait_adamw_consts {
    float b1, b2, step_size, bc2_sqrt, decay, gs, eps;
} plait_adamw_consts;

static inline plait_adamw_consts plait_adamw_consts_of(const plait_adamw_args *a) {
    const double bc1 = 1.0 - pow((double)a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow((double)a->beta2, (double)a->step);
    plait_adamw_consts c = {
        a->beta1,      a->beta2, (float)((double)a->lr / bc1), (float)sqrt(bc2), 1.0f - a->lr * a->weight_decay,
        a->grad_scale, a->eps};
    return c;
}

static inline void plait_adamw_elem(float *param, float grad, float *m, float *v, const plait_adamw_consts *c) {
    float g = grad * c->gs;
    float p = *param * c->decay;
    float mi = c->b1 * *m + (1.0f - c->b1) * g;
    float vi = c->b2 * *v + (1.0f - c->b2) * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
    *param = p - c->step_size * (mi / denom);
}

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

/* Compiled for the host and, in a CUDA file, for the device too. */
#if defined(__CUDACC__)
#define PLAIT_HOST_DEVICE __host__ __device__
#else
#define PLAIT_HOST_DEVICE
#endif

/* The value of an exact accumulator: Σ over exponents e >= 1 of
 * bin[e] · 2^(2e−300), exactly, rounded once to the nearest double (ties to
 * even); +Inf if any element was not finite. Integer arithmetic only, so a
 * host and a GPU compute the same bits: every device's sumsq_value and
 * sumsq_clip is this procedure. */
static inline PLAIT_HOST_DEVICE double plait_sumsq_acc_value(const plait_sumsq_acc *acc) {
    if (acc->nonfinite) return INFINITY;
    uint64_t limb[11] = {0}; /* the sum scaled by 2^300: bin e (< 2^128) shifted left 2e <= 508 bits */
    for (int e = 1; e < PLAIT_SUMSQ_BINS; e++) {
        const uint64_t lo = acc->bin[e][0], hi = acc->bin[e][1];
        if (!(lo | hi)) continue;
        const int w = (2 * e) / 64, b = (2 * e) % 64;
        const uint64_t part[3] = {lo << b, b ? (hi << b) | (lo >> (64 - b)) : hi, b ? hi >> (64 - b) : 0};
        uint64_t carry = 0;
        for (int i = 0; i < 3 || carry; i++) {
            const uint64_t add = (i < 3 ? part[i] : 0), s1 = limb[w + i] + add, s2 = s1 + carry;
            carry = (uint64_t)(s1 < add) + (uint64_t)(s2 < s1);
            limb[w + i] = s2;
        }
    }
    int t = 10;
    while (t >= 0 && !limb[t]) t--;
    if (t < 0) return 0.0;
    int lz = 0;
    while (!(limb[t] << lz >> 63)) lz++;
    /* the 64 bits from the leading one down, and whether any bit below them is set */
    uint64_t m64 = limb[t] << lz;
    int sticky = 0;
    if (t > 0) {
        if (lz) m64 |= limb[t - 1] >> (64 - lz);
        sticky = (lz ? limb[t - 1] << lz : limb[t - 1]) != 0;
        for (int i = t - 2; i >= 0 && !sticky; i--) sticky = limb[i] != 0;
    }
    int top = 64 * t + 63 - lz;
    uint64_t m = m64 >> 11, rest = m64 & 0x7ffu;
    if (rest > 0x400u || (rest == 0x400u && (sticky || (m & 1u)))) {
        if (++m >> 53) {
            m >>= 1;
            top++;
        }
    }
    return ldexp((double)m, top - 52 - 300);
}

/* The clipping factor of the gradients for a global Σg² of `sumsq` and
 * [optim] grad_clip: min(1, grad_clip / (√sumsq + 1e-6)) in double (1 when
 * grad_clip <= 0), as a float. The same bits on a host and a GPU (IEEE
 * square root and division). */
static inline PLAIT_HOST_DEVICE float plait_clip_factor(double grad_clip, double sumsq) {
    if (grad_clip <= 0) return 1.0f;
    double scale = grad_clip / (sqrt(sumsq) + 1e-6);
    return (float)(scale < 1.0 ? scale : 1.0);
}

/* One tensor of a multi-tensor AdamW update (adamw_multi, ABI 1.7). */
typedef struct plait_adamw_tensor {
    float *param;       /* device memory, like the rest */
    const float *grad;
    float *m, *v;       /* the moments */
    uint64_t n;         /* elements */
    uint64_t offset;    /* elements of the entries before this one (their running sum) */
    float weight_decay; /* this tensor's (plait_adamw_args.weight_decay is not read) */
    uint32_t reserved;  /* 0 */
} plait_adamw_tensor;

/* One block of ring attention (ABI 1.18; ring_attention_forward below):
 * which chunks of the whole sequence (2cp chunks of T/2 tokens, T the
 * rank's rows) the query rows and the block's keys are. */
typedef struct plait_ring_block {
    int64_t q_chunk[2]; /* rows [0, T/2) are chunk q_chunk[0], rows [T/2, T) q_chunk[1] */
    int64_t k_chunk[2]; /* the same for the block's K|V rows */
    int32_t first;      /* 1: the first block folded in (the running rows start empty) */
    int32_t reserved;   /* 0 */
} plait_ring_block;

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
    /* acc += Σ x[i]^2, exactly (see plait_sumsq_acc). acc is device memory
     * (host->alloc of the device's kind), like x; so is both sides of
     * sumsq_merge. sumsq_value reads a host copy of an accumulator (taken
     * with the device's copy(), which is that step's synchronisation). */
    void (*sumsq_exact)(plait_sumsq_acc *acc, const float *x, size_t n);
    /* dst += src, exactly. */
    void (*sumsq_merge)(plait_sumsq_acc *dst, const plait_sumsq_acc *src);
    /* The accumulated value rounded to double (plait_sumsq_acc_value: equal
     * accumulators give equal doubles on every device); +Inf if any element
     * was not finite. */
    double (*sumsq_value)(const plait_sumsq_acc *acc);

    /* --- model ops: forward, and backward beside it ------------------ */
    /* out[BT,OC] = inp[BT,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int64_t BT, int64_t C, int64_t OC);
    /* dinp (overwritten; may be NULL), dweight += , dbias += (may be NULL).
     * ABI 1.6: dweight may be NULL too (dbias then NULL as well), and
     * weight is only read for dinp (NULL allowed without it); computing
     * dinp and dweight in two calls gives the bits of one call (a split
     * backward does: the input gradient first, the weights' later). */
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int64_t BT, int64_t C,
                            int64_t OC);
    /* LayerNorm over C with eps 1e-5; saves mean and rstd [BT] for backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int64_t BT, int64_t C);
    /* dinp += (residual stream), dweight += , dbias += . ABI 1.6: dinp may
     * be NULL (weight is then not read and may be NULL), or dweight and
     * dbias both NULL; the parts computed in separate calls equal one
     * call's bits. */
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

    /* --- ABI 1.3: the rest of what the GPT model runs ------------------ */
    /* Present when PLAIT_HOST_HAS(host, device) (or struct_size covers
     * them). Same conventions as above; with a device open (plait/device.h)
     * every pointer below and above is device memory, except where stated. */
    /* out[BT,OC] = res[BT,OC] + inp @ weight^T + bias (bias may be NULL);
     * out may equal res. */
    void (*matmul_forward_residual)(float *out, const float *res, const float *inp,
                                    const float *weight, const float *bias, int64_t BT, int64_t C,
                                    int64_t OC);
    /* x[BT,C] += res[BT,C] + bias[C] (bias may be NULL). */
    void (*add_bias_residual)(float *x, const float *res, const float *bias, int64_t BT,
                              int64_t C);
    /* dbias[OC] += Σ over rows of dout[BT,OC], rows in order. */
    void (*bias_backward)(float *dbias, const float *dout, int64_t BT, int64_t OC);
    /* The probabilities attention_forward saves, bit for bit, without the
     * output (activation recomputation). */
    void (*attention_probs)(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                            int64_t HS);
    /* Vocabulary-parallel embedding: wte holds rows [vocab_start,
     * vocab_start+n_rows); other tokens contribute zero rows; wpe (may be
     * NULL) is added to every position. Backward: dwte rows of local tokens
     * += (deterministic: the same sums in the same order every run), dwpe
     * (may be NULL) += . */
    void (*embedding_forward_vocab)(float *out, const int32_t *tokens, const float *wte,
                                    int64_t vocab_start, int64_t n_rows, const float *wpe,
                                    int64_t B, int64_t T, int64_t C);
    void (*embedding_backward_vocab)(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int64_t vocab_start, int64_t n_rows,
                                     int64_t B, int64_t T, int64_t C);
    /* out[b,t,:] += wpe[t,:]. */
    void (*add_positions)(float *out, const float *wpe, int64_t B, int64_t T, int64_t C);
    /* Vocabulary-parallel cross-entropy in pieces (the TP group combines
     * rowmax with a max, sumexp and tlogit with sums between them).
     * logits[BT,Vl] hold columns [vocab_start, vocab_start+Vl), the first
     * n_valid real; a negative target means no loss (0) and no gradient. */
    void (*logits_rowmax)(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                          int64_t n_valid);
    void (*logits_sumexp)(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                          int64_t Vl, int64_t n_valid);
    void (*logits_target)(float *tlogit, const float *logits, const int32_t *targets,
                          int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid);
    /* lse[r] = rowmax[r] + log(sumexp[r]) (in place: lse may equal rowmax);
     * losses[r] = lse[r] - tlogit[r] for targets >= 0, else 0 (losses may
     * equal tlogit); then *loss_sum (one double in device memory) += Σ
     * losses[r] summed in double in row order. */
    void (*loss_rows)(float *losses, float *lse, const float *rowmax, const float *sumexp,
                      const float *tlogit, const int32_t *targets, int64_t BT, double *loss_sum);
    /* dlogits = (exp(logit - lse[r]) - onehot) * scale on valid columns, 0
     * on padding and on rows with a negative target; may be in place. */
    void (*crossentropy_backward)(float *dlogits, const float *logits, const float *lse,
                                  const int32_t *targets, int64_t vocab_start, int64_t BT,
                                  int64_t Vl, int64_t n_valid, float scale);
    /* n doubles at dst = 0 (device memory; loss and norm accumulators). */
    void (*zero_f64)(double *dst, size_t n);

    /* --- ABI 1.7: fused causal attention -------------------------------
     * Optional: present when struct_size covers them and they are not
     * NULL (a model without them runs attention_forward/_backward). The
     * attention of attention_forward without its T×T probabilities: each
     * row's scores s_ij = q_i·k_j/√HS (j ≤ i) stay inside the call, and
     * the only thing kept for the backward besides q, k, v and the output
     * is lse[B,NH,T] = log Σ_{j≤i} exp(s_ij) (natural log). The backward
     * recomputes the probabilities exp(s_ij − lse_i). Head sizes up to
     * PLAIT_ATTENTION_FUSED_MAX_HS. A device may round the products'
     * operands to the run's precision (bf16: q, k, v, the probabilities,
     * dout and the score gradients; accumulation in fp32). No
     * floating-point atomics: the same inputs give the same bits. */
    /* Floats of the `scratch` both calls need for this shape (nothing in
     * it survives a call; one buffer serves every layer). */
    size_t (*attention_fused_scratch)(int64_t B, int64_t T, int64_t NH, int64_t HS);
    /* out[B,T,NH*HS] and lse[B,NH,T] from qkv[B,T,3*NH*HS] (attention_forward's shapes). */
    void (*attention_fused_forward)(float *out, float *lse, float *scratch, const float *qkv, int64_t B,
                                    int64_t T, int64_t NH, int64_t HS);
    /* dqkv overwritten, from dout and what the forward read (qkv) and
     * wrote (out, lse). */
    void (*attention_fused_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                     const float *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS);

    /* --- ABI 1.7: an optimizer step without a host synchronisation -----
     * Optional (struct_size and NULL). Every pointer is device memory.
     * *sumsq = the value of acc (plait_sumsq_acc_value, sumsq_value's
     * procedure); *scale = plait_clip_factor(grad_clip, *sumsq), or NaN when
     * the value is not finite. */
    void (*sumsq_clip)(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip);
    /* adamw on each of the `count` tensors of the list (device memory;
     * `total` their elements, the last offset + n) with args and the
     * tensor's weight decay, its gradient multiplied by *scale instead of
     * args->grad_scale: each tensor gets adamw's values. A NaN *scale
     * changes nothing (a norm that was not finite). */
    void (*adamw_multi)(const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *args,
                        const float *scale);

    /* --- ABI 1.7: the head's loss and gradient in one pass ------------
     * Optional (struct_size and NULL). Rows of logits[BT,Vl] whose first
     * n_valid columns are classes (the rest padding), every class on this
     * rank (no tensor parallelism): lse[r] (may be NULL), losses[r] (0 for
     * a negative target), *loss_sum += Σ losses in double in row order, and
     * with dlogits non-NULL the gradient crossentropy_backward writes (0 on
     * padding and on rows without a target; dlogits may be logits: the
     * logits become their gradient). What logits_rowmax, logits_sumexp,
     * logits_target, loss_rows and crossentropy_backward give, to rounding. */
    void (*crossentropy_fused)(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                               const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale);

    /* --- ABI 1.7: LayerNorm's whole backward in one pass --------------
     * Optional (struct_size and NULL). dinp = dres + the input gradient
     * layernorm_backward adds (dres may equal dinp: it accumulates; NULL:
     * dinp is overwritten, as if dres held zeros), with the residual
     * stream's gradient dres added here rather than copied into dinp first;
     * and dweight += , dbias += (both NULL, or both not) from the same
     * reads of dout and inp. What layernorm_backward's parts give, to
     * rounding (the CPU: bit for bit). */
    void (*layernorm_backward_fused)(float *dinp, const float *dres, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *weight, const float *mean,
                                     const float *rstd, int64_t BT, int64_t C);

    /* --- ABI 1.7: a linear layer and GELU in one product ---------------
     * Optional (struct_size and NULL; both or neither). The forward:
     * pre[BT,OC] = inp @ weight^T + bias (bias may be NULL), GELU's input,
     * kept for the backward, and out[BT,OC] = gelu(pre) (gelu_forward's);
     * out and pre do not alias. The backward: matmul_backward of a layer
     * whose input inp[BT,C] is gelu(pre[BT,C]), with dinp the gradient at
     * GELU's input, (dout @ weight) ⊙ gelu'(pre) (what gelu_backward makes
     * of matmul_backward's dinp); dinp NULL reads neither weight nor pre,
     * dweight NULL (and dbias NULL) as in matmul_backward. To rounding what
     * the separate kernels give (the CPU: bit for bit). */
    void (*matmul_forward_gelu)(float *out, float *pre, const float *inp, const float *weight, const float *bias,
                                int64_t BT, int64_t C, int64_t OC);
    void (*matmul_backward_gelu)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, const float *pre, int64_t BT, int64_t C, int64_t OC);

    /* --- ABI 1.8: bf16 activations -------------------------------------
     * Optional, all or none (PLAIT_KERNELS_HAS_BF16_ACTIVATIONS). On bf16
     * runs the model stores in bfloat16 what the products read and write:
     * LayerNorm's outputs, c_attn's output (q, k, v), the attention's
     * output, c_fc's output before and after GELU, the logits, and the
     * gradients at each of them. The residual stream and its gradient,
     * LayerNorm's mean and rstd, the log-sum-exps, the losses, and every
     * parameter and parameter gradient stay float32; products read their
     * weights (and a bf16 output's bias) from a bf16 copy of the float32
     * master that to_bf16 makes. Each entry is the float32 entry of the
     * same name with the operands typed plait_bf16 in bf16: to rounding
     * what that entry gives on the same (rounded) inputs, with fp32
     * accumulation inside and each bf16 output rounded once, to nearest
     * even. Parameter gradients accumulate in float32, as everywhere.
     * Pointers are device memory; bf16 buffers are 16-byte aligned where
     * their float32 counterparts are (the model carves them so). No
     * floating-point atomics: the same inputs give the same bits. */
    /* dst[i] = src[i] rounded to bf16 (nearest even). */
    void (*to_bf16)(plait_bf16 *dst, const float *src, size_t n);
    /* layernorm_forward with a bf16 output. */
    void (*layernorm_forward_bf16)(plait_bf16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                                   const float *bias, int64_t BT, int64_t C);
    /* matmul_forward, all bf16 (bias may be NULL). */
    void (*matmul_forward_bf16)(plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight,
                                const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC);
    /* matmul_forward_residual with a bf16 input and weight, a float32
     * residual, bias and output (out may equal res; res may be NULL: no
     * residual). */
    void (*matmul_forward_residual_bf16)(float *out, const float *res, const plait_bf16 *inp,
                                         const plait_bf16 *weight, const float *bias, int64_t BT, int64_t C,
                                         int64_t OC);
    /* matmul_forward_gelu, all bf16: pre = GELU's input rounded to bf16,
     * out = gelu(pre before rounding) rounded. */
    void (*matmul_forward_gelu_bf16)(plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp,
                                     const plait_bf16 *weight, const plait_bf16 *bias, int64_t BT, int64_t C,
                                     int64_t OC);
    /* matmul_backward with bf16 activations and weight: dinp (bf16,
     * overwritten; may be NULL), dweight += and dbias += in float32. In
     * halves as matmul_backward's (1.6): dweight NULL (dbias then NULL
     * too) or dinp NULL (weight then not read), two calls giving one
     * call's bits (a split backward's, under bf16 activations). */
    void (*matmul_backward_bf16)(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                 const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C,
                                 int64_t OC);
    /* matmul_backward_gelu likewise (pre: the forward's bf16 GELU input;
     * with dinp NULL neither weight nor pre is read). */
    void (*matmul_backward_gelu_bf16)(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                      const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre,
                                      int64_t BT, int64_t C, int64_t OC);
    /* attention_fused_forward/_backward with bf16 qkv, out, dout and dqkv
     * (lse and scratch float32; attention_fused_scratch's size serves). */
    void (*attention_fused_forward_bf16)(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv,
                                         int64_t B, int64_t T, int64_t NH, int64_t HS);
    void (*attention_fused_backward_bf16)(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout,
                                          const plait_bf16 *qkv, const plait_bf16 *out, const float *lse,
                                          int64_t B, int64_t T, int64_t NH, int64_t HS);
    /* layernorm_backward_fused with a bf16 output gradient (dinp, dres,
     * inp and the rest float32). dinp is the same bits with or without
     * the parameters' gradients, and these depend on dout, inp, mean and
     * rstd alone (weight and dres scale and shift dinp only), bit for bit:
     * a split backward makes the two apart. */
    void (*layernorm_backward_fused_bf16)(float *dinp, const float *dres, float *dweight, float *dbias,
                                          const plait_bf16 *dout, const float *inp, const float *weight,
                                          const float *mean, const float *rstd, int64_t BT, int64_t C);
    /* crossentropy_fused on bf16 logits, the gradient written in bf16
     * (dlogits may be logits: in place). */
    void (*crossentropy_fused_bf16)(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                    const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                    int64_t n_valid, float scale);
    /* gelu_forward in bf16 (out may equal inp): what selective
     * recomputation rebuilds GELU's output with, in the backward and, for
     * the same bits, in the forward. */
    void (*gelu_forward_bf16)(plait_bf16 *out, const plait_bf16 *inp, size_t n);

    /* --- ABI 1.9 -------------------------------------------------------
     * Optional (struct_size and NULL; PLAIT_KERNELS_HAS_LAYERNORM_BF16_COPY).
     * layernorm_backward_fused_bf16 that also stores dinp rounded to bf16
     * in dinp_bf[BT,C] (to_bf16's bits, nearest even; dinp_bf aliases
     * nothing else): the residual stream's gradient as the products of
     * the next block half read it, written where it is made instead of
     * read back and converted apart. 16-byte aligned where dinp is. */
    void (*layernorm_backward_fused_bf16_copy)(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight,
                                               float *dbias, const plait_bf16 *dout, const float *inp,
                                               const float *weight, const float *mean, const float *rstd, int64_t BT,
                                               int64_t C);

    /* --- ABI 1.10: what a Llama-family decoder runs --------------------
     * Optional, all or none (PLAIT_KERNELS_HAS_LLAMA), float32 like the
     * entries of 1.0-1.7; same conventions (device memory, no atomics:
     * the same inputs give the same bits). */
    /* RMSNorm over C: rstd[r] = 1/sqrt(mean(x²) + eps), out = x·rstd·weight
     * (rstd may be NULL: not kept). */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C,
                            float eps);
    /* dinp = dres + the input gradient (dres may equal dinp: it
     * accumulates; NULL: dinp overwritten), dweight += Σ_r dout·x·rstd
     * (NULL: not computed). dinp may be NULL (weight then not read): the
     * two parts in separate calls give one call's bits. */
    void (*rmsnorm_backward)(float *dinp, const float *dres, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int64_t BT, int64_t C);
    /* Rotary positions, in place, Hugging Face's half-rotation: heads
     * 0..n_heads-1 of each row of x[B,T,row_stride] (head h at columns
     * h·HS; q and k heads side by side in one call), each pair (i, i+HS/2)
     * of a head at its token t rotated by the angle whose cos and sin are
     * cs[t,i] and cs[T·HS/2 + t,i] (cs: [2,T,HS/2], the caller's, computed
     * in float32 from each token's position in its sequence). inverse
     * rotates by minus the angle: the backward of the rotation. */
    void (*rope)(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                 int inverse);
    /* SwiGLU's gate: out[i] = silu(gate[i])·up[i] (out may equal up), and
     * its backward dgate[i], dup[i] (overwritten; dup may equal dout). */
    void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
    /* attention_fused_forward/_backward with grouped-query attention:
     * qkv[B,T,(NH+2·NKV)·HS] = [q of NH heads | k of NKV | v of NKV], query
     * head h reading key/value head h / (NH/NKV) (NKV divides NH; NKV = 1
     * is multi-query, NKV = NH the entries above, bit for bit); out
     * [B,T,NH·HS], lse[B,NH,T]. dqkv is overwritten, each key/value head's
     * gradient summed over its query heads in head order, without K and V
     * expanded in memory. attention_fused_scratch(B, T, NH, HS) serves. */
    void (*attention_gqa_forward)(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                  int64_t NH, int64_t NKV, int64_t HS);
    void (*attention_gqa_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);

    /* --- ABI 1.18: ring attention (context parallelism) ----------------
     * Optional, all four (PLAIT_KERNELS_HAS_RING_ATTENTION); float32,
     * device memory, no atomics (the same inputs give the same bits). A
     * rank of a cp ring holds T query rows of each sequence, two chunks
     * of T/2 tokens (blk->q_chunk, chunk numbers in the whole sequence),
     * and folds in one block of keys and values at a time, the block's
     * two chunks blk->k_chunk: a query sees a key chunk before its own in
     * full, its own chunk causally, a later one not at all. q comes from
     * qkv[B,T,(NH+2·NKV)·HS] (the grouped-query layout above); a block's
     * K|V rows are kv[B,T,kv_stride] (K's NKV heads at column 0, V's at
     * NKV·HS: qkv + NH·HS with stride (NH+2·NKV)·HS for this rank's own
     * block, a packed copy of stride 2·NKV·HS for another rank's). blk
     * is host memory, read during the call. */
    /* Fold the block into each query row's running maximum mx[B,NH,T],
     * sum l[B,NH,T] and weighted values out[B,T,NH·HS] (flash attention's
     * log-sum-exp merge, keys in sequence order within a block, 128 scored
     * at a time); blk->first starts the rows empty (the three overwritten). */
    void (*ring_attention_forward)(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                   int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                   const plait_ring_block *blk);
    /* After the last block: out /= l, and mx becomes the rows' lse
     * (mx + log l, the natural log; attention_gqa_forward's lse). */
    void (*ring_attention_finish)(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH, int64_t HS);
    /* The block's share of the gradients, the probabilities rebuilt from
     * lse: dq += into dqkv's q columns (the k and v columns not touched),
     * dkv[B,T,2·NKV·HS] (dK|dV of the block's rows, packed) += the
     * queries' share, each key/value head's summed over its query heads
     * in head order, then over the query rows in order (or over tiles of
     * them in order, a tile's rows summed in one product). */
    void (*ring_attention_backward)(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                    const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                    int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk);
    /* dst[r·dst_stride + i] = src[r·src_stride + i] for r < rows, i <
     * width (floats; the two do not overlap): a block's K|V packed from
     * qkv, its dK|dV unpacked into dqkv. */
    void (*copy_rows)(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                      int64_t width);

    /* --- ABI 1.21: the mixture of experts -------------------------------
     * Optional, all eight (PLAIT_KERNELS_HAS_MOE): what each does is its
     * type's (plait/kernels_moe.h). */
    plait_moe_route_fn moe_route;
    plait_moe_permute_fn moe_permute;
    plait_moe_unpermute_fn moe_unpermute;
    plait_moe_unpermute_backward_fn moe_unpermute_backward;
    plait_moe_permute_backward_fn moe_permute_backward;
    plait_moe_route_backward_fn moe_route_backward;
    plait_moe_matmul_forward_fn moe_matmul_forward;
    plait_moe_matmul_backward_fn moe_matmul_backward;
    /* --- ABI 1.22: the Llama family's entries on bf16 activations ------
     * Optional, all or none (PLAIT_KERNELS_HAS_LLAMA_BF16): the entries of
     * 1.10 with the tensors a Llama block's products read and write typed
     * plait_bf16, under 1.8's rules (float32 arithmetic inside, each bf16
     * output rounded once to nearest even; rstd, lse, the cosines and
     * sines, inp, dinp, dres and dweight float32). Same conventions
     * (device memory, bf16 tensors 16-byte aligned where their float32
     * counterparts are, no atomics: the same inputs give the same bits). */
    /* rmsnorm_forward with a bf16 output. */
    void (*rmsnorm_forward_bf16)(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                                 int64_t C, float eps);
    /* rmsnorm_backward from a bf16 dout, in halves as it (dinp NULL:
     * weight not read; dweight NULL: not computed; one call's bits). */
    void (*rmsnorm_backward_bf16)(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout,
                                  const float *inp, const float *weight, const float *rstd, int64_t BT, int64_t C);
    /* rope on bf16 x in place: each pair widened, rotated in float32 and
     * rounded once. */
    void (*rope_bf16)(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                      int64_t HS, int inverse);
    /* SwiGLU with the gate fused into the product before it: a row of
     * gu[BT,2F] holds gate_proj's F outputs then up_proj's (one product
     * of the two weights stacked, Megatron-LM's linear_fc1); out[BT,F] =
     * silu(gate)·up. The backward overwrites dgu[BT,2F] (the gate's
     * gradient then up's, as gu) from dout[BT,F]; dgu aliases nothing. */
    void (*swiglu_forward_bf16)(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F);
    void (*swiglu_backward_bf16)(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT, int64_t F);
    /* attention_gqa_forward/_backward with bf16 qkv, out, dout and dqkv
     * (lse and scratch float32; attention_fused_scratch's size serves);
     * K and V never expanded, dK and dV summed over their query heads in
     * head order as the float32 entries do. */
    void (*attention_gqa_forward_bf16)(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                       int64_t T, int64_t NH, int64_t NKV, int64_t HS);
    void (*attention_gqa_backward_bf16)(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout, const plait_bf16 *qkv,
                                        const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                        int64_t NKV, int64_t HS);
    /* --- ABI 1.23: bf16 on a transport that moves device memory --------
     * Optional (PLAIT_KERNELS_HAS_FROM_BF16). dst[i] = src[i] widened to
     * float32, exactly (to_bf16's inverse on what to_bf16 wrote): a tp
     * collective or pipeline transfer of a bf16 run that travelled in
     * bf16 through NCCL, written back into the float32 buffer it stands
     * for. Device memory; dst and src do not overlap. */
    void (*from_bf16)(float *dst, const plait_bf16 *src, size_t n);
    /* --- ABI 1.25: ring attention on bf16 activations -------------------
     * Optional, both (PLAIT_KERNELS_HAS_RING_ATTENTION_BF16, which asks
     * 1.18's entries too): ring_attention_forward and _backward reading
     * q|k|v, the block's K|V, out and dout in bf16 (kv_stride in bf16
     * elements), each widened exactly: the bits of 1.18's entries on the
     * widened tensors. What they accumulate stays float32 (the running
     * out, mx and l; dqkv and dkv), as do lse and every sum: the caller
     * rounds once at the end (ring_attention_finish, then to_bf16 for the
     * output; to_bf16 of dqkv after the last block for its gradient).
     * Device memory, bf16 tensors 16-byte aligned where their float32
     * counterparts are, no atomics. */
    void (*ring_attention_forward_bf16)(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                        int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                        const plait_ring_block *blk);
    void (*ring_attention_backward_bf16)(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                         int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                         const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                         const plait_ring_block *blk);
    /* --- ABI 1.29: the mixture of experts on bf16 activations -----------
     * Optional, all six (PLAIT_KERNELS_HAS_MOE_BF16): plait/kernels_moe.h. */
    plait_moe_permute_bf16_fn moe_permute_bf16;
    plait_moe_unpermute_bf16_fn moe_unpermute_bf16;
    plait_moe_unpermute_backward_bf16_fn moe_unpermute_backward_bf16;
    plait_moe_permute_backward_bf16_fn moe_permute_backward_bf16;
    plait_moe_matmul_forward_bf16_fn moe_matmul_forward_bf16;
    plait_moe_matmul_backward_bf16_fn moe_matmul_backward_bf16;
} plait_kernels;

/* 1 if table k has the Llama family's bf16-activation entries (ABI 1.22), every one. */
#define PLAIT_KERNELS_HAS_LLAMA_BF16(k)                                                                                \
    ((k)->struct_size >=                                                                                               \
         offsetof(plait_kernels, attention_gqa_backward_bf16) + sizeof((k)->attention_gqa_backward_bf16) &&            \
     (k)->rmsnorm_forward_bf16 && (k)->rmsnorm_backward_bf16 && (k)->rope_bf16 && (k)->swiglu_forward_bf16 &&          \
     (k)->swiglu_backward_bf16 && (k)->attention_gqa_forward_bf16 && (k)->attention_gqa_backward_bf16)

/* 1 if table k has to_bf16 and from_bf16 (ABI 1.23): what carries a bf16
 * run's float32 messages in bf16 through a transport that moves device
 * memory itself. */
#define PLAIT_KERNELS_HAS_FROM_BF16(k)                                                                                 \
    ((k)->struct_size >= offsetof(plait_kernels, from_bf16) + sizeof((k)->from_bf16) && (k)->from_bf16 && (k)->to_bf16)

/* 1 if table k has ring attention (ABI 1.18), every entry. */
#define PLAIT_KERNELS_HAS_RING_ATTENTION(k)                                                                            \
    ((k)->struct_size >= offsetof(plait_kernels, copy_rows) + sizeof((k)->copy_rows) && (k)->ring_attention_forward && \
     (k)->ring_attention_finish && (k)->ring_attention_backward && (k)->copy_rows)

/* 1 if table k has ring attention on bf16 activations (ABI 1.25) beside
 * 1.18's entries, every one. */
#define PLAIT_KERNELS_HAS_RING_ATTENTION_BF16(k)                                                                       \
    (PLAIT_KERNELS_HAS_RING_ATTENTION(k) &&                                                                            \
     (k)->struct_size >=                                                                                               \
         offsetof(plait_kernels, ring_attention_backward_bf16) + sizeof((k)->ring_attention_backward_bf16) &&          \
     (k)->ring_attention_forward_bf16 && (k)->ring_attention_backward_bf16)

/* 1 if table k has the Llama family's entries (ABI 1.10), every one. */
#define PLAIT_KERNELS_HAS_LLAMA(k)                                                                                     \
    ((k)->struct_size >= offsetof(plait_kernels, attention_gqa_backward) + sizeof((k)->attention_gqa_backward) &&      \
     (k)->rmsnorm_forward && (k)->rmsnorm_backward && (k)->rope && (k)->swiglu_forward && (k)->swiglu_backward &&      \
     (k)->attention_gqa_forward && (k)->attention_gqa_backward)

/* 1 if table k has the optimizer step's entries of ABI 1.7. */
#define PLAIT_KERNELS_HAS_DEVICE_STEP(k)                                                              \
    ((k)->struct_size >= offsetof(plait_kernels, adamw_multi) + sizeof((k)->adamw_multi) &&            \
     (k)->sumsq_clip && (k)->adamw_multi)

/* 1 if table k has crossentropy_fused (ABI 1.7). */
#define PLAIT_KERNELS_HAS_FUSED_LOSS(k)                                                               \
    ((k)->struct_size >= offsetof(plait_kernels, crossentropy_fused) + sizeof((k)->crossentropy_fused) && \
     (k)->crossentropy_fused)

/* 1 if table k has layernorm_backward_fused (ABI 1.7). */
#define PLAIT_KERNELS_HAS_FUSED_LAYERNORM(k)                                                                  \
    ((k)->struct_size >= offsetof(plait_kernels, layernorm_backward_fused) +                                 \
                             sizeof((k)->layernorm_backward_fused) &&                                        \
     (k)->layernorm_backward_fused)

/* 1 if table k has matmul_forward_gelu and matmul_backward_gelu (ABI 1.7). */
#define PLAIT_KERNELS_HAS_FUSED_GELU(k)                                                                       \
    ((k)->struct_size >= offsetof(plait_kernels, matmul_backward_gelu) + sizeof((k)->matmul_backward_gelu) && \
     (k)->matmul_forward_gelu && (k)->matmul_backward_gelu)

/* 1 if table k has the bf16-activation entries (ABI 1.8), every one. */
#define PLAIT_KERNELS_HAS_BF16_ACTIVATIONS(k)                                                                 \
    ((k)->struct_size >= offsetof(plait_kernels, gelu_forward_bf16) + sizeof((k)->gelu_forward_bf16) &&       \
     (k)->gelu_forward_bf16 &&                                                                               \
     (k)->to_bf16 && (k)->layernorm_forward_bf16 && (k)->matmul_forward_bf16 &&                              \
     (k)->matmul_forward_residual_bf16 && (k)->matmul_forward_gelu_bf16 && (k)->matmul_backward_bf16 &&      \
     (k)->matmul_backward_gelu_bf16 && (k)->attention_fused_forward_bf16 &&                                  \
     (k)->attention_fused_backward_bf16 && (k)->layernorm_backward_fused_bf16 && (k)->crossentropy_fused_bf16)

/* 1 if table k has layernorm_backward_fused_bf16_copy (ABI 1.9). */
#define PLAIT_KERNELS_HAS_LAYERNORM_BF16_COPY(k)                                                              \
    ((k)->struct_size >= offsetof(plait_kernels, layernorm_backward_fused_bf16_copy) +                       \
                             sizeof((k)->layernorm_backward_fused_bf16_copy) &&                              \
     (k)->layernorm_backward_fused_bf16_copy)

/* The largest head size the fused attention entries take (ABI 1.7). */
#define PLAIT_ATTENTION_FUSED_MAX_HS 256

/* 1 if table k has the fused attention (ABI 1.7) for head size HS. */
#define PLAIT_KERNELS_HAS_FUSED_ATTENTION(k, HS)                                                      \
    ((k)->struct_size >= offsetof(plait_kernels, attention_fused_backward) +                         \
                             sizeof((k)->attention_fused_backward) &&                                \
     (k)->attention_fused_scratch && (k)->attention_fused_forward && (k)->attention_fused_backward && \
     (HS) <= PLAIT_ATTENTION_FUSED_MAX_HS)

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_KERNELS_H */
