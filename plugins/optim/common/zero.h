/*
 * ZeRO-1, ZeRO-2 and ZeRO-3 (Rajbhandari et al., "ZeRO: Memory Optimizations
 * Toward Training Trillion Parameter Models", 2020) as one engine compiled
 * into each of the zero1, zero2 and zero3 plugins, which differ only in
 * `zero_stage`, their flags and their declared keys. The Adam(W) arithmetic is the
 * host's kernel (host->kernels->adamw), the schedule, clipping and the exact
 * global norm come from optim_common.h: the three plugins and plain `adam`
 * share every line of optimizer math.
 *
 * Partitioning (zero_partition.c). The rank's parameters (its TP/PP slice, in
 * global order) are grouped into *units*: consecutive parameters of one
 * layer, at most [optim.zeroN] bucket_size bytes (a larger tensor is a unit
 * alone). Its default, 0, is ZERO_DEFAULT_BUCKET bytes, and under ZeRO-1
 * and 2, whose reductions and updated weights' gathers pay a ring's latency
 * once a rank and unit, ZERO_RANK_FLOOR floats a rank of the group that
 * shards the unit where that is more: each rank's slice holds 1M floats
 * where the layer has that many, the rule by which Megatron-Core sizes its
 * distributed optimizer's buckets when none is given (1M parameters a DP
 * rank). ZeRO-3 keeps bucket-sized units: it gathers each layer again every
 * micro-batch, a layer ahead. A bucket_size set is taken as it is. A tied parameter pair held by the same rank (transformer.wte and
 * its copy lm_head) get one unit each, so their shards line up element by
 * element. Inside a unit parameters are packed in order, each starting on a
 * 16-float boundary (as in the core's flat buffers, so kernels see the same
 * alignment), and the unit is padded to a multiple of the DP size N. Rank r
 * owns slice r of every unit (PyTorch FSDP's flat-parameter layout, one flat
 * parameter per unit). Gaps and padding are zeros, take no update and count
 * as `padding_elems` in the memory report.
 *
 * Expert parallelism (ABI 1.20). An expert tensor split over ep
 * (PLAIT_PARAM_EXPERT, shard.parts > 1) differs between the ranks of the DP
 * group: its units hold expert tensors only, padded to a multiple of the
 * edp group's size and sharded over that group (init->edp_comm, the ranks
 * holding the same experts), as Megatron-Core's distributed optimizer does;
 * its reduce-scatters, gathers and exports run there, every other unit's
 * over the DP group. Each rank's slices are distinct over the world, so the
 * norm counts them all (dp_rank 0 < ep in plait_optim_counts_in_norm).
 *
 * What each rank keeps (Ψ = elements of the rank's parameters, tied copies
 * sharing storage counted once; S = Σ slice sizes = (Ψ + padding) / N):
 *   ZeRO-1: parameters 4Ψ (core), gradients 4Ψ (core), moments 8S
 *   (ZeRO-1 with grad_accum = bf16: gradient shards 4S, and with more than
 *   one micro-batch a step the running sums 2 (Ψ + padding), its own)
 *   ZeRO-2: parameters 4Ψ (core), gradient shards 4S, moments 8S
 *   (ZeRO-1/2 keeping masters: parameters 4(Ψ - kept) + 4S instead)
 *   ZeRO-3: parameter shards 4S, gradient shards 4S, moments 8S
 * plus working buffers (buffer_bytes): unit-sized buffers for reductions
 * and gathers from a pool that grows to the high-water mark within the
 * buffers the partition declares (zero_buffer_bytes), the tied copy's
 * gradient (ZeRO-1: the core's full copy; 2/3: its shard), and in
 * deterministic mode with accumulation (ZeRO-2/3) the accumulation tree.
 *
 * Gradients. ZeRO-1: the core accumulates micro-batches in its buffers;
 * after a layer's last backward each unit is packed into a buffer and
 * reduce-scattered (asynchronously, at most max_inflight at once); the
 * owner's slice is copied back into the core's gradient. ZeRO-2/3: a unit's
 * gradient buffer exists only from before_backward to the reduce-scatter
 * that follows after_backward, every micro-batch (DeepSpeed's way); the
 * running sum lives only in the rank's slice. Deterministic mode with
 * accumulation keeps the full local gradient in the canonical tree instead
 * (the core's, host->sum_tree) and reduce-scatters once, at the last micro-batch: per-
 * micro-batch reduction would change the summation order. All reductions in
 * deterministic mode use PLAIT_ALGO_ORDERED (elementwise, so shard
 * boundaries do not matter), which makes every stage bit-identical to plain
 * DP + adam and to one process.
 * ZeRO-1 with [optim.zero1] grad_accum = bf16 (grad_accum16) keeps the
 * gradients as ZeRO-2 does, a unit buffer a layer's backward, but adds a
 * layer's micro-batches up in a bf16 buffer of every unit (acc) and
 * reduce-scatters once, at the last: the float32 gradient of the last
 * micro-batch plus the widened sum of those before (Megatron-Core's bf16
 * gradient buffer, with float32 sums on the wire's far side), rounded once
 * into a bf16 slice (slice16; float32 under offload, whose store reads
 * float32) that the step widens a piece at a time: this rank's part of
 * the unit's running sum, which the last micro-batch has read
 * (zero_slice16). A tied pair on one
 * rank adds its float32 slices first and rounds the sum, as a pair over
 * pipeline stages is summed whole in float32 and rounded in take_whole:
 * every layout rounds the same values.
 *
 * Tied parameters. The copy's reduced gradient slice is added into the
 * original's (original + copy, the core's canonical order) before the norm
 * and the update; the copy takes no update (it shares storage). Under
 * pipeline parallelism the tied pair sits on two stages (flagged
 * PLAIT_PARAM_TIED_REMOTE by the core: wte on the first stage, lm_head on
 * the last) and the pp plugin sums it over the embedding group in its
 * finish_grads, before ours. Each such parameter is a "whole" unit of its
 * own: its gradient stays whole on the rank for the step (ZeRO-1: the
 * core's; ZeRO-2/3: whole_grad, accumulated in place over the
 * micro-batches, or leaf by leaf into the accumulation tree in
 * deterministic mode), and once complete, at its last backward, it is
 * all-reduced over DP in place and waited for. The pp plugin then adds two
 * DP-reduced halves, Σ embedding + Σ head, the sum plain DP and one process
 * compute (a sum over DP of embedding + head would differ in the last
 * bits). finish_grads takes the unit's slice of it without reducing again.
 * An all-reduce, not a reduce-scatter, because the embedding group needs
 * the whole tensor: the
 * same traffic as plain DP for that tensor. Both stages' units hold one
 * tensor of the same size, so their slices line up, and since both get the
 * same summed gradient the two copies take identical Adam updates (the
 * last stage's copy has state of its own, as with plain Adam).
 *
 * Updated weights (ZeRO-1/2, zero_step.c). step() all-gathers every unit's
 * updated slices into the core's storage (or, as a distributed optimizer,
 * the bf16 copies), at most max_inflight at once, and waits for them; with
 * [optim.zeroN] overlap_param_gather it starts the first max_inflight and
 * returns, and each layer's before_forward waits for that layer's units
 * (the gathers start and complete in unit order, which is layer order)
 * and starts the next ones as room frees, so the gathers travel beside the
 * forward of the layers before them. Every other entry point (the backward
 * hooks, finish_grads, step, the exports) first starts and waits for every
 * gather left (zero_gather_finish): a checkpoint's exports, which every DP
 * rank makes at the same point, find the weights whole.
 *
 * Parameters (ZeRO-3, zero_gather.c). A layer's units are all-gathered in
 * before_forward/before_backward and released in after_forward/
 * after_backward. On a bf16 run (ABI 1.37, plait_optim_init.copy_gathered)
 * the weights the model reads only through their bf16 copy are units of
 * their own, gathered in bf16: each rank rounds its float32 slice
 * (to_bf16, the rounding the model made of the gathered float32 weight,
 * elementwise, so the same bits), the bf16 slices are all-gathered into a
 * bf16 buffer, half a float32 unit's, and the model reads them there
 * (copy_view); it keeps no copy of them (PyTorch FSDP's param_dtype =
 * bfloat16, DeepSpeed's ZeRO-3 gathering its fp16/bf16 parameters). Prefetch follows the order hooks arrived in during the
 * previous step (first step: forward ascending, backward descending): the
 * gathers of the next `prefetch_layers` hooks' layers are started early, and a
 * released unit that one of them needs is kept rather than gathered again.
 * If the order differs from the record, prediction resynchronises or stops
 * for the step; correctness never depends on it. A tied copy's data points at
 * its original's gathered unit while its layer runs.
 *
 * Compression ([optim.zeroN] grad_compression, ABI 1.6, plait/coll.h):
 * the gradient reduce-scatters travel as bf16, int8 or onebit (onebit's
 * error feedback: one residual per unit, a unit's padded size, counted in
 * buffer_bytes); each slice's owner gets the float32 sum of the compressed
 * contributions. Every ZeRO stage may gather parameters as bf16
 * ([optim.zeroN] param_gather): every rank, the slice's owner too, computes
 * with the rounded values while the float32 slices (pshard: ZeRO-3's
 * shards; ZeRO-1/2 keep one more copy of their slice, 4S bytes, counted in
 * param_bytes) take the update and go into checkpoints. ZeRO-1/2 with
 * float32 gathers update the core's copy in place: it is the master there.
 *
 * Distributed optimizer ([optim.zeroN] master, ABI 1.26, zero1 and zero2:
 * Megatron-LM's --use-distributed-optimizer, DeepSpeed's bf16 optimizer).
 * Where the model reads a weight only through its bf16 copy, the core
 * keeps no float32 storage for it and hands the copy over
 * (plait_optim_init.weight_copy): the float32 slice (pshard) is its only
 * master. Such weights (of an even numel) are units of their own, gathered
 * in bf16 as Megatron-LM's distributed optimizer gathers them: each rank
 * rounds its slice (to_bf16, the rounding the model made from the whole
 * float32 weight before, elementwise, so the products read the same
 * bits), and the gathered bf16 values are copied into every rank's copy,
 * half the bytes of a float32 gather. An odd one's unit gathers float32
 * and rounds into the copy. The other parameters (norms, embeddings,
 * float32-read biases) come back whole into the core's float32 storage
 * as before, in param_gather's format. Per parameter with a kept copy: 2 (the copy) + 4 (gradients,
 * ZeRO-1; 4/N ZeRO-2) + 12/N bytes.
 *
 * ZeRO-1/2 all-gather updated parameters into the core's storage at the
 * end of step(). Communication per step (ring algorithms): ZeRO-1/2 move
 * 2(N-1)/N·Ψ like an all-reduce; ZeRO-3 adds a second parameter gather
 * (backward): 3(N-1)/N·Ψ, 1.5× (less by the gathers prefetch keeps).
 *
 * Threading: every function is called from the training thread.
 */
