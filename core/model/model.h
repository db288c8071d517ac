/*
 * The model: a GPT-2 decoder (as nanoGPT has it) or a small MLP, executed one
 * layer at a time so the trainer can interleave optimizer hooks (ZeRO-3
 * gathers), gradient-ready notifications (DP buckets) and pipeline transfers.
 *
 * Layers (global indices): 0 = "embedding" (wte, wpe), 1..n_layer = "h.<i>"
 * (the blocks), n_layer+1 = "head" (ln_f and the output projection tied to
 * wte). The head owns a parameter "lm_head.weight" flagged
 * PLAIT_PARAM_TIED_COPY with tied_to = wte: when embedding and head run on
 * the same rank its data pointer aliases wte's storage, but its gradient is
 * always separate, so the tied gradient is summed in one canonical order
 * (embedding part + head part) however the layers are split over stages.
 *
 * Activations live in *slots*: one slot holds everything saved by the
 * forward of one micro-batch (several are in flight under pipeline
 * schedules). A slot's residual-stream buffers double as the pipeline
 * boundary buffers: the trainer receives a previous stage's output into
 * plait_model_boundary(slot, layer-1) before the forward of `layer`, and
 * sends plait_model_boundary(slot, last) after it; gradients likewise.
 *
 * Tensor parallelism: the model computes with the local shards the plan
 * gives (whole heads per rank, a slice of the MLP width, a slice of the
 * padded vocabulary) and calls plan->tp_ops at Megatron's conjugate points.
 * Per micro-batch: each block calls exit_forward twice in forward (after
 * attn.c_proj and mlp.c_proj) and enter_backward twice in backward (before
 * attn.c_attn and mlp.c_fc), each on B·T·C floats; the embedding calls
 * exit_forward once (B·T·C); the head calls reduce_max once and reduce_sum
 * twice on B·T floats in forward, and enter_backward once (B·T·C) in
 * backward. With plan->tp_ops NULL the model is the plain single-rank one.
 *
 * Device: the model computes through the open device's kernel table
 * (device/device.h; the core's CPU kernels when none is open) and every
 * buffer it allocates, and every parameter and gradient it is given, is
 * the device's memory: nothing here reads tensor data on the host.
 *
 * Thread-safety: a model is used by one thread at a time.
 * Determinism: for a given layout, results do not depend on the number of
 * math threads (bit-identical with 1 or N threads).
 */
#ifndef PLAIT_CORE_MODEL_H
#define PLAIT_CORE_MODEL_H

#include <stdint.h>
#include <plait/kernels.h>
#include <plait/model.h>
#include <plait/parallel.h>

#include "config/config.h"

/* The global model description built from [model]. Owns the arrays that
 * plait_model_spec points to. */
typedef struct plait_model_desc plait_model_desc;

/* [model] recompute_offload = host on a device whose memory is host
 * memory (own_memory 0: the cpu device) moves nothing off it, so it is
 * refused (PLAIT_ERR_INVALID_CONFIG), naming the key and where it was set,
 * and `device` (the device plugin's name, "" for the config's) as the
 * reason. The description itself takes the key on any device: the
 * trainer and `plait config check` ask this of the device they run on. */
plait_status plait_model_check_recompute_offload(const plait_config *cfg, int own_memory, const char *device);

/* Build the description for `micro_batch` sequences per micro-batch.
 * Validates the [model] keys together (n_embd % n_head, ...) and fails with
 * PLAIT_ERR_INVALID_CONFIG naming them. */
plait_status plait_model_describe(const plait_config *cfg, int32_t micro_batch,
                                  plait_model_desc **out);
const plait_model_spec *plait_model_desc_spec(const plait_model_desc *desc);
/* The model's parameters, a tied head counted once (as published counts
 * are), as a double (405B models overflow no int64, but the MFU and the
 * reports divide it). */
double plait_model_spec_params(const plait_model_spec *s);
void plait_model_desc_free(plait_model_desc *desc);

