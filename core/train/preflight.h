/*
 * Checking a training layout once, in one process, before any rank starts.
 *
 * Everything that depends only on the configuration — the mesh order, the
 * batch arithmetic for the layout's dp, the model's shape, and every rank's
 * plan from the parallel plugin (n_head % tp, the pipeline partition, the
 * schedule) — is checked here, so that a mistake is one error printed once
 * by the launcher or by `plait config check`, instead of the same message
 * from every rank of a job that was started for nothing.
 */
#ifndef PLAIT_CORE_PREFLIGHT_H
#define PLAIT_CORE_PREFLIGHT_H

#include <plait/optim.h>
#include <plait/parallel.h>
#include <plait/types.h>

#include "config/config.h"
#include "layout/batch.h"

/* Check `cfg` (finalized, plugins declared) for a run of dp x tp x pp ranks
 * on this host ([run] precision against this host's CPU included); what
 * the optimizer refuses of the layout, the keys and the run's device
 * (plait_check_run_optimizer), and a DP compression it leaves unused.
 * Sets the derived [data] values in `cfg` (origin "derived"), as a rank
 * would. Calls the parallel plugin's create and plan once per world rank
 * with a mesh whose communicators are NULL (neither may communicate; see
 * plait/parallel.h), then destroys its state. Returns PLAIT_OK or the first
 * problem (PLAIT_ERR_INVALID_CONFIG with a message naming the key), the
 * rank's mesh coordinates added when only some ranks are affected. Not
 * thread-safe (uses the calling thread's error slot). */
plait_status plait_layout_preflight(plait_config *cfg);

/* The part of the preflight every rank repeats before it trains (a run of
 * one process, or ranks started by mpirun, srun or torchrun, skip the
 * launcher's preflight), the rules between the core's keys: periodic
 * evaluation ([run] eval_every > 0) needs a validation split ([data]
 * val_fraction > 0 or val_path); [run] ckpt_async needs ckpt_format =
 * sharded; [run] trace has the form N or FIRST:LAST (its steps against
 * the run's are the run's to check: train/run_trace.h); [optim]
 * offload_params needs offload = host or nvme, and moments = bf16 needs
 * offload = none (the plugins refuse both too, each rank alone); under
 * a schedule that decays [optim] min_lr is at most lr, and wsd's decay
 * (lr_wsd_decay_steps) lies between the warmup and the decay's end; [data]
 * weights gives one weight >= 0 per pattern of path, not all 0
 * (plait_data_check_weights).
 * PLAIT_ERR_INVALID_CONFIG naming the keys and where they were set. */
plait_status plait_check_key_rules(const plait_config *cfg);

/* The table of optimizer plugin `optim`, loading it if needed; NULL
 * where it does not load (the run names that), the error cleared. */
const plait_optim_ops *plait_optim_ops_of(const char *optim);

/* What optimizer plugin `optim` (its table `ops`, plait_optim_ops_of;
 * NULL: nothing checked) refuses of `cfg` on a layout whose dp x cp = `dp`
 * ranks replicate the parameters, each running `micro_batches` a step,
 * their tensor memory host memory where `host_memory`: its ops.check
 * (plait/optim.h, ABI 1.34), or for an optimizer built before it the rule
 * its flags imply ([optim] offload_params beside one that keeps every
 * parameter whole; its other refusals are its ranks' create()'s). The
 * planner checks each layout's optimizer with it (core/cost).
 * PLAIT_ERR_INVALID_CONFIG with the plugin's message. Not thread-safe. */
plait_status plait_check_optimizer(const plait_config *cfg, const plait_optim_ops *ops, const char *optim, int dp,
                                   int64_t micro_batches, int host_memory);

/* plait_check_optimizer of the run's own optimizer, layout and device
 * (the cpu device's memory is host memory; another's is left to the
 * ranks' create()): by plait_layout_preflight, and by every rank started
 * without it before its run directory. PLAIT_OK where the mesh or the
 * batch are wrong (the preflight names those). Sets `cfg`'s derived batch
 * values, as a rank would. Not thread-safe. */
plait_status plait_check_run_optimizer(plait_config *cfg);

/* [run] residual = bf16 on a run that is not bf16, refused naming where
 * both keys were set: by plait_layout_preflight, and by every rank started
 * without it before its run directory (mpirun, srun). The device's part is
 * the model's. PLAIT_ERR_INVALID_CONFIG. Reads cfg only. */
plait_status plait_check_residual(const plait_config *cfg);

/* What one rank's check saw, for a caller that predicts the layout's cost
 * (core/cost): the rank's mesh, the global model, the batch and the plan the
 * parallel plugin made. Valid only during the call. */
typedef struct plait_layout_rank {
    const plait_mesh *mesh;
    const plait_model_spec *spec;
    const plait_batch *batch;
    const plait_plan *plan;
    int recompute;   /* [model] recompute: 0 none, 1 selective, 2 full */
} plait_layout_rank;
typedef void (*plait_layout_visit)(void *ctx, const plait_layout_rank *rank);

/* plait_layout_preflight without the check of this host's CPU for [run]
 * precision (a prediction for a cluster judges the cluster's precision),
 * calling `visit` (may be NULL) with each rank's plan after it planned
 * without error. */
plait_status plait_layout_preflight_visit(plait_config *cfg, plait_layout_visit visit, void *ctx);

/* The same on one rank of each pipeline stage (its dp and tp coordinates
 * 0), in stage order: for predictions, since the ranks of a stage cost the
 * same. The rules between the ranks' plans, which need every rank, are not
 * checked (plait_layout_preflight checks them before a run). */
plait_status plait_layout_preflight_stages(plait_config *cfg, plait_layout_visit visit, void *ctx);

#endif
