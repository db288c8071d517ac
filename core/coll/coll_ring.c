/*
 * Chunked, pipelined ring (allreduce = reduce-scatter + allgather,
 * reduce_scatter, allgather) and the pipelined chain for large broadcast and
 * reduce.
 *
 * The ring splits the vector into n segments and each segment into k chunks.
 * The work is a stream of units u = step*k + chunk; in every unit a rank
 * sends one chunk to its right neighbour and receives one from its left.
 * Unit u's send depends only on unit u-k's receive (the same chunk one step
 * earlier), so a rank keeps W receives posted ahead, posts each send as soon
 * as its chunk is ready, and blocks only on the oldest receive: transfers of
 * later chunks overlap the reduction of earlier ones, and the reduce-scatter
 * flows into the allgather without draining the pipe. Each received chunk is
 * reduced right away, while it is in cache, straight into its destination
 * (recv = own contribution op received), so the only copies are the
 * transport's.
 *
 * Deadlock freedom: the only blocking waits are on the oldest receive and on
 * sends posted at least k units earlier (buffer reuse); around the ring some
 * rank is always far enough ahead for its wait to complete.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "runtime/error.h"

/* Pipeline shape, measured on loopback TCP with 4 ranks on 2 cores. The
 * chunk is what the transport moves per message and the piece reduced while
 * it is cache-hot: 1 MiB beat 256 KiB by ~1.5x at 16-64 MiB (per-message
 * cost). Receives are posted up to two steps ahead (window 2k, capped): the
 * left neighbour sends a whole step's chunks at once, and a chunk arriving
 * before its receive is posted costs the transport a buffer and a copy
 * (window 4 -> 32 gave another ~1.3x). */
#define RING_CHUNK_BYTES (1u << 20)
#define RING_MIN_CHUNK_BYTES (64u << 10)
#define RING_MIN_WINDOW 4
#define RING_MAX_WINDOW 32
#define RING_RECV_WINDOW RING_MIN_WINDOW /* chain broadcast / reduce */

enum { MODE_ALLREDUCE, MODE_REDUCE_SCATTER, MODE_ALLGATHER };

typedef struct ring {
    plait_coll_ctx *c;
    int mode;
    int n, r, left, right;
    size_t esz;
    size_t count;          /* allreduce: vector length; RS/AG: per-rank block */
    size_t ce;             /* elements per chunk */
    int k;                 /* chunks per segment */
    int rs_steps, ag_steps;
    int window;
    const char *own;       /* own contribution, element 0 of the full vector (AG: own block) */
    char *out;             /* allreduce / allgather: the full result (recv) */
    char *res;             /* reduce_scatter: this rank's result block (recv) */
    char *slots;           /* window receive buffers of ce elements (RS) */
    char *par[2];          /* reduce_scatter: accumulators for alternate steps */
} ring;

static inline int mod(int a, int n) { return ((a % n) + n) % n; }

static size_t seg_start(const ring *g, int seg) {
    return g->mode == MODE_ALLREDUCE ? plait_part_offset(g->count, g->n, seg) : (size_t)seg * g->count;
}
static size_t seg_len(const ring *g, int seg) {
    return g->mode == MODE_ALLREDUCE ? seg_start(g, seg + 1) - seg_start(g, seg) : g->count;
}

/* Elements [*first, *first + return) of segment `seg`, chunk j (within the segment). */
static size_t chunk_of(const ring *g, int seg, int j, size_t *first) {
    size_t len = seg_len(g, seg), lo = (size_t)j * g->ce;
    *first = lo;
    if (lo >= len) return 0;
    return len - lo < g->ce ? len - lo : g->ce;
}

typedef struct unit {
    int step;      /* 0-based within its phase */
    int rs;        /* 1 = reduce-scatter phase */
    int j;         /* chunk */
    int send_seg, recv_seg;
} unit;

static unit unit_of(const ring *g, int u) {
    unit x;
    int s = u / g->k;
    x.j = u % g->k;
    x.rs = s < g->rs_steps;
    x.step = x.rs ? s : s - g->rs_steps;
    if (x.rs) {
        x.send_seg = mod(g->r - x.step - 1, g->n);
        x.recv_seg = mod(g->r - x.step - 2, g->n);
    } else {
        x.send_seg = mod(g->r - x.step, g->n);
        x.recv_seg = mod(g->r - x.step - 1, g->n);
    }
    return x;
}