#ifndef PLAIT_ZERO_H
#define PLAIT_ZERO_H

#include <plait/plugin.h>

#include "bf16_moments.h"
#include "offload.h"
#include "optim_common.h"

/* Floats each parameter's packed offset is aligned to (64 bytes). */
#define ZERO_ALIGN 16
/* the least floats a unit gives each rank of its group (a unit never spans
 * two layers, so a layer with fewer is one unit): see Partitioning above */
#define ZERO_RANK_FLOOR ((size_t)1 << 20)
/* bucket_size = 0's bucket */
#define ZERO_DEFAULT_BUCKET ((size_t)25 << 20)

/* A piece of this rank's slice of a unit that belongs to one parameter. */
typedef struct zero_seg {
    int32_t param;     /* local index */
    size_t unit_off;   /* packed offset in the unit */
    size_t param_off;  /* element offset in the parameter */
    size_t len;
} zero_seg;

typedef struct zero_unit {
    int32_t layer;
    int32_t first, count;  /* members: local params first .. first+count-1 */
    size_t numel;          /* end of the last member (packed, with alignment gaps) */
    size_t padded;         /* numel rounded up to a multiple of N */
    size_t shard;          /* padded / N: the slice each rank owns */
    size_t shard_off;      /* offset of this rank's slice in the shard arrays */
    size_t tree_off;       /* offset in the deterministic accumulation vector */
    int32_t seg_first, n_seg;
    int copy;              /* a tied copy sharing its original's storage: gradient only */
    int expert;            /* members are expert tensors split over ep: sharded over
                            * the edp group (z->edp), not the DP group */
    int whole;             /* a tied parameter whose partner is on another stage: its
                            * gradient stays whole (ZeRO-1: the core's; 2/3:
                            * whole_grad + whole_off) and is all-reduced over DP at
                            * its last backward, before the embedding group's sum */
    size_t whole_off;
    int32_t original;      /* copy: the unit of its original, else -1 */

    float *gbuf;           /* ZeRO-2/3 (and ZeRO-1 accumulating in bf16): gradient buffer
                            * between before_ and after_backward */
    size_t acc_off;        /* ZeRO-1 accumulating in bf16: its running sum in z->acc */
    int32_t acc_n;         /* micro-batches folded into it this step */
    /* slice16: an original whose tied copy is on this rank keeps a float32
     * slice (tied_gshard at tied_off, -1: none) until the copy's joins it */
    int64_t tied_off;
    size_t s16_off;        /* slice16 without acc's room (zero_slice16): its slice in gshard16 */
    int32_t rs_issued;     /* reductions issued this step */
    size_t res_off;        /* onebit: its error feedback in the residual array */
    /* ZeRO-3 parameters */
    int bf16;              /* every member is gathered in bf16 (zero_gathers_bf16): the
                            * gathered buffer (ZeRO-3's pbuf) holds bf16 */
    float *pbuf;           /* gathered unit, or NULL */
    plait_request *ag_req; /* gather in flight */
    int32_t held;          /* layers in use needing it */
} zero_unit;

