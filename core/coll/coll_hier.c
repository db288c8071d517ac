/*
 * Hierarchical collectives: within each host, across hosts with one rank per
 * host, within each host again — so the slow link between hosts carries each
 * byte once per host instead of once per rank that the flat algorithms route
 * over it. NCCL's two-level rings/trees and Horovod's hierarchical allreduce
 * are the anchors; the idea is theirs, the code is plait's own.
 *
 * They apply to communicators whose members sit on H > 1 hosts with the same
 * number L > 1 of members on each (comm_topo.h). Member i of host h is the
 * i-th member of that host in rank order ("local index" i); the members with
 * local index i on every host form column i. With S the bytes of the vector:
 *
 *   allreduce       1. reduce-scatter within the host: local index i owns part
 *                      i (S/L bytes) and receives it from each local peer;
 *                   2. allreduce of part i within column i (direct
 *                      reduce-scatter then allgather of its H sub-parts);
 *                   3. allgather within the host: every part to every peer.
 *                   Each host sends 2(H-1)/H·S across hosts (the ring's
 *                   optimum for H ranks); a flat ring over H·L ranks in rank
 *                   order sends 2(HL-1)/(HL)·S per host boundary crossing and
 *                   Rabenseifner sends its largest halves between hosts.
 *   reduce_scatter  1. within the host, local index i collects the host's
 *                      contributions to the blocks of column i;
 *                   2. within column i, each member gets its block's partial
 *                      sums from the other hosts.
 *   allgather       1. within column i, every member gets the column's blocks;
 *                   2. within the host, every member gets the other columns'.
 *
 * Every step is a direct exchange (all receives posted, then all sends), which
 * is right for the small L and H of real jobs (8 GPUs or a few dozen cores
 * per host, tens of hosts). Reductions add contributions in local-index and
 * host order, so results are reproducible for a given placement; they are not
 * the ordered algorithm's canonical tree (deterministic mode keeps using
 * that).
 *
 * AUTO picks these on communicators that span hosts from HIER_AUTO_MIN_BYTES
 * on: below it a flat algorithm's fewer steps win (a handful of messages
 * whatever the link); measured in docs/multi-node.md.
 *
 * Compressed (bf16 and int8, plait_coll_args.compression, coll/compress.h;
 * onebit's error feedback runs the ordered algorithm): every message
 * carries encoded values. A rank encodes what it contributes to each step's
 * sum, and rounds its own share the same way, so a sum does not depend on
 * who holds it; the finished share is encoded once across hosts, and
 * within the host each rank passes on the encodings it holds, so every
 * rank decodes the same bytes and ends with the same values.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "commstate/comm_topo.h"
#include "coll/compress.h"
#include "runtime/error.h"

#define HIER_AUTO_MIN_BYTES (64u << 10)

/* Tag phases of the steps (the allreduce pipeline's phases 0..3 in order). */
enum { PH_INTRA_RS = 0, PH_INTER_RS = 1, PH_INTER_AG = 2, PH_INTRA_AG = 3 };

int plait_hier_shape(const plait_comm *comm, int *hosts, int *per_host) {
    int h = plait_comm_n_hosts(comm);
    if (h < 2 || comm->size % h) return 0;
    int l = comm->size / h;
    if (l < 2) return 0;
    int counts[64] = {0};
    int *cnt = h <= 64 ? counts : calloc((size_t)h, sizeof(int));
    if (!cnt) return 0;
    int regular = 1;
    for (int r = 0; r < comm->size; r++) cnt[plait_comm_host_of(comm, r)]++;
    for (int g = 0; g < h; g++) regular &= cnt[g] == l;
    if (cnt != counts) free(cnt);
    if (!regular) return 0;
    *hosts = h;
    *per_host = l;
    return 1;
}

