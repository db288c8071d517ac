#include "optim_common.h"

#include <math.h>
#include <string.h>

static double comm_wait(const plait_host *host, plait_comm *c) {
    if (!c || !host->coll || !host->coll->stats) return 0;
    plait_comm_stats s = {.struct_size = sizeof s};
    host->coll->stats(c, &s);
    return s.wait_seconds;
}

double optim_wait_seconds(const plait_host *host, plait_comm *a, plait_comm *b) {
    return comm_wait(host, a) + (b != a ? comm_wait(host, b) : 0);
}

void optim_report_step(plait_optim_step_out *out, double lr, double grad_norm, uint64_t bytes_sent,
                       double wait_seconds) {
    if (!out) return;
    plait_optim_step_out r = {.struct_size = sizeof r, .lr = lr, .grad_norm = grad_norm, .bytes_sent = bytes_sent,
                              .wait_seconds = wait_seconds};
    plait_fill_versioned(out, &r, (uint32_t)sizeof r);
}

plait_status optim_read_hparams(const plait_host *host, const plait_config *cfg, optim_hparams *out) {
    memset(out, 0, sizeof *out);
    struct {
        const char *section, *key;
        double *dst;
    } floats[] = {
        {"optim", "lr", &out->lr},       {"optim", "min_lr", &out->min_lr},
        {"optim", "beta1", &out->beta1}, {"optim", "beta2", &out->beta2},
        {"optim", "eps", &out->eps},     {"optim", "weight_decay", &out->weight_decay},
        {"optim", "grad_clip", &out->grad_clip},
    };
    plait_value v;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        plait_status st = host->config_get(cfg, floats[i].section, floats[i].key, &v);
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
    out->schedule = v.s && strcmp(v.s, "constant") == 0 ? OPTIM_SCHEDULE_CONSTANT : OPTIM_SCHEDULE_COSINE;
    return PLAIT_OK;
}

double optim_lr_at(const optim_hparams *hp, int64_t step) {
    int64_t W = hp->warmup_steps, D = hp->decay_steps;
    if (step < 0) step = 0;
    if (step < W) return hp->lr * (double)(step + 1) / (double)(W + 1);
    if (hp->schedule == OPTIM_SCHEDULE_CONSTANT) return hp->lr;
    if (step >= D) return hp->min_lr; /* also covers D <= W */
    double ratio = (double)(step - W) / (double)(D - W);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return hp->min_lr + coeff * (hp->lr - hp->min_lr);
}

double optim_clip_scale(double grad_clip, double norm) {
    if (grad_clip <= 0) return 1.0;
    double scale = grad_clip / (norm + 1e-6);
    return scale < 1.0 ? scale : 1.0;
}

plait_status optim_topology_from_init(const plait_optim_init *init, optim_topology *out) {
    const plait_host *host = init->host;
    memset(out, 0, sizeof *out);
    out->dp_rank = init->dp_comm && host->coll ? host->coll->rank(init->dp_comm) : 0;
    plait_value v;
    out->tp = host->config_get(init->config, "parallel", "tp", &v) == PLAIT_OK && v.i > 1 ? (int32_t)v.i : 1;
    const char *first = NULL;
    int found = 0;
    for (int32_t i = 0; i < init->params->n_params; i++) {
        const plait_shard *s = &init->params->params[i].shard;
        if (s->dim < 0 || s->parts <= 1) continue;
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

int optim_counts_in_norm(const optim_topology *topo, const plait_param *p) {
    if (p->flags & PLAIT_PARAM_TIED_COPY) return 0;
    if (topo->dp_rank != 0) return 0;
    int split = p->shard.dim >= 0 && p->shard.parts > 1;
    if (topo->tp > 1 && !split && topo->tp_rank != 0) return 0;
    return 1;
}

void optim_sumsq_to_wire(const plait_sumsq_acc *acc, int64_t *wire) {
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
void optim_sumsq_from_wire(const int64_t *wire, plait_sumsq_acc *acc) {
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

plait_status optim_global_sumsq(const plait_host *host, plait_comm *world, const plait_sumsq_acc *local,
                                double *sumsq, uint64_t *bytes_sent) {
    if (bytes_sent) *bytes_sent = 0;
    if (!host->kernels) return host->set_error(PLAIT_ERR_UNSUPPORTED, "optimizer: the host has no kernel library");
    if (!world || !host->coll || host->coll->size(world) <= 1) {
        if (world && !host->coll)
            return host->set_error(PLAIT_ERR_UNSUPPORTED, "optimizer: a world communicator but no host collectives");
        *sumsq = host->kernels->sumsq_value(local);
        return PLAIT_OK;
    }
    int64_t wire[OPTIM_SUMSQ_WIRE_COUNT];
    optim_sumsq_to_wire(local, wire);
    plait_comm_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
    if (host->coll->stats) host->coll->stats(world, &before);
    plait_coll_opts opts = {.struct_size = sizeof opts, .algo = PLAIT_ALGO_AUTO, .label = "optim grad norm"};
    plait_status st = host->coll->allreduce(world, wire, wire, OPTIM_SUMSQ_WIRE_COUNT, PLAIT_I64, PLAIT_SUM,
                                            &opts, NULL);
    if (st != PLAIT_OK) return st;
    if (host->coll->stats) {
        host->coll->stats(world, &after);
        if (bytes_sent) *bytes_sent = after.bytes_sent - before.bytes_sent;
    }
    plait_sumsq_acc global;
    optim_sumsq_from_wire(wire, &global);
    *sumsq = host->kernels->sumsq_value(&global);
    return PLAIT_OK;
}

plait_status optim_begin_update(const plait_host *host, const char *who, const optim_hparams *hp, int64_t step,
                                double norm, int64_t *updates, plait_adamw_args *args) {
    if (!isfinite(norm))
        return host->set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: the gradient norm at step %lld is not finite (NaN or Inf gradients): "
                               "training diverged; no parameter was changed. Lower [optim] lr, or check the data",
                               who, (long long)step);
    (*updates)++;
    *args = (plait_adamw_args){
        .struct_size = sizeof *args,
        .lr = (float)optim_lr_at(hp, step),
        .beta1 = (float)hp->beta1,
        .beta2 = (float)hp->beta2,
        .eps = (float)hp->eps,
        .step = *updates,
        .grad_scale = (float)optim_clip_scale(hp->grad_clip, norm),
    };
    return PLAIT_OK;
}
