/*
 * Where a run's initial values come from: the layout-independent
 * initialisation of a fresh run, pretrained weights for a fresh run with
 * [run] init_from (weights only: the optimizer starts from zero state, the
 * step from 0), or a checkpoint (any layout's; a resumed run ignores
 * init_from, as nanoGPT's init_from = 'resume' does). Either way a
 * plait_value_source that the core uses for its own parameter storage and
 * passes to the optimizer's materialize().
 *
 * Not thread-safe: one thread drives a run (train/run.h).
 */
#ifndef PLAIT_CORE_RUN_SOURCE_H
#define PLAIT_CORE_RUN_SOURCE_H

#include "checkpoint/checkpoint.h"
#include "checkpoint/weights_import.h"
#include "train/run.h"
#include "train/run_replica.h"

typedef struct plait_run_source {
    plait_value_source source;  /* what plugins get */
    plait_run *run;
    plait_ckpt *ck;             /* NULL for a fresh run */
    plait_ckpt_source cks;
    plait_weights *weights;     /* [run] init_from of a fresh run, or NULL */
    plait_replica_set *replicas; /* an elastic restart from memory, or NULL */
} plait_run_source;

/* origin->resume_dir NULL (and no replicas): fresh values ([run]
 * init_from's weights, checked against the model, when set). Else open and
 * verify that checkpoint; or, with origin->try_replicas, the replicas in
 * memory when they serve (collective over the world). Sets
 * run->resumed_from. */
plait_status plait_run_source_open(plait_run *run, const plait_run_origin *origin, plait_run_source *src);
/* Fill the core-owned parameter storage from the source. */
plait_status plait_run_source_fill_params(plait_run *run, plait_run_source *src);
/* Fill the model's buffers (PLAIT_PARAM_BUFFER: the routers' selection
 * bias) on this rank's layers from the source, whole, whatever owns the
 * parameters; after the model is created. */
plait_status plait_run_source_fill_buffers(plait_run *run, plait_run_source *src);
/* Restore the run state (step, optimizer step) after a checkpoint load,
 * after plait_run_check_resume (rank 0 warns). */
plait_status plait_run_source_restore_state(plait_run *run, plait_run_source *src);

/* How a resumed run differs from the run that wrote its checkpoint. */
enum { PLAIT_RESUME_OTHER_SEED = 1u << 0, PLAIT_RESUME_OTHER_DATA = 1u << 1 };

/* Check the run state `saved` of checkpoint `dir` against this run's [run]
 * seed and training data `now`; *differs gets PLAIT_RESUME_OTHER_* bits.
 *  - The data position must be the step (plait writes data_step = step:
 *    batches are a function of seed, step and sequence), else
 *    PLAIT_ERR_PROTOCOL: the state was not written by this trainer and where
 *    the data continues is unknown.
 *  - Another seed or other training data (token counts or the training
 *    split's CRC32C differ) is allowed, with a warning naming both when
 *    `warn`: the parameters and optimizer state continue, and batches from
 *    the resume step on are drawn with this run's seed from this run's data.
 *    Both are deliberate moves in long runs (a new seed to get past a loss
 *    spike's batches; a planned change of data mixture), and Megatron-LM and
 *    DeepSpeed continue from a checkpoint the same way; the warning says how
 *    to continue the original run exactly instead.
 *  - A format-1 checkpoint recorded no data: the data is not checked (logged
 *    when `warn`). */
plait_status plait_run_check_resume(const plait_ckpt_state *saved, const char *dir, uint64_t seed,
                                    const plait_ckpt_data *now, int warn, unsigned *differs);
void plait_run_source_close(plait_run_source *src);

#endif
