/*
 * plait SDK — parallelism plugins (kind PLAIT_KIND_PARALLEL).
 *
 * The world is a mesh dp × cp × tp × pp built by the core from [parallel]
 * (`dp`, `cp`, `tp`, `pp`, `order`; ABI 1.13 added cp, and ep carved out of
 * dp × cp); the core splits the world communicator into the DP, CP, TP, PP,
 * dp × cp, EP and expert-DP groups. A parallel plugin turns that mesh into a *plan*
 * — which layers this rank runs (PP), which slice of each parameter it holds
 * (TP), which micro-batches it computes (DP), and the per-step list of
 * instructions (the schedule) — and takes part in the step through hooks:
 * gradient-ready notifications (DP bucket reduction), the tensor-parallel
 * conjugate operators called by the model (TP), and gradient finishing.
 *
 * Each of dp, tp, pp is a single-axis plugin; `hybrid` composes them
 * (host->plugin_ops() gives it the others). The core calls, per run:
 *   create → plan → bind → (per step: begin_step → hooks → finish_grads) → destroy
 * create and plan must not communicate: before starting a job's ranks (and
 * in `plait config check`) the core calls create → plan → destroy once for
 * every rank's mesh coordinates, with NULL communicators, so that a layout
 * mistake is reported once instead of by every rank.
 * All calls come from the training thread unless stated otherwise; errors
 * are reported with host->set_error().
 */
#ifndef PLAIT_PARALLEL_H
#define PLAIT_PARALLEL_H

#include <plait/types.h>
#include <plait/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This rank's place in the mesh and its groups. Communicators are owned by
 * the core and live for the whole run. */
typedef struct plait_mesh {
    uint32_t struct_size;
    int32_t dp, tp, pp;               /* axis sizes; world size = dp*tp*pp */
    int32_t dp_rank, tp_rank, pp_rank;
    int32_t world_rank, world_size;
    plait_comm *world;
    plait_comm *dp_comm;              /* same tp_rank and pp_rank */
    plait_comm *tp_comm;              /* same dp_rank and pp_rank */
    plait_comm *pp_comm;              /* same dp_rank and tp_rank; rank = pp_rank */
    /* First and last pipeline stage of this pipeline (same dp, tp ranks) when
     * pp > 1 and this rank is on one of them; NULL otherwise. */
    plait_comm *embed_comm;
    const char *order; /* e.g. "tp,dp,pp": innermost first, as configured */
    /* --- ABI 1.13: context and expert parallelism ----------------------
     * Read these where struct_size covers them (PLAIT_MESH_HAS); an older
     * core's mesh is cp = ep = 1. With cp > 1 the world is dp*cp*tp*pp and
     * dp_comm, tp_comm, pp_comm and embed_comm also share the cp rank.
     * A context-parallel rank holds a share of every sequence of its dp
     * rank's micro-batches (the same micro-batches as its cp peers), so the
     * dense parameters' gradients are summed over dpcp_comm, not dp_comm. */
    int32_t cp, cp_rank;   /* context-parallel size; this rank's place on the ring */
    int32_t ep, ep_rank;   /* expert-parallel size (divides dp*cp); rank in ep_comm */
    int32_t dpcp_rank;     /* rank in dpcp_comm: dp and cp nested as `order` nests them */
    plait_comm *cp_comm;   /* same dp, tp, pp ranks; rank = cp_rank; NULL when cp = 1 */
    plait_comm *dpcp_comm; /* same tp and pp ranks (dp*cp members): the dense gradients'
                                       * group; the same communicator as dp_comm when cp = 1 */
    plait_comm *ep_comm;   /* ep consecutive members of dpcp_comm (dpcp_rank / ep equal);
                                       * rank = ep_rank; NULL when ep = 1 */
    plait_comm *edp_comm;  /* members of dpcp_comm with this ep_rank (dp*cp/ep of them):
                                       * the experts' gradients; dpcp_comm itself when ep = 1 */
} plait_mesh;

/* 1 if mesh m has field `field` (ABI 1.13's cp and ep fields). */
#define PLAIT_MESH_HAS(m, field) ((m)->struct_size >= offsetof(plait_mesh, field) + sizeof((m)->field))

/* Step-schedule instructions: a pure list per stage, testable without
 * communication. Sends are asynchronous (posted, completed before the buffer
 * is reused or at REDUCE_GRADS); receives block until the data is there. */
