/*
 * The ZeRO optimizer step (zero.h): exact global norm over every rank's
 * slices, clipping, the host's AdamW on this rank's slices, and (ZeRO-1/2)
 * the all-gather of updated parameters into the core's storage.
 */
#include <math.h>
#include <string.h>

#include "bf16_moments.h"
#include "zero.h"

static float *grad_ptr(zero *z, const zero_unit *u, const zero_seg *g) {
    if (!z->owns_grads) return z->params->params[g->param].grad + g->param_off;
    return z->gshard + u->shard_off + (g->unit_off - zero_lo(z, u));
}

/* Elements of segment g the step reads at once: all of them, or where the
 * slices are bf16 (zero.h, slice16) the widening piece. */
static size_t piece_of(const zero *z, const zero_seg *g) { return z->slice16 ? ZERO_ACC_CHUNK : g->len; }

/* Segment g's gradient at [off, off + n), float32: in place, or widened
 * into acc_tmp from the bf16 slice (valid until the next call). */
static const float *grad_piece(zero *z, const zero_unit *u, const zero_seg *g, size_t off, size_t n) {
    if (!z->slice16) return grad_ptr(z, u, g) + off;
    bf16_widen(z->host, z->acc_tmp, zero_slice16(z, u) + (g->unit_off - zero_lo(z, u)) + off, n);
    return z->acc_tmp;
}

/* NULL where the slices live in the offload store ([optim] offload_params). */
static float *param_ptr(zero *z, const zero_unit *u, const zero_seg *g) {
    if (z->pshard) return z->pshard + u->shard_off + (g->unit_off - zero_lo(z, u));
    if (z->zero_stage == 3) return NULL;
    return z->params->params[g->param].data + g->param_off;
}

/* ZeRO-1/2: this rank's updated slice of unit u goes to every rank. */
static plait_status start_ag(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    plait_status st = zero_flight_room(z);
    if (st != PLAIT_OK) return st;
    float *buf = zero_buf_get(z, zero_gathered_floats(u));
    if (!buf) return PLAIT_ERR_NO_MEMORY;
    size_t lo = zero_lo(z, u);
    if (u->bf16) { /* kept copies' masters, in pshard with their gaps zero: rounded */
        z->host->kernels->to_bf16((plait_bf16 *)buf + lo, z->pshard + u->shard_off, u->shard);
    } else {
        z->host->kernels->zero(buf + lo, u->shard); /* gaps and padding travel as zeros */
        for (int32_t s = 0; s < u->n_seg; s++) {
            const zero_seg *g = &z->segs[u->seg_first + s];
            z->host->kernels->copy(buf + g->unit_off, param_ptr(z, u, g), g->len);
        }
    }
    plait_coll_opts o = plait_tensor_coll_opts(z->host, PLAIT_ALGO_AUTO, "zero parameter all-gather");
    /* every rank, this one too, gets the decoded values; bf16 already */
    o.compression = u->bf16 ? PLAIT_COMPRESS_NONE : (uint32_t)z->param_gather;
    plait_request *req = NULL;
    st = z->host->coll->allgather(zero_comm(z, u), buf, buf, u->shard, u->bf16 ? PLAIT_BF16 : PLAIT_F32, &o, &req);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        return st;
    }
    return zero_flight_push(z, ui, ZERO_FLIGHT_AG_STEP, buf, req);
}

/* The next unit with a gather to start (tied copies have none). */
static int32_t next_gathered(const zero *z, int32_t ui) {
    while (ui < z->n_units && z->units[ui].copy) ui++;
    return ui;
}

/* Start gathers in unit order while the unit `upto` has not started, or
 * (upto -1) while there is room in flight; the rest wait for later calls. */
static plait_status start_gathers(zero *z, int32_t upto) {
    plait_status st = PLAIT_OK;
    while (st == PLAIT_OK && z->ag_next < z->n_units &&
           (upto >= 0 ? z->ag_next <= upto : z->n_flight < z->max_inflight)) {
        st = start_ag(z, z->ag_next);
        z->ag_next = next_gathered(z, z->ag_next + 1);
    }
    return st;
}

