/*
 * plait SDK — optimizer plugins (kind PLAIT_KIND_OPTIM).
 *
 * An optimizer plugin decides what each rank holds of the parameters, their
 * gradients and the optimizer state, and updates the parameters. The Adam(W)
 * arithmetic itself lives once in the core (host->kernels->adamw); plain Adam
 * and ZeRO-1/2/3 differ only in what they keep and when they communicate.
 *
 * Hyperparameters shared by the Adam family (lr, min_lr, warmup_steps,
 * lr_decay_steps, beta1, beta2, eps, weight_decay, grad_clip) are declared by
 * the core in [optim], so switching `[optim] plugin = adam` to `zero3` is a
 * one-line change; a plugin's own keys live in [optim.<name>].
 *
 * Call sequence per run:
 *   create → materialize → (per step: hooks … → finish_grads → step) → destroy
 * Hooks are called from the training thread, in model order for forward and
 * reverse order for backward, once per layer and local micro-batch.
 */
#ifndef PLAIT_OPTIM_H
#define PLAIT_OPTIM_H

#include <plait/types.h>
#include <plait/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ownership flags (plait_optim_ops.flags). */
enum {
    /* The plugin allocates parameter storage and sets plait_param.data
     * (ZeRO-3). Otherwise the core allocates one flat buffer. */
    PLAIT_OPTIM_OWNS_PARAMS = 1u << 0,
    /* The plugin allocates gradient storage and sets plait_param.grad
     * (ZeRO-2/3). Otherwise the core allocates one flat buffer. */
    PLAIT_OPTIM_OWNS_GRADS = 1u << 1,
    /* The plugin reduces gradients over the DP group itself
     * (reduce-scatter); the DP axis then does no gradient all-reduce. */
    PLAIT_OPTIM_REDUCES_GRADS = 1u << 2,
    /* ABI 1.26: the plugin can keep the float32 master of a parameter the
     * model reads only through its bf16 copy as this rank's shard alone
     * (Megatron-LM's distributed optimizer): where the core passes such a
     * copy in plait_optim_init.weight_copy, it allocates no float32
     * storage for the parameter (plait_param.data stays NULL), and the
     * plugin fills the copy from the master in materialize() and after
     * every step(). */
    PLAIT_OPTIM_SHARDS_MASTERS = 1u << 3,
    /* ABI 1.37, with PLAIT_OPTIM_OWNS_PARAMS: the plugin gathers a
     * parameter the model reads only through its bf16 copy in bf16 itself
     * (PyTorch FSDP's param_dtype = bfloat16): where the core passes
     * plait_optim_init.copy_view, each rank rounds its float32 slice
     * (to_bf16's rounding, as the model would round the gathered whole)
     * and the bf16 slices are all-gathered into a bf16 buffer the products
     * read directly; the model keeps no copy of its own for them and the
     * parameter's data stays NULL. Half the bytes on the wire and in the
     * gathered buffers, and the same bits as a float32 gather. */
    PLAIT_OPTIM_GATHERS_COPIES = 1u << 4
};

