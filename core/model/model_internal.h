/*
 * Shared by the model's files (core/model/LAYERS lists them, lowest
 * first): the description's indices and the executable model's state.
 * What the files' parts call of each other (tensor parallelism's
 * conjugates, the layer bodies, recomputation) is model_bodies.h.
 *
 * Not thread-safe: one thread drives a model (the kernels it calls use
 * the math thread pool themselves).
 */
#ifndef PLAIT_CORE_MODEL_INTERNAL_H
#define PLAIT_CORE_MODEL_INTERNAL_H

#include <plait/kernels.h>

#include "model/model.h"
#include "model/rope_freq.h"

/* Parameters of one block, in nanoGPT order (indices relative to the
 * block's first parameter). The MLP arch has only the ln_2/mlp part. */
enum {
    BP_LN1_W, BP_LN1_B, BP_ATTN_W, BP_ATTN_B, BP_APROJ_W, BP_APROJ_B,
    BP_LN2_W, BP_LN2_B, BP_FC_W, BP_FC_B, BP_MPROJ_W, BP_MPROJ_B,
    BP_COUNT
};
/* Parameters of one Llama block, in Hugging Face's order; with [model]
 * qkv_bias the biases of q, k and v (LP_QB..LP_VB) lie after v's weight,
 * and with [model] qk_norm the weights of q's and k's norms (LP_QN,
 * LP_KN) after those, both before o's, so the later ones sit LP_BIASES
 * and LP_QK_NORMS further on (desc_llama_param maps an LP_* value to the
 * block's parameter). */
enum { LP_ATTN_NORM, LP_Q, LP_K, LP_V, LP_O, LP_MLP_NORM, LP_GATE, LP_UP, LP_DOWN, LP_COUNT };
enum { LP_QB = LP_COUNT, LP_KB, LP_VB, LP_QN, LP_KN, LP_ALL };
#define LP_BIASES 3
#define LP_QK_NORMS 2

/* A sparse block's parameters in place of its MLP's (after ln_2 /
 * post_attention_layernorm), relative to its first: the router and its
 * selection bias, then each expert tensor stacked over the experts
 * ([E, out, in] weights, [E, out] biases), then the shared experts' as one
 * dense MLP S·F wide. The gpt arch's expert tensors: c_fc weight and
 * bias, c_proj weight and bias; llama's: gate_proj, up_proj, down_proj. */
enum { MOE_ROUTER, MOE_BIAS, MOE_EXPERTS };
#define MOE_GPT_TENSORS 4
#define MOE_LLAMA_TENSORS 3

/* [model] moe_*: the mixture of experts (moe.c; docs/models.md). */
/* plait_model.wbf_kept's values */
enum { WBF_KEPT = 1, WBF_LENT = 2 };

typedef struct moe_desc {
    int32_t experts; /* 0: a dense model */
    int32_t top_k, shared, ffn, every;
    int sigmoid; /* moe_router = sigmoid */
    double aux, z, bias_rate, capacity;
} moe_desc;

/* First MLP-part parameter, and the MLP arch's count per block. */
#define BP_MLP_FIRST BP_LN2_W
#define BP_MLP_COUNT (BP_COUNT - BP_MLP_FIRST)

/* [model] recompute: what a block's forward keeps for its backward. */
typedef enum plait_recompute {
    PLAIT_RECOMPUTE_NONE = 0,      /* every activation the backward reads */
    PLAIT_RECOMPUTE_SELECTIVE = 1, /* all but the attention probabilities and the GELU output */
    PLAIT_RECOMPUTE_FULL = 2       /* only the block's input (the residual stream) */
} plait_recompute;

