/*
 * plait's CPU kernel library: the functions behind the cpu device's kernel
 * table (sdk/include/plait/kernels.h states the shapes and conventions).
 *
 * Self-contained: it includes no other folder of the core and calls
 * nothing of it, because it is built once as a static library
 * (plait_cpu_kernels, position-independent) linked into two places: libplait
 * (the core's own host-side math: the SGEMM peak, reference results in
 * tests) and the cpu device plugin (plugins/device/cpu), which cannot link
 * the core. Each copy has its own thread pool and precision; the core's
 * trainer computes through the open device's table, never through these
 * functions directly. Warnings go to the logger set by
 * plait_kernels_set_log (the core's log, or host->log in a plugin).
 *
 * Threads: plait_kernels_set_threads(n) sets how many threads the kernels
 * use (the caller plus n-1 workers, idle ones yielding, then asleep).
 * Matrix products run OpenBLAS single-threaded on a partition of the output into tiles that depends only
 * on the shapes, never on n (plait_k_sgemm_tiles): OpenBLAS's own threading splits work by thread count
 * and its results then differ in the last bit between 1 and 2 threads
 * (measured with OpenBLAS 0.3.21), so plait does the threading itself.
 * Every other kernel is cut into fixed blocks of rows, columns or elements,
 * and every reduction (bias, LayerNorm weight and embedding gradients, row
 * sums) runs in a fixed order: results are bit-identical for any thread
 * count.
 *
 * All kernels are reentrant; none allocates or fails. Preconditions are
 * assert()ed in debug builds only.
 */
#ifndef PLAIT_CORE_KERNELS_H
#define PLAIT_CORE_KERNELS_H

#include <plait/kernels.h>

#include "kernels/kernels_vector.h"

/* The whole library as one table (static storage): the cpu device's
 * kernels, and the core's host->kernels before a device is open. */
const plait_kernels *plait_kernels_table(void);

/* Where warnings go (a math thread that cannot start, a bf16 product that
 * falls back to fp32): a logger with host->log's signature. NULL (the
 * default) writes them to stderr. Set it once, before the first kernel. */
typedef void (*plait_kernels_log_fn)(plait_log_level level, const char *component, const char *fmt, ...)
    PLAIT_PRINTF(3, 4);
void plait_kernels_set_log(plait_kernels_log_fn fn);

/* Threads the kernels use on this rank (>= 1; 0 or less means 1). Sets
 * OpenBLAS to 1 thread (see above) and sizes the worker pool. Call from the
 * thread that runs the model, not while a kernel is running elsewhere in
 * the process. */
void plait_kernels_set_threads(int threads);
int plait_kernels_threads(void);

/* The operands of plait_k_sgemm ([run] precision, see kernels_bf16.c):
 * FP32 (the default); BF16 rounds them to bfloat16 and multiplies them
 * with fp32 accumulation and output on oneDNN's bf16 matmul (or, where
 * oneDNN is missing or PLAIT_CPU_GEMM=blas, the BLAS's cblas_sbgemm), or
 * in fp32 on the widened operands where PLAIT_CPU_BF16_PRODUCTS (auto:
 * an Intel core without AMX, whose bf16 dot products run at half its fp32
 * rate) says so; BF16_EMULATED rounds them the same way and multiplies
 * them on the fp32 products' library (for testing the numerics on CPUs without bf16
 * instructions). Under both, the fused attention's products at an even
 * head size take bf16 operands too (its probabilities and d(scores)
 * rounded), with float32 sums (kernels_attention_pairs.c), except where
 * BF16 multiplies in fp32. Returns 0, or -1 for an unknown mode, an
 * unknown PLAIT_CPU_BF16_PRODUCTS or BF16 where neither library has a
 * bf16 product (the mode is then unchanged). Process-wide; set it as the
 * threads are set. */
