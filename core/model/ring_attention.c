/*
 * Ring attention on host memory (ring_attention.h). The arithmetic is
 * flash attention's, in float32 with a fixed order: for each query row,
 * the blocks of keys in ring order (this rank's own first, then the block
 * of rank r-1, r-2, ...), each block's scores folded into the row's running
 * maximum, sum and weighted values (the log-sum-exp merge), keys in
 * sequence order inside a block. So a layout repeats its bits run after
 * run, but cp ranks do not compute one process's sums (the fused kernel
 * of cp = 1 orders them otherwise): cp 2 and 4 equal cp 1 to rounding.
 *
 * The backward recomputes each block's probabilities from the forward's
 * log-sum-exp. A block's dK and dV travel with it: the rank holding block
 * src adds its queries' share to what the previous holders summed and
 * passes the sum on, and the last holder sends it home; each rank's share
 * is computed while the sum so far is on its way, and the next block's K
 * and V arrive while this block is computed.
 */
#include "model/ring_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/kernels_pool.h"
#include "runtime/error.h"

enum { TAG_KV_FWD = 1, TAG_KV_BWD = 2, TAG_DKV = 3 };

int64_t plait_cp_position(const plait_model *m, int64_t t) {
    const int64_t c = m->T / 2, j = t / c;
    const int64_t chunk = j == 0 ? m->cp_rank : 2 * m->cp - 1 - m->cp_rank;
    return chunk * c + t % c;
}

void plait_cp_take_local(int32_t *seq, int64_t B, int64_t T_local, int cp, int cp_rank) {
    const int64_t c = T_local / 2, T = T_local * cp;
    for (int64_t b = 0; b < B; b++) { /* each destination lies at or before its source */
        memmove(seq + b * T_local, seq + b * T + (int64_t)cp_rank * c, (size_t)c * sizeof *seq);
        memmove(seq + b * T_local + c, seq + b * T + (int64_t)(2 * cp - 1 - cp_rank) * c, (size_t)c * sizeof *seq);
    }
}

void plait_cp_add_positions(const plait_model *m, float *out, const float *wpe) {
    /* this rank's rows of the residual stream: all B·T, or under sequence
     * parallelism the R from row0 (model.c's sequence_setup) */
    for (int64_t row = m->row0; row < m->row0 + m->R; row++) {
        float *o = out + (row - m->row0) * m->C;
        const float *w = wpe + plait_cp_position(m, row % m->T) * m->C;
        for (int64_t i = 0; i < m->C; i++) o[i] += w[i];
    }
}

void plait_cp_positions_backward(const plait_model *m, float *dwpe, const float *dout) {
    for (int64_t t = 0; t < m->T; t++) { /* each position's rows in batch order */
        float *dw = dwpe + plait_cp_position(m, t) * m->C;
        for (int64_t b = 0; b < m->B; b++) {
            const float *d = dout + (b * m->T + t) * m->C;
            for (int64_t i = 0; i < m->C; i++) dw[i] += d[i];
        }
    }
}

/* ---- the ring's buffers -------------------------------------------------- */

typedef struct ring {
    plait_model *m;
    int32_t layer;
    int64_t NH, NKV, HS, W, KVW; /* heads, head size, a qkv row's width, a K|V row's width */
    size_t kv_numel;             /* B·T·KVW: one block of K and V (or of their gradients) */
    float *kv[2], *dkv_in, *dkv_out[2];
    plait_request *req[4];
} ring;

static plait_status ring_open(plait_model *m, int32_t layer, int64_t NH, int64_t NKV, ring *r) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->layer = layer;
    r->NH = NH, r->NKV = NKV, r->HS = m->HS;
    r->W = (NH + 2 * NKV) * m->HS;
    r->KVW = 2 * NKV * m->HS;
    r->kv_numel = (size_t)(m->B * m->T * r->KVW);
    const size_t bytes = 5 * r->kv_numel * sizeof(float);
    if (m->ring_bytes < bytes) {
        free(m->ring_mem);
        m->ring_bytes = 0;
        if (!(m->ring_mem = malloc(bytes)))
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: ring attention's K/V buffers (%zu bytes)", bytes);
        m->ring_bytes = bytes;
    }
    float *p = m->ring_mem;
    r->kv[0] = p, r->kv[1] = p + r->kv_numel, r->dkv_in = p + 2 * r->kv_numel;
    r->dkv_out[0] = p + 3 * r->kv_numel, r->dkv_out[1] = p + 4 * r->kv_numel;
    return PLAIT_OK;
}

