/*
 * Gradient reduction of the ZeRO engine (zero.h): reduce-scatter of units
 * over the DP group as layers finish their backward, the deterministic
 * accumulation tree (ZeRO-2/3), the DP all-reduce of a tied half whose
 * partner is on another pipeline stage, and the tied-copy sum.
 */
#include <string.h>

#include "bf16_moments.h"
#include "zero.h"

static plait_coll_opts rs_opts(const zero *z, const zero_unit *u) {
    plait_coll_opts o = plait_tensor_coll_opts(z->host, z->deterministic ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO,
                                               "zero gradient reduce-scatter");
    o.compression = (uint32_t)z->compression;
    o.residual = z->residual ? z->residual + u->res_off : NULL;
    return o;
}

/* Zero the parts of a packed unit buffer that hold no parameter: alignment
 * gaps and the padding after the last member. */
static void zero_gaps(const zero *z, const zero_unit *u, float *buf) {
    const plait_kernels *k = z->host->kernels;
    size_t end = 0;
    for (int32_t m = 0; m < u->count; m++) {
        int32_t i = u->first + m;
        size_t off = z->param_off[i];
        if (off > end) k->zero(buf + end, off - end);
        end = off + z->params->params[i].numel;
    }
    if (u->padded > end) k->zero(buf + end, u->padded - end);
}

/* Where unit u's reduced slice goes (ZeRO-2/3). */
static float *grad_slice(zero *z, const zero_unit *u) {
    return (u->copy ? z->copy_gshard : z->gshard) + u->shard_off;
}

/* slice16: unit u's slice is kept in bf16, rounded as its reduction
 * lands: not a tied copy's or its local original's, which add up in
 * float32 first (add_tied), as the embedding group adds a remote pair. */
static int rounds_slice(const zero *z, const zero_unit *u) { return z->slice16 && !u->copy && u->tied_off < 0; }

/* Where unit u's float32 slice is: grad_slice, or under slice16 a tied
 * pair's own float32 storage. */
static float *slice32(zero *z, const zero_unit *u) {
    if (!z->slice16 || u->copy) return grad_slice(z, u);
    return z->tied_gshard + u->tied_off;
}

/* Unit u's slice set to zero: a unit without any backward this step. */
static void clear_slice(zero *z, const zero_unit *u) {
    if (!rounds_slice(z, u)) {
        z->host->kernels->zero(slice32(z, u), u->shard);
        return;
    }
    z->host->kernels->zero(z->acc_tmp, ZERO_ACC_CHUNK);
    for (size_t at = 0; at < u->shard; at += ZERO_ACC_CHUNK)
        bf16_narrow(z->host, zero_slice16(z, u) + at, z->acc_tmp,
                    u->shard - at < ZERO_ACC_CHUNK ? u->shard - at : ZERO_ACC_CHUNK);
}

/* ZeRO-1: pack the core's (final) gradients of unit u and reduce-scatter
 * them; the slice is copied back into the core's gradient on completion. */
static plait_status start_rs_zero1(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    plait_status st = zero_flight_room(z);
    if (st != PLAIT_OK) return st;
    float *buf = zero_buf_get(z, u->padded + u->shard);
    if (!buf) return PLAIT_ERR_NO_MEMORY;
    zero_gaps(z, u, buf);
    for (int32_t k = 0; k < u->count; k++) {
        const plait_param *p = &z->params->params[u->first + k];
        if (!p->grad) {
            zero_buf_put(z, buf);
            return z->host->set_error(PLAIT_ERR_INVALID_ARG, "%s: parameter %s has no gradient storage", z->name,
                                      p->name);
        }
        z->host->kernels->copy(buf + z->param_off[u->first + k], p->grad, p->numel);
    }
    plait_coll_opts o = rs_opts(z, u);
    plait_request *req = NULL;
    st = z->host->coll->reduce_scatter(zero_comm(z, u), buf, buf + u->padded, u->shard, PLAIT_F32, PLAIT_SUM, &o, &req);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        return st;
    }
    u->rs_issued++;
    return zero_flight_push(z, ui, ZERO_FLIGHT_RS, buf, req);
}