plait_coll_algo_fn plait_hier_choose(const plait_comm *comm, plait_coll_kind kind, plait_coll_algo requested,
                                     size_t bytes) {
    if (requested != PLAIT_ALGO_HIER && requested != PLAIT_ALGO_AUTO) return NULL;
    int h, l;
    if (!plait_hier_shape(comm, &h, &l)) return NULL;
    if (requested == PLAIT_ALGO_AUTO && bytes < HIER_AUTO_MIN_BYTES) return NULL;
    switch (kind) {
    case PLAIT_COLL_ALLREDUCE: return plait_hier_allreduce;
    case PLAIT_COLL_REDUCE_SCATTER: return plait_hier_reduce_scatter;
    case PLAIT_COLL_ALLGATHER: return plait_hier_allgather;
    default: return NULL;
    }
}

/* The placement: m[g*l + i] = comm rank of local index i on host g. */
typedef struct hier {
    int h, l;     /* hosts, members per host */
    int host, li; /* mine */
    int *m;
} hier;

static plait_status hier_setup(plait_coll_ctx *c, hier *p) {
    memset(p, 0, sizeof *p);
    if (!plait_hier_shape(c->comm, &p->h, &p->l))
        return plait_set_error(PLAIT_ERR_INTERNAL, "hierarchical collective on a communicator without a "
                                                   "regular placement of ranks on hosts");
    p->m = malloc(sizeof(int) * (size_t)c->size);
    int *fill = calloc((size_t)p->h, sizeof(int));
    if (!p->m || !fill) {
        free(p->m);
        free(fill);
        p->m = NULL;
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int r = 0; r < c->size; r++) {
        int g = plait_comm_host_of(c->comm, r);
        if (r == c->rank) p->host = g, p->li = fill[g];
        p->m[g * p->l + fill[g]++] = r;
    }
    free(fill);
    return PLAIT_OK;
}

/* One transfer of a direct exchange: to `peer` goes sbuf (sbytes), from it
 * comes rbuf (rbytes), on tag phase `phase`; a negative peer is skipped. */
typedef struct xfer {
    int peer;
    const void *sbuf;
    size_t sbytes;
    void *rbuf;
    size_t rbytes;
    unsigned phase;
} xfer;

/* Post every receive, then every send, then wait for all. */
static plait_status exchange(plait_coll_ctx *c, const xfer *x, int k) {
    int *h = malloc(sizeof(int) * 2 * (size_t)(k > 0 ? k : 1));
    if (!h) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int j = 0; j < 2 * k; j++) h[j] = -1;
    plait_status st = PLAIT_OK;
    for (int j = 0; st == PLAIT_OK && j < k; j++)
        if (x[j].peer >= 0 && x[j].rbytes)
            st = plait_coll_irecv(c, x[j].rbuf, x[j].rbytes, x[j].peer, x[j].phase, &h[j]);
    for (int j = 0; st == PLAIT_OK && j < k; j++)
        if (x[j].peer >= 0 && x[j].sbytes)
            st = plait_coll_isend(c, x[j].sbuf, x[j].sbytes, x[j].peer, x[j].phase, &h[k + j]);
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, 2 * k);
    free(h);
    return st;
}

static xfer *xfers(int k) {
    xfer *x = calloc((size_t)k, sizeof *x);
    if (!x) plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int j = 0; x && j < k; j++) x[j].peer = -1;
    return x;
}

/* ---- allreduce ----------------------------------------------------------- */

/* The vector is cut into pieces that flow through the four steps as a
 * pipeline (a wavefront): in tick t piece t is reduce-scattered within the
 * host, piece t-1 reduce-scattered across hosts, piece t-2 allgathered
 * across hosts and piece t-3 allgathered within the host, all posted at once.
 * So the link between hosts is busy while the host's own copies and
 * reductions run, instead of idle during the first and last steps. Pieces
 * of at least HIER_PIECE_BYTES, at most HIER_MAX_PIECES. */
#define HIER_PIECE_BYTES (1u << 20)
#define HIER_MAX_PIECES 8

/* Piece k: elements [q0, q0+m); my part of it [po, po+plen); my column's
 * share of that part [so, so+slen). */
typedef struct piece {
    size_t q0, m, po, plen, so, slen;
} piece;