struct plait_model_desc {
    plait_model_spec spec;
    int is_gpt;   /* the gpt arch (0: mlp or llama) */
    int is_llama; /* the llama arch */
    /* llama: key/value heads, the SwiGLU width, RMSNorm's eps, the
     * rotary base, and whether lm_head is a tied copy of the embedding */
    int32_t n_kv_head, ffn_hidden;
    float norm_eps;
    double rope_theta;
    plait_rope_scaling rope_scaling; /* [model] rope_scaling and its parameters */
    int tied;
    int qkv_bias;    /* llama: q, k and v have biases ([model] qkv_bias) */
    int32_t head_dim; /* llama: the heads' size ([model] head_dim, resolved: never 0) */
    int qk_norm;      /* llama: each head's q and k through an RMSNorm of its own ([model] qk_norm) */
    double init_std; /* [model] init_std (param_init.c) */
    plait_recompute recompute;
    /* [model] recompute_offload = host (recompute full only): the block
     * boundaries a slot keeps for its backward wait in pinned host memory
     * (model_slots.c), as DeepSpeed's cpu_checkpointing keeps them */
    int recompute_offload;
    int32_t n_layer, n_head, n_embd, block_size, vocab_size, micro_batch;
    plait_layer *layers;
    plait_param *params;
    char **names;                /* owned copies of layer/param names */
    int32_t n_names;
    /* global indices of fixed parameters */
    int32_t p_wte, p_wpe, p_lnf_w, p_lnf_b, p_lm_head;
    int32_t params_per_block;    /* BP_COUNT or BP_MLP_COUNT */
    moe_desc moe;
    /* [n_layer]: global index of block l's first MoE parameter (MOE_*),
     * -1 for a dense block */
    int32_t *moe_first;
};

/* 1 if block `l` (0-based) of the description is sparse. */
static inline int desc_block_sparse(const plait_model_desc *d, int32_t l) {
    return d->moe_first && d->moe_first[l] >= 0;
}

/* Global index of block `l`'s parameter `bp` (a BP_* value; for the MLP
 * arch only BP_MLP_FIRST.. are valid). */
static inline int32_t desc_block_param(const plait_model_desc *d, int32_t l, int bp) {
    int first = d->is_gpt ? 0 : BP_MLP_FIRST;
    return d->layers[l + 1].first_param + (bp - first);
}

/* Global index of Llama block `l`'s parameter `lp` (an LP_* value; LP_QB..
 * LP_VB only with qkv_bias, LP_QN and LP_KN only with qk_norm). */
static inline int32_t desc_llama_param(const plait_model_desc *d, int32_t l, int lp) {
    const int biases = d->qkv_bias ? LP_BIASES : 0, norms = d->qk_norm ? LP_QK_NORMS : 0;
    const int at = lp >= LP_QN   ? lp - LP_QN + LP_O + biases
                   : lp >= LP_QB ? lp - LP_QB + LP_O
                   : lp >= LP_O  ? lp + biases + norms
                                 : lp;
    return d->layers[l + 1].first_param + at;
}

/* [model] qk_norm: where k's part of a buffer of q's n elements then k's
 * starts, n rounded up to 32 (a bf16 part stays 64-byte aligned too). */
static inline int64_t plait_qk_norm_k_at(int64_t n) { return (n + 31) / 32 * 32; }

/* Global flat index (row-major over the unpadded global shape) of local
 * element `local` of `p`'s slice, or -1 if it is padding. */
int64_t plait_shard_global_index(const plait_param *p, size_t local);

/* The same for a slice cut twice (plait_param_apply_second): `local`
 * through `second` within the first split's block of experts, then that
 * block's place in the whole tensor. */
int64_t plait_shard_global_index_twice(const plait_param *p, const plait_shard *second, size_t local);

/* Length of the shard's dimension in the local slice (whole tensor: the
 * global length). */
int64_t plait_shard_local_len(const plait_param *p);


/* ---- the executable model (model.c, model_slots.c, gpt_layers.c, mlp.c) ---- */

/* What one block's forward saves for its backward (NULL parts absent).
 * Under recompute, the parts a slot does not keep point into the model's
 * shared recompute buffers (plait_model.rc): the forward writes them as
 * scratch and the block's backward recomputes them there first
 * (recompute.c). */
/* The parts of a block's acts stored in bf16 under bf16 activations
 * (plait_model.bf16; the float32 parts of the same names are then NULL). */
typedef struct block_acts_bf16 {
    plait_bf16 *ln1, *qkv, *atty, *ln2, *fch, *fcg;
    plait_bf16 *gu, *swi; /* llama (llama_bf16.c): gate_proj's and up_proj's outputs side by side, SwiGLU's */
    plait_bf16 *qkn;      /* llama, [model] qk_norm: block_acts.qkn */
} block_acts_bf16;

