/*
 * Recursive doubling and halving: log2(n) rounds, each with one partner.
 *
 * Small allreduce: recursive doubling (every round exchanges the whole
 * vector). Larger: Rabenseifner (recursive-halving reduce-scatter, then
 * recursive-doubling allgather), which moves 2(n-1)/n of the data like the
 * ring but in 2·log2(n) rounds instead of 2(n-1).
 *
 * Groups that are not a power of two fold first: with p the largest power
 * of two <= n and rem = n - p, ranks 2i and 2i+1 (i < rem) pair up, the even
 * one hands its data to the odd one and waits for the result; the p
 * remaining "virtual" ranks run the power-of-two algorithm. Virtual rank v
 * stands for real ranks {2v, 2v+1} when v < rem, else {v + rem}; those blocks
 * are contiguous in rank order, so halving and doubling work on contiguous
 * element ranges.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "runtime/error.h"

/* Largest power of two <= n. */
static int pow2_floor(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

static int virtual_of(int r, int rem) { return r < 2 * rem ? ((r & 1) ? r / 2 : -1) : r - rem; }
static int real_of(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }
/* First real rank a virtual rank stands for (v == p gives n). */
static int first_real(int v, int rem) { return v < rem ? 2 * v : v + rem; }

/* Up to this many bytes an allreduce exchanges whole vectors (recursive
 * doubling); above it halves (Rabenseifner). See coll_exec.c. */
#define RHD_DOUBLING_MAX_BYTES (8u << 10)

/* Tag phases (plus a base: 0, or PLAIT_PHASE_CHECK for fingerprints). */
enum { PH_FOLD = 0, PH_HALVE = 1, PH_DOUBLE = 32, PH_UNFOLD = 63 };

/* How virtual blocks map to elements. */
typedef struct vsplit {
    int p, rem;
    size_t count; /* by_real: per real rank; else the whole vector split over p */
    int by_real;  /* 1: virtual block v = the blocks of the real ranks it stands for */
} vsplit;

static size_t voff(const vsplit *s, int b) {
    if (s->by_real) return (size_t)first_real(b, s->rem) * s->count;
    return plait_part_offset(s->count, s->p, b);
}

/* Recursive halving over virtual ranks: on return acc[voff(v)..voff(v+1))
 * holds the reduction of every contribution. `src` is the current data
 * (the input at first, acc afterwards); `tmp` holds the largest half. */
static plait_status halve(plait_coll_ctx *c, const vsplit *s, int v, const char *src, char *acc,
                          char *tmp, unsigned base) {
    const plait_coll_args *a = c->a;
    size_t esz = c->esz;
    int lo = 0, hi = s->p;
    unsigned round = 0;
    for (int mask = s->p / 2; mask >= 1; mask /= 2, round++) {
        int partner = real_of(v ^ mask, s->rem);
        int mid = lo + mask, upper = (v & mask) != 0;
        int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
        int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
        size_t k0 = voff(s, keep_lo), k1 = voff(s, keep_hi);
        size_t g0 = voff(s, give_lo), g1 = voff(s, give_hi);
        plait_status st = plait_coll_sendrecv(c, src + g0 * esz, (g1 - g0) * esz, partner, tmp,
                                              (k1 - k0) * esz, partner, base + PH_HALVE + round);
        if (st != PLAIT_OK) return st;
        /* the lower virtual rank's data on the left */
        if (upper)
            plait_reduce(acc + k0 * esz, tmp, src + k0 * esz, k1 - k0, a->dtype, a->op);
        else
            plait_reduce(acc + k0 * esz, src + k0 * esz, tmp, k1 - k0, a->dtype, a->op);
        src = acc;
        lo = keep_lo;
        hi = keep_hi;
    }
    return PLAIT_OK;
}

/* Recursive doubling allgather over virtual ranks, in place in `buf`, where
 * buf[voff(v)..voff(v+1)) is already filled (esz bytes per element). */
static plait_status doubling(plait_coll_ctx *c, const vsplit *s, int v, char *buf, size_t esz,
                             unsigned base) {
    int lo = v, hi = v + 1;
    unsigned round = 0;
    for (int mask = 1; mask < s->p; mask *= 2, round++) {
        int partner = real_of(v ^ mask, s->rem);
        int plo = (v & mask) ? lo - mask : hi, phi = plo + mask;
        size_t m0 = voff(s, lo), m1 = voff(s, hi), p0 = voff(s, plo), p1 = voff(s, phi);
        plait_status st = plait_coll_sendrecv(c, buf + m0 * esz, (m1 - m0) * esz, partner,
                                              buf + p0 * esz, (p1 - p0) * esz, partner,
                                              base + PH_DOUBLE + round);
        if (st != PLAIT_OK) return st;
        if (plo < lo) lo = plo;
        if (phi > hi) hi = phi;
    }
    return PLAIT_OK;
}

/* Send `sbuf` to `peer` and wait (fold/unfold steps). */
static plait_status send_wait(plait_coll_ctx *c, const void *sbuf, size_t bytes, int peer,
                              unsigned phase) {
    int h = -1;
    plait_status st = plait_coll_isend(c, sbuf, bytes, peer, phase, &h);
    return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
}

static plait_status recv_wait(plait_coll_ctx *c, void *rbuf, size_t bytes, int peer, unsigned phase) {
    int h = -1;
    plait_status st = plait_coll_irecv(c, rbuf, bytes, peer, phase, &h);
    return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
}

/* Even folded rank: hand `bytes` of input to r+1, receive `rbytes` of result. */
static plait_status sit_out(plait_coll_ctx *c, const void *in, size_t bytes, void *out,
                            size_t rbytes, unsigned base) {
    int h[2] = {-1, -1};
    plait_status st = plait_coll_irecv(c, out, rbytes, c->rank + 1, base + PH_UNFOLD, &h[0]);
    if (st == PLAIT_OK) st = plait_coll_isend(c, in, bytes, c->rank + 1, base + PH_FOLD, &h[1]);
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, 2);
    return st;
}