typedef enum plait_instr_op {
    PLAIT_INSTR_FORWARD = 1,      /* forward of model chunk `chunk` for micro-batch `mb` */
    PLAIT_INSTR_BACKWARD = 2,     /* backward of the same */
    PLAIT_INSTR_RECV_ACT = 3,     /* receive the chunk's input activation from the previous stage */
    PLAIT_INSTR_SEND_ACT = 4,     /* send the chunk's output activation to the next stage */
    PLAIT_INSTR_RECV_GRAD = 5,    /* receive the gradient of the chunk's output from the next stage */
    PLAIT_INSTR_SEND_GRAD = 6,    /* send the gradient of the chunk's input to the previous stage */
    PLAIT_INSTR_REDUCE_GRADS = 7, /* finish every gradient reduction (DP, ZeRO, embedding group) */
    PLAIT_INSTR_OPTIM_STEP = 8,
    /* ABI 1.6: the backward of (chunk, mb) in two halves, for zero-bubble
     * schedules. BACKWARD_INPUT computes the gradient of the chunk's input
     * (what SEND_GRAD sends; it needs the gradient of the output, as
     * BACKWARD does); BACKWARD_WEIGHT, later, the gradients of the chunk's
     * parameters. A list gives each (chunk, mb) either one BACKWARD or
     * BACKWARD_INPUT followed by BACKWARD_WEIGHT; the pair computes the
     * same bits as BACKWARD. A core older than 1.6 refuses them as unknown
     * instructions, so a plugin emitting them declares abi_minor >= 6 or
     * checks host->abi_version. */
    PLAIT_INSTR_BACKWARD_INPUT = 9,
    PLAIT_INSTR_BACKWARD_WEIGHT = 10
} plait_instr_op;

typedef struct plait_instr {
    uint16_t op;      /* plait_instr_op */
    uint16_t chunk;   /* model chunk on this stage (0 unless interleaved) */
    int32_t mb;       /* micro-batch index within this rank's micro-batches, or -1 */
} plait_instr;

/* Tensor-parallel conjugate operators, called by the model on the TP group
 * (Megatron's f and g): `enter` is identity in forward and all-reduce of the
 * input gradient in backward; `exit` is all-reduce of the partial output in
 * forward and identity in backward. The vocab-parallel cross-entropy uses
 * `reduce_max`/`reduce_sum` on small per-token vectors. Each function operates
 * in place on `count` floats and is blocking. NULL table = no TP.
 * Ownership and lifetime: the table and its `ctx` belong to the parallel
 * plugin's state; they must stay valid from plan() until the plugin's
 * destroy(), and the core stops calling them before destroy(). The model
 * calls them only from the thread that drives the run, inside forward and
 * backward, so they need no locking of their own. */
typedef struct plait_tp_ops {
    uint32_t struct_size;
    void *ctx;
    plait_status (*enter_backward)(void *ctx, float *grad, size_t count); /* f, backward */
    plait_status (*exit_forward)(void *ctx, float *out, size_t count);    /* g, forward */
    plait_status (*reduce_max)(void *ctx, float *x, size_t count);
    plait_status (*reduce_sum)(void *ctx, float *x, size_t count);
    /* ABI 1.14: sequence parallelism (Megatron-LM's; read these where
     * struct_size covers them). With `sequence_parallel` 1 the model keeps
     * the residual stream, its norms and the embedding's output split by
     * rows (tokens) over the TP group, rank r holding the r-th of tp equal
     * runs of the B*T rows (`count` floats: its rows times n_embd), in
     * token order: before a column-parallel product
     * it calls `allgather` (local `count` floats in, tp*count out, in rank
     * order; in backward the conjugate `reduce_scatter`), after a
     * row-parallel one `reduce_scatter` (tp*count partial sums in, this
     * rank's `count` summed floats out, the sum of each element in the
     * order the all-reduce of the same group would take: in deterministic
     * mode the same bits as exit_forward's; in backward `allgather`).
     * The buffers do not overlap. With `req` NULL the call blocks; with
     * `req` non-NULL it may return before the data moved, leaving in *req
     * a request that `wait` finishes (NULL: already done), the buffers the
     * plugin's until then. With `sequence_parallel` 0 the three may be
     * NULL. */
    int32_t sequence_parallel;
    plait_status (*allgather)(void *ctx, const float *local, float *full, size_t count, void **req);
    plait_status (*reduce_scatter)(void *ctx, const float *full, float *local, size_t count, void **req);
    plait_status (*wait)(void *ctx, void *req);
    /* ABI 1.30: the backward's overlap (Megatron-LM's asynchronous
     * tensor-parallel reduction). With `overlap_input_grads` 1 the model
     * starts a column-parallel product's input-gradient reduction (f's
     * all-reduce through `enter_backward_start`, or under sequence
     * parallelism `reduce_scatter` with a request) before the product's
     * weight gradient, and `wait`s for it after: the same sums, in the same
     * order, as the blocking call's; under sequence parallelism it also
     * starts the backward's second `allgather` of a norm's output with a
     * request before the products ahead of the weight gradient that reads
     * it. `enter_backward_start` takes `req` as `allgather` does; `wait`
     * is then non-NULL whatever `sequence_parallel`. 0 (or a table without
     * these fields): every reduction and gather blocks. */
    int32_t overlap_input_grads;
    plait_status (*enter_backward_start)(void *ctx, float *grad, size_t count, void **req);
} plait_tp_ops;

