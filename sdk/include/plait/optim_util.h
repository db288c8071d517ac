/*
 * plait SDK — helpers every optimizer plugin needs, shared with plait's own
 * (adam, zero1/2/3 use exactly these): the [optim] hyperparameters, the
 * learning-rate schedule, clipping by the exact global gradient norm, the
 * rule of which gradients count in that norm, and the step report.
 *
 * Header-only, built on ABI v1.0 host functions (config_get, kernels, coll)
 * and, where the core has them, the 1.3 device (plait/device_util.h): the
 * helpers work in every 1.x core. A plugin that keeps its tensors in device
 * memory declares abi_minor 3 (see plait/device_util.h). Link with -lm
 * (plait_add_plugin does). All functions are reentrant; errors are reported
 * through host->set_error and the returned status.
 *
 * Learning-rate schedule (step s counts from 0, as plait_optim_step_in.step):
 *   warmup  s < W:        lr * (s + 1) / (W + 1)         (nanoGPT's current
 *                          rule: step 0 already moves, with lr / (W + 1))
 * then, by [optim] lr_schedule, with m = min_lr:
 *   cosine  W <= s <= D:  m + (lr - m) * (1 + cos(pi * (s - W) / (D - W))) / 2
 *           s > D:        m
 *           (D <= W: m from step W on)
 *   constant  s >= W:     lr
 *   linear (ABI 1.36)  W <= s <= D:  m + (lr - m) * (1 - (s - W) / (D - W)); s > D: m
 *   wsd (ABI 1.36, warmup-stable-decay): lr until S = D - K (K = [optim]
 *           lr_wsd_decay_steps; S = W where K reaches into the warmup),
 *           then m + (lr - m) * f(p) with p = (s - S) / (D - S) for
 *           S <= s <= D, f by [optim] lr_wsd_decay_style: linear 1 - p,
 *           cosine (1 + cos(pi * p)) / 2, sqrt 1 - sqrt(p), exponential
 *           2 * 0.5^p - 1 (Megatron-LM's); s > D: m
 *   inverse_sqrt (ABI 1.36)  s >= W:  max(m, lr * sqrt(max(W, 1) / max(s, 1)))
 *           (D plays no part)
 * where W = [optim] warmup_steps and D = [optim] lr_decay_steps, or
 * [run] steps when that is 0. Computed in double. A core before 1.36
 * refuses the 1.36 schedules' names; a plugin declaring a minor below 36
 * is refused beside them (its copy of this helper reads them as cosine).
 *
 * Gradient clipping ([optim] grad_clip = c > 0), as
 * torch.nn.utils.clip_grad_norm_: with the global L2 norm n of every
 * gradient, the gradients are scaled by c / (n + 1e-6) when that is below 1.
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
 *   - EP (ABI 1.17): an expert tensor split over the ep group
 *     (PLAIT_PARAM_EXPERT, shard.dim 0, shard.parts > 1) counts on the
 *     first ep ranks of the dp x cp group, each holding its own experts;
 *     one split over tp (each expert's width, shard.dim 1 or 2, ABI 1.24)
 *     counts as any tp slice; one split over both (ABI 1.28,
 *     plait_param_split_twice) on every tp rank of those first ep ranks.
 *   - Tied copies (PLAIT_PARAM_TIED_COPY: lm_head.weight) never count: the
 *     original (transformer.wte.weight) holds the same, complete gradient.
 * The TP rank is read from any split parameter's shard.index (all split
 * parameters of a rank share it).
 *
 * Exactness. Each rank accumulates Σ g² with host->kernels->sumsq_exact into
 * a plait_sumsq_acc (integer bins) in device memory (plait_optim_norm), then
 * copies it to the host once per step. The host copies are summed over the
 * world with one all-reduce of int64 SUM over 32-bit limbs of every bin
 * (integer addition is associative, so any algorithm and rank count gives
 * the same bits), then carried back into 128-bit bins and rounded once with
 * sumsq_value. The norm is therefore bit-identical for every layout.
 */
#ifndef PLAIT_OPTIM_UTIL_H
#define PLAIT_OPTIM_UTIL_H

#include <math.h>
#include <string.h>

