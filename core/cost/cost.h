/*
 * The cost model of `plait plan`: what one training step of a layout costs
 * each rank (FLOPs, messages per axis, parameters held, activations alive),
 * and from those the memory per rank and the step time on a cluster.
 *
 * Every function here is pure arithmetic on plain structs (no I/O, no
 * allocation, thread-safe), so the formulas are unit-tested by hand-computed
 * cases (tests/plan). rank_cost.c derives a plait_cost_rank from the plan the
 * parallel plugin made (train/preflight.h); layouts.h enumerates and
 * evaluates whole layouts.
 *
 * The formulas (docs/plan.md explains each):
 *   memory   ZeRO paper: adam 16Ψ, zero1 8Ψ + 8Ψ/dp, zero2 4Ψ + 12Ψ/dp,
 *            zero3 16Ψ/dp (Ψ = the rank's TP slice of its stage's layers),
 *            + activations (the model's per-slot buffers times the slots the
 *            schedule keeps alive, + the backward scratch), + working
 *            buffers (collective scratch, ZeRO's gather/reduce buffers),
 *            + the process itself.
 *   time     compute = FLOPs / (rate x efficiency), the rate of the rank
 *            alone on its share of the node, but never more work per second
 *            than the node's whole rate (ranks that share cores); TP and PP
 *            messages on the critical path by the alpha-beta model of their
 *            link; the pipeline's idle share by the schedule's formula
 *            ((p-1)/(m+p-1), interleaved (p-1)/(v.m+p-1)); the DP gradient
 *            reduction overlapped with the backward pass (2/3 of compute)
 *            except its last bucket; the optimizer step bound by memory
 *            bandwidth.
 */
#ifndef PLAIT_CORE_COST_H
#define PLAIT_CORE_COST_H

#include "cost/cluster.h"

/* What one rank does in one optimizer step. */
typedef struct plait_cost_rank {
    int dp, tp, pp;              /* layout sizes */
    int node_rank;               /* world rank (for placing it on a node) */
    int micro_batches;           /* m: micro-batches this rank runs per step */
    int chunks;                  /* v: model chunks per pipeline stage */
    double param_numel;          /* Ψ_rank: elements of the parameters it holds */
    double largest_layer_numel;  /* its largest layer's parameter elements (ZeRO units) */
    double flops;                /* forward + backward FLOPs per step */
    double act_bytes;            /* activation memory alive at the peak, + backward scratch */
    double tp_msgs, tp_msg_bytes;/* TP all-reduces per step and the payload of each */
    double pp_msgs, pp_msg_bytes;/* pipeline sends per step (activations and gradients) and each's size */
    double bubble;               /* the schedule's idle share, 0 without a pipeline */
    /* bytes on the wire per float32 byte of the DP gradient reductions and
     * of ZeRO-3's parameter gathers (grad_compression, param_gather:
     * coll/compress.h); 0 = 1 (uncompressed) */
    double grad_wire, param_wire;
} plait_cost_rank;

/* Optimizer sharding: 0 = adam (plain DP), 1..3 = ZeRO stage. */
typedef struct plait_cost_mem {
    double param, grad, state;   /* bytes, by the ZeRO formulas */
    double activations;
    double buffers;              /* collective scratch, ZeRO working buffers */
    double process;              /* the runtime itself */
    double total;
} plait_cost_mem;

/* Memory of one rank. bucket_bytes: the DP/ZeRO bucket size. */
void plait_cost_memory(const plait_cost_rank *r, int zero_stage, double bucket_bytes, double process_bytes,
                       plait_cost_mem *out);

/* Alpha-beta times (seconds) on a link: ring all-reduce over n ranks,
 * 2(n-1) steps of S/n bytes; reduce-scatter and all-gather (n-1) steps of
 * S/n; a point-to-point send of S bytes. 0 for n <= 1. */
double plait_cost_allreduce_s(const plait_link *l, int n, double bytes);
double plait_cost_gather_s(const plait_link *l, int n, double bytes);
double plait_cost_p2p_s(const plait_link *l, double bytes);

/* The pipeline's idle share: (p-1)/(m+p-1), and (p-1)/(v.m+p-1) with v > 1
 * chunks per stage (interleaved). 0 for p = 1. */
double plait_cost_bubble(int p, int m, int v);

typedef struct plait_cost_time {
    double step;        /* seconds per optimizer step */
    double compute;     /* the busiest rank's compute */
    double comm;        /* communication not hidden by compute: TP, PP, exposed DP */
    double idle;        /* pipeline bubble */
    double optim;       /* optimizer step */
    double dp_bytes, tp_bytes, pp_bytes; /* bytes the busiest rank sends per step, by axis */
} plait_cost_time;

/* Step time of a layout from its ranks' costs (n = world size, ranks in
 * world order), on cluster `c` (peak_flops must be > 0). */
void plait_cost_step_time(const plait_cost_rank *ranks, int n, int zero_stage, double bucket_bytes,
                          const plait_cluster *c, plait_cost_time *out);

#endif