typedef struct block_acts {
    block_acts_bf16 bf;
    float *ln1, *ln1_mean, *ln1_rstd; /* attention half (GPT only) */
    float *qkv, *att, *atty, *res2;
    float *lse; /* fused attention: each row's log-sum-exp [B,NHl,T] (att is then NULL) */
    float *ln2, *ln2_mean, *ln2_rstd; /* MLP half */
    float *fch, *fcg;                 /* c_fc output, and after GELU; llama: gate_proj's and up_proj's */
    float *swi;                       /* llama: SwiGLU's output, down_proj's input */
    /* llama, [model] qk_norm: q and k before their norms, every row's q
     * heads [BT·NHl,HS] then its k heads [BT·NKVl,HS] (bf16 under bf16
     * activations: bf.qkn), and each head row's reciprocal deviation in
     * the same order */
    float *qkn, *qk_rstd;
} block_acts;

/* Where plait_model.unit holds the k x k identity (16-element aligned),
 * and the bf16 elements it takes. */
#define PLAIT_UNIT_AT(k) ((k) == 8 ? 0 : (k) == 4 ? 64 : (k) == 2 ? 80 : 96)
#define PLAIT_UNIT_BF16 128

/* Which part of a layer's backward to run (plait_model_backward_input /
 * _weight, or both: plait_model_backward_layer). */
typedef enum bwd_part {
    BWD_INPUT = 1,  /* the gradient of the layer's input */
    BWD_WEIGHT = 2, /* its parameters' gradients */
    BWD_ALL = 3
} bwd_part;

/* What a block's weight half reads under bf16 activations (block_grads
 * below says why): in bf16 as the input half's calls read them (the
 * residual stream's gradient rounded once), in the slot's stash
 * (model_slots.c) or, recompute none, c_fc's and c_attn's over those
 * products' outputs, which the input half leaves dead. */
typedef struct block_grads_bf16 {
    plait_bf16 *dy;    /* mlp.c_proj's output's [BT,C] */
    plait_bf16 *dfc;   /* c_fc's, through the GELU [BT,Fl] */
    plait_bf16 *dln2;  /* ln_2's output's [BT,C] */
    plait_bf16 *dres2; /* attn.c_proj's [BT,C] */
    plait_bf16 *dqkv;  /* c_attn's [BT,3Cl] */
    plait_bf16 *dln1;  /* ln_1's output's [BT,C] */
} block_grads_bf16;

/* What a block's weight half reads and its input half computes: the
 * gradients at the outputs of its parameterised operations. Under a split
 * backward each slot keeps them per block from the input half to the
 * weight half: where the slot holds a buffer that is dead after the input
 * half (recompute none: c_attn's output for dqkv, c_fc's for dfch, the
 * attention probabilities for dres2 and dln1 when large enough) the
 * gradient lives there, the rest in the slot's own stash. In one pass they
 * point at the backward scratch. */
typedef struct block_grads {
    block_grads_bf16 bf; /* under bf16 activations, in place of the float32 ones */
    float *dy;    /* gradient of the block's output = mlp.c_proj's [BT,C] */
    float *dfch;  /* of c_fc's output, through the GELU [BT,Fl] */
    float *dln2;  /* of ln_2's output, TP-reduced [BT,C] */
    float *dres2; /* of res2 = attn.c_proj's output [BT,C] (GPT) */
    float *dqkv;  /* of c_attn's output [BT,3Cl] (GPT) */
    float *dln1;  /* of ln_1's output, TP-reduced [BT,C] (GPT) */
    /* llama: dfch holds up_proj's output gradient, dgate gate_proj's, dqkv
     * q's, k's and v's before their rotation, [BT,Wq] */
    float *dgate;
    /* llama, [model] qk_norm: the q and k norms' weight gradients [2,HS],
     * complete over the tp group, which the input half computes with the
     * heads' input gradients and the weight half adds */
    float *dqk_norm;
} block_grads;