#include <plait/host.h>
#include <plait/device_util.h>
#include <plait/optim.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plait_lr_schedule {
    PLAIT_LR_COSINE = 0,
    PLAIT_LR_CONSTANT = 1,
    PLAIT_LR_LINEAR = 2,      /* ABI 1.36 */
    PLAIT_LR_WSD = 3,         /* ABI 1.36: warmup, stable, decay */
    PLAIT_LR_INVERSE_SQRT = 4 /* ABI 1.36 */
} plait_lr_schedule;

/* The shape of wsd's final decay ([optim] lr_wsd_decay_style, ABI 1.36). */
typedef enum plait_lr_decay_shape {
    PLAIT_LR_DECAY_LINEAR = 0,
    PLAIT_LR_DECAY_COSINE = 1,
    PLAIT_LR_DECAY_SQRT = 2,       /* 1 - sqrt(p) */
    PLAIT_LR_DECAY_EXPONENTIAL = 3 /* 2 * 0.5^p - 1 */
} plait_lr_decay_shape;

/* The Adam-family keys of [optim] (declared by the core for every optimizer). */
typedef struct plait_optim_hparams {
    double lr, min_lr;
    plait_lr_schedule schedule;
    int64_t warmup_steps;
    int64_t decay_steps;   /* resolved: lr_decay_steps, or [run] steps when 0 */
    double beta1, beta2, eps, weight_decay;
    double grad_clip;      /* 0 = no clipping */
    /* wsd (ABI 1.36): the final decay's steps and shape; read only where
     * lr_schedule = wsd, so the helper works in an older core elsewhere */
    int64_t wsd_decay_steps;
    plait_lr_decay_shape wsd_shape;
} plait_optim_hparams;

/* Read [optim] (and [run] steps). Fails only if a key is undeclared. */
static inline plait_status plait_optim_read_hparams(const plait_host *host, const plait_config *cfg,
                                                    plait_optim_hparams *out) {
    memset(out, 0, sizeof *out);
    struct {
        const char *key;
        double *dst;
    } floats[] = {
        {"lr", &out->lr},       {"min_lr", &out->min_lr}, {"beta1", &out->beta1},         {"beta2", &out->beta2},
        {"eps", &out->eps},     {"weight_decay", &out->weight_decay}, {"grad_clip", &out->grad_clip},
    };
    plait_value v;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        plait_status st = host->config_get(cfg, "optim", floats[i].key, &v);
        if (st != PLAIT_OK) return st;
        *floats[i].dst = v.f;
    }
    plait_status st = host->config_get(cfg, "optim", "warmup_steps", &v);
    if (st != PLAIT_OK) return st;
    out->warmup_steps = v.i;
    if ((st = host->config_get(cfg, "optim", "lr_decay_steps", &v)) != PLAIT_OK) return st;
    out->decay_steps = v.i;
    if (out->decay_steps == 0) {
        if ((st = host->config_get(cfg, "run", "steps", &v)) != PLAIT_OK) return st;
        out->decay_steps = v.i;
    }
    if ((st = host->config_get(cfg, "optim", "lr_schedule", &v)) != PLAIT_OK) return st;
    static const char *const names[] = {"cosine", "constant", "linear", "wsd", "inverse_sqrt"};
    out->schedule = PLAIT_LR_COSINE;
    for (int i = 0; v.s && i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(v.s, names[i]) == 0) out->schedule = (plait_lr_schedule)i;
    if (out->schedule != PLAIT_LR_WSD) return PLAIT_OK;
    if ((st = host->config_get(cfg, "optim", "lr_wsd_decay_steps", &v)) != PLAIT_OK) return st;
    out->wsd_decay_steps = v.i;
    if ((st = host->config_get(cfg, "optim", "lr_wsd_decay_style", &v)) != PLAIT_OK) return st;
    static const char *const shapes[] = {"linear", "cosine", "sqrt", "exponential"};
    out->wsd_shape = PLAIT_LR_DECAY_LINEAR;
    for (int i = 0; v.s && i < (int)(sizeof shapes / sizeof shapes[0]); i++)
        if (strcmp(v.s, shapes[i]) == 0) out->wsd_shape = (plait_lr_decay_shape)i;
    return PLAIT_OK;
}

