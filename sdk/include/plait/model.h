/*
 * plait SDK — how parallel and optimizer plugins see the model.
 *
 * The core owns the model (GPT, MLP). It describes it to plugins as an
 * ordered list of *layers* (units of placement and of ZeRO-3 gathering:
 * the embedding, each transformer block, the final norm + head) and an
 * ordered list of *parameters*, each with its global name and shape
 * (nanoGPT names, PyTorch layout) and the slice of it this rank holds.
 *
 * All structures here are owned by the core and stay valid for the whole
 * run unless stated otherwise. Plugins may read them from any thread; they
 * write only the fields documented as theirs.
 */
#ifndef PLAIT_MODEL_H
#define PLAIT_MODEL_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PLAIT_MAX_DIMS 4

/* How a parameter may be split by tensor parallelism (declared by the model,
 * Megatron-LM's vocabulary). */
typedef enum plait_tp_role {
    PLAIT_TP_REPLICATE = 0, /* every TP rank holds all of it (LayerNorm, wpe, row-parallel bias) */
    PLAIT_TP_COLUMN = 1,    /* output features split: dim 0 of a [out, in] weight or of its bias */
    PLAIT_TP_ROW = 2,       /* input features split: dim 1 of a [out, in] weight */
    PLAIT_TP_VOCAB = 3      /* vocabulary rows split: dim 0 of the token embedding, padded */
} plait_tp_role;
/* ABI 1.24: the dimension a column or row split cuts is the one the
 * model's description names in plait_param.shard.dim (a dense [out, in]
 * weight's 0 or 1; a mixture of experts' tensor stacked over its experts,
 * [E, out, in], 1 or 2, so each expert's width splits as a dense MLP's).
 * A tp plugin sets parts and index on that dimension. */

/* The piece of a global tensor one rank holds. Dimension `dim` of the global
 * shape, padded to `padded_len`, is viewed as `groups` equal consecutive
 * groups (3 for a fused q,k,v projection); each group is cut into `parts`
 * equal slices and this rank holds slice `index` of every group, concatenated
 * in group order. Padding positions (global index >= the real length) hold
 * zeros and receive zero gradient.
 * dim = -1 (or parts = 1) means the whole tensor. */
typedef struct plait_shard {
    int32_t dim;
    int32_t parts;
    int32_t index;
    int32_t groups;
    int64_t padded_len; /* length of `dim` after padding; = shape[dim] when unpadded */
} plait_shard;

/* A model parameter's flags (plait_param.flags); a configuration key's
 * flags are plait_key_flag (config.h). */
typedef enum plait_param_flag {
    PLAIT_PARAM_NO_DECAY = 1u << 0, /* biases, LayerNorm, (by nanoGPT's rule: every tensor with ndim < 2) */
    /* A second copy of a tied parameter living on another pipeline stage
     * (the output head's copy of the token embedding). Its gradient is summed
     * with the original's across the embedding group; checkpoints store only
     * the original (`tied_to`). */
    PLAIT_PARAM_TIED_COPY = 1u << 1,
    /* Set by the core (ABI 1.0 addition, on this rank's parameters only) on
     * either member of a tied pair whose other member sits on another
     * pipeline stage (wte on the first stage, its copy on the last). The
     * parallel plugin sums the pair's gradient over the embedding group
     * (PLAIT_GRAD_FINISH_PP, before PLAIT_GRAD_FINISH_OPTIM in the finish
     * order, plait_grad_finisher) and expects each member's gradient
     * already reduced over DP: an optimizer that reduces gradients
     * (PLAIT_OPTIM_REDUCES_GRADS, ZeRO) all-reduces such a parameter's local
     * gradient over DP once it is complete (its last after_backward) and,
     * if it owns gradients, keeps it whole in `grad` until the sum. */
    PLAIT_PARAM_TIED_REMOTE = 1u << 2,
    /* ABI 1.17: a mixture of experts' tensor stacked over the experts
     * (dimension 0 is the expert). With [parallel] ep > 1 the core splits
     * dimension 0 over the ep group (shard.parts = ep, shard.index =
     * ep_rank; the split is not a TP one), so ranks of one dp x cp group
     * hold different experts: the parallel plugin sums such a gradient
     * over mesh->edp_comm (the ranks holding the same experts), not
     * dpcp_comm, and the gradient norm counts it on the first ep group
     * (plait_optim_counts_in_norm). ABI 1.28: with tp > 1 too, each
     * expert's width is cut over tp as well (the plan's second_shards,
     * plait/parallel.h): `shard` stays the ep split and local_shape and
     * numel are the slice cut twice (plait_param_split_twice). */
    PLAIT_PARAM_EXPERT = 1u << 3,
    /* ABI 1.27: a model buffer, not a parameter (a mixture of experts'
     * routers' selection bias, which the core moves after each step as
     * DeepSeek-V3's balancing rule says): listed in the model's
     * description for its name, shape, layer and checkpoint, but in no
     * rank's plait_param_set, so no parallel or optimizer plugin sees it
     * there: it has no gradient and no optimizer state, and the core keeps
     * it whole on every rank of its stage. A parallel plugin planning the
     * description's shards gives it the whole tensor (its tp_role is
     * PLAIT_TP_REPLICATE). */
    PLAIT_PARAM_BUFFER = 1u << 4
} plait_param_flag;

