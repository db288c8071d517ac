/*
 * Layouts of N ranks: enumerating the candidates along chosen axes, naming
 * them (and reading a name back), and evaluating one through the plan its
 * parallel plugin makes, with the checks `plait train` runs before it
 * starts (train/preflight.h). search.h weighs whole spaces from the model's
 * shape (stages.h) and confirms the best through plait_cost_evaluate.
 *
 * Which axes vary and over which values is a plait_cost_axes; an axis that
 * does not vary keeps the config's setting, except the micro-batch, which is
 * global_batch / dp without a pipeline and 1 with one (so m = global_batch /
 * dp micro-batches fill it, as Megatron-LM users set it).
 *
 * Not thread-safe (the loader callback and the preflight use the calling
 * thread's error slot). Nothing here allocates beyond the caller's arrays,
 * except plait_cost_evaluate while it runs.
 */
#ifndef PLAIT_CORE_COST_LAYOUTS_H
#define PLAIT_CORE_COST_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "cost/activations.h"
#include "cost/cost.h"

#define PLAIT_COST_MAX_VALUES 32

typedef struct plait_cost_layout {
    int dp, tp, pp;
    char schedule[16];   /* gpipe, 1f1b, interleaved, zb1; "" without a pipeline */
    int chunks;          /* model chunks per stage (interleaved's virtual stages), 1 otherwise */
    char optim[16];      /* adam, zero1, zero2, zero3 */
    int64_t micro_batch; /* sequences per micro-batch */
    int recompute;       /* [model] recompute: 0 none, 1 selective, 2 full */
    int bucket_mb;       /* DP / ZeRO bucket size in MB (0 = the plugin's default) */
    char comm[32];       /* comm plugin */
    int sp;              /* sequence parallelism over the tp group ([parallel.tp] sequence_parallel; tp > 1) */
    int cp;              /* context parallelism ([parallel] cp): ranks sharing each sequence on a ring (0 = 1) */
    int ep;              /* expert parallelism ([parallel] ep): ranks of dp x cp splitting the experts (0 = 1) */
} plait_cost_layout;

/* Axis names, in the order of --axes. */
enum {
    PLAIT_AXIS_N_DP,
    PLAIT_AXIS_N_TP,
    PLAIT_AXIS_N_PP,
    PLAIT_AXIS_N_SCHEDULE,
    PLAIT_AXIS_N_CHUNKS,
    PLAIT_AXIS_N_OPTIM,
    PLAIT_AXIS_N_MICRO_BATCH,
    PLAIT_AXIS_N_RECOMPUTE,
    PLAIT_AXIS_N_BUCKET_MB,
    PLAIT_AXIS_N_COMM,
    PLAIT_AXIS_N_SP,
    PLAIT_AXIS_N_CP,
    PLAIT_AXIS_N_EP,
    PLAIT_AXIS_N_COUNT
};
extern const char *const plait_cost_axis_names[PLAIT_AXIS_N_COUNT];

