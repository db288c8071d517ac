/*
 * Data parallelism: every rank of the DP group holds a full replica (of its
 * TP/PP slice); each computes its own micro-batches (global micro-batch
 * indices dp_rank*accumulation + [0, accumulation)), and gradients are summed
 * over the group in buckets that start reducing during the backward pass.
 *
 * Gradients arrive pre-scaled by 1/(tokens in the global batch), so the
 * reduction is a sum, never an average: the loss is the mean over the global
 * batch's tokens whatever the layout. In deterministic mode buckets are
 * reduced with PLAIT_ALGO_ORDERED (a fixed pairwise tree over ranks), which
 * together with the trainer's tree accumulation over micro-batches makes every
 * (dp, accumulation) split bit-identical to one process. Its cost against the
 * default ring: the same bytes on the wire (2(N-1)/N per element), but each
 * segment owner receives N-1 messages at once instead of a pipelined ring,
 * and the segment sums are not overlapped with the transfers.
 *
 * With expert parallelism (ABI 1.17) the expert tensors split over the ep
 * group (PLAIT_PARAM_EXPERT) stay out of the buckets: the ranks holding the
 * same experts, mesh->edp_comm, sum them after the buckets, each tensor
 * one all-reduce (ordered in deterministic mode).
 *
 * With context parallelism (ABI 1.13) the cp ranks of a dp rank compute the
 * same micro-batches, each its share of every sequence: the micro-batches
 * follow dp_rank, the sums run over the dp x cp group (mesh->dpcp_comm).
 *
 * A tied pair on this rank (the output head's copy of the token embedding,
 * one pipeline stage) is summed once: outside deterministic mode the copy's
 * gradient is folded into the original's just before the original's bucket
 * starts, and the copy is not reduced at all, saving V·C floats per step
 * (a third of GPT-2 small's gradient). Deterministic mode reduces the two
 * separately and the core adds them after, the canonical order that every
 * layout, one process included, follows.
 *
 * Device-agnostic (plait/device_util.h): gradients and parameters are the
 * device's memory; the plugin reduces them with the collectives, folds with
 * host->kernels, and reads them on the host only through the device's copy
 * (the start-up checksum and the debug perturbation: dp_replicas.c). On
 * a device with events (ABI 1.4) each bucket records one on the compute
 * stream as it starts and hands it to its all-reduce (plait_coll_opts.ready),
 * so launching a bucket never synchronises the host with the device.
 *
 * [parallel.dp] grad_compression picks the all-reduces' wire format (ABI
 * 1.6, plait/coll.h): bf16, int8 or onebit; onebit's error feedback lives
 * in one residual per bucket (twice the bucket's floats, device memory),
 * kept by the core with each checkpoint of the rank (alloc_kept, ABI 1.10).
 * In deterministic mode a compressed run repeats bit for bit and does not
 * depend on the host placement, but it is not one process's arithmetic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>
#include <plait/device_util.h>

#include "dp_buckets.h"
#include "dp_replicas.h"

static const char *const compression_choices[] = PLAIT_COMPRESSION_NAMES;

typedef struct dp_state {
    const plait_host *host; /* init->host: logging, errors, collectives */
    const plait_mesh *mesh;
    plait_comm *group; /* the gradients' group: dp_comm, or dp x cp's with cp > 1 */
    int group_n;       /* its size */
    const plait_config *config;
    int deterministic;
    int overlap;
    int skip_reduce;          /* debug: measure the step without DP communication */
    dp_replica_checks checks; /* [parallel.dp] verify_params and its debug test */
    size_t bucket_bytes;
    plait_compression compression; /* [parallel.dp] grad_compression */
    dp_buckets buckets;
    plait_param_set *experts; /* the set whose split expert tensors reduce_experts sums */
    int reduce;               /* 0 when dp == 1 or the optimizer reduces */
    /* grads_ready calls so far this step: a bucket overlapped the backward
     * only if it started before the step's final call, whose layer was the
     * last backward of the step (known only at finish_grads). */
    uint32_t grads_ready_calls;
    /* tied pairs folded before reduction: local indices of copy and original */
    int32_t n_folds;
    int32_t (*folds)[2];
    int folded;               /* this step's folds are done */
    plait_parallel_stats stats;
    plait_comm_stats comm_before;
    plait_comm_stats edp_before; /* the experts' group's counters (ep > 1 with ep < dp x cp) */
} dp_state;