/* Learning rate for 0-based step `step` (see above). */
static inline double plait_optim_lr_at(const plait_optim_hparams *hp, int64_t step) {
    int64_t W = hp->warmup_steps, D = hp->decay_steps;
    if (step < 0) step = 0;
    const double pi = 3.14159265358979323846;
    if (step < W) return hp->lr * (double)(step + 1) / (double)(W + 1);
    if (hp->schedule == PLAIT_LR_CONSTANT) return hp->lr;
    if (hp->schedule == PLAIT_LR_INVERSE_SQRT) {
        double r = hp->lr * sqrt((double)(W > 1 ? W : 1) / (double)(step > 1 ? step : 1));
        return r > hp->min_lr ? r : hp->min_lr;
    }
    if (step >= D) return hp->min_lr; /* also covers D <= W */
    int64_t start = W;
    if (hp->schedule == PLAIT_LR_WSD) {
        start = D - hp->wsd_decay_steps;
        if (start < W) start = W;
        if (step < start) return hp->lr; /* the stable phase */
    }
    double ratio = (double)(step - start) / (double)(D - start);
    double coeff = 0.5 * (1.0 + cos(pi * ratio)); /* cosine, and wsd's cosine */
    if (hp->schedule == PLAIT_LR_LINEAR || (hp->schedule == PLAIT_LR_WSD && hp->wsd_shape == PLAIT_LR_DECAY_LINEAR))
        coeff = 1.0 - ratio;
    else if (hp->schedule == PLAIT_LR_WSD && hp->wsd_shape == PLAIT_LR_DECAY_SQRT) coeff = 1.0 - sqrt(ratio);
    else if (hp->schedule == PLAIT_LR_WSD && hp->wsd_shape == PLAIT_LR_DECAY_EXPONENTIAL)
        coeff = 2.0 * pow(0.5, ratio) - 1.0;
    return hp->min_lr + coeff * (hp->lr - hp->min_lr);
}

/* Gradient multiplier for clipping at global norm `norm` (1 = unchanged). */
static inline double plait_optim_clip_scale(double grad_clip, double norm) {
    if (grad_clip <= 0) return 1.0;
    double scale = grad_clip / (norm + 1e-6);
    return scale < 1.0 ? scale : 1.0;
}

/* This rank's place, for the norm rule. */
typedef struct plait_optim_topology {
    int32_t dp_rank;     /* rank in the DP group (0 without one) */
    int32_t tp;          /* [parallel] tp */
    int32_t tp_rank;     /* from the split parameters' shard.index (0 if none) */
    /* ABI 1.17: [parallel] ep (1 without expert parallelism); dp_rank is
     * the rank in the optimizer's dp_comm, the dp x cp group, whose first
     * ep members hold every expert once */
    int32_t ep;
} plait_optim_topology;

/* Derive the topology from the init arguments; fails if tp > 1 while no
 * local parameter is split (the rank could not tell its TP rank). */
static inline plait_status plait_optim_topology_from_init(const plait_optim_init *init,
                                                          plait_optim_topology *out) {
    const plait_host *host = init->host;
    memset(out, 0, sizeof *out);
    out->dp_rank = init->dp_comm && host->coll ? host->coll->rank(init->dp_comm) : 0;
    plait_value v;
    out->tp = host->config_get(init->config, "parallel", "tp", &v) == PLAIT_OK && v.i > 1 ? (int32_t)v.i : 1;
    out->ep = host->config_get(init->config, "parallel", "ep", &v) == PLAIT_OK && v.i > 1 ? (int32_t)v.i : 1;
    const char *first = NULL;
    int found = 0;
    for (int32_t i = 0; i < init->params->n_params; i++) {
        const plait_shard *s = &init->params->params[i].shard;
        if (s->dim < 0 || s->parts <= 1 || ((init->params->params[i].flags & PLAIT_PARAM_EXPERT) && s->dim == 0))
            continue;
        if (found && s->index != out->tp_rank)
            return host->set_error(PLAIT_ERR_INTERNAL,
                                   "optimizer: parameters %s and %s are split with different TP indices (%d, %d)",
                                   first, init->params->params[i].name, out->tp_rank, s->index);
        out->tp_rank = s->index;
        first = init->params->params[i].name;
        found = 1;
    }
    if (out->tp > 1 && !found)
        return host->set_error(PLAIT_ERR_INTERNAL,
                               "optimizer: [parallel] tp = %d but no local parameter is split, so this rank "
                               "cannot tell its TP rank for the gradient norm",
                               out->tp);
    return PLAIT_OK;
}

