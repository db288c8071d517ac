/*
 * plait SDK — the mixture of experts' kernel entries (ABI 1.21, and their
 * bf16-activation forms, ABI 1.29): the type and the contract of each
 * moe_* member of plait_kernels, and PLAIT_KERNELS_HAS_MOE /
 * PLAIT_KERNELS_HAS_MOE_BF16, which say whether a table has them.
 *
 * Part of plait/kernels.h, which includes it: the members themselves stay
 * in plait_kernels where the ABI places them (appended at 1.21 and 1.29),
 * typed by the pointer types below; a plugin includes plait/kernels.h and
 * sets or calls them as any other entry. The
 * kernel table's conventions (plait/kernels.h's opening comment: memory,
 * aliasing, accumulation, determinism) hold for these entries too. The
 * macros read a plait_kernels, so they expand only where kernels.h is
 * included.
 */
#ifndef PLAIT_KERNELS_MOE_H
#define PLAIT_KERNELS_MOE_H

#include <stddef.h>

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- ABI 1.21: the mixture of experts -------------------------------
 * Optional, all eight (PLAIT_KERNELS_HAS_MOE); float32, device memory
 * except where stated, no atomics (the same inputs give the same bits).
 * N tokens, E experts, each token routed to k of them; route r = n·k + j
 * is token n's j-th. The permuted rows: expert 0's routes in token
 * order, then expert 1's, ...; off[E+1] holds each expert's first row.
 * core/model/moe.c runs them (docs/models.md "Mixture of experts"). */

/* The router: from logits[N,E], lse[n] = log Σ_e exp(logit) and
 * scores[N,E] (softmax, or the logistic sigmoid when `sigmoid`), then
 * the k experts of highest score + bias[e] (bias[E]: the selection
 * bias, outside the gradient; ties to the lower index) into idx[N,k]
 * in ascending order, and their gates gate[N,k]: the chosen scores,
 * divided by their sum when k > 1. Exponentials and sums in double. */
typedef void (*plait_moe_route_fn)(float *scores, float *lse, int32_t *idx, float *gate, const float *logits,
                                   const float *bias, int64_t N, int64_t E, int64_t k, int sigmoid);

/* The dispatch: routed[e] = routes to expert e (as floats); in token
 * order the first `capacity` routes of each expert are kept (capacity
 * >= N·k: every route), the rest dropped; off[E+1] the kept rows'
 * offsets, row[N,k] each route's permuted row (-1 dropped), tok[N·k]
 * the token of each of the off[E] rows (the rest untouched), and
 * x[off[E],C] = inp[tok[row], :]. */
typedef void (*plait_moe_permute_fn)(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x,
                                     const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                                     int64_t capacity);

/* The combine: out[n] = res[n] (+ shared[n] when not NULL), then +=
 * gate[n,j]·y[row[n,j]] for j = 0..k-1 (dropped routes skipped): each
 * token's routes added in the order of expert index. out may be res. */
typedef void (*plait_moe_unpermute_fn)(float *out, const float *res, const float *shared, const float *y,
                                       const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);

/* The combine's backward: dy_rows[row[n,j]] = gate[n,j]·dout[n]
 * (overwritten; the off[E] rows) and dgate[n,j] (doubles) = dout[n] ·
 * y[row[n,j]] summed in double over the channels in order (0 when
 * dropped). */
typedef void (*plait_moe_unpermute_backward_fn)(float *dy_rows, double *dgate, const float *dout, const float *y,
                                                const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);

/* The dispatch's backward: dinp[n] += dx[row[n,j]] for j in order
 * (dropped routes skipped). */
typedef void (*plait_moe_permute_backward_fn)(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k,
                                              int64_t C);

/* The router's backward: dlogits[N,E] (overwritten) from the gates'
 * gradients dgate[N,k] through the renormalisation and the scores,
 * plus the load-balancing loss's aux·E·routed[e]/(N²k) on each score
 * and the z-loss's z·2·lse·softmax/N, both times `share` (the micro-
 * batch's weight); in double, one token's experts in index order. */
typedef void (*plait_moe_route_backward_fn)(float *dlogits, const double *dgate, const float *logits,
                                            const float *scores, const float *lse, const int32_t *idx,
                                            const float *gate, const float *routed, int64_t N, int64_t E, int64_t k,
                                            int sigmoid, double aux, double z, double share);

/* The grouped product: for each expert e, matmul_forward of its rows
 * [off[e], off[e+1]) of inp[.,C] with its weight weight[e] ([E,OC,C]
 * stacked) and bias[e] ([E,OC]; NULL: none) into the same rows of
 * out[.,OC]. off[E+1] is HOST memory (the counts the caller read
 * back). Each expert's product is the bits of matmul_forward's. */
typedef void (*plait_moe_matmul_forward_fn)(float *out, const float *inp, const float *weight, const float *bias,
                                            const int32_t *off, int64_t E, int64_t C, int64_t OC);

/* matmul_backward the same way, expert by expert: dinp's rows
 * overwritten (dinp may be NULL), dweight[e] += , dbias[e] += (may be
 * NULL). off is host memory. */