/* Floats of acc widened at once (zero.h, grad_accum16). */
#define ZERO_ACC_CHUNK ((size_t)1 << 16)
/* The elements unit u's running sum takes in acc: its padded size, rounded
 * up to 8 so that every unit's sum starts on 16 bytes. */
static inline size_t zero_acc_span(const zero_unit *u) { return (u->padded + 7) & ~(size_t)7; }

/* The floats a gathered unit's buffer takes: its padded elements, bf16
 * (two a float) where the unit is gathered in bf16. */
static inline size_t zero_gathered_floats(const zero_unit *u) { return u->bf16 ? (u->padded + 1) / 2 : u->padded; }

/* Kinds of hook events in the prefetch trace. */
#define ZERO_EV_FWD 0
#define ZERO_EV_BWD 1
#define ZERO_EVENT(kind, layer) ((int32_t)(layer)*2 + (kind))

/* A buffer of the pool: requests are carved from its start (`used` floats,
 * each on a ZERO_ALIGN boundary); it is free again when all `refs` are
 * returned. */
typedef struct zero_buf {
    float *ptr;
    size_t numel;
    size_t used;
    int32_t refs;
} zero_buf;

/* An asynchronous collective whose buffer returns to the pool on completion. */
typedef struct zero_flight {
    int32_t unit;
    int kind;              /* ZERO_FLIGHT_* */
    float *buf;            /* pool buffer it reads/writes */
    plait_request *req;
} zero_flight;
enum { ZERO_FLIGHT_RS = 1, ZERO_FLIGHT_AG_STEP = 2, ZERO_FLIGHT_AR = 3 };