/* Where unit u's outgoing chunk lives. */
static const char *send_src(const ring *g, const unit *x, size_t *bytes) {
    size_t lo, n = chunk_of(g, x->send_seg, x->j, &lo);
    *bytes = n * g->esz;
    size_t at = seg_start(g, x->send_seg) + lo;
    if (x->rs) {
        if (x->step == 0) return g->own + at * g->esz;
        if (g->mode == MODE_ALLREDUCE) return g->out + at * g->esz;
        return g->par[(x->step - 1) & 1] + lo * g->esz;
    }
    if (g->mode == MODE_ALLGATHER && x->step == 0) return g->own + lo * g->esz;
    return g->out + at * g->esz;
}

/* Where unit u's incoming chunk goes (a slot during reduce-scatter). */
static char *recv_dst(const ring *g, int u, const unit *x, size_t *bytes) {
    size_t lo, n = chunk_of(g, x->recv_seg, x->j, &lo);
    *bytes = n * g->esz;
    if (x->rs) return g->slots + (size_t)(u % g->window) * g->ce * g->esz;
    return g->out + (seg_start(g, x->recv_seg) + lo) * g->esz;
}

/* Reduce a received reduce-scatter chunk into its accumulator. */
static plait_status reduce_unit(ring *g, int u, const unit *x, int *send_handles) {
    const plait_coll_args *a = g->c->a;
    size_t lo, n = chunk_of(g, x->recv_seg, x->j, &lo);
    if (!n) return PLAIT_OK;
    size_t at = seg_start(g, x->recv_seg) + lo;
    int last = x->step == g->rs_steps - 1;
    char *dst;
    if (g->mode == MODE_ALLREDUCE) {
        dst = g->out + at * g->esz;
    } else if (last) {
        dst = g->res + lo * g->esz;
    } else {
        /* par[step&1] chunk j was last sent by unit u-k: it must be out */
        if (u >= g->k) {
            plait_status st = plait_coll_wait(g->c, &send_handles[u - g->k]);
            if (st != PLAIT_OK) return st;
        }
        dst = g->par[x->step & 1] + lo * g->esz;
    }
    const char *slot = g->slots + (size_t)(u % g->window) * g->ce * g->esz;
    plait_reduce(dst, g->own + at * g->esz, slot, n, a->dtype, a->op);
    if (last && a->op == PLAIT_AVG) plait_reduce_finish_avg(dst, n, a->dtype, g->n);
    return PLAIT_OK;
}

static plait_status run(ring *g) {
    plait_coll_ctx *c = g->c;
    int T = (g->rs_steps + g->ag_steps) * g->k;
    int first_free = g->k; /* units without a dependency: the first step */
    int *sh = malloc((size_t)T * sizeof(int)), *rh = malloc((size_t)T * sizeof(int));
    if (!sh || !rh) {
        free(sh);
        free(rh);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < T; i++) sh[i] = rh[i] = -1;
    plait_status st = PLAIT_OK;
    int posted_r = 0, posted_s = 0, done_r = 0, reaped_s = 0;
    int ag_first = g->rs_steps * g->k;
    while (st == PLAIT_OK && done_r < T) {
        while (st == PLAIT_OK && posted_r < T && posted_r - done_r < g->window) {
            int u = posted_r;
            unit x = unit_of(g, u);
            /* allreduce: the allgather overwrites what reduce-scatter step
             * `step` sent from the same place; that send must be out */
            if (g->mode == MODE_ALLREDUCE && !x.rs) st = plait_coll_wait(c, &sh[u - ag_first]);
            size_t bytes;
            char *dst = recv_dst(g, u, &x, &bytes);
            if (st == PLAIT_OK) st = plait_coll_irecv(c, dst, bytes, g->left, x.rs ? 0 : 1, &rh[u]);
            posted_r++;
        }
        while (st == PLAIT_OK && posted_s < T && (posted_s < first_free || posted_s - g->k < done_r)) {
            unit x = unit_of(g, posted_s);
            size_t bytes;
            const char *src = send_src(g, &x, &bytes);
            st = plait_coll_isend(c, src, bytes, g->right, x.rs ? 0 : 1, &sh[posted_s]);
            posted_s++;
        }
        /* release finished sends so the plugin's queue stays short */
        while (st == PLAIT_OK && reaped_s < posted_s) {
            int done = 0;
            st = plait_coll_test(c, &sh[reaped_s], &done);
            if (!done) break;
            reaped_s++;
        }
        if (st != PLAIT_OK) break;
        st = plait_coll_wait(c, &rh[done_r]);
        if (st == PLAIT_OK) {
            unit x = unit_of(g, done_r);
            if (x.rs) st = reduce_unit(g, done_r, &x, sh);
        }
        done_r++;
    }
    while (st == PLAIT_OK && posted_s < T) {
        unit x = unit_of(g, posted_s);
        size_t bytes;
        const char *src = send_src(g, &x, &bytes);
        st = plait_coll_isend(c, src, bytes, g->right, x.rs ? 0 : 1, &sh[posted_s]);
        posted_s++;
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, sh, T);
    free(sh);
    free(rh);
    return st;
}