/* ZeRO-2/3: reduce-scatter unit u's gradient buffer into its slice. On a
 * later micro-batch the slice's running sum joins this rank's contribution
 * first (after the previous reduction of the unit has landed). */
static plait_status start_rs_owned(zero *z, int32_t ui, float *buf) {
    zero_unit *u = &z->units[ui];
    /* slice16: the float32 sums land in this rank's part of the unit's
     * buffer (in place, NCCL's form: recv = send + rank * count), to be
     * rounded into the slice when they complete; grad_accum16 reduces a
     * unit once a step, so no running sum is ever read back from bf16 */
    float *slice = rounds_slice(z, u) ? buf + zero_lo(z, u) : slice32(z, u);
    plait_status st = PLAIT_OK;
    if (z->slice16 && u->rs_issued > 0) {
        zero_buf_put(z, buf);
        return z->host->set_error(PLAIT_ERR_INVALID_ARG, "%s: unit %d reduced twice in one step", z->name, (int)ui);
    }
    if (u->rs_issued > 0) {
        st = zero_flight_wait_unit(z, ui);
        if (st == PLAIT_OK) z->host->kernels->axpy(buf + zero_lo(z, u), slice, u->shard, 1.0f);
    }
    if (st == PLAIT_OK) st = zero_flight_room(z);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        return st;
    }
    plait_coll_opts o = rs_opts(z, u);
    plait_request *req = NULL;
    st = z->host->coll->reduce_scatter(zero_comm(z, u), buf, slice, u->shard, PLAIT_F32, PLAIT_SUM, &o, &req);
    if (st != PLAIT_OK) {
        zero_buf_put(z, buf);
        return st;
    }
    u->rs_issued++;
    return zero_flight_push(z, ui, ZERO_FLIGHT_RS, buf, req);
}

plait_status zero_rs_complete(zero *z, const zero_flight *f) {
    const zero_unit *u = &z->units[f->unit];
    if (rounds_slice(z, u)) bf16_narrow(z->host, zero_slice16(z, u), f->buf + zero_lo(z, u), u->shard);
    if (z->owns_grads) return PLAIT_OK; /* the slice landed in place */
    const float *recv = f->buf + u->padded;
    size_t lo = zero_lo(z, u);
    for (int32_t s = 0; s < u->n_seg; s++) {
        const zero_seg *g = &z->segs[u->seg_first + s];
        z->host->kernels->copy(z->params->params[g->param].grad + g->param_off, recv + (g->unit_off - lo), g->len);
    }
    return PLAIT_OK;
}

/* Where a whole unit's gradient lives: the core's (ZeRO-1) or whole_grad. */
static float *whole_grad(zero *z, const zero_unit *u) {
    return !z->owns_grads ? z->params->params[u->first].grad : z->whole_grad + u->whole_off;
}

/* Sum whole unit u's gradient, complete for the step on this rank, over DP
 * in place, and wait for it: the embedding group adds the two halves next
 * (PLAIT_GRAD_FINISH_PP, before our finish_grads), so each half must be
 * reduced over DP first, as plain DP reduces it; the pair's gradient is then
 * Σ embedding + Σ head, one process's sum. An all-reduce, not a
 * reduce-scatter: the embedding group sums the whole tensor. */
static plait_status reduce_whole(zero *z, int32_t ui) {
    zero_unit *u = &z->units[ui];
    float *g = whole_grad(z, u);
    plait_status st = zero_flight_room(z);
    if (st != PLAIT_OK) return st;
    plait_coll_opts o = rs_opts(z, u);
    o.label = "zero tied gradient all-reduce";
    plait_request *req = NULL;
    st = z->host->coll->allreduce(z->dp, g, g, u->numel, PLAIT_F32, PLAIT_SUM, &o, &req);
    if (st != PLAIT_OK) return st;
    u->rs_issued++;
    st = zero_flight_push(z, ui, ZERO_FLIGHT_AR, NULL, req);
    return st == PLAIT_OK ? zero_flight_wait_unit(z, ui) : st;
}