typedef void (*plait_moe_matmul_backward_fn)(float *dinp, float *dweight, float *dbias, const float *dout,
                                             const float *inp, const float *weight, const int32_t *off, int64_t E,
                                             int64_t C, int64_t OC);

/* --- ABI 1.29: the mixture of experts on bf16 activations -----------
 * Optional, all six (PLAIT_KERNELS_HAS_MOE_BF16, which asks 1.21's
 * entries too): the permuted rows, the experts' outputs and hidden
 * tensors and their gradients in bf16 (Megatron-Core's), under 1.8's
 * rules: float32 arithmetic inside, each bf16 output rounded once to
 * nearest even. The router, its scores and gates, the residual stream
 * (inp, res, out, dout, dinp of the dispatch and combine) and every
 * weight gradient stay float32. Same conventions as 1.21's (device
 * memory but off, bf16 tensors 16-byte aligned where their float32
 * counterparts are, no atomics: the same inputs give the same bits). */

/* moe_permute with the permuted rows x rounded to bf16 from float32
 * inp (the norm's output, as the router reads it). */
typedef void (*plait_moe_permute_bf16_fn)(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x,
                                          const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k,
                                          int64_t C, int64_t capacity);

/* moe_unpermute from the experts' bf16 rows y and the shared experts'
 * bf16 output (NULL: none), each widened exactly; the sum float32. */
typedef void (*plait_moe_unpermute_bf16_fn)(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                                            const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);

/* moe_unpermute_backward with bf16 y and the rows' gradients dy_rows
 * rounded to bf16 (dgate in double from the widened y, as 1.21's). */
typedef void (*plait_moe_unpermute_backward_bf16_fn)(plait_bf16 *dy_rows, double *dgate, const float *dout,
                                                     const plait_bf16 *y, const int32_t *row, const float *gate,
                                                     int64_t N, int64_t k, int64_t C);

/* moe_permute_backward from bf16 dx, each widened exactly. */
typedef void (*plait_moe_permute_backward_bf16_fn)(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N,
                                                   int64_t k, int64_t C);

/* The grouped product on bf16: for each expert e, matmul_forward_bf16
 * of its rows [off[e], off[e+1]) of inp[.,C] with weight[e] ([E,OC,C])
 * and bias[e] ([E,OC]; NULL: none), into the same rows of out, whose
 * rows lie ldo elements apart (ldo >= OC: an llama expert's gate and
 * up side by side in one [rows,2F] buffer, as swiglu_forward_bf16
 * reads them; bias then NULL). off is HOST memory. */
typedef void (*plait_moe_matmul_forward_bf16_fn)(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp,
                                                 const plait_bf16 *weight, const plait_bf16 *bias, const int32_t *off,
                                                 int64_t E, int64_t C, int64_t OC);

/* Its backward, expert by expert, as matmul_backward_bf16 (dout's rows
 * ldo elements apart): dinp's rows overwritten in bf16 (may be NULL:
 * weight and pre not read), dweight[e] += and dbias[e] += in float32
 * (each may be NULL; dbias NULL where ldo > OC). pre non-NULL (the forward's bf16 GELU input,
 * [rows,C] as dinp) applies GELU's derivative to dinp as
 * matmul_backward_gelu_bf16 does: a GPT expert's c_proj backward. */
typedef void (*plait_moe_matmul_backward_bf16_fn)(plait_bf16 *dinp, float *dweight, float *dbias,
                                                  const plait_bf16 *dout, int64_t ldo, const plait_bf16 *inp,
                                                  const plait_bf16 *weight, const plait_bf16 *pre, const int32_t *off,
                                                  int64_t E, int64_t C, int64_t OC);

/* 1 if table k has the mixture of experts' entries (ABI 1.21), every one. */
#define PLAIT_KERNELS_HAS_MOE(k)                                                                                       \
    ((k)->struct_size >= offsetof(plait_kernels, moe_matmul_backward) + sizeof((k)->moe_matmul_backward) &&            \
     (k)->moe_route && (k)->moe_permute && (k)->moe_unpermute && (k)->moe_unpermute_backward &&                        \
     (k)->moe_permute_backward && (k)->moe_route_backward && (k)->moe_matmul_forward && (k)->moe_matmul_backward)

/* 1 if table k has the mixture of experts' bf16-activation entries (ABI
 * 1.29) beside 1.21's, every one. */
#define PLAIT_KERNELS_HAS_MOE_BF16(k)                                                                                  \
    (PLAIT_KERNELS_HAS_MOE(k) &&                                                                                       \
     (k)->struct_size >= offsetof(plait_kernels, moe_matmul_backward_bf16) + sizeof((k)->moe_matmul_backward_bf16) &&  \
     (k)->moe_permute_bf16 && (k)->moe_unpermute_bf16 && (k)->moe_unpermute_backward_bf16 &&                           \
     (k)->moe_permute_backward_bf16 && (k)->moe_matmul_forward_bf16 && (k)->moe_matmul_backward_bf16)

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_KERNELS_MOE_H */
