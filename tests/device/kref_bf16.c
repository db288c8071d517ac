/*
 * CPU references of the bf16-activation entries: widen, run the float32
 * entry, round (kref_bf16.h).
 */
#include "device/kref_bf16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static plait_kernels g_f32; /* the float32 entries the references call */

plait_bf16 kref_bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (plait_bf16)((u >> 16) | 0x40u);
    return (plait_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float kref_float_of(plait_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Scratch float copies, one per operand position of an entry, per thread
 * (a test may run ranks as threads). */
#define SLOTS 6
static _Thread_local float *g_buf[SLOTS];
static _Thread_local size_t g_cap[SLOTS];

void kref_bf16_release(void) {
    for (int i = 0; i < SLOTS; i++) {
        free(g_buf[i]);
        g_buf[i] = NULL;
        g_cap[i] = 0;
    }
}

static float *scratch(int slot, size_t n) {
    if (n > g_cap[slot]) {
        free(g_buf[slot]);
        g_buf[slot] = malloc((n ? n : 1) * sizeof(float));
        if (!g_buf[slot]) {
            fprintf(stderr, "FATAL: kref_bf16: out of memory\n");
            exit(1);
        }
        g_cap[slot] = n;
    }
    return g_buf[slot];
}

/* A float copy of n bf16 values in scratch `slot`; NULL stays NULL. */
static float *widen(int slot, const plait_bf16 *h, size_t n) {
    if (!h) return NULL;
    float *f = scratch(slot, n);
    for (size_t i = 0; i < n; i++) f[i] = kref_float_of(h[i]);
    return f;
}

static void round_into(plait_bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kref_bf16_of(src[i]);
}

static void r_to_bf16(plait_bf16 *dst, const float *src, size_t n) { round_into(dst, src, n); }
static void r_from_bf16(float *dst, const plait_bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kref_float_of(src[i]);
}

static void r_layernorm_forward(plait_bf16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                                const float *bias, int64_t BT, int64_t C) {
    float *o = scratch(0, (size_t)(BT * C));
    g_f32.layernorm_forward(o, mean, rstd, inp, weight, bias, BT, C);
    round_into(out, o, (size_t)(BT * C));
}

static void r_matmul_forward(plait_bf16 *out, const plait_bf16 *inp, const plait_bf16 *weight,
                             const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    const float *i = widen(1, inp, (size_t)(BT * C)), *w = widen(2, weight, (size_t)(OC * C)),
                *b = widen(3, bias, (size_t)OC);
    float *o = scratch(0, (size_t)(BT * OC));
    g_f32.matmul_forward(o, i, w, b, BT, C, OC);
    round_into(out, o, (size_t)(BT * OC));
}

static void r_matmul_forward_residual(float *out, const float *res, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const float *bias, int64_t BT, int64_t C, int64_t OC) {
    const float *i = widen(1, inp, (size_t)(BT * C)), *w = widen(2, weight, (size_t)(OC * C));
    if (res)
        g_f32.matmul_forward_residual(out, res, i, w, bias, BT, C, OC);
    else
        g_f32.matmul_forward(out, i, w, bias, BT, C, OC);
}

static void r_matmul_forward_gelu(plait_bf16 *out, plait_bf16 *pre, const plait_bf16 *inp, const plait_bf16 *weight,
                                  const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC) {
    const float *i = widen(1, inp, (size_t)(BT * C)), *w = widen(2, weight, (size_t)(OC * C)),
                *b = widen(3, bias, (size_t)OC);
    float *o = scratch(0, (size_t)(BT * OC)), *p = scratch(4, (size_t)(BT * OC));
    g_f32.matmul_forward_gelu(o, p, i, w, b, BT, C, OC);
    round_into(out, o, (size_t)(BT * OC));
    round_into(pre, p, (size_t)(BT * OC));
}

static void r_matmul_backward(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                              const plait_bf16 *inp, const plait_bf16 *weight, int64_t BT, int64_t C, int64_t OC) {
    const float *d = widen(1, dout, (size_t)(BT * OC)), *i = widen(2, inp, (size_t)(BT * C)),
                *w = widen(3, weight, (size_t)(OC * C));
    float *di = dinp ? scratch(0, (size_t)(BT * C)) : NULL;
    g_f32.matmul_backward(di, dweight, dbias, d, i, w, BT, C, OC);
    if (dinp) round_into(dinp, di, (size_t)(BT * C));
}

static void r_matmul_backward_gelu(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                   const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre, int64_t BT,
                                   int64_t C, int64_t OC) {
    const float *d = widen(1, dout, (size_t)(BT * OC)), *i = widen(2, inp, (size_t)(BT * C)),
                *w = widen(3, weight, (size_t)(OC * C)), *p = widen(4, pre, (size_t)(BT * C));
    float *di = dinp ? scratch(0, (size_t)(BT * C)) : NULL;
    g_f32.matmul_backward_gelu(di, dweight, dbias, d, i, w, p, BT, C, OC);
    if (dinp) round_into(dinp, di, (size_t)(BT * C));
}

static void r_attention_fused_forward(plait_bf16 *out, float *lse, float *scratch_, const plait_bf16 *qkv, int64_t B,
                                      int64_t T, int64_t NH, int64_t HS) {
    const size_t n = (size_t)(B * T * NH * HS);
    const float *q = widen(1, qkv, 3 * n);
    float *o = scratch(0, n);
    g_f32.attention_fused_forward(o, lse, scratch_, q, B, T, NH, HS);
    round_into(out, o, n);
}

static void r_attention_fused_backward(plait_bf16 *dqkv, float *scratch_, const plait_bf16 *dout,
                                       const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                       int64_t T, int64_t NH, int64_t HS) {
    const size_t n = (size_t)(B * T * NH * HS);
    const float *d = widen(1, dout, n), *q = widen(2, qkv, 3 * n), *o = widen(3, out, n);
    float *dq = scratch(0, 3 * n);
    g_f32.attention_fused_backward(dq, scratch_, d, q, o, lse, B, T, NH, HS);
    round_into(dqkv, dq, 3 * n);
}

static void r_layernorm_backward_fused(float *dinp, const float *dres, float *dweight, float *dbias,
                                       const plait_bf16 *dout, const float *inp, const float *weight,
                                       const float *mean, const float *rstd, int64_t BT, int64_t C) {
    const float *d = widen(1, dout, (size_t)(BT * C));
    g_f32.layernorm_backward_fused(dinp, dres, dweight, dbias, d, inp, weight, mean, rstd, BT, C);
}

static void r_layernorm_backward_fused_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight,
                                            float *dbias, const plait_bf16 *dout, const float *inp,
                                            const float *weight, const float *mean, const float *rstd, int64_t BT,
                                            int64_t C) {
    r_layernorm_backward_fused(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
    round_into(dinp_bf, dinp, (size_t)(BT * C));
}

static void r_crossentropy_fused(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                 const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                 int64_t n_valid, float scale) {
    const size_t n = (size_t)(BT * Vl);
    float *l = widen(1, logits, n);
    g_f32.crossentropy_fused(losses, lse, loss_sum, dlogits ? l : NULL, l, targets, BT, Vl, n_valid, scale);
    if (dlogits) round_into(dlogits, l, n);
}

static void r_gelu_forward(plait_bf16 *out, const plait_bf16 *inp, size_t n) {
    float *o = widen(1, inp, n);
    g_f32.gelu_forward(o, o, n);
    round_into(out, o, n);
}

/* ---- the Llama family's (ABI 1.22) ---- */

static void r_rmsnorm_forward(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                              int64_t C, float eps) {
    float *o = scratch(0, (size_t)(BT * C));
    g_f32.rmsnorm_forward(o, rstd, inp, weight, BT, C, eps);
    round_into(out, o, (size_t)(BT * C));
}

static void r_rmsnorm_backward(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout, const float *inp,
                               const float *weight, const float *rstd, int64_t BT, int64_t C) {
    g_f32.rmsnorm_backward(dinp, dres, dweight, widen(1, dout, (size_t)(BT * C)), inp, weight, rstd, BT, C);
}

static void r_rope(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                   int64_t HS, int inverse) {
    const size_t n = (size_t)(B * T * row_stride);
    float *f = widen(1, x, n);
    g_f32.rope(f, cs, B, T, row_stride, n_heads, HS, inverse);
    round_into(x, f, n);
}

/* gu's rows split into gate (scratch 1) and up (scratch 2), widened */
static void split_gu(const plait_bf16 *gu, int64_t BT, int64_t F, float **gate, float **up) {
    *gate = scratch(1, (size_t)(BT * F));
    *up = scratch(2, (size_t)(BT * F));
    for (int64_t r = 0; r < BT; r++)
        for (int64_t i = 0; i < F; i++) {
            (*gate)[r * F + i] = kref_float_of(gu[r * 2 * F + i]);
            (*up)[r * F + i] = kref_float_of(gu[r * 2 * F + F + i]);
        }
}

static void r_swiglu_forward(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F) {
    float *gate, *up, *o = scratch(0, (size_t)(BT * F));
    split_gu(gu, BT, F, &gate, &up);
    g_f32.swiglu_forward(o, gate, up, (size_t)(BT * F));
    round_into(out, o, (size_t)(BT * F));
}

static void r_swiglu_backward(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT, int64_t F) {
    float *gate, *up, *dg = scratch(0, (size_t)(BT * F)), *du = scratch(4, (size_t)(BT * F));
    split_gu(gu, BT, F, &gate, &up);
    g_f32.swiglu_backward(dg, du, widen(3, dout, (size_t)(BT * F)), gate, up, (size_t)(BT * F));
    for (int64_t r = 0; r < BT; r++) {
        round_into(dgu + r * 2 * F, dg + r * F, (size_t)F);
        round_into(dgu + r * 2 * F + F, du + r * F, (size_t)F);
    }
}

static void r_attention_gqa_forward(plait_bf16 *out, float *lse, float *scratch_, const plait_bf16 *qkv, int64_t B,
                                    int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    const size_t n = (size_t)(B * T * NH * HS), nqkv = (size_t)(B * T * (NH + 2 * NKV) * HS);
    float *o = scratch(0, n);
    g_f32.attention_gqa_forward(o, lse, scratch_, widen(1, qkv, nqkv), B, T, NH, NKV, HS);
    round_into(out, o, n);
}

static void r_attention_gqa_backward(plait_bf16 *dqkv, float *scratch_, const plait_bf16 *dout, const plait_bf16 *qkv,
                                     const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                     int64_t NKV, int64_t HS) {
    const size_t n = (size_t)(B * T * NH * HS), nqkv = (size_t)(B * T * (NH + 2 * NKV) * HS);
    const float *d = widen(1, dout, n), *q = widen(2, qkv, nqkv), *o = widen(3, out, n);
    float *dq = scratch(0, nqkv);
    g_f32.attention_gqa_backward(dq, scratch_, d, q, o, lse, B, T, NH, NKV, HS);
    round_into(dqkv, dq, nqkv);
}

/* A block's K|V rows widened: B·T rows of stride kv_stride, the last
 * one's K|V alone (the block may be q|k|v's columns, ending with it). */
static const float *widen_block(int slot, const plait_bf16 *kv, int64_t kv_stride, int64_t B, int64_t T, int64_t NKV,
                                int64_t HS) {
    return widen(slot, kv, (size_t)((B * T - 1) * kv_stride + 2 * NKV * HS));
}

static void r_ring_attention_forward(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                     int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                     const plait_ring_block *blk) {
    const float *q = widen(1, qkv, (size_t)(B * T * (NH + 2 * NKV) * HS));
    g_f32.ring_attention_forward(out, mx, l, q, widen_block(2, kv, kv_stride, B, T, NKV, HS), kv_stride, B, T, NH, NKV,
                                 HS, blk);
}

static void r_ring_attention_backward(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                      int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      const plait_ring_block *blk) {
    const size_t n = (size_t)(B * T * NH * HS);
    const float *q = widen(1, qkv, (size_t)(B * T * (NH + 2 * NKV) * HS));
    g_f32.ring_attention_backward(dqkv, dkv, q, widen_block(2, kv, kv_stride, B, T, NKV, HS), kv_stride,
                                  widen(3, dout, n), widen(4, out, n), lse, B, T, NH, NKV, HS, blk);
}

/* ---- the mixture of experts' (ABI 1.29) ---- */

/* Rows the permuted buffers hold: one past the largest row a route names. */
static int64_t routed_rows(const int32_t *row, int64_t N, int64_t k) {
    int64_t rows = 0;
    for (int64_t r = 0; r < N * k; r++)
        if (row[r] + 1 > rows) rows = row[r] + 1;
    return rows;
}

static void r_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x, const int32_t *idx,
                          const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity) {
    float *xf = scratch(0, (size_t)(N * k * C));
    g_f32.moe_permute(row, tok, off, routed, xf, idx, inp, N, E, k, C, capacity);
    round_into(x, xf, (size_t)(off[E] * C));
}

static void r_moe_unpermute(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                            const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    const size_t rows = (size_t)routed_rows(row, N, k);
    g_f32.moe_unpermute(out, res, widen(5, shared, (size_t)(N * C)), widen(1, y, rows * (size_t)C), row, gate, N, k, C);
}

static void r_moe_unpermute_backward(plait_bf16 *dy_rows, double *dgate, const float *dout, const plait_bf16 *y,
                                     const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    const size_t rows = (size_t)routed_rows(row, N, k);
    float *d = scratch(0, rows * (size_t)C);
    g_f32.moe_unpermute_backward(d, dgate, dout, widen(1, y, rows * (size_t)C), row, gate, N, k, C);
    round_into(dy_rows, d, rows * (size_t)C);
}

static void r_moe_permute_backward(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k,
                                   int64_t C) {
    const size_t rows = (size_t)routed_rows(row, N, k);
    g_f32.moe_permute_backward(dinp, widen(1, dx, rows * (size_t)C), row, N, k, C);
}

/* rows of `width` bf16 values `ld` apart, widened and packed */
static float *widen_strided(int slot, const plait_bf16 *h, int64_t rows, int64_t width, int64_t ld) {
    float *f = scratch(slot, (size_t)(rows * width));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < width; i++) f[r * width + i] = kref_float_of(h[r * ld + i]);
    return f;
}