/* True if `ops` (a table from a possibly older plugin) has member `field`. */
#define PLAIT_TP_OPS_HAS(ops, field) ((ops)->struct_size >= offsetof(plait_tp_ops, field) + sizeof((ops)->field))

/* The plan a parallel plugin fills in plan(). The core prefills the
 * single-process plan (everything local, no split, the plain
 * forward/backward schedule), then each plugin edits the parts of its axis.
 * Arrays are allocated by the core with the sizes given. */
typedef struct plait_plan {
    uint32_t struct_size;
    /* Per global parameter: this rank's slice (TP). */
    int32_t n_params;
    plait_shard *shards;
    /* Per global layer: pipeline stage and model chunk (virtual stage) that
     * runs it. Chunk c of stage s holds a contiguous range of layers;
     * in model order chunks run (c=0,s=0), (0,1), ..., (0,pp-1), (1,0), ... */
    int32_t n_layers;
    int32_t *layer_stage;
    int32_t *layer_chunk;
    int32_t chunks;              /* model chunks per stage (virtual_stages), >= 1 */
    /* Vocabulary after padding (TP): a multiple of tp. */
    int32_t vocab_padded;
    /* Micro-batches: this rank computes `micro_batches` of them, global
     * micro-batch indices first_micro_batch + [0, micro_batches). */
    int32_t micro_batches;
    int64_t first_micro_batch;
    /* The per-step schedule for this rank. The core provides `capacity`
     * entries; a plugin needing more sets n_instr to the needed count and
     * returns PLAIT_ERR_NO_MEMORY, and the core retries with that capacity. */
    plait_instr *schedule;
    size_t n_instr, capacity;
    /* TP operators handed to the model (NULL without TP); owned by the
     * plugin's state, valid until its destroy() (see plait_tp_ops). */
    const plait_tp_ops *tp_ops;
    /* Text shown at startup ("pp=4 1f1b: bubble (p-1)/(m+p-1) = 27.3%"). */
    char summary[256];
    /* Expected idle share of the schedule (the bubble), or -1 if none. */
    double bubble_formula;
    /* ABI 1.28: per global parameter, the second split of a tensor cut
     * twice, {dim -1, parts 1} for every other (plait_shard's fields, the
     * same geometry). At [parallel] tp > 1 with ep > 1 a mixture of experts'
     * tensor (PLAIT_PARAM_EXPERT, [E, out, in]) is cut over ep on dimension
     * 0, which stays its `shards` entry (and plait_param.shard, so every
     * rule keyed on the expert split holds), and over tp on the dimension
     * its description names (1 or 2), which is this entry. Allocated and
     * filled by the core after every plugin's plan(): a tp plugin splits
     * an expert tensor in `shards` as it always has, and the core moves
     * that split here. Plugins read it, never write it; NULL from a core
     * before 1.28 (check with PLAIT_PLAN_HAS). */
    plait_shard *second_shards;
} plait_plan;

/* True if `plan` (from a possibly older core) has member `field`. */
#define PLAIT_PLAN_HAS(plan, field) ((plan)->struct_size >= offsetof(plait_plan, field) + sizeof((plan)->field))

typedef struct plait_parallel_init {
    uint32_t struct_size;
    const struct plait_host *host;
    const plait_config *config;
    const plait_mesh *mesh;
    const plait_model_spec *model;
    int deterministic;           /* [run] deterministic */
    /* --- ABI 1.35 (read where struct_size covers it) -------------------
     * The run's optimizer reduces the gradients over the DP group itself
     * (PLAIT_OPTIM_REDUCES_GRADS: ZeRO), as plait_parallel_bind says again
     * at bind. Told at create, which the core also calls before any rank
     * starts (above), so that a plugin refuses there, once, a setting the
     * optimizer would leave unused (plait's dp: its grad_compression). */
    int optim_reduces_grads;
} plait_parallel_init;

/* What the plugin gets once storage exists (bind). */
typedef struct plait_parallel_bind {
    uint32_t struct_size;
    plait_param_set *params;
    /* The optimizer reduces gradients over the DP group itself (ZeRO-2/3):
     * the DP axis must not all-reduce them. */
    int optim_reduces_grads;
    /* Gradients are divided by the global token count before reduction,
     * so DP sums (it never averages twice). Always 1 in ABI v1. */
    int grads_prescaled;
} plait_parallel_bind;