enum { PLAIT_KERNELS_FP32 = 0, PLAIT_KERNELS_BF16 = 1, PLAIT_KERNELS_BF16_EMULATED = 2 };
int plait_kernels_set_precision(int precision);
int plait_kernels_precision(void);
/* cblas_sbgemm of the loaded BLAS (row-major C = alpha op(A) op(B) + beta C
 * with bf16 A and B, fp32 C), or NULL when the BLAS has none (Debian's
 * OpenBLAS 0.3.21 is built without BUILD_BFLOAT16). */
typedef void (*plait_sbgemm_fn)(int order, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                                int ldc);
plait_sbgemm_fn plait_kernels_sbgemm(void);
/* Whether BF16 can run natively here (it does not check the CPU's
 * features: train/precision.c does): 0 with "bf16 products on oneDNN 2.6.3
 * (brg:avx512_core_amx_bf16)", "... on the BLAS's cblas_sbgemm" or "bf16
 * products in fp32 on widened operands (...)" in what, or -1 with why
 * neither library can in why (the missing oneDNN named with its package),
 * or -2 with the value allowed for an unknown PLAIT_CPU_BF16_PRODUCTS.
 * Loads oneDNN unless PLAIT_CPU_GEMM=blas or the products are widened. */
int plait_kernels_bf16_native(char *what, size_t what_len, char *why, size_t why_len);
/* The library under the current mode's products: "bf16 products on oneDNN
 * ...", "bf16 products emulated (...)" or "fp32 products". */
void plait_kernels_bf16_describe(char *buf, size_t len);
/* x rounded to the nearest bfloat16 (ties to even; NaN stays NaN). */
float plait_bf16_round(float x);

/* The library under the fp32 products (kernels_onednn.c): the BLAS or
 * oneDNN (libdnnl.so.2, loaded at run time). `name` is "auto", "blas" or
 * "onednn"; NULL reads PLAIT_CPU_GEMM from the environment (unset: auto).
 * auto takes oneDNN only where it loads and was measured faster on this
 * ISA (and loads it only where some ISA was). Returns 0, or -1 with a message in err naming the setting and what is
 * allowed, or the missing library and its Debian package (the choice is then
 * unchanged). Process-wide; set it as the threads are set. */
enum { PLAIT_GEMM_BLAS = 0, PLAIT_GEMM_ONEDNN = 1 };
int plait_kernels_set_gemm(const char *name, char *err, size_t errlen);
int plait_kernels_gemm(void);
/* Whether plait_kernels_set_gemm(NULL, ...) would choose oneDNN on this
 * machine (the planner's memory count: a process that runs oneDNN holds
 * its code and OpenMP runtime, about 10 MiB); loads oneDNN to know where
 * auto might take it. */
int plait_kernels_onednn_expected(void);
/* Loads oneDNN without choosing it (plait doctor: which ISA it would run).
 * Returns 0, or -1 with the missing library and its package in err. */
int plait_kernels_onednn_load(char *err, size_t errlen);
/* "products on oneDNN 2.6.0, avx2 ISA (PLAIT_CPU_GEMM=onednn)", or "products
 * on the BLAS (...)" with the ISA oneDNN would run when it is loaded. */
void plait_kernels_gemm_describe(char *buf, size_t len);

/* ---- BLAS -------------------------------------------------------------- */
/* Row-major C[M,N] = alpha*op(A) @ op(B) + beta*C (trans_a/trans_b nonzero
 * = transposed), threaded over a shape-determined partition of C. */
void plait_k_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                   int64_t ldc);
/* The partition plait_k_sgemm uses for C[M,N] with inner dimension K: tiles
 * of *tm x *tn (optional outputs); returns the number of tiles. A function
 * of the shape only (at most 128 tiles, none below 2^26 multiply-adds but
 * the two halves of a product of 2^23 to 2^27). */
int64_t plait_k_sgemm_tiles(int64_t M, int64_t N, int64_t K, int64_t *tm, int64_t *tn);