typedef struct plait_param {
    uint32_t struct_size;
    uint32_t flags;              /* PLAIT_PARAM_* */
    const char *name;            /* global name, e.g. "transformer.h.0.attn.c_attn.weight" */
    int32_t index;               /* position in the global parameter list */
    int32_t layer;               /* global index of the owning layer */
    int32_t ndim;
    int64_t shape[PLAIT_MAX_DIMS];       /* global, unpadded */
    plait_tp_role tp_role;
    plait_shard shard;                   /* this rank's slice (TP) */
    int64_t local_shape[PLAIT_MAX_DIMS]; /* shape of the slice this rank holds */
    size_t numel;                        /* elements of the local slice */
    int32_t tied_to;             /* global index of the tied original, or -1 */

    /* Storage of the local slice (float32, row-major). Written by whoever owns
     * the storage (the core, or an optimizer with PLAIT_OPTIM_OWNS_PARAMS /
     * _OWNS_GRADS). May be NULL while released (ZeRO-3 between gathers,
     * ZeRO-2 non-owned gradients); the model only touches `data` of a layer
     * between before_forward/after_forward (before_backward/after_backward)
     * of that layer, and `grad` during that layer's backward. */
    float *data;
    float *grad;
    size_t flat_offset;          /* offset in the core's flat buffers (when the core owns them) */
} plait_param;

/* A layer: the unit of pipeline placement and of ZeRO-3 parameter gathering. */
typedef struct plait_layer {
    uint32_t struct_size;
    const char *name;            /* "embedding", "h.3", "head" */
    int32_t index;               /* global layer index, 0 = first */
    int32_t first_param;         /* its parameters are params[first_param .. first_param+n_params) */
    int32_t n_params;
    double flops_per_token;      /* forward cost estimate, for pipeline balancing */
    size_t activation_bytes;     /* activation memory per micro-batch (one copy), for planning */
} plait_layer;

/* The global model as the core built it from the config, before any split. */
typedef struct plait_model_spec {
    uint32_t struct_size;
    const char *arch; /* "gpt", "llama" or "mlp" */
    int32_t n_layer, n_head, n_embd, block_size, vocab_size;
    int32_t micro_batch;         /* sequences per micro-batch */
    int32_t n_layers;            /* entries in `layers` (embedding + blocks + head for GPT) */
    const plait_layer *layers;
    /* entries in `params`: the global list. data and grad are unset; `shard` is
     * the unsplit shard (parts 1) naming what a TP split would cut: `dim`
     * (0 for COLUMN/VOCAB, 1 for ROW, -1 for REPLICATE) and `groups` (3 for
     * the fused q,k,v projection), so a TP plugin sets parts, index and, for
     * the vocabulary, padded_len. */
    int32_t n_params;
    const plait_param *params;
    size_t total_numel;          /* Σ global numel, tied copies counted once */
    /* ABI 1.10 (read them where struct_size covers them): the key/value
     * heads of grouped-query attention (n_head where every head has its
     * own), and the MLP's width (4·n_embd for gpt; llama's SwiGLU width,
     * its gate, up and down projections that wide). */
    int32_t n_kv_head, ffn_hidden;
} plait_model_spec;