/* The attention heads' size of the described model `s`: a llama's
 * head_dim (q_proj's rows / n_head), else n_embd / n_head (the mlp arch,
 * which has no heads: n_embd). */
int64_t plait_model_spec_head_size(const plait_model_spec *s);
/* 1 if the described model's heads have q and k norms ([model] qk_norm:
 * its first block has self_attn.q_norm.weight), else 0. */
int plait_model_spec_qk_norm(const plait_model_spec *s);

/* Global parameter index of `name`, or -1. */
int32_t plait_model_param_index(const plait_model_desc *desc, const char *name);

/* What layout-independent initial values depend on besides a parameter's
 * global name and an element's global index. */
typedef struct plait_init_rule {
    uint64_t seed;     /* [run] seed */
    int32_t n_layer;   /* the model's blocks: residual projections get std/sqrt(2·n_layer) */
    double std;        /* [model] init_std: the normal weights' deviation; 0 = 0.02 */
    int llama;         /* the llama arch's names (param_init.c) */
    int tied;          /* llama: lm_head is a tied copy of the embedding */
    /* The plan's second splits by global parameter index (n_second
     * entries; NULL: none), borrowed from the plan, which outlives the
     * rule's use: a slice cut twice maps its elements through both. */
    const plait_shard *second;
    int32_t n_second;
} plait_init_rule;

/* The rule for a described model under `seed`. */
plait_init_rule plait_model_init_rule(const plait_model_desc *desc, uint64_t seed);

/* Layout-independent initial values (the core's host->init_values): each
 * element's value depends only on `rule`, the parameter's global name and
 * the element's global index. Fills local elements [offset, offset+count)
 * of `param`'s slice (its shard; padding positions get 0). `param` must
 * have its shard, local_shape and numel set (plait_param_apply_shard).
 * Pure: thread-safe. */
plait_status plait_model_init_values(const plait_init_rule *rule, const plait_param *param, size_t offset,
                                     size_t count, float *dst);

/* Set p->shard, p->local_shape and p->numel for `shard` (a plan entry),
 * from p's global shape. A shard with parts <= 1 (or dim < 0) is the whole
 * tensor. Fails with PLAIT_ERR_INVALID_ARG if the shard does not fit the
 * shape (split dimension out of range, padded length shorter than the
 * dimension or not a multiple of groups·parts, index out of range).
 * In the model spec, params[i].shard already names the dimension a TP
 * split cuts (dim) and the fused groups (3 for attn.c_attn), with parts 1:
 * a TP plugin copies it and sets parts, index and (for the vocabulary)
 * padded_len. */
plait_status plait_param_apply_shard(plait_param *p, const plait_shard *shard);

/* Cut p's slice (plait_param_apply_shard's, whose p->shard is an expert
 * tensor's ep split: dimension 0, unpadded, one group) a second time by
 * `second` (plait_plan.second_shards, ABI 1.28) on another dimension:
 * narrows local_shape and numel; p->shard stays the first split. A second
 * with dim < 0 or parts <= 1 changes nothing. Fails with
 * PLAIT_ERR_INVALID_ARG, naming the parameter, when the two do not fit. */
plait_status plait_param_apply_second(plait_param *p, const plait_shard *second);

/* The largest ep group a sparse block trades its tokens over (moe.c);
 * train/ refuses a larger [parallel] ep by name. */
#define PLAIT_MODEL_MAX_EP 64

/* One rank's executable part of the model. */
typedef struct plait_model plait_model;

