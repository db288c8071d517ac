/*
 * The cost model behind `plait plan`: what one training step of a layout
 * costs each rank (FLOPs, messages per axis, parameters held, activations
 * alive), and from those the memory per rank and the step time on a
 * cluster, in the precision the cluster trains in.
 *
 * Every function here is pure arithmetic on plain structs (no I/O, no
 * allocation, thread-safe), so the formulas are unit-tested by hand-computed
 * cases (tests/plan). A rank's cost comes either from the plan its parallel
 * plugin made (rank_cost.h) or, for the search over thousands of layouts,
 * from the model's shape alone (stages.h); layouts.h enumerates and
 * evaluates whole layouts.
 *
 * The formulas (docs/plan.md explains each):
 *   memory   the ZeRO paper's accounting per precision: fp32 4+4+8 bytes a
 *            parameter; mixed bf16 2 (weights) + 2 or, accumulating over
 *            micro-batches, 4 (gradients) + 12 (fp32 master weights, Adam's
 *            moments); stage 1 shards the optimizer state, 2 also the
 *            gradients, 3 also the weights; + activations (per recompute
 *            mode, Korthikanti et al.'s counts as the model keeps them,
 *            times the micro-batches the schedule keeps alive) + working
 *            buffers + the process itself.
 *   time     compute = FLOPs / (the precision's rate x efficiency), with the
 *            forward a recompute mode runs again; TP and PP messages on the
 *            critical path by the alpha-beta model of their link (TP inside
 *            a node, the network's bandwidth shared by a node's ranks); the
 *            pipeline's idle share by the schedule's formula; the DP
 *            reduction (hierarchical across nodes where the comm plugin is)
 *            overlapped with the backward pass except its last bucket; the
 *            optimizer step bound by memory bandwidth.
 */
#ifndef PLAIT_CORE_COST_H
#define PLAIT_CORE_COST_H

#include "cost/cluster.h"

/* What one rank of a pipeline stage does in one optimizer step. The
 * activations and messages are counted in elements, so that one cost serves
 * every precision. */
typedef struct plait_cost_rank {
    int dp, tp, pp;              /* layout sizes */
    int stage;                   /* its pipeline stage */
    int micro_batches;           /* m: micro-batches this rank runs per step */
    double rows;                 /* tokens of one micro-batch: the rows of its matrix products */
    int chunks;                  /* v: model chunks per pipeline stage */
    double param_numel;          /* Ψ_rank: elements of the parameters it holds */
    double largest_layer_numel;  /* its largest layer's parameter elements (ZeRO units) */
    double flops;                /* forward + backward FLOPs per step, recomputed forwards included */
    double recompute_flops;      /* of those, the forwards run again for recomputation */
    double act_elems;            /* activation elements alive at the peak, + the backward scratch */
    double tp_msgs, tp_msg_elems;/* TP all-reduces per step and the elements of each */
    double pp_msgs, pp_msg_elems;/* pipeline sends per step (activations and gradients) and each's elements */
    double bubble;               /* the schedule's idle share, 0 without a pipeline */
    /* bytes on the wire per float32 byte of the DP gradient reductions and
     * of ZeRO's parameter gathers (grad_compression, param_gather:
     * coll/compress.h); 0 = 1 (uncompressed) */
    double grad_wire, param_wire;
} plait_cost_rank;

/* Bytes per element of each kind of training state in one precision. */
typedef struct plait_cost_bytes {
    double weight;       /* the weights the forward reads */
    double grad;         /* a gradient as accumulated and reduced */
    double optim;        /* optimizer state per parameter (Adam's moments, + fp32 master weights under bf16) */
    double activation;   /* a saved activation, a TP or pipeline message */
    double adam_io;      /* bytes AdamW reads and writes per parameter it owns */
    int fp32_accumulation; /* bf16 gradients are accumulated in an fp32 buffer */
} plait_cost_bytes;

/* fp32 and tf32 (fp32 storage, tensor-core products): 4, 4, 8, 4. bf16
 * (mixed precision as Megatron-LM and DeepSpeed count it): weights 2,
 * optimizer 12 (fp32 master weights 4, Adam's m and v 8), activations 2;
 * gradients 2 with one micro-batch per step, 4 when the rank accumulates
 * over more (an fp32 buffer, Megatron-LM's main_grad). */
