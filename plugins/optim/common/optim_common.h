/*
 * Logic shared by the Adam-family optimizer plugins (adam, zero1/2/3),
 * compiled into each of them (a static source, no shared library): the
 * hyperparameters of [optim], the learning-rate schedule, which gradients a
 * rank counts in the global norm, and the exact global gradient norm.
 * Uses only the SDK (plugins never link the core).
 *
 * Learning-rate schedule (step s counts from 0, as plait_optim_step_in.step):
 *   warmup  s < W:        lr * (s + 1) / (W + 1)         (nanoGPT's current
 *                          rule: step 0 already moves, with lr / (W + 1))
 *   cosine  W <= s <= D:  min_lr + (lr - min_lr) * (1 + cos(pi * (s - W) / (D - W))) / 2
 *           s > D:        min_lr
 *           (D <= W: min_lr from step W on)
 *   constant  s >= W:     lr
 * where W = [optim] warmup_steps and D = [optim] lr_decay_steps, or
 * [run] steps when that is 0. Computed in double.
 *
 * Gradient clipping ([optim] grad_clip = c > 0), as
 * torch.nn.utils.clip_grad_norm_: with the global L2 norm n of every
 * gradient, the gradients are scaled by c / (n + 1e-6) when that is below 1.
 * A non-finite norm fails the step (no parameter changes) with a message:
 * the run has diverged.
 *
 * Which gradients count in the norm. Every distinct gradient element of the
 * model must be counted exactly once over the whole world:
 *   - DP: replicas hold equal reduced gradients; only DP rank 0 counts
 *     (a ZeRO plugin passes its own rule: each rank counts its shard).
 *   - TP: a parameter this rank holds whole (shard.parts <= 1) while
 *     [parallel] tp > 1 is replicated on every TP rank: only TP rank 0
 *     counts it. Split parameters count on every TP rank (their slices are
 *     disjoint; padding positions hold zero gradient and add nothing).
 *   - PP: stages hold different layers; each counts its own.
 *   - Tied copies (PLAIT_PARAM_TIED_COPY: lm_head.weight) never count: the
 *     original (transformer.wte.weight) holds the same, complete gradient.
 * The TP rank is read from any split parameter's shard.index (all split
 * parameters of a rank share it).
 *
 * Exactness. Each rank accumulates Σ g² with host->kernels->sumsq_exact into
 * a plait_sumsq_acc (integer bins). The accumulators are summed over the
 * world with one all-reduce of int64 SUM over 32-bit limbs of every bin
 * (integer addition is associative, so any algorithm and rank count gives
 * the same bits), then carried back into 128-bit bins and rounded once with
 * sumsq_value. The norm is therefore bit-identical for every layout.
 */
#ifndef PLAIT_OPTIM_COMMON_H
#define PLAIT_OPTIM_COMMON_H

#include <plait/host.h>
#include <plait/optim.h>

typedef enum optim_schedule {
    OPTIM_SCHEDULE_COSINE = 0,
    OPTIM_SCHEDULE_CONSTANT = 1
} optim_schedule;

typedef struct optim_hparams {
    double lr, min_lr;
    optim_schedule schedule;
    int64_t warmup_steps;
    int64_t decay_steps;   /* resolved: lr_decay_steps, or [run] steps when 0 */
    double beta1, beta2, eps, weight_decay;
    double grad_clip;      /* 0 = no clipping */
} optim_hparams;

/* Seconds the training thread has been blocked on communicator `a` and on
 * `b` (NULL, or the same as `a`, adds nothing) since they were created; the
 * difference of two calls around step() is its wait_seconds. 0 when the
 * host has no communicator statistics. */
double optim_wait_seconds(const plait_host *host, plait_comm *a, plait_comm *b);

/* Fill step()'s report `out` (NULL ignored) up to its struct_size. */
void optim_report_step(plait_optim_step_out *out, double lr, double grad_norm, uint64_t bytes_sent,
                       double wait_seconds);

/* Read [optim] (and [run] steps). Fails only if a key is undeclared. */
plait_status optim_read_hparams(const plait_host *host, const plait_config *cfg, optim_hparams *out);

/* Learning rate for 0-based step `step` (see above). */
double optim_lr_at(const optim_hparams *hp, int64_t step);

/* Gradient multiplier for clipping at global norm `norm` (1 = unchanged). */
double optim_clip_scale(double grad_clip, double norm);

/* The start of one AdamW update, shared by adam and the ZeRO stages: fails
 * (naming `who`, nothing changed) when the global norm is not finite; else
 * advances *updates and fills the kernel arguments for this step: the
 * scheduled lr, the clipping scale and the bias-correction step. */
plait_status optim_begin_update(const plait_host *host, const char *who, const optim_hparams *hp, int64_t step,
                                double norm, int64_t *updates, plait_adamw_args *args);

/* This rank's place, for the norm rule. */
typedef struct optim_topology {
    int32_t dp_rank;     /* rank in the DP group (0 without one) */
    int32_t tp;          /* [parallel] tp */
    int32_t tp_rank;     /* from the split parameters' shard.index (0 if none) */
} optim_topology;

/* Derive the topology from the init arguments; fails if tp > 1 while no
 * local parameter is split (the rank could not tell its TP rank). */
plait_status optim_topology_from_init(const plait_optim_init *init, optim_topology *out);

/* 1 if this rank counts `p`'s gradient in the global norm under the plain
 * (replicated-gradient) rule above. */
int optim_counts_in_norm(const optim_topology *topo, const plait_param *p);

/* Sum `local` over `world` exactly and return the global Σ g² as a double
 * (+Inf if any element anywhere was not finite). world == NULL or a
 * single-rank world: no communication. *bytes_sent (may be NULL) receives
 * the bytes this rank sent (from the communicator's counters). */
plait_status optim_global_sumsq(const plait_host *host, plait_comm *world, const plait_sumsq_acc *local,
                                double *sumsq, uint64_t *bytes_sent);

/* The limb encoding used on the wire (exposed for tests): 4 int64 per bin
 * (32-bit limbs of lo then hi, least significant first) followed by the
 * non-finite count. */
#define OPTIM_SUMSQ_WIRE_COUNT (PLAIT_SUMSQ_BINS * 4 + 1)
void optim_sumsq_to_wire(const plait_sumsq_acc *acc, int64_t *wire);
void optim_sumsq_from_wire(const int64_t *wire, plait_sumsq_acc *acc);

#endif
