/*
 * [model] qk_norm: each attention head's query and key through an RMSNorm
 * of its own head size before the rotation (Qwen3's q_norm and k_norm,
 * Megatron-Core's qk_layernorm; docs/models.md). One weight of HS floats
 * for every query head, one for every key head; tp splits the heads, so
 * each rank's weight gradients are partial and summed over the group.
 *
 * The norms run on the q|k|v product's output in place: q's heads then
 * k's are copied out of the [BT,Wq] rows into rows of HS (kept as the
 * backward's input), normalised by the device's RMSNorm, and copied back;
 * the backward does the same with the gradient. So every device with the
 * Llama entries and copy_rows runs them (float32; bf16 with from_bf16 and
 * to_bf16 too), with the bits of the RMSNorm kernel every norm uses.
 *
 * Not thread-safe: the model's thread calls them (model_internal.h).
 */
#ifndef PLAIT_CORE_MODEL_QK_NORM_H
#define PLAIT_CORE_MODEL_QK_NORM_H

#include "model/model_internal.h"

/* a->qkv (float32) or a->bf.qkv (bf16) written by the product: its q and
 * k heads normalised in place with weights wq and wk [HS] (float32),
 * their inputs kept in a->qkn (a->bf.qkn) and reciprocal deviations in
 * a->qk_rstd. */
void plait_qk_norm_forward(plait_model *m, block_acts *a, const float *wq, const float *wk);

/* dqkv [BT,Wq] (float32, or bf16 under bf16 activations: the type of
 * a->qkv) holds the gradient at the normalised q and k (before the
 * rotation) on entry, at the product's output on return; dw [2,HS] is
 * overwritten with the two weights' gradients from this rank's heads. */
void plait_qk_norm_backward(plait_model *m, const block_acts *a, const float *wq, const float *wk, void *dqkv,
                            float *dw);

/* dw summed over the tp group in place (a blocking collective: the
 * caller has no tensor-parallel request in flight). */
plait_status plait_qk_norm_sum(plait_model *m, int32_t layer, float *dw);

/* gq += dw[0..HS), gk += dw[HS..2HS) (either NULL: not added). */
void plait_qk_norm_add(plait_model *m, const float *dw, float *gq, float *gk);

/* Where a one-pass backward computes dw: the tail of the model's buffers. */
float *plait_qk_norm_dw(plait_model *m);

#endif
