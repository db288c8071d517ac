/*
 * The ZeRO engine's plugin face (zero.h): create, materialize, the layer
 * hooks, the memory report and destroy, and one plait_optim_ops table per
 * stage (the checkpoint exports are zero_export.c's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static const char *const state_names[] = {"exp_avg", "exp_avg_sq", NULL};


void zero_begin_traffic(zero *z) {
    if (z->in_step) return;
    z->in_step = 1;
    memset(&z->dp_before, 0, sizeof z->dp_before);
    z->dp_before.struct_size = sizeof z->dp_before;
    if (z->dp && z->host->coll && z->host->coll->stats) z->host->coll->stats(z->dp, &z->dp_before);
    memset(&z->edp_before, 0, sizeof z->edp_before);
    z->edp_before.struct_size = sizeof z->edp_before;
    if (z->edp != z->dp && z->host->coll && z->host->coll->stats) z->host->coll->stats(z->edp, &z->edp_before);
}

static void zero_destroy(void *sp) {
    zero *z = sp;
    if (!z) return;
    const plait_host *h = z->host;
    /* gathers step() left travelling are waited for; those not started
     * stay so: nothing reads the weights after the run ends */
    (void)zero_flight_drain(z);
    if (z->zero_stage == 3 && z->units) (void)zero_release_all(z);
    for (int32_t ui = 0; ui < z->n_units; ui++) zero_buf_put(z, z->units[ui].gbuf);
    if (z->params && z->owns_grads)
        for (int32_t i = 0; i < z->params->n_params; i++) {
            z->params->params[i].grad = NULL;
            if (z->zero_stage == 3) z->params->params[i].data = NULL;
        }
    h->free(z->state);
    bf16_moments_close(&z->m16);
    optim_offload_close(z->store);
    free(z->osegs);
    h->free(z->gshard);
    h->free(z->copy_gshard);
    h->free(z->gshard16);
    h->free(z->tied_gshard);
    h->free(z->pshard);
    h->free(z->whole_grad);
    h->free(z->acc);
    h->free(z->acc_tmp);
    h->free(z->residual);
    plait_optim_norm_free(h, &z->norm);
    if (z->tree) z->tree_api->destroy(z->tree);
    zero_pool_free(z);
    zero_partition_free(z);
    free(z->trace_prev);
    free(z->trace_cur);
    free(z->layer_last_unit);
    free(z);
}

/* 1 where `cfg` has [optim.zero1] grad_accum = bf16 (zero.h, grad_accum16):
 * what create() and the flags for the run read alike. */
static int grad_accum16_of(const plait_host *host, const plait_config *cfg) {
    plait_value v;
    return host->config_get(cfg, "optim.zero1", "grad_accum", &v) == PLAIT_OK && v.i == 1;
}

/* What stage `zero_stage` refuses of `cfg` on a layout whose ranks run
 * `micro_batches` a step, before it allocates anything: ops.check and
 * create() alike. [optim] offload_params beside a stage that keeps the
 * parameters whole; [optim.zero1] grad_accum = bf16 in deterministic
 * mode with more than one micro-batch, whose running sum rounds where the
 * micro-batches fall. */
static plait_status zero_refusals(int zero_stage, const plait_host *host, const plait_config *cfg,
                                  int64_t micro_batches, int deterministic) {
    plait_value v;
    if (zero_stage != 3 && host->config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK && v.i)
        return optim_refuse_offload_params(host, cfg, zero_stage == 1 ? "zero1" : "zero2");
    if (zero_stage == 1 && deterministic && micro_batches > 1 && grad_accum16_of(host, cfg))
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim.zero1] grad_accum = bf16 with [run] deterministic = true and %lld "
                               "micro-batches a step: a bf16 running sum rounds where the micro-batches fall on the "
                               "ranks, so the layouts would not be bit-identical; use grad_accum = fp32, "
                               "deterministic = false, or one micro-batch a step (data.micro_batch = global_batch / "
                               "dp)",
                               optim_where(host, cfg, "optim.zero1", "grad_accum"), (long long)micro_batches);
    return PLAIT_OK;
}

/* [optim.zero1] grad_accum: read, and owns_grads set (zero_refusals
 * checked it against deterministic mode). */
static void read_grad_accum(zero *z) {
    z->owns_grads = z->zero_stage >= 2;
    if (z->zero_stage != 1) return;
    z->grad_accum16 = grad_accum16_of(z->host, z->cfg);
    z->owns_grads = z->grad_accum16;
    /* the offload store reads float32 slices (offload.h) */
    z->slice16 = z->grad_accum16 && z->offload.mode == PLAIT_OFFLOAD_NONE;
}

/* ZeRO-1 accumulating in bf16: with more than one micro-batch a step the
 * running sums, and the pieces of them or of bf16 slices widened at a
 * time (zero.h). */