/* Per-step counters a parallel plugin reports (fills up to struct_size). */
typedef struct plait_parallel_stats {
    uint32_t struct_size;
    uint64_t bytes_sent;        /* payload bytes this rank sent for the axis */
    double wait_seconds;        /* time the training thread was blocked on the axis's communication */
    uint32_t reductions;        /* gradient reductions (buckets) completed */
    uint32_t early_reductions;  /* ... of which were started before the backward pass ended */
    /* The same split by mesh axis (index: 0 dp, 1 tp, 2 pp); a single-axis
     * plugin fills its own entry, a composing plugin all of them. */
    uint64_t axis_bytes[3];
    double axis_wait_seconds[3];
} plait_parallel_stats;

/* Mesh axes a parallel plugin handles (plait_parallel_ops.axes). */
enum {
    PLAIT_PARALLEL_AXIS_DP = 1u << 0,
    PLAIT_PARALLEL_AXIS_TP = 1u << 1,
    PLAIT_PARALLEL_AXIS_PP = 1u << 2,
    /* ABI 1.13. CP: the plugin takes cp ranks as sharing their dp rank's
     * micro-batches and sums the dense gradients over mesh->dpcp_comm (and
     * gives the optimizer that group). EP: it handles expert parameters'
     * groups (ep_comm, edp_comm). A plugin without the bit is refused with
     * cp > 1 (or ep > 1): its sums would miss the other ranks' shares. */
    PLAIT_PARALLEL_AXIS_CP = 1u << 3,
    PLAIT_PARALLEL_AXIS_EP = 1u << 4
};

/* Who finishes a step's gradients once the last backward is done, in the
 * order the core defines (host->grad_finish_order, ABI 1.2; one definition,
 * core/layout/grad_order.c, which the core's step executor and the hybrid
 * plugin both walk):
 *   1. DP:    the parallel plugin sums over the DP group (buckets started in
 *             grads_ready are completed);
 *   2. PP:    the parallel plugin sums each tied pair (PLAIT_PARAM_TIED_REMOTE)
 *             over the embedding group, on DP-reduced values;
 *   3. TP:    the parallel plugin's tensor-parallel finish;
 *   4. OPTIM: the optimizer's finish_grads (ZeRO reduce-scatters; an
 *             optimizer with PLAIT_OPTIM_REDUCES_GRADS adds its tied copies
 *             there, after reducing);
 *   5. TIED:  the core adds a local tied copy's gradient to its original
 *             (when the core owns gradients).
 * A plugin implementing several axes finishes them in this order inside its
 * one finish_grads. Within the backward, per layer (last layer first) and
 * micro-batch: the model's backward, the deterministic tree's fold, the
 * optimizer's after_backward, the parallel plugin's grads_ready. */
typedef enum plait_grad_finisher {
    PLAIT_GRAD_FINISH_DP = 1,
    PLAIT_GRAD_FINISH_PP = 2,
    PLAIT_GRAD_FINISH_TP = 3,
    PLAIT_GRAD_FINISH_OPTIM = 4,
    PLAIT_GRAD_FINISH_TIED = 5
} plait_grad_finisher;

typedef struct plait_parallel_ops {
    uint32_t struct_size;
    /* PLAIT_PARALLEL_AXIS_* this plugin implements; the core refuses a mesh
     * with an axis > 1 that the selected plugin does not handle. */
    uint32_t axes;
    /* Check the layout against the model (e.g. n_head % tp) and create state. */
    plait_status (*create)(const plait_parallel_init *init, void **state);
    /* Edit the core-prefilled plan for this plugin's axis. */
    plait_status (*plan)(void *state, plait_plan *plan);
    /* Storage exists and holds the initial values: e.g. broadcast parameters
     * from DP rank 0 and verify a checksum; set up gradient buckets. */
    plait_status (*bind)(void *state, const plait_parallel_bind *bind);
    /* A step begins (step counts from 0 in the run, resumed steps included). */
    plait_status (*begin_step)(void *state, int64_t step);
    /* Layer `layer`'s backward for local micro-batch `mb` has produced its
     * gradients; `last` is 1 on the last local micro-batch of the step (the
     * moment a DP plugin may start reducing that layer's bucket). Optional. */
    plait_status (*grads_ready)(void *state, int32_t layer, int32_t mb, int last);
    /* Complete every reduction started this step, axes in the order of
     * plait_grad_finisher; on return gradients hold the sum over the DP
     * group (and the embedding group). Optional. */
    plait_status (*finish_grads)(void *state);
    /* Counters of the last step (since begin_step) for metrics. Optional. */
    void (*step_stats)(void *state, plait_parallel_stats *out);
    void (*destroy)(void *state);
} plait_parallel_ops;

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_PARALLEL_H */
