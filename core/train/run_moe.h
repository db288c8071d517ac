/*
 * The mixture of experts at a step's end (run_moe.c): the routes every
 * rank's sparse blocks gave each expert during the step, summed over the
 * world; the selection bias each rank moves with them (DeepSeek-V3's
 * balancing, plait_model_moe_balance); rank 0's metrics.csv columns and
 * its warning when a router collapses. A run without experts does nothing.
 *
 * Not thread-safe: the run's thread. Errors: the all-reduce's, a bias not
 * there to move, or out of memory, with the error set.
 */
#ifndef PLAIT_CORE_RUN_MOE_H
#define PLAIT_CORE_RUN_MOE_H

#include <stdint.h>

#include <plait/types.h>

#include "train/metrics.h"

struct plait_run;

/* Per-expert columns metrics.csv gets at most (moe_tokens_0 ..). */
#define PLAIT_MOE_METRIC_EXPERTS 16

/* The step's global routing, kept for its metrics row. */
typedef struct plait_run_moe {
    int32_t experts, n_layer;
    double *sums;      /* [n_layer·experts] routes per block and expert, then aux, z, dropped */
    int64_t warned_at; /* the step of the last collapse warning, -1 none */
} plait_run_moe;

/* The layout a model's experts need, refused before any rank starts
 * (config check and train's preflight) naming the keys and what would
 * work: [parallel] ep > 1 with a model without experts, an ep not dividing
 * moe_experts, an ep above PLAIT_MODEL_MAX_EP, ep > 1 with tp > 1, a
 * moe_ffn_hidden tp does not divide. */
plait_status plait_run_moe_check_layout(const struct plait_run *run);

/* Collective over the world, after the optimizer step of step `step`
 * (numbered from 1): take this rank's counts, sum them, move the biases,
 * warn on a collapse (rank 0). */
plait_status plait_run_moe_step(struct plait_run *run, int64_t step);
/* The columns (before the first row), and the step's values in them. */
void plait_run_moe_columns(const struct plait_run *run, plait_metrics *m);
void plait_run_moe_metrics(const struct plait_run *run, plait_metrics *m);
void plait_run_moe_free(plait_run_moe *moe);

#endif