plait_status plait_rhd_allreduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank, p = pow2_floor(n), rem = n - p;
    size_t esz = c->esz, count = a->count, bytes = count * esz;
    const char *src = a->send;
    char *recv = a->recv;
    char *tmp = plait_coll_scratch(c, bytes);
    if (!tmp) return PLAIT_ERR_NO_MEMORY;
    plait_status st;
    if (r < 2 * rem && !(r & 1)) return sit_out(c, src, bytes, recv, bytes, 0);
    if (r < 2 * rem) {
        if ((st = recv_wait(c, tmp, bytes, r - 1, PH_FOLD)) != PLAIT_OK) return st;
        plait_reduce(recv, tmp, src, count, a->dtype, a->op);
        src = recv;
    }
    int v = virtual_of(r, rem);
    if (bytes <= RHD_DOUBLING_MAX_BYTES || count < (size_t)p) {
        unsigned round = 0;
        for (int mask = 1; mask < p; mask *= 2, round++) {
            int partner = real_of(v ^ mask, rem);
            st = plait_coll_sendrecv(c, src, bytes, partner, tmp, bytes, partner, PH_HALVE + round);
            if (st != PLAIT_OK) return st;
            if (v & mask)
                plait_reduce(recv, tmp, src, count, a->dtype, a->op);
            else
                plait_reduce(recv, src, tmp, count, a->dtype, a->op);
            src = recv;
        }
        if (a->op == PLAIT_AVG) plait_reduce_finish_avg(recv, count, a->dtype, n);
    } else {
        vsplit s = {p, rem, count, 0};
        if ((st = halve(c, &s, v, src, recv, tmp, 0)) != PLAIT_OK) return st;
        if (a->op == PLAIT_AVG)
            plait_reduce_finish_avg(recv + voff(&s, v) * esz, voff(&s, v + 1) - voff(&s, v), a->dtype, n);
        if ((st = doubling(c, &s, v, recv, esz, 0)) != PLAIT_OK) return st;
    }
    if (r < 2 * rem) return send_wait(c, recv, bytes, r - 1, PH_UNFOLD);
    return PLAIT_OK;
}

plait_status plait_rhd_reduce_scatter(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank, p = pow2_floor(n), rem = n - p;
    size_t esz = c->esz, count = a->count, total = (size_t)n * count, tb = total * esz;
    size_t blk = count * esz;
    if (r < 2 * rem && !(r & 1)) return sit_out(c, a->send, tb, a->recv, blk, 0);
    size_t tb_al = (tb + 63) & ~(size_t)63;
    char *acc = plait_coll_scratch(c, 2 * tb_al);
    if (!acc) return PLAIT_ERR_NO_MEMORY;
    char *tmp = acc + tb_al;
    const char *src = a->send;
    plait_status st;
    if (r < 2 * rem) {
        if ((st = recv_wait(c, tmp, tb, r - 1, PH_FOLD)) != PLAIT_OK) return st;
        plait_reduce(acc, tmp, src, total, a->dtype, a->op);
        src = acc;
    }
    int v = virtual_of(r, rem);
    vsplit s = {p, rem, count, 1};
    if ((st = halve(c, &s, v, src, acc, tmp, 0)) != PLAIT_OK) return st;
    if (r < 2 * rem) {
        char *theirs = acc + (size_t)(r - 1) * blk;
        if (a->op == PLAIT_AVG) plait_reduce_finish_avg(theirs, count, a->dtype, n);
        if ((st = send_wait(c, theirs, blk, r - 1, PH_UNFOLD)) != PLAIT_OK) return st;
    }
    plait_coll_copy(a->recv, acc + (size_t)r * blk, blk);
    if (a->op == PLAIT_AVG) plait_reduce_finish_avg(a->recv, count, a->dtype, n);
    return PLAIT_OK;
}

/* Allgather of `blk` bytes per rank, by recursive doubling (with folding). */
static plait_status allgather_raw(plait_coll_ctx *c, const char *mine, char *all, size_t blk,
                                  unsigned base) {
    int n = c->size, r = c->rank, p = pow2_floor(n), rem = n - p;
    size_t total = (size_t)n * blk;
    plait_status st;
    if (r < 2 * rem && !(r & 1)) {
        /* in place, `mine` lies inside `all`: send it before receiving over it */
        if ((st = send_wait(c, mine, blk, r + 1, base + PH_FOLD)) != PLAIT_OK) return st;
        return recv_wait(c, all, total, r + 1, base + PH_UNFOLD);
    }
    if (r < 2 * rem && (st = recv_wait(c, all + (size_t)(r - 1) * blk, blk, r - 1, base + PH_FOLD)) != PLAIT_OK)
        return st;
    plait_coll_copy(all + (size_t)r * blk, mine, blk);
    vsplit s = {p, rem, blk, 1};
    if ((st = doubling(c, &s, virtual_of(r, rem), all, 1, base)) != PLAIT_OK) return st;
    if (r < 2 * rem) return send_wait(c, all, total, r - 1, base + PH_UNFOLD);
    return PLAIT_OK;
}

plait_status plait_rhd_allgather(plait_coll_ctx *c) {
    return allgather_raw(c, c->a->send, c->a->recv, c->a->count * c->esz, 0);
}

plait_status plait_rhd_allgather_bytes(plait_coll_ctx *c, const void *mine, void *all, size_t bytes,
                                       unsigned phase) {
    return allgather_raw(c, mine, all, bytes, phase);
}