void plait_cost_bytes_of(plait_precision p, int micro_batches, plait_cost_bytes *out);

/* A layout's settings the formulas need beyond its ranks' costs. */
typedef struct plait_cost_job {
    int dp, tp, pp;
    int zero;                 /* 0 = adam (plain DP), 1..3 = ZeRO stage */
    double bucket_bytes;      /* the DP / ZeRO bucket */
    plait_precision precision;
    int hierarchical;         /* DP collectives across nodes go hierarchically (intra, inter, intra) */
} plait_cost_job;

typedef struct plait_cost_mem {
    double param, grad, state;   /* bytes, by the ZeRO formulas */
    double activations;
    double buffers;              /* collective scratch, ZeRO working buffers */
    double process;              /* the runtime itself */
    double total;
} plait_cost_mem;

/* Memory of one rank. */
void plait_cost_memory(const plait_cost_rank *r, const plait_cost_job *j, double process_bytes, plait_cost_mem *out);

/* Alpha-beta times (seconds) on a link: ring all-reduce over n ranks,
 * 2(n-1) steps of S/n bytes; reduce-scatter and all-gather (n-1) steps of
 * S/n; a point-to-point send of S bytes. 0 for n <= 1. The _bw forms take
 * the bandwidth a rank gets (a shared network's share). */
double plait_cost_allreduce_s(const plait_link *l, int n, double bytes);
double plait_cost_gather_s(const plait_link *l, int n, double bytes);
double plait_cost_p2p_s(const plait_link *l, double bytes);
double plait_cost_allreduce_bw_s(double latency, double bandwidth, int n, double bytes);
double plait_cost_gather_bw_s(double latency, double bandwidth, int n, double bytes);

/* The pipeline's idle share of schedule `schedule` ("gpipe", "1f1b",
 * "interleaved", "zb1") with p stages, m micro-batches, v chunks per stage:
 * (p-1)/(m+p-1); interleaved (p-1)/(v.m+p-1) (m >= p) or
 * (v(p-m)+m-1)/(v.p+m-1); zb1 (p-1)/(3m+p-1) (m >= p) or
 * (2p-m-1)/(2m+2p-1). 0 for p = 1. */
double plait_cost_bubble(const char *schedule, int p, int m, int v);

typedef struct plait_cost_time {
    double step;        /* seconds per optimizer step */
    double compute;     /* the busiest rank's compute */
    double comm;        /* communication not hidden by compute: TP, PP, exposed DP */
    double idle;        /* pipeline bubble */
    double optim;       /* optimizer step */
    double dp_bytes, tp_bytes, pp_bytes; /* bytes the busiest rank sends per step, by axis */
    /* the parts `plait plan --explain` prints */
    int busiest;                  /* the pipeline stage that sets the pace */
    double rate;                  /* FLOP/s a rank computes at: peak x efficiency of the precision */
    double recompute;             /* of compute, the forwards run again */
    double stream;                /* CPU: of the busiest stage's compute alone, streaming its weights */
    double tp_s, pp_s;            /* the busiest stage's TP all-reduces and pipeline sends */
    double dp_hidden, dp_exposed; /* the DP reduction behind the backward pass, and exposed */
    double dp_intra, dp_inter;    /* of the DP reduction, the time on each link */
    double bubble;                /* the busiest stage's idle share */
    const char *tp_link, *pp_link, *dp_link; /* link kinds: nvlink, infiniband, shm, ... */
    int dp_hierarchical;          /* the DP reduction crosses nodes hierarchically */
    int shared_cores;             /* a CPU node's ranks share its cores: its work sets the pace */
} plait_cost_time;

/* Step time of a layout from the costs of its pipeline stages (stages[s]
 * for s < j->pp; every rank of a stage costs the same), on cluster `c`
 * (its rate for j->precision must be known: plait_cluster_rate). Ranks are
 * placed node by node, tp innermost, then dp, then pp. */
void plait_cost_step_time(const plait_cost_rank *stages, const plait_cost_job *j, const plait_cluster *c,
                          plait_cost_time *out);

#endif