/* Chunk size for segments of at most `max_seg` elements. */
static size_t chunk_elems(size_t max_seg, size_t esz) {
    size_t seg_bytes = max_seg * esz;
    size_t chunk = RING_CHUNK_BYTES;
    /* at least a few chunks per segment when segments are mid-sized, so the
     * pipeline has something to overlap */
    if (seg_bytes / 4 < chunk) chunk = seg_bytes / 4;
    if (chunk < RING_MIN_CHUNK_BYTES) chunk = RING_MIN_CHUNK_BYTES;
    size_t ce = chunk / esz;
    if (ce > max_seg) ce = max_seg;
    return ce ? ce : 1;
}

static plait_status setup(ring *g, plait_coll_ctx *c, int mode) {
    const plait_coll_args *a = c->a;
    memset(g, 0, sizeof *g);
    g->c = c;
    g->mode = mode;
    g->n = c->size;
    g->r = c->rank;
    g->left = mod(g->r - 1, g->n);
    g->right = mod(g->r + 1, g->n);
    g->esz = c->esz;
    g->count = a->count;
    size_t max_seg = mode == MODE_ALLREDUCE ? (a->count + (size_t)g->n - 1) / (size_t)g->n : a->count;
    g->ce = chunk_elems(max_seg, g->esz);
    g->k = (int)((max_seg + g->ce - 1) / g->ce);
    if (g->k < 1) g->k = 1;
    g->window = 2 * g->k;
    if (g->window < RING_MIN_WINDOW) g->window = RING_MIN_WINDOW;
    if (g->window > RING_MAX_WINDOW) g->window = RING_MAX_WINDOW;
    g->rs_steps = mode == MODE_ALLGATHER ? 0 : g->n - 1;
    g->ag_steps = mode == MODE_REDUCE_SCATTER ? 0 : g->n - 1;
    g->own = a->send;
    if (mode == MODE_REDUCE_SCATTER)
        g->res = a->recv;
    else
        g->out = a->recv;
    if (mode == MODE_ALLGATHER) return PLAIT_OK;
    size_t slot_bytes = (g->ce * g->esz + 63) & ~(size_t)63;
    size_t par_bytes = mode == MODE_REDUCE_SCATTER ? ((g->count * g->esz + 63) & ~(size_t)63) : 0;
    char *s = plait_coll_scratch(c, slot_bytes * (size_t)g->window + 2 * par_bytes);
    if (!s) return PLAIT_ERR_NO_MEMORY;
    g->slots = s;
    if (par_bytes) {
        g->par[0] = s + slot_bytes * (size_t)g->window;
        g->par[1] = g->par[0] + par_bytes;
    }
    return PLAIT_OK;
}

plait_status plait_ring_allreduce(plait_coll_ctx *c) {
    ring g;
    plait_status st = setup(&g, c, MODE_ALLREDUCE);
    return st == PLAIT_OK ? run(&g) : st;
}

plait_status plait_ring_reduce_scatter(plait_coll_ctx *c) {
    ring g;
    plait_status st = setup(&g, c, MODE_REDUCE_SCATTER);
    return st == PLAIT_OK ? run(&g) : st;
}

plait_status plait_ring_allgather(plait_coll_ctx *c) {
    ring g;
    plait_status st = setup(&g, c, MODE_ALLGATHER);
    if (st != PLAIT_OK) return st;
    /* own block into place (no-op in place) */
    plait_coll_copy(g.out + (size_t)g.r * g.count * g.esz, g.own, g.count * g.esz);
    return run(&g);
}

/* ---- pipelined chain: root -> 1 -> 2 -> ... (relative ranks) ------------ */

typedef struct chain {
    int vr, prev, next, k;
    size_t ce;
} chain;

static void chain_setup(chain *h, plait_coll_ctx *c) {
    int n = c->size, root = c->a->root;
    h->vr = mod(c->rank - root, n);
    h->prev = h->vr > 0 ? mod(c->rank - 1, n) : -1;
    h->next = h->vr < n - 1 ? mod(c->rank + 1, n) : -1;
    h->ce = RING_CHUNK_BYTES / c->esz;
    if (h->ce > c->a->count) h->ce = c->a->count;
    h->k = (int)((c->a->count + h->ce - 1) / h->ce);
}