static void r_moe_matmul_forward(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                 const plait_bf16 *bias, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    const int64_t rows = off[E];
    float *o = scratch(0, (size_t)(rows * OC));
    g_f32.moe_matmul_forward(o, widen(1, inp, (size_t)(rows * C)), widen(2, weight, (size_t)(E * OC * C)),
                             widen(3, bias, (size_t)(E * OC)), off, E, C, OC);
    for (int64_t r = 0; r < rows; r++) round_into(out + r * ldo, o + r * OC, (size_t)OC);
}

/* expert by expert, matmul_backward's (or with pre, matmul_backward_gelu's)
 * bits on the widened operands: the float32 grouped entry's contract */
static void r_moe_matmul_backward(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout, int64_t ldo,
                                  const plait_bf16 *inp, const plait_bf16 *weight, const plait_bf16 *pre,
                                  const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    const int64_t rows = off[E];
    const float *d = widen_strided(1, dout, rows, OC, ldo), *i = widen(2, inp, (size_t)(rows * C));
    const float *w = dinp ? widen(3, weight, (size_t)(E * OC * C)) : NULL;
    const float *p = dinp ? widen(4, pre, (size_t)(rows * C)) : NULL;
    float *di = dinp ? scratch(0, (size_t)(rows * C)) : NULL;
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n <= 0) continue;
        float *dw = dweight ? dweight + e * OC * C : NULL, *db = dbias ? dbias + e * OC : NULL;
        const float *we = w ? w + e * OC * C : NULL;
        if (p) g_f32.matmul_backward_gelu(di + r0 * C, dw, db, d + r0 * OC, i + r0 * C, we, p + r0 * C, n, C, OC);
        else g_f32.matmul_backward(di ? di + r0 * C : NULL, dw, db, d + r0 * OC, i + r0 * C, we, n, C, OC);
    }
    if (dinp) round_into(dinp, di, (size_t)(rows * C));
}