/* 1 if this rank counts `p`'s gradient in the global norm under the plain
 * (replicated-gradient) rule above. */
static inline int plait_optim_counts_in_norm(const plait_optim_topology *topo, const plait_param *p) {
    if (p->flags & PLAIT_PARAM_TIED_COPY) return 0;
    /* an expert tensor split over ep: each of the first ep ranks of the
     * dp x cp group holds its own experts, and at tp > 1 each tp rank its
     * own slice of their width (ABI 1.28) */
    if ((p->flags & PLAIT_PARAM_EXPERT) && p->shard.dim == 0 && p->shard.parts > 1)
        return topo->dp_rank < topo->ep && (topo->tp_rank == 0 || plait_param_split_twice(p));
    if (topo->dp_rank != 0) return 0;
    int split = p->shard.dim >= 0 && p->shard.parts > 1;
    if (topo->tp > 1 && !split && topo->tp_rank != 0) return 0;
    return 1;
}

/* Index of the local parameter whose global index is `global`, or -1.
 * The same as plait_param_set_find (plait/model.h), which it predates;
 * kept for plugins written against ABI 1.1. */
static inline int32_t plait_optim_local_index(const plait_param_set *set, int32_t global) {
    return plait_param_set_find(set, global);
}

/* 1 if `p` is a tied copy whose original is also held by this rank (they
 * share storage and state: the optimizer skips the copy). The same rule as
 * plait_tied_local_original (plait/model.h) >= 0. */
static inline int plait_optim_tied_to_local(const plait_param_set *set, const plait_param *p) {
    return plait_tied_local_original(set, p) >= 0;
}

/* The limb encoding used on the wire: 4 int64 per bin (32-bit limbs of lo
 * then hi, least significant first) followed by the non-finite count. */
#define PLAIT_OPTIM_SUMSQ_WIRE_COUNT (PLAIT_SUMSQ_BINS * 4 + 1)
static inline void plait_optim_sumsq_to_wire(const plait_sumsq_acc *acc, int64_t *wire) {
    for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) {
        uint64_t lo = acc->bin[e][0], hi = acc->bin[e][1];
        wire[4 * e + 0] = (int64_t)(lo & 0xffffffffu);
        wire[4 * e + 1] = (int64_t)(lo >> 32);
        wire[4 * e + 2] = (int64_t)(hi & 0xffffffffu);
        wire[4 * e + 3] = (int64_t)(hi >> 32);
    }
    wire[4 * PLAIT_SUMSQ_BINS] = (int64_t)acc->nonfinite;
}

/* Limb sums stay below 2^63 for fewer than 2^31 ranks; the carry into 128
 * bits wraps only past 2^128, which Σ m² (< 2^48 per element) cannot reach. */
static inline void plait_optim_sumsq_from_wire(const int64_t *wire, plait_sumsq_acc *acc) {
    for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) {
        unsigned __int128 v = (unsigned __int128)(uint64_t)wire[4 * e + 0] +
                              ((unsigned __int128)(uint64_t)wire[4 * e + 1] << 32) +
                              ((unsigned __int128)(uint64_t)wire[4 * e + 2] << 64) +
                              ((unsigned __int128)(uint64_t)wire[4 * e + 3] << 96);
        acc->bin[e][0] = (uint64_t)v;
        acc->bin[e][1] = (uint64_t)(v >> 64);
    }
    acc->nonfinite = (uint64_t)wire[4 * PLAIT_SUMSQ_BINS];
}

/* Sum `local` over `world` exactly and return the global Σ g² as a double
 * (+Inf if any element anywhere was not finite). world == NULL or a
 * single-rank world: no communication. *bytes_sent (may be NULL) receives
 * the bytes this rank sent (from the communicator's counters). Collective
 * over `world`. */