typedef struct plait_model_create_args {
    const plait_plan *plan;     /* shards, layer_stage/chunk, vocab_padded, tp_ops */
    int32_t stage;              /* this rank's pipeline stage */
    plait_param_set *params;    /* local params; data and grad read at each call */
    int32_t max_slots;          /* activation slots to allow (>= 1) */
    /* The schedule splits backwards (plait_model_backward_input/_weight):
     * each slot then keeps, per block, the gradients its weight half reads
     * (with recompute none mostly in buffers the input half leaves dead). */
    int split_backward;
    /* The kernels to compute with; NULL: the open device's
     * (plait_device_kernels). Tests hand in a table without some optional
     * entries to run the model's other paths. */
    const plait_kernels *kernels;
    /* Store activations in bf16 (a bf16 run): what the products read and
     * write, their gradients, and a bf16 copy of the weights the products
     * read, where the kernels offer it (PLAIT_KERNELS_HAS_BF16_ACTIVATIONS)
     * and the model is a GPT with its fused kernels, without tensor
     * parallelism (any [model] recompute, either backward); else (and at
     * 0) float32.
     * The residual stream (but under residual_bf16, below), its gradient,
     * every parameter and gradient stay float32. Such a model keeps no float32 logits: a forward of the head
     * without targets, or with plait_model_keep_logits, is refused. Whether
     * it was granted: plait_model_bf16_activations. */
    int activations_bf16;
    /* The residual stream in bf16 ([run] residual = bf16, Megatron-LM's
     * default on a bf16 run): its values rounded to bf16 after the
     * embedding and after each block, so that a slot stores the block
     * boundaries it keeps to itself in bf16 losslessly and a recomputed
     * block reads the very input its forward read. Needs activations_bf16
     * and the kernels' from_bf16; refused otherwise. 0: float32. */
    int residual_bf16;
    /* Context parallelism: cp ranks on cp_comm share every sequence, this
     * one holding chunks cp_rank and 2cp-1-cp_rank of 2cp (ring_attention.h);
     * the model's tokens and activations are that share. 0 or 1: none. */
    int32_t cp, cp_rank;
    plait_comm *cp_comm;
    /* Expert parallelism: the plan splits the expert tensors
     * (PLAIT_PARAM_EXPERT) over ep_comm's ranks, which trade tokens with
     * all-to-alls (moe.c); NULL without. */
    plait_comm *ep_comm;
    /* The parameters' data is there only between the optimizer's hooks
     * around each forward and backward call of their layer (ZeRO-3:
     * PLAIT_OPTIM_OWNS_PARAMS, plait/optim.h). The bf16 copy of the
     * weights (activations_bf16) then lives as they do: one buffer sized
     * for the largest local layer's copy, each layer's made in it at every
     * call of the layer from its gathered parameters. 0: the copy is whole,
     * each layer's made at its first forward after the weights changed. */
    int params_gathered;
} plait_model_create_args;

/* Build the local model: the layers with layer_stage == stage. Allocates
 * activation memory lazily per slot (tag "activations"). */
plait_status plait_model_create(const plait_model_desc *desc, const plait_model_create_args *args,
                                plait_model **out);
void plait_model_free(plait_model *m);

/* Restrict activation slot `slot` to global layers first..last (a model
 * chunk under an interleaved schedule), so it allocates only what those
 * layers save (and the boundary buffers around them). Before the slot's
 * first use it sets the range; after it, a slot laid out for another
 * range moves to this one in the memory it holds where the two ranges are
 * alike (plait_model_layers_alike), what it held dead: the caller's
 * promise that no micro-batch still needs it (the slot released by the
 * step); any other range is refused (PLAIT_ERR_INVALID_ARG), the same
 * range is a no-op. Forward/backward of a layer outside the slot's range
 * fail. Slots never restricted hold every local layer. */
plait_status plait_model_slot_layers(plait_model *m, int32_t slot, int32_t first, int32_t last);

/* 1 when global layers a_first..a_last and b_first..b_last have the same
 * shapes one for one (as many; the embedding, the head, a dense block and
 * a sparse block each alike only to its own kind), so that what a slot
 * keeps for one range it keeps in the same bytes for the other; else 0. */
int plait_model_layers_alike(const plait_model *m, int32_t a_first, int32_t a_last, int32_t b_first, int32_t b_last);