typedef struct model_slot {
    int allocated;
    int ranged;                       /* holds only layers first..last (plait_model_slot_layers) */
    int32_t first, last;
    int has_tokens, has_targets, has_loss, has_logits;
    int has_dlogits;                  /* the head's gradient is ready: in `logits` (the fused loss), or under
                                       * bf16 activations in dlnf_bf and head_dw */
    int32_t *tokens, *targets;        /* [B*T] */
    float *mem;                       /* the slot's single allocation */
    size_t mem_bytes;
    /* [n_layer+1]: output of layer l, or NULL; the output the slot sends
     * on (its last layer's, read by the next stage) is its gbuf of that
     * layer's parity, from the pool while it holds one */
    float **bound;
    /* [n_layer+1]: under a bf16 residual stream, the boundaries the slot
     * both writes and reads, stored in bf16 (bound[l] then points at the
     * model's res_x or res_y while a layer runs), or NULL */
    plait_bf16 **bound16;
    /* [n_layer+1]: under [model] recompute_offload = host, those same
     * boundaries in pinned host memory instead (bf16 under a bf16 residual
     * stream, else float32), in host_mem; bound[l] then points at res_x or
     * res_y while a layer runs, as for bound16; or NULL */
    void **host_bound;
    void *host_mem;
    size_t host_bytes;
    /* boundary gradients, by layer parity: buffers of the model's pool
     * (model_slots.c), held from the forward of the output the slot sends
     * or the gradient's arrival until the caller gives them back
     * (plait_model_boundary_release, _detach), NULL while none is held */
    float *gbuf[2];
    block_acts *blocks;               /* [n_layer], by block index */
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *lse, *sumexp, *losses;
    /* bf16 activations: the head runs its backward in its forward, a
     * chunk of rows at a time (gpt_bf16.c), and keeps for the head's
     * backward ln_f's output gradient and lm_head's weight gradient */
    plait_bf16 *dlnf_bf;              /* [BT,C] */
    float *head_dw;                   /* [Vl,C], added to lm_head's gradient by the head's backward */
    /* split backward: per block (by block index), the head's ln_f output
     * gradient, and which layers' weight halves are due (0/1 per layer);
     * the head's weight half reads the logits' gradient from `logits`
     * (under bf16 activations ln_f's output gradient from dlnf_bf and
     * lm_head's from head_dw, head_dln unused) */
    block_grads *wg;
    float *head_dln;
    uint8_t *weight_due;
    /* mixture of experts: per block (by block index), a sparse block's
     * routing and its experts' activations (moe.c), in moe_mem */
    struct moe_acts *moe;
    float *moe_mem;
    size_t moe_bytes;
    /* ... and at ep > 1 the rows this rank's experts computed for the ep
     * group, per block: moe_ep.c's moe_held (host memory: the counts, the
     * places of the rows) and the rows themselves (device memory) */
    void **moe_held;
    float **moe_held_dev;
    size_t moe_held_bytes; /* their sum, counted in the model's act_bytes */
    int32_t moe_first;     /* the range's first layer when moe was carved (a slot moves: model_slots.c) */
} model_slot;