/* ---- linear layers ----------------------------------------------------- */
void plait_k_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                            int64_t BT, int64_t C, int64_t OC);
/* out[BT,OC] = res[BT,OC] + inp @ weight^T + bias (bias may be NULL);
 * out may be the same buffer as res. */
void plait_k_matmul_forward_residual(float *out, const float *res, const float *inp,
                                     const float *weight, const float *bias, int64_t BT,
                                     int64_t C, int64_t OC);
void plait_k_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, int64_t BT, int64_t C,
                             int64_t OC);
/* dbias[OC] += Σ over rows of dout[BT,OC], rows in order. */
void plait_k_bias_backward(float *dbias, const float *dout, int64_t BT, int64_t OC);
/* x[BT,C] += res[BT,C] + bias[C] (bias may be NULL): the row-parallel
 * projection's epilogue after its all-reduce. */
void plait_k_add_bias_residual(float *x, const float *res, const float *bias, int64_t BT,
                               int64_t C);

/* ---- LayerNorm, GELU --------------------------------------------------- */
void plait_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int64_t BT, int64_t C);
void plait_k_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int64_t BT, int64_t C);
/* dinp = dres + the input gradient (dres may be dinp, or NULL: zeros),
 * dweight += , dbias += (both NULL or both not): plait/kernels.h
 * layernorm_backward_fused, ABI 1.7. dinp NULL: the parameters' half
 * alone (the bf16 entry's split backward). */
void plait_k_layernorm_backward_fused(float *dinp, const float *dres, float *dweight, float *dbias,
                                      const float *dout, const float *inp, const float *weight, const float *mean,
                                      const float *rstd, int64_t BT, int64_t C);
/* pre = inp·weightᵀ + bias, out = gelu(pre); and matmul_backward with
 * dinp = (dout·weight) ⊙ gelu'(pre) (plait/kernels.h, ABI 1.7). */
void plait_k_matmul_forward_gelu(float *out, float *pre, const float *inp, const float *weight, const float *bias,
                                 int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const float *pre, int64_t BT, int64_t C, int64_t OC);
void plait_k_gelu_forward(float *out, const float *inp, size_t n);
void plait_k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* ---- attention --------------------------------------------------------- */
/* As in kernels.h: att's upper triangle (j > i) is written with zeros. */
void plait_k_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T,
                               int64_t NH, int64_t HS);
/* The probabilities `att` alone, exactly as plait_k_attention_forward
 * computes them (the same products and softmax, bit for bit), without the
 * output: what a backward needs when the forward did not keep them. */
void plait_k_attention_probs(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                             int64_t HS);
void plait_k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *att, int64_t B, int64_t T, int64_t NH, int64_t HS);

/* Fused (plait/kernels.h, ABI 1.7): no T×T buffer, each row's
 * log-sum-exp kept in lse[B,NH,T]; scratch of
 * plait_k_attention_fused_scratch() floats (ATT_TILE x T per (b, h)). */
size_t plait_k_attention_fused_scratch(int64_t B, int64_t T, int64_t NH, int64_t HS);
void plait_k_attention_fused_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                     int64_t NH, int64_t HS);
void plait_k_attention_fused_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                      const float *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                      int64_t HS);
/* Grouped-query attention (ABI 1.10): the fused entries with NKV key/value heads. */
void plait_k_attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                   int64_t NH, int64_t NKV, int64_t HS);
void plait_k_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                    const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS);
/* The Llama family's other kernels (ABI 1.10): RMSNorm, rotary positions, SwiGLU. */
void plait_k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C,
                             float eps);
