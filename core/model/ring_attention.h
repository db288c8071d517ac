/*
 * Context parallelism inside the model: each of the cp ranks of a ring
 * holds 2 of the 2cp equal chunks of every sequence, chunks cp_rank and
 * 2cp-1-cp_rank (balanced under the causal mask, as Megatron-LM and
 * torchtitan split it), in that order: local token t is chunk t / c of the
 * two, c = block_size / 2cp. ring_attention.c: the positions of the local
 * tokens, the local share of a micro-batch's tokens (plait_cp_take_local,
 * model/model.h), and causal attention
 * over the ring (K and V blocks passed on by asynchronous point-to-point
 * requests, each transfer overlapped with the block before it; partial
 * results merged by their log-sum-exp; the backward passing dK and dV on
 * around the ring to their owner).
 *
 * On the open device, with its ring attention kernels (plait/kernels.h,
 * ABI 1.18: the cpu and cuda devices; model.c refuses cp > 1 on a device
 * without them; under bf16 activations ABI 1.25's: the cuda device). Not thread-safe: the thread that drives the model calls it, in the same
 * order on every rank of the ring (each call communicates over cp_comm).
 */
#ifndef PLAIT_CORE_RING_ATTENTION_H
#define PLAIT_CORE_RING_ATTENTION_H

#include <stdint.h>

#include "model/model_internal.h"

/* Position in the whole sequence of local token t (0 <= t < m->T). */
int64_t plait_cp_position(const plait_model *m, int64_t t);

/* GPT: out[B,T,C] += wpe at each token's whole-sequence position, and its
 * backward, dwpe += the rows of dout at those positions. */
void plait_cp_add_positions(const plait_model *m, float *out, const float *wpe);
void plait_cp_positions_backward(const plait_model *m, float *dwpe, const float *dout);

/* Causal attention of the local queries over the whole sequence's keys
 * and values, in the layout of the grouped-query kernels (plait/kernels.h:
 * qkv [B,T,(NH+2·NKV)·HS], out [B,T,NH·HS], lse [B,NH,T]); NKV = NH for
 * the GPT. The backward overwrites dqkv. Communicates over m->cp_comm;
 * a failed transfer is returned with the layer named. */
plait_status plait_ring_attention_forward(plait_model *m, int32_t layer, float *out, float *lse, const float *qkv,
                                          int64_t NH, int64_t NKV);
plait_status plait_ring_attention_backward(plait_model *m, int32_t layer, float *dqkv, const float *dout,
                                           const float *qkv, const float *out, const float *lse, int64_t NH,
                                           int64_t NKV);

/* The same under bf16 activations (the device's ABI 1.25 entries: model_bf16.c
 * grants bf16 under cp only with them): qkv, out, dout and dqkv bf16, lse
 * float32; K|V blocks bf16 on the ring, every sum float32 in the ring's
 * buffer, the output and dqkv rounded once at the end. */
plait_status plait_ring_attention_forward_bf16(plait_model *m, int32_t layer, plait_bf16 *out, float *lse,
                                               const plait_bf16 *qkv, int64_t NH, int64_t NKV);
plait_status plait_ring_attention_backward_bf16(plait_model *m, int32_t layer, plait_bf16 *dqkv, const plait_bf16 *dout,
                                                const plait_bf16 *qkv, const plait_bf16 *out, const float *lse,
                                                int64_t NH, int64_t NKV);

/* Release the ring's buffers (plait_model_free). */
void plait_ring_attention_free(plait_model *m);

#endif