plait_status zero_gather_begin(zero *z) {
    z->ag_next = next_gathered(z, 0);
    return start_gathers(z, -1);
}

/* Units start in index order and complete in it (the flights are a FIFO),
 * and a layer's forward comes after every layer before it, so waiting for
 * the layer's last unit waits for all of its units; the next ones then
 * travel beside this layer's forward. */
plait_status zero_gather_until(zero *z, int32_t layer) {
    int32_t last = z->layer_last_unit ? z->layer_last_unit[layer] : -1;
    if (last < 0) return PLAIT_OK;
    plait_status st = start_gathers(z, last);
    if (st == PLAIT_OK) st = zero_flight_wait_unit(z, last);
    return st == PLAIT_OK ? start_gathers(z, -1) : st;
}

plait_status zero_gather_finish(zero *z) {
    if (!z->overlap_gather) return PLAIT_OK;
    int pending = z->ag_next < z->n_units;
    for (int32_t i = 0; i < z->n_flight && !pending; i++) pending = z->flight[i].kind == ZERO_FLIGHT_AG_STEP;
    if (!pending) return PLAIT_OK;
    plait_status st = start_gathers(z, z->n_units);
    plait_status d = zero_flight_drain(z);
    z->ag_next = z->n_units;
    return st == PLAIT_OK ? d : st;
}

plait_status zero_gather_updated(zero *z) {
    plait_status st = PLAIT_OK;
    for (int32_t ui = 0; ui < z->n_units && st == PLAIT_OK; ui++)
        if (!z->units[ui].copy) st = start_ag(z, ui);
    plait_status d = zero_flight_drain(z);
    return st == PLAIT_OK ? d : st;
}

plait_status zero_ag_complete(zero *z, const zero_flight *f) {
    const zero_unit *u = &z->units[f->unit];
    for (int32_t k = 0; k < u->count; k++) {
        int32_t i = u->first + k;
        plait_param *p = &z->params->params[i];
        if (u->bf16) { /* gathered in bf16: into the copy as it is, two values a float */
            const plait_bf16 *v = (const plait_bf16 *)f->buf + z->param_off[i];
            z->host->kernels->copy((float *)z->wcopy[i], (const float *)v, p->numel / 2);
            continue;
        }
        /* a kept copy takes the bf16 rounding the model made from the whole
         * float32 weight before (zero.h, "Distributed optimizer") */
        if (z->wcopy && z->wcopy[i]) z->host->kernels->to_bf16(z->wcopy[i], f->buf + z->param_off[i], p->numel);
        else z->host->kernels->copy(p->data, f->buf + z->param_off[i], p->numel);
    }
    return PLAIT_OK;
}