/* A DP group's gradients that the optimizer reduces itself (ZeRO) leave
 * the dp plugin nothing to compress: its grad_compression would do
 * nothing, silently; the optimizer has a key of its own for its
 * reduce-scatters. */
static plait_status refuse_compression(const dp_state *s, const plait_config *cfg) {
    if (s->group_n == 1 || s->compression == PLAIT_COMPRESS_NONE) return PLAIT_OK;
    const plait_host *host = s->host;
    return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [parallel.dp] grad_compression = %s does nothing here: the optimizer (%s) reduces "
                           "the gradients itself; set its own key instead ([optim.%s] grad_compression)",
                           PLAIT_HOST_HAS(host, config_where)
                               ? host->config_where(cfg, "parallel.dp", "grad_compression")
                               : "config",
                           compression_choices[s->compression], plait_cfg_str(host, cfg, "optim", "plugin"),
                           plait_cfg_str(host, cfg, "optim", "plugin"));
}

static plait_status dp_create(const plait_parallel_init *init, void **out) {
    const plait_host *host = init->host;
    dp_state *s = calloc(1, sizeof *s);
    if (!s) return host->set_error(PLAIT_ERR_NO_MEMORY, "dp: out of memory");
    s->host = host;
    s->mesh = init->mesh;
    int cp = PLAIT_MESH_HAS(init->mesh, edp_comm) ? init->mesh->cp : 1;
    s->group = cp > 1 ? init->mesh->dpcp_comm : init->mesh->dp_comm;
    s->group_n = init->mesh->dp * cp;
    s->config = init->config;
    s->deterministic = init->deterministic;
    s->overlap = (int)plait_cfg_int(host, init->config, "parallel.dp", "overlap");
    s->skip_reduce = (int)plait_cfg_int(host, init->config, "parallel.dp", "debug_skip_reduce");
    s->checks.verify = (int)plait_cfg_int(host, init->config, "parallel.dp", "verify_params");
    s->checks.perturb = (dp_perturb)plait_cfg_int(host, init->config, "parallel.dp", "debug_perturb_replicas");
    s->bucket_bytes = (size_t)plait_cfg_int(host, init->config, "parallel.dp", "bucket_size");
    s->compression = (plait_compression)plait_cfg_int(host, init->config, "parallel.dp", "grad_compression");
    /* told at create from ABI 1.35 (before any rank starts, once); an
     * older core's runs hear it at bind */
    const int reduces = init->struct_size >= offsetof(plait_parallel_init, optim_reduces_grads) + sizeof(int) &&
                        init->optim_reduces_grads;
    plait_status st = reduces ? refuse_compression(s, init->config) : PLAIT_OK;
    if (st != PLAIT_OK) {
        free(s);
        return st;
    }
    *out = s;
    return PLAIT_OK;
}

static plait_status dp_plan(void *state, plait_plan *plan) {
    dp_state *s = state;
    const plait_host *host = s->host;
    plan->first_micro_batch = (int64_t)s->mesh->dp_rank * plan->micro_batches;
    if (s->mesh->dp > 1 && s->deterministic && (plan->micro_batches & (plan->micro_batches - 1)) != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] deterministic = true with dp = %d needs accumulation_steps to be a power "
                               "of two (it is %d): each rank must hold a whole subtree of the canonical "
                               "summation tree",
                               s->mesh->dp, plan->micro_batches);
    return PLAIT_OK;
}

/* The tied copies whose original is on this rank too: each becomes a fold
 * (copy, original) and is left out of the buckets (*skip, one flag per
 * parameter, caller frees). A copy whose original sits on another pipeline
 * stage is summed over the embedding group first and reduced as usual. */
static plait_status find_folds(dp_state *s, const plait_param_set *set, uint8_t **skip) {
    const plait_host *host = s->host;
    *skip = calloc((size_t)set->n_params + 1, 1);
    s->folds = calloc((size_t)set->n_params + 1, sizeof *s->folds);
    if (!*skip || !s->folds) return host->set_error(PLAIT_ERR_NO_MEMORY, "dp: out of memory");
    for (int32_t i = 0; i < set->n_params; i++) {
        const plait_param *c = &set->params[i];
        int32_t o = plait_tied_local_original(set, c);
        if (o < 0 || !c->grad || !set->params[o].grad || set->params[o].numel != c->numel) continue;
        s->folds[s->n_folds][0] = i;
        s->folds[s->n_folds][1] = o;
        s->n_folds++;
        (*skip)[i] = 1;
    }
    return PLAIT_OK;
}

