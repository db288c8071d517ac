/*
 * The model's parts as its files call each other (core/model/LAYERS: a
 * file calls the files listed before it): tensor parallelism's conjugates
 * (tp_conjugates.c), the layer bodies of each architecture, float32 and
 * bf16 (gpt_layers.c, mlp.c, gpt_bf16.c, llama_layers.c, llama_bf16.c),
 * the mixture of experts (moe.c, moe_bf16.c), the scratch the first slot
 * allocates (model_slots.c) and recomputation (recompute_keep.c,
 * recompute.c). The state they act on is model_internal.h's.
 *
 * Not thread-safe: one thread drives a model (the kernels it calls use
 * the math thread pool themselves).
 */
#ifndef PLAIT_CORE_MODEL_BODIES_H
#define PLAIT_CORE_MODEL_BODIES_H

#include "model/model_internal.h"

/* Tensor parallelism's conjugates, with or without sequence parallelism
 * (tp_conjugates.c; each a no-op where it has nothing to do). `where` ends
 * the operation's name in an error ("after attn.c_proj").
 *   plait_tp_local: where a norm writes the rows plait_tp_gather gathers
 *     into `full` (sp_local, or `full` itself without sequence parallelism);
 *   plait_tp_gather: those R rows into every rank's full [B·T,C];
 *   plait_tp_norm_full: a block norm's output over every row from the R
 *     rows a slot keeps (`rows` itself, or gathered into sp_ln: in the
 *     forward and again in the backward before the weight gradient of the
 *     product that reads it, as Megatron-LM does);
 *   plait_tp_partial: where a row-parallel product writes its partial sums
 *     (sp_full, or `out` itself);
 *   plait_tp_sum: their sum into this rank's rows of `out` (all-reduce in
 *     place, or reduce-scatter);
 *   plait_tp_grad_full: a row-parallel product's output gradient over all
 *     rows from this rank's R (`d` itself, or gathered into sp_full);
 *   plait_tp_grad_sum: a column-parallel product's input gradient `d`
 *     [B·T,C] summed over the group, this rank's R rows at its start;
 *   plait_tp_norm_grads: where a norm's backward adds its parameter
 *     gradients (`w`, `b`, either NULL), and plait_tp_norm_grads_sum, after
 *     it, adds them to the accumulators: under sequence parallelism the R
 *     rows' partial sums land in sp_wg and are all-reduced first. */
typedef struct norm_grads {
    float *w, *b;         /* what the norm's backward writes */
    float *acc_w, *acc_b; /* the accumulators they are added to, or NULL */
} norm_grads;
float *plait_tp_local(plait_model *m, float *full);
plait_status plait_tp_gather(plait_model *m, const float *local, float *full, const char *where, int32_t layer);
plait_status plait_tp_norm_full(plait_model *m, const float *rows, const float **full, const char *where,
                                int32_t layer);
float *plait_tp_partial(plait_model *m, float *out);
plait_status plait_tp_sum(plait_model *m, float *partial, float *out, const char *where, int32_t layer);
plait_status plait_tp_grad_full(plait_model *m, const float *d, const float **full, const char *where, int32_t layer);
plait_status plait_tp_grad_sum(plait_model *m, float *d, const char *where, int32_t layer);
/* plait_tp_grad_sum in two halves, so that the product's weight gradient
 * runs while the sum travels (Megatron-LM's asynchronous tensor-parallel
 * reduction): _start posts it where m->tp_overlap (else it sums at once,
 * blocking), _end waits and leaves what plait_tp_grad_sum leaves. Between
 * them the caller reads and writes neither `d` nor sp_local and makes no
 * other tensor-parallel call; an error of _start leaves nothing to end. */
typedef struct tp_pending {
    void *req;         /* the request in flight, or NULL */
    float *d;          /* where this rank's summed rows go */
    const void *rows;  /* a gather's: the rows gathered (the answer without sequence parallelism) */
    const char *where; /* the operation's name, for an error */
    int32_t layer;
} tp_pending;
plait_status plait_tp_grad_sum_start(plait_model *m, float *d, const char *where, int32_t layer, tp_pending *p);
plait_status plait_tp_grad_sum_end(plait_model *m, tp_pending *p);
/* plait_tp_gather and plait_tp_norm_full in two halves, so that products
 * run while the rows travel (the backward's gathers of the norms' outputs
 * again, Megatron-LM's overlap of that all-gather with the input
 * gradients): _start posts it where `overlap` (else gathers at once,
 * blocking), _end waits (*full as plait_tp_norm_full gives it). Between
 * them the caller writes neither the rows nor the buffer they gather into
 * (sp_ln for a norm), reads the latter not at all, and makes no other
 * tensor-parallel call; an error of _start leaves nothing to end, and _end
 * after an error between them finishes the request. */