plait_status zero_step(void *state, const plait_optim_step_in *in, plait_optim_step_out *out) {
    zero *z = state;
    const plait_host *host = z->host;
    const plait_kernels *k = host->kernels;
    if (!z->materialized) return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: step() before materialize()", z->name);
    plait_status left = zero_gather_finish(z); /* a step with no forward since the last */
    if (left != PLAIT_OK) return left;
    zero_begin_traffic(z);
    double waited_before = plait_optim_wait_seconds(host, z->dp, z->world);
    if (z->n_flight > 0)
        return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: step() with gradient reductions in flight (the core "
                                                      "must call finish_grads first)", z->name);
    for (int32_t i = 0; z->zero_stage == 1 && i < z->params->n_params; i++)
        if ((!z->owns_grads && !z->params->params[i].grad) ||
            (!z->params->params[i].data && !(z->wcopy && z->wcopy[i])))
            return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: parameter %s has no storage", z->name,
                                   z->params->params[i].name);

    /* Exact Σ g² of this rank's slices; the slices of all ranks cover every
     * gradient element once. */
    plait_status st = plait_optim_norm_begin(host, &z->norm);
    if (st != PLAIT_OK) return st;
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        const zero_unit *u = &z->units[ui];
        if (u->copy) continue;
        for (int32_t s = 0; s < u->n_seg; s++) {
            const zero_seg *g = &z->segs[u->seg_first + s];
            if (!plait_optim_counts_in_norm(&z->topo, &z->params->params[g->param])) continue;
            for (size_t o = 0, w = piece_of(z, g); o < g->len; o += w) {
                size_t n = g->len - o < w ? g->len - o : w;
                plait_optim_norm_add(host, &z->norm, grad_piece(z, u, g, o, n), n);
            }
        }
    }
    double sumsq = 0;
    uint64_t norm_bytes = 0;
    st = plait_optim_norm_finish(host, &z->norm, z->world, &sumsq, &norm_bytes);
    if (st != PLAIT_OK) return st;
    double norm = sqrt(sumsq);
    plait_adamw_args args;
    st = optim_begin_update(host, z->name, &z->hp, in->step, norm, &z->updates, &args);
    if (st != PLAIT_OK) return st;
    double lr = plait_optim_lr_at(&z->hp, in->step); /* reported in double */
    float *m = z->state, *v = z->state ? z->state + z->shard_numel : NULL;
    z->n_osegs = 0;
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        const zero_unit *u = &z->units[ui];
        if (u->copy) continue;
        size_t lo = zero_lo(z, u);
        for (int32_t s = 0; s < u->n_seg; s++) {
            const zero_seg *g = &z->segs[u->seg_first + s];
            const plait_param *p = &z->params->params[g->param];
            size_t at = u->shard_off + (g->unit_off - lo);
            args.weight_decay = (p->flags & PLAIT_PARAM_NO_DECAY) ? 0.0f : (float)z->hp.weight_decay;
            if (z->store)
                z->osegs[z->n_osegs++] = (optim_offload_seg){.param = param_ptr(z, u, g),
                                                             .grad = grad_ptr(z, u, g),
                                                             .at = at,
                                                             .n = g->len,
                                                             .weight_decay = args.weight_decay,
                                                             .layer = -1};
            else
                for (size_t o = 0, w = piece_of(z, g); o < g->len; o += w) {
                    size_t n = g->len - o < w ? g->len - o : w;
                    const float *gr = grad_piece(z, u, g, o, n);
                    if (z->moments16) bf16_moments_adamw(&z->m16, param_ptr(z, u, g) + o, gr, at + o, n, &args);
                    else k->adamw(param_ptr(z, u, g) + o, gr, m + at + o, v + at + o, n, &args);
                }
        }
    }
    if (z->store && (st = optim_offload_step(z->store, z->osegs, z->n_osegs, &args, in->step + 1)) != PLAIT_OK)
        return st;

    /* ZeRO-1/2: every rank needs every updated parameter. */
    st = z->zero_stage == 3 ? zero_flight_drain(z) : z->overlap_gather ? zero_gather_begin(z) : zero_gather_updated(z);
    if (st != PLAIT_OK) return st;
    if (z->zero_stage == 3) zero_trace_commit(z);

    plait_comm_stats now = {.struct_size = sizeof now};
    uint64_t sent = 0;
    if (z->dp && host->coll && host->coll->stats) {
        host->coll->stats(z->dp, &now);
        sent = now.bytes_sent - z->dp_before.bytes_sent;
        if (z->edp != z->dp) { /* the expert units' traffic */
            plait_comm_stats e = {.struct_size = sizeof e};
            host->coll->stats(z->edp, &e);
            sent += e.bytes_sent - z->edp_before.bytes_sent;
        }
    }
    if (z->dp != z->world) sent += norm_bytes; /* otherwise already in the DP counter */
    z->in_step = 0;
    plait_optim_report_step(out, lr, norm, sent, plait_optim_wait_seconds(host, z->dp, z->world) - waited_before);
    return PLAIT_OK;
}