struct plait_model {
    const plait_model_desc *desc;
    const plait_kernels *k;           /* the open device's kernels (the CPU's when none is open) */
    double *loss_dev;                 /* [max_slots] Σ token losses per slot, device memory */
    const plait_plan *plan;
    const plait_tp_ops *tp_ops;       /* NULL = no tensor parallelism */
    /* sequence parallelism (tp_ops->sequence_parallel): the residual stream,
     * its norms and the embedding's output hold R = B·T/tp rows from row0 =
     * tp_rank·R (without it R = B·T, row0 = 0); sp_full [B·T,C] holds a
     * row-parallel product's partial sums or a gathered gradient, sp_local
     * [R,C] a norm's rows before their all-gather or a gradient's after its
     * reduce-scatter, sp_wg [2,C] a norm's partial parameter gradients,
     * sp_ln [B·T,C] (bf16 under bf16 activations: sp_ln_bf) a block norm's
     * output gathered for the column-parallel product that reads it, the
     * slots keeping only this rank's R rows (tp_conjugates.c), allocated
     * with the first slot */
    int sp;
    /* the plan's operators let the backward overlap a column-parallel
     * product's input-gradient reduction with its weight gradient
     * (plait_tp_ops.overlap_input_grads, ABI 1.30; tp_conjugates.c) */
    int tp_overlap;
    int64_t R, row0;
    float *sp_mem, *sp_full, *sp_local, *sp_wg, *sp_ln;
    plait_bf16 *sp_ln_bf;
    size_t sp_bytes;
    int32_t stage;
    plait_param **param;              /* [n_params] global index -> local param or NULL */
    uint8_t *local_layer;             /* [n_layers] 1 if this rank runs it */
    int32_t n_layers;                 /* global layer count */
    int64_t B, T, C, NH, HS, V;
    int32_t tp, tp_rank;
    int64_t NHl, Cl, Fl;              /* local heads, attention width, MLP width */
    int64_t NKV, NKVl, Wq;            /* llama: key/value heads (all, this rank's), a row of this rank's q, k
                                       * and v ((NHl + 2·NKVl)·HS) */
    float *rope_cs;                   /* llama: the rotary angles' cos and sin [2,T,HS/2] (device memory) */
    float *qkv_pack;                  /* llama: q's, k's and v's weights (or gradients) stacked [Wq,C] where a
                                       * layout keeps them apart; allocated then (llama_layers.c) */
    float *qkv_bias_pack; /* llama, [model] qkv_bias: their biases (or gradients) stacked [Wq], as qkv_pack */
    /* llama, [model] qk_norm: the heads' norms' buffers (model_slots.c,
     * plait_model_qk_norm_scratch): two [BT·NHl,HS] float32, under bf16
     * activations a third in bf16, then [2,HS] of the norms' weight
     * gradients */
    float *qkn_scratch;
    size_t qkn_scratch_bytes;
    int64_t Vl, vocab_start, vocab_valid; /* local vocabulary rows */
    float loss_scale;                     /* d(Σ token losses): 1 / the step's tokens that count */
    float token_scale;                    /* a token's share of the batch, 1 / its tokens: the experts' balancing
                                       * losses' weight, whatever the loss leaves out */
    int32_t max_slots;
    int split;                        /* the backward runs in two halves (zero-bubble schedules) */
    int fused_attn;                   /* the device's fused attention (no T×T probabilities) */
    int fused_loss;                   /* the device's crossentropy_fused (used without TP) */
    int fused_ln;                     /* the device's layernorm_backward_fused (one-pass backward) */
    int fused_gelu;                   /* the device's matmul_forward_gelu / matmul_backward_gelu */
    int keep_logits;                  /* plait_model_keep_logits */
    int forward_only;                 /* plait_model_forward_only */
    /* bf16 activations (plait_model_create_args.activations_bf16, where the
     * kernels and the layout allow: model_bf16.c): what the products read and
     * write is stored in bf16 (block_acts_bf16, the head's dlnf_bf, the
     * backward scratch sb), the products read a bf16 copy of their weights
     * (wbf), made again at a layer's first forward after the weights
     * changed (weights_epoch, bumped by plait_model_weights_changed; each
     * layer's copy is of epoch layer_epoch[layer]), or a layer at a time
     * (wbf_per_layer, below) */
    int bf16;
    /* a bf16 residual stream (plait_model_create_args.residual_bf16): the
     * widened input and the float32 output of the running layer, where a
     * slot stores that boundary in bf16 or in host memory (model_slots.c) */
    int residual_bf16;
    float *res_x, *res_y;
    size_t res_bytes;
    /* The boundary a slot receives, stored in bf16: the caller writes it
     * into res_x, free between layers (plait_model_boundary), and
     * plait_model_boundary_store, or the model's next use of res_x, rounds
     * it into the slot; staged_slot -1: nothing waits there */
    int32_t staged_slot, staged_layer;
    /* the head in bf16 too (gpt_bf16.c): bf16 activations without tensor
     * parallelism, whose vocabulary-parallel loss is gpt_layers.c's,
     * float32, its products bf16 (tp_head_bf16.c) */
    int bf16_head;
    /* under bf16 a sparse block's experts run in bf16 too
     * (plait_model_moe_bf16, moe_experts_bf16.c): their rows, hidden
     * tensors and trades, and a bf16 copy of their weights */
    int moe_bf16;
    struct {
        plait_bf16 *dln, *dfc, *datty, *dqkv, *dres; /* dres: the residual stream's gradient, converted once */
        /* llama (llama_bf16.c): SwiGLU's output gradient [BT,Fl], and one
         * projection's columns of a stacked product's output gradient
         * packed [BT, at most max(Cl,Fl)] for its weight gradient */
        plait_bf16 *dswi, *pack;
    } sb;
    /* bf16 activations under tensor parallelism: the identities in bf16
     * whose product widens a bf16 gradient to float32 exactly for the tp
     * group's collectives, which sum float32 (gpt_bf16.c): the k x k one
     * (k = 8, 4, 2, 1) at unit + PLAIT_UNIT_AT(k), in the backward scratch */
    plait_bf16 *unit;
    /* The float32 gradient whose bf16 rounding sb.dres holds, or NULL:
     * set where a LayerNorm backward wrote both (the table's
     * layernorm_backward_fused_bf16_copy) or to_bf16 made it; cleared by
     * what may change either behind the model's back (the head's forward,
     * which borrows the scratch; plait_model_boundary_grad, whose caller
     * may write the gradient). A block half that finds its input gradient
     * here reads sb.dres as it is (gpt_bf16.c). */
    const float *dres_of;
    /* The bf16 head's forward borrows the backward scratch, idle while it
     * runs: ln_f's output over sb.dln, one chunk of head_rows rows of
     * logits over what follows it (plait_model_scratch_get sizes the
     * scratch for both); under tensor parallelism the head's products
     * likewise, ln_f's output in a place of its own after the chunk's
     * (tp_head_bf16.c) */
    plait_bf16 *head_lnf, *head_logits;
    int64_t head_rows;
    plait_bf16 **wbf;                 /* [n_params]: a parameter's bf16 copy, or NULL */
    unsigned char *wbf_kept;          /* [n_params]: WBF_KEPT where the optimizer fills the copy
                                       * (plait_model_keep_weight_copy), WBF_LENT where it
                                       * gathers the bf16 values itself and wbf_slot says where
                                       * (plait_model_lend_weight_copy); the parameter's data
                                       * may then be NULL */
    void *const **wbf_slot;           /* [n_params] or NULL: a lent copy's slot, which the
                                       * optimizer's hook sets before the layer's call */
    int wbf_lent;                     /* some copy is lent */
    plait_bf16 *wbf_mem;
    size_t wbf_bytes;
    /* the parameters are there only while their layer runs (ZeRO-3,
     * create_args.params_gathered): every layer's copy shares wbf_mem,
     * sized for the largest, and is made at each forward and backward
     * call of the layer (unless the buffer still holds it: wbf_layer) */
    int wbf_per_layer;
    int32_t wbf_layer; /* the layer whose copy wbf_mem holds, or -1 */
    uint64_t weights_epoch, *layer_epoch;
    model_slot *slots;
    /* the boundary pool (model_slots.c): buffers of one boundary, R·C
     * floats aligned, which slots hold only while a boundary's gradient
     * or sent output needs one; `pool` every buffer made (pool_n of
     * pool_cap), `pool_idle` of them waiting in pool_free */
    float **pool, **pool_free;
    int32_t pool_n, pool_idle, pool_cap;
    /* shared scratch for backward, allocated on first use */
    float *scratch;
    size_t scratch_bytes;
    float *s_dln, *s_dfc, *s_datty, *s_dqkv, *s_datt, *s_rows;
    float *s_dgate; /* llama: gate_proj's output gradient [BT,Fl] */
    /* the fused attention's scratch (forward and backward, every layer),
     * allocated with the first slot; under fused attention s_datt points here */
    float *att_scratch;
    size_t att_scratch_bytes;
    /* recompute buffers shared by every block and slot (recompute.c):
     * selective holds att and fcg here, full every part of a block (under
     * bf16 activations the parts of block_acts_bf16 in bf16) */
    block_acts rc;
    float *rc_mem;
    size_t rc_bytes;
    uint64_t act_bytes;
    uint64_t host_act_bytes; /* the slots' host_bytes ([model] recompute_offload) */
    /* context parallelism (ring_attention.h): T is this rank's share of
     * the sequence, 2 chunks of block_size / 2cp; cp = 1 without */
    int32_t cp, cp_rank;
    plait_comm *cp_comm;
    uint64_t cp_wait_ns; /* blocked in ring attention's waits since the last take */
    /* expert parallelism (moe.c): this rank holds experts ep_rank·E/ep ..
     * of E, from the expert tensors' shard; ep = 1 without */
    int32_t ep, ep_rank;
    plait_comm *ep_comm;
    int cp_wire_bf16; /* a bf16 run: the ring's K|V blocks travel as bf16 (ring_attention.c) */
    float *ring_mem; /* the ring's K/V blocks, their gradients and row sums (device memory) */
    size_t ring_bytes;
    /* the description's buffers on this rank's layers (model_buffers.c):
     * their entries by global index (data in buffer_mem, no grad; the
     * others zero), m->param pointing at them */
    plait_param *buffers;
    float *buffer_mem;
    size_t buffer_bytes;
    /* mixture of experts (moe.c): the sparse blocks' backward scratch,
     * allocated on first use, and what the forwards routed since the
     * trainer last took it (plait_model_moe_take) */
    float *moe_scratch;
    size_t moe_scratch_bytes;
    /* recompute = full: one sparse block's routing and experts'
     * activations, shared by every slot and block (the slots keep none),
     * and set while the backward reruns a sparse block's forward into them
     * (the routes then counted, and the combine run, once only) */
    float *moe_rc;
    size_t moe_rc_bytes;
    int moe_rerun;
    /* recompute = selective at ep > 1: the held rows' activation function
     * outputs, one device buffer every block shares (moe_ep.c's held_act); under
     * selective moe_rc holds the routed and shared experts' at ep 1 */
    float *moe_held_act;
    size_t moe_held_act_floats;
    /* at ep > 1: the rows this rank's routes send in the dispatch [N·k,C]
     * and the rows its experts send back in the combine [rows,C] (bf16
     * where the experts run bf16), each one device buffer every block
     * shares, dead once its trade has completed (moe_ep.c) */
    float *moe_send_x, *moe_held_y;
    size_t moe_send_x_floats, moe_held_y_floats;
    /* at ep > 1: the held rows' output and input gradients, [rows,C] each,
     * one device buffer every block's backward shares (moe_ep.c's plait_moe_ep_backward),
     * grown to the largest block's rows */
    float *moe_held_grads;
    size_t moe_held_grads_floats;
    int64_t *moe_counts;   /* [n_layer·experts] tokens per block and expert */
    double moe_aux, moe_z; /* Σ over the sparse blocks' forwards of each loss's value */
    int64_t moe_dropped, moe_forwards;
    /* under bf16 activations (moe_bf16.c): the sparse half's float32 norm
     * output and its gradient [B·T,C] each, shared by every sparse block
     * and slot; the output's allocated at the first sparse forward, the
     * gradient's when a backward is to follow; their bytes */
    float *moe_bf16_mem, *moe_bf16_dmem;
    size_t moe_bf16_bytes;
};