static plait_status alloc_accumulator(zero *z) {
    int sums = z->grad_accum16 && z->micro_batches > 1;
    if (!sums && !z->slice16) return PLAIT_OK;
    if (!bf16_usable(z->host))
        return z->host->set_error(PLAIT_ERR_UNSUPPORTED,
                                  "zero1: [optim.zero1] grad_accum = bf16 needs to_bf16 and from_bf16 in the device's "
                                  "kernel table (SDK 1.23), which this device lacks; use grad_accum = fp32");
    z->acc_tmp = plait_tensor_alloc(z->host, ZERO_ACC_CHUNK, "zero1 bf16 gradients' widening");
    if (!z->acc_tmp) return z->host->set_error(PLAIT_ERR_NO_MEMORY, "zero1: out of memory");
    z->acc_numel = 0;
    for (int32_t ui = 0; ui < z->n_units; ui++) /* slice16's float32 slices of tied originals (zero.h) */
        z->units[ui].tied_off = -1;
    for (int32_t ui = 0; z->slice16 && ui < z->n_units; ui++)
        if (z->units[ui].copy && z->units[z->units[ui].original].tied_off < 0) {
            zero_unit *o = &z->units[z->units[ui].original];
            o->tied_off = (int64_t)z->tied_numel;
            z->tied_numel += o->shard;
        }
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        zero_unit *u = &z->units[ui];
        if (sums && !u->whole) {
            u->acc_off = z->acc_numel;
            z->acc_numel += zero_acc_span(u);
        } else if (z->slice16 && !u->copy) { /* zero_slice16 */
            u->s16_off = z->s16_numel;
            z->s16_numel += (u->shard + 7) & ~(size_t)7;
        }
    }
    if (!sums) return PLAIT_OK;
    z->acc = z->host->alloc((z->acc_numel ? z->acc_numel : 1) * sizeof(plait_bf16), plait_tensor_kind(z->host), 64,
                            "zero1 bf16 gradients");
    return z->acc ? PLAIT_OK : z->host->set_error(PLAIT_ERR_NO_MEMORY, "zero1: out of memory");
}

/* The group the expert tensors shard over (zero.h): the DP group when
 * there are none split over ep. */
static plait_status experts_group(zero *z, const plait_optim_init *init) {
    z->edp = z->dp, z->en = z->n, z->erank = z->rank;
    int experts = 0;
    for (int32_t i = 0; i < z->params->n_params; i++) experts |= zero_param_expert(&z->params->params[i]);
    if (!experts) return PLAIT_OK;
    int known = init->struct_size >= offsetof(plait_optim_init, edp_comm) + sizeof init->edp_comm;
    if (!known || !init->edp_comm)
        return z->host->set_error(PLAIT_ERR_UNSUPPORTED,
                                  "%s: [parallel] ep = %d splits the experts, and this core names no group holding "
                                  "the same experts (plait_optim_init.edp_comm, ABI 1.20); use [optim] plugin = adam "
                                  "or ep = 1",
                                  z->name, z->topo.ep);
    z->edp = init->edp_comm;
    z->en = z->host->coll->size(z->edp);
    z->erank = z->host->coll->rank(z->edp);
    return PLAIT_OK;
}

/* long: the optimizer's state built in the order each piece needs the one
 * before (the checks, settings, partition, buffers, the core's tree); a
 * failure once the state exists frees all of it through zero_destroy */