static piece piece_of(const hier *p, size_t count, int pieces, int k) {
    piece x;
    x.q0 = plait_part_offset(count, pieces, k);
    x.m = plait_part_offset(count, pieces, k + 1) - x.q0;
    x.po = x.q0 + plait_part_offset(x.m, p->l, p->li);
    x.plen = x.q0 + plait_part_offset(x.m, p->l, p->li + 1) - x.po;
    x.so = x.po + plait_part_offset(x.plen, p->h, p->host);
    x.slen = x.po + plait_part_offset(x.plen, p->h, p->host + 1) - x.so;
    return x;
}

/* Part j of piece q (within the host): [*o, *o + *len). */
static void part_of(const hier *p, const piece *q, int j, size_t *o, size_t *len) {
    *o = q->q0 + plait_part_offset(q->m, p->l, j);
    *len = q->q0 + plait_part_offset(q->m, p->l, j + 1) - *o;
}

/* Share g of the part [po, po + plen) (across hosts). */
static void share_of(const hier *p, size_t po, size_t plen, int g, size_t *o, size_t *len) {
    *o = po + plait_part_offset(plen, p->h, g);
    *len = po + plait_part_offset(plen, p->h, g + 1) - *o;
}

/* What one allreduce pipeline works with. */
typedef struct ar {
    plait_coll_ctx *c;
    const hier *p;
    const char *send;
    char *recv;
    size_t count, esz;
    int pieces;
    char *abuf, *bbuf; /* landing areas: (l-1) parts, (h-1) column shares */
    /* compressed: the scheme; encoded parts out and in (l-1 slots of e0
     * bytes each), shares out and in (h-1 slots of e1), the encodings of
     * my finished part by piece parity (its h shares packed in host order,
     * each from a 4-byte boundary: pk bytes at most), and the local peers'
     * (l-1 slots of pk) */
    plait_compression z;
    size_t e0, e1, pk;
    char *e0s, *e0r, *e1s, *e1r, *pe[2], *e3r;
} ar;

static size_t al4(size_t n) { return (n + 3) & ~(size_t)3; }
static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Offset of share g in the packed encoding of the part [po, po + plen). */
static size_t packed_at(const ar *w, size_t po, size_t plen, int g) {
    size_t at = 0;
    for (int j = 0; j < g; j++) {
        size_t o, len;
        share_of(w->p, po, plen, j, &o, &len);
        at += al4(plait_compress_bytes(w->z, len));
    }
    return at;
}

/* The compressed transfers of `phase` of piece k (as phase_xfers). */
static void zphase_xfers(const ar *w, int phase, int k, xfer *x, int *n) {
    const hier *p = w->p;
    piece q = piece_of(p, w->count, w->pieces, k);
    int intra = phase == 0 || phase == 3, groups = intra ? p->l : p->h, mine = intra ? p->li : p->host;
    char *pk = w->pe[k & 1];
    for (int j = 0, t = 0; j < groups; j++) {
        if (j == mine) continue;
        int peer = intra ? p->m[p->host * p->l + j] : p->m[j * p->l + p->li];
        size_t o, len;
        if (intra) part_of(p, &q, j, &o, &len);
        else share_of(p, q.po, q.plen, j, &o, &len);
        xfer *e = &x[(*n)++];
        switch (phase) {
        case 0: /* part j of my contribution, encoded; theirs of my part */
            *e = (xfer){peer, w->e0s + (size_t)t * w->e0, plait_compress_bytes(w->z, len), w->e0r + (size_t)t * w->e0,
                        plait_compress_bytes(w->z, q.plen), PH_INTRA_RS};
            break;
        case 1: /* share j of my reduced part, encoded; theirs of my share */
            *e = (xfer){peer, w->e1s + (size_t)t * w->e1, plait_compress_bytes(w->z, len), w->e1r + (size_t)t * w->e1,
                        plait_compress_bytes(w->z, q.slen), PH_INTER_RS};
            break;
        case 2: /* my finished share's encoding; theirs into their place in the packed part */
            *e = (xfer){peer, pk + packed_at(w, q.po, q.plen, p->host), plait_compress_bytes(w->z, q.slen),
                        pk + packed_at(w, q.po, q.plen, j), plait_compress_bytes(w->z, len), PH_INTER_AG};
            break;
        default: /* my packed part; theirs */
            *e = (xfer){peer, pk, packed_at(w, q.po, q.plen, p->h), w->e3r + (size_t)t * w->pk,
                        packed_at(w, o, len, p->h), PH_INTRA_AG};
            break;
        }
        t++;
    }
}