static inline plait_status plait_optim_global_sumsq(const plait_host *host, plait_comm *world,
                                                    const plait_sumsq_acc *local, double *sumsq,
                                                    uint64_t *bytes_sent) {
    if (bytes_sent) *bytes_sent = 0;
    if (!host->kernels) return host->set_error(PLAIT_ERR_UNSUPPORTED, "optimizer: the host has no kernel library");
    if (!world || !host->coll || host->coll->size(world) <= 1) {
        if (world && !host->coll)
            return host->set_error(PLAIT_ERR_UNSUPPORTED, "optimizer: a world communicator but no host collectives");
        *sumsq = host->kernels->sumsq_value(local);
        return PLAIT_OK;
    }
    int64_t wire[PLAIT_OPTIM_SUMSQ_WIRE_COUNT];
    plait_optim_sumsq_to_wire(local, wire);
    plait_comm_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    if (host->coll->stats) host->coll->stats(world, &before);
    plait_coll_opts opts = {.struct_size = sizeof opts, .algo = PLAIT_ALGO_AUTO, .label = "optim grad norm"};
    plait_status st = host->coll->allreduce(world, wire, wire, PLAIT_OPTIM_SUMSQ_WIRE_COUNT, PLAIT_I64, PLAIT_SUM,
                                            &opts, NULL);
    if (st != PLAIT_OK) return st;
    if (host->coll->stats) {
        host->coll->stats(world, &after);
        if (bytes_sent) *bytes_sent = after.bytes_sent - before.bytes_sent;
    }
    plait_sumsq_acc global;
    plait_optim_sumsq_from_wire(wire, &global);
    *sumsq = host->kernels->sumsq_value(&global);
    return PLAIT_OK;
}

/* A rank's exact Σ g² accumulator in tensor memory (the device's, or host
 * memory without one): kernels add to it where the gradients are, and one
 * copy per step brings it to the host. Create once (plait_optim_norm_init,
 * with the plugin), free with plait_optim_norm_free. */
typedef struct plait_optim_norm {
    plait_sumsq_acc *acc; /* tensor memory (plait_tensor_alloc's kind) */
} plait_optim_norm;

static inline plait_status plait_optim_norm_init(const plait_host *host, plait_optim_norm *n) {
    n->acc = (plait_sumsq_acc *)host->alloc(sizeof(plait_sumsq_acc), plait_tensor_kind(host), 64,
                                            "optimizer norm accumulator");
    return n->acc ? PLAIT_OK : PLAIT_ERR_NO_MEMORY; /* alloc set the message */
}
static inline void plait_optim_norm_free(const plait_host *host, plait_optim_norm *n) {
    host->free(n->acc);
    n->acc = NULL;
}
/* Start a step's sum: the accumulator becomes zero (in the device's stream). */
static inline plait_status plait_optim_norm_begin(const plait_host *host, plait_optim_norm *n) {
    if (plait_has_device(host)) return host->device->fill_zero(n->acc, sizeof *n->acc);
    memset(n->acc, 0, sizeof *n->acc);
    return PLAIT_OK;
}
/* acc += Σ x[i]², exactly (x: n floats of tensor memory). */
static inline void plait_optim_norm_add(const plait_host *host, plait_optim_norm *n, const float *x, size_t count) {
    host->kernels->sumsq_exact(n->acc, x, count);
}
/* The global Σ g² over `world` (plait_optim_global_sumsq) of every rank's
 * accumulator: one copy to the host, then the exact all-reduce of host data. */
static inline plait_status plait_optim_norm_finish(const plait_host *host, plait_optim_norm *n, plait_comm *world,
                                                   double *sumsq, uint64_t *bytes_sent) {
    plait_sumsq_acc local;
    plait_status st = plait_tensor_copy(host, &local, n->acc, sizeof local, PLAIT_COPY_TO_HOST);
    if (st != PLAIT_OK) return st;
    return plait_optim_global_sumsq(host, world, &local, sumsq, bytes_sent);
}

/* acc += Σ g² of every parameter of `set` that counts in the norm
 * (plait_optim_counts_in_norm): one call per run of gradients adjacent in
 * memory (the exact sum is the same however the elements are split).
 * Fails if a counted parameter has no gradient. */
static inline plait_status plait_optim_norm_add_set(const plait_host *host, plait_optim_norm *acc,
                                                    const plait_optim_topology *topo, const plait_param_set *set) {
    const float *run = NULL;
    size_t run_n = 0;
    for (int32_t i = 0; i < set->n_params; i++) {
        const plait_param *p = &set->params[i];
        if (!plait_optim_counts_in_norm(topo, p)) continue;
        if (!p->grad)
            return host->set_error(PLAIT_ERR_INVALID_ARG, "optimizer: parameter %s has no gradient storage", p->name);
        if (run && p->grad == run + run_n) {
            run_n += p->numel;
            continue;
        }
        if (run_n) plait_optim_norm_add(host, acc, run, run_n);
        run = p->grad;
        run_n = p->numel;
    }
    if (run_n) plait_optim_norm_add(host, acc, run, run_n);
    return PLAIT_OK;
}