plait_status plait_tp_gather_start(plait_model *m, const float *local, float *full, int overlap, const char *where,
                                   int32_t layer, tp_pending *p);
plait_status plait_tp_gather_end(plait_model *m, tp_pending *p);
plait_status plait_tp_norm_full_start(plait_model *m, const float *rows, int overlap, const char *where, int32_t layer,
                                      tp_pending *p);
plait_status plait_tp_norm_full_end(plait_model *m, tp_pending *p, const float **full);
norm_grads plait_tp_norm_grads(plait_model *m, float *w, float *b);
plait_status plait_tp_norm_grads_sum(plait_model *m, const norm_grads *g, int32_t layer);
/* The n floats of `d`, a gradient each tp rank computed from its own
 * heads alone (the q and k norms' weights), summed over the group in
 * place; `what` names them in an error. */
plait_status plait_tp_heads_sum(plait_model *m, float *d, size_t n, const char *what, int32_t layer);
/* dst[n] = src[n], bf16 widened to float32 exactly, by a product with
 * the bf16 identities in the scratch (m->unit: tensor parallelism on a
 * bf16 run), for the tp group's float32 collectives. */
void plait_tp_widen(plait_model *m, float *dst, const plait_bf16 *src, int64_t n);

/* lm_head's products under tensor parallelism on a bf16 run
 * (tp_head_bf16.c): the vocabulary-parallel head keeps ln_f's output
 * (s->lnf) and its slice of the logits (s->logits) float32 for its
 * float32 loss, and its products read them rounded to bf16 and lm_head's
 * bf16 copy. _logits writes s->logits from s->lnf. _backward, from the
 * logits' gradient in s->logits: with `input`, ln_f's output gradient
 * into m->s_dln summed over the tp group (this rank's R rows), and with
 * dw lm_head's weight gradient added too (made while the sum travels
 * where tp_overlap); without `input`, the weight gradient alone. */
plait_status plait_tp_head_logits_bf16(plait_model *m, model_slot *s);
plait_status plait_tp_head_backward_bf16(plait_model *m, model_slot *s, float *dw, int input);

/* Layer bodies (gpt_layers.c, mlp.c). `s` is an allocated slot. A
 * backward runs `part` of the layer (bwd_part); the weight half reads what
 * the input half left in `g` (the slot's stash under a split backward, the
 * scratch in one pass). */
plait_status plait_gpt_embedding_forward(plait_model *m, model_slot *s);
plait_status plait_gpt_embedding_backward(plait_model *m, model_slot *s);
plait_status plait_gpt_attention_forward(plait_model *m, model_slot *s, int32_t layer, const float *x);
plait_status plait_gpt_attention_backward(plait_model *m, model_slot *s, int32_t layer, const float *x, float *dx,
                                          bwd_part part, const block_grads *g);
plait_status plait_mlp_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y);
/* The MLP half's forward up to the GELU (ln_2, c_fc, GELU into the block's
 * acts), without c_proj: what its backward reads. */
plait_status plait_mlp_half_forward_act(plait_model *m, model_slot *s, int32_t layer, const float *r);
plait_status plait_mlp_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                     float *dr, bwd_part part, const block_grads *g);
plait_status plait_gpt_head_forward(plait_model *m, model_slot *s);
plait_status plait_gpt_head_backward(plait_model *m, model_slot *s, bwd_part part, float *dln);
/* What every architecture's head shares (gpt_layers.c): the loss of the
 * slot's logits (s->logits, just computed) against its targets, and, by
 * the fused loss, their gradient in place where nothing keeps them; and
 * in the backward the logits turned into their gradient if the forward
 * did not. */
plait_status plait_head_loss(plait_model *m, model_slot *s);
plait_status plait_head_dlogits(plait_model *m, model_slot *s);
/* lm_head's products backward from the logits' gradient in s->logits
 * and ln_f's output in s->lnf (bf16 products as plait_head_logits's):
 * ln_f's output gradient into m->s_dln,
 * summed over the tp group (this rank's R rows); with dw, lm_head's
 * weight gradient in the same pass, or made while the sum travels where
 * tp_overlap. */
plait_status plait_head_products_backward(plait_model *m, model_slot *s, const float *w, float *dw);
/* lm_head's logits into s->logits from s->lnf and its float32 weight w,
 * and its weight gradient alone added into dw from the logits' gradient
 * there (a split backward's weight half): float32 products, or under
 * tensor parallelism on a bf16 run bf16 ones (tp_head_bf16.c). */
plait_status plait_head_logits(plait_model *m, model_slot *s, const float *w);
plait_status plait_head_weight_grad(plait_model *m, model_slot *s, float *dw);

/* The same bodies under bf16 activations (gpt_bf16.c); a backward runs
 * `part` as above, its weight half from the slot's block_grads_bf16, each
 * after plait_recompute_block. */