static plait_status zero_create(int zero_stage, const plait_optim_init *init, void **out) {
    *out = NULL;
    const plait_host *host = init->host;
    const char *name = zero_stage == 1 ? "zero1" : zero_stage == 2 ? "zero2" : "zero3";
    if (init->struct_size < offsetof(plait_optim_init, deterministic) + sizeof init->deterministic)
        return host->set_error(PLAIT_ERR_ABI, "%s: plait_optim_init of %u bytes is older than this plugin", name,
                               init->struct_size);
    if (!PLAIT_HOST_HAS(host, kernels) || !PLAIT_HOST_HAS(host, coll))
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "%s: the host provides no %s", name,
                               PLAIT_HOST_HAS(host, kernels) ? "collectives (host->coll)" : "kernel library");
    if (!init->params) return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: no parameter set", name);
    if (!init->dp_comm) return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: no DP communicator", name);
    zero *z = calloc(1, sizeof *z);
    if (!z) return host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", name);
    z->zero_stage = zero_stage;
    z->name = name;
    z->host = host;
    z->cfg = init->config;
    z->params = init->params;
    z->dp = init->dp_comm;
    z->world = init->world;
    z->n = host->coll->size(z->dp);
    z->rank = host->coll->rank(z->dp);
    z->micro_batches = init->local_micro_batches > 0 ? init->local_micro_batches : 1;
    z->deterministic = init->deterministic;
    z->tree_mode = zero_stage >= 2 && z->deterministic && z->micro_batches > 1;
    if (z->tree_mode) {
        /* The accumulation must be the core's tree, bit for bit: no fallback. */
        const plait_sum_tree_api *api = PLAIT_HOST_HAS(host, sum_tree) ? host->sum_tree : NULL;
        if (!api || api->struct_size < offsetof(plait_sum_tree_api, destroy) + sizeof api->destroy) {
            free(z);
            return host->set_error(PLAIT_ERR_UNSUPPORTED,
                                   "%s: deterministic accumulation needs the host's summation tree "
                                   "(host->sum_tree, ABI 1.2); this core is ABI %u.%u",
                                   name, PLAIT_ABI_VERSION_MAJOR(host->abi_version),
                                   PLAIT_ABI_VERSION_MINOR(host->abi_version));
        }
        z->tree_api = api;
    }
    char section[32];
    snprintf(section, sizeof section, "optim.%s", name);
    plait_value v;
    plait_status st = plait_optim_read_hparams(host, init->config, &z->hp);
    if (st == PLAIT_OK) st = plait_optim_read_offload(host, init->config, name, &z->offload);
    if (st == PLAIT_OK) st = zero_refusals(zero_stage, host, init->config, z->micro_batches, z->deterministic);
    if (st == PLAIT_OK) st = plait_optim_topology_from_init(init, &z->topo);
    if (st == PLAIT_OK) read_grad_accum(z);
    if (st == PLAIT_OK) {
        int m16 = bf16_moments_wanted(host, init->config, name);
        if (m16 < 0) st = PLAIT_ERR_INVALID_CONFIG;
        z->moments16 = m16 > 0;
    }
    if (st == PLAIT_OK) st = plait_optim_norm_init(host, &z->norm);
    if (st == PLAIT_OK) st = host->config_get(init->config, section, "bucket_size", &v);
    if (st == PLAIT_OK) {
        /* 0, the default: 25 MiB, or (stages 1 and 2) ZERO_RANK_FLOOR
         * floats a rank where that is more (zero.h, "Partitioning") */
        z->unit_floor = v.i == 0 && zero_stage < 3;
        z->bucket_elems = (v.i > 0 ? (size_t)v.i : ZERO_DEFAULT_BUCKET) / sizeof(float);
        if (z->bucket_elems < 1) z->bucket_elems = 1;
        st = host->config_get(init->config, section, "max_inflight", &v);
    }
    if (st == PLAIT_OK) {
        z->max_inflight = (int)v.i;
        st = host->config_get(init->config, section, "grad_compression", &v);
    }
    if (st == PLAIT_OK) {
        z->compression = (plait_compression)v.i;
        st = host->config_get(init->config, section, "param_gather", &v);
    }
    if (st == PLAIT_OK) {
        z->param_gather = v.i && z->n > 1 ? PLAIT_COMPRESS_BF16 : PLAIT_COMPRESS_NONE;
        if (zero_stage == 3) st = host->config_get(init->config, section, "prefetch_layers", &v);
        if (st == PLAIT_OK && zero_stage == 3) z->prefetch = (int)v.i;
        if (st == PLAIT_OK && zero_stage < 3) st = host->config_get(init->config, section, "overlap_param_gather", &v);
        if (st == PLAIT_OK && zero_stage < 3) z->overlap_gather = v.i != 0;
    }
    if (st != PLAIT_OK) {
        zero_destroy(z);
        return st;
    }
    int copies = init->struct_size >= offsetof(plait_optim_init, weight_copy) + sizeof init->weight_copy;
    if (st == PLAIT_OK && copies && init->weight_copy && zero_stage != 3) {
        if (!host->kernels->to_bf16)
            st = host->set_error(PLAIT_ERR_UNSUPPORTED, "%s: no to_bf16 in the kernel table to fill the bf16 copies",
                                 name);
        z->wcopy = (plait_bf16 *const *)init->weight_copy;
        for (int32_t i = 0; i < z->params->n_params; i++)
            if (z->wcopy[i]) z->kept_numel += z->params->params[i].numel;
    }
    int views = init->struct_size >= offsetof(plait_optim_init, copy_view) + sizeof init->copy_view;
    if (st == PLAIT_OK && views && init->copy_gathered && init->copy_view && zero_stage == 3) {
        if (!host->kernels->to_bf16)
            st = host->set_error(PLAIT_ERR_UNSUPPORTED, "%s: no to_bf16 in the kernel table to gather bf16 weights",
                                 name);
        z->gathered16 = init->copy_gathered;
        z->view = init->copy_view;
    }
    if (st != PLAIT_OK) {
        zero_destroy(z);
        return st;
    }
    z->topo.dp_rank = 0; /* each rank counts its own slices of the reduced gradient */
    st = experts_group(z, init);
    if (st != PLAIT_OK) {
        zero_destroy(z);
        return st;
    }
    /* A tied copy on another pipeline stage than its original is kept whole
     * (zero.h); a core too old to flag it (PLAIT_PARAM_TIED_REMOTE) leaves the
     * original unmarked on its stage, so such a layout is refused. */
    for (int32_t i = 0; z->owns_grads && i < z->params->n_params; i++) {
        const plait_param *p = &z->params->params[i];
        if (plait_tied_original(p) >= 0 && plait_tied_local_original(z->params, p) < 0 &&
            !(p->flags & PLAIT_PARAM_TIED_REMOTE)) {
            zero_destroy(z);
            return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: %s is tied to a parameter on another pipeline stage; its gradient must be "
                                   "summed whole across the embedding group, which a sharded gradient cannot be. "
                                   "Use [optim] plugin = zero1 with pipeline parallelism",
                                   name, p->name);
        }
    }
    z->first_layer = -1;
    for (int32_t i = 0; i < z->params->n_params; i++)
        if (z->first_layer < 0 || z->params->params[i].layer < z->first_layer) z->first_layer = z->params->params[i].layer;
    st = zero_partition(z);
    if (st == PLAIT_OK) st = alloc_accumulator(z);
    if (st == PLAIT_OK && zero_stage == 3) st = zero_trace_seed(z);
    z->ag_next = z->n_units;                /* no gather left travelling */
    if (st == PLAIT_OK && zero_stage < 3) { /* overlap_param_gather's per-layer waits */
        z->layer_last_unit = malloc(sizeof *z->layer_last_unit * (size_t)(z->n_layer_slots + 1));
        if (!z->layer_last_unit) st = host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", name);
        for (int32_t l = 0; st == PLAIT_OK && l <= z->n_layer_slots; l++) z->layer_last_unit[l] = -1;
        for (int32_t u = 0; st == PLAIT_OK && u < z->n_units; u++)
            if (!z->units[u].copy) z->layer_last_unit[z->units[u].layer] = u;
    }
    if (st == PLAIT_OK) {
        z->flight = calloc((size_t)z->max_inflight + 1, sizeof *z->flight);
        z->cap_flight = z->max_inflight + 1;
        if (!z->flight) st = host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    if (st != PLAIT_OK) {
        zero_destroy(z);
        return st;
    }
    if (z->owns_grads)
        for (int32_t i = 0; i < z->params->n_params; i++) {
            z->params->params[i].grad = NULL;
            if (zero_stage == 3) z->params->params[i].data = NULL;
        }
    if (z->owns_grads && z->whole_numel > 0) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s tied gradients", name);
        z->whole_grad = plait_tensor_alloc(host, z->whole_numel, tag);
        if (!z->whole_grad) {
            zero_destroy(z);
            return PLAIT_ERR_NO_MEMORY;
        }
        host->kernels->zero(z->whole_grad, z->whole_numel);
        for (int32_t ui = 0; ui < z->n_units; ui++) {
            const zero_unit *u = &z->units[ui];
            if (!u->whole) continue;
            for (int32_t k = 0; k < u->count; k++)
                z->params->params[u->first + k].grad = z->whole_grad + u->whole_off + z->param_off[u->first + k];
        }
    }
    *out = z;
    return PLAIT_OK;
}