typedef struct plait_optim_init {
    uint32_t struct_size;
    const struct plait_host *host;
    const plait_config *config;
    plait_param_set *params;     /* this rank's parameters (TP/PP-local) */
    plait_comm *dp_comm;         /* the group that replicates these parameters (dp x cp with context
                                  * parallelism, ABI 1.13: the mesh's dpcp_comm) */
    plait_comm *world;
    int32_t local_micro_batches; /* per step on this rank (gradient accumulation) */
    int deterministic;           /* [run] deterministic: reduce in canonical order */
    /* ABI 1.20: the group that replicates this rank's expert tensors
     * (PLAIT_PARAM_EXPERT split over ep, plait/model.h): the mesh's
     * edp_comm, the dp x cp / ep ranks holding the same experts; dp_comm
     * itself when ep = 1. A plugin that shards state (ZeRO) shards such a
     * tensor over this group and every other over dp_comm. Borrowed, valid
     * until destroy(). Read it only where struct_size covers it: an older
     * core never runs ep > 1 with an optimizer declaring this minor. */
    plait_comm *edp_comm;
    /* ABI 1.26, only for a plugin declaring PLAIT_OPTIM_SHARDS_MASTERS:
     * NULL, or [params->n_params] pointers to the model's bf16 copies
     * (plait_bf16 elements, numel of them, tensor memory), NULL where the
     * parameter keeps its float32 storage. A parameter with a copy here has
     * data NULL: the plugin keeps its float32 values (its master) and
     * writes their bf16 rounding (to_bf16's) into the copy, every element
     * on every rank of dp_comm, before materialize() and step() return.
     * Borrowed, valid until destroy(). */
    void *const *weight_copy;
    /* ABI 1.37, only for a plugin declaring PLAIT_OPTIM_GATHERS_COPIES:
     * NULL, or [params->n_params] flags, 1 where the model reads the
     * parameter only through bf16 values that the plugin gathers (0: read
     * in float32, or a tied pair's, gathered in float32 as before). Such a
     * parameter's data stays NULL: its hook before each forward and
     * backward call of the parameter's layer sets copy_view[i] to the bf16
     * values (numel of them, tensor memory, 16-byte aligned, every element
     * on every rank of the group), valid until the hook after that call.
     * Both arrays are the core's, valid until destroy(); only the plugin
     * writes copy_view's entries, from the training thread. */
    const unsigned char *copy_gathered;
    void **copy_view;
} plait_optim_init;

/* ABI 1.34: what check() is told of a layout, before any rank starts. The
 * core zero-fills it and sets struct_size to its own size; read a field
 * only where struct_size covers it (a later minor may append fields). */
typedef struct plait_optim_layout {
    uint32_t struct_size;
    int32_t dp;                  /* ranks of the group that replicates the parameters (dp x cp: dp_comm's size) */
    int32_t local_micro_batches; /* per step on each rank (plait_optim_init's) */
    int deterministic;           /* [run] deterministic */
    int host_memory;             /* 1: the ranks' tensor memory is host memory (the cpu device; a CPU
                                  * cluster's nodes in `plait plan`) */
} plait_optim_layout;

/* Per-step facts passed to step(). */
typedef struct plait_optim_step_in {
    uint32_t struct_size;
    int64_t step;                /* 0-based optimizer step being taken */
    /* ABI 1.7: one double of device memory (tensor memory) where the plugin
     * may leave the step's global Σg² instead of reading the norm on the
     * host; the trainer reads it with the step's losses, in the same copy.
     * NULL: not offered (an older core). See step_out.norm_on_device. */
    double *sumsq_dev;
} plait_optim_step_in;

/* What step() reports back for the progress line and metrics. The core
 * zero-fills it and sets struct_size to its own size; a plugin writes only
 * the fields that struct_size covers (plait_fill_versioned does that), so a
 * field a plugin does not know stays 0. */
typedef struct plait_optim_step_out {
    uint32_t struct_size;
    double lr;                   /* learning rate used */
    double grad_norm;            /* global L2 norm before clipping (all ranks, all shards) */
    uint64_t bytes_sent;         /* bytes this rank sent for the optimizer this step */
    /* Seconds step() was blocked waiting on communication (the global-norm
     * all-reduce, ZeRO's parameter all-gather): metrics.csv counts them as
     * communication and the rest of step() as compute. Left 0 by plugins
     * built before the field existed (all of step() is then compute). */
    double wait_seconds;
    /* ABI 1.7: 1 if the plugin left the global Σg² in step_in.sumsq_dev
     * rather than reading it (grad_norm is then not set): the trainer
     * reports its square root, and a value that is not finite ends the run
     * with the step's error; the plugin then changed no parameter (its
     * update read the clipping factor on the device: plait/kernels.h
     * sumsq_clip and adamw_multi). */
    uint32_t norm_on_device;
} plait_optim_step_out;

