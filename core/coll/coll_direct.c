/*
 * Direct exchanges (every pair talks once, all posted at once), the pairwise
 * alltoall (one partner per round, for large blocks) and the dissemination
 * barrier (ceil(log2 n) rounds of empty messages).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "runtime/error.h"

static int *handles(int n) {
    int *h = malloc((size_t)n * sizeof(int));
    if (h)
        for (int i = 0; i < n; i++) h[i] = -1;
    else
        plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    return h;
}

/* Every rank sends block j of `send` to rank j and receives rank j's block
 * into block j of `recv`; own block copied. Posts every receive, then every
 * send (starting with the right neighbour so the load spreads). */
static plait_status exchange(plait_coll_ctx *c, const char *send, size_t send_stride, char *recv,
                             size_t recv_stride, size_t blk) {
    int n = c->size, r = c->rank;
    int *h = handles(2 * n);
    if (!h) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (int s = 1; st == PLAIT_OK && s < n; s++) {
        int from = (r - s + n) % n;
        st = plait_coll_irecv(c, recv + (size_t)from * recv_stride, blk, from, 0, &h[from]);
    }
    for (int s = 1; st == PLAIT_OK && s < n; s++) {
        int to = (r + s) % n;
        st = plait_coll_isend(c, send + (size_t)to * send_stride, blk, to, 0, &h[n + to]);
    }
    if (st == PLAIT_OK) {
        plait_coll_copy(recv + (size_t)r * recv_stride, send + (size_t)r * send_stride, blk);
        st = plait_coll_waitall(c, h, 2 * n);
    }
    free(h);
    return st;
}

plait_status plait_direct_alltoall(plait_coll_ctx *c) {
    size_t blk = c->a->count * c->esz;
    return exchange(c, c->a->send, blk, c->a->recv, blk, blk);
}

plait_status plait_pairwise_alltoall(plait_coll_ctx *c) {
    int n = c->size, r = c->rank;
    size_t blk = c->a->count * c->esz;
    const char *send = c->a->send;
    char *recv = c->a->recv;
    plait_coll_copy(recv + (size_t)r * blk, send + (size_t)r * blk, blk);
    for (int s = 1; s < n; s++) {
        int to = (r + s) % n, from = (r - s + n) % n;
        plait_status st = plait_coll_sendrecv(c, send + (size_t)to * blk, blk, to,
                                              recv + (size_t)from * blk, blk, from, 0);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

plait_status plait_direct_allgather(plait_coll_ctx *c) {
    /* the same block goes to everyone: send stride 0 from own contribution */
    size_t blk = c->a->count * c->esz;
    return exchange(c, c->a->send, 0, c->a->recv, blk, blk);
}

plait_status plait_direct_broadcast(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank;
    size_t bytes = a->count * c->esz;
    if (r != a->root) {
        int h = -1;
        plait_status st = plait_coll_irecv(c, a->recv, bytes, a->root, 0, &h);
        return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
    }
    int *h = handles(n);
    if (!h) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (int s = 1; st == PLAIT_OK && s < n; s++) {
        int to = (r + s) % n;
        st = plait_coll_isend(c, a->recv, bytes, to, 0, &h[to]);
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, n);
    free(h);
    return st;
}

plait_status plait_direct_gather(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank;
    size_t blk = a->count * c->esz;
    if (r != a->root) {
        int h = -1;
        plait_status st = plait_coll_isend(c, a->send, blk, a->root, 0, &h);
        return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
    }
    int *h = handles(n);
    if (!h) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    char *recv = a->recv;
    for (int q = 0; st == PLAIT_OK && q < n; q++)
        if (q != r) st = plait_coll_irecv(c, recv + (size_t)q * blk, blk, q, 0, &h[q]);
    if (st == PLAIT_OK) {
        plait_coll_copy(recv + (size_t)r * blk, a->send, blk);
        st = plait_coll_waitall(c, h, n);
    }
    free(h);
    return st;
}

plait_status plait_direct_scatter(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    int n = c->size, r = c->rank;
    size_t blk = a->count * c->esz;
    if (r != a->root) {
        int h = -1;
        plait_status st = plait_coll_irecv(c, a->recv, blk, a->root, 0, &h);
        return st == PLAIT_OK ? plait_coll_wait(c, &h) : st;
    }
    int *h = handles(n);
    if (!h) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    const char *send = a->send;
    for (int s = 1; st == PLAIT_OK && s < n; s++) {
        int to = (r + s) % n;
        st = plait_coll_isend(c, send + (size_t)to * blk, blk, to, 0, &h[to]);
    }
    if (st == PLAIT_OK) {
        plait_coll_copy(a->recv, send + (size_t)r * blk, blk);
        st = plait_coll_waitall(c, h, n);
    }
    free(h);
    return st;
}

plait_status plait_dissemination_barrier(plait_coll_ctx *c) {
    int n = c->size, r = c->rank;
    char token = 0, sink = 0;
    unsigned round = 0;
    for (int d = 1; d < n; d *= 2, round++) {
        plait_status st =
            plait_coll_sendrecv(c, &token, 0, (r + d) % n, &sink, 0, (r - d + n) % n, round);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}