typedef struct zero {
    int zero_stage;           /* ZeRO ZeRO-1, 2 or 3 (not a pipeline stage) */
    const char *name;             /* "zero1" ... */
    const plait_host *host;
    const plait_config *cfg;
    plait_param_set *params;
    plait_comm *dp, *world;
    int n, rank;                  /* DP size and rank */
    plait_comm *edp;              /* the ranks holding this rank's experts (init->edp_comm) */
    int en, erank;                /* its size and this rank's place in it */
    plait_comm_stats edp_before;  /* its counters at the step's first hook (when not z->dp) */
    int32_t micro_batches;
    int deterministic;
    int tree_mode;                /* deterministic with accumulation and owned gradients */
    /* ZeRO-1, [optim.zero1] grad_accum = bf16: the gradients are the
     * engine's, as ZeRO-2's are (owns_grads), and a layer's micro-batches
     * before the last add up in `acc` (bf16, acc_numel: every unit's
     * padded size) instead of being reduced; the last one's float32
     * gradient plus that sum is reduce-scattered once (float32 sums)
     * in place in the unit's buffer, and rounded into the
     * slice, bf16 (slice16: gshard16 in place of gshard) but where [optim]
     * offload hands the store float32 slices (zero_grads.c). acc is NULL
     * with one micro-batch a step. */
    int grad_accum16;
    int owns_grads; /* ZeRO-2/3, or grad_accum16 */
    int slice16;    /* grad_accum16 without offload: the reduced slices in bf16 */
    plait_bf16 *acc;
    size_t acc_numel;
    float *acc_tmp; /* ZERO_ACC_CHUNK floats: bf16 sums or slices widened a piece at a time */
    plait_optim_hparams hp;
    plait_optim_topology topo;          /* dp_rank forced to 0: every rank counts its slices */
    size_t bucket_elems;
    int unit_floor; /* bucket_size = 0 under ZeRO-1/2: units grow to ZERO_RANK_FLOOR a rank */
    int max_inflight;
    int prefetch;
    /* ZeRO-1/2, [optim.zeroN] overlap_param_gather: step() starts the
     * updated weights' gathers and leaves them travelling; the next unit to
     * start is ag_next (n_units: none left), each layer's forward waits for
     * its units (layer_last_unit: its last, -1 for none), and every other
     * entry point waits for them all first (zero_gather_finish) */
    int overlap_gather;
    int32_t ag_next;
    int32_t *layer_last_unit;
    plait_compression compression; /* [optim.zeroN] grad_compression: the reduce-scatters' wire format */
    plait_compression param_gather; /* ZeRO-3, [optim.zero3] param_gather: bf16 or none */
    int32_t first_layer;            /* lowest layer with a local parameter */

    /* partition */
    zero_unit *units;
    int32_t n_units;
    zero_seg *segs;
    int32_t n_segs;
    int32_t *unit_of_param;       /* local param -> unit */
    size_t *param_off;            /* local param -> packed offset in its unit */
    int32_t n_layer_slots;        /* params->n_layers_total */
    int32_t *grad_units, *grad_first;     /* CSR: layer -> units with its gradients */
    int32_t *gather_units, *gather_first; /* CSR: layer -> units its params need (ZeRO-3) */
    size_t shard_numel;           /* S: slices of units with state */
    size_t copy_shard_numel;      /* slices of tied-copy units */
    size_t psi;                   /* Ψ: elements of parameters with state */
    size_t tree_numel;
    size_t max_unit;              /* largest padded unit */

    /* storage: tensor memory (the device's; plait/device_util.h), touched
     * only through host->kernels, the collectives and the device's copy */
    float *state;                /* exp_avg [S] then exp_avg_sq [S]; NULL when offloaded or bf16 */
    int moments16;               /* [optim] moments = bf16: the moments in m16 instead */
    bf16_moments m16;            /* exp_avg and exp_avg_sq [S] each, bf16 (bf16_moments.h) */
    plait_optim_offload offload; /* [optim] offload */
    optim_offload *store;        /* the moments offloaded (offload.h), positions as in state */
    optim_offload_seg *osegs;    /* the step's segments for the store */
    size_t n_osegs;
    float *gshard;                /* ZeRO-2/3: reduced gradient slices [S] */
    float *copy_gshard;           /* ZeRO-2/3: tied copies' slices */
    plait_bf16 *gshard16;         /* slice16: the bf16 slices acc has no room for (zero_slice16) */
    size_t s16_numel;
    float *tied_gshard;           /* slice16: the float32 slices of originals with a local copy */
    size_t tied_numel;
    float *pshard;                /* ZeRO-3, and ZeRO-1/2 gathering in bf16 or keeping masters:
                                   * the float32 parameter slices [S] the update applies to */
    plait_bf16 *const *wcopy;     /* ZeRO-1/2 keeping masters ([optim.zeroN] master): per local
                                   * parameter the model's bf16 copy the gathers fill, or NULL
                                   * (plait_optim_init.weight_copy); NULL when none is kept */
    size_t kept_numel;            /* elements of the parameters with a kept copy (no float32
                                   * storage in the core) */
    /* ZeRO-3 gathering bf16 copies (PLAIT_OPTIM_GATHERS_COPIES): per local
     * parameter 1 where the model reads bf16 values gathered here
     * (plait_optim_init.copy_gathered), and the slots pointed at them while
     * its layer is held (copy_view); NULL when the core passed none */
    const unsigned char *gathered16;
    void **view;
    float *whole_grad;            /* ZeRO-2/3: gradients of whole units [whole_numel] */
    float *residual;              /* onebit: every unit's error feedback (res_off) */
    size_t residual_numel;
    size_t whole_numel;
    int materialized;
    int64_t updates;
    plait_optim_norm norm;        /* the exact Σ g² accumulator of this rank's slices */

    /* working buffers */
    zero_buf *pool;
    int32_t n_pool, cap_pool;
    size_t pool_bytes;
    zero_flight *flight;          /* FIFO of in-flight collectives holding pool buffers */
    int32_t n_flight, cap_flight;
    const plait_sum_tree_api *tree_api; /* host->sum_tree, checked at create (tree_mode) */
    plait_sum_tree *tree;              /* created in materialize (tree_mode) */

    /* ZeRO-3 prefetch trace */
    int32_t *trace_prev, n_prev, cap_prev;
    int32_t *trace_cur, n_cur, cap_cur;
    int32_t pos;                  /* next expected index in trace_prev */
    int predicting;

    /* accounting */
    int in_step;
    plait_comm_stats dp_before;
    uint64_t gathers_issued;      /* ZeRO-3 unit gathers since create (for tests) */
} zero;

