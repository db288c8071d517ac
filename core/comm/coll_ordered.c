/*
 * PLAIT_ALGO_ORDERED: reductions whose every element is the deterministic
 * summation tree (comm/sum_tree.h) over the members' contributions in rank
 * order, whatever the chunking, the transport or the timing, so deterministic-mode
 * data parallelism is bit-identical from run to run.
 *
 * How: the vector is cut into one segment per owner. Every rank sends each
 * owner its piece of the owner's segment directly; the owner reduces the n
 * pieces in the tree order and (allreduce) sends the result to everyone.
 * The exchange runs in rounds of ORDERED_CHUNK_BYTES per piece, double
 * buffered, so round i+1 travels while round i is reduced, the pieces stay
 * in cache, and scratch memory stays bounded (2·n chunks). Same volume as
 * the ring: (n-1)/n of the vector out and in per phase.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/sum_tree.h"
#include "runtime/error.h"

#define ORDERED_CHUNK_BYTES (256u << 10)

/* Owner-computes ordered reduction. Segment q is elements [off[q], off[q+1])
 * of the full vector (send); this rank's reduced segment goes to dst. */
static plait_status ordered_core(plait_coll_ctx *c, const size_t *off, char *dst) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank;
    size_t esz = c->esz, maxlen = 0;
    for (int q = 0; q < n; q++)
        if (off[q + 1] - off[q] > maxlen) maxlen = off[q + 1] - off[q];
    if (!maxlen) return PLAIT_OK;
    size_t ce = ORDERED_CHUNK_BYTES / esz;
    if (ce > maxlen) ce = maxlen;
    int rounds = (int)((maxlen + ce - 1) / ce);
    size_t mylen = off[r + 1] - off[r];
    size_t pb = (ce * esz + 63) & ~(size_t)63;
    char *buf[2] = {NULL, NULL};
    if (mylen) {
        char *s = plait_coll_scratch(c, 2 * (size_t)n * pb);
        if (!s) return PLAIT_ERR_NO_MEMORY;
        buf[0] = s;
        buf[1] = s + (size_t)n * pb;
    }
    int *h = malloc(4 * (size_t)n * sizeof(int)); /* [parity][recv n | send n] */
    const void **leaves = malloc((size_t)n * sizeof *leaves);
    void **work = malloc((size_t)n * sizeof *work);
    if (!h || !leaves || !work) {
        free(h), free(leaves), free(work);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < 4 * n; i++) h[i] = -1;
    const char *send = a->send;
    plait_status st = PLAIT_OK;
#define CHUNK_LEN(len, i) ((size_t)(i) * ce < (len) ? ((len) - (size_t)(i) * ce < ce ? (len) - (size_t)(i) * ce : ce) : 0)
    for (int i = -1; st == PLAIT_OK && i < rounds; i++) {
        int post = i + 1;
        if (post < rounds) {
            int *rh = h + (post & 1) * 2 * n, *sh = rh + n;
            size_t len = CHUNK_LEN(mylen, post);
            for (int k = 1; st == PLAIT_OK && len && k < n; k++) {
                int q = (r - k + n) % n;
                st = plait_coll_irecv(c, buf[post & 1] + (size_t)q * pb, len * esz, q, 0, &rh[q]);
            }
            for (int k = 1; st == PLAIT_OK && k < n; k++) {
                int q = (r + k) % n;
                size_t ql = CHUNK_LEN(off[q + 1] - off[q], post);
                if (ql)
                    st = plait_coll_isend(c, send + (off[q] + (size_t)post * ce) * esz, ql * esz, q, 0,
                                          &sh[q]);
            }
        }
        if (i < 0 || st != PLAIT_OK) continue;
        int *rh = h + (i & 1) * 2 * n, *sh = rh + n;
        if ((st = plait_coll_waitall(c, rh, n)) != PLAIT_OK) break;
        size_t len = CHUNK_LEN(mylen, i);
        if (len) {
            size_t at = (size_t)i * ce;
            for (int q = 0; q < n; q++) {
                work[q] = buf[i & 1] + (size_t)q * pb;
                leaves[q] = q == r ? (const void *)(send + (off[r] + at) * esz) : work[q];
            }
            plait_sum_tree_fold(dst + at * esz, leaves, work, n, len, a->dtype, a->op);
            if (a->op == PLAIT_AVG) plait_reduce_finish_avg(dst + at * esz, len, a->dtype, n);
        }
        st = plait_coll_waitall(c, sh, n);
    }
#undef CHUNK_LEN
    free(h);
    free(leaves);
    free(work);
    return st;
}

plait_status plait_ordered_reduce_scatter(plait_coll_ctx *c) {
    int n = c->size;
    size_t *off = malloc((size_t)(n + 1) * sizeof *off);
    if (!off) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int q = 0; q <= n; q++) off[q] = (size_t)q * c->a->count;
    plait_status st = ordered_core(c, off, c->a->recv);
    free(off);
    return st;
}

plait_status plait_ordered_reduce(plait_coll_ctx *c) {
    int n = c->size, root = c->a->root;
    size_t *off = malloc((size_t)(n + 1) * sizeof *off);
    if (!off) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    /* only the root owns a (the whole) segment */
    for (int q = 0; q <= n; q++) off[q] = q <= root ? 0 : c->a->count;
    plait_status st = ordered_core(c, off, c->a->recv);
    free(off);
    return st;
}

plait_status plait_ordered_allreduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank;
    size_t esz = c->esz;
    size_t *off = malloc((size_t)(n + 1) * sizeof *off);
    int *h = malloc(2 * (size_t)n * sizeof(int));
    if (!off || !h) {
        free(off), free(h);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int q = 0; q <= n; q++) off[q] = plait_part_offset(a->count, n, q);
    char *recv = a->recv;
    plait_status st = ordered_core(c, off, recv + off[r] * esz);
    /* everyone gets every owner's segment */
    for (int i = 0; i < 2 * n; i++) h[i] = -1;
    size_t mine = off[r + 1] - off[r];
    for (int k = 1; st == PLAIT_OK && k < n; k++) {
        int q = (r - k + n) % n;
        if (off[q + 1] > off[q])
            st = plait_coll_irecv(c, recv + off[q] * esz, (off[q + 1] - off[q]) * esz, q, 1, &h[q]);
    }
    for (int k = 1; st == PLAIT_OK && mine && k < n; k++) {
        int q = (r + k) % n;
        st = plait_coll_isend(c, recv + off[r] * esz, mine * esz, q, 1, &h[n + q]);
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, 2 * n);
    free(off);
    free(h);
    return st;
}