/* Add each copy's gradient to its original's and clear the copy, so the
 * core's own tied sum after the reduction adds nothing. Called once per
 * step, when the last micro-batch's gradients of the originals are final.
 * axpy with a = 1: y + 1.0f*x is exactly y + x. */
static void fold_tied(dp_state *s) {
    if (s->folded) return;
    s->folded = 1;
    const plait_kernels *k = s->host->kernels;
    plait_param *ps = s->buckets.params->params;
    for (int32_t f = 0; f < s->n_folds; f++) {
        plait_param *c = &ps[s->folds[f][0]], *o = &ps[s->folds[f][1]];
        k->axpy(o->grad, c->grad, c->numel, 1.0f);
        k->zero(c->grad, c->numel);
    }
}

/* Layer `layer` holds an original whose copy is folded into it. */
static int layer_has_fold(const dp_state *s, int32_t layer) {
    for (int32_t f = 0; f < s->n_folds; f++)
        if (s->buckets.params->params[s->folds[f][1]].layer == layer) return 1;
    return 0;
}

static plait_status dp_bind(void *state, const plait_parallel_bind *bind) {
    dp_state *s = state;
    const plait_host *host = s->host;
    if (s->group_n == 1) return PLAIT_OK;
    plait_status st = s->mesh->dp > 1 ? dp_replicas_start(s->host, s->mesh, &s->checks, bind->params) : PLAIT_OK;
    if (st != PLAIT_OK) return st;
    s->reduce = !bind->optim_reduces_grads;
    if (!s->reduce) return refuse_compression(s, s->config);
    uint8_t *skip = NULL;
    if (!s->deterministic) {
        st = find_folds(s, bind->params, &skip);
        if (st != PLAIT_OK) return st;
    }
    if (!skip && !(skip = calloc((size_t)bind->params->n_params + 1, 1)))
        return host->set_error(PLAIT_ERR_NO_MEMORY, "dp: out of memory");
    for (int32_t i = 0; i < bind->params->n_params; i++) { /* summed over edp_comm at the end */
        const plait_param *p = &bind->params->params[i];
        skip[i] |= (p->flags & PLAIT_PARAM_EXPERT) && p->shard.dim == 0 && p->shard.parts > 1; /* over ep */
    }
    s->experts = bind->params;
    st = dp_buckets_build(host, bind->params, skip, s->bucket_bytes, &s->buckets);
    free(skip);
    if (st != PLAIT_OK) return st;
    if (plait_tensor_kind(host) != PLAIT_MEM_HOST && PLAIT_DEVICE_HAS_EVENTS(host->device))
        for (int32_t i = 0; i < s->buckets.n; i++)
            if (!(s->buckets.b[i].ready = host->device->event_create())) return PLAIT_ERR_NO_MEMORY;
    for (int32_t i = 0; s->compression == PLAIT_COMPRESS_ONEBIT && i < s->buckets.n; i++) {
        dp_bucket *b = &s->buckets.b[i];
        size_t n = plait_coll_residual_allreduce(b->count, s->group_n);
        char name[32];
        snprintf(name, sizeof name, "dp.bucket.%d", (int)i);
        if (!(b->residual = plait_tensor_alloc_kept(host, n, name, "dp error feedback"))) return PLAIT_ERR_NO_MEMORY;
    }
    if (s->compression != PLAIT_COMPRESS_NONE && s->mesh->world_rank == 0)
        host->log(PLAIT_LOG_INFO, "dp", "gradient all-reduces travel as %s%s", compression_choices[s->compression],
                  s->compression == PLAIT_COMPRESS_ONEBIT ? " with error feedback" : "");
    host->log(PLAIT_LOG_DEBUG, "dp", "%d gradient bucket(s) of at most %zu bytes", s->buckets.n, s->bucket_bytes);
    return PLAIT_OK;
}

/* The ranks holding this rank's experts when ep splits them and they are
 * more than this one (mesh->edp_comm), else NULL. */
static plait_comm *experts_group(const dp_state *s) {
    plait_comm *edp = PLAIT_MESH_HAS(s->mesh, edp_comm) && s->mesh->ep > 1 ? s->mesh->edp_comm : NULL;
    return edp && s->host->coll->size(edp) > 1 ? edp : NULL;
}