/* Before the exchange of `phase` of piece k (decode = 0): encode what it
 * sends, rounding what this rank keeps of it the same way; after it
 * (decode = 1): decode what came into place. */
static void zphase_codec(const ar *w, int phase, int k, int decode) {
    const hier *p = w->p;
    const float *send = (const float *)(const void *)w->send;
    float *recv = (float *)(void *)w->recv;
    piece q = piece_of(p, w->count, w->pieces, k);
    char *pk = w->pe[k & 1];
    if (phase == 0 && !decode) plait_compress_round_trip(w->z, recv + q.po, send + q.po, q.plen, NULL);
    if (phase == 1 && !decode) plait_compress_round_trip(w->z, recv + q.so, recv + q.so, q.slen, NULL);
    if (phase == 2 && !decode) {
        char *e = pk + packed_at(w, q.po, q.plen, p->host);
        plait_compress_encode(w->z, e, recv + q.so, q.slen, NULL);
        plait_compress_decode(w->z, recv + q.so, e, q.slen);
        return;
    }
    int intra = phase == 0 || phase == 3, groups = intra ? p->l : p->h, mine = intra ? p->li : p->host;
    for (int j = 0, t = 0; j < groups; j++) {
        if (j == mine) continue;
        size_t o, len;
        if (intra) part_of(p, &q, j, &o, &len);
        else share_of(p, q.po, q.plen, j, &o, &len);
        if (phase == 0 && !decode)
            plait_compress_encode(w->z, w->e0s + (size_t)t * w->e0, send + o, len, NULL);
        else if (phase == 0)
            plait_compress_decode(w->z, (float *)(void *)(w->abuf + (size_t)t * q.plen * w->esz),
                                  w->e0r + (size_t)t * w->e0, q.plen);
        else if (phase == 1 && !decode)
            plait_compress_encode(w->z, w->e1s + (size_t)t * w->e1, recv + o, len, NULL);
        else if (phase == 1)
            plait_compress_decode(w->z, (float *)(void *)(w->bbuf + (size_t)t * q.slen * w->esz),
                                  w->e1r + (size_t)t * w->e1, q.slen);
        else if (phase == 2)
            plait_compress_decode(w->z, recv + o, pk + packed_at(w, q.po, q.plen, j), len);
        else if (phase == 3 && decode)
            for (int g = 0; g < p->h; g++) { /* local peer j's part: its h shares */
                size_t so, sl;
                share_of(p, o, len, g, &so, &sl);
                plait_compress_decode(w->z, recv + so, w->e3r + (size_t)t * w->pk + packed_at(w, o, len, g), sl);
            }
        t++;
    }
}

/* Append the transfers of `phase` (0..3) of piece k to x[*n]. */
static void phase_xfers(const ar *w, int phase, int k, xfer *x, int *n) {
    const hier *p = w->p;
    size_t esz = w->esz;
    piece q = piece_of(p, w->count, w->pieces, k);
    int intra = phase == 0 || phase == 3, groups = intra ? p->l : p->h, mine = intra ? p->li : p->host;
    for (int j = 0, t = 0; j < groups; j++) {
        if (j == mine) continue;
        int peer = intra ? p->m[p->host * p->l + j] : p->m[j * p->l + p->li];
        size_t o, len;
        if (intra) {
            o = q.q0 + plait_part_offset(q.m, p->l, j);
            len = q.q0 + plait_part_offset(q.m, p->l, j + 1) - o;
        } else {
            o = q.po + plait_part_offset(q.plen, p->h, j);
            len = q.po + plait_part_offset(q.plen, p->h, j + 1) - o;
        }
        xfer *e = &x[(*n)++];
        switch (phase) { /* the phase is also the tag phase (PH_*) */
        case 0: /* part j of my piece to local index j; theirs of my part lands in abuf */
            *e = (xfer){peer, w->send + o * esz, len * esz, w->abuf + (size_t)t * q.plen * esz, q.plen * esz, PH_INTRA_RS};
            break;
        case 1: /* share j of my reduced part to host j's column member; theirs of my share to bbuf */
            *e = (xfer){peer, w->recv + o * esz, len * esz, w->bbuf + (size_t)t * q.slen * esz, q.slen * esz, PH_INTER_RS};
            break;
        case 2: /* my finished share to every column member; theirs into place */
            *e = (xfer){peer, w->recv + q.so * esz, q.slen * esz, w->recv + o * esz, len * esz, PH_INTER_AG};
            break;
        default: /* my finished part to every local peer; theirs into place */
            *e = (xfer){peer, w->recv + q.po * esz, q.plen * esz, w->recv + o * esz, len * esz, PH_INTRA_AG};
            break;
        }
        t++;
    }
}