static plait_status create1(const plait_optim_init *init, void **out) { return zero_create(1, init, out); }
static plait_status create2(const plait_optim_init *init, void **out) { return zero_create(2, init, out); }
static plait_status create3(const plait_optim_init *init, void **out) { return zero_create(3, init, out); }

static float *alloc_zeroed(zero *z, size_t numel, const char *what) {
    char tag[64];
    snprintf(tag, sizeof tag, "%s %s", z->name, what);
    float *p = plait_tensor_alloc(z->host, numel, tag);
    if (p) z->host->kernels->zero(p, numel ? numel : 1);
    return p;
}

/* One slice's read into the offloaded moment `moment`, or the bf16 one: as
 * plait_tensor_read. */
static plait_status read_offloaded(zero *z, const plait_value_source *src, const char *which, int moment, size_t at,
                                   const plait_param *p, const zero_seg *g) {
    int got = z->store ? optim_offload_load(z->store, moment, at, src, p->index, which, g->param_off, g->len)
                       : bf16_moments_load(&z->m16, moment, at, src, p->index, which, g->param_off, g->len);
    return got > 0 ? PLAIT_OK : got == 0 ? PLAIT_ERR_UNSUPPORTED : PLAIT_ERR_PROTOCOL;
}

/* Read tensor `which` of this rank's slices into `base` (a shard array), or
 * with base NULL into offloaded (or bf16) moment `moment`; slices the source lacks
 * (PLAIT_ERR_UNSUPPORTED) are zero-filled. Notes the first parameter found
 * and the first missing. -1 on a read error. */
static int read_slices(zero *z, const plait_value_source *src, const char *which, float *base, int moment,
                       const plait_param **absent, const plait_param **present) {
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        const zero_unit *u = &z->units[ui];
        if (u->copy) continue;
        size_t lo = zero_lo(z, u);
        for (int32_t s = 0; s < u->n_seg; s++) {
            const zero_seg *g = &z->segs[u->seg_first + s];
            const plait_param *p = &z->params->params[g->param];
            size_t at = u->shard_off + (g->unit_off - lo);
            plait_status st = base ? plait_tensor_read(z->host, src, p->index, which, g->param_off, g->len, base + at)
                                   : read_offloaded(z, src, which, moment, at, p, g);
            if (st == PLAIT_OK) {
                if (!*present) *present = p;
            } else if (st == PLAIT_ERR_UNSUPPORTED) {
                if (base) z->host->kernels->zero(base + at, g->len);
                if (!*absent) *absent = p;
            } else {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", z->host->last_error());
                z->host->set_error(PLAIT_ERR_PROTOCOL, "%s: reading %s of %s: %s", z->name, which, p->name, msg);
                return -1;
            }
        }
    }
    return 0;
}

