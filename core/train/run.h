/*
 * One training run on this rank: everything from the validated config to the
 * plugins, the model, the data and the step executor. The training loop
 * (train_loop.c), evaluation, checkpointing and `plait bench train` all work on
 * a plait_run.
 *
 * Set-up order (run_setup.c): join the job → world communicator → mesh and
 * groups → model description → batch arithmetic → parallel plugin (create,
 * plan) → local parameters and the model → optimizer (create, materialize
 * from initial values or a checkpoint) → parallel bind.
 *
 * Not thread-safe: one thread drives a run.
 */
#ifndef PLAIT_CORE_RUN_H
#define PLAIT_CORE_RUN_H

#include <stdint.h>

#include <plait/plait.h>

#include "config/config.h"
#include "model/model.h"
#include "layout/batch.h"
#include "coll/sum_tree.h"
#include "layout/mesh.h"
#include "runtime/process_state.h"
#include "train/run_moe.h"
#include "train/step_timing.h"
#include "train/val_sets.h"

struct plait_job;
struct plait_data;
struct plait_replica_flight;


/* The run's concerns, each set up and torn down by one file. */

/* The job and its world communicator (run_world.c). */
typedef struct plait_run_world {
    struct plait_job *job;
    plait_comm *comm;         /* the world */
    plait_mesh mesh;          /* dp x tp x pp and the group communicators (layout/mesh.h) */
    int failed;               /* set on error: the job is left without waiting for others */
    int device_open;          /* this run opened the process's device (device/device.h) */
} plait_run_world;

/* The model this rank runs (run_setup.c). */
typedef struct plait_run_model {
    plait_model_desc *desc;
    const plait_model_spec *spec;
    int32_t block_size;
    plait_init_rule init;     /* [run] seed and the model's n_layer: its initial values */
    plait_model *instance;    /* this rank's stage(s) of the model */
    uint64_t flops_per_token;
} plait_run_model;

/* This rank's work in the layout (run_setup.c): the batch arithmetic, the
 * plan its parallel plugin decided (arrays owned here), its pipeline stage
 * and the layer range of each local chunk. */
typedef struct plait_run_work {
    plait_batch batch;
    plait_plan plan;
    int32_t stage;
    int32_t *first_layer, *last_layer; /* [plan.chunks]: layer range per local chunk, -1 if empty */
} plait_run_work;

/* A loaded plugin and its state. */
typedef struct plait_run_parallel {
    const plait_parallel_ops *ops;
    void *state;
} plait_run_parallel;

typedef struct plait_run_optim {
    const plait_optim_ops *ops;
    void *state;
    uint32_t flags;           /* PLAIT_OPTIM_* capability flags */
    uint16_t abi_minor;       /* the lowest core minor the plugin declared it needs */
} plait_run_optim;

/* Local parameters, their flat storage and the deterministic gradient
 * accumulation (run_params.c). */
typedef struct plait_run_params {
    plait_param_set set;      /* local parameters */
    int32_t *local_of_global; /* global param index -> local index, or -1 */
    float *data_flat, *grad_flat;
    size_t flat_numel;
    /* [set.n_params] the model's bf16 copies whose float32 masters the
     * optimizer keeps sharded (plait_run_keep_masters; such a parameter
     * has no float32 storage here), or NULL where none is */
    void **weight_copy;
    /* [set.n_params] where an optimizer gathering bf16 copies itself
     * (PLAIT_OPTIM_GATHERS_COPIES) does (copy_gathered) and the slots
     * where it points the model at a layer's gathered bf16 values
     * (plait_run_lend_copies), or NULL */
    unsigned char *copy_gathered;
    void **copy_view;
    plait_sum_tree *tree;     /* deterministic mode: accumulation over micro-batches */
    float *grad_scratch;
} plait_run_params;