/* The reduction after phase 0 or 1 of piece k has landed. */
static void phase_reduce(const ar *w, int phase, int k) {
    const plait_coll_args *a = w->c->a;
    const hier *p = w->p;
    size_t esz = w->esz;
    piece q = piece_of(p, w->count, w->pieces, k);
    if (phase == 0) {
        /* mine + local index order's contributions; the first addition
         * reads my input directly (no copy of it into place first; when
         * compressed, my rounded input is in place already) */
        char *part = w->recv + q.po * esz;
        for (int t = 0; t < p->l - 1; t++)
            plait_reduce(part, t || w->z ? part : w->send + q.po * esz, w->abuf + (size_t)t * q.plen * esz, q.plen,
                         a->dtype, a->op);
    } else if (phase == 1) {
        char *share = w->recv + q.so * esz;
        for (int t = 0; t < p->h - 1; t++)
            plait_reduce(share, share, w->bbuf + (size_t)t * q.slen * esz, q.slen, a->dtype, a->op);
        if (a->op == PLAIT_AVG) plait_reduce_finish_avg(share, q.slen, a->dtype, w->c->size);
    }
}

plait_status plait_hier_allreduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    hier p;
    plait_status st = hier_setup(c, &p);
    if (st != PLAIT_OK) return st;
    ar w = {.c = c, .p = &p, .send = a->send, .recv = a->recv, .count = a->count, .esz = c->esz};
    size_t bytes = a->count * c->esz;
    w.pieces = bytes / HIER_PIECE_BYTES > HIER_MAX_PIECES ? HIER_MAX_PIECES : (int)(bytes / HIER_PIECE_BYTES);
    if (w.pieces < 1) w.pieces = 1;
    size_t max_plen = 0, max_slen = 0;
    for (int k = 0; k < w.pieces; k++) {
        piece q = piece_of(&p, w.count, w.pieces, k);
        if (q.plen > max_plen) max_plen = q.plen;
        if (q.slen > max_slen) max_slen = q.slen;
    }
    size_t abytes = al64((size_t)(p.l - 1) * max_plen * w.esz), bbytes = al64((size_t)(p.h - 1) * max_slen * w.esz);
    size_t ebytes = 0;
    if ((w.z = a->compression) != PLAIT_COMPRESS_NONE) {
        /* bounds: a piece's part (any local index) and a part's share */
        size_t maxm = (w.count + (size_t)w.pieces - 1) / (size_t)w.pieces;
        size_t maxpart = (maxm + (size_t)p.l - 1) / (size_t)p.l, maxshare = (maxpart + (size_t)p.h - 1) / (size_t)p.h;
        w.e0 = al64(plait_compress_bytes(w.z, maxpart));
        w.e1 = al64(plait_compress_bytes(w.z, maxshare));
        w.pk = al64((size_t)p.h * al4(plait_compress_bytes(w.z, maxshare)));
        ebytes = 2 * (size_t)(p.l - 1) * w.e0 + 2 * (size_t)(p.h - 1) * w.e1 + (size_t)(p.l + 1) * w.pk;
    }
    char *tmp = plait_coll_scratch(c, abytes + bbytes + ebytes ? abytes + bbytes + ebytes : 1);
    xfer *x = tmp ? xfers(2 * (p.l - 1) + 2 * (p.h - 1)) : NULL;
    if (!x) {
        free(p.m);
        return PLAIT_ERR_NO_MEMORY;
    }
    w.abuf = tmp;
    w.bbuf = tmp + abytes;
    if (w.z) {
        w.e0s = w.bbuf + bbytes;
        w.e0r = w.e0s + (size_t)(p.l - 1) * w.e0;
        w.e1s = w.e0r + (size_t)(p.l - 1) * w.e0;
        w.e1r = w.e1s + (size_t)(p.h - 1) * w.e1;
        w.pe[0] = w.e1r + (size_t)(p.h - 1) * w.e1;
        w.pe[1] = w.pe[0] + w.pk;
        w.e3r = w.pe[1] + w.pk;
    }
    /* tick t: phase s of piece t - s, for every phase whose piece exists */