plait_status plait_bf16_attention_forward(plait_model *m, model_slot *s, int32_t layer, const float *x);
plait_status plait_bf16_attention_backward(plait_model *m, model_slot *s, int32_t layer, const float *x, float *dx,
                                           bwd_part part);
plait_status plait_bf16_mlp_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y);
/* The MLP half's forward up to the GELU, without c_proj (full recomputation). */
plait_status plait_bf16_mlp_forward_act(plait_model *m, model_slot *s, int32_t layer, const float *r);
plait_status plait_bf16_mlp_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                     float *dr, bwd_part part);
plait_status plait_bf16_head_forward(plait_model *m, model_slot *s);
plait_status plait_bf16_head_backward(plait_model *m, model_slot *s, bwd_part part);
/* The bf16 head's parts both archs run (gpt_bf16.c): the checks and the
 * scratch before the final norm; after the norm wrote its bf16 output
 * into head_lnf, lm_head's products and the fused loss a chunk of rows at
 * a time; and a backward's check that a forward left the gradients. */
plait_status plait_bf16_head_begin(plait_model *m, model_slot *s);
void plait_bf16_head_chunks(plait_model *m, model_slot *s);
plait_status plait_bf16_head_backward_check(const model_slot *s);
/* What the llama arch's bf16 blocks share with them (gpt_bf16.c):
 *   plait_bf16_norm_full: a block norm's bf16 output over every row the
 *     column-parallel product reads, from the R rows the slot keeps
 *     (`rows` itself, or gathered into sp_ln_bf under sequence parallelism);
 *   plait_bf16_row_product: out = res + inp · wᵀ + bias (bias may be NULL)
 *     on this rank's rows, the partial sums summed over the tp group;
 *   plait_bf16_input_grad_sum: sb.dln, a column-parallel product's input
 *     gradient, summed over the tp group into its R rows; in two halves
 *     (_start, _end) as plait_tp_grad_sum_start/_end where `overlap`
 *     (else _start sums, blocking), the caller touching neither sb.dln nor
 *     s_dln between them;
 *   plait_bf16_dres_full: the residual stream's gradient g over every row
 *     a row-parallel product reads, in bf16 (in sb.dres; the copy m->dres_of
 *     names reused). */
plait_status plait_bf16_norm_full(plait_model *m, const plait_bf16 *rows, const plait_bf16 **full, const char *where,
                                  int32_t layer);
/* plait_bf16_norm_full in two halves, as plait_tp_norm_full_start/_end
 * (the rows widened into sp_local and gathered into sp_full, which the
 * caller leaves alone between them). */
plait_status plait_bf16_norm_full_start(plait_model *m, const plait_bf16 *rows, int overlap, const char *where,
                                        int32_t layer, tp_pending *p);
plait_status plait_bf16_norm_full_end(plait_model *m, tp_pending *p, const plait_bf16 **full);
plait_status plait_bf16_row_product(plait_model *m, float *out, const float *res, const plait_bf16 *inp,
                                    const plait_bf16 *w, const float *bias, int64_t K, const char *where,
                                    int32_t layer);
plait_status plait_bf16_input_grad_sum(plait_model *m, const char *where, int32_t layer);
plait_status plait_bf16_input_grad_sum_start(plait_model *m, int overlap, const char *where, int32_t layer,
                                             tp_pending *p);
plait_status plait_bf16_input_grad_sum_end(plait_model *m, tp_pending *p);
plait_status plait_bf16_dres_full(plait_model *m, const float *g, const plait_bf16 **out, const char *where,
                                  int32_t layer);

/* The Llama family's bodies (llama_layers.c), float32, one pass or in
 * halves as above: the embedding (no positions: the rotary angles are
 * applied to q and k), a whole block, and the head (RMSNorm, lm_head,
 * the loss). */
plait_status plait_llama_embedding_forward(plait_model *m, model_slot *s);
plait_status plait_llama_embedding_backward(plait_model *m, model_slot *s);
plait_status plait_llama_block_forward(plait_model *m, model_slot *s, int32_t layer);
/* A block's forward up to SwiGLU's output, without down_proj: what its
 * backward reads (full recomputation reruns it). */
plait_status plait_llama_block_forward_act(plait_model *m, model_slot *s, int32_t layer);
plait_status plait_llama_block_backward(plait_model *m, model_slot *s, int32_t layer, bwd_part part);
plait_status plait_llama_head_forward(plait_model *m, model_slot *s);
plait_status plait_llama_head_backward(plait_model *m, model_slot *s, bwd_part part);
/* A Llama block under bf16 activations (llama_bf16.c): its forward, the
 * same up to SwiGLU's output (full recomputation), and `part` of its
 * backward from s->gbuf[layer & 1] into s->gbuf[(layer - 1) & 1], a split
 * one's halves through the slot's block_grads_bf16. */