/* 1 where local parameter i is gathered in bf16 (its unit's bf16): ZeRO-3's
 * copy_gathered; ZeRO-1/2's kept copies of an even numel, whose gathered
 * bf16 values go into the copy a float (two of them) at a time. */
static inline int zero_gathers_bf16(const zero *z, int32_t i) {
    if (z->gathered16) return z->gathered16[i] != 0;
    return z->wcopy && z->wcopy[i] && z->params->params[i].numel % 2 == 0;
}

/* An expert tensor split over ep: its units shard over the edp group. */
static inline int zero_param_expert(const plait_param *p) {
    return (p->flags & PLAIT_PARAM_EXPERT) && p->shard.dim >= 0 && p->shard.parts > 1;
}

/* ---- zero_partition.c ------------------------------------------------------- */
/* Build units, segments and layer maps for this rank (no storage). */
plait_status zero_partition(zero *z);
void zero_partition_free(zero *z);
/* The group unit u is sharded over (expert units: the edp group, as
 * Megatron-Core's distributed optimizer shards expert parameters over the
 * expert-data-parallel ranks), its size and this rank's place in it. */
static inline plait_comm *zero_comm(const zero *z, const zero_unit *u) { return u->expert ? z->edp : z->dp; }
static inline int zero_n(const zero *z, const zero_unit *u) { return u->expert ? z->en : z->n; }
static inline int zero_rank(const zero *z, const zero_unit *u) { return u->expert ? z->erank : z->rank; }
/* This rank's slice of unit u: [lo, lo + shard). */
static inline size_t zero_lo(const zero *z, const zero_unit *u) { return (size_t)zero_rank(z, u) * u->shard; }