void kref_bf16_fill(plait_kernels *t) {
    g_f32 = *t;
    t->struct_size = sizeof *t;
    t->to_bf16 = r_to_bf16;
    t->from_bf16 = r_from_bf16;
    t->layernorm_forward_bf16 = r_layernorm_forward;
    t->matmul_forward_bf16 = r_matmul_forward;
    t->matmul_forward_residual_bf16 = r_matmul_forward_residual;
    t->matmul_forward_gelu_bf16 = r_matmul_forward_gelu;
    t->matmul_backward_bf16 = r_matmul_backward;
    t->matmul_backward_gelu_bf16 = r_matmul_backward_gelu;
    t->attention_fused_forward_bf16 = r_attention_fused_forward;
    t->attention_fused_backward_bf16 = r_attention_fused_backward;
    t->layernorm_backward_fused_bf16 = r_layernorm_backward_fused;
    t->crossentropy_fused_bf16 = r_crossentropy_fused;
    t->gelu_forward_bf16 = r_gelu_forward;
    t->layernorm_backward_fused_bf16_copy = r_layernorm_backward_fused_copy;
    t->rmsnorm_forward_bf16 = r_rmsnorm_forward;
    t->rmsnorm_backward_bf16 = r_rmsnorm_backward;
    t->rope_bf16 = r_rope;
    t->swiglu_forward_bf16 = r_swiglu_forward;
    t->swiglu_backward_bf16 = r_swiglu_backward;
    t->attention_gqa_forward_bf16 = r_attention_gqa_forward;
    t->attention_gqa_backward_bf16 = r_attention_gqa_backward;
    t->ring_attention_forward_bf16 = r_ring_attention_forward;
    t->ring_attention_backward_bf16 = r_ring_attention_backward;
    t->moe_permute_bf16 = r_moe_permute;
    t->moe_unpermute_bf16 = r_moe_unpermute;
    t->moe_unpermute_backward_bf16 = r_moe_unpermute_backward;
    t->moe_permute_backward_bf16 = r_moe_permute_backward;
    t->moe_matmul_forward_bf16 = r_moe_matmul_forward;
    t->moe_matmul_backward_bf16 = r_moe_matmul_backward;
}
