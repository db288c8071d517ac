/*
 * Ring attention's block kernels on the CPU (plait/kernels.h, ABI 1.18):
 * flash attention's arithmetic in float32, by tiles as the fused
 * attention of cp = 1 (kernels_attention.c) runs it. A tile of up to ROWS
 * query rows of one chunk meets the block's keys KEYS at a time, each
 * product one single-threaded sgemm: the forward's scores Q·Kᵀ fold into
 * each row's running maximum, sum and weighted values (the log-sum-exp
 * merge, the key tiles of a block in sequence order) and P·V adds to the
 * output; the backward rebuilds P from the forward's log-sum-exp and adds
 * dS·K to dQ, Pᵀ·dO to dV and dSᵀ·Q to dK. The model's ring
 * (core/model/ring_attention.c) decides the order of the blocks.
 *
 * A tile's rows see the block's chunk j in full, causally (row t its keys
 * up to t's position) or not at all (visible()); a key tile's products
 * start at the first row that sees any of its keys, and the scores a row
 * does not see become zero probabilities.
 *
 * Work items are (batch, head) in the forward and (batch, key/value head)
 * in the backward: an item writes only its own rows, and its tiles' shapes
 * depend on T, the head size and the block alone, so any thread count
 * gives the same bits. The products run on the library of every product
 * of the model (plait_k_gemm_here: OpenBLAS, or oneDNN where chosen; the
 * same kernels give the same bits, docs/cpu.md); the row loops between
 * them are compiled for AVX-512, AVX2 and the baseline and chosen at run
 * time (simd_clones.h), each clone summing in the same order (the lanes
 * of kernels_math.h), so they add no dependence on the ISA.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

enum {
    ROWS = 64,  /* query rows a tile: the fused attention's ATT_TILE */
    KEYS = 128, /* keys a tile: a tile's scores (ROWS x KEYS) stay on the stack */
};

typedef struct ring_job {
    const plait_ring_block *blk;
    int64_t T, NH, NKV, HS, W, kv_stride;
    const float *qkv, *kv, *dout, *out, *lse;
    float *acc, *mx, *l, *dqkv, *dkv;
} ring_job;

/* The keys of the block's chunk j (0 or 1) that query row t sees: the
 * chunk in full, up to and including the query's position, or none. */
static int64_t visible(const ring_job *jb, int64_t t, int j) {
    const int64_t c = jb->T / 2, q = jb->blk->q_chunk[t < c ? 0 : 1], k = jb->blk->k_chunk[j];
    return k < q ? c : k == q ? t % c + 1 : 0;
}

/* Where the key tile at u0 (w keys) of chunk j meets the query rows
 * [r0, r1) of one chunk: rows [rs, r1), row t seeing the first n(t) of
 * the tile's keys (seen() below). A row sees at least as many keys as the
 * rows before it in its chunk, so those that see any are a suffix. */
typedef struct ring_tile {
    int64_t rs, r1, u0, w;
    int j;
} ring_tile;

static ring_tile tile_at(const ring_job *jb, int64_t r0, int64_t r1, int j, int64_t u0, int64_t n) {
    ring_tile tl = {.rs = r0, .r1 = r1, .u0 = u0, .w = n - u0 < KEYS ? n - u0 : KEYS, .j = j};
    while (visible(jb, tl.rs, j) <= u0) tl.rs++;
    return tl;
}

static int64_t seen(const ring_job *jb, const ring_tile *tl, int64_t t) {
    const int64_t n = visible(jb, t, tl->j) - tl->u0;
    return n < tl->w ? n : tl->w;
}

/* The end of the row tile starting at r0: ROWS rows, or fewer at the end
 * of r0's chunk (a tile's rows share their chunk's visibility). */
static int64_t tile_end(int64_t r0, int64_t T) {
    const int64_t c = T / 2, end = r0 < c ? c : T;
    return r0 + ROWS < end ? r0 + ROWS : end;
}

/* One row's scores s[0, w) of a key tile, the first n seen: into
 * probabilities exp(s − the new maximum), zero after n, merged into the
 * row's running maximum, sum and output (scaled by exp(old − new)). */
PLAIT_SIMD_CLONES static void merge_row(float *s, int64_t n, int64_t w, float *mx, float *l, float *o, int64_t HS) {
    const float tmax = plait_max(s, n), nmax = tmax > *mx ? tmax : *mx;
    const float keep = *mx == -INFINITY ? 0.0f : plait_expf(*mx - nmax); /* an empty row has nothing to keep */
    for (int64_t u = 0; u < n; u++) s[u] = plait_expf(s[u] - nmax);
    if (n < w) memset(s + n, 0, (size_t)(w - n) * sizeof *s);
    for (int64_t i = 0; i < HS; i++) o[i] *= keep;
    *l = *l * keep + plait_sum(s, n);
    *mx = nmax;
}