/* slice16: unit u's bf16 slice. With more than one micro-batch a step it
 * is this rank's part of the unit's running sum in acc, which holds
 * nothing once the last micro-batch has widened it and is filled again
 * only after the step (the reduce-scatter lands in the bf16 buffer, as
 * Megatron-Core's and Apex's do); else, and for a whole unit (no sum), in
 * gshard16. */
static inline plait_bf16 *zero_slice16(const zero *z, const zero_unit *u) {
    if (z->acc && !u->whole) return z->acc + u->acc_off + zero_lo(z, u);
    return z->gshard16 + u->s16_off;
}

/* ---- zero_pool.c ------------------------------------------------------- */
/* Bytes of working buffers the partition declares: ZeRO-1 max_inflight
 * reductions of the largest unit (with its received slice); ZeRO-2/3 the
 * largest layer's gradient units and max_inflight largest units; ZeRO-3
 * also the gathered units of prefetch_layers + 1 layers (a bf16 unit at
 * half), and where it gathers bf16 from offloaded slices one float32
 * slice to round. The pool releases
 * unused buffers rather than grow past it. */
uint64_t zero_buffer_bytes(const zero *z);
/* A buffer of at least `numel` floats (reused, or allocated and kept). */
float *zero_buf_get(zero *z, size_t numel);
void zero_buf_put(zero *z, float *ptr);
void zero_pool_free(zero *z);
/* Make room for one more in-flight collective: completes the oldest while
 * max_inflight are pending. Call before taking its buffer. */