/* The step executor's working state (run_step.c). */
typedef struct plait_step_exec {
    int32_t *slot_of;         /* [chunks * micro_batches] activation slot, -1 = none */
    int32_t n_slots_used;
    uint8_t *slot_busy;
    int32_t *slot_chunk; /* [max_slots] the chunk a slot was last laid out for, -1 = none yet */
    int32_t max_slots;
    int split_backward;       /* the schedule splits backwards: a slot is released after its weight half */
    int64_t n_micro_batches;  /* of a step over all ranks (plait_batch_micro_batches) */
    int64_t loss_targets;     /* the targets that count in the pass's loss: global batch x block_size,
                               * less those [data] eod_mask_loss leaves out */
    /* the sends in flight (step_pipeline.c), per kind (act, grad) a ring
     * of send_window entries, oldest at send_head[kind], send_n[kind] of
     * them: each its request and the pool buffer it reads */
    struct plait_step_send {
        plait_request *req;
        float *buf;
    } * sends;
    int32_t send_window, send_head[2], send_n[2];
    /* several chunks a stage: the pipeline's links, [act, grad][colour],
     * each a copy of the pp group (step_pipeline.c); NULL otherwise */
    plait_comm *pp_link[2][3];
    int pp_bf16;              /* a bf16 run's stage boundaries travel in bf16 (step_pipeline.c): 1 the
                                 core's wire format, 2 bf16 tensors (a transport that moves device memory) */
    plait_bf16 **pp_wire;     /* pp_bf16 == 2: [send_window * 2 + 1] device buffers of a boundary's bf16
                                 form, each send's (as `sends`), then the receives'; made at first use */
    int32_t *tokens, *targets;
    /* The one buffer the step's closing all-reduce sums (global_loss): the
     * per-micro-batch loss sums, then the per-stage times, so measuring the
     * pipeline costs no extra collective. Two named views into it: */
    double *step_sums;        /* [n_micro_batches + 2 * pp] */
    double *mb_loss;          /* = step_sums: loss sum per global micro-batch */
    double *mb_loss_dev;      /* [n_micro_batches + 1] device memory: the head's loss sums, gathered
                               * during the step, then the global Σg² an optimizer may leave
                               * there (plait_optim_step_in.sumsq_dev); read once at its end */
    double *read_host;        /* [n_micro_batches + 1]: that one read */
    double *stage_times;      /* = step_sums + n_micro_batches: see train/step_timing.h */
    /* Called before each layer's forward and backward (rank 0's progress
     * within a long step: train/progress.h); NULL = none. */
    void (*on_layer)(void *ctx, int backward, int32_t layer, int32_t mb);
    void *on_layer_ctx;
} plait_step_exec;

typedef struct plait_run {
    plait_config *cfg;
    int deterministic;
    /* [run] debug_compute_sleep_ms in seconds: each FORWARD of a chunk also
     * sleeps this long, each BACKWARD twice, each half of a split backward
     * once (tests of the measured bubble) */
    double debug_sleep_s;
    int64_t steps;            /* [run] steps */
    int64_t step;             /* next step to run (0-based) */
    int64_t resumed_step;     /* the checkpoint's step when resumed, else -1 (never pruned) */
    char resumed_from[4200];  /* what it resumed from (a checkpoint directory, or the replicas in memory);
                                 "" for a fresh run */
    uint64_t seed;
    /* [run] ckpt_async: the save still being written in the background,
     * finished by plait_run_save_settle (run_ckpt.c); NULL when none */
    struct plait_pending_save *pending_save;
    /* [run] ckpt_async on a device with streams: the mark after the
     * snapshot's copies on the communication stream, which the optimizer's
     * next step waits for on the compute stream before it writes what
     * they read (run_step.c); NULL when none is pending. Owned by the
     * save's job (run_ckpt_shard.c). */
    struct plait_device_event *snapshot_fence;
    /* [run] trace: the traced steps, numbered from 1 as metrics.csv
     * numbers them; 0 and 0 when the run is not traced (run_trace.c) */
    int64_t trace_first, trace_last;

    plait_run_world world;
    plait_run_model model;
    plait_run_work work;
    plait_run_parallel parallel;
    plait_run_optim optim;
    plait_run_params params;
    struct plait_data *data;  /* run_data.c */
    /* [data] val_sets (run_data.c): each set's data and name, and the data
     * an evaluation reads (NULL: data's validation split) */
    struct plait_data *val_data[PLAIT_VAL_SETS_MAX];
    char val_names[PLAIT_VAL_SETS_MAX][PLAIT_VAL_SET_NAME_MAX + 1];
    int n_val_sets;
    const struct plait_data *eval_data;
    plait_step_exec exec;
    plait_stage_timing timing; /* step timing and the pipeline bubble (step_timing.c) */
    plait_run_moe moe;         /* the experts' routes of the last step (run_moe.c) */
    struct plait_replica_flight *replica; /* replicas in flight to other hosts (run_replica.c) */
    plait_process_state process; /* the working directory and PLAIT_* variables as the run began to
                                    open (plait_run_check_process) */
} plait_run;