void plait_ring_attention_free(plait_model *m) {
    free(m->ring_mem);
    m->ring_mem = NULL;
    m->ring_bytes = 0;
}

static plait_status ring_error(const ring *r, plait_status st, const char *what) {
    return plait_wrap_error(st, "model: ring attention of layer %d (cp rank %d of %d): %s", (int)r->layer,
                            (int)r->m->cp_rank, (int)r->m->cp, what);
}

/* Post request slot i: a send to the next rank or a receive from the previous. */
static plait_status ring_post(ring *r, int i, int is_send, float *buf, uint32_t tag) {
    const int cp = r->m->cp, me = r->m->cp_rank;
    const int peer = is_send ? (me + 1) % cp : (me + cp - 1) % cp;
    plait_status st = plait_comm_p2p(r->m->cp_comm, is_send, buf, r->kv_numel, PLAIT_F32, peer, tag, PLAIT_MEM_HOST,
                                     &r->req[i]);
    return st == PLAIT_OK ? PLAIT_OK : ring_error(r, st, is_send ? "posting a send" : "posting a receive");
}

static plait_status ring_wait(ring *r, int i) {
    if (!r->req[i]) return PLAIT_OK;
    plait_status st = plait_request_wait(r->req[i]);
    r->req[i] = NULL;
    return st == PLAIT_OK ? PLAIT_OK : ring_error(r, st, "waiting for a K/V transfer");
}

static plait_status ring_close(ring *r, plait_status st) {
    for (int i = 0; i < 4; i++) {
        plait_status w = ring_wait(r, i);
        if (st == PLAIT_OK) st = w;
    }
    return st;
}

/* This rank's K and V rows, packed [B,T,K|V] for the ring. */
static void pack_kv(const ring *r, float *kv, const float *qkv) {
    const int64_t rows = r->m->B * r->m->T, qw = r->NH * r->HS;
    for (int64_t i = 0; i < rows; i++) memcpy(kv + i * r->KVW, qkv + i * r->W + qw, (size_t)r->KVW * sizeof(float));
}

/* The keys of block `src` that query row t of this rank sees: the block's
 * chunk j (0 or 1) in full, up to and including the query's position, or
 * not at all (*n = 0). */