/* [model] qk_norm's kept parts of a block (block_acts.qkn, .qk_rstd):
 * elements of q's heads then k's before their norms, and of their
 * deviations, k's part starting at plait_qk_norm_k_at of q's. */
static inline int64_t plait_qk_norm_heads(const plait_model *m) {
    const int64_t BT = m->B * m->T;
    return plait_qk_norm_k_at(BT * m->NHl * m->HS) + BT * m->NKVl * m->HS;
}
static inline int64_t plait_qk_norm_rows(const plait_model *m) {
    const int64_t BT = m->B * m->T;
    return plait_qk_norm_k_at(BT * m->NHl) + BT * m->NKVl;
}

/* The bf16 copies of a block half's product weights (bf16 activations):
 * the projection in (weight, bias) and the one out (weight; its bias is
 * read in float32 by the residual product). */
typedef struct half_bf16 {
    const plait_bf16 *in_w, *in_b, *out_w;
} half_bf16;

/* The parameters a layer body reads, by the part of the model they belong
 * to: their data (forward, input gradients) or their gradients (weight
 * gradients). Each fetch fails with PLAIT_ERR_INVALID_ARG, the message
 * naming the parameter and the layer, when one is not there (not local, or
 * released: the optimizer gathers a layer's parameters before it runs). */
