/*
 * Ring attention's block kernels on the CPU (plait/kernels.h, ABI 1.18):
 * flash attention's arithmetic in float32 with a fixed order. A query
 * row folds in one block of keys at a time, keys in sequence order
 * within the block, TILE of them scored at once into the row's running
 * maximum, sum and weighted values (the log-sum-exp merge). The backward
 * rebuilds each probability from the forward's log-sum-exp. The model's
 * ring (core/model/ring_attention.c) decides the order of the blocks.
 *
 * Work items are (batch, head) in the forward and (batch, key/value head)
 * in the backward: an item writes only its own rows, so the items run on
 * any threads and any thread count gives the same bits. The items are
 * compiled for AVX-512, AVX2 and the baseline and chosen at run time
 * (simd_clones.h); their sums are written so that each clone adds in the
 * same order (dot's eight lanes), so the bits do not depend on the ISA.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_pool.h"
#include "kernels/simd_clones.h"

enum { TILE = 128 }; /* keys scored at once: a row's scores stay on the stack */

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

/* a·b over n: eight running sums, lane j taking the elements j mod 8, then
 * summed pairwise in a fixed order (and the tail last), so the compiler
 * keeps the lanes in one vector register while the bits depend on n
 * alone, not on the ISA the clone runs on */
static inline float dot(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

/* A pass's shapes and inputs; each entry adds its own buffers. */
static ring_job job_of(const plait_ring_block *blk, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t kv_stride,
                       const float *qkv, const float *kv) {
    return (ring_job){.blk = blk,
                      .T = T,
                      .NH = NH,
                      .NKV = NKV,
                      .HS = HS,
                      .W = (NH + 2 * NKV) * HS,
                      .kv_stride = kv_stride,
                      .qkv = qkv,
                      .kv = kv};
}

PLAIT_SIMD_CLONES static void forward_item(void *ctx, int64_t item) {
    const ring_job *jb = ctx;
    const int64_t T = jb->T, HS = jb->HS, c = T / 2, group = jb->NH / jb->NKV;
    const int64_t b = item / jb->NH, h = item % jb->NH, kh = h / group;
    const float scale = 1.0f / sqrtf((float)HS);
    float sc[TILE];
    for (int64_t t = 0; t < T; t++) {
        const float *q = jb->qkv + (b * T + t) * jb->W + h * HS;
        float *o = jb->acc + (b * T + t) * jb->NH * HS + h * HS;
        const int64_t row = (b * jb->NH + h) * T + t;
        float *mx = jb->mx + row, *l = jb->l + row;
        if (jb->blk->first) {
            *mx = -INFINITY, *l = 0.0f;
            memset(o, 0, (size_t)HS * sizeof *o);
        }
        for (int j = 0; j < 2; j++) {
            const int64_t n = visible(jb, t, j);
            const float *kb = jb->kv + (b * T + j * c) * jb->kv_stride + kh * HS, *vb = kb + jb->NKV * HS;
            for (int64_t u0 = 0; u0 < n; u0 += TILE) {
                const int64_t w = n - u0 < TILE ? n - u0 : TILE;
                float tmax = -INFINITY;
                for (int64_t u = 0; u < w; u++) {
                    sc[u] = dot(q, kb + (u0 + u) * jb->kv_stride, HS) * scale;
                    if (sc[u] > tmax) tmax = sc[u];
                }
                const float nmax = tmax > *mx ? tmax : *mx;
                const float keep = expf(*mx - nmax); /* 0 while the row is empty (-inf) */
                for (int64_t i = 0; i < HS; i++) o[i] *= keep;
                float sum = 0.0f;
                for (int64_t u = 0; u < w; u++) {
                    const float p = expf(sc[u] - nmax);
                    const float *v = vb + (u0 + u) * jb->kv_stride;
                    sum += p;
                    for (int64_t i = 0; i < HS; i++) o[i] += p * v[i];
                }
                *l = *l * keep + sum;
                *mx = nmax;
            }
        }
    }
}

void plait_k_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                    int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                    const plait_ring_block *blk) {
    ring_job jb = job_of(blk, T, NH, NKV, HS, kv_stride, qkv, kv);
    jb.acc = out, jb.mx = mx, jb.l = l;
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

/* One (query, key) pair's gradients: dV += p·dout, dQ += ds·K, dK += ds·Q.
 * The three rows never overlap (dV and dK are distinct rows of the dK|dV
 * block, dQ a row of dqkv), which restrict tells the compiler so that it
 * keeps them in vector registers. */
static inline void grads(float *restrict dv, float *restrict dq, float *restrict dk, const float *restrict go,
                         const float *restrict k, const float *restrict q, float p, float ds, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dv[i] += p * go[i];
        dq[i] += ds * k[i];
        dk[i] += ds * q[i];
    }
}

PLAIT_SIMD_CLONES static void backward_item(void *ctx, int64_t item) {
    const ring_job *jb = ctx;
    const int64_t T = jb->T, HS = jb->HS, c = T / 2, group = jb->NH / jb->NKV, KVW = 2 * jb->NKV * HS;
    const int64_t b = item / jb->NKV, kh = item % jb->NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int64_t h = kh * group; h < (kh + 1) * group; h++)
        for (int64_t t = 0; t < T; t++) {
            const float *q = jb->qkv + (b * T + t) * jb->W + h * HS;
            float *dq = jb->dqkv + (b * T + t) * jb->W + h * HS;
            const int64_t at = (b * T + t) * jb->NH * HS + h * HS;
            const float *go = jb->dout + at;
            const int64_t row = (b * jb->NH + h) * T + t;
            const float dd = dot(go, jb->out + at, HS); /* softmax's backward term, Σ dout·out */
            for (int j = 0; j < 2; j++) {
                const int64_t n = visible(jb, t, j);
                const float *kb = jb->kv + (b * T + j * c) * jb->kv_stride + kh * HS, *vb = kb + jb->NKV * HS;
                float *dkb = jb->dkv + (b * T + j * c) * KVW + kh * HS, *dvb = dkb + jb->NKV * HS;
                for (int64_t u = 0; u < n; u++) {
                    const float p = expf(dot(q, kb + u * jb->kv_stride, HS) * scale - jb->lse[row]);
                    const float ds = p * (dot(go, vb + u * jb->kv_stride, HS) - dd) * scale;
                    grads(dvb + u * KVW, dq, dkb + u * KVW, go, kb + u * jb->kv_stride, q, p, ds, HS);
                }
            }
        }
}

void plait_k_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                     const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                     int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk) {
    ring_job jb = job_of(blk, T, NH, NKV, HS, kv_stride, qkv, kv);
    jb.dout = dout, jb.out = out, jb.lse = lse, jb.dqkv = dqkv, jb.dkv = dkv;
    plait_pool_run(B * NKV, backward_item, &jb);
}

void plait_k_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                       int64_t width) {
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)width * sizeof *dst);
}
