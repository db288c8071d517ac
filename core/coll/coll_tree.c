/*
 * Binomial trees over ranks relative to the root (vr = rank - root mod n):
 * vr's parent is vr minus its lowest set bit, its children are vr + m for
 * the powers of two m below that bit. log2(n) rounds: the latency choice
 * for small broadcast, reduce, gather and scatter.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "runtime/error.h"

static inline int real_rank(int vr, int root, int n) { return (vr + root) % n; }

/* Lowest set bit of vr; for the root, the smallest power of two >= n. */
static int subtree_span(int vr, int n) {
    if (vr == 0) {
        int m = 1;
        while (m < n) m *= 2;
        return m;
    }
    return vr & -vr;
}

static plait_status bcast_impl(plait_coll_ctx *c, void *buf, size_t bytes, int root, unsigned phase) {
    int n = c->size, vr = (c->rank - root + n) % n;
    int span = subtree_span(vr, n);
    plait_status st;
    if (vr != 0) {
        int h = -1;
        st = plait_coll_irecv(c, buf, bytes, real_rank(vr - span, root, n), phase, &h);
        if (st == PLAIT_OK) st = plait_coll_wait(c, &h);
        if (st != PLAIT_OK) return st;
    }
    int hs[32], nh = 0;
    for (int m = span / 2; m >= 1; m /= 2) {
        if (vr + m >= n) continue;
        st = plait_coll_isend(c, buf, bytes, real_rank(vr + m, root, n), phase, &hs[nh]);
        if (st != PLAIT_OK) return st;
        nh++;
    }
    return plait_coll_waitall(c, hs, nh);
}

/* Reduce to `root`; the result lands in `acc` on the root. On other ranks
 * `acc` (count elements) is working memory, or NULL to use scratch. */
static plait_status reduce_impl(plait_coll_ctx *c, const void *send, void *acc, int root,
                                unsigned phase) {
    const plait_coll_args *a = c->a;
    int n = c->size, vr = (c->rank - root + n) % n;
    size_t esz = c->esz, count = a->count, bytes = count * esz;
    size_t al = (bytes + 63) & ~(size_t)63;
    char *s = plait_coll_scratch(c, 2 * al);
    if (!s) return PLAIT_ERR_NO_MEMORY;
    char *tmp = s;
    if (!acc) acc = s + al;
    const char *src = send;
    for (int mask = 1; mask < n; mask *= 2) {
        if (vr & mask) {
            int h = -1;
            plait_status st = plait_coll_isend(c, src, bytes, real_rank(vr - mask, root, n), phase, &h);
            return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
        }
        if (vr + mask >= n) continue;
        int h = -1;
        plait_status st = plait_coll_irecv(c, tmp, bytes, real_rank(vr + mask, root, n), phase, &h);
        if (st == PLAIT_OK) st = plait_coll_wait(c, &h);
        if (st != PLAIT_OK) return st;
        plait_reduce(acc, src, tmp, count, a->dtype, a->op); /* lower relative ranks on the left */
        src = acc;
    }
    /* root */
    plait_coll_copy(acc, src, bytes);
    if (a->op == PLAIT_AVG) plait_reduce_finish_avg(acc, count, a->dtype, n);
    return PLAIT_OK;
}

plait_status plait_tree_broadcast(plait_coll_ctx *c) {
    return bcast_impl(c, c->a->recv, c->a->count * c->esz, c->a->root, 0);
}

plait_status plait_tree_reduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    return reduce_impl(c, a->send, c->rank == a->root ? a->recv : NULL, a->root, 0);
}

plait_status plait_tree_allreduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    plait_status st = reduce_impl(c, a->send, a->recv, 0, 0);
    if (st != PLAIT_OK) return st;
    return bcast_impl(c, a->recv, a->count * c->esz, 0, 1);
}

plait_status plait_tree_gather(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, root = a->root, vr = (c->rank - root + n) % n;
    size_t blk = a->count * c->esz;
    int span = subtree_span(vr, n);
    int sub = span < n - vr ? span : n - vr; /* blocks in my subtree */
    char *buf;
    if (sub == 1) {
        buf = (char *)(uintptr_t)a->send;
    } else if (vr == 0 && root == 0) {
        buf = a->recv; /* relative order is rank order */
        plait_coll_copy(buf, a->send, blk);
    } else {
        buf = plait_coll_scratch(c, (size_t)sub * blk);
        if (!buf) return PLAIT_ERR_NO_MEMORY;
        memcpy(buf, a->send, blk);
    }
    int hs[32], nh = 0;
    plait_status st = PLAIT_OK;
    for (int m = 1; m < span && vr + m < n; m *= 2) {
        int cnt = m < n - (vr + m) ? m : n - (vr + m);
        st = plait_coll_irecv(c, buf + (size_t)m * blk, (size_t)cnt * blk, real_rank(vr + m, root, n),
                              0, &hs[nh]);
        if (st != PLAIT_OK) return st;
        nh++;
    }
    if ((st = plait_coll_waitall(c, hs, nh)) != PLAIT_OK) return st;
    if (vr != 0) {
        int h = -1;
        st = plait_coll_isend(c, buf, (size_t)sub * blk, real_rank(vr - span, root, n), 0, &h);
        return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
    }
    if (root != 0) /* rotate relative order into rank order */
        for (int i = 0; i < n; i++)
            plait_coll_copy((char *)a->recv + (size_t)real_rank(i, root, n) * blk, buf + (size_t)i * blk, blk);
    return PLAIT_OK;
}

plait_status plait_tree_scatter(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, root = a->root, vr = (c->rank - root + n) % n;
    size_t blk = a->count * c->esz;
    int span = subtree_span(vr, n);
    int sub = span < n - vr ? span : n - vr;
    char *buf;
    plait_status st;
    if (vr == 0) {
        if (root == 0) {
            buf = (char *)(uintptr_t)a->send;
        } else {
            buf = plait_coll_scratch(c, (size_t)n * blk);
            if (!buf) return PLAIT_ERR_NO_MEMORY;
            for (int i = 0; i < n; i++)
                memcpy(buf + (size_t)i * blk, (const char *)a->send + (size_t)real_rank(i, root, n) * blk, blk);
        }
    } else {
        if (sub == 1) {
            buf = a->recv;
        } else {
            buf = plait_coll_scratch(c, (size_t)sub * blk);
            if (!buf) return PLAIT_ERR_NO_MEMORY;
        }
        int h = -1;
        st = plait_coll_irecv(c, buf, (size_t)sub * blk, real_rank(vr - span, root, n), 0, &h);
        if (st == PLAIT_OK) st = plait_coll_wait(c, &h);
        if (st != PLAIT_OK) return st;
    }
    int hs[32], nh = 0;
    for (int m = span / 2; m >= 1; m /= 2) {
        if (vr + m >= n) continue;
        int cnt = m < n - (vr + m) ? m : n - (vr + m);
        st = plait_coll_isend(c, buf + (size_t)m * blk, (size_t)cnt * blk, real_rank(vr + m, root, n),
                              0, &hs[nh]);
        if (st != PLAIT_OK) return st;
        nh++;
    }
    if ((st = plait_coll_waitall(c, hs, nh)) != PLAIT_OK) return st;
    plait_coll_copy(a->recv, buf, blk);
    return PLAIT_OK;
}
