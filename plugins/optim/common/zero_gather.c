/*
 * ZeRO-3 parameter gathering (zero.h): all-gather a layer's units before its
 * forward or backward, release them after, and prefetch along the order the
 * hooks arrived in during the previous step.
 *
 * Prefetch is a prediction only: every gather a hook needs is started (if
 * not already) and waited for in that hook (on the device where the comm
 * plugin allows: finish_gather), so any order of hooks — pipeline
 * schedules interleaving micro-batches, evaluation passes — gathers
 * correctly. All DP ranks see the same hook sequence, so they issue the same
 * collectives in the same order.
 */
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static plait_status append(zero *z, int32_t **arr, int32_t *n, int32_t *cap, int32_t v) {
    if (*n == *cap) {
        int32_t c = *cap ? 2 * *cap : 64;
        int32_t *bigger = realloc(*arr, sizeof *bigger * (size_t)c);
        if (!bigger) return z->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory for the prefetch trace", z->name);
        *arr = bigger;
        *cap = c;
    }
    (*arr)[(*n)++] = v;
    return PLAIT_OK;
}

/* Point the unit's parameters (and tied copies of them) at its buffer, or
 * NULL; a bf16 unit's are the model's views (their data stays NULL). */
static void set_ptrs(zero *z, int32_t ui, float *base) {
    zero_unit *u = &z->units[ui];
    if (u->bf16) {
        for (int32_t k = 0; k < u->count; k++)
            z->view[u->first + k] = base ? (plait_bf16 *)base + z->param_off[u->first + k] : NULL;
        return;
    }
    for (int32_t k = 0; k < u->count; k++)
        z->params->params[u->first + k].data = base ? base + z->param_off[u->first + k] : NULL;
    for (int32_t c = 0; c < z->n_units; c++)
        if (z->units[c].copy && z->units[c].original == ui)
            z->params->params[z->units[c].first].data = base; /* the original is alone at offset 0 */
}

/* This rank's float32 slice of unit u into its place in the gathered
 * buffer: as it is, or rounded where the unit gathers bf16. */
static plait_status own_slice(zero *z, const zero_unit *u, float *buf) {
    const plait_kernels *k = z->host->kernels;
    const size_t lo = zero_lo(z, u);
    if (!u->bf16) {
        if (z->pshard) {
            k->copy(buf + lo, z->pshard + u->shard_off, u->shard);
            return PLAIT_OK;
        }
        return optim_offload_fetch(z->store, 2, u->shard_off, buf + lo, u->shard); /* offload_params */
    }
    plait_bf16 *dst = (plait_bf16 *)buf + lo;
    if (z->pshard) {
        k->to_bf16(dst, z->pshard + u->shard_off, u->shard);
        return PLAIT_OK;
    }
    float *tmp = zero_buf_get(z, u->shard); /* the slice read from the store, then rounded */
    if (!tmp) return PLAIT_ERR_NO_MEMORY;
    plait_status st = optim_offload_fetch(z->store, 2, u->shard_off, tmp, u->shard);
    if (st == PLAIT_OK) k->to_bf16(dst, tmp, u->shard);
    zero_buf_put(z, tmp);
    return st;
}

static plait_status start_gather(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    if (u->pbuf) return PLAIT_OK;
    float *buf = zero_buf_get(z, zero_gathered_floats(u));
    if (!buf) return PLAIT_ERR_NO_MEMORY;
    plait_status st = own_slice(z, u, buf);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        return st;
    }
    plait_coll_opts o = plait_tensor_coll_opts(z->host, PLAIT_ALGO_AUTO, "zero3 parameter all-gather");
    o.compression = u->bf16 ? PLAIT_COMPRESS_NONE : (uint32_t)z->param_gather; /* bf16 already */
    st = z->host->coll->allgather(zero_comm(z, u), buf, buf, u->shard, u->bf16 ? PLAIT_BF16 : PLAIT_F32, &o,
                                  &u->ag_req);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        u->ag_req = NULL;
        return st;
    }
    u->pbuf = buf;
    z->gathers_issued++;
    return PLAIT_OK;
}

/* The layer's kernels read the gathered parameters on the compute stream
 * only, so where the comm plugin marks the gather's end on the device
 * (nccl) that stream waits for it there and the host goes on queueing
 * (plait/coll.h, wait_device; a host transport's result still arrives
 * through the host, and a core before ABI 1.5 has only wait). */
static plait_status finish_gather(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    if (!u->ag_req) return PLAIT_OK;
    const plait_coll_api *coll = z->host->coll;
    plait_status st = PLAIT_COLL_HAS(coll, wait_device) ? coll->wait_device(u->ag_req) : coll->wait(u->ag_req);
    u->ag_req = NULL;
    return st;
}

static void free_gather(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    set_ptrs(z, ui, NULL);
    zero_buf_put(z, u->pbuf);
    u->pbuf = NULL;
}

/* Advance the prediction past event ev: on a mismatch look for ev later in
 * the record, then earlier; stop predicting for the step if it is absent. */
static void follow(zero *z, int32_t ev) {
    if (!z->predicting) return;
    if (z->pos < z->n_prev && z->trace_prev[z->pos] == ev) {
        z->pos++;
        return;
    }
    for (int32_t j = z->pos; j < z->n_prev; j++)
        if (z->trace_prev[j] == ev) {
            z->pos = j + 1;
            return;
        }
    for (int32_t j = 0; j < z->pos && j < z->n_prev; j++)
        if (z->trace_prev[j] == ev) {
            z->pos = j + 1;
            return;
        }
    z->predicting = 0;
}