/* The kind that decides which layers are alike (plait_model_layers_alike):
 * global layer l of a model of n_layer blocks is the embedding (0), the
 * head (1, l > n_layer), a sparse block (2: `sparse`, a block of experts)
 * or a dense one (3). The planner groups a stage's chunks by it as the
 * executor shares their slots (cost/stages.c, cost/rank_cost.c). Pure. */
int plait_model_layer_kind(int32_t l, int32_t n_layer, int sparse);

/* Nanoseconds this model's ring attention (cp > 1) spent blocked on its
 * K/V and dK/dV transfers since the last call, the count then reset: the
 * step's exposed cp communication. 0 at cp = 1. Not thread-safe. */
uint64_t plait_model_take_cp_wait_ns(plait_model *m);

/* Context parallelism: keep, in place, cp rank cp_rank's two chunks (cp_rank
 * and 2cp-1-cp_rank of 2cp) of each of the B rows of `seq` [B, T_local·cp]
 * (tokens or targets): [B, T_local] on return, what set_batch takes. */
void plait_cp_take_local(int32_t *seq, int64_t B, int64_t T_local, int cp, int cp_rank);

/* Attach a micro-batch's tokens and targets ([B,T] int32, copied) to a slot.
 * Needed on the rank holding the embedding (tokens) and the head (targets). */
plait_status plait_model_set_batch(plait_model *m, int32_t slot, const int32_t *tokens,
                                   const int32_t *targets);

/* Scale of d(Σ token losses) used by backward: 1 / (tokens in the global batch).
 * Default 1 / (tokens in one micro-batch). Also each token's weight in the
 * experts' balancing losses. */
void plait_model_set_loss_scale(plait_model *m, float scale);

/* The cross-entropy's scale alone, for a step whose loss leaves targets
 * out (negative ones: [data] eod_mask_loss): 1 / the targets that count
 * in the global batch; the balancing losses keep set_loss_scale's. */
void plait_model_set_target_scale(plait_model *m, float scale);

/* Where a forward with targets leaves the logits. 0 (the default, what
 * training wants): with a device whose table has crossentropy_fused and
 * without tensor parallelism, that forward computes the loss and the
 * logits' gradient in one pass, in place: plait_model_logits is then NULL
 * and the backward starts from the gradient. 1: the logits stay readable
 * until the backward, which turns them into their gradient then (the same
 * values). Set it before the forward. */
void plait_model_keep_logits(plait_model *m, int keep);

/* 1: the forwards until it is 0 again are followed by no backward
 * (evaluation): a head with targets computes the loss alone, none of the
 * gradients its forward may otherwise start (the logits' gradient, and
 * under bf16 activations the head's products' backward). A backward of the
 * head after such a forward fails (PLAIT_ERR_INVALID_ARG) under bf16
 * activations, which keep no logits; with float32 activations it starts
 * from the logits, as with plait_model_keep_logits. Default 0. */
void plait_model_forward_only(plait_model *m, int on);

/* 1 if the model stores its activations in bf16 (create_args.activations_bf16 granted). */
int plait_model_bf16_activations(const plait_model *m);
/* Rows of logits the bf16 head computes at a time (plait_model_head_rows;
 * the micro-batch's B x T when one chunk holds them all), 0 without bf16
 * activations. */
int64_t plait_model_head_chunk_rows(const plait_model *m);
/* Bytes of the bf16 copy of the weights the products read (0 without bf16
 * activations): device memory under the tag "parameters", held while the
 * model lives: every local product weight's copy, or where the parameters
 * are gathered a layer at a time (create_args.params_gathered: ZeRO-3)
 * the largest local layer's; the lent copies not counted
 * (plait_model_lend_weight_copy). */
