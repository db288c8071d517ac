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
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/comm_topo.h"
#include "runtime/error.h"

#define HIER_AUTO_MIN_BYTES (64u << 10)

/* Tag phases of the steps. */
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

static plait_status hier_plan(plait_coll_ctx *c, hier *p) {
    memset(p, 0, sizeof *p);
    if (!plait_hier_shape(c->comm, &p->h, &p->l))
        return plait_set_error(PLAIT_ERR_INTERNAL, "hierarchical collective on a communicator without a "
                                                   "regular host layout");
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

/* One direct exchange with k peers: to peer j goes sbuf[j] (sbytes[j]),
 * from peer j comes rbuf[j] (rbytes[j]); entries with a negative peer are
 * skipped. Receives first, then sends, then wait for all. */
typedef struct xfer {
    int peer;
    const void *sbuf;
    size_t sbytes;
    void *rbuf;
    size_t rbytes;
} xfer;

static plait_status exchange(plait_coll_ctx *c, const xfer *x, int k, unsigned phase) {
    int *h = malloc(sizeof(int) * 2 * (size_t)(k > 0 ? k : 1));
    if (!h) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int j = 0; j < 2 * k; j++) h[j] = -1;
    plait_status st = PLAIT_OK;
    for (int j = 0; st == PLAIT_OK && j < k; j++)
        if (x[j].peer >= 0 && x[j].rbytes) st = plait_coll_irecv(c, x[j].rbuf, x[j].rbytes, x[j].peer, phase, &h[j]);
    for (int j = 0; st == PLAIT_OK && j < k; j++)
        if (x[j].peer >= 0 && x[j].sbytes)
            st = plait_coll_isend(c, x[j].sbuf, x[j].sbytes, x[j].peer, phase, &h[k + j]);
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

/* Reduce-scatter of `len` elements at `buf` (in place) among `k` peers
 * (peer[j], me = j == mine) then allgather: the allreduce of one part within
 * a column. `tmp` holds k-1 sub-parts. */
static plait_status column_allreduce(plait_coll_ctx *c, char *buf, size_t len, const int *peer, int k, int mine,
                                     char *tmp, xfer *x) {
    const plait_coll_args *a = c->a;
    size_t esz = c->esz, o0 = plait_part_offset(len, k, mine), mlen = plait_part_offset(len, k, mine + 1) - o0;
    for (int j = 0, t = 0; j < k; j++) {
        size_t o = plait_part_offset(len, k, j), n = plait_part_offset(len, k, j + 1) - o;
        x[j] = (xfer){j == mine ? -1 : peer[j], buf + o * esz, n * esz, j == mine ? NULL : tmp + (size_t)t * mlen * esz,
                      j == mine ? 0 : mlen * esz};
        if (j != mine) t++;
    }
    plait_status st = exchange(c, x, k, PH_INTER_RS);
    if (st != PLAIT_OK) return st;
    for (int t = 0; t < k - 1; t++)
        plait_reduce(buf + o0 * esz, buf + o0 * esz, tmp + (size_t)t * mlen * esz, mlen, a->dtype, a->op);
    if (a->op == PLAIT_AVG) plait_reduce_finish_avg(buf + o0 * esz, mlen, a->dtype, c->size);
    for (int j = 0; j < k; j++) {
        size_t o = plait_part_offset(len, k, j), n = plait_part_offset(len, k, j + 1) - o;
        x[j] = (xfer){j == mine ? -1 : peer[j], buf + o0 * esz, mlen * esz, buf + o * esz, j == mine ? 0 : n * esz};
    }
    return exchange(c, x, k, PH_INTER_AG);
}

plait_status plait_hier_allreduce(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    hier p;
    plait_status st = hier_plan(c, &p);
    if (st != PLAIT_OK) return st;
    size_t esz = c->esz, count = a->count;
    const char *send = a->send;
    char *recv = a->recv;
    int l = p.l, h = p.h, k = l > h ? l : h;
    size_t o0 = plait_part_offset(count, l, p.li), plen = plait_part_offset(count, l, p.li + 1) - o0;
    size_t sub = plen / (size_t)h + 1;
    size_t need = ((size_t)(l - 1) * plen + (size_t)(h - 1) * sub) * esz;
    char *tmp = plait_coll_scratch(c, need ? need : 1);
    xfer *x = tmp ? xfers(k) : NULL;
    int *col = malloc(sizeof(int) * (size_t)h);
    if (!tmp || !x || !col) {
        st = tmp && x ? plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory") : PLAIT_ERR_NO_MEMORY;
        goto out;
    }
    /* 1. within the host: part j of my vector to local index j */
    for (int j = 0, t = 0; j < l; j++) {
        size_t o = plait_part_offset(count, l, j), n = plait_part_offset(count, l, j + 1) - o;
        int me = j == p.li;
        x[j] = (xfer){me ? -1 : p.m[p.host * l + j], send + o * esz, n * esz,
                      me ? NULL : tmp + (size_t)t * plen * esz, me ? 0 : plen * esz};
        if (!me) t++;
    }
    if ((st = exchange(c, x, l, PH_INTRA_RS)) != PLAIT_OK) goto out;
    char *part = recv + o0 * esz;
    plait_coll_copy(part, send + o0 * esz, plen * esz);
    for (int t = 0; t < l - 1; t++) plait_reduce(part, part, tmp + (size_t)t * plen * esz, plen, a->dtype, a->op);
    /* 2. across hosts, within my column */
    for (int g = 0; g < h; g++) col[g] = p.m[g * l + p.li];
    if ((st = column_allreduce(c, part, plen, col, h, p.host, tmp, x)) != PLAIT_OK) goto out;
    /* 3. within the host: every part to everyone */
    for (int j = 0; j < l; j++) {
        size_t o = plait_part_offset(count, l, j), n = plait_part_offset(count, l, j + 1) - o;
        int me = j == p.li;
        x[j] = (xfer){me ? -1 : p.m[p.host * l + j], part, plen * esz, recv + o * esz, me ? 0 : n * esz};
    }
    st = exchange(c, x, l, PH_INTRA_AG);
out:
    free(col);
    free(x);
    free(p.m);
    return st;
}

/* ---- reduce_scatter ------------------------------------------------------ */

plait_status plait_hier_reduce_scatter(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    hier p;
    plait_status st = hier_plan(c, &p);
    if (st != PLAIT_OK) return st;
    size_t esz = c->esz, blk = a->count * esz;
    const char *send = a->send;
    int l = p.l, h = p.h;
    /* tmp: [l-1][h] blocks from local peers, then [h] partial sums, then [h-1] from other hosts */
    char *tmp = plait_coll_scratch(c, ((size_t)(l - 1) * (size_t)h + (size_t)h + (size_t)(h - 1)) * blk);
    char *partial = tmp ? tmp + (size_t)(l - 1) * (size_t)h * blk : NULL, *theirs = partial ? partial + (size_t)h * blk : NULL;
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
        for (int g = 0; g < h; g++, n++)
            x[n] = (xfer){p.m[p.host * l + j], send + (size_t)p.m[g * l + j] * blk, blk,
                          tmp + ((size_t)t * (size_t)h + (size_t)g) * blk, blk};
        t++;
    }
    if ((st = exchange(c, x, n, PH_INTRA_RS)) != PLAIT_OK) goto out;
    for (int g = 0; g < h; g++) {
        char *d = partial + (size_t)g * blk;
        memcpy(d, send + (size_t)p.m[g * l + p.li] * blk, blk);
        for (int t = 0; t < l - 1; t++)
            plait_reduce(d, d, tmp + ((size_t)t * (size_t)h + (size_t)g) * blk, a->count, a->dtype, a->op);
    }
    /* 2. across hosts: each column member gets its block's partial sums */
    n = 0;
    for (int g = 0, t = 0; g < h; g++) {
        if (g == p.host) continue;
        x[n++] = (xfer){p.m[g * l + p.li], partial + (size_t)g * blk, blk, theirs + (size_t)t * blk, blk};
        t++;
    }
    if ((st = exchange(c, x, n, PH_INTER_RS)) != PLAIT_OK) goto out;
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
    plait_status st = hier_plan(c, &p);
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
        x[n++] = (xfer){peer, recv + (size_t)c->rank * blk, blk, recv + (size_t)peer * blk, blk};
    }
    if ((st = exchange(c, x, n, PH_INTER_AG)) != PLAIT_OK) goto out;
    /* 2. within the host: my column's blocks to each local peer, theirs to me */
    n = 0;
    for (int j = 0; j < l; j++) {
        if (j == p.li) continue;
        int peer = p.m[p.host * l + j];
        for (int g = 0; g < h; g++, n++)
            x[n] = (xfer){peer, recv + (size_t)p.m[g * l + p.li] * blk, blk, recv + (size_t)p.m[g * l + j] * blk, blk};
    }
    st = exchange(c, x, n, PH_INTRA_AG);
out:
    free(x);
    free(p.m);
    return st;
}