/* Elements added to make the slices equal: each unit's slices over its own
 * group, less the parameters in it. */
static uint64_t padding_elems(const zero *z) {
    uint64_t held = 0;
    for (int32_t ui = 0; ui < z->n_units; ui++)
        if (!z->units[ui].copy) held += (uint64_t)z->units[ui].shard * (uint64_t)zero_n(z, &z->units[ui]);
    return held - z->psi;
}

/* Room for one layer's parameter slices read ahead of its gather
 * (zero_gather.c): the largest layer's. */
static plait_status read_ahead_room(zero *z) {
    size_t most = 0;
    for (int32_t l = 0; l < z->n_layer_slots; l++) {
        size_t q = 0;
        for (int32_t k = z->gather_first[l]; k < z->gather_first[l + 1]; k++) q += z->units[z->gather_units[k]].shard;
        if (q > most) most = q;
    }
    return optim_offload_prefetch_room(z->store, most);
}

static plait_status zero_materialize(void *sp, const plait_value_source *src) {
    zero *z = sp;
    const plait_host *h = z->host;
    size_t S = z->shard_numel;
    if (z->offload.mode != PLAIT_OFFLOAD_NONE) {
        optim_offload_close(z->store);
        z->store = NULL;
        int wrank = z->world ? h->coll->rank(z->world) : z->rank;
        plait_status st = optim_offload_open(h, z->name, &z->offload, wrank, S, z->offload.params, &z->store);
        if (st == PLAIT_OK && z->zero_stage == 3 && z->offload.params) st = read_ahead_room(z);
        if (st != PLAIT_OK) return st;
        if (!z->osegs && !(z->osegs = calloc(z->n_segs ? (size_t)z->n_segs : 1, sizeof *z->osegs)))
            return h->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", z->name);
    } else if (z->moments16) {
        if (!z->m16.m) {
            plait_status st = bf16_moments_open(h, S, z->name, &z->m16);
            if (st != PLAIT_OK) return st;
        }
    } else if (!z->state && !(z->state = alloc_zeroed(z, 2 * S, "optimizer state"))) {
        return PLAIT_ERR_NO_MEMORY;
    }
    if (z->slice16) { /* bf16 zeros: float32 zeros over the same bytes, the odd one rounded up */
        if (!z->gshard16 &&
            !(z->gshard16 = (plait_bf16 *)alloc_zeroed(z, (z->s16_numel + 1) / 2, "bf16 gradient shards")))
            return PLAIT_ERR_NO_MEMORY;
        if (!z->tied_gshard && !(z->tied_gshard = alloc_zeroed(z, z->tied_numel, "tied gradient shards")))
            return PLAIT_ERR_NO_MEMORY;
    } else if (z->owns_grads) {
        if (!z->gshard && !(z->gshard = alloc_zeroed(z, S, "gradient shards"))) return PLAIT_ERR_NO_MEMORY;
    }
    if (z->owns_grads) {
        if (!z->copy_gshard && !(z->copy_gshard = alloc_zeroed(z, z->copy_shard_numel, "tied gradient shards")))
            return PLAIT_ERR_NO_MEMORY;
    }
    int masters = z->zero_stage == 3 || z->param_gather != PLAIT_COMPRESS_NONE || z->wcopy;
    int params_offloaded = z->store && z->offload.params; /* the slices live in the store */
    if (masters && !params_offloaded && !z->pshard && !(z->pshard = alloc_zeroed(z, S, "parameter shards")))
        return PLAIT_ERR_NO_MEMORY;
    if (z->compression == PLAIT_COMPRESS_ONEBIT && !z->residual && z->n > 1) {
        /* onebit's error feedback: a unit's reduce-scatter input, every unit */
        for (int32_t ui = 0; ui < z->n_units; ui++) {
            const zero_unit *u = &z->units[ui];
            z->units[ui].res_off = z->residual_numel;
            z->residual_numel += u->whole ? plait_coll_residual_allreduce(u->numel, z->n)
                                          : plait_coll_residual_reduce_scatter(u->shard, zero_n(z, u));
        }
        char name[64], tag[64];
        snprintf(name, sizeof name, "%s.units", z->name);
        snprintf(tag, sizeof tag, "%s error feedback", z->name);
        if (!(z->residual = plait_tensor_alloc_kept(h, z->residual_numel, name, tag))) return PLAIT_ERR_NO_MEMORY;
    }
    if (z->tree_mode && !z->tree) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s deterministic accumulation", z->name);
        plait_status st =
            z->tree_api->create(z->tree_numel, PLAIT_F32, PLAIT_SUM, z->micro_batches, tag, &z->tree);
        if (st != PLAIT_OK) return st;
    }
    if (masters) {
        const plait_param *absent = NULL, *present = NULL;
        if (read_slices(z, src, "param", params_offloaded ? NULL : z->pshard, 2, &absent, &present) < 0)
            return PLAIT_ERR_PROTOCOL;
        if (absent)
            return h->set_error(PLAIT_ERR_PROTOCOL, "%s: the value source has no values for parameter %s", z->name,
                                absent->name);
    }
    /* A checkpoint holds all of the optimizer state or none of it. */
    const plait_param *absent = NULL, *present = NULL;
    const char *absent_which = NULL, *present_which = NULL;
    for (int s = 0; state_names[s]; s++) {
        const plait_param *a = NULL, *p = NULL;
        float *base = z->store || z->moments16 ? NULL : z->state + (s ? S : 0);
        if (read_slices(z, src, state_names[s], base, s, &a, &p) < 0) return PLAIT_ERR_PROTOCOL;
        if (a && !absent) absent = a, absent_which = state_names[s];
        if (p && !present) present = p, present_which = state_names[s];
    }
    if (present && absent)
        return h->set_error(PLAIT_ERR_PROTOCOL,
                            "%s: the optimizer state is incomplete: it has %s for %s but no %s for %s (a damaged or "
                            "foreign checkpoint)",
                            z->name, present_which, present->name, absent_which, absent->name);
    z->materialized = 1;
    /* ZeRO-1/2 gathering in bf16: the core's copy becomes what every step
     * leaves there, the gathered rounding of the slices, from the start; a
     * resumed run (whose checkpoint holds the float32 slices) then computes
     * with the values the uninterrupted run would have. Collective: every
     * rank materializes at the same point. */
    if (masters && z->zero_stage != 3) {
        plait_status st = zero_gather_updated(z);
        if (st != PLAIT_OK) return st;
    }
    h->log(PLAIT_LOG_DEBUG, z->name,
           "DP rank %d/%d: %d units, %zu parameter elements, slices of %zu (%zu padding), state %s", z->rank, z->n,
           z->n_units, z->psi, S, (size_t)padding_elems(z), present ? "restored" : "zero-initialised");
    return PLAIT_OK;
}

