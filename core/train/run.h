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
#include "comm/sum_tree.h"
#include "layout/mesh.h"

struct plait_job;
struct plait_data;

/* Time and traffic of the last step, split as metrics.csv reports it:
 * compute_s + comm_s + idle_s = step_s (run_step.c says what lands where). */
typedef struct plait_step_timing {
    double step_s;       /* wall time of the whole step */
    double compute_s;    /* the rest: forward, backward, optimizer arithmetic, bookkeeping */
    double comm_s;       /* blocked on communication not hidden by compute (DP/ZeRO/TP, the
                          * optimizer step's waits, the loss all-reduce) */
    double idle_s;       /* blocked waiting for pipeline neighbours (the bubble) */
    double tp_s;         /* of comm_s: blocked in TP all-reduces inside forward/backward */
    /* The pipeline phase (schedule start to REDUCE_GRADS): this rank's busy
     * time in forward/backward (layer hooks and TP all-reduces included) and
     * when its last backward ended, both from the start of the schedule.
     * A stage's idle time is the phase's span over all stages minus its
     * busy time (the simulator's definition of the bubble). */
    double fb_s, pipe_end_s;
    /* Bytes this rank sent per axis: dp and tp as the parallel plugin counts
     * them; pp is the pipeline's activations and gradients (payload) plus
     * the embedding group's tied-gradient all-reduce (the plugin's count). */
    uint64_t dp_bytes, tp_bytes, pp_bytes, optim_bytes;
    uint32_t reductions, early_reductions;
} plait_step_timing;

/* Result of one step. */
typedef struct plait_step_result {
    double loss;         /* mean token loss over the global batch (every rank) */
    double lr;
    double grad_norm;
    plait_step_timing t;
    /* Measured pipeline bubble of the step (every rank gets the same): the
     * span of the pipeline phase (slowest stage) and the mean over stages of
     * idle / span. Per-stage idle seconds are in run->stage_idle_s. */
    double pipe_span_s;
    double bubble;
} plait_step_result;

typedef struct plait_run {
    plait_config *cfg;
    struct plait_job *job;
    plait_comm *world;
    plait_mesh mesh;
    plait_batch batch;
    int deterministic;
    /* [run] debug_compute_sleep_ms in seconds: each FORWARD of a chunk also
     * sleeps this long, each BACKWARD twice (tests of the measured bubble) */
    double debug_sleep_s;
    int64_t steps;            /* [run] steps */
    int64_t step;             /* next step to run (0-based) */
    uint64_t seed;
    int failed;               /* set on error: the job is left without waiting for others */

    plait_model_desc *desc;
    const plait_model_spec *spec;
    int32_t block_size;

    /* plan (arrays owned here) */
    plait_plan plan;
    int32_t stage;
    int32_t first_layer[64], last_layer[64]; /* per local chunk: layer range, -1 if empty */

    const plait_parallel_ops *par;
    void *par_state;
    const plait_optim_ops *opt;
    void *opt_state;
    uint32_t opt_flags;

    plait_param_set params;   /* local parameters */
    int32_t *local_of_global; /* global param index -> local index, or -1 */
    float *data_flat, *grad_flat;
    size_t flat_numel;

    plait_model *model;
    struct plait_data *data;

    /* deterministic accumulation */
    plait_sum_tree *tree;
    float *grad_scratch;

    /* per-step scratch */
    int32_t *slot_of;         /* [chunks * micro_batches] activation slot, -1 = none */
    int32_t n_slots_used;
    uint8_t *slot_busy;
    int32_t max_slots;
    plait_request **send_req; /* [max_slots * 2] pending sends per slot (act, grad) */
    double *mb_loss;          /* loss sum per global micro-batch (step), then per stage:
                               * busy and pipeline-end seconds (2*pp, mean over the
                               * stage's ranks), summed over the world in one call */
    double *stage_idle_s;     /* [pp] last step: idle seconds of each stage */
    /* Sums over the steps of this run after its first, for the end-of-run
     * bubble line: Σ per-stage idle, Σ span. */
    double *stage_idle_sum;   /* [pp] */
    double pipe_span_sum;
    int64_t bubble_steps;
    int32_t *tokens, *targets;
    uint64_t flops_per_token;
    double peak_activation_bytes;
    plait_step_timing last_step; /* of the last training step (memory.csv's bytes per axis) */
} plait_run;

/* Build everything for a run from a finalized config. `resume_dir`
 * (nullable) is a checkpoint directory to restore from. */
plait_status plait_run_open(plait_config *cfg, const char *resume_dir, plait_run **out);
void plait_run_close(plait_run *run);

/* One optimizer step (collective over the world). */
plait_status plait_run_step(plait_run *run, plait_step_result *res);

/* Mean validation loss over [run] eval_batches micro-batches (collective). */
plait_status plait_run_eval(plait_run *run, double *val_loss);

/* Parameters of the local slice (set-up helpers, run_params.c). */
plait_status plait_run_build_params(plait_run *run);
void plait_run_free_params(plait_run *run);

/* Training FLOPs per token: 6N + 12·L·C·T (N = parameters without wpe). */
double plait_run_flops_per_token(const plait_run *run);

#endif