/* 1 if this step's norm can stay on the device (ABI 1.7): the kernels
 * have sumsq_clip and adamw_multi, the trainer offers a place for the
 * global Σg² (in->sumsq_dev), and no other rank's gradients count in it
 * (world NULL or of one rank: a norm over ranks takes their all-reduce). */
static inline int plait_optim_norm_on_device(const plait_host *host, const plait_optim_step_in *in,
                                             plait_comm *world) {
    if (!host->kernels || !PLAIT_KERNELS_HAS_DEVICE_STEP(host->kernels)) return 0;
    if (in->struct_size < offsetof(plait_optim_step_in, sumsq_dev) + sizeof in->sumsq_dev || !in->sumsq_dev)
        return 0;
    return !world || (host->coll && host->coll->size(world) <= 1);
}

/* The global L2 norm of the gradients of `set` held as plain replicated
 * gradients (the core owns them; plain DP, TP, PP), by the rule above,
 * accumulated in `acc` (plait_optim_norm_init). Collective over `world`.
 * Fails if a counted parameter has no gradient. */
static inline plait_status plait_optim_grad_norm_acc(const plait_host *host, const plait_optim_topology *topo,
                                                     const plait_param_set *set, plait_comm *world,
                                                     plait_optim_norm *acc, double *norm, uint64_t *bytes_sent) {
    plait_status st = plait_optim_norm_begin(host, acc);
    if (st == PLAIT_OK) st = plait_optim_norm_add_set(host, acc, topo, set);
    if (st != PLAIT_OK) return st;
    double sumsq = 0;
    st = plait_optim_norm_finish(host, acc, world, &sumsq, bytes_sent);
    if (st == PLAIT_OK) *norm = sqrt(sumsq);
    return st;
}

/* plait_optim_grad_norm_acc with an accumulator of its own for this call
 * (allocated and freed each time: a plugin calling it every step keeps a
 * plait_optim_norm instead). */
static inline plait_status plait_optim_grad_norm(const plait_host *host, const plait_optim_topology *topo,
                                                 const plait_param_set *set, plait_comm *world, double *norm,
                                                 uint64_t *bytes_sent) {
    plait_optim_norm acc;
    plait_status st = plait_optim_norm_init(host, &acc);
    if (st == PLAIT_OK) st = plait_optim_grad_norm_acc(host, topo, set, world, &acc, norm, bytes_sent);
    plait_optim_norm_free(host, &acc);
    return st;
}

/* Seconds the training thread has been blocked on communicator `a` and on
 * `b` (NULL, or the same as `a`, adds nothing) since they were created; the
 * difference of two calls around step() is its wait_seconds. 0 when the
 * host has no communicator statistics. */
static inline double plait_optim_comm_wait(const plait_host *host, plait_comm *c) {
    if (!c || !host->coll || !host->coll->stats) return 0;
    plait_comm_stats s = {.struct_size = sizeof s};
    host->coll->stats(c, &s);
    return s.wait_seconds;
}
static inline double plait_optim_wait_seconds(const plait_host *host, plait_comm *a, plait_comm *b) {
    return plait_optim_comm_wait(host, a) + (b != a ? plait_optim_comm_wait(host, b) : 0);
}

/* Fill step()'s report `out` (NULL ignored) up to its struct_size. */
static inline void plait_optim_report_step(plait_optim_step_out *out, double lr, double grad_norm,
                                           uint64_t bytes_sent, double wait_seconds) {
    if (!out) return;
    plait_optim_step_out r = {.struct_size = sizeof r, .lr = lr, .grad_norm = grad_norm, .bytes_sent = bytes_sent,
                              .wait_seconds = wait_seconds};
    plait_fill_versioned(out, &r, (uint32_t)sizeof r);
}

/* The report of a step whose global Σg² the plugin left in
 * step_in.sumsq_dev (plait_optim_norm_on_device). */