static plait_status check_layer(zero *z, int32_t layer) {
    if (layer < 0 || layer >= z->n_layer_slots)
        return z->host->set_error(PLAIT_ERR_INVALID_ARG, "%s: layer %d outside 0..%d", z->name, layer,
                                  z->n_layer_slots - 1);
    if (!z->materialized) return z->host->set_error(PLAIT_ERR_INVALID_ARG, "%s: hook before materialize()", z->name);
    return PLAIT_OK;
}

static plait_status zero_before_forward(void *sp, int32_t layer, int32_t mb) {
    zero *z = sp;
    plait_status st = check_layer(z, layer);
    if (st != PLAIT_OK) return st;
    /* ZeRO-1/2: the layer's updated weights, where step() left their
     * gathers travelling ([optim.zeroN] overlap_param_gather) */
    if (z->zero_stage != 3) {
        if (!z->overlap_gather) return PLAIT_OK;
        if (mb == 0 && layer == z->first_layer) z->in_step = 0;
        zero_begin_traffic(z);
        return zero_gather_until(z, layer);
    }
    /* A step (or an evaluation pass) starts with micro-batch 0's first layer:
     * gathers of evaluation passes before it are not the step's traffic. */
    if (mb == 0 && layer == z->first_layer) z->in_step = 0;
    zero_begin_traffic(z);
    return z->zero_stage == 3 ? zero_acquire_layer(z, ZERO_EV_FWD, layer) : PLAIT_OK;
}

static plait_status zero_after_forward(void *sp, int32_t layer, int32_t mb) {
    (void)mb;
    zero *z = sp;
    plait_status st = check_layer(z, layer);
    if (st != PLAIT_OK) return st;
    return z->zero_stage == 3 ? zero_release_layer(z, layer) : PLAIT_OK;
}

static plait_status zero_before_backward(void *sp, int32_t layer, int32_t mb) {
    zero *z = sp;
    plait_status st = check_layer(z, layer);
    if (st == PLAIT_OK) st = zero_gather_finish(z); /* every layer's forward waited for its own already */
    if (st != PLAIT_OK) return st;
    zero_begin_traffic(z);
    if (z->zero_stage == 3) st = zero_acquire_layer(z, ZERO_EV_BWD, layer);
    return st == PLAIT_OK ? zero_before_backward_grads(z, layer, mb) : st;
}

static plait_status zero_after_backward(void *sp, int32_t layer, int32_t mb, int last) {
    zero *z = sp;
    plait_status st = check_layer(z, layer);
    if (st != PLAIT_OK) return st;
    zero_begin_traffic(z);
    st = zero_after_backward_grads(z, layer, mb, last);
    if (st == PLAIT_OK && z->zero_stage == 3) st = zero_release_layer(z, layer);
    return st;
}