uint64_t plait_model_weight_copy_bytes(const plait_model *m);
/* Hands the bf16 copy of global parameter gi to the caller, who fills it
 * from then on (an optimizer keeping the float32 master sharded,
 * PLAIT_OPTIM_SHARDS_MASTERS): the model stops making it from the
 * parameter's data, which may then be NULL. NULL where the model keeps no
 * copy of gi (a float32 run, a parameter read in float32) or gi is a tied
 * copy (its values are its original's, read in float32). The copy lives
 * as long as the model. */
plait_bf16 *plait_model_keep_weight_copy(plait_model *m, int32_t gi);
/* Lends the bf16 copy of global parameter gi to an optimizer that gathers
 * the parameter in bf16 itself (PLAIT_OPTIM_GATHERS_COPIES: ZeRO-3): from
 * then on the products read the bf16 values at *slot, which the optimizer
 * sets before each forward and backward call of gi's layer (the model
 * reads the slot when the call starts, and errs naming the parameter
 * where it is NULL), and the parameter's data may be NULL. The slot is
 * the caller's and must outlive the model. 1 where lent; 0 where the
 * model keeps no copy of gi (as plait_model_keep_weight_copy's NULL) or
 * it is kept; -1 out of memory. plait_model_settle_weight_copies then
 * gives back the copies' room. */
int plait_model_lend_weight_copy(plait_model *m, int32_t gi, void *const *slot);
/* After the lending: the copy buffer made again for the copies the model
 * still makes (plait_model_weight_copy_bytes shrinks by the lent ones).
 * Call before the first forward. */
plait_status plait_model_settle_weight_copies(plait_model *m);

/* The rule that grants bf16 activations, stated once: plait_model_create
 * applies it, and the cost model (core/cost) predicts a layout's memory
 * with it. Pure; thread-safe. */
typedef struct plait_bf16_terms {
    int requested;       /* create_args.activations_bf16: a bf16 run */
    int gpt;             /* the gpt arch (the mlp arch has no bf16 path) */
    int kernels;         /* the kernel table runs the bf16 path (plait_model_kernels_bf16) */
    int context_parallel; /* the plan splits sequences over cp ranks (cp > 1) */
    int ring_bf16;        /* the kernel table has ring attention on bf16 (PLAIT_KERNELS_HAS_RING_ATTENTION_BF16) */
    int64_t head_size;    /* the attention's head size */
    int llama;            /* the llama arch (its kernels: plait_model_kernels_llama_bf16) */
    int64_t n_embd;       /* the model's width */
} plait_bf16_terms;
/* 1 when a model with these terms stores its activations in bf16: a bf16
 * run of the gpt arch on kernels that run the whole path, unless the
 * layout needs what the path lacks (ring attention is bf16 where the
 * table has its bf16 entries and the head size is even, the K|V rows
 * packed as pairs: ring_attention.c); with experts too, whose sparse
 * blocks run their MLP half in float32 between the float32 residual
 * stream's rows (moe_bf16.c); of the llama arch likewise, at a width that is a
 * multiple of 8 (llama_bf16.c: its stacked products' bf16 weight copies
 * lie side by side). Tensor and sequence parallelism are covered (gpt_bf16.c:
 * the blocks in bf16 with float32 messages between their products and
 * the collectives; the vocabulary-parallel head float32), every recompute
 * mode (recompute.c rebuilds what it drops in bf16), and a split backward
 * (its weight halves' stash in bf16). */
int plait_model_grants_bf16(const plait_bf16_terms *t);
/* 1 if kernel table k runs the llama arch's bf16-activation blocks
 * (llama_bf16.c): the Llama family's entries in float32 and bf16, the
 * bf16 products, and copy_rows, which packs a projection's columns. */
int plait_model_kernels_llama_bf16(const plait_kernels *k);
/* 1 if kernel table k runs the GPT's bf16-activation path for head size
 * HS: the fused attention (HS within PLAIT_ATTENTION_FUSED_MAX_HS), the
 * fused loss, LayerNorm backward and GELU products, and every bf16 entry
 * (PLAIT_KERNELS_HAS_BF16_ACTIVATIONS). */