static void forward_item(void *ctx, int64_t item) {
    const ring_job *jb = ctx;
    const int64_t T = jb->T, HS = jb->HS, c = T / 2, W = jb->W, OW = jb->NH * HS, ks = jb->kv_stride;
    const int64_t b = item / jb->NH, h = item % jb->NH, kh = h / (jb->NH / jb->NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    const float *q = jb->qkv + b * T * W + h * HS;
    float *o = jb->acc + b * T * OW + h * HS, *mx = jb->mx + item * T, *l = jb->l + item * T;
    float s[ROWS * KEYS];
    if (jb->blk->first)
        for (int64_t t = 0; t < T; t++) {
            mx[t] = -INFINITY, l[t] = 0.0f;
            memset(o + t * OW, 0, (size_t)HS * sizeof *o);
        }
    for (int64_t r0 = 0, r1; r0 < T; r0 = r1) {
        r1 = tile_end(r0, T);
        for (int j = 0; j < 2; j++) {
            const int64_t n = visible(jb, r1 - 1, j);
            const float *kb = jb->kv + (b * T + j * c) * ks + kh * HS, *vb = kb + jb->NKV * HS;
            for (int64_t u0 = 0; u0 < n; u0 += KEYS) {
                const ring_tile tl = tile_at(jb, r0, r1, j, u0, n);
                const int64_t rows = r1 - tl.rs;
                plait_k_gemm_here(0, 1, rows, tl.w, HS, scale, q + tl.rs * W, W, kb + u0 * ks, ks, 0.0f, s, KEYS);
                for (int64_t t = tl.rs; t < r1; t++)
                    merge_row(s + (t - tl.rs) * KEYS, seen(jb, &tl, t), tl.w, mx + t, l + t, o + t * OW, HS);
                plait_k_gemm_here(0, 0, rows, HS, tl.w, 1.0f, s, KEYS, vb + u0 * ks, ks, 1.0f, o + tl.rs * OW, OW);
            }
        }
    }
}

void plait_k_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                    int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                    const plait_ring_block *blk) {
    plait_kernels_ensure_init();
    ring_job jb = {.blk = blk, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .W = (NH + 2 * NKV) * HS};
    jb.kv_stride = kv_stride, jb.qkv = qkv, jb.kv = kv, jb.acc = out, jb.mx = mx, jb.l = l;
    plait_pool_run(B * NH, forward_item, &jb);
}

void plait_k_ring_attention_finish(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH,
                                   int64_t HS) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t row = (b * NH + h) * T + t;
                float *o = out + (b * T + t) * NH * HS + h * HS;
                const float inv = 1.0f / l[row];
                for (int64_t i = 0; i < HS; i++) o[i] *= inv;
                mx[row] += logf(l[row]);
            }
}

/* One row's scores p and dO·Vᵀ g over a key tile's w keys, the first n
 * seen: p -> exp(p − lse), g -> p·(g − dd) (dd = Σ dout·out, softmax's
 * backward term over the row's keys in every block), both zero after n. */
PLAIT_SIMD_CLONES static void grad_row(float *restrict p, float *restrict g, int64_t n, int64_t w, float lse,
                                       float dd) {
    for (int64_t u = 0; u < n; u++) {
        p[u] = plait_expf(p[u] - lse);
        g[u] = p[u] * (g[u] - dd);
    }
    if (n < w) {
        memset(p + n, 0, (size_t)(w - n) * sizeof *p);
        memset(g + n, 0, (size_t)(w - n) * sizeof *g);
    }
}

/* Query head h's share of the block's gradients (backward_item's): its
 * row tiles in order, each over chunk 0's key tiles then chunk 1's. */