static int64_t zero_get_step(void *sp) { return ((zero *)sp)->updates; }
static void zero_set_step(void *sp, int64_t step) { ((zero *)sp)->updates = step; }

static void zero_memory(void *sp, plait_optim_memory *out) {
    zero *z = sp;
    plait_optim_memory m = {.struct_size = sizeof m};
    uint64_t S = z->shard_numel, psi = z->psi;
    m.param_bytes = 4 * (z->zero_stage == 3 ? (z->pshard ? S : 0) : psi - z->kept_numel + (z->pshard ? S : 0));
    /* the slices the optimizer reads, and under grad_accum = bf16 the
     * running sums of every parameter, 2 bytes each, which hold the bf16
     * slices too (zero_slice16) */
    uint64_t copy_acc = 0; /* the tied copies' running sums, working buffers as their slices are */
    for (int32_t ui = 0; z->acc && ui < z->n_units; ui++)
        if (z->units[ui].copy) copy_acc += zero_acc_span(&z->units[ui]);
    m.grad_bytes = (z->slice16 ? 2 * (uint64_t)z->s16_numel : 4 * (z->owns_grads ? S : psi)) +
                   2 * ((uint64_t)z->acc_numel - copy_acc);
    m.state_bytes = z->store ? 0 : (z->moments16 ? 4 : 8) * S;
    uint64_t pool = z->pool_bytes, declared = zero_buffer_bytes(z);
    m.buffer_bytes = pool > declared ? pool : declared;
    if (z->acc_tmp) m.buffer_bytes += 4 * (uint64_t)ZERO_ACC_CHUNK + 2 * copy_acc;
    if (z->moments16) m.buffer_bytes += 4 * 3 * (uint64_t)BF16_PIECE; /* the bf16 moments' widening pieces */
    if (!z->owns_grads) {
        /* The core keeps the tied copies' own gradients. */
        for (int32_t ui = 0; ui < z->n_units; ui++)
            if (z->units[ui].copy) m.buffer_bytes += 4 * (uint64_t)z->params->params[z->units[ui].first].numel;
    } else {
        m.buffer_bytes += 4 * ((uint64_t)z->copy_shard_numel + z->tied_numel + z->whole_numel);
        if (z->tree_mode) {
            uint64_t tree = z->tree ? z->tree_api->bytes(z->tree) : 0,
                     tree_declared = (uint64_t)z->tree_api->max_levels(z->micro_batches) * 4 * z->tree_numel;
            m.buffer_bytes += tree > tree_declared ? tree : tree_declared;
        }
    }
    m.buffer_bytes += 4 * (uint64_t)z->residual_numel; /* onebit's error feedback */
    m.padding_elems = padding_elems(z);
    plait_fill_versioned(out, &m, (uint32_t)sizeof m);
}

/* ops.check of each stage: create()'s refusals on the layout the core
 * describes (plait_optim_read_offload's of offload = host on host memory,
 * then zero_refusals). */
static plait_status zero_check(int zero_stage, const plait_host *host, const plait_config *cfg,
                               const plait_optim_layout *layout) {
    static const char *const names[] = {"zero0", "zero1", "zero2", "zero3"};
    plait_status st = plait_optim_check_offload_host(host, cfg, names[zero_stage], layout->host_memory);
    return st == PLAIT_OK ? zero_refusals(zero_stage, host, cfg, layout->local_micro_batches, layout->deterministic)
                          : st;
}
static plait_status check1(const plait_host *host, const plait_config *cfg, const plait_optim_layout *layout) {
    return zero_check(1, host, cfg, layout);
}
static plait_status check2(const plait_host *host, const plait_config *cfg, const plait_optim_layout *layout) {
    return zero_check(2, host, cfg, layout);
}
static plait_status check3(const plait_host *host, const plait_config *cfg, const plait_optim_layout *layout) {
    return zero_check(3, host, cfg, layout);
}

#define ZERO_OPS(stage_, flags_, flags_for_)                                                                           \
    {                                                                                                                  \
        .struct_size = sizeof(plait_optim_ops), .flags = (flags_), .state_names = state_names,                         \
        .create = create##stage_, .materialize = zero_materialize, .before_forward = zero_before_forward,              \
        .after_forward = (stage_) == 3 ? zero_after_forward : NULL, .before_backward = zero_before_backward,           \
        .after_backward = zero_after_backward, .finish_grads = zero_finish_grads, .step = zero_step,                   \
        .export_tensor = zero_export, .get_step = zero_get_step, .set_step = zero_set_step, .memory = zero_memory,     \
        .destroy = zero_destroy, .export_shard = zero_export_shard, .shard_source = zero_shard_source,                 \
        .flags_for = (flags_for_), .check = check##stage_                                                              \
    }

/* zero1's flags for a run: with grad_accum = bf16 it keeps the gradients
 * (zero.h, grad_accum16), so the core allocates none. */