#define LIVE(s) (t - (s) >= 0 && t - (s) < w.pieces)
    for (int t = 0; st == PLAIT_OK && t < w.pieces + 3; t++) {
        int n = 0;
        for (int s = 0; w.z && s < 3; s++)
            if (LIVE(s)) zphase_codec(&w, s, t - s, 0);
        for (int s = 0; s < 4; s++)
            if (LIVE(s)) (w.z ? zphase_xfers : phase_xfers)(&w, s, t - s, x, &n);
        if ((st = exchange(c, x, n)) != PLAIT_OK) break;
        for (int s = 0; w.z && s < 4; s++)
            if (LIVE(s) && s != 0 && s != 1) zphase_codec(&w, s, t - s, 1);
        for (int s = 0; s < 2; s++) {
            if (LIVE(s) && w.z) zphase_codec(&w, s, t - s, 1);
            if (LIVE(s)) phase_reduce(&w, s, t - s);
        }
    }
#undef LIVE
    free(x);
    free(p.m);
    return st;
}

/* ---- reduce_scatter ------------------------------------------------------ */

plait_status plait_hier_reduce_scatter(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    hier p;
    plait_status st = hier_setup(c, &p);
    if (st != PLAIT_OK) return st;
    size_t esz = c->esz, blk = a->count * esz;
    const char *send = a->send;
    int l = p.l, h = p.h;
    /* tmp: [l-1][h] blocks from local peers, then [h] partial sums, then [h-1] from other hosts */
    /* compressed: every block sent goes encoded (eb bytes each), and my own
     * contributions and partial sums are rounded the same way */
    plait_compression z = a->compression;
    size_t eb = z ? al64(plait_compress_bytes(z, a->count)) : 0, zb = plait_compress_bytes(z, a->count);
    size_t nx = (size_t)(l - 1) * (size_t)h + (size_t)(h - 1); /* blocks in each direction, both steps */
    char *tmp = plait_coll_scratch(c, ((size_t)(l - 1) * (size_t)h + (size_t)h + (size_t)(h - 1)) * blk + 2 * nx * eb);
    char *partial = tmp ? tmp + (size_t)(l - 1) * (size_t)h * blk : NULL, *theirs = partial ? partial + (size_t)h * blk : NULL;
    char *es = theirs ? theirs + (size_t)(h - 1) * blk : NULL, *er = es ? es + nx * eb : NULL;
    int k = (l > h ? l : h) * h;
    xfer *x = tmp ? xfers(k) : NULL;
    if (!tmp || !x) {
        st = PLAIT_ERR_NO_MEMORY;
        goto out;
    }
    /* 1. within the host: the blocks of column j go to local index j */
    int n = 0;
    for (int j = 0, t = 0; j < l; j++) {
        if (j == p.li) continue;
        for (int g = 0; g < h; g++, n++) {
            const char *b = send + (size_t)p.m[g * l + j] * blk;
            char *land = tmp + ((size_t)t * (size_t)h + (size_t)g) * blk;
            if (z) plait_compress_encode(z, es + (size_t)n * eb, (const float *)(const void *)b, a->count, NULL);
            x[n] = z ? (xfer){p.m[p.host * l + j], es + (size_t)n * eb, zb, er + (size_t)n * eb, zb, PH_INTRA_RS}
                     : (xfer){p.m[p.host * l + j], b, blk, land, blk, PH_INTRA_RS};
        }
        t++;
    }
    if ((st = exchange(c, x, n)) != PLAIT_OK) goto out;
    for (int i = 0; z && i < n; i++) /* slot i is (t, g) in order: its landing place */
        plait_compress_decode(z, (float *)(void *)(tmp + (size_t)i * blk), er + (size_t)i * eb, a->count);
    for (int g = 0; g < h; g++) {
        char *d = partial + (size_t)g * blk;
        const float *mine_g = (const float *)(const void *)(send + (size_t)p.m[g * l + p.li] * blk);
        if (z) plait_compress_round_trip(z, (float *)(void *)d, mine_g, a->count, NULL);
        else memcpy(d, mine_g, blk);
        for (int t = 0; t < l - 1; t++)
            plait_reduce(d, d, tmp + ((size_t)t * (size_t)h + (size_t)g) * blk, a->count, a->dtype, a->op);
    }
    /* 2. across hosts: each column member gets its block's partial sums */
    n = 0;
    for (int g = 0, t = 0; g < h; g++) {
        char *pg = partial + (size_t)g * blk;
        if (g == p.host) {
            if (z) plait_compress_round_trip(z, (float *)(void *)pg, (const float *)(const void *)pg, a->count, NULL);
            continue;
        }
        if (z) plait_compress_encode(z, es + (size_t)n * eb, (const float *)(const void *)pg, a->count, NULL);
        x[n] = z ? (xfer){p.m[g * l + p.li], es + (size_t)n * eb, zb, er + (size_t)n * eb, zb, PH_INTER_RS}
                 : (xfer){p.m[g * l + p.li], pg, blk, theirs + (size_t)t * blk, blk, PH_INTER_RS};
        n++;
        t++;
    }
    if ((st = exchange(c, x, n)) != PLAIT_OK) goto out;
    for (int t = 0; z && t < n; t++)
        plait_compress_decode(z, (float *)(void *)(theirs + (size_t)t * blk), er + (size_t)t * eb, a->count);
    char *mine = partial + (size_t)p.host * blk;
    for (int t = 0; t < h - 1; t++) plait_reduce(mine, mine, theirs + (size_t)t * blk, a->count, a->dtype, a->op);
    if (a->op == PLAIT_AVG) plait_reduce_finish_avg(mine, a->count, a->dtype, c->size);
    memcpy(a->recv, mine, blk);
out:
    free(x);
    free(p.m);
    return st;
}