int plait_model_kernels_bf16(const plait_kernels *k, int64_t HS);
/* 1 if, under bf16 activations, the products of the gpt model `spec` read
 * its global parameter gi from the bf16 copy: every dense block half's
 * linear layers' weights (not a sparse block's router, which runs
 * float32), the biases of the products whose output is bf16 (c_attn,
 * c_fc), and the head's tied copy where `what` has PLAIT_BF16_COPY_HEAD
 * (the model's: its head's products read bf16 at any tp). Of a llama model: every block's projections and q's, k's and
 * v's biases, and lm_head (tied or not) where `what` has
 * PLAIT_BF16_COPY_HEAD, as the GPT's head. A sparse block's experts and shared experts (every weight
 * and bias) where `what` has PLAIT_BF16_COPY_EXPERTS (plait_model_moe_bf16),
 * else none of them. The model keeps each such local tensor, its numel
 * rounded up to 8, in the copy (plait_model_weight_copy_bytes). */
enum { PLAIT_BF16_COPY_HEAD = 1, PLAIT_BF16_COPY_EXPERTS = 2 };
int plait_model_bf16_copied(const plait_model_spec *spec, int32_t gi, int what);
/* 1 if, under bf16 activations, a sparse block's experts run in bf16
 * (moe_experts_bf16.c): kernel table k has the mixture of experts' bf16
 * entries (PLAIT_KERNELS_HAS_MOE_BF16) and the gpt or llama bf16 path's
 * (gelu_forward_bf16, or swiglu_forward_bf16 and _backward_bf16), and
 * n_embd C and an expert's local width F (moe_ffn_hidden / tp) are
 * multiples of 8, so every expert's rows start 16-byte aligned. Else
 * they run float32 between the bf16 blocks' rows (moe_bf16.c). */
int plait_model_moe_bf16(const plait_kernels *k, int llama, int64_t C, int64_t F);
/* 1 if model m's sparse blocks run their experts in bf16 (its bf16
 * activations granted and plait_model_moe_bf16). */
int plait_model_experts_bf16(const plait_model *m);
/* The bf16 head's chunks (model_slots.c; gpt_bf16.c runs them): under bf16 activations the head
 * computes its logits `rows` rows at a time into the backward scratch,
 * after ln_f's output, where `room` floats follow it (the scratch's
 * bf16 gradients but the first). Rows fill the room, a multiple of 8 (so
 * every chunk's rows start 16-byte aligned), the chunks as even as that
 * allows, at least min(BT, PLAIT_HEAD_MIN_ROWS): *extra (may be NULL)
 * gets the floats the scratch needs beyond `room` for those. Pure;
 * thread-safe; the model and the cost model (core/cost) both ask it. */
#define PLAIT_HEAD_MIN_ROWS 64
int64_t plait_model_head_rows(int64_t BT, int64_t Vl, size_t room, size_t *extra);
/* Elements the bf16 copy gives a tensor of `numel` (16-byte aligned). */
static inline size_t plait_model_bf16_copy_numel(size_t numel) { return (numel + 7) / 8 * 8; }
/* The parameters' data changed (an optimizer step, a load): under bf16
 * activations each layer makes its bf16 copy of the weights again at its
 * next forward. Without bf16 activations it does nothing. Call it after
 * whatever writes the parameters once the model exists. */
void plait_model_weights_changed(plait_model *m);

/* Mixture of experts ([model] moe_*; core/model/moe.c). The routed
 * experts of the description (0: a dense model). */
int32_t plait_model_moe_experts(const plait_model_desc *desc);
/* The share of parameter `p` (of this description) a token's forward
 * uses: a sparse block's routed experts' tensors top_k / experts, the
 * routers' selection bias 0 (it takes part in no product), everything
 * else 1. Parameter counts "active a token" and MFU's FLOPs weigh each
 * tensor by it. Pure; thread-safe. */