#define ZERO1_FLAGS (PLAIT_OPTIM_REDUCES_GRADS | PLAIT_OPTIM_SHARDS_MASTERS)
static uint32_t zero1_flags_for(const plait_host *host, const plait_config *cfg) {
    return ZERO1_FLAGS | (grad_accum16_of(host, cfg) ? PLAIT_OPTIM_OWNS_GRADS : 0u);
}
const plait_optim_ops zero1_ops = ZERO_OPS(1, ZERO1_FLAGS, zero1_flags_for);
#define ZERO2_FLAGS (PLAIT_OPTIM_REDUCES_GRADS | PLAIT_OPTIM_OWNS_GRADS | PLAIT_OPTIM_SHARDS_MASTERS)
const plait_optim_ops zero2_ops = ZERO_OPS(2, ZERO2_FLAGS, NULL);
#define ZERO3_FLAGS                                                                                                    \
    (PLAIT_OPTIM_REDUCES_GRADS | PLAIT_OPTIM_OWNS_GRADS | PLAIT_OPTIM_OWNS_PARAMS | PLAIT_OPTIM_GATHERS_COPIES)
const plait_optim_ops zero3_ops = ZERO_OPS(3, ZERO3_FLAGS, NULL);

static const char *const compression_choices[] = PLAIT_COMPRESSION_NAMES;
static const char *const gather_choices[] = {"fp32", "bf16", NULL};

/* The order the core reads them in (core/train/run_params.c). */
static const char *const master_choices[] = {"auto", "sharded", "whole", NULL};

static const char *const grad_accum_choices[] = ZERO_GRAD_ACCUM_NAMES;

/* zero1's seven from [0], zero2's six from [1], zero3's five from [3] (zero.h). */
const plait_key_decl zero_keys[8] = {
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "grad_accum", PLAIT_KEY_ENUM, "fp32", 1, 0, grad_accum_choices,
     "the type a rank's gradients add up in over a step's micro-batches: fp32 (the core's float32 gradients, "
     "Megatron-LM's --accumulate-allreduce-grads-in-fp32), or bf16 (Megatron-Core's bf16 gradient buffer, NeMo's "
     "grad_sync_dtype = bf16: each micro-batch's gradient is float32 while its layer's backward runs, the sum "
     "of those before the last is kept in bf16, 2 bytes a parameter, and the last one's float32 gradient plus it "
     "is reduce-scattered once and rounded into this rank's bf16 slice, kept in that sum's buffer; float32 "
     "slices, 4/N bytes, under [optim] offload). bf16 with deterministic = true and more than one micro-batch "
     "is refused"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "overlap_param_gather", PLAIT_KEY_BOOL, "false", 1, 0, NULL,
     "start the updated weights' all-gathers at the end of step() and wait for each layer's at its next forward, "
     "so that they travel beside the forward of the layers before it (Megatron-LM's --overlap-param-gather); "
     "false: step() waits for them all"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "master", PLAIT_KEY_ENUM, "auto", 1, 0, master_choices,
     "where the float32 master of a weight the products read through the bf16 copy lives: sharded (this rank's "
     "slice only, the bf16 values gathered into every rank's copy: Megatron-LM's distributed optimizer), whole "
     "(every rank keeps the float32 weight), or auto (sharded on a bf16 run whose model reads bf16 copies, at "
     "dp x cp > 1; whole elsewhere). sharded where the model reads float32 weights is refused"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "bucket_size", PLAIT_KEY_BYTES, "0", 0, 1099511627776.0, NULL,
     "largest unit of sharding: a layer's parameters are reduced, gathered and sharded in pieces of at most "
     "this size; a larger tensor is a piece alone. 0 (the default): 25 MiB, or for zero1 and zero2 4 MiB (1M "
     "floats) a rank of the DP group where that is more, since a wide group pays a ring's latency once a rank "
     "and piece (Megatron-Core sizes its buckets so)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "max_inflight", PLAIT_KEY_INT, "2", 1, 64, NULL,
     "reduce-scatters (and step all-gathers) in flight at once, each holding one unit-sized buffer"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "grad_compression", PLAIT_KEY_ENUM, "none", 1, 0,
     compression_choices,
     "wire format of the gradient reduce-scatters: none (float32), bf16 (half the bytes), int8 (a quarter, "
     "per-block scales), onebit (1/21: signs and a scale per 64 values, with error feedback); sums stay float32"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "param_gather", PLAIT_KEY_ENUM, "fp32", 1, 0, gather_choices,
     "wire format of the parameter all-gathers (zero3: before each layer; zero1/zero2: after the update): fp32, "
     "or bf16 (half the bytes; the layers then compute with the bf16-rounded parameters while this rank's "
     "float32 slice takes the update, and checkpoints hold the float32 values)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "prefetch_layers", PLAIT_KEY_INT, "1", 0, 64, NULL,
     "layers whose parameter all-gather starts before their hook arrives (following the previous step's order)"},
};
