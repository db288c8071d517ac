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
 *   memory   what plait stores, in every precision: float32 parameters
 *            (the master weights), gradients and Adam's two moments, 4 + 4
 *            + 8 bytes a parameter; stage 1 shards the optimizer state, 2
 *            also the gradients, 3 also the parameters; where the model
 *            stores bf16 activations, a bf16 copy of the weights the
 *            products read (2 bytes an element, never sharded); +
 *            activations (per recompute mode, Korthikanti et al.'s counts
 *            as the model keeps them, in bf16 or float32 tensor by tensor,
 *            times the micro-batches the schedule keeps alive) + working
 *            buffers + the process itself.
 *   time     compute = FLOPs / (the precision's rate x efficiency), with the
 *            forward a recompute mode runs again; TP and PP messages on the
 *            critical path by the alpha-beta model of their link (TP inside
 *            a node, the network's bandwidth shared by a node's ranks); the
 *            pipeline's idle share by the schedule's formula; the DP
 *            reduction (hierarchical across nodes where the comm plugin is),
 *            a collective a bucket or ZeRO unit, overlapped except its last
 *            bucket with what runs while it travels (the last
 *            micro-batch's backward; ZeRO-2: the micro-batches after each;
 *            ZeRO-1 under a pipeline: nothing); the optimizer step bound
 *            by memory bandwidth.
 */
#ifndef PLAIT_CORE_COST_H
#define PLAIT_CORE_COST_H

#include "cost/cluster.h"

/* What one rank of a pipeline stage does in one optimizer step, and what
 * it stores. Messages are counted in elements of msg_bytes each (float32
 * on the wire: the residual stream; bf16 under sequence parallelism on a
 * bf16 run). */
typedef struct plait_cost_rank {
    int dp, tp, pp;              /* layout sizes */
    int cp;                      /* context parallelism: the ranks sharing each sequence (0 = 1) */
    int stage;                   /* its pipeline stage */
    int micro_batches;           /* m: micro-batches this rank runs per step */
    double rows;                 /* tokens of one micro-batch: the rows of its matrix products */
    double width;                /* the model's width over tp: its products' inner size on this rank (0 = not known) */
    int chunks;                  /* v: model chunks per pipeline stage */
    double param_numel;          /* Ψ_rank: elements of the parameters it holds */
    double flat_numel;           /* its flat gradient's elements: every local tensor, a tied copy
                                    too, each starting on a 16-float boundary (train/run_params.c) */
    double largest_layer_numel;  /* its largest layer's parameter elements (ZeRO units) */
    double largest_tensor_numel; /* its largest parameter's elements it holds: the slice tp and ep leave it */
    double tensors;              /* the parameter tensors it holds (0 = not known): the most DP buckets
                                    and ZeRO units they make, a tensor larger than a bucket being one
                                    alone */
    double flops;                /* forward + backward FLOPs per step, recomputed forwards included */
    double recompute_flops;      /* of those, the forwards run again for recomputation */
    double attention_flops;      /* of flops, the fused attention's (a GPU runs them at its own rate) */
    double recompute_attention_flops; /* of recompute_flops, the fused attention's */
    double act_bytes;            /* activation bytes alive at the peak, + the backward scratch */
    double host_act_bytes;       /* [model] recompute_offload = host: the kept boundaries in host memory */
    double offload_bytes;        /* and the bytes copied to and from the host for them a step */
    int bf16;                    /* the model stores its activations in bf16 (plait_model_grants_bf16) */
    int sp;                      /* sequence parallelism: TP's all-reduces are an all-gather and a
                                    reduce-scatter each (the same bytes), the norms' regions split */
    double msg_bytes;            /* bytes an element of a TP or pipeline message (0 = float32's 4) */
    double weight_copy_numel;    /* then: elements of the bf16 copy of the weights the products read */
    double largest_copy_numel;   /* of those, its largest layer's: all ZeRO-3 keeps (model/model.h,
                                    params_gathered) */
    double master_numel;         /* of those, unrounded and without a tied copy (whose values are its
                                  * original's): the weights a distributed optimizer keeps no whole
                                  * float32 copy of ([optim.zeroN] master), and ZeRO-3 gathers in bf16 */
    /* ZeRO-3 on bf16 activations, which gathers master_numel's weights in
     * bf16 (plugins/optim/common/zero.h): the floats its largest layer's
     * gathered parameters take, such a weight counting half (0 = float32:
     * largest_layer_numel), and its largest layer's bf16 copy of tied
     * copies alone (the gpt head's), all the model copies itself then */
    double largest_gather_numel;
    double largest_tied_copy_numel;
    double tp_msgs, tp_msg_elems;/* TP all-reduces per step and the elements of each */
    /* of tp_msgs, the column-parallel products' input-gradient sums a
     * one-pass backward starts before their weight gradients ([parallel.tp]
     * overlap; a reduce-scatter half an all-reduce) and, under sequence
     * parallelism, the norms' outputs gathered again beside the products
     * before the weight gradients that read them (tp_hide_gathers of
     * tp_hide_msgs, an all-gather half an all-reduce), and the FLOPs of
     * what runs while they travel (plait_cost_tp_traffic) */
    double tp_hide_msgs, tp_hide_gathers, tp_hide_flops;
    double pp_msgs, pp_msg_elems;/* pipeline sends per step (activations and gradients) and each's elements */
    /* ring attention (cp > 1, model/ring_attention.c), per step: the
     * forward's ring passes that move a transfer (cp - 1 a block and
     * micro-batch; the backward has as many, each moving two: K and V, and
     * the dK and dV going round), the elements of one transfer (this rank's
     * K and V, kv heads only), the attention FLOPs of one block of the
     * ring, which a forward pass's transfer overlaps (a backward pass's
     * overlaps twice that), and the transfers that overlap nothing (each
     * block's dK and dV coming home at its backward's end) */
    double cp_passes, cp_msg_elems, cp_hide_flops, cp_tail_msgs;
    /* expert parallelism (ep > 1, model/moe.c), per step: the all-to-alls
     * (4 a sparse block and micro-batch: the forward's dispatch and
     * combine and their backward twins, each ep - 1 sends), the bytes the
     * rank sends in them (plait_cost_ep_bytes, as `config check` prints
     * them), and of param_numel the routed experts' elements it holds (its
     * E / ep experts), whose gradients sum over the edp group (dp x cp / ep
     * ranks holding the same experts) instead of dp x cp */
    int ep;
    double ep_msgs, ep_bytes, expert_numel;
    double bubble;               /* the schedule's idle share, 0 without a pipeline */
    /* bytes on the wire per float32 byte of the DP gradient reductions and
     * of ZeRO's parameter gathers (grad_compression, param_gather:
     * coll/compress.h); 0 = 1 (uncompressed) */
    double grad_wire, param_wire;
    /* the layers it holds as `[parallel.pp] stages` writes them (0 the
     * embedding, n_layer + 1 the head): its chunks' ranges, "0-8,33-40"
     * (plait/partition_util.h, plait_partition_format); cut to whole
     * ranges, layers_cut set, where they do not fit */
    char layers[96];
    int layers_cut;
} plait_cost_rank;

/* Bytes per element of each kind of training state, as plait stores it.
 * The precision changes none of them: a bf16 run computes its products in
 * bf16 and, where the model grants it, stores bf16 activations and a bf16
 * copy of the weights beside the float32 ones (plait_cost_rank.bf16). */
typedef struct plait_cost_bytes {
    double weight;       /* a parameter: float32, its own master copy (4) */
    double weight_copy;  /* an element of the bf16 copy the products read under bf16 activations (2) */
    double grad;         /* a gradient as accumulated and reduced: float32 (4) */
    double optim;        /* Adam's moments m and v, float32 (8) */
    double message;      /* an element of a TP all-reduce or a pipeline message: float32 (4) */
    double adam_io;      /* bytes AdamW reads and writes per parameter it owns: the gradient, the
                            parameter and both moments read and written (28) */
    double copy_io;      /* bytes the bf16 copy's refresh after a step reads and writes per element (6) */
} plait_cost_bytes;

void plait_cost_bytes_of(plait_cost_bytes *out);

/* A layout's settings the formulas need beyond its ranks' costs. */
typedef struct plait_cost_job {
    int dp, tp, pp;
    int cp;                   /* context parallelism (0 = 1): the DP group is dp x cp */
    int ep;                   /* expert parallelism (0 = 1): ep consecutive ranks of the DP group, its
                               * innermost */
    int threads;              /* [run] threads: a CPU rank's math threads (0 = the node's cores over
                               * its ranks; plait_cluster_rank_threads) */
    int axes[4];              /* [parallel] order: PLAIT_AXIS_* (layout/mesh.h) innermost first, as
                               * plait_mesh_parse_order gives them; all 0: the default, tp, cp, dp, pp */
    int zero;                 /* 0 = adam (plain DP), 1..3 = ZeRO stage */
    double bucket_bytes;      /* the DP / ZeRO bucket */
    plait_precision precision;
    int hierarchical;         /* DP collectives across nodes go hierarchically (intra, inter, intra) */
    int offload;              /* [optim] offload: 0 none, 1 host, 2 nvme */
    double offload_buffer;    /* [optim] offload_buffer (nvme) */
    int offload_params;       /* [optim] offload_params (zero3: the parameter shards move too) */
    int whole_masters;        /* bit z set: [optim.zeroZ] master = whole (zero1, zero2; else their
                               * default, auto: the masters of master_numel sharded at dp x cp > 1) */
    int overlap_gather;       /* bit z set: [optim.zeroZ] overlap_param_gather (zero1, zero2): the
                               * updated weights' gathers travel beside the next step's forward */
    int grad_accum16;         /* [optim.zero1] grad_accum = bf16: zero1 keeps float32 gradient slices
                               * and, with more than one micro-batch, a bf16 running sum of every
                               * gradient (plugins/optim/common/zero.h) */
    int tp_overlap;           /* [parallel.tp] overlap: the input-gradient sums beside the weight gradients */
    int moments16;            /* [optim] moments = bf16: Adam's two moments 2 bytes each, not 4 */
    int zero_inflight[4];     /* [optim.zeroZ] max_inflight, at z: the reductions (ZeRO-1: with their
                               * received slices) that hold a unit-sized buffer at once (0 = 2, the
                               * plugins' default; plugins/optim/common/zero_pool.c) */
    int zero3_gathered;       /* layers ZeRO-3 holds gathered at once: [optim.zero3] prefetch_layers
                               * + 1 (0 = 2, the default's); 1 (no prefetch) waits for every gather */
    int dp_serial;            /* [parallel.dp] overlap = false: plain DP (adam) starts its buckets'
                               * all-reduces after the backward pass, none hidden behind it */
    int deterministic;        /* [run] deterministic: over more than one micro-batch a step the
                               * gradients are summed in the canonical tree (plait/sum_tree.h),
                               * whose levels count among the buffers */
    /* bytes an element of a tp collective or a pipeline send takes on the
     * wire (0 = the stage's msg_bytes): 2 on a bf16 run, whatever the
     * activations' type, where the comm plugin runs the core's collectives
     * (tcp, verbs) or moves bf16 tensors the device widens back (nccl), 4
     * otherwise (plait_cost_tp_wire_bytes; docs/parallelism.md, "What
     * crosses ranks") */
    double wire_bytes;
    /* bytes an element of ring attention's K and V takes on the wire (0 =
     * the stage's msg_bytes): 2 on a bf16 run whose comm plugin runs the
     * core's point-to-point (tcp, verbs), 4 over nccl
     * (model/ring_attention.c); their gradients dK and dV are float32 */
    double cp_kv_bytes;
} plait_cost_job;

typedef struct plait_cost_mem {
    double param, grad, state;   /* bytes, by the ZeRO formulas (param: with the bf16 copy) */
    double activations;
    double buffers;              /* collective scratch, ZeRO working buffers */
    double process;              /* the runtime itself */
    double total;
    /* the optimizer state [optim] offload moved (then state is 0): in host
     * memory (offload = host; nvme's buffer) and on disk (nvme); neither is
     * in total */
    double host_state, disk;
    /* the kept boundaries [model] recompute_offload moved to host memory
     * (not in total) */
    double host_activations;
} plait_cost_mem;

/* Elements of a rank's ZeRO shard of its parameters over its dp x cp
 * group of n ranks: the routed experts' (ep > 1) over the n / ep ranks
 * holding the same experts, the others over all n. */
double plait_cost_zero_shard(const plait_cost_rank *r, double n);

/* A ZeRO unit's largest size in bytes, as plugins/optim/common/zero.h cuts
 * them: `bucket` ([optim.zeroN] bucket_size) where set; its default, 0,
 * PLAIT_COST_ZERO_BUCKET, or under ZeRO-1 and 2 (`zero`) 4 MiB a rank of
 * the `n` sharing a unit where that is more. */
#define PLAIT_COST_ZERO_BUCKET (25.0 * 1048576)
double plait_cost_zero_unit_bytes(double bucket, int zero, int n);
/* Bytes AdamW moves a parameter it updates: the parameter read and
 * written, its gradient read, both moments read and written (bf16 moments:
 * `moments16`, [optim] moments = bf16). */
double plait_cost_adam_io(int moments16);
/* 1 where rank r's layout runs ZeRO-1/2 as a distributed optimizer
 * ([optim.zeroN] master sharded, the default on a bf16 run with the
 * weights' bf16 copy, dp x cp > 1): the weights read through the copy
 * (master_numel) keep no whole float32 copy, and their updated values
 * are gathered in bf16 (plugins/optim/common/zero.h). */
int plait_cost_distributed(const plait_cost_rank *r, const plait_cost_job *j);
/* 1 where rank r's layout runs ZeRO-3 on bf16 activations: the weights
 * its products read through the bf16 copy gathered in bf16
 * (largest_gather_numel, largest_tied_copy_numel). */
int plait_cost_zero3_bf16(const plait_cost_rank *r, const plait_cost_job *j);
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
/* A GPU's share of its rate (peak x efficiency) at a rank's product width
 * w (the model's width over tp): w / (w + c->half_width). A narrow product
 * has too few output tiles to fill the GPU's units and too little reuse
 * of its operands to hide their reads, so wide products reach more of the
 * peak than narrow ones. 1 on a CPU, without half_width or without w. */
double plait_cost_width_share(const plait_cluster *c, double w);
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
    double attention_rate;        /* FLOP/s its fused attention runs at (0: the products' rate) */
    double recompute;             /* of compute, the forwards run again */
    double stream;                /* CPU: of the busiest stage's compute alone, streaming its weights */
    double tp_s, pp_s;            /* the busiest stage's TP all-reduces (exposed) and pipeline sends */
    double tp_hidden;             /* of its TP collectives, the time behind the weight gradients */
    double wire_bytes;            /* bytes an element of those messages takes on the wire */
    double cp_s, cp_total;        /* its ring attention's transfers: exposed (behind no attention), all */
    double cp_kv_bytes;           /* bytes an element of their K and V takes on the wire */
    const char *cp_link;          /* the cp ring's link kind */
    double ep_s, ep_bytes;        /* the busiest stage's all-to-alls (ep > 1): seconds, bytes it sends */
    const char *ep_link;          /* the ep group's link kind */
    double offload_s, offload_bytes; /* the busiest stage's copies of [model] recompute_offload's kept
                                        boundaries to the host and back: seconds (on the critical path:
                                        the model's copies are ordered with its kernels), bytes */
    double dp_hidden, dp_exposed; /* the DP reduction behind the backward pass, and exposed */
    double dp_ahead;              /* overlap_param_gather: the updated weights' gathers beside the next
                                     step's forward (its first micro-batch's: dp_ahead_window) */
    double dp_ahead_window;
    double dp_window;             /* the compute it can hide behind: the last micro-batch's backward (adam,
                                     zero1), every micro-batch after the first's backward (zero2), the
                                     step's backward (zero3) */
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
/* Seconds rank r's compute of a step takes (recompute: only the forwards
 * it runs again) at `alone` FLOP/s (t->rate, or a CPU rank's share of
 * it): its products at the width's share of that rate, its fused
 * attention at t->attention_rate where the cluster gives one
 * (plait_cluster_attention_rate), else as the products. */
double plait_cost_compute_s(const plait_cluster *c, const plait_cost_time *t, double alone, const plait_cost_rank *r,
                            int recompute);

#endif