plait_status zero_flight_room(zero *z);
/* Register an issued collective (its buffer returns to the pool when it is
 * completed). */
plait_status zero_flight_push(zero *z, int32_t unit, int kind, float *buf, plait_request *req);
/* Complete the oldest / every in-flight collective. */
plait_status zero_flight_pop(zero *z);
plait_status zero_flight_drain(zero *z);
/* Complete unit u's reduction if one is in flight (and everything before it). */
plait_status zero_flight_wait_unit(zero *z, int32_t unit);

/* ---- zero_grads.c ------------------------------------------------------ */
plait_status zero_before_backward_grads(zero *z, int32_t layer, int32_t mb);
plait_status zero_after_backward_grads(zero *z, int32_t layer, int32_t mb, int last);
/* Finish a reduction (called from the flight queue; the request is done). */
plait_status zero_rs_complete(zero *z, const zero_flight *f);
plait_status zero_finish_grads(void *state);

/* ---- zero_gather.c (ZeRO-3) -------------------------------------------- */
plait_status zero_acquire_layer(zero *z, int kind, int32_t layer);
plait_status zero_release_layer(zero *z, int32_t layer);
/* Release every gathered unit (end of step, destroy). */
plait_status zero_release_all(zero *z);
/* Commit the step's hook trace as the prediction for the next one. */
void zero_trace_commit(zero *z);
/* Initial prediction: forward ascending, backward descending per micro-batch. */
plait_status zero_trace_seed(zero *z);

/* ---- zero_step.c -------------------------------------------------------- */
plait_status zero_step(void *state, const plait_optim_step_in *in, plait_optim_step_out *out);
/* ZeRO-1/2: every rank's slices into the core's parameters (each unit
 * all-gathered, waited for), in [optim.zeroN] param_gather's format. */
plait_status zero_gather_updated(zero *z);
/* overlap_param_gather: start the gathers (step()); wait for those of
 * `layer`'s units, starting the next ones as room frees (its forward); start
 * and wait for every one left (any other entry point). No-ops when none is
 * left. */
plait_status zero_gather_begin(zero *z);
plait_status zero_gather_until(zero *z, int32_t layer);
plait_status zero_gather_finish(zero *z);
/* ZeRO-1/2: finish an all-gather of updated parameters into the core
 * (the request is done). */
plait_status zero_ag_complete(zero *z, const zero_flight *f);

/* ---- zero_export.c ----------------------------------------------------- */
/* plait_optim_ops.export_tensor, export_shard and shard_source (state:
 * the zero). */
plait_status zero_export(void *state, int32_t param_index, const char *which, float *dst);
plait_status zero_export_shard(void *state, int32_t param_index, const char *which, size_t *offset, size_t *count,
                               float *dst);
plait_status zero_shard_source(void *state, int32_t param_index, const char *which, size_t *offset, size_t *count,
                               const float **src);

/* ---- zero_state.c ------------------------------------------------------ */
/* The plugins' function tables, one per stage. */
extern const plait_optim_ops zero1_ops, zero2_ops, zero3_ops;
/* [optim.zero1] grad_accum's choices, in the order of its values. */
#define ZERO_GRAD_ACCUM_NAMES                                                                                          \
    { "fp32", "bf16", NULL }
/* The keys of [optim.zeroN]: zero1's grad_accum, zero1's and zero2's
 * overlap_param_gather and master, then the four every stage declares
 * (bucket_size, max_inflight, grad_compression, param_gather), then zero3's
 * prefetch_layers. zero1 declares the seven from zero_keys, zero2 the six
 * from zero_keys + 1, zero3 the five from zero_keys + 3. */
extern const plait_key_decl zero_keys[8];
/* Start accounting a step's traffic at its first hook. */
void zero_begin_traffic(zero *z);

/* Pointers to this rank's slice of unit u in a shard array. */
static inline float *zero_slice(const zero *z, float *base, const zero_unit *u) {
    (void)z;
    return base + u->shard_off;
}

#endif