typedef enum param_part { PARAM_DATA, PARAM_GRAD } param_part;
typedef struct embedding_params {
    float *wte, *wpe;
} embedding_params;
/* A block half: its LayerNorm, the projection into the half (attn.c_attn,
 * mlp.c_fc) and the one out of it (attn.c_proj, mlp.c_proj). */
typedef struct half_params {
    float *ln_w, *ln_b, *in_w, *in_b, *out_w, *out_b;
} half_params;
/* The head: the final norm (ln_f; the llama arch's RMSNorm has no bias,
 * ln_b NULL) and the output projection (lm_head, tied to wte or not). */
typedef struct head_params {
    float *ln_w, *ln_b, *w;
} head_params;
plait_status plait_model_embedding_params(plait_model *m, param_part part, embedding_params *out);
/* `first_bp`: BP_LN1_W for the attention half, BP_LN2_W for the MLP half. */
plait_status plait_model_half_params(plait_model *m, param_part part, int32_t layer, int first_bp,
                                     half_params *out);
plait_status plait_model_head_params(plait_model *m, param_part part, head_params *out);
/* The `n` consecutive parameters from global index `first`, all of layer
 * `layer`: their data or gradients into out[0..n) (the Llama bodies). */
plait_status plait_model_tensors(plait_model *m, param_part part, int32_t layer, int32_t first, int32_t n, float **out);
/* Llama block `layer`'s parameters (their data or gradients) into
 * out[LP_ALL], by LP_* value: a sparse block's up to its MLP norm (its
 * experts' are moe.c's), q's, k's and v's biases where [model] qkv_bias
 * gives them, q's and k's norms' weights where [model] qk_norm does (else
 * NULL). */