static void visible(const ring *r, int src, int64_t t, int j, int64_t *n) {
    const plait_model *m = r->m;
    const int64_t c = m->T / 2, cp = m->cp;
    const int64_t qchunk = t < c ? m->cp_rank : 2 * cp - 1 - m->cp_rank;
    const int64_t kchunk = j == 0 ? src : 2 * cp - 1 - src;
    *n = kchunk < qchunk ? c : kchunk == qchunk ? t % c + 1 : 0;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One block's pass, over the kernels' threads: the arguments of an item. */
typedef struct block_job {
    const ring *r;
    int src;
    const float *kv, *qkv, *dout, *lse, *dd;
    float *acc, *mx, *l, *dkv, *dqkv;
} block_job;

enum { TILE = 128 }; /* keys scored at once: a row's scores stay on the stack */

/* Fold block `src` (K|V rows kv) into one (batch, head) item's query rows:
 * the running maximum mx, sum l (in lse's place until the end) and
 * weighted values acc (in out's place), a tile of keys at a time. */
static void forward_item(void *ctx, int64_t item) {
    const block_job *jb = ctx;
    const ring *r = jb->r;
    const plait_model *m = r->m;
    const int64_t T = m->T, HS = r->HS, c = T / 2, group = r->NH / r->NKV;
    const int64_t b = item / r->NH, h = item % r->NH, kh = h / group;
    const float scale = 1.0f / sqrtf((float)HS);
    float sc[TILE];
    for (int64_t t = 0; t < T; t++) {
        const float *q = jb->qkv + (b * T + t) * r->W + h * HS;
        float *o = jb->acc + (b * T + t) * r->NH * HS + h * HS;
        const int64_t row = (b * r->NH + h) * T + t;
        float *mx = jb->mx + row, *l = jb->l + row;
        for (int j = 0; j < 2; j++) {
            int64_t n;
            visible(r, jb->src, t, j, &n);
            const float *kb = jb->kv + (b * T + j * c) * r->KVW + kh * HS, *vb = kb + r->NKV * HS;
            for (int64_t u0 = 0; u0 < n; u0 += TILE) {
                const int64_t w = n - u0 < TILE ? n - u0 : TILE;
                float tmax = -INFINITY;
                for (int64_t u = 0; u < w; u++) {
                    sc[u] = dot(q, kb + (u0 + u) * r->KVW, HS) * scale;
                    if (sc[u] > tmax) tmax = sc[u];
                }
                const float nmax = tmax > *mx ? tmax : *mx;
                const float keep = expf(*mx - nmax); /* 0 while the row is empty (-inf) */
                for (int64_t i = 0; i < HS; i++) o[i] *= keep;
                float sum = 0.0f;
                for (int64_t u = 0; u < w; u++) {
                    const float p = expf(sc[u] - nmax);
                    const float *v = vb + (u0 + u) * r->KVW;
                    sum += p;
                    for (int64_t i = 0; i < HS; i++) o[i] += p * v[i];
                }
                *l = *l * keep + sum;
                *mx = nmax;
            }
        }
    }
}

static void forward_block(const ring *r, int src, const float *kv, const float *qkv, float *acc, float *mx, float *l) {
    block_job jb = {.r = r, .src = src, .kv = kv, .qkv = qkv, .acc = acc, .mx = mx, .l = l};
    plait_pool_run(r->m->B * r->NH, forward_item, &jb);
}

plait_status plait_ring_attention_forward(plait_model *m, int32_t layer, float *out, float *lse, const float *qkv,
                                          int64_t NH, int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, NH, NKV, &r);
    if (st != PLAIT_OK) return st;
    const int64_t rows = m->B * NH * m->T, HS = m->HS;
    float *l = malloc((size_t)rows * sizeof(float));
    if (!l) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: ring attention's row sums");
    for (int64_t i = 0; i < rows; i++) lse[i] = -INFINITY, l[i] = 0.0f;
    memset(out, 0, (size_t)(m->B * m->T * NH * HS) * sizeof(float));
    pack_kv(&r, r.kv[0], qkv);
    for (int s = 0; st == PLAIT_OK && s < m->cp; s++) {
        const int cur = s & 1, more = s + 1 < m->cp;
        if (more) st = ring_post(&r, 0, 0, r.kv[cur ^ 1], TAG_KV_FWD);
        if (more && st == PLAIT_OK) st = ring_post(&r, 1, 1, r.kv[cur], TAG_KV_FWD);
        if (st != PLAIT_OK) break;
        forward_block(&r, (m->cp_rank - s + m->cp) % m->cp, r.kv[cur], qkv, out, lse, l);
        if (more && (st = ring_wait(&r, 0)) == PLAIT_OK) st = ring_wait(&r, 1);
    }
    st = ring_close(&r, st);
    for (int64_t b = 0; st == PLAIT_OK && b < m->B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < m->T; t++) {
                const int64_t row = (b * NH + h) * m->T + t;
                float *o = out + (b * m->T + t) * NH * HS + h * HS;
                const float inv = 1.0f / l[row];
                for (int64_t i = 0; i < HS; i++) o[i] *= inv;
                lse[row] += logf(l[row]);
            }
    free(l);
    return st;
}

/* Block `src`'s share of the gradients for one (batch, key/value head)
 * item: dq of its query heads (in dqkv's q columns) += and its rows of dkv
 * (this rank's share of the block's dK|dV, zeroed first) +=, from the
 * probabilities rebuilt from lse; dd holds each row's Σ dout·out. An item
 * writes only its own rows, so the items run on any threads. */
static void backward_item(void *ctx, int64_t item) {
    const block_job *jb = ctx;
    const ring *r = jb->r;
    const plait_model *m = r->m;
    const int64_t T = m->T, HS = r->HS, c = T / 2, group = r->NH / r->NKV;
    const int64_t b = item / r->NKV, kh = item % r->NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t h = kh * group; h < (kh + 1) * group; h++)
        for (int64_t t = 0; t < T; t++) {
            const float *q = jb->qkv + (b * T + t) * r->W + h * HS;
            float *dq = jb->dqkv + (b * T + t) * r->W + h * HS;
            const float *go = jb->dout + (b * T + t) * r->NH * HS + h * HS;
            const int64_t row = (b * r->NH + h) * T + t;
            for (int j = 0; j < 2; j++) {
                int64_t n;
                visible(r, jb->src, t, j, &n);
                const float *kb = jb->kv + (b * T + j * c) * r->KVW + kh * HS, *vb = kb + r->NKV * HS;
                float *dkb = jb->dkv + (b * T + j * c) * r->KVW + kh * HS, *dvb = dkb + r->NKV * HS;
                for (int64_t u = 0; u < n; u++) {
                    const float p = expf(dot(q, kb + u * r->KVW, HS) * scale - jb->lse[row]);
                    const float ds = p * (dot(go, vb + u * r->KVW, HS) - jb->dd[row]) * scale;
                    for (int64_t i = 0; i < HS; i++) {
                        dvb[u * r->KVW + i] += p * go[i];
                        dq[i] += ds * kb[u * r->KVW + i];
                        dkb[u * r->KVW + i] += ds * q[i];
                    }
                }
            }
        }
}