static plait_status dp_begin_step(void *state, int64_t step) {
    (void)step;
    dp_state *s = state;
    const plait_host *host = s->host;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.struct_size = sizeof s->stats;
    if (s->group_n > 1) {
        s->comm_before.struct_size = sizeof s->comm_before;
        host->coll->stats(s->group, &s->comm_before);
        plait_comm *edp = experts_group(s);
        s->edp_before.struct_size = sizeof s->edp_before;
        if (edp) host->coll->stats(edp, &s->edp_before);
    }
    s->grads_ready_calls = 0;
    s->folded = 0;
    if (s->reduce) dp_buckets_reset(&s->buckets);
    return PLAIT_OK;
}

static plait_status start_bucket(dp_state *s, dp_bucket *b, uint32_t in_call) {
    const plait_host *host = s->host;
    b->started = 1;
    b->started_in_call = in_call;
    if (s->skip_reduce) return PLAIT_OK;
    plait_coll_opts opts = plait_tensor_coll_opts(host, s->deterministic ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO,
                                                  "dp gradient bucket");
    opts.compression = (uint32_t)s->compression;
    opts.residual = b->residual;
    /* No host synchronisation: the event marks where the compute stream
     * will have produced the bucket; the reduction waits for that point on
     * the communication side while the backward of earlier layers goes on
     * being queued and run. */
    if (b->ready) {
        plait_status st = host->device->event_record(b->ready, PLAIT_STREAM_COMPUTE);
        if (st != PLAIT_OK) return st;
        opts.ready = b->ready;
    }
    return host->coll->allreduce(s->group, b->grad, b->grad, b->count, PLAIT_F32, PLAIT_SUM, &opts, &b->req);
}

static plait_status dp_grads_ready(void *state, int32_t layer, int32_t mb, int last) {
    (void)mb;
    dp_state *s = state;
    s->grads_ready_calls++;
    if (!s->reduce || !last || !s->overlap) return PLAIT_OK;
    plait_param_set *set = s->buckets.params;
    /* the copy (the head, whose backward ran first) is final by now */
    if (layer_has_fold(s, layer)) fold_tied(s);
    for (int32_t i = 0; i < set->n_params; i++) {
        if (set->params[i].layer != layer || s->buckets.param_bucket[i] < 0) continue;
        dp_bucket *b = &s->buckets.b[s->buckets.param_bucket[i]];
        if (--b->pending == 0 && !b->started) {
            plait_status st = start_bucket(s, b, s->grads_ready_calls);
            if (st != PLAIT_OK) return st;
        }
    }
    return PLAIT_OK;
}

/* The expert tensors split over ep (ABI 1.17): summed over the ranks
 * holding the same experts, mesh->edp_comm, once the backward is done, in
 * deterministic mode by the ordered algorithm like the buckets. */
static plait_status reduce_experts(dp_state *s) {
    const plait_host *host = s->host;
    plait_comm *edp = experts_group(s);
    if (!edp || s->skip_reduce) return PLAIT_OK;
    plait_coll_opts opts = plait_tensor_coll_opts(host, s->deterministic ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO,
                                                  "dp expert gradients");
    plait_status st = PLAIT_OK;
    for (int32_t i = 0; s->experts && i < s->experts->n_params && st == PLAIT_OK; i++) {
        plait_param *p = &s->experts->params[i];
        if (!(p->flags & PLAIT_PARAM_EXPERT) || p->shard.dim != 0 || p->shard.parts <= 1) continue;
        st = host->coll->allreduce(edp, p->grad, p->grad, p->numel, PLAIT_F32, PLAIT_SUM, &opts, NULL);
        s->stats.reductions += st == PLAIT_OK;
    }
    return st;
}

static plait_status dp_finish_grads(void *state) {
    dp_state *s = state;
    const plait_host *host = s->host;
    if (!s->reduce) return PLAIT_OK;
    double t0 = host->now();
    plait_status st = PLAIT_OK;
    fold_tied(s);
    /* Buckets not yet started (no overlap, or layers that ran no backward)
     * start now, in bucket order, the same order on every rank. */
    for (int32_t i = 0; i < s->buckets.n && st == PLAIT_OK; i++)
        if (!s->buckets.b[i].started) st = start_bucket(s, &s->buckets.b[i], 0);
    /* Early = started while some backward was still to run: a bucket the
     * final grads_ready started (e.g. the one holding layer 0, the last
     * layer the backward visits) overlapped nothing. */
    for (int32_t i = 0; i < s->buckets.n; i++) {
        dp_bucket *b = &s->buckets.b[i];
        if (b->req) {
            /* the optimizer's kernels read the sums on the compute stream:
             * where the comm plugin marks a reduction's end on the device
             * (nccl), that stream waits for it there (plait/coll.h) */
            plait_status w = PLAIT_COLL_HAS(host->coll, wait_device) ? host->coll->wait_device(b->req)
                                                                     : host->coll->wait(b->req);
            b->req = NULL;
            if (st == PLAIT_OK) st = w;
        }
        s->stats.reductions++;
        s->stats.early_reductions += b->started_in_call != 0 && b->started_in_call < s->grads_ready_calls;
    }
    if (st == PLAIT_OK) st = reduce_experts(s);
    s->stats.wait_seconds += host->now() - t0;
    return st;
}

