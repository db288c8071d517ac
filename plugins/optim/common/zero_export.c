/*
 * Checkpoint exports of the ZeRO engine (zero.h): a parameter's float32
 * value or Adam moment assembled on its group's rank 0 from every rank's
 * slice (export_tensor), or this rank's own range of it for a sharded
 * checkpoint (export_shard, shard_source), from the shard arrays, the
 * offload store or the bf16 moments.
 */
#include <stdlib.h>
#include <string.h>

#include "zero.h"

/* Tag of the export point-to-point messages on the DP group (user tags are
 * below 2^31; nothing else sends point-to-point on the DP group). */
#define ZERO_EXPORT_TAG 0x3e5a0000u

/* Moment `moment` (or, offloaded, the parameter shard: 2) at [at, at +
 * count) into dst, host memory: from the offload store or the bf16 moments. */
static plait_status moment_get(zero *z, int moment, size_t at, float *dst, size_t count) {
    return z->store ? optim_offload_get(z->store, moment, at, dst, count)
                    : bf16_moments_get(&z->m16, moment, at, dst, count);
}

/* This rank's part [at, at + count) of an offloaded moment (or offloaded
 * parameter shard): into rank 0's `dst` (host memory; NULL: nothing to
 * keep), or sent to rank 0 from a host buffer. */
static plait_status export_offloaded(zero *z, const zero_unit *u, int moment, size_t at, size_t count, float *dst,
                                     int which_id) {
    const plait_host *h = z->host;
    if (zero_rank(z, u) == 0) return dst ? moment_get(z, moment, at, dst, count) : PLAIT_OK;
    float *buf = malloc((count ? count : 1) * sizeof *buf);
    if (!buf) return h->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", z->name);
    plait_status st = moment_get(z, moment, at, buf, count);
    plait_coll_opts o = plait_tensor_coll_opts(h, PLAIT_ALGO_AUTO, "zero checkpoint export");
    o.mem_kind = PLAIT_MEM_HOST;
    if (st == PLAIT_OK)
        st = h->coll->send(zero_comm(z, u), buf, count, PLAIT_F32, 0, ZERO_EXPORT_TAG + (uint32_t)which_id, &o, NULL);
    free(buf);
    return st;
}

/* Where this rank's part of tensor `which` of the local parameter behind
 * global `param_index` (a tied copy's original) lives. */
typedef struct export_src {
    int32_t local;     /* the local parameter */
    int whole;         /* every rank holds it whole (ZeRO-1/2 without a float32 slice of their own) */
    int offloaded;     /* in the offload store, or bf16: moment `moment` of moment_get */
    int moment;        /* its moment index there */
    const float *base; /* else the shard array */
    int which_id;      /* the message tag offset */
} export_src;

static plait_status zero_export_base(zero *z, int32_t param_index, const char *which, export_src *src) {
    const plait_host *h = z->host;
    int32_t i = plait_param_set_find(z->params, param_index);
    if (i < 0)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "%s: parameter %d is not held by this rank", z->name, param_index);
    int32_t orig = plait_tied_local_original(z->params, &z->params->params[i]);
    if (orig >= 0) i = orig; /* shares the original's everything */
    const plait_param *p = &z->params->params[i];
    if (!z->materialized) return h->set_error(PLAIT_ERR_INVALID_ARG, "%s: export before materialize()", z->name);
    /* the weights the last step left travelling first: every DP rank
     * exports at the same point (a checkpoint, a replica's snapshot) */
    plait_status st = zero_gather_finish(z);
    if (st != PLAIT_OK) return st;
    *src = (export_src){.local = i};
    if (strcmp(which, "param") == 0) {
        src->offloaded = z->store && z->offload.params;
        src->whole = !z->pshard && !src->offloaded;
        src->base = z->pshard, src->which_id = 0, src->moment = 2;
    } else if (strcmp(which, "exp_avg") == 0) {
        src->offloaded = z->store != NULL || z->moments16;
        src->base = z->state, src->which_id = 1, src->moment = 0;
    } else if (strcmp(which, "exp_avg_sq") == 0) {
        src->offloaded = z->store != NULL || z->moments16;
        src->base = z->state ? z->state + z->shard_numel : NULL, src->which_id = 2, src->moment = 1;
    } else {
        return h->set_error(PLAIT_ERR_INVALID_ARG, "%s: unknown tensor \"%s\" of %s", z->name, which, p->name);
    }
    return PLAIT_OK;
}

/* This rank's own range of the parameter's slice: nothing is sent, so
 * every DP rank writes its part of a sharded checkpoint at once. */
