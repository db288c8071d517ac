/*
 * PLAIT_ALGO_ORDERED: reductions whose every element is the deterministic
 * summation tree (coll/sum_tree.h) over the members' contributions in rank
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
 *
 * Compressed (plait_coll_args.compression, coll/compress.h): every piece
 * goes out encoded, the owner's own piece through the same encoding (so
 * who owns an element does not change its sum), and onebit's error
 * feedback is kept at the piece's place in the input; the allreduce's
 * owner encodes its reduced segment once, for everyone and itself. Every
 * value is thus rounded exactly once per phase wherever the ranks sit.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/compress.h"
#include "coll/sum_tree.h"
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
    /* compressed: encoded pieces in and out, per parity, n of each */
    plait_compression z = a->compression;
    float *res = z ? a->residual : NULL;
    size_t eb = z ? (plait_compress_bytes(z, ce) + 63) & ~(size_t)63 : 0;
    char *buf[2] = {NULL, NULL}, *erecv[2] = {NULL, NULL}, *esend[2] = {NULL, NULL};
    if (mylen || z) {
        char *s = plait_coll_scratch(c, 2 * (size_t)n * (pb + 2 * eb));
        if (!s) return PLAIT_ERR_NO_MEMORY;
        for (int p = 0; p < 2; p++) {
            buf[p] = s + (size_t)p * (size_t)n * pb;
            erecv[p] = s + 2 * (size_t)n * pb + (size_t)p * (size_t)n * eb;
            esend[p] = erecv[p] + 2 * (size_t)n * eb;
        }
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
                st = z ? plait_coll_irecv(c, erecv[post & 1] + (size_t)q * eb, plait_compress_bytes(z, len), q, 0,
                                          &rh[q])
                       : plait_coll_irecv(c, buf[post & 1] + (size_t)q * pb, len * esz, q, 0, &rh[q]);
            }
            for (int k = 1; st == PLAIT_OK && k < n; k++) {
                int q = (r + k) % n;
                size_t ql = CHUNK_LEN(off[q + 1] - off[q], post), at = off[q] + (size_t)post * ce;
                if (ql && z) {
                    char *e = esend[post & 1] + (size_t)q * eb;
                    plait_compress_encode(z, e, (const float *)(const void *)send + at, ql, res ? res + at : NULL);
                    st = plait_coll_isend(c, e, plait_compress_bytes(z, ql), q, 0, &sh[q]);
                } else if (ql) {
                    st = plait_coll_isend(c, send + at * esz, ql * esz, q, 0, &sh[q]);
                }
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
                if (z && q != r) plait_compress_decode(z, work[q], erecv[i & 1] + (size_t)q * eb, len);
            }
            if (z) { /* my own piece as the others' arrive: through the encoding */
                plait_compress_round_trip(z, work[r], (const float *)leaves[r], len, res ? res + off[r] + at : NULL);
                leaves[r] = work[r];
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

/* The allreduce's second phase, compressed: each owner encodes its reduced
 * segment once (onebit: with the error feedback of the sums, the second
 * half of the residual), keeps the decoded values as its own result and
 * sends the encoding to everyone, who decode it into place. */
static plait_status compressed_gather(plait_coll_ctx *c, const size_t *off, int *h) {
    const plait_coll_args *a = c->a;
    plait_compression z = a->compression;
    int n = c->size, r = c->rank;
    float *recv = a->recv, *res = a->residual ? a->residual + a->count : NULL;
    size_t *at = malloc((size_t)(n + 1) * sizeof *at);
    if (!at) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    at[0] = 0;
    for (int q = 0; q < n; q++) at[q + 1] = at[q] + ((plait_compress_bytes(z, off[q + 1] - off[q]) + 63) & ~(size_t)63);
    char *e = plait_coll_scratch(c, at[n] ? at[n] : 1);
    if (!e) {
        free(at);
        return PLAIT_ERR_NO_MEMORY;
    }
    size_t mine = off[r + 1] - off[r];
    plait_compress_encode(z, e + at[r], recv + off[r], mine, res ? res + off[r] : NULL);
    plait_compress_decode(z, recv + off[r], e + at[r], mine);
    plait_status st = PLAIT_OK;
    for (int k = 1; st == PLAIT_OK && k < n; k++) {
        int q = (r - k + n) % n;
        if (off[q + 1] > off[q])
            st = plait_coll_irecv(c, e + at[q], plait_compress_bytes(z, off[q + 1] - off[q]), q, 1, &h[q]);
    }
    for (int k = 1; st == PLAIT_OK && mine && k < n; k++)
        st = plait_coll_isend(c, e + at[r], plait_compress_bytes(z, mine), (r + k) % n, 1, &h[n + (r + k) % n]);
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, 2 * n);
    for (int q = 0; st == PLAIT_OK && q < n; q++)
        if (q != r) plait_compress_decode(z, recv + off[q], e + at[q], off[q + 1] - off[q]);
    free(at);
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
    if (a->compression && st == PLAIT_OK) {
        st = compressed_gather(c, off, h);
        free(off);
        free(h);
        return st;
    }
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