static size_t chain_chunk(const chain *h, size_t count, int j, size_t *lo) {
    *lo = (size_t)j * h->ce;
    return count - *lo < h->ce ? count - *lo : h->ce;
}

plait_status plait_chain_broadcast(plait_coll_ctx *c) {
    chain h;
    chain_setup(&h, c);
    char *buf = c->a->recv;
    size_t esz = c->esz, count = c->a->count;
    int *sh = malloc((size_t)h.k * sizeof(int)), *rh = malloc((size_t)h.k * sizeof(int));
    if (!sh || !rh) {
        free(sh);
        free(rh);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < h.k; i++) sh[i] = rh[i] = -1;
    plait_status st = PLAIT_OK;
    int posted_r = 0;
    for (int j = 0; st == PLAIT_OK && j < h.k; j++) {
        size_t lo, n;
        if (h.prev >= 0) {
            while (st == PLAIT_OK && posted_r < h.k && posted_r - j < RING_RECV_WINDOW) {
                n = chain_chunk(&h, count, posted_r, &lo);
                st = plait_coll_irecv(c, buf + lo * esz, n * esz, h.prev, 0, &rh[posted_r]);
                posted_r++;
            }
            if (st == PLAIT_OK) st = plait_coll_wait(c, &rh[j]);
        }
        if (st == PLAIT_OK && h.next >= 0) {
            n = chain_chunk(&h, count, j, &lo);
            st = plait_coll_isend(c, buf + lo * esz, n * esz, h.next, 0, &sh[j]);
        }
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, sh, h.k);
    free(sh);
    free(rh);
    return st;
}

/* Chain reduce: the last rank starts; each rank adds its contribution and
 * passes the chunk toward the root. */
plait_status plait_chain_reduce(plait_coll_ctx *c) {
    chain h;
    /* reverse direction: receive from vr+1, send to vr-1 */
    chain_setup(&h, c);
    const plait_coll_args *a = c->a;
    size_t esz = c->esz, count = a->count;
    int from = h.next, to = h.prev;
    char *acc = NULL, *slots = NULL;
    if (from >= 0) {
        size_t slot_bytes = (h.ce * esz + 63) & ~(size_t)63;
        size_t acc_bytes = to >= 0 ? ((count * esz + 63) & ~(size_t)63) : 0;
        char *s = plait_coll_scratch(c, slot_bytes * RING_RECV_WINDOW + acc_bytes);
        if (!s) return PLAIT_ERR_NO_MEMORY;
        slots = s;
        acc = to >= 0 ? s + slot_bytes * RING_RECV_WINDOW : a->recv;
    }
    int *sh = malloc((size_t)h.k * sizeof(int)), *rh = malloc((size_t)h.k * sizeof(int));
    if (!sh || !rh) {
        free(sh);
        free(rh);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < h.k; i++) sh[i] = rh[i] = -1;
    plait_status st = PLAIT_OK;
    int posted_r = 0;
    const char *own = a->send;
    for (int j = 0; st == PLAIT_OK && j < h.k; j++) {
        size_t lo, n = chain_chunk(&h, count, j, &lo);
        const char *out = own + lo * esz;
        if (from >= 0) {
            while (st == PLAIT_OK && posted_r < h.k && posted_r - j < RING_RECV_WINDOW) {
                size_t plo, pn = chain_chunk(&h, count, posted_r, &plo);
                st = plait_coll_irecv(c, slots + (size_t)(posted_r % RING_RECV_WINDOW) * h.ce * esz,
                                      pn * esz, from, 0, &rh[posted_r]);
                posted_r++;
            }
            if (st == PLAIT_OK) st = plait_coll_wait(c, &rh[j]);
            if (st != PLAIT_OK) break;
            char *dst = acc + lo * esz;
            plait_reduce(dst, own + lo * esz, slots + (size_t)(j % RING_RECV_WINDOW) * h.ce * esz, n,
                         a->dtype, a->op);
            if (to < 0 && a->op == PLAIT_AVG) plait_reduce_finish_avg(dst, n, a->dtype, c->size);
            out = dst;
        } else if (to < 0) {
            /* a group of one never gets here (handled by the caller) */
            plait_coll_copy(a->recv, own, count * esz);
        }
        if (to >= 0) st = plait_coll_isend(c, out, n * esz, to, 0, &sh[j]);
    }
    if (st == PLAIT_OK) st = plait_coll_waitall(c, sh, h.k);
    free(sh);
    free(rh);
    return st;
}
