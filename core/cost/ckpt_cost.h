/*
 * A checkpoint's cost for `config check` and `plait plan`: the bytes each
 * rank writes, rank 0's extra memory while it saves and the predicted save
 * time, for both [run] ckpt_format values (docs/checkpoints.md, "Predicted
 * cost"). Accounting only: it never changes which layout a search picks.
 *
 * The model: a checkpoint is the parameters and Adam's two moments, float32
 * (12 bytes a parameter; the kept buffers of compressed collectives are
 * left out). `gathered`: world rank 0 receives every tensor over its link
 * and writes all of it alone, at [cluster] disk_writer_gbps. `sharded`:
 * each pipeline stage's share of the model (its ranks' parameters over the
 * model's), split evenly over its TP ranks (replicated LayerNorms and
 * biases counted as split: under 0.1% of a large model), and within a DP
 * group by the optimizer (ZeRO-3: everything 1/dp; ZeRO-1/2: the moments
 * 1/dp, the parameters by DP rank 0; plain Adam: all by DP rank 0; the
 * routed experts at ep > 1 by the dp / ep ranks holding them, so that DP
 * rank 0 writes its E / ep of them); every
 * rank writes at once, the time the larger of all bytes at disk_gbps and
 * the busiest rank's at disk_writer_gbps.
 *
 * Plain functions over plain data; thread-safe.
 */
#ifndef PLAIT_CORE_COST_CKPT_COST_H
#define PLAIT_CORE_COST_CKPT_COST_H

#include <stdio.h>

#include "config/config.h"
#include "cost/cluster.h"
#include "cost/cost.h"
#include "cost/layouts.h"

typedef struct plait_cost_ckpt_format {
    double rank_max;    /* bytes the rank writing the most writes */
    double rank0;       /* bytes world rank 0 writes */
    double all_ranks;   /* bytes all ranks write together (= total) */
    double rank0_extra; /* bytes rank 0 holds beyond training while it saves (synchronous) */
    double async_extra; /* with ckpt_async: rank 0's host snapshot (sharded only; 0 gathered) */
    double save_s;      /* predicted seconds a save takes */
} plait_cost_ckpt_format;

typedef struct plait_cost_ckpt {
    double params;  /* the model's parameters (tied copies once) */
    double largest; /* elements of its largest tensor */
    double total;   /* bytes of one checkpoint */
    int ranks;
    plait_cost_ckpt_format gathered, sharded;
} plait_cost_ckpt;

/* The checkpoint of the model of `params` parameters whose largest tensor
 * has `largest` elements, trained in layout `l` whose pipeline stages hold
 * stages[s].param_numel each (plait_cost_model_stages), its optimizer's
 * gradients moving in buckets of `bucket_bytes` (plait_cost_bucket_bytes),
 * on cluster `c`. */
void plait_cost_ckpt_predict(double params, double largest, const plait_cost_rank *stages, const plait_cost_layout *l,
                             double bucket_bytes, const plait_cluster *c, plait_cost_ckpt *out);

/* The same for config `cfg` (finalized) in layout `l` with `global_batch`
 * sequences a step (l NULL: the config's own layout and batch, its cp
 * ranks counted with dp's), its stages costed through a plait_cost_model.
 * Errors: the model's or the batch's (PLAIT_ERR_INVALID_CONFIG naming the
 * key), PLAIT_ERR_NO_MEMORY. */
plait_status plait_cost_ckpt_of_config(plait_config *cfg, const plait_cost_layout *l, int64_t global_batch,
                                       const plait_cluster *c, plait_cost_ckpt *out);

/* Two lines: the config's [run] ckpt_format (and ckpt_async) first, marked
 * as chosen, then the other format, each with its bytes per rank, rank 0's
 * extra memory and the predicted save time at the cluster's disk_gbps. */
void plait_cost_ckpt_print(FILE *out, const plait_cost_ckpt *k, const plait_config *cfg, const plait_cluster *c);

#endif