plait_status zero_before_backward_grads(zero *z, int32_t layer, int32_t mb) {
    (void)mb;
    if (!z->owns_grads) return PLAIT_OK;
    for (int32_t k = z->grad_first[layer]; k < z->grad_first[layer + 1]; k++) {
        int32_t ui = z->grad_units[k];
        zero_unit *u = &z->units[ui];
        if (u->whole) {
            /* The model adds into whole_grad: over the step, or (tree) one
             * micro-batch's leaf at a time. */
            if (z->tree_mode) z->host->kernels->zero(whole_grad(z, u), u->padded);
            continue;
        }
        if (u->gbuf)
            return z->host->set_error(PLAIT_ERR_INVALID_ARG,
                                      "%s: before_backward of layer %d while its previous backward is still "
                                      "open (after_backward was not called)",
                                      z->name, layer);
        float *buf = zero_buf_get(z, u->padded);
        if (!buf) return PLAIT_ERR_NO_MEMORY;
        z->host->kernels->zero(buf, u->padded);
        u->gbuf = buf;
        for (int32_t m = 0; m < u->count; m++) z->params->params[u->first + m].grad = buf + z->param_off[u->first + m];
    }
    return PLAIT_OK;
}

/* ZeRO-1 accumulating in bf16 (zero.h, grad_accum16): unit u's gradient of
 * one micro-batch in buf joins the running sum of those before (acc,
 * widened a piece at a time: buf += sum); before the last micro-batch the
 * sum goes back to acc, rounded once, and buf to the pool. 1: buf is now
 * the step's whole gradient, to reduce; 0: it was folded and returned. */
static int accumulate(zero *z, zero_unit *u, float *buf, int last) {
    const plait_kernels *k = z->host->kernels;
    plait_bf16 *acc = z->acc + u->acc_off;
    for (size_t at = 0; u->acc_n > 0 && at < u->padded; at += ZERO_ACC_CHUNK) {
        size_t n = u->padded - at < ZERO_ACC_CHUNK ? u->padded - at : ZERO_ACC_CHUNK;
        bf16_widen(z->host, z->acc_tmp, acc + at, n);
        k->axpy(buf + at, z->acc_tmp, n, 1.0f);
    }
    if (last) {
        u->acc_n = 0;
        return 1;
    }
    bf16_narrow(z->host, acc, buf, u->padded);
    u->acc_n++;
    zero_buf_put(z, buf);
    return 0;
}

