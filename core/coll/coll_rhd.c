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

#include "coll/coll.h"
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

/* Each halving exchange is cut into pieces of this size: all are posted at
 * once (the transport still sees large transfers) and each piece is reduced
 * as soon as it lands, while it is in cache and the next ones travel. */
#define RHD_PIECE_BYTES (1u << 20)

/* One round of recursive halving, as seen by virtual rank v. */
typedef struct hstep {
    int partner, upper;
    size_t k0, k1, g0, g1; /* kept and given element ranges */
    size_t toff;           /* where its incoming pieces land in tmp */
    int kp, gp;            /* pieces in and out */
} hstep;

static int pieces(size_t elems, size_t pe) { return elems ? (int)((elems + pe - 1) / pe) : 1; }

/* The rounds of halving (mask p/2 down to 1); returns their count. Also
 * the bytes of tmp they need in total (every round has its own region, so
 * all receives can be posted before the first one is waited for). */
static int halving_steps(const vsplit *s, int v, size_t pe, hstep *out, size_t *tmp_elems) {
    int lo = 0, hi = s->p, n = 0;
    size_t toff = 0;
    for (int mask = s->p / 2; mask >= 1; mask /= 2, n++) {
        hstep *h = &out[n];
        int mid = lo + mask;
        h->upper = (v & mask) != 0;
        h->partner = real_of(v ^ mask, s->rem);
        int keep_lo = h->upper ? mid : lo, keep_hi = h->upper ? hi : mid;
        int give_lo = h->upper ? lo : mid, give_hi = h->upper ? mid : hi;
        h->k0 = voff(s, keep_lo), h->k1 = voff(s, keep_hi);
        h->g0 = voff(s, give_lo), h->g1 = voff(s, give_hi);
        h->toff = toff;
        toff += h->k1 - h->k0;
        h->kp = pieces(h->k1 - h->k0, pe);
        h->gp = pieces(h->g1 - h->g0, pe);
        lo = keep_lo;
        hi = keep_hi;
    }
    *tmp_elems = toff;
    return n;
}

/* Piece i of `len` elements cut by `pe`: [*e0, return). */
static size_t piece(size_t len, size_t pe, int i, size_t *e0) {
    *e0 = (size_t)i * pe;
    if (*e0 >= len) {
        *e0 = len;
        return len;
    }
    return *e0 + pe < len ? *e0 + pe : len;
}

/* Recursive halving over virtual ranks: on return acc[voff(v)..voff(v+1))
 * holds the reduction of every contribution. `src` is the input (acc is
 * used from the second round on); tmp holds the incoming pieces of every
 * round (halving_steps's tmp_elems). */
static plait_status halve(plait_coll_ctx *c, const vsplit *s, int v, const char *src, char *acc,
                          char *tmp, unsigned base) {
    const plait_coll_args *a = c->a;
    size_t esz = c->esz, pe = RHD_PIECE_BYTES / esz ? RHD_PIECE_BYTES / esz : 1, tmp_elems;
    hstep steps[32];
    int L = halving_steps(s, v, pe, steps, &tmp_elems), total = 0;
    for (int i = 0; i < L; i++) total += steps[i].kp + steps[i].gp;
    int *hs = malloc((size_t)total * sizeof *hs);
    if (!hs) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < total; i++) hs[i] = -1;
    plait_status st = PLAIT_OK;
    /* every receive first: a partner that is ahead never finds none posted */
    int at = 0;
    for (int i = 0; i < L && st == PLAIT_OK; i++) {
        hstep *h = &steps[i];
        for (int j = 0; j < h->kp && st == PLAIT_OK; j++) {
            size_t e0, e1 = piece(h->k1 - h->k0, pe, j, &e0);
            st = plait_coll_irecv(c, tmp + (h->toff + e0) * esz, (e1 - e0) * esz, h->partner,
                                  base + PH_HALVE + (unsigned)i, &hs[at + j]);
        }
        at += h->kp + h->gp;
    }
    at = 0;
    for (int i = 0; i < L && st == PLAIT_OK; i++) {
        hstep *h = &steps[i];
        int *rh = hs + at, *sh = rh + h->kp;
        for (int j = 0; j < h->gp && st == PLAIT_OK; j++) {
            size_t e0, e1 = piece(h->g1 - h->g0, pe, j, &e0);
            st = plait_coll_isend(c, src + (h->g0 + e0) * esz, (e1 - e0) * esz, h->partner,
                                  base + PH_HALVE + (unsigned)i, &sh[j]);
        }
        for (int j = 0; j < h->kp && st == PLAIT_OK; j++) {
            if ((st = plait_coll_wait(c, &rh[j])) != PLAIT_OK) break;
            size_t e0, e1 = piece(h->k1 - h->k0, pe, j, &e0);
            char *d = acc + (h->k0 + e0) * esz;
            const char *mine = src + (h->k0 + e0) * esz, *theirs = tmp + (h->toff + e0) * esz;
            /* the lower virtual rank's data on the left */
            if (h->upper)
                plait_reduce(d, theirs, mine, e1 - e0, a->dtype, a->op);
            else
                plait_reduce(d, mine, theirs, e1 - e0, a->dtype, a->op);
        }
        src = acc;
        at += h->kp + h->gp;
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, hs, total);
    free(hs);
    return st;
}