plait_status zero_export_shard(void *sp, int32_t param_index, const char *which, size_t *offset, size_t *count,
                               float *dst) {
    zero *z = sp;
    export_src src;
    *offset = *count = 0;
    plait_status st = zero_export_base(z, param_index, which, &src);
    if (st != PLAIT_OK) return st;
    const plait_param *p = &z->params->params[src.local];
    const zero_unit *u = &z->units[z->unit_of_param[src.local]];
    if (src.whole) { /* held whole by every rank of its group: that group's rank 0 writes it */
        int first = zero_rank(z, u) == 0;
        if (first) *count = p->numel;
        return first && dst ? plait_tensor_to_host(z->host, dst, p->data, p->numel) : PLAIT_OK;
    }
    size_t a = z->param_off[src.local], b = a + p->numel, lo = zero_lo(z, u), hi = lo + u->shard;
    size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
    if (s >= e) return PLAIT_OK;
    *offset = s - a;
    *count = e - s;
    if (!dst) return PLAIT_OK;
    size_t at = u->shard_off + (s - lo);
    return src.offloaded ? moment_get(z, src.moment, at, dst, e - s)
                         : plait_tensor_to_host(z->host, dst, src.base + at, e - s);
}

/* Where zero_export_shard's part lives: the core copies it itself. */
plait_status zero_shard_source(void *sp, int32_t param_index, const char *which, size_t *offset, size_t *count,
                               const float **src) {
    zero *z = sp;
    export_src es;
    *src = NULL;
    plait_status st = zero_export_shard(sp, param_index, which, offset, count, NULL);
    if (st == PLAIT_OK) st = zero_export_base(z, param_index, which, &es);
    if (st != PLAIT_OK || !*count || es.offloaded) return st;
    const plait_param *p = &z->params->params[es.local];
    if (es.whole) {
        *src = p->data;
        return PLAIT_OK;
    }
    const zero_unit *u = &z->units[z->unit_of_param[es.local]];
    *src = es.base + u->shard_off + (z->param_off[es.local] + *offset - zero_lo(z, u));
    return PLAIT_OK;
}

plait_status zero_export(void *sp, int32_t param_index, const char *which, float *dst) {
    zero *z = sp;
    const plait_host *h = z->host;
    export_src src;
    plait_status st0 = zero_export_base(z, param_index, which, &src);
    if (st0 != PLAIT_OK) return st0;
    const plait_param *p = &z->params->params[src.local];
    const zero_unit *u = &z->units[z->unit_of_param[src.local]];
    const int rank = zero_rank(z, u), n = zero_n(z, u);
    plait_comm *comm = zero_comm(z, u);
    if (src.whole) return rank == 0 && dst ? plait_tensor_to_host(h, dst, p->data, p->numel) : PLAIT_OK;
    /* Rank q of the unit's group holds [q*shard, (q+1)*shard) of the unit;
     * each sends its part of the parameter to rank 0, which assembles it in
     * dst (host memory; a rank-0 call without dst receives into a pool
     * buffer instead). */
    size_t a = z->param_off[src.local], b = a + p->numel;
    float *scratch = NULL;
    if (rank == 0 && !dst) {
        scratch = zero_buf_get(z, p->numel);
        if (!scratch) return PLAIT_ERR_NO_MEMORY;
        dst = scratch;
    }
    plait_coll_opts dev = plait_tensor_coll_opts(h, PLAIT_ALGO_AUTO, "zero checkpoint export");
    plait_coll_opts into = dev;
    if (!scratch) into.mem_kind = PLAIT_MEM_HOST;
    plait_status st = PLAIT_OK;
    for (int q = 0; q < n && st == PLAIT_OK; q++) {
        size_t lo = (size_t)q * u->shard, hi = lo + u->shard;
        size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
        if (s >= e) continue;
        size_t at = u->shard_off + (s - lo);
        if (src.offloaded && rank == q)
            st = export_offloaded(z, u, src.moment, at, e - s, q == 0 && !scratch ? dst + (s - a) : NULL, src.which_id);
        else if (rank == 0 && q == 0)
            st = scratch ? PLAIT_OK : plait_tensor_to_host(h, dst + (s - a), src.base + at, e - s);
        else if (rank == q)
            st = h->coll->send(comm, src.base + at, e - s, PLAIT_F32, 0, ZERO_EXPORT_TAG + (uint32_t)src.which_id, &dev,
                               NULL);
        else if (rank == 0)
            st = h->coll->recv(comm, dst + (s - a), e - s, PLAIT_F32, q, ZERO_EXPORT_TAG + (uint32_t)src.which_id,
                               &into, NULL);
    }
    zero_buf_put(z, scratch);
    return st;
}