static inline void plait_optim_report_step_norm_on_device(plait_optim_step_out *out, double lr) {
    if (!out) return;
    plait_optim_step_out r = {.struct_size = sizeof r, .lr = lr, .grad_norm = NAN, .norm_on_device = 1};
    plait_fill_versioned(out, &r, (uint32_t)sizeof r);
}

/* Where the optimizer state lives (ABI 1.12: [optim] offload, offload_path,
 * offload_buffer, declared by the core for every optimizer):
 *   NONE  tensor memory (the device's), as before 1.12;
 *   HOST  host memory, the update computed on the host: for a device whose
 *         memory is not host memory (a GPU); refused on one whose memory is
 *         (the cpu device), where it would change nothing;
 *   NVME  files under `path`, streamed through `buffer_bytes` of host memory.
 * `path` points into the configuration (valid while it is). */
typedef enum plait_optim_offload_mode {
    PLAIT_OFFLOAD_NONE = 0,
    PLAIT_OFFLOAD_HOST = 1,
    PLAIT_OFFLOAD_NVME = 2
} plait_optim_offload_mode;

typedef struct plait_optim_offload {
    plait_optim_offload_mode mode;
    const char *path;      /* [optim] offload_path ("" when unset) */
    uint64_t buffer_bytes; /* [optim] offload_buffer */
    int params;            /* [optim] offload_params: the parameter shards too (ZeRO-3) */
} plait_optim_offload;

/* [optim] offload = host for optimizer `who` where the ranks' tensor
 * memory is host memory already (`host_memory`), where it would change
 * nothing: refused naming where the key was set (plait_host.config_where,
 * ABI 1.34); PLAIT_OK otherwise. plait_optim_read_offload refuses it so on
 * a device whose memory is host memory; an optimizer's check()
 * (plait/optim.h) says it before any rank starts, its layout's host_memory
 * passed here. */
static inline plait_status plait_optim_check_offload_host(const plait_host *host, const plait_config *cfg,
                                                          const char *who, int host_memory) {
    plait_value v;
    if (!host_memory || (host->abi_version & 0xffffu) < 12 ||
        host->config_get(cfg, "optim", "offload", &v) != PLAIT_OK || !v.s || strcmp(v.s, "host") != 0)
        return PLAIT_OK;
    return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [optim] offload = host: this device's memory is host memory already, so %s keeps its "
                           "state there; use none, or nvme (with offload_path) to move it to disk",
                           PLAIT_HOST_HAS(host, config_where) ? host->config_where(cfg, "optim", "offload") : "config",
                           who);
}

/* Read the offload keys for optimizer `who` (named in errors). A core
 * before 1.12 declares none of them: the state then stays where it was
 * (mode NONE). Fails naming the key for `host` on a device whose memory is
 * host memory and for `nvme` without offload_path. */
static inline plait_status plait_optim_read_offload(const plait_host *host, const plait_config *cfg, const char *who,
                                                    plait_optim_offload *out) {
    memset(out, 0, sizeof *out);
    out->path = "";
    plait_value v;
    if ((host->abi_version & 0xffffu) < 12 || host->config_get(cfg, "optim", "offload", &v) != PLAIT_OK || !v.s)
        return PLAIT_OK;
    out->mode = strcmp(v.s, "host") == 0   ? PLAIT_OFFLOAD_HOST
                : strcmp(v.s, "nvme") == 0 ? PLAIT_OFFLOAD_NVME
                                           : PLAIT_OFFLOAD_NONE;
    if (host->config_get(cfg, "optim", "offload_path", &v) == PLAIT_OK && v.s) out->path = v.s;
    if (host->config_get(cfg, "optim", "offload_buffer", &v) == PLAIT_OK) out->buffer_bytes = (uint64_t)v.i;
    if (host->config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK) out->params = v.i != 0;
    plait_status st = plait_optim_check_offload_host(host, cfg, who, plait_tensor_kind(host) == PLAIT_MEM_HOST);
    if (st != PLAIT_OK) return st;
    if (out->params && out->mode == PLAIT_OFFLOAD_NONE)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] offload_params = true needs offload = host or nvme (where the parameter "
                               "shards go)",
                               who);
    if (out->mode == PLAIT_OFFLOAD_NVME && !out->path[0])
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] offload = nvme needs [optim] offload_path, the directory for the state "
                               "files",
                               who);
    return PLAIT_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_OPTIM_UTIL_H */