/* The parameters this rank holds after planning, in global order. */
typedef struct plait_param_set {
    uint32_t struct_size;
    int32_t n_params;
    plait_param *params;         /* plugins may write data and grad when they own that storage */
    int32_t n_layers;            /* layers with at least one local parameter */
    const plait_layer *layers;   /* global layer descriptors, indexed by layer index */
    int32_t n_layers_total;
    size_t numel;                /* Σ local numel */
    float *data_flat;            /* core-owned flat storage, or NULL (see plait_param.flat_offset) */
    float *grad_flat;
} plait_param_set;

/* ---- the tied weight ------------------------------------------------------
 * GPT ties the output head to the token embedding: "lm_head.weight"
 * (PLAIT_PARAM_TIED_COPY, tied_to = the index of "transformer.wte.weight")
 * is a second copy of the same tensor. The rules, stated once (the core's
 * side is core/model/tied.c):
 *   - values: the copy always holds its original's values (initialised and
 *     checkpointed under the original's name; one tensor when one rank holds
 *     both, then `data` aliases the original's);
 *   - gradients: the copy keeps its own; the pair's gradient is original +
 *     copy, in that order. When one rank holds both, whoever reduces the
 *     gradients folds it (the core after the reductions, the DP plugin before
 *     them in default mode, an optimizer with PLAIT_OPTIM_REDUCES_GRADS
 *     after reducing); when they sit on different pipeline stages
 *     (PLAIT_PARAM_TIED_REMOTE) the parallel plugin sums the pair over the
 *     embedding group (PLAIT_GRAD_FINISH_PP);
 *   - counting: the copy is counted once, as its original (parameter counts,
 *     gradient norm, optimizer state, checkpoints).
 * These helpers answer the questions a plugin asks; pure, thread-safe. */

/* The global index of the parameter `p` is a tied copy of, or -1 when `p`
 * is not a tied copy. */
static inline int32_t plait_tied_original(const plait_param *p) {
    return (p->flags & PLAIT_PARAM_TIED_COPY) && p->tied_to >= 0 ? p->tied_to : -1;
}

/* 1 if `p`'s slice is cut on a dimension besides its shard's (ABI 1.28: a
 * mixture of experts' tensor at tp > 1 with ep > 1, its experts over ep
 * and each one's width over tp; the second cut is in plait_plan's
 * second_shards). Pure, thread-safe. */
static inline int plait_param_split_twice(const plait_param *p) {
    for (int32_t i = 0; i < p->ndim && i < PLAIT_MAX_DIMS; i++)
        if (i != p->shard.dim && p->local_shape[i] != p->shape[i]) return 1;
    return 0;
}

/* The position in `set` of the parameter with global index `global`, or -1
 * (sets are in global order, so the direct position is tried first). */
static inline int32_t plait_param_set_find(const plait_param_set *set, int32_t global) {
    if (global < 0) return -1;
    if (global < set->n_params && set->params[global].index == global) return global;
    for (int32_t i = 0; i < set->n_params; i++)
        if (set->params[i].index == global) return i;
    return -1;
}

/* The position in `set` of the original of tied copy `p` when this rank holds
 * both (they share values; the copy's gradient is folded into the
 * original's), or -1 (no tied copy, or its original is on another stage). */
static inline int32_t plait_tied_local_original(const plait_param_set *set, const plait_param *p) {
    int32_t o = plait_tied_original(p);
    return o < 0 ? -1 : plait_param_set_find(set, o);
}

/* Sources of initial or restored values, read by whoever owns storage.
 * `which` names the tensor: "param", or an optimizer state name
 * ("exp_avg", "exp_avg_sq"). Fills `count` elements of the *local slice*
 * (its shard) of parameter `param_index`, starting at local element
 * `offset`. Returns PLAIT_ERR_UNSUPPORTED when the source has no such tensor
 * (a fresh run has no optimizer state; the owner then zero-fills).
 * Thread-safe; may be called only during plait_optim_ops.materialize(). */
typedef struct plait_value_source {
    uint32_t struct_size;
    void *ctx;
    /* param_index: the global index (plait_param.index). `dst` is host
     * memory (count floats): with a device open (ABI 1.3) a plugin reads
     * into a host buffer and copies it to the device (plait_tensor_read in
     * plait/device_util.h). */
    plait_status (*read)(void *ctx, int32_t param_index, const char *which, size_t offset,
                         size_t count, float *dst);
} plait_value_source;

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_MODEL_H */