plait_status plait_llama_block_tensors(plait_model *m, param_part part, int32_t layer, float **out);
/* The bf16 copies of a block half's weights (first_bp as above); of the head's. */
half_bf16 plait_model_half_bf16(const plait_model *m, int32_t layer, int first_bp);
const plait_bf16 *plait_model_head_bf16(const plait_model *m);

plait_status plait_model_tp_error(plait_model *m, plait_status st, const char *what, int32_t layer);
/* The layer's name ("h.3"), for messages. */
const char *plait_model_layer_name(const plait_model *m, int32_t layer);
/* The error for global parameter gi found without its `part` while layer
 * `layer` runs (PLAIT_ERR_INVALID_ARG, the message naming both). */
plait_status plait_model_param_missing(const plait_model *m, int32_t gi, int32_t layer, param_part part);
/* Copy n floats from src to dst unless they are the same buffer (the
 * weight half's inputs: kept in the slot under a split backward, read in
 * place from the scratch in one pass). */
static inline void plait_model_keep(plait_model *m, float *dst, const float *src, size_t n) {
    if (dst != src) m->k->copy(dst, src, n);
}

/* The model's buffers (model_buffers.c): storage for the description's
 * PLAIT_PARAM_BUFFER tensors of local layers, zeroed, m->param set to
 * them (after the parameter set's entries: a set that lists one is not
 * read for it); freed with the model. */
plait_status plait_model_buffers_setup(plait_model *m);
void plait_model_buffers_free(plait_model *m);

/* The bf16 copy of the weights (model_bf16.c). Alloc lays out the local
 * copied parameters' copies (each 16-byte aligned; under wbf_per_layer one
 * layer's at a time in a buffer the largest fills), none made yet: freed
 * with the model. Refresh, before a forward of `layer` (and before each
 * part of its backward where the copy lives only while its layer runs),
 * makes its copies again if the weights changed since (weights_epoch) or
 * another layer's copy took the buffer; the error of a missing parameter. */
plait_status plait_model_bf16_weights_alloc(plait_model *m);
plait_status plait_model_bf16_weights_refresh(plait_model *m, int32_t layer);

/* Activation memory (model_slots.c). Slot `slot`, allocated on first use
 * (with the shared recompute buffers); the backward scratch, allocated on
 * first use; a slot's memory given back (its layer range kept). */
plait_status plait_model_slot_get(plait_model *m, int32_t slot, model_slot **out);
plait_status plait_model_scratch_get(plait_model *m);
void plait_model_slot_release(plait_model *m, model_slot *s);
/* The slot's gradient buffer of parity `parity`, taken from the pool if it
 * holds none; NULL (error set) when the device has no room for one more. */
float *plait_model_slot_grad(plait_model *m, model_slot *s, int parity);
/* Every pool buffer freed (plait_model_free), after the slots'. */
void plait_model_pool_free(plait_model *m);
/* Under bf16 activations, the floats of the backward scratch after sb.dln
 * (the room a chunk of the head's logits borrows: plait_model_head_rows). */
size_t plait_model_head_room(const plait_model *m);
/* 1 if slot s holds what layer l saves: a local layer inside the slot's
 * range (every local layer when the slot is not ranged). */
int plait_model_slot_has(const plait_model *m, const model_slot *s, int64_t l);

#endif