/* Bytes this rank holds, for the memory report (ZeRO paper accounting). */
typedef struct plait_optim_memory {
    uint32_t struct_size;
    uint64_t param_bytes;        /* persistent parameter storage */
    uint64_t grad_bytes;         /* persistent gradient storage */
    uint64_t state_bytes;        /* optimizer state (fp32: master copy if any, moments) */
    uint64_t buffer_bytes;       /* declared working buffers (buckets, gathered layers) */
    uint64_t padding_elems;      /* elements added to make shards equal */
} plait_optim_memory;

typedef struct plait_optim_ops {
    uint32_t struct_size;
    uint32_t flags;              /* PLAIT_OPTIM_* */
    /* Names of the per-parameter state tensors, NULL-terminated
     * (Adam: "exp_avg", "exp_avg_sq"), or NULL for an optimizer without
     * state (plain SGD). Checkpoints store each as
     * "optim.<state>.<param name>" so Adam-family plugins resume each other.
     * Owned by the plugin (a static array in practice); read by the core at
     * any time while the plugin is loaded, never freed by it. */
    const char *const *state_names;

    /* Required: create, materialize, step, export_tensor, memory and
     * destroy (the loader refuses a table without one, naming it); every
     * other function is optional (NULL). */
    plait_status (*create)(const plait_optim_init *init, void **state);
    /* Allocate what the plugin owns and fill it from `src` (initial values or
     * a checkpoint). For tensors `src` lacks (optimizer state of a fresh run)
     * fill zeros. When the core owns parameter storage it has filled it
     * already. Collective over the DP group. */
    plait_status (*materialize)(void *state, const plait_value_source *src);

    /* Layer hooks. ZeRO-3 gathers a layer's parameters in before_* and
     * releases them in after_*; ZeRO-2 reduce-scatters a layer's gradients in
     * after_backward. `last` is 1 on the last local micro-batch. Optional.
     * Under a schedule that splits the backward (PLAIT_INSTR_BACKWARD_INPUT
     * and _WEIGHT, ABI 1.6) the input half of a layer's backward, which
     * reads the parameters but writes no gradient, is bracketed by
     * before_forward/after_forward, and the weight half, which writes the
     * gradients, by before_backward/after_backward; a layer's weight halves
     * come in micro-batch order, so `last` still ends its step. */
    plait_status (*before_forward)(void *state, int32_t layer, int32_t mb);
    plait_status (*after_forward)(void *state, int32_t layer, int32_t mb);
    plait_status (*before_backward)(void *state, int32_t layer, int32_t mb);
    plait_status (*after_backward)(void *state, int32_t layer, int32_t mb, int last);

    /* Complete every gradient reduction the plugin started. Optional. */
    plait_status (*finish_grads)(void *state);
    /* Clip by the global norm and update. Collective over the world.
     * Gradients: where the core owns their storage (no
     * PLAIT_OPTIM_OWNS_GRADS) it zeroes them all at the start of each step,
     * before the first forward, and the backward adds each micro-batch's
     * into them; step() may overwrite them in place (clipping, unscaling),
     * as the core reads none after step() until it zeroes them again. A
     * plugin that owns them zeroes its own. */
    plait_status (*step)(void *state, const plait_optim_step_in *in, plait_optim_step_out *out);

    /* Checkpointing: write into `dst` the whole local slice (its TP shard)
     * of parameter `param_index` (the global index, plait_param.index)'s tensor `which` ("param" or a state name),
     * gathered over the DP group. Collective over the DP group; `dst` is only
     * written on DP rank 0 and may be NULL elsewhere. `dst` is host memory:
     * with a device open (ABI 1.3) the plugin copies its tensors out with
     * the device's copy (plait_tensor_to_host in plait/device_util.h). */
    plait_status (*export_tensor)(void *state, int32_t param_index, const char *which, float *dst);
    /* Optimizer scalars saved with the checkpoint (e.g. the step count used
     * by bias correction). Optional. */
    int64_t (*get_step)(void *state);
    void (*set_step)(void *state, int64_t step);

    /* Fill the memory report. Never fails. */
    void (*memory)(void *state, plait_optim_memory *out);
    void (*destroy)(void *state);

    /* Sharded checkpoints (ABI 1.15): the part of parameter `param_index`'s
     * local slice (its TP shard) of tensor `which` that this DP rank writes,
     * without communication: local elements [*offset, *offset + *count).
     * The parts of the DP group's ranks are disjoint and together cover the
     * slice; a tensor the group holds replicated is reported whole by DP
     * rank 0 and as *count = 0 by the others. With `dst` (host memory,
     * *count floats) the part is copied into it; NULL only reports the
     * range. Not collective. Optional (check PLAIT_OPTIM_HAS): without it
     * the core gathers each slice onto DP rank 0 with export_tensor. */
    plait_status (*export_shard)(void *state, int32_t param_index, const char *which, size_t *offset, size_t *count,
                                 float *dst);
    /* Asynchronous sharded checkpoints (ABI 1.19): the part export_shard
     * reports (*offset, *count the same) and *src, where its first element
     * lives in tensor memory, so that the core copies it to host memory
     * itself, on the device's communication stream while the next step
     * computes ([run] ckpt_async), and orders the optimizer's next step()
     * after that copy. *src stays valid, and unchanged but by step(), until
     * destroy(). *src NULL where the part is not one run of tensor memory
     * (offloaded to host or NVMe): the core then calls export_shard. Not
     * collective. Optional (PLAIT_OPTIM_HAS): without it the core copies
     * through export_shard at the save's step. */
    plait_status (*shard_source)(void *state, int32_t param_index, const char *which, size_t *offset, size_t *count,
                                 const float **src);
    /* The flags of a run with configuration `cfg` (ABI 1.31; `host` to read
     * it with, the same table create() gets), where the
     * plugin's keys change them: `flags` plus PLAIT_OPTIM_OWNS_GRADS (e.g.
     * zero1 with [optim.zero1] grad_accum = bf16 keeps its gradients
     * itself); no other bit may differ from `flags`. Called by the core
     * before it allocates storage, before create(); pure, thread-safe.
     * Optional (PLAIT_OPTIM_HAS): without it the flags are `flags`. */
    uint32_t (*flags_for)(const struct plait_host *host, const plait_config *cfg);
    /* The refusals create() would make for configuration `cfg` on
     * `layout`, made before any rank starts (ABI 1.34; `host` to read cfg
     * with, the table create() gets): PLAIT_OK, or PLAIT_ERR_INVALID_CONFIG
     * with the reason set through host->set_error, naming the key, where
     * it was set (host->config_where) and what would work. The core calls
     * it in `plait config check`, in the launcher of `plait train` and in
     * a run of one process, so a mistake is said once, not by every rank;
     * and in `plait plan` for every layout it weighs with this optimizer,
     * setting aside those it refuses (`cfg` may then name another
     * optimizer in [optim] plugin: read the plugin's own keys and the
     * core's). Check only what `cfg` and `layout` decide: create() still
     * checks everything (a rank may be started by another launcher).
     * Pure, thread-safe. Optional (PLAIT_OPTIM_HAS): without it the ranks'
     * create() says each refusal, as before. */
    plait_status (*check)(const struct plait_host *host, const plait_config *cfg, const plait_optim_layout *layout);
} plait_optim_ops;

/* True if optimizer table `o` (from a plugin built against a possibly older
 * SDK) has member `field` set. */
#define PLAIT_OPTIM_HAS(o, field)                                                                                      \
    ((o)->struct_size >= offsetof(plait_optim_ops, field) + sizeof((o)->field) && (o)->field != NULL)

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_OPTIM_H */