void plait_k_rmsnorm_backward(float *dinp, const float *dres, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int64_t BT, int64_t C);
void plait_k_rope(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                  int inverse);
void plait_k_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void plait_k_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
/* Ring attention's block kernels (ABI 1.18, kernels_ring.c). */
void plait_k_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                    int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                    const plait_ring_block *blk);
void plait_k_ring_attention_finish(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH, int64_t HS);
void plait_k_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                     const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                     int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk);
void plait_k_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                       int64_t width);
/* The mixture of experts' kernels (ABI 1.21, kernels_moe.c). */
void plait_k_moe_route(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                       int64_t N, int64_t E, int64_t k, int sigmoid);
void plait_k_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx,
                         const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity);
void plait_k_moe_unpermute(float *out, const float *res, const float *shared, const float *y, const int32_t *row,
                           const float *gate, int64_t N, int64_t k, int64_t C);
void plait_k_moe_unpermute_backward(float *dy_rows, double *dgate, const float *dout, const float *y,
                                    const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void plait_k_moe_permute_backward(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C);
void plait_k_moe_route_backward(float *dlogits, const double *dgate, const float *logits, const float *scores,
                                const float *lse, const int32_t *idx, const float *gate, const float *routed, int64_t N,
                                int64_t E, int64_t k, int sigmoid, double aux, double z, double share);
void plait_k_moe_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                                const int32_t *off, int64_t E, int64_t C, int64_t OC);
void plait_k_moe_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, const int32_t *off, int64_t E, int64_t C, int64_t OC);

/* ---- embedding --------------------------------------------------------- */
void plait_k_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C);
void plait_k_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C);
/* Vocabulary-parallel: `wte` holds rows [vocab_start, vocab_start+n_rows)
 * of the full table. Tokens outside that range contribute zero rows;
 * wpe (may be NULL) is added to every position. */
void plait_k_embedding_forward_vocab(float *out, const int32_t *tokens, const float *wte,
                                     int64_t vocab_start, int64_t n_rows, const float *wpe,
                                     int64_t B, int64_t T, int64_t C);
/* dwte rows of local tokens += ; dwpe (may be NULL) += . */
void plait_k_embedding_backward_vocab(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t vocab_start, int64_t n_rows,
                                      int64_t B, int64_t T, int64_t C);
/* out[b,t,:] += wpe[t,:]. */
void plait_k_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C);

/* ---- cross-entropy ----------------------------------------------------- */
void plait_k_crossentropy(float *losses, float *dlogits, const float *logits,
                          const int32_t *targets, int64_t BT, int64_t V, float dloss_scale);
/* Vocabulary-parallel pieces. logits[BT, Vl] hold this rank's columns
 * [vocab_start, vocab_start+Vl); only the first n_valid columns are real
 * classes (the rest is vocabulary padding and is ignored). A negative
 * target means "no loss here" (loss 0, gradient 0). */
/* rowmax[r] = max of the valid columns of row r (-inf if n_valid == 0). */
void plait_k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                           int64_t n_valid);
/* sumexp[r] = Σ exp(logit - rowmax[r]) over valid columns. */
void plait_k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                           int64_t Vl, int64_t n_valid);
/* tlogit[r] = logit of the target if it is one of this rank's valid
 * columns, else 0 (so a sum over ranks gives the target logit). */
void plait_k_logits_target(float *tlogit, const float *logits, const int32_t *targets,
                           int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid);
/* lse[r] = rowmax[r] + logf(sumexp[r]) (lse may equal rowmax); losses[r] =
 * lse[r] - tlogit[r] for targets >= 0, else 0 (losses may equal tlogit);
 * *loss_sum += Σ losses[r], summed in double in row order. */
void plait_k_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp,
                       const float *tlogit, const int32_t *targets, int64_t BT, double *loss_sum);
/* The whole loss in one pass (plait/kernels.h crossentropy_fused, ABI
 * 1.7): the pieces' results bit for bit, with every class on this rank. */
void plait_k_crossentropy_fused(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                                const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale);
/* dlogits = (exp(logit - lse[r]) - onehot) * scale on valid columns, 0 on
 * padding and on rows with a negative target. dlogits may equal logits. */