static void backward_head(const ring_job *jb, int64_t b, int64_t h, int64_t kh, float *p, float *g) {
    const int64_t T = jb->T, HS = jb->HS, c = T / 2, W = jb->W, OW = jb->NH * HS, ks = jb->kv_stride;
    const int64_t KVW = 2 * jb->NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *q = jb->qkv + b * T * W + h * HS, *go = jb->dout + b * T * OW + h * HS;
    const float *out = jb->out + b * T * OW + h * HS, *lse = jb->lse + (b * jb->NH + h) * T;
    float *dq = jb->dqkv + b * T * W + h * HS, dd[ROWS];
    for (int64_t r0 = 0, r1; r0 < T; r0 = r1) {
        r1 = tile_end(r0, T);
        for (int64_t t = r0; t < r1; t++) dd[t - r0] = plait_dot(go + t * OW, out + t * OW, HS);
        for (int j = 0; j < 2; j++) {
            const int64_t n = visible(jb, r1 - 1, j);
            const float *kb = jb->kv + (b * T + j * c) * ks + kh * HS, *vb = kb + jb->NKV * HS;
            float *dkb = jb->dkv + (b * T + j * c) * KVW + kh * HS, *dvb = dkb + jb->NKV * HS;
            for (int64_t u0 = 0; u0 < n; u0 += KEYS) {
                const ring_tile tl = tile_at(jb, r0, r1, j, u0, n);
                const int64_t rs = tl.rs, rows = r1 - rs, w = tl.w;
                plait_k_gemm_here(0, 1, rows, w, HS, scale, q + rs * W, W, kb + u0 * ks, ks, 0.0f, p, KEYS);
                plait_k_gemm_here(0, 1, rows, w, HS, 1.0f, go + rs * OW, OW, vb + u0 * ks, ks, 0.0f, g, KEYS);
                for (int64_t t = rs; t < r1; t++)
                    grad_row(p + (t - rs) * KEYS, g + (t - rs) * KEYS, seen(jb, &tl, t), w, lse[t], dd[t - r0]);
                plait_k_gemm_here(0, 0, rows, HS, w, scale, g, KEYS, kb + u0 * ks, ks, 1.0f, dq + rs * W, W);
                plait_k_gemm_here(1, 0, w, HS, rows, 1.0f, p, KEYS, go + rs * OW, OW, 1.0f, dvb + u0 * KVW, KVW);
                plait_k_gemm_here(1, 0, w, HS, rows, scale, g, KEYS, q + rs * W, W, 1.0f, dkb + u0 * KVW, KVW);
            }
        }
    }
}

/* One (batch, key/value head): dq of its query heads' rows and dK|dV of
 * its keys, the query heads in order. */
static void backward_item(void *ctx, int64_t item) {
    const ring_job *jb = ctx;
    const int64_t group = jb->NH / jb->NKV, b = item / jb->NKV, kh = item % jb->NKV;
    float p[ROWS * KEYS], g[ROWS * KEYS];
    for (int64_t h = kh * group; h < (kh + 1) * group; h++) backward_head(jb, b, h, kh, p, g);
}

void plait_k_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                     const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                     int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk) {
    plait_kernels_ensure_init();
    ring_job jb = {.blk = blk, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .W = (NH + 2 * NKV) * HS};
    jb.kv_stride = kv_stride, jb.qkv = qkv, jb.kv = kv;
    jb.dout = dout, jb.out = out, jb.lse = lse, jb.dqkv = dqkv, jb.dkv = dkv;
    plait_pool_run(B * NKV, backward_item, &jb);
}

void plait_k_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                       int64_t width) {
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)width * sizeof *dst);
}

/* ---- on bf16 activations (plait/kernels.h, ABI 1.25) ------------------------
 * The contract is the float32 entries' bits on the widened tensors, and
 * what a block accumulates is float32 already: q|k|v, the block's K|V, out
 * and dout are widened whole into the caller's scratch (exact, in the
 * pool) and the entries above run on them. */

/* n bf16 values widened into the caller's scratch slot */
static const float *widened(int slot, const plait_bf16 *src, size_t n) {
    float *dst = plait_k_scratch_or_die(slot, n, "ring attention on bf16");
    plait_k_from_bf16(dst, src, n);
    return dst;
}

/* the block's K|V rows: the last starts (B·T − 1) strides in */
static size_t kv_span(int64_t kv_stride, int64_t B, int64_t T, int64_t NKV, int64_t HS) {
    return (size_t)((B * T - 1) * kv_stride + 2 * NKV * HS);
}

void plait_k_ring_attention_forward_bf16(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                         int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                         const plait_ring_block *blk) {
    const float *q = widened(PLAIT_K_SLOT_ROWS0, qkv, (size_t)(B * T * (NH + 2 * NKV) * HS));
    const float *k = widened(PLAIT_K_SLOT_ROWS1, kv, kv_span(kv_stride, B, T, NKV, HS));
    plait_k_ring_attention_forward(out, mx, l, q, k, kv_stride, B, T, NH, NKV, HS, blk);
}

void plait_k_ring_attention_backward_bf16(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                          int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                          const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                          const plait_ring_block *blk) {
    const size_t n = (size_t)(B * T * NH * HS);
    const float *q = widened(PLAIT_K_SLOT_ROWS0, qkv, (size_t)(B * T * (NH + 2 * NKV) * HS));
    const float *k = widened(PLAIT_K_SLOT_ROWS1, kv, kv_span(kv_stride, B, T, NKV, HS));
    const float *d = widened(PLAIT_K_SLOT_ROWS2, dout, n), *o = widened(PLAIT_K_SLOT_ROWS3, out, n);
    plait_k_ring_attention_backward(dqkv, dkv, q, k, kv_stride, d, o, lse, B, T, NH, NKV, HS, blk);
}
