/*
 * Kernel cases of the Llama family's entries (plait/kernels.h, ABI 1.10):
 * RMSNorm, the rotary rotation, SwiGLU's gate and grouped-query attention,
 * each against the core's CPU kernel in every precision (they are float32
 * entries: element-wise results within 1e-5, the attention's within the
 * precision's product tolerance), outputs poisoned with NaN, each case
 * run twice on the device and required bit-identical (kcase.h).
 */

#include "device/kc_shared.h"
#include "device/kcase.h"

#define B 2
#define T 67 /* two row tiles of the attention, the second of 3 rows */
#define BT (B * T)

/* RMSNorm at width Cw: forward; backward with the residual's gradient
 * beside dinp, in place and absent; the two halves apart give one call's
 * bits. */
static void rmsnorm_at(kc_ctx *x, int64_t Cw) {
    KC_NEED(x, rmsnorm_forward);
    const float eps = 1e-5f;
    float *inp = kc_rand(x, BT * Cw, -2, 3), *w = kc_rand(x, Cw, 0.5f, 1.5f);
    float *out = kc_out(x, BT * Cw), *rstd = kc_out(x, BT), *out2 = kc_out(x, BT * Cw);
    x->k->rmsnorm_forward(out, rstd, inp, w, BT, Cw, eps);
    kc_result(x, "forward out", out, BT * Cw, KC_ELEMWISE);
    kc_result(x, "forward rstd", rstd, BT, KC_ELEMWISE);
    x->k->rmsnorm_forward(out2, NULL, inp, w, BT, Cw, eps);
    kc_same(x, "forward without rstd: the same out", out, out2, BT * Cw * sizeof *out);
    float *dout = kc_rand(x, BT * Cw, -1, 1), *dres = kc_rand(x, BT * Cw, -1, 1), *dinp = kc_out(x, BT * Cw);
    float *dw = kc_rand(x, Cw, -1, 1), *dw2 = kc_out(x, Cw), *parts = kc_out(x, BT * Cw);
    x->k->copy(dw2, dw, (size_t)Cw);
    x->k->rmsnorm_backward(dinp, dres, dw, dout, inp, w, rstd, BT, Cw);
    kc_result(x, "backward dinp = dres + the input gradient", dinp, BT * Cw, KC_ELEMWISE);
    kc_result(x, "backward dweight+=", dw, Cw, KC_ELEMWISE);
    x->k->rmsnorm_backward(parts, dres, NULL, dout, inp, w, rstd, BT, Cw);
    x->k->rmsnorm_backward(NULL, NULL, dw2, dout, inp, NULL, rstd, BT, Cw);
    kc_same(x, "backward dinp: the input half's bits", dinp, parts, BT * Cw * sizeof *dinp);
    kc_same(x, "backward dweight: the weight half's bits", dw, dw2, Cw * sizeof *dw);
    x->k->rmsnorm_backward(dres, dres, NULL, dout, inp, w, rstd, BT, Cw);
    kc_same(x, "backward in place: the same dinp", dres, dinp, BT * Cw * sizeof *dinp);
    float *d0 = kc_out(x, BT * Cw);
    x->k->rmsnorm_backward(d0, NULL, NULL, dout, inp, w, rstd, BT, Cw);
    kc_result(x, "backward dinp without a residual", d0, BT * Cw, KC_ELEMWISE);
}

static void case_rmsnorm(kc_ctx *x) { rmsnorm_at(x, 96); }
/* more columns than a warp's lanes take in one pass, and not a multiple of 4 */
static void case_rmsnorm_wide(kc_ctx *x) { rmsnorm_at(x, 301); }

/* The rotation of 3 query and 1 key heads of size 32 in rows of a wider
 * buffer (as q and k sit in qkv), by angles of positions that are not
 * 0..T-1 (a context-parallel rank's), and back. */
static void case_rope(kc_ctx *x) {
    KC_NEED(x, rope);
    const int64_t HS = 32, heads = 4, stride = (heads + 1) * HS + 8;
    const float *cs = kc_rope_angles(x, T, HS);
    float *buf = kc_rand(x, BT * stride, -2, 2);
    x->k->rope(buf, cs, B, T, stride, heads, HS, 0);
    kc_result(x, "forward (the columns past the heads untouched)", buf, BT * stride, KC_ELEMWISE);
    x->k->rope(buf, cs, B, T, stride, heads, HS, 1);
    kc_result(x, "inverse of the forward", buf, BT * stride, KC_ELEMWISE);
    float *g = kc_rand(x, BT * stride, -1, 1);
    x->k->rope(g, cs, B, T, stride, 1, HS, 1);
    kc_result(x, "inverse, one head", g, BT * stride, KC_ELEMWISE);
}