void plait_k_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, int64_t vocab_start, int64_t BT,
                                   int64_t Vl, int64_t n_valid, float scale);

/* ---- on bf16 activations (plait/kernels.h ABI 1.8-1.9, 1.22-1.25, 1.29) --
 * Each is the float32 entry of the same name on the widened inputs, each
 * bf16 output rounded once to nearest even (kernels_internal.h says how);
 * the products on the bf16 run's native library (plait_kernels_set_precision
 * PLAIT_KERNELS_BF16), else in float32 on the widened operands. Same
 * threading rule as every kernel here: the bits never depend on the thread
 * count. Host memory; thread-safe as the float32 entries. */
void plait_k_to_bf16(plait_bf16 *dst, const float *src, size_t n);
void plait_k_from_bf16(float *dst, const plait_bf16 *src, size_t n);
void plait_k_layernorm_forward_bf16(plait_bf16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                                    const float *bias, int64_t BT, int64_t C);
void plait_k_layernorm_backward_fused_bf16(float *dinp, const float *dres, float *dweight, float *dbias,
                                           const plait_bf16 *dout, const float *inp, const float *weight,
                                           const float *mean, const float *rstd, int64_t BT, int64_t C);
void plait_k_layernorm_backward_fused_bf16_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight,
                                                float *dbias, const plait_bf16 *dout, const float *inp,
                                                const float *weight, const float *mean, const float *rstd, int64_t BT,
                                                int64_t C);
void plait_k_matmul_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight,
                                 const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_forward_residual_bf16(float *out, const float *res, const plait_bf16 *inp, const plait_bf16 *weight,
                                          const float *bias, int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_forward_gelu_bf16(plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                  const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_backward_gelu_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                       const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre,
                                       int64_t BT, int64_t C, int64_t OC);
void plait_k_gelu_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, size_t n);
void plait_k_attention_fused_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                          int64_t T, int64_t NH, int64_t HS);
void plait_k_attention_fused_backward_bf16(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout,
                                           const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                           int64_t T, int64_t NH, int64_t HS);
void plait_k_attention_gqa_forward_bf16(plait_bf16 *out, float *lse, float *scratch, const plait_bf16 *qkv, int64_t B,
                                        int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void plait_k_attention_gqa_backward_bf16(plait_bf16 *dqkv, float *scratch, const plait_bf16 *dout,
                                         const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                         int64_t T, int64_t NH, int64_t NKV, int64_t HS);
void plait_k_crossentropy_fused_bf16(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                     const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                     int64_t n_valid, float scale);
void plait_k_rmsnorm_forward_bf16(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                                  int64_t C, float eps);
void plait_k_rmsnorm_backward_bf16(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout,
                                   const float *inp, const float *weight, const float *rstd, int64_t BT, int64_t C);
void plait_k_rope_bf16(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                       int64_t HS, int inverse);
void plait_k_ring_attention_forward_bf16(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                         int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                         const plait_ring_block *blk);
void plait_k_ring_attention_backward_bf16(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                          int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                          const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                          const plait_ring_block *blk);
void plait_k_moe_permute_bf16(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x,
                              const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                              int64_t capacity);
void plait_k_moe_unpermute_bf16(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                                const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void plait_k_moe_unpermute_backward_bf16(plait_bf16 *dy_rows, double *dgate, const float *dout, const plait_bf16 *y,
                                         const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void plait_k_moe_permute_backward_bf16(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k,
                                       int64_t C);
void plait_k_moe_matmul_forward_bf16(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                     const plait_bf16 *bias, const int32_t *off, int64_t E, int64_t C, int64_t OC);
void plait_k_moe_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                      int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const plait_bf16 *pre, const int32_t *off, int64_t E, int64_t C, int64_t OC);
void plait_k_swiglu_forward_bf16(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F);
void plait_k_swiglu_backward_bf16(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT, int64_t F);

#endif
