#include "checkpoint/checkpoint_shard.h"

#include <string.h>

#include "runtime/error.h"
#include "runtime/memory.h"

typedef struct geometry {
    int whole;        /* no split, no padding: local == global */
    size_t total;     /* local elements */
    size_t inner;     /* elements per position of `dim` */
    size_t local_len; /* positions of `dim` held locally */
    size_t slice;     /* positions per (group, part) */
    size_t group_len; /* padded positions per group */
    size_t real;      /* real length of `dim` */
    size_t first;     /* padded position of this rank's slice within a group */
} geometry;

static plait_status describe(int32_t ndim, const int64_t *shape, const plait_shard *s, geometry *g) {
    memset(g, 0, sizeof *g);
    size_t numel = 1;
    for (int32_t d = 0; d < ndim; d++) numel *= (size_t)shape[d];
    int32_t dim = s ? s->dim : -1;
    if (dim < 0 || (s->parts <= 1 && (s->padded_len <= 0 || s->padded_len == shape[dim]))) {
        g->whole = 1;
        g->total = numel;
        return PLAIT_OK;
    }
    int64_t groups = s->groups > 0 ? s->groups : 1, parts = s->parts > 0 ? s->parts : 1;
    int64_t padded = s->padded_len > 0 ? s->padded_len : shape[dim];
    if (dim >= ndim || padded < shape[dim] || padded % (groups * parts) || s->index < 0 || s->index >= parts)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "shard (dim %d, parts %d, index %d, groups %d, padded_len %lld) does not fit "
                               "a tensor of %d dims with %lld positions on that dim",
                               s->dim, s->parts, s->index, s->groups, (long long)s->padded_len, ndim,
                               dim < ndim ? (long long)shape[dim] : -1LL);
    g->inner = 1;
    for (int32_t d = dim + 1; d < ndim; d++) g->inner *= (size_t)shape[d];
    size_t outer = 1;
    for (int32_t d = 0; d < dim; d++) outer *= (size_t)shape[d];
    g->slice = (size_t)(padded / (groups * parts));
    g->group_len = (size_t)(padded / groups);
    g->local_len = (size_t)(padded / parts);
    g->real = (size_t)shape[dim];
    g->first = (size_t)s->index * g->slice;
    g->total = outer * g->local_len * g->inner;
    return PLAIT_OK;
}

plait_status plait_shard_numel(int32_t ndim, const int64_t *shape, const plait_shard *shard, size_t *out) {
    geometry g;
    plait_status st = describe(ndim, shape, shard, &g);
    *out = st == PLAIT_OK ? g.total : 0;
    return st;
}

/* Walk local elements [offset, offset+count) in runs that are contiguous both
 * locally and globally; global_at < 0 marks a run of padding. */
static void walk(const geometry *g, size_t offset, size_t count, plait_shard_run_fn fn, void *ctx) {
    size_t f = offset, end = offset + count;
    while (f < end) {
        size_t r = f % g->inner, t = f / g->inner;
        size_t l = t % g->local_len, outer = t / g->local_len;
        size_t group = l / g->slice, within = l % g->slice;
        size_t gi = group * g->group_len + g->first + within; /* padded global position */
        size_t run = (g->slice - within) * g->inner - r;
        if (run > end - f) run = end - f;
        if (gi >= g->real) {
            fn(ctx, f, -1, run);
        } else {
            size_t real_left = (g->real - gi) * g->inner - r;
            if (run > real_left) run = real_left;
            fn(ctx, f, (long long)((outer * g->real + gi) * g->inner + r), run);
        }
        f += run;
    }
}

typedef struct copy_ctx {
    const float *src;
    float *dst;
    size_t base;
} copy_ctx;

static void extract_run(void *ctx, size_t local_at, long long global_at, size_t n) {
    copy_ctx *c = ctx;
    float *d = c->dst + (local_at - c->base);
    if (global_at < 0) memset(d, 0, n * sizeof *d);
    else memcpy(d, c->src + global_at, n * sizeof *d);
}

static void insert_run(void *ctx, size_t local_at, long long global_at, size_t n) {
    copy_ctx *c = ctx;
    if (global_at >= 0) memcpy(c->dst + global_at, c->src + local_at, n * sizeof *c->dst);
}

plait_status plait_shard_extract(int32_t ndim, const int64_t *shape, const plait_shard *shard,
                                 const float *global, size_t offset, size_t count, float *dst) {
    copy_ctx c = {.src = global, .dst = dst, .base = offset};
    return plait_shard_walk(ndim, shape, shard, offset, count, extract_run, &c);
}

plait_status plait_shard_insert(int32_t ndim, const int64_t *shape, const plait_shard *shard, const float *local,
                                float *global) {
    geometry g;
    plait_status st = describe(ndim, shape, shard, &g);
    if (st != PLAIT_OK) return st;
    if (g.whole) {
        memcpy(global, local, g.total * sizeof *global);
        return PLAIT_OK;
    }
    copy_ctx c = {.src = local, .dst = global, .base = 0};
    walk(&g, 0, g.total, insert_run, &c);
    return PLAIT_OK;
}

int plait_shard_locate(int32_t ndim, const int64_t *shape, const plait_shard *shard, size_t at, size_t *local,
                       size_t *run) {
    geometry g;
    if (describe(ndim, shape, shard, &g) != PLAIT_OK) return 0;
    if (g.whole) {
        if (at >= g.total) return 0;
        *local = at;
        *run = g.total - at;
        return 1;
    }
    size_t r = at % g.inner, t = at / g.inner, gi = t % g.real, outer = t / g.real;
    size_t group = gi / g.group_len, pos = gi % g.group_len;
    if (pos / g.slice != g.first / g.slice) return 0;
    size_t within = pos % g.slice;
    *local = (outer * g.local_len + group * g.slice + within) * g.inner + r;
    size_t in_slice = (g.slice - within) * g.inner - r, real_left = (g.real - gi) * g.inner - r;
    *run = in_slice < real_left ? in_slice : real_left;
    return 1;
}

plait_status plait_shard_walk(int32_t ndim, const int64_t *shape, const plait_shard *shard, size_t offset, size_t count,
                              plait_shard_run_fn fn, void *ctx) {
    geometry g;
    plait_status st = describe(ndim, shape, shard, &g);
    if (st != PLAIT_OK) return st;
    if (offset > g.total || count > g.total - offset)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "slice elements [%zu, %zu) exceed the slice's %zu", offset,
                               offset + count, g.total);
    if (g.whole) {
        if (count) fn(ctx, offset, (long long)offset, count);
        return PLAIT_OK;
    }
    walk(&g, offset, count, fn, ctx);
    return PLAIT_OK;
}

plait_status plait_shard_read_twice(const plait_param *local, const plait_shard *second, plait_block_read_fn read,
                                    void *ctx, size_t offset, size_t count, float *dst) {
    plait_param block = *local;
    block.local_shape[second->dim] = local->shape[second->dim];
    block.numel = 1;
    for (int32_t d = 0; d < block.ndim; d++) block.numel *= (size_t)block.local_shape[d];
    float *all = plait_alloc(block.numel * sizeof(float) + 64, PLAIT_MEM_HOST, 64, "checkpoint buffer");
    if (!all)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "reading %s: its experts' block (%zu floats)", local->name,
                               block.numel);
    plait_status st = read(ctx, &block, all);
    if (st == PLAIT_OK) st = plait_shard_extract(block.ndim, block.local_shape, second, all, offset, count, dst);
    plait_free(all);
    return st;
}