/* ---- allgather ----------------------------------------------------------- */

plait_status plait_hier_allgather(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    hier p;
    plait_status st = hier_setup(c, &p);
    if (st != PLAIT_OK) return st;
    size_t blk = a->count * c->esz;
    char *recv = a->recv;
    int l = p.l, h = p.h;
    xfer *x = xfers((l > h ? l : h) * h);
    if (!x) {
        free(p.m);
        return PLAIT_ERR_NO_MEMORY;
    }
    plait_coll_copy(recv + (size_t)c->rank * blk, a->send, blk);
    /* 1. across hosts, within my column */
    int n = 0;
    for (int g = 0; g < h; g++) {
        if (g == p.host) continue;
        int peer = p.m[g * l + p.li];
        x[n++] = (xfer){peer, recv + (size_t)c->rank * blk, blk, recv + (size_t)peer * blk, blk, PH_INTER_AG};
    }
    if ((st = exchange(c, x, n)) != PLAIT_OK) goto out;
    /* 2. within the host: my column's blocks to each local peer, theirs to me */
    n = 0;
    for (int j = 0; j < l; j++) {
        if (j == p.li) continue;
        int peer = p.m[p.host * l + j];
        for (int g = 0; g < h; g++, n++)
            x[n] = (xfer){peer, recv + (size_t)p.m[g * l + p.li] * blk, blk, recv + (size_t)p.m[g * l + j] * blk, blk,
                          PH_INTRA_AG};
    }
    st = exchange(c, x, n);
out:
    free(x);
    free(p.m);
    return st;
}
