/* Functions shared by the run_*.c files; not for other modules.
 *
 * Not thread-safe: one thread drives a run (train/run.h).
 */
#ifndef PLAIT_CORE_RUN_INTERNAL_H
#define PLAIT_CORE_RUN_INTERNAL_H

#include <plait/kernels.h>

#include "checkpoint/checkpoint.h"
#include "train/data.h"
#include "train/run.h"

/* Data of global micro-batch `global_mb` of `step` from `split` into
 * tokens/targets [micro_batch * block_size]. */
plait_status plait_run_fetch_batch(plait_run *run, plait_data_split split, int64_t step, int64_t global_mb,
                                   int32_t *tokens, int32_t *targets);

/* The single-process plan (nothing split, one stage, forward then backward
 * per micro-batch) that parallel plugins edit. Allocates the plan's arrays. */
plait_status plait_run_prefill_plan(plait_run *run);

/* Load the parallel plugin, create its state for run->mesh and let it plan
 * (create + plan only: neither communicates, so the preflight calls this
 * with a mesh whose communicators are NULL). Fills run->parallel (the
 * plugin and its state), run->work.plan, run->work.stage and the local
 * chunks' layer ranges (run->work.first_layer, last_layer). */
plait_status plait_run_load_parallel(plait_run *run);

/* 1 if the plan's schedule splits backwards into input and weight halves
 * (PLAIT_INSTR_BACKWARD_INPUT: zero-bubble schedules). */
int plait_plan_splits_backward(const plait_plan *plan);
/* A split backward runs the device's backward kernels in halves (SDK 1.6,
 * plait/kernels.h): 1 where a device plugin declaring ABI 1.abi_minor with
 * kernel table k (NULL: none) honours that, the minor being 6 or more or
 * the table built against a later SDK. Pure. */
int plait_split_kernels_ok(uint16_t abi_minor, const plait_kernels *k);
/* Refused, naming the plugin, on the open device where that is not so. */
plait_status plait_run_check_split_device(void);

/* The step executor's state (run_step.c): allocate for the run's plan and
 * batch; close is safe on a zeroed struct. */
plait_status plait_step_exec_open(plait_run *run);
void plait_step_exec_close(plait_step_exec *exec);

/* Deterministic mode with several local micro-batches: the summation tree
 * and scratch that accumulate gradients in a fixed order (run_params.c;
 * freed by plait_run_free_params). */
plait_status plait_run_open_accumulation(plait_run *run);

/* Parameter and gradient storage in the device's memory (run_params.c). */
plait_status plait_run_alloc_storage(plait_run *run);
/* After the model exists, before the storage: with an optimizer that can
 * keep float32 masters sharded (PLAIT_OPTIM_SHARDS_MASTERS) and its
 * [optim.zeroN] master, the bf16 copies it fills instead of the model
 * (params.weight_copy). Refuses master = sharded where the model reads
 * float32 weights, naming the key and why (plait_check_masters). */
plait_status plait_run_keep_masters(plait_run *run);
/* After the model exists: with an optimizer that owns the parameters and
 * gathers bf16 copies itself (PLAIT_OPTIM_GATHERS_COPIES, ABI 1.37), the
 * model's copies lent to it (params.copy_view), the model's own copy
 * buffer shrunk to what it still makes. */
plait_status plait_run_lend_copies(plait_run *run);

/* Data (run_data.c). */
plait_status plait_run_data_open(plait_run *run);
void plait_run_data_close(plait_run *run);
/* The data a read of `split` takes: the set an evaluation scores
 * (run->eval_data) for VAL, else the run's own. */
const struct plait_data *plait_run_data_of(const plait_run *run, plait_data_split split);
/* This run's training data as a checkpoint identifies it (strings borrowed
 * from the open data). */
void plait_run_data_record(const plait_run *run, plait_ckpt_data *out);

/* Checkpoints' gathering (run_ckpt.c). World rank of (dp 0, tp 0, stage):
 * the rank that assembles the stage's full tensors. */
int plait_run_stage_owner(const plait_run *run, int32_t stage);
/* Bring tensor `which` of global parameter g to its stage's owner as a
 * full tensor in `full` (written there only; NULL elsewhere is fine), and
 * with `to_rank0` on to world rank 0's `full`. `slice` holds the largest
 * local tensor, `slices` (tp > 1) tp of them. Collective: every rank calls
 * it for every (g, which) in the same order. */
plait_status plait_run_gather_full(plait_run *run, int32_t g, const char *which, uint32_t tag, float *full,
                                   float *slice, float *slices, int to_rank0);

/* World communicator and job (run_world.c). */
plait_status plait_run_open_world(plait_run *run);
void plait_run_close_world(plait_run *run);

#endif