/* 1 if unit ui is needed by one of the next `prefetch` predicted hooks. */
static int needed_soon(const zero *z, int32_t ui) {
    if (!z->predicting) return 0;
    for (int32_t j = z->pos; j < z->n_prev && j < z->pos + z->prefetch; j++) {
        int32_t l = z->trace_prev[j] / 2;
        for (int32_t k = z->gather_first[l]; k < z->gather_first[l + 1]; k++)
            if (z->gather_units[k] == ui) return 1;
    }
    return 0;
}

/* With the parameter slices on disk (offload_params), start reading the
 * slices of the first predicted hook past the gathers started early, so
 * that its gather, started at the next hook, waits only for what is left
 * of that read: the disk one hook ahead of the network. */
static void read_ahead(zero *z) {
    int32_t j = z->pos + z->prefetch;
    if (!z->store || z->pshard || !z->predicting || j >= z->n_prev) return;
    int32_t l = z->trace_prev[j] / 2;
    for (int32_t k = z->gather_first[l]; k < z->gather_first[l + 1]; k++) {
        const zero_unit *u = &z->units[z->gather_units[k]];
        if (!u->pbuf) optim_offload_prefetch(z->store, u->shard_off, u->shard);
    }
}

plait_status zero_acquire_layer(zero *z, int kind, int32_t layer) {
    int32_t ev = ZERO_EVENT(kind, layer);
    plait_status st = append(z, &z->trace_cur, &z->n_cur, &z->cap_cur, ev);
    if (st != PLAIT_OK) return st;
    follow(z, ev);
    int32_t a = z->gather_first[layer], b = z->gather_first[layer + 1];
    for (int32_t k = a; k < b && st == PLAIT_OK; k++) {
        st = start_gather(z, z->gather_units[k]);
        if (st == PLAIT_OK) z->units[z->gather_units[k]].held++;
    }
    /* Start the predicted next layers' gathers before waiting for ours. */
    for (int32_t j = z->pos; st == PLAIT_OK && z->predicting && j < z->n_prev && j < z->pos + z->prefetch; j++) {
        int32_t l = z->trace_prev[j] / 2;
        for (int32_t k = z->gather_first[l]; k < z->gather_first[l + 1] && st == PLAIT_OK; k++)
            st = start_gather(z, z->gather_units[k]);
    }
    read_ahead(z);
    for (int32_t k = a; k < b && st == PLAIT_OK; k++) {
        int32_t ui = z->gather_units[k];
        st = finish_gather(z, ui);
        if (st == PLAIT_OK) set_ptrs(z, ui, z->units[ui].pbuf);
    }
    return st;
}

plait_status zero_release_layer(zero *z, int32_t layer) {
    for (int32_t k = z->gather_first[layer]; k < z->gather_first[layer + 1]; k++) {
        zero_unit *u = &z->units[z->gather_units[k]];
        if (u->held <= 0)
            return z->host->set_error(PLAIT_ERR_INVALID_ARG, "%s: layer %d released without being acquired",
                                      z->name, layer);
        u->held--;
    }
    /* Free what nobody holds and no predicted hook needs. */
    plait_status st = PLAIT_OK;
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        zero_unit *u = &z->units[ui];
        if (!u->pbuf || u->held > 0) continue;
        if (needed_soon(z, ui)) continue;
        plait_status s = finish_gather(z, ui); /* a prefetch nobody used */
        if (st == PLAIT_OK) st = s;
        free_gather(z, ui);
    }
    return st;
}

plait_status zero_release_all(zero *z) {
    plait_status st = PLAIT_OK;
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        zero_unit *u = &z->units[ui];
        if (!u->pbuf) continue;
        plait_status s = finish_gather(z, ui);
        if (st == PLAIT_OK) st = s;
        free_gather(z, ui);
        u->held = 0;
    }
    return st;
}

void zero_trace_commit(zero *z) {
    if (z->n_cur == 0) return; /* no hooks this step: keep the old prediction */
    int32_t *t = z->trace_prev;
    int32_t cap = z->cap_prev;
    z->trace_prev = z->trace_cur;
    z->cap_prev = z->cap_cur;
    z->n_prev = z->n_cur;
    z->trace_cur = t;
    z->cap_cur = cap;
    z->n_cur = 0;
    z->pos = 0;
    z->predicting = z->n_prev > 0;
}

plait_status zero_trace_seed(zero *z) {
    int32_t lo = -1, hi = -1;
    for (int32_t i = 0; i < z->params->n_params; i++) {
        int32_t l = z->params->params[i].layer;
        if (lo < 0 || l < lo) lo = l;
        if (l > hi) hi = l;
    }
    z->n_prev = 0;
    for (int32_t mb = 0; lo >= 0 && mb < z->micro_batches; mb++) {
        for (int32_t l = lo; l <= hi; l++) {
            plait_status st = append(z, &z->trace_prev, &z->n_prev, &z->cap_prev, ZERO_EVENT(ZERO_EV_FWD, l));
            if (st != PLAIT_OK) return st;
        }
        for (int32_t l = hi; l >= lo; l--) {
            plait_status st = append(z, &z->trace_prev, &z->n_prev, &z->cap_prev, ZERO_EVENT(ZERO_EV_BWD, l));
            if (st != PLAIT_OK) return st;
        }
    }
    z->pos = 0;
    z->predicting = z->n_prev > 0;
    return PLAIT_OK;
}