plait_status zero_after_backward_grads(zero *z, int32_t layer, int32_t mb, int last) {
    if (!z->owns_grads) {
        if (!last) return PLAIT_OK;
        for (int32_t k = z->grad_first[layer]; k < z->grad_first[layer + 1]; k++) {
            int32_t ui = z->grad_units[k];
            plait_status st = PLAIT_OK;
            if (z->units[ui].whole) st = reduce_whole(z, ui);
            else st = start_rs_zero1(z, ui);
            if (st != PLAIT_OK) return st;
        }
        return PLAIT_OK;
    }
    for (int32_t k = z->grad_first[layer]; k < z->grad_first[layer + 1]; k++) {
        int32_t ui = z->grad_units[k];
        zero_unit *u = &z->units[ui];
        if (u->whole) {
            float *w = whole_grad(z, u);
            int done = last;
            if (z->tree_mode) {
                plait_status st = z->tree_api->add(z->tree, mb, w, w, u->tree_off, u->numel, &done);
                if (st != PLAIT_OK) return st;
            }
            plait_status st = done ? reduce_whole(z, ui) : PLAIT_OK;
            if (st != PLAIT_OK) return st;
            continue;
        }
        float *buf = u->gbuf;
        if (!buf)
            return z->host->set_error(PLAIT_ERR_INVALID_ARG,
                                      "%s: after_backward of layer %d without before_backward", z->name, layer);
        u->gbuf = NULL;
        for (int32_t m = 0; m < u->count; m++) z->params->params[u->first + m].grad = NULL;
        if (z->acc && !accumulate(z, u, buf, last)) continue;
        if (z->tree_mode) {
            int done = 0;
            plait_status st = z->tree_api->add(z->tree, mb, buf, buf, u->tree_off, u->numel, &done);
            if (st != PLAIT_OK || !done) {
                zero_buf_put(z, buf);
                if (st != PLAIT_OK) return st;
                continue;
            }
        }
        plait_status st = start_rs_owned(z, ui, buf);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

/* original slice += copy slice, for every tied pair held by this rank
 * (axpy with a = 1: y + 1.0f*x is exactly y + x, the canonical sum). */
static void add_tied(zero *z) {
    const plait_kernels *k = z->host->kernels;
    for (int32_t ci = 0; ci < z->n_units; ci++) {
        const zero_unit *c = &z->units[ci];
        if (!c->copy) continue;
        const zero_unit *o = &z->units[c->original];
        if (!z->owns_grads) {
            /* Both units hold one parameter of equal size: their segments match. */
            for (int32_t s = 0; s < c->n_seg && s < o->n_seg; s++) {
                const zero_seg *cs = &z->segs[c->seg_first + s], *os = &z->segs[o->seg_first + s];
                k->axpy(z->params->params[os->param].grad + os->param_off,
                        z->params->params[cs->param].grad + cs->param_off, cs->len, 1.0f);
            }
        } else {
            k->axpy(slice32(z, o), z->copy_gshard + c->shard_off, c->shard, 1.0f);
            /* slice16: the float32 sum rounded once into the bf16 slice */
            if (z->slice16) bf16_narrow(z->host, zero_slice16(z, o), slice32(z, o), o->shard);
        }
    }
}

/* ZeRO-2/3: a whole unit's gradient, reduced over DP and summed over the
 * embedding group by now, gives this rank its slice; the whole buffer starts
 * the next step at zero. */
static void take_whole(zero *z, const zero_unit *u) {
    float *whole = whole_grad(z, u);
    if (z->slice16) bf16_narrow(z->host, zero_slice16(z, u), whole + zero_lo(z, u), u->shard);
    else z->host->kernels->copy(grad_slice(z, u), whole + zero_lo(z, u), u->shard);
    z->host->kernels->zero(whole, u->padded);
}

plait_status zero_finish_grads(void *state) {
    zero *z = state;
    zero_begin_traffic(z);
    plait_status st = zero_gather_finish(z); /* a step with no backward: its forwards' gathers */
    for (int32_t ui = 0; ui < z->n_units && st == PLAIT_OK; ui++) {
        zero_unit *u = &z->units[ui];
        if (u->whole) {
            if (z->owns_grads) take_whole(z, u); /* ZeRO-1: the core's gradient is the sum */
        } else if (u->gbuf)
            st = z->host->set_error(PLAIT_ERR_INVALID_ARG,
                                    "%s: finish_grads while the backward of layer %d is still open", z->name,
                                    u->layer);
        /* ZeRO-1 units whose layer saw no last backward reduce now, in unit
         * order (the same on every rank). */
        else if (!z->owns_grads && u->rs_issued == 0) st = start_rs_zero1(z, ui);
    }
    plait_status d = zero_flight_drain(z);
    if (st == PLAIT_OK) st = d;
    if (z->zero_stage == 3) {
        d = zero_release_all(z);
        if (st == PLAIT_OK) st = d;
    }
    if (st != PLAIT_OK) return st;
    /* ZeRO-2/3: a unit without any backward this step has zero gradient. */
    for (int32_t ui = 0; ui < z->n_units; ui++) {
        zero_unit *u = &z->units[ui];
        if (z->owns_grads && u->rs_issued == 0) clear_slice(z, u);
        u->rs_issued = 0;
        u->acc_n = 0; /* a layer whose last micro-batch never came (none in a step that runs) */
    }
    add_tied(z);
    return PLAIT_OK;
}