/* tmp elements halve() needs. */
static size_t halving_tmp(const vsplit *s, int v, size_t esz) {
    hstep steps[32];
    size_t t;
    halving_steps(s, v, RHD_PIECE_BYTES / esz ? RHD_PIECE_BYTES / esz : 1, steps, &t);
    return t;
}

/* Recursive doubling allgather over virtual ranks, in place in `buf`, where
 * buf[voff(v)..voff(v+1)) is (or will be, see below) filled. Receives are
 * posted by doubling_post() — possibly long before, since the regions they
 * fill are only written by this exchange — and the sends by doubling_run(). */
static plait_status doubling_post(plait_coll_ctx *c, const vsplit *s, int v, char *buf, size_t esz,
                                  unsigned base, int *rh) {
    int lo = v, hi = v + 1;
    unsigned round = 0;
    for (int mask = 1; mask < s->p; mask *= 2, round++) {
        int partner = real_of(v ^ mask, s->rem);
        int plo = (v & mask) ? lo - mask : hi, phi = plo + mask;
        size_t p0 = voff(s, plo), p1 = voff(s, phi);
        plait_status st = plait_coll_irecv(c, buf + p0 * esz, (p1 - p0) * esz, partner,
                                           base + PH_DOUBLE + round, &rh[round]);
        if (st != PLAIT_OK) return st;
        if (plo < lo) lo = plo;
        if (phi > hi) hi = phi;
    }
    return PLAIT_OK;
}

static plait_status doubling_run(plait_coll_ctx *c, const vsplit *s, int v, char *buf, size_t esz,
                                 unsigned base, int *rh) {
    int lo = v, hi = v + 1;
    unsigned round = 0;
    int sh[32];
    plait_status st = PLAIT_OK;
    for (int mask = 1; mask < s->p && st == PLAIT_OK; mask *= 2, round++) {
        int partner = real_of(v ^ mask, s->rem);
        int plo = (v & mask) ? lo - mask : hi, phi = plo + mask;
        size_t m0 = voff(s, lo), m1 = voff(s, hi);
        sh[round] = -1;
        st = plait_coll_isend(c, buf + m0 * esz, (m1 - m0) * esz, partner, base + PH_DOUBLE + round,
                              &sh[round]);
        /* the next round sends what this one receives */
        if (st == PLAIT_OK) st = plait_coll_wait(c, &rh[round]);
        if (plo < lo) lo = plo;
        if (phi > hi) hi = phi;
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, sh, (int)round);
    return st;
}

static plait_status doubling(plait_coll_ctx *c, const vsplit *s, int v, char *buf, size_t esz,
                             unsigned base) {
    int rh[32];
    for (int i = 0; i < 32; i++) rh[i] = -1;
    plait_status st = doubling_post(c, s, v, buf, esz, base, rh);
    return st == PLAIT_OK ? doubling_run(c, s, v, buf, esz, base, rh) : st;
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
    int v = r < 2 * rem && !(r & 1) ? -1 : virtual_of(r, rem);
    int doubling_path = bytes <= RHD_DOUBLING_MAX_BYTES || count < (size_t)p;
    vsplit s = {p, rem, count, 0};
    size_t tmp_bytes = bytes;
    if (v >= 0 && !doubling_path) {
        size_t t = halving_tmp(&s, v, esz) * esz;
        if (t > tmp_bytes) tmp_bytes = t;
    }
    char *tmp = plait_coll_scratch(c, tmp_bytes);
    if (!tmp) return PLAIT_ERR_NO_MEMORY;
    plait_status st;
    if (v < 0) return sit_out(c, src, bytes, recv, bytes, 0);
    if (r < 2 * rem) {
        if ((st = recv_wait(c, tmp, bytes, r - 1, PH_FOLD)) != PLAIT_OK) return st;
        plait_reduce(recv, tmp, src, count, a->dtype, a->op);
        src = recv;
    }
    if (doubling_path) {
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
        /* the allgather's receives go up first: they fill regions the
         * halving no longer needs by the time their data can exist */
        int rh[32];
        for (int i = 0; i < 32; i++) rh[i] = -1;
        if ((st = doubling_post(c, &s, v, recv, esz, 0, rh)) != PLAIT_OK) return st;
        if ((st = halve(c, &s, v, src, recv, tmp, 0)) != PLAIT_OK) return st;
        if (a->op == PLAIT_AVG)
            plait_reduce_finish_avg(recv + voff(&s, v) * esz, voff(&s, v + 1) - voff(&s, v), a->dtype, n);
        if ((st = doubling_run(c, &s, v, recv, esz, 0, rh)) != PLAIT_OK) return st;
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
    int v = virtual_of(r, rem);
    vsplit s = {p, rem, count, 1};
    size_t tb_al = (tb + 63) & ~(size_t)63, hb = halving_tmp(&s, v, esz) * esz;
    char *acc = plait_coll_scratch(c, tb_al + (hb > tb ? hb : tb));
    if (!acc) return PLAIT_ERR_NO_MEMORY;
    char *tmp = acc + tb_al;
    const char *src = a->send;
    plait_status st;
    if (r < 2 * rem) {
        if ((st = recv_wait(c, tmp, tb, r - 1, PH_FOLD)) != PLAIT_OK) return st;
        plait_reduce(acc, tmp, src, total, a->dtype, a->op);
        src = acc;
    }
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
