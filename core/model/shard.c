/*
 * Geometry of a parameter's TP slice (plait_shard): local shapes and the
 * local → global element mapping used by initialisation and tests; a
 * mixture of experts' slice cut twice at tp × ep, its experts over ep on
 * dimension 0, then each one's width over tp (plait_plan.second_shards).
 */
#include "model/model_internal.h"
#include "runtime/error.h"

plait_status plait_param_apply_shard(plait_param *p, const plait_shard *shard) {
    plait_shard s = *shard;
    if (s.groups < 1) s.groups = 1;
    for (int i = 0; i < p->ndim; i++) p->local_shape[i] = p->shape[i];
    if (s.dim < 0 || s.parts <= 1) {
        if (s.parts < 1 || s.index != 0)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "parameter %s: shard with %d parts and index %d is not valid",
                                   p->name, (int)s.parts, (int)s.index);
        s.parts = 1;
        s.index = 0;
        if (s.dim >= 0 && s.dim < p->ndim) s.padded_len = p->shape[s.dim];
    } else {
        if (s.dim >= p->ndim)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "parameter %s has %d dimensions; its shard splits dimension %d",
                                   p->name, (int)p->ndim, (int)s.dim);
        if (s.padded_len == 0) s.padded_len = p->shape[s.dim];
        if (s.padded_len < p->shape[s.dim] || s.index < 0 || s.index >= s.parts ||
            s.padded_len % ((int64_t)s.groups * s.parts) != 0)
            return plait_set_error(
                PLAIT_ERR_INVALID_ARG,
                "parameter %s: dimension %d of length %lld cannot be split as padded length %lld, "
                "%d groups, %d parts, index %d (padded length must be >= the length and a "
                "multiple of groups*parts)",
                p->name, (int)s.dim, (long long)p->shape[s.dim], (long long)s.padded_len,
                (int)s.groups, (int)s.parts, (int)s.index);
        p->local_shape[s.dim] = s.padded_len / s.parts;
    }
    p->shard = s;
    size_t n = 1;
    for (int i = 0; i < p->ndim; i++) n *= (size_t)p->local_shape[i];
    p->numel = n;
    return PLAIT_OK;
}

int64_t plait_shard_local_len(const plait_param *p) {
    const plait_shard *s = &p->shard;
    if (s->dim < 0) return 0;
    return s->parts <= 1 ? p->shape[s->dim] : s->padded_len / s->parts;
}

int64_t plait_shard_global_index(const plait_param *p, size_t local) {
    const plait_shard *s = &p->shard;
    if (s->dim < 0 || s->parts <= 1) return (int64_t)local;
    int64_t inner = 1;
    for (int i = s->dim + 1; i < p->ndim; i++) inner *= p->shape[i];
    int64_t ld = s->padded_len / s->parts;
    int64_t outer = (int64_t)local / (ld * inner);
    int64_t rem = (int64_t)local % (ld * inner);
    int64_t di = rem / inner, ii = rem % inner;
    int64_t group_len = s->padded_len / (s->groups < 1 ? 1 : s->groups);
    int64_t part_len = group_len / s->parts;
    int64_t gd = (di / part_len) * group_len + s->index * part_len + di % part_len;
    if (gd >= p->shape[s->dim]) return -1;
    return (outer * p->shape[s->dim] + gd) * inner + ii;
}

/* The first split's block as a tensor of its own: an expert tensor's
 * E / ep experts, the whole of every other dimension. */
static plait_param first_block(const plait_param *p) {
    plait_param q = *p;
    q.shape[0] = p->local_shape[0];
    return q;
}

plait_status plait_param_apply_second(plait_param *p, const plait_shard *second) {
    if (second->dim < 0 || second->parts <= 1) return PLAIT_OK;
    const plait_shard *f = &p->shard;
    if (f->dim != 0 || f->groups > 1 || f->padded_len != p->shape[0] || second->dim == 0 || second->dim >= p->ndim)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "parameter %s: a second split (dimension %d) needs a first one on dimension 0, "
                               "unpadded, in one group, and another dimension below %d; it has dimension %d",
                               p->name, (int)second->dim, (int)p->ndim, (int)f->dim);
    plait_param q = first_block(p);
    plait_status st = plait_param_apply_shard(&q, second);
    if (st != PLAIT_OK) return st;
    p->local_shape[second->dim] = q.local_shape[second->dim];
    p->numel = q.numel;
    return PLAIT_OK;
}

int64_t plait_shard_global_index_twice(const plait_param *p, const plait_shard *second, size_t local) {
    if (second->dim < 0 || second->parts <= 1) return plait_shard_global_index(p, local);
    plait_param q = first_block(p);
    q.shard = *second;
    int64_t within = plait_shard_global_index(&q, local);
    if (within < 0) return -1;
    int64_t block = 1;
    for (int i = 0; i < p->ndim; i++) block *= q.shape[i];
    return (p->shard.parts > 1 ? p->shard.index : 0) * block + within;
}