/* Where a run's values come from. */
typedef struct plait_run_origin {
    const char *resume_dir;   /* a checkpoint directory to restore from, or NULL: a fresh run */
    /* An elastic restart keeping replicas (train/run_replica.h): they are
     * tried first. resume_dir is then the newest checkpoint that looks
     * complete (not read yet, disk_step its step, -1 none); when the
     * replicas do not serve, the checkpoint is found in full in out_dir as
     * `resume_mode` (plait_resume_mode) says. */
    int try_replicas;
    int64_t disk_step;
    const char *out_dir;
    int resume_mode;
} plait_run_origin;

/* Build everything for a run from a finalized config. `resume_dir`
 * (nullable) is a checkpoint directory to restore from. */
plait_status plait_run_open(plait_config *cfg, const char *resume_dir, plait_run **out);
plait_status plait_run_open_from(plait_config *cfg, const plait_run_origin *origin, plait_run **out);
void plait_run_close(plait_run *run);

/* A rank ending its run on `st` (the error set) at `at` ("step 3", "the
 * run's set-up"): every peer learns why through the comm plugin
 * (plait_comm_fail), so each rank reports the root cause and not the
 * neighbour that vanished; then the run is closed and the job told this
 * rank failed. Returns `st` with the error: this rank's own, or, for a rank
 * that stops because another failed, one short line "<at>: world rank R
 * stopped after world rank Q failed (its error names the cause)" (the
 * relayed chain stays in this rank's log file under `what`, the command).
 * Takes ownership of `run`. */
plait_status plait_run_fail(plait_run *run, plait_status st, const char *at, const char *what);

/* One optimizer step (collective over the world). */
plait_status plait_run_step(plait_run *run, plait_step_result *res);

/* Mean validation loss over [run] eval_batches micro-batches, rounded up
 * to whole passes of a step's schedule (collective); `sequences` (may be
 * NULL) receives how many validation sequences that covered. */
plait_status plait_run_eval(plait_run *run, double *val_loss, int64_t *sequences);

/* The same over validation set `k` of [data] val_sets (0 <= k <
 * run->n_val_sets): the same micro-batches of its files as of the run's
 * own validation split, so a set of the same files scores the same loss. */
plait_status plait_run_eval_set(plait_run *run, int k, double *val_loss);

/* Parameters of the local slice (set-up helpers, run_params.c). */
plait_status plait_run_build_params(plait_run *run);
void plait_run_free_params(plait_run *run);

/* PLAIT_OK while the working directory and the PLAIT_* variables are as
 * they were when the run began to open (run->process); else PLAIT_ERR_ABI
 * with the error set: "<when> into the plugins 'tcp' (comm), 'dp'
 * (parallel), 'adam' (optim), 'cpu' (device) changed the process: <each
 * change>; ..." (runtime/process_state.h), `when` saying which calls ran
 * ("step 3: the step's calls"). The run's paths (out_dir, its checkpoints
 * and logs) are relative to that directory and its settings are those
 * variables, so a caller checks before it writes anything after plugin
 * calls. Cost: one getcwd() and one walk of environ. */
plait_status plait_run_check_process(const plait_run *run, const char *when);

/* Training FLOPs per token: 6N + 12·L·C·T (N = parameters without wpe). */
double plait_run_flops_per_token(const plait_run *run);

#endif