plait_status plait_llama_bf16_block_forward(plait_model *m, model_slot *s, int32_t layer);
plait_status plait_llama_bf16_block_forward_act(plait_model *m, model_slot *s, int32_t layer);
plait_status plait_llama_bf16_block_backward(plait_model *m, model_slot *s, int32_t layer, bwd_part part);
/* The head in bf16 without tensor parallelism (llama_bf16.c: RMSNorm,
 * then the bf16 head's chunks, gpt_bf16.c's), and `part` of its backward. */
plait_status plait_llama_bf16_head_forward(plait_model *m, model_slot *s);
plait_status plait_llama_bf16_head_backward(plait_model *m, model_slot *s, bwd_part part);

/* Mixture of experts (moe.c): a sparse block's MLP half over `ln` [BT,C],
 * the normalised rows (every row, also under sequence parallelism):
 * out = res + the shared experts' output + each token's top-k experts'
 * outputs, weighted by their gates and summed in the order of expert
 * index; res, out, dy and dln are this rank's R rows (m->R). The backward
 * reads dy = d(out) and overwrites dln with d(ln), summed over the tp
 * group (dln: room for BT rows); in one pass (BWD_ALL) it adds every
 * gradient of the block's MoE parameters in the same call. A split
 * backward (ep = 1): the input half writes dln and keeps the weight half's
 * output gradients in the slot; the weight half reads ln, neither dy nor
 * dln, and adds the gradients. */
plait_status plait_moe_forward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *res,
                               float *out);
plait_status plait_moe_backward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *dy,
                                float *dln, bwd_part part);
/* recompute = full: block `layer`'s router, permutation and experts
 * rerun over `ln` (the forward's), before its backward, into the buffers
 * its backward reads; nothing counted again, no combine. */
plait_status plait_moe_rerun(plait_model *m, model_slot *s, int32_t layer, const float *ln);
/* recompute = selective: block `layer`'s experts' activation function
 * outputs (GELU's or SwiGLU's, routed and shared experts) rebuilt from the
 * kept inputs by the forward's own calls, before its backward. */
plait_status plait_moe_act_rerun(plait_model *m, model_slot *s, int32_t layer);
/* The gpt arch's sparse MLP half: ln_2 (LayerNorm) and the above; dr
 * (overwritten) = d(r) from dy, `part` of the backward, ln_2's output
 * gradient kept in kept->dln2 between a split one's halves. */
plait_status plait_moe_gpt_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y);
plait_status plait_moe_gpt_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                         float *dr, bwd_part part, const block_grads *kept);
/* A sparse block's MLP half under bf16 activations, either arch
 * (moe_bf16.c): its norm and the above in float32 between the float32
 * residual stream's rows r and y; dr (overwritten) = d(r) from dy, `part`
 * of the backward, the norm's output gradient kept in kept->dln2 (float32)
 * between a split one's halves (kept NULL for BWD_ALL). */
plait_status plait_moe_bf16_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y);
plait_status plait_moe_bf16_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                          float *dr, bwd_part part, const block_grads *kept);

/* The fused attention's scratch, allocated with the first slot (model_slots.c). */
plait_status plait_model_att_scratch(plait_model *m);
/* [model] qk_norm's buffers (plait_model.qkn_scratch), likewise. */
plait_status plait_model_qk_norm_scratch(plait_model *m);
/* Sequence parallelism's buffers (sp_full, sp_local, sp_wg), likewise. */
plait_status plait_model_sp_scratch(plait_model *m);

/* ---- recompute (recompute_keep.c: what a mode keeps, the shared buffers;
 * recompute.c: the refill before a backward) ---------------------------- */

/* Floats of the shared recompute buffers for the model's mode (0 for
 * none); a part stored in bf16 (bf16 activations) takes half as many. */
size_t plait_recompute_floats(const plait_model *m);
/* Carve the shared recompute buffers from `base` (plait_recompute_floats()
 * floats), then point the parts of a slot's `a` that the mode does not keep
 * at them (a part's bf16 pointer under bf16 activations). */
void plait_recompute_carve(plait_model *m, float *base);
void plait_recompute_share(plait_model *m, block_acts *a);
/* 1 if a slot keeps part `which` of a block's acts (an offsetof into
 * block_acts, of the float32 pointer: it stands for the part in either
 * type) under the model's mode. */
int plait_recompute_keeps(const plait_model *m, size_t which);
/* Before the backward of block `layer` of slot s: recompute into the
 * shared buffers what the mode dropped, from what the slot kept, with the
 * forward's own kernels on the same inputs (so bit-identical; under bf16
 * activations with the same bf16 weight copies, which only a forward
 * makes again). With weights_only, only what the weight half of a split
 * backward reads. */
plait_status plait_recompute_block(plait_model *m, model_slot *s, int32_t layer, int weights_only);

#endif