static void backward_block(const ring *r, int src, const float *kv, float *dkv, const float *qkv, float *dqkv,
                           const float *dout, const float *lse, const float *dd) {
    memset(dkv, 0, r->kv_numel * sizeof(float));
    block_job jb = {
        .r = r, .src = src, .kv = kv, .qkv = qkv, .dout = dout, .lse = lse, .dd = dd, .dkv = dkv, .dqkv = dqkv};
    plait_pool_run(r->m->B * r->NKV, backward_item, &jb);
}

/* dd[row] = Σ dout·out over the row's head (softmax's backward term). */
static void row_dots(const ring *r, float *dd, const float *dout, const float *out) {
    const plait_model *m = r->m;
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < r->NH; h++)
            for (int64_t t = 0; t < m->T; t++) {
                const int64_t at = (b * m->T + t) * r->NH * r->HS + h * r->HS;
                dd[(b * r->NH + h) * m->T + t] = dot(dout + at, out + at, r->HS);
            }
}

/* The dK|dV that came home into dqkv's k and v columns. */
static void unpack_dkv(const ring *r, float *dqkv, const float *dkv) {
    const int64_t rows = r->m->B * r->m->T, qw = r->NH * r->HS;
    for (int64_t i = 0; i < rows; i++) memcpy(dqkv + i * r->W + qw, dkv + i * r->KVW, (size_t)r->KVW * sizeof(float));
}

/* long: one ring pass with its three kinds of transfer posted and waited in order */
plait_status plait_ring_attention_backward(plait_model *m, int32_t layer, float *dqkv, const float *dout,
                                           const float *qkv, const float *out, const float *lse, int64_t NH,
                                           int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, NH, NKV, &r);
    if (st != PLAIT_OK) return st;
    float *dd = malloc((size_t)(m->B * NH * m->T) * sizeof(float));
    if (!dd) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: ring attention's row terms");
    row_dots(&r, dd, dout, out);
    memset(dqkv, 0, (size_t)(m->B * m->T * r.W) * sizeof(float));
    pack_kv(&r, r.kv[0], qkv);
    /* requests: 0 receive K|V, 1 send K|V, 2 receive the block's dK|dV so
     * far, 3 send this step's sum on */
    for (int s = 0; st == PLAIT_OK && s < m->cp; s++) {
        const int cur = s & 1, more = s + 1 < m->cp;
        if (more) st = ring_post(&r, 0, 0, r.kv[cur ^ 1], TAG_KV_BWD);
        if (more && st == PLAIT_OK) st = ring_post(&r, 1, 1, r.kv[cur], TAG_KV_BWD);
        if (s > 0 && st == PLAIT_OK) st = ring_post(&r, 2, 0, r.dkv_in, TAG_DKV);
        if (st != PLAIT_OK) break;
        float *share = r.dkv_out[cur]; /* its send two steps ago was waited for at the last step */
        backward_block(&r, (m->cp_rank - s + m->cp) % m->cp, r.kv[cur], share, qkv, dqkv, dout, lse, dd);
        if (s > 0 && (st = ring_wait(&r, 2)) == PLAIT_OK)
            for (size_t i = 0; i < r.kv_numel; i++) share[i] = r.dkv_in[i] + share[i];
        if (st == PLAIT_OK) st = ring_wait(&r, 3);
        if (st == PLAIT_OK) st = ring_post(&r, 3, 1, share, TAG_DKV);
        if (more && st == PLAIT_OK && (st = ring_wait(&r, 0)) == PLAIT_OK) st = ring_wait(&r, 1);
    }
    /* this rank's own block's sum, from the last rank that held it */
    if (st == PLAIT_OK) st = ring_post(&r, 2, 0, r.dkv_in, TAG_DKV);
    if (st == PLAIT_OK) st = ring_wait(&r, 2);
    st = ring_close(&r, st);
    if (st == PLAIT_OK) unpack_dkv(&r, dqkv, r.dkv_in);
    free(dd);
    return st;
}