static void case_swiglu(kc_ctx *x) {
    KC_NEED(x, swiglu_forward);
    const size_t n = 10007;
    float *gate = kc_rand(x, n, -8, 8), *up = kc_rand(x, n, -2, 2), *out = kc_out(x, n);
    x->k->swiglu_forward(out, gate, up, n);
    kc_result(x, "forward", out, n, KC_ELEMWISE);
    float *dout = kc_rand(x, n, -1, 1), *dg = kc_out(x, n), *du = kc_out(x, n);
    x->k->swiglu_backward(dg, du, dout, gate, up, n);
    kc_result(x, "backward dgate", dg, n, KC_ELEMWISE);
    kc_result(x, "backward dup", du, n, KC_ELEMWISE);
    float *dg2 = kc_out(x, n);
    x->k->swiglu_backward(dg2, dout, dout, gate, up, n); /* dup == dout */
    kc_result(x, "backward dup in place", dout, n, KC_ELEMWISE);
    x->k->swiglu_forward(up, gate, up, n); /* out == up */
    kc_result(x, "forward in place", up, n, KC_ELEMWISE);
}

/* Grouped-query attention on one shape: out and lse, dqkv, against the
 * CPU's. */
static void gqa_shape(kc_ctx *x, const char *const names[3], int64_t b, int64_t t, int64_t nh, int64_t nkv,
                      int64_t hs) {
    const int64_t row = (nh + 2 * nkv) * hs, bt = b * t;
    const size_t nlse = (size_t)(b * nh * t), nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    float *qkv = kc_rand(x, (size_t)(bt * row), -1, 1), *out = kc_out(x, (size_t)(bt * nh * hs));
    float *lse = kc_out(x, nlse), *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_gqa_forward(out, lse, scratch, qkv, b, t, nh, nkv, hs);
    kc_result(x, names[0], out, (size_t)(bt * nh * hs), KC_GEMM);
    kc_result(x, names[1], lse, nlse, KC_GEMM);
    float *dout = kc_rand(x, (size_t)(bt * nh * hs), -1, 1), *dqkv = kc_out(x, (size_t)(bt * row));
    x->k->attention_gqa_backward(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hs);
    kc_result(x, names[2], dqkv, (size_t)(bt * row), KC_GEMM);
}

/* Two query heads a key/value head (llama-tiny's), multi-query (one
 * key/value head for 4, a head size of no specialised kernel, three
 * tiles), and NKV = NH, which must give the fused entries' bits. */
static void case_attention_gqa(kc_ctx *x) {
    KC_NEED(x, attention_gqa_forward);
    static const char *const a[3] = {"NH4 NKV2 HS32 T67 out", "NH4 NKV2 HS32 T67 lse", "NH4 NKV2 HS32 T67 dqkv"};
    static const char *const m[3] = {"NH4 NKV1 HS24 T130 out", "NH4 NKV1 HS24 T130 lse", "NH4 NKV1 HS24 T130 dqkv"};
    gqa_shape(x, a, B, T, 4, 2, 32);
    gqa_shape(x, m, 1, 130, 4, 1, 24);
    const int64_t nh = 3, hs = 32, c = nh * hs;
    float *qkv = kc_rand(x, BT * 3 * c, -1, 1), *o1 = kc_out(x, BT * c), *o2 = kc_out(x, BT * c);
    float *l1 = kc_out(x, B * nh * T), *l2 = kc_out(x, B * nh * T);
    const size_t nscr = x->k->attention_fused_scratch(B, T, nh, hs);
    float *s1 = kc_out(x, nscr ? nscr : 1), *s2 = kc_out(x, nscr ? nscr : 1);
    x->k->attention_gqa_forward(o1, l1, s1, qkv, B, T, nh, nh, hs);
    x->k->attention_fused_forward(o2, l2, s2, qkv, B, T, nh, hs);
    kc_same(x, "NKV = NH: the fused forward's out", o1, o2, BT * c * sizeof *o1);
    kc_same(x, "NKV = NH: the fused forward's lse", l1, l2, B * nh * T * sizeof *l1);
    float *dout = kc_rand(x, BT * c, -1, 1), *d1 = kc_out(x, BT * 3 * c), *d2 = kc_out(x, BT * 3 * c);
    x->k->attention_gqa_backward(d1, s1, dout, qkv, o1, l1, B, T, nh, nh, hs);
    x->k->attention_fused_backward(d2, s2, dout, qkv, o2, l2, B, T, nh, hs);
    kc_same(x, "NKV = NH: the fused backward's dqkv", d1, d2, BT * 3 * c * sizeof *d1);
}

const kc_named kc_llama_cases[] = {
    {"rmsnorm", case_rmsnorm}, {"rmsnorm_wide", case_rmsnorm_wide},   {"rope", case_rope},
    {"swiglu", case_swiglu},   {"attention_gqa", case_attention_gqa},
};
const size_t kc_llama_count = sizeof kc_llama_cases / sizeof kc_llama_cases[0];