typedef struct plait_cost_axes {
    int ranks;
    unsigned vary;                  /* bit per axis (1u << PLAIT_AXIS_N_*) */
    /* Explicit values per axis (bounds); n = 0 = every sensible value. For
     * text axes (schedule, optim, recompute, comm) `text` holds them. */
    int n[PLAIT_AXIS_N_COUNT];
    int64_t num[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    char text[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES][32];
    /* The config's own settings, for the axes that do not vary. */
    int64_t global_batch;
    plait_cost_layout base;
    /* [optim] offload_params: ZeRO-3 at dp 1 keeps its parameter shards off
     * the device, so it is not plain Adam and is weighed on its own */
    int offload_params;
    /* [model] recompute_offload = host: it applies to recompute = full
     * alone (refused beside the others), so a varied recompute axis takes
     * full alone */
    int recompute_offload;
    /* The model's sequence (block_size) and whether it has attention for
     * context parallelism to split (gpt, llama): a varied cp axis takes the
     * divisors of ranks whose 2cp chunks divide seq and leave a rank at
     * least PLAIT_COST_CP_MIN_TOKENS of each sequence, and base.cp; seq 0
     * keeps base.cp */
    int64_t seq;
    int attention;
    /* The model's routed experts (0: dense): a varied ep axis takes the
     * divisors of ranks that divide experts, up to PLAIT_MODEL_MAX_EP, and
     * base.ep; the enumeration keeps those dividing a layout's dp x cp */
    int64_t experts;
    /* The model's blocks (n_layer; 0: not known): a varied chunks axis
     * takes 2, 4 and 8 and, where pp divides them, every divisor of the
     * blocks a stage holds from 3 up to PLAIT_COST_MAX_CHUNKS (a virtual
     * stage of whole blocks, as Megatron-LM's recipes set 5, 7 or 12) */
    int64_t layers;
} plait_cost_axes;

#define PLAIT_COST_MAX_CHUNKS 16

/* The fewest tokens of a sequence a cp rank keeps when cp varies without
 * bounds: context parallelism is for sequences whose activations a rank
 * cannot hold, and long-context recipes (Megatron-LM's, Llama 3's) keep
 * 4K to 8K tokens a cp rank; at shorter ones the ring's latency and its
 * float32 activations buy nothing tp does not. */
#define PLAIT_COST_CP_MIN_TOKENS 4096

/* Parse "dp,tp,pp,schedule" (or "all") into axes->vary; "AXIS=v1,v2"
 * style bounds are set with plait_cost_axes_values. Errors name the
 * unknown axis and list the known ones. */
plait_status plait_cost_axes_parse(plait_cost_axes *axes, const char *list);
/* Values of one axis ("1,2,4" or "gpipe,1f1b"); also makes the axis vary. */
plait_status plait_cost_axes_values(plait_cost_axes *axes, const char *axis, const char *values);

/* Every candidate layout in a fixed order (dp, tp, pp, then the other axes
 * in axis order). Writes at most `cap`; returns the count there would be. */
size_t plait_cost_enumerate(const plait_cost_axes *axes, plait_cost_layout *out, size_t cap);

/* "dp2 tp1 pp2 1f1b mb1 adam" ("cpN" after the pp size with context
 * parallelism; then the recompute mode when not none, the bucket, chunks
 * and comm when set, "sp" with sequence parallelism). */
void plait_cost_layout_name(const plait_cost_layout *l, char *buf, size_t len);
/* The same with every word --explain reads, the recompute mode "none"
 * included (a word left out would take the config's setting there): what
 * `plait plan`'s table and --explain print. */
void plait_cost_layout_name_every(const plait_cost_layout *l, char *buf, size_t len);
/* The layout a name (as above, words in any order; "dp2 tp1 pp2" alone
 * keeps `base`'s other settings) gives. Errors name the word and what is
 * allowed. */
plait_status plait_cost_layout_parse(const char *text, const plait_cost_layout *base, plait_cost_layout *out);
/* "none", "selective", "full". */
const char *plait_cost_recompute_name(int recompute);
/* The `section.key=value` overrides that turn the config into the layout,
 * one per entry of out (each up to 96 bytes). Returns the count (<= 15). */
int plait_cost_layout_overrides(const plait_cost_layout *l, int64_t global_batch, char out[][96]);
/* The ZeRO stage of an optimizer plugin name (0 for adam). */
int plait_cost_zero_stage(const char *optim);
/* Bytes on the wire per float32 byte of the gradient reductions (*grad)
 * and of ZeRO's parameter gathers (*param) under `cfg`'s compression keys
 * for ZeRO stage `zero` (0 = plain DP): [parallel.dp] or [optim.zeroN]
 * grad_compression and [optim.zeroN] param_gather. 1 when uncompressed. */
void plait_cost_wire(const plait_config *cfg, int zero, double *grad, double *param);

/* Builds the finalized config for a layout from the overrides (the CLI's
 * loader: the file, the user's overrides, then these). */
typedef plait_status (*plait_cost_loader)(void *ctx, int n_overrides, char *const *overrides,
                                          plait_config **out);

/* What an evaluation needs besides the layout. */
typedef struct plait_cost_ctx {
    const plait_cluster *cluster;
    plait_precision precision;  /* what the cluster trains in (the config's, else the cluster's) */
    plait_cost_device device;   /* the device its ranks compute on (plait_cost_device_planned) */
    int hierarchical;           /* the comm plugin reduces hierarchically across nodes */
    double mem_limit;           /* bytes per rank (0 = the cluster's) */
    int64_t global_batch;
    plait_cost_loader load;
    void *load_ctx;
    /* the configuration's keys, plait_cost_ctx_from_config */
    const plait_config *cfg;                    /* the configuration as given, for each layout's optimizer's refusals
                               * (plait_check_optimizer); NULL: none asked. Borrowed */
    const struct plait_optim_ops *optim_ops[4]; /* adam, zero1, zero2, zero3 (NULL: not loaded), asked so */
    int offload;              /* [optim] offload of the config: 0 none, 1 host, 2 nvme */
    double offload_buffer;    /* [optim] offload_buffer */
    int offload_params;       /* [optim] offload_params */
    int whole_masters;
    int overlap_gather;
    int grad_accum16;
    int moments16;
    int tp_overlap;
    int zero_inflight[4];     /* [optim.zeroZ] max_inflight, at z (0 = the plugins' default, 2) */
    int zero3_gathered;       /* [optim.zero3] prefetch_layers + 1 (0 = the default's, 2) */
    int dp_serial;            /* [parallel.dp] overlap = false: plain DP reduces after the backward */
    int dp_compression;       /* [parallel.dp] grad_compression set: the ZeRO stages refuse it */
    int deterministic;        /* [run] deterministic: micro-batches summed in the canonical tree */
    int axes[4];              /* [parallel] order, as plait_cost_job's (all 0: the default) */
    int threads;              /* [run] threads, as plait_cost_job's */
    double offload_disk_free; /* bytes free in [optim] offload_path (nvme; 0 = not known) */
} plait_cost_ctx;

typedef struct plait_cost_result {
    plait_cost_layout layout;
    int valid;                 /* 0: why says why */
    int fits;                  /* predicted memory within the limit */
    int confirmed;             /* the plugin's plan stands behind the figures (else the model's shape alone) */
    char why[512];
    plait_cost_mem mem;        /* the rank needing the most */
    int mem_stage;             /* its pipeline stage */
    plait_cost_time time;
    double tokens_per_step;
    double tokens_per_s;
    double flops_per_step;     /* all ranks */
} plait_cost_result;

/* [optim] offload (0 none, 1 host, 2 nvme), offload_buffer and
 * offload_params of `cfg`. */
void plait_cost_offload_of(const plait_config *cfg, int *offload, double *buffer, int *params);
/* The fields of x that the configuration decides, read from `cfg` as the
 * plugins read them: cfg itself (borrowed: it must outlive x's use) and
 * the tables of the optimizers the planner weighs; offload, offload_buffer and offload_params; bit z of
 * whole_masters and overlap_gather where [optim.zeroZ] master = whole and
 * overlap_param_gather = true (z = 1, 2); grad_accum16 ([optim.zero1]
 * grad_accum = bf16); moments16 ([optim] moments = bf16); tp_overlap
 * ([parallel.tp] overlap, true where unset, the tp plugin's default);
 * zero_inflight and zero3_gathered ([optim.zeroN] max_inflight, [optim.zero3]
 * prefetch_layers: the ZeRO working buffers they size); dp_serial
 * ([parallel.dp] overlap = false); deterministic ([run] deterministic);
 * axes ([parallel] order: where each group's ranks sit); threads ([run]
 * threads).
 * The other fields are left as they are. */
void plait_cost_ctx_from_config(const plait_config *cfg, plait_cost_ctx *x);
/* [optim.zeroN] master of `cfg` (finalized) on ranks whose model reads
 * the weights' bf16 copy (bf16 1) or float32 weights (bf16 0): `plait
 * train`'s rule and refusal (train/masters.h, the error set naming where
 * the key was set), so that plait plan, config check and the launcher
 * refuse what every rank would. An optimizer plugin that does not load is
 * left to train to name (PLAIT_OK). Not thread-safe. */
plait_status plait_cost_check_masters(const plait_config *cfg, int bf16);

/* Bytes an element of a tp collective or a pipeline send takes on the
 * wire, as plait sends them: 2 on a bf16 run (the core's bf16 wire format
 * over tcp and verbs; bf16 tensors over nccl where `dev` widens them back,
 * plait_cost_device.bf16_tensors), else 4. */
double plait_cost_tp_wire_bytes(plait_precision precision, const char *comm, const plait_cost_device *dev);

/* The bucket optimizer `optim`'s gradients move in, in bytes: bucket_mb
 * (a layout's) when > 0, else config `cfg`'s ([parallel.dp] or
 * [optim.zeroN] bucket_size), else the plugins' default 25M. A ZeRO
 * optimizer's units are at most one bucket, or one tensor larger. */
double plait_cost_bucket_bytes(const plait_config *cfg, const char *optim, int bucket_mb);

/* The job settings of layout `l` in context `x`. */
void plait_cost_job_of(const plait_cost_layout *l, const plait_cost_ctx *x, double bucket_bytes, plait_cost_job *out);

/* Fill out's memory, time and tokens from the costs of l's pipeline stages
 * (valid = 1; fits and why by the memory limit): plait_cost_finish_memory
 * then plait_cost_finish_time. */
void plait_cost_finish(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                       double bucket_bytes, int block_size, plait_cost_result *out);
/* Its two halves: out's memory, FLOPs and tokens a step, valid, fits and
 * why (all but the time); then out's time and tokens a second, which a
 * search leaves out for a layout that does not fit. */
void plait_cost_finish_memory(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                              double bucket_bytes, int block_size, plait_cost_result *out);
void plait_cost_finish_time(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                            double bucket_bytes, plait_cost_result *out);

/* Check and predict one layout through its plugin's plan: the loader's
 * config, the preflight of one rank of each pipeline stage, then the cost
 * model. A layout the checks refuse is valid = 0 with their message;
 * memory over the limit sets fits = 0 and says so in why. Returns PLAIT_OK
 * unless memory runs out. */
plait_status plait_cost_evaluate(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out);
/* The same, also copying the costs of its pipeline stages to stages[0..cap)
 * (for --explain). */
plait_status plait_cost_evaluate_stages(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out,
                                        plait_cost_rank *stages, int cap);

/* The plans the preflight made for layouts evaluated so far, by every
 * setting of a layout but the optimizer and its bucket (of the optimizer
 * the preflight reads only whether it reduces the gradients itself): a
 * search confirming many layouts that differ only there plans each once.
 * Owned by its creator; one thread at a time. */
typedef struct plait_cost_plans plait_cost_plans;
plait_cost_plans *plait_cost_plans_new(void); /* NULL when out of memory */
void plait_cost_plans_free(plait_cost_plans *p);
/* plait_cost_evaluate_stages through `plans` (NULL: plan every time);
 * the same figures either way. */
plait_status plait_cost_evaluate_with(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_plans *plans,
                                      plait_cost_result *out, plait_cost_rank *stages, int cap);

/* The predicted memory of each rank of the layout `cfg` (finalized, as for
 * plait_layout_preflight) describes, in world order, training in its [run]
 * precision on the device `dev` describes: up to `cap` rows, the count in
 * *n. Errors are the preflight's. */
plait_status plait_cost_config_memory(plait_config *cfg, const plait_cluster *c, const plait_cost_device *dev,
                                      plait_cost_mem *per_rank, int cap, int *n);

/* Why layout `l`'s sequence parallelism cannot split a sequence of T
 * tokens (written to why, returned), or NULL: it needs tp > 1 and T
 * divisible by tp (with context parallelism, T / cp: a cp rank's share). */
const char *plait_cost_sp_refuses(const plait_cost_layout *l, int64_t T, char *why, size_t len);

/* Why layout `l`'s context parallelism cannot split a sequence of T tokens
 * of a model with (attention = 1) or without attention (written to why,
 * returned), or NULL: as plait train checks it, the 2cp chunks of a
 * sequence must be equal and the model must have attention (gpt, llama). */
const char *plait_cost_cp_refuses(const plait_cost_layout *l, int64_t T, int attention, char *why, size_t len);
/* Why layout `l`'s expert parallelism cannot split a model of `experts`
 * routed experts (0: dense), as plait train refuses it (written to why,
 * returned), or NULL: ep > 1 needs experts, ep dividing them and dp x cp
 * (at most PLAIT_MODEL_MAX_EP), tp 1 and the adam optimizer. */
const char *plait_cost_ep_refuses(const plait_cost_layout *l, int64_t experts, char *why, size_t len);
/* l->cp, at least 1. */
int plait_cost_layout_cp(const plait_cost_layout *l);

/* The config's [parallel.tp] sequence_parallel (0 where it is not set or
 * the tp plugin does not declare it). */
int plait_cost_config_sp(const plait_config *cfg);

/* 1 where the config's [run] residual is bf16 (model/model.h,
 * residual_bf16). */
int plait_cost_config_residual_bf16(const plait_config *cfg);
/* 1 where the config's [model] recompute_offload is host (the model
 * takes it under recompute full: plait_cost_shape.offload). */
int plait_cost_config_recompute_offload(const plait_config *cfg);

/* The device planning assumes for the model of `cfg` (finalized): on a GPU
 * cluster (gpu = 1) the cuda device (plait_cost_device_cuda), else the cpu
 * device, whose kernels are the core's (plait_kernels_table()). */
void plait_cost_device_planned(const plait_config *cfg, int gpu, plait_cost_device *out);
/* The model's sequence length and head size, which a device's costs depend on. */
void plait_cost_model_dims(const plait_config *cfg, int64_t *T, int64_t *HS);

/* Ranks of layout `l`: dp x cp x tp x pp. */
int plait_cost_layout_ranks(const plait_cost_layout *l);

/* Memory limit per rank on cluster `c` for a job of `ranks`. */
double plait_cost_mem_limit(const plait_cluster *c, int ranks);

/* Sort valid, fitting results first, by predicted tokens/s, best first
 * (equal ones in a fixed order). */
void plait_cost_sort_results(plait_cost_result *r, size_t n);

#endif