double plait_model_param_active(const plait_model_desc *desc, const plait_param *p);
/* What this rank's training forwards routed since the last take (a
 * forward_only one counts nothing), then cleared: counts[l·E + e] the
 * routes block l gave expert e (0 for dense and other stages' blocks;
 * n_layer·E doubles), totals[0] the load-balancing loss, [1] the z-loss
 * (each micro-batch's weighted by its share of the global batch's tokens,
 * summed over the sparse blocks), [2] the routes a capacity dropped. A
 * model without experts writes nothing. */
void plait_model_moe_take(plait_model *m, double *counts, double *totals);
/* DeepSeek-V3's auxiliary-loss-free balancing: each local sparse block's
 * mlp.router.expert_bias (a buffer, below) moved by [model] moe_bias_rate
 * toward the mean load of `counts` (the step's global routes, as take lays
 * them out): up for an expert below it, down above it. No-op at
 * moe_bias_rate = 0. Call it after the optimizer step with the same
 * counts on every rank that holds the block, so the copies stay equal.
 * Fails only on the device's copy error. */
plait_status plait_model_moe_balance(plait_model *m, const double *counts);

/* The model's buffers (PLAIT_PARAM_BUFFER in the description: tensors that
 * are not parameters, which the model keeps whole on every rank holding
 * their layer, zero at creation; model_buffers.c). has: 1 if tensor gi
 * (global index) is a buffer of this rank's layers. read/write copy its
 * whole tensor (the description's numel floats) out to or in from host
 * memory; a tensor that is not such a buffer is an error naming it.
 * Not thread-safe: the thread that drives the model. */
int plait_model_has_buffer(const plait_model *m, int32_t gi);
plait_status plait_model_buffer_read(const plait_model *m, int32_t gi, float *host);
plait_status plait_model_buffer_write(plait_model *m, int32_t gi, const float *host);

/* Forward of one local layer for the slot. The head layer computes the
 * logits and, if targets are set, the loss (Σ over the slot's tokens). */
plait_status plait_model_forward_layer(plait_model *m, int32_t layer, int32_t slot);
/* Backward of one local layer: reads the gradient of its output from the
 * slot, accumulates (+=) into its parameters' grads, writes the gradient of
 * its input. The head starts from the loss. */
plait_status plait_model_backward_layer(plait_model *m, int32_t layer, int32_t slot);
/* The same backward in two halves (zero-bubble schedules; a model created
 * with split_backward): backward_input writes the gradient of the layer's
 * input, as backward_layer does, and keeps in the slot what the other half
 * reads; backward_weight, later, accumulates the parameters' gradients
 * (reading no parameter). The pair gives backward_layer's bits. Between
 * them the slot's layer may not run forward again, nor either half twice
 * (PLAIT_ERR_INVALID_ARG); other layers and slots may run. */
plait_status plait_model_backward_input(plait_model *m, int32_t layer, int32_t slot);
plait_status plait_model_backward_weight(plait_model *m, int32_t layer, int32_t slot);

/* Σ token losses of the slot's last head forward (valid on the head's rank;
 * 0 before any forward with targets). Targets < 0 mark positions without
 * a loss (they contribute 0 and no gradient). The sum lives in device
 * memory: plait_model_loss_sum_device points at it (NULL without a loss),
 * for a trainer that gathers every micro-batch's and reads them once;
 * plait_model_loss_sum copies it to the host (a synchronisation with the
 * device; NaN if the copy fails). */
const double *plait_model_loss_sum_device(const plait_model *m, int32_t slot);
double plait_model_loss_sum(const plait_model *m, int32_t slot);
/* Logits of the last head forward: [B,T,V_local] (V_local = padded vocab / tp;
 * this rank's columns start at tp_rank·V_local; padding columns hold 0), in
 * device memory like every tensor of the model (plait_device_copy reads
 * them). NULL before a forward and after the head's backward, which turns
 * the buffer into the logits' gradient in place, and after a forward with
 * targets that did so itself (plait_model_keep_logits). */