static void dp_step_stats(void *state, plait_parallel_stats *out) {
    dp_state *s = state;
    const plait_host *host = s->host;
    /* When the optimizer reduces (ZeRO), the DP group's traffic is its own
     * and it reports it (plait_optim_step_out.bytes_sent): not counted twice. */
    if (s->group_n > 1 && s->reduce) {
        plait_comm_stats now = {.struct_size = sizeof now};
        host->coll->stats(s->group, &now);
        s->stats.bytes_sent = now.bytes_sent - s->comm_before.bytes_sent;
        plait_comm *edp = experts_group(s);
        if (edp) {
            plait_comm_stats e = {.struct_size = sizeof e};
            host->coll->stats(edp, &e);
            s->stats.bytes_sent += e.bytes_sent - s->edp_before.bytes_sent;
        }
    }
    s->stats.axis_bytes[0] = s->stats.bytes_sent;
    s->stats.axis_wait_seconds[0] = s->stats.wait_seconds;
    plait_fill_versioned(out, &s->stats, (uint32_t)sizeof s->stats);
}

static void dp_destroy(void *state) {
    dp_state *s = state;
    if (!s) return;
    for (int32_t i = 0; i < s->buckets.n; i++) {
        if (s->buckets.b[i].ready) s->host->device->event_destroy(s->buckets.b[i].ready);
        s->host->free(s->buckets.b[i].residual);
    }
    dp_buckets_free(&s->buckets);
    free(s->folds);
    free(s);
}

static const plait_parallel_ops dp_ops = {
    .struct_size = sizeof(plait_parallel_ops),
    .axes = PLAIT_PARALLEL_AXIS_DP | PLAIT_PARALLEL_AXIS_CP | PLAIT_PARALLEL_AXIS_EP,
    .create = dp_create,
    .plan = dp_plan,
    .bind = dp_bind,
    .begin_step = dp_begin_step,
    .grads_ready = dp_grads_ready,
    .finish_grads = dp_finish_grads,
    .step_stats = dp_step_stats,
    .destroy = dp_destroy,
};

static const plait_key_decl dp_keys[] = {
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "bucket_size", PLAIT_KEY_BYTES, "25M", 4, 1099511627776.0,
     NULL, "gradient bucket size; each bucket's all-reduce starts once its gradients are final"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "overlap", PLAIT_KEY_BOOL, "true", 1, 0, NULL,
     "start bucket reductions during the backward pass (false: all after it)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "grad_compression", PLAIT_KEY_ENUM, "none", 1, 0,
     compression_choices,
     "wire format of the gradient all-reduces: none (float32), bf16 (half the bytes), int8 (a quarter, "
     "per-block scales), onebit (1/21: signs and a scale per 64 values, with error feedback); sums stay float32"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL | PLAIT_KEY_HIDDEN, "debug_skip_reduce", PLAIT_KEY_BOOL,
     "false", 1, 0, NULL, "debug: skip gradient communication (wrong results; measures its overhead)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "verify_params", PLAIT_KEY_BOOL, "true", 1, 0, NULL,
     "check by checksum that replicas are identical after the initial broadcast"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL | PLAIT_KEY_HIDDEN, "debug_perturb_replicas",
     PLAIT_KEY_ENUM, "off", 1, 0, dp_perturb_choices,
     "debug: DP ranks > 0 shift their parameters before the initial broadcast (it must repair them) or after "
     "it (verify_params must fail); tests the broadcast and the checksum"},
};

static const plait_plugin_desc dp_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_PARALLEL,
    .name = "dp",
    .version = "0.1.0",
    .description = "data parallelism: replicas, bucketed gradient all-reduce overlapped with backward",
    .keys = dp_keys,
    .n_keys = sizeof dp_keys / sizeof dp_keys[0],
    .key_size = sizeof(plait_key_decl),
    .ops = &dp_ops,
};

PLAIT_PLUGIN_DEFINE_ENTRY("parallel/dp", 0, NULL, &dp_desc)