const float *plait_model_logits(const plait_model *m, int32_t slot);

/* Residual-stream buffer [B,T,C] holding the output of `layer` (and, for the
 * pipeline, the input of layer+1), and the buffer for its gradient, for
 * layer in [0, n_layer] (NULL otherwise, or if the slot cannot be
 * allocated). Valid for the slot's lifetime (a received boundary stored in
 * bf16 and the pool's buffers apart: plait_model_boundary_store, and the
 * boundary pool below). Gradient buffers alternate by
 * layer parity: the backward of layer l reads boundary_grad(l) and writes
 * boundary_grad(l-1), so boundary_grad(l)'s contents last until the
 * backward of layer l-1 (enough to send it after the backward of l).
 * Write a gradient buffer only through a pointer this call returned for
 * the backward that reads it: under bf16 activations the model keeps a
 * bf16 copy of the gradient its own backward wrote, and handing the
 * buffer out drops that copy, so what the caller writes is read. */
float *plait_model_boundary(plait_model *m, int32_t slot, int32_t layer);
float *plait_model_boundary_grad(plait_model *m, int32_t slot, int32_t layer);
/* Under a bf16 residual stream a slot stores the boundary it receives
 * (the input of its first layer, another stage's output) in bf16, as it
 * stores those it writes itself, and under [model] recompute_offload =
 * host in host memory: plait_model_boundary then hands out a float32
 * buffer shared by the slots, and this call rounds what the caller wrote
 * there into the slot (exact where the values are bf16 already, as a bf16
 * residual stream's are) or copies it to the host. The model's next layer
 * call or plait_model_boundary call that stages another stores it at the
 * latest, so write the buffer before either. A no-op (PLAIT_OK) for any
 * other boundary. Errors: a failed copy to the host (the device's). */
plait_status plait_model_boundary_store(plait_model *m, int32_t slot, int32_t layer);
/* The boundary pool. A slot holds its boundary gradients (both parities)
 * and the output it sends on to the next stage (its last layer's, in the
 * gradient buffer of that layer's parity) only while they are needed: a
 * layer call or plait_model_boundary_grad takes them from a pool of
 * boundary-sized device buffers shared by the slots (counted in
 * plait_model_activation_bytes; the pool grows to the most held at once
 * and keeps them until plait_model_free), and the caller hands them back:
 *   _release: the slot's gradient buffers back to the pool, all but the
 *     one of `keep`'s parity (keep < 0: all), with the sent output where
 *     it shares one; after the slot's backward has read them.
 *   _detach: the buffer of boundary `layer` (its gradient's, or the sent
 *     output's) no longer the slot's, for the caller to give back once a
 *     send from it completed; NULL if the slot holds none.
 *   _give: a detached buffer back to the pool (NULL: nothing).
 * A buffer taken again holds what its last holder left: the layer calls
 * write every boundary before they read it. */
void plait_model_boundary_release(plait_model *m, int32_t slot, int32_t keep);
float *plait_model_boundary_detach(plait_model *m, int32_t slot, int32_t layer);
void plait_model_boundary_give(plait_model *m, float *buf);
/* Elements of one boundary buffer: B*T*C, or this rank's B*T/tp rows
 * of C under sequence parallelism (what a pipeline stage sends). */
size_t plait_model_boundary_numel(const plait_model *m);

/* Bytes of activation memory currently allocated (all slots, plus the
 * backward scratch shared by every layer and slot). */
uint64_t plait_model_activation_bytes(const plait_model *m);
/* Bytes of pinned host memory the slots hold for the block boundaries
 * [model] recompute_offload = host moves off the device (0 without). */
uint64_t plait_model_host_activation_bytes(const plait_model *m);

#endif
