/*
 * Kernel cases of the Llama family's bf16-activation entries
 * (plait/kernels.h, ABI 1.22): RMSNorm with a bf16 output and output
 * gradient, the rotation of bf16 q and k, SwiGLU on the gate and up
 * projections' outputs side by side, and grouped-query attention in bf16,
 * each against kref_bf16.h's reference (the float32 entry on the widened
 * inputs, outputs rounded once) within the bf16 row kernels' bounds
 * (cases_bf16_rows.c: a bf16 result within 2e-2, a float32 one from bf16
 * inputs within the float32 kernels' 1e-5); the attention also against
 * the float32 grouped-query entries on the same values, rounded, bit for
 * bit, as the GPT's bf16 attention is. Run by test_cuda_kernels in bf16
 * mode.
 */

#include "device/kc_shared.h"
#include "device/kcase.h"

#define B 2
#define T 67 /* two row tiles of the attention, the second of 3 rows */
#define BT (B * T)

/* RMSNorm at width Cw: the bf16 output rounded once, rstd float32; the
 * backward from a bf16 dout with the residual's gradient beside dinp, in
 * place and absent, its two halves apart giving one call's bits. */
static void rmsnorm_at(kc_ctx *x, int64_t Cw) {
    KC_NEED(x, rmsnorm_forward_bf16);
    KC_NEED(x, rmsnorm_backward_bf16);
    const float eps = 1e-5f;
    float *inp = kc_rand(x, BT * Cw, -2, 3), *w = kc_rand(x, Cw, 0.5f, 1.5f), *rstd = kc_out(x, BT);
    plait_bf16 *out = kc_out_bf16(x, BT * Cw);
    x->k->rmsnorm_forward_bf16(out, rstd, inp, w, BT, Cw, eps);
    kc_result(x, "forward out", out, BT * Cw, KC_BF16);
    kc_result(x, "forward rstd", rstd, BT, KC_ELEMWISE);
    plait_bf16 *dout = kc_rand_bf16(x, BT * Cw, -1, 1);
    float *dres = kc_rand(x, BT * Cw, -1, 1), *dinp = kc_out(x, BT * Cw), *parts = kc_out(x, BT * Cw);
    float *dw = kc_rand(x, Cw, -1, 1), *dw2 = kc_out(x, Cw);
    x->k->copy(dw2, dw, (size_t)Cw);
    x->k->rmsnorm_backward_bf16(dinp, dres, dw, dout, inp, w, rstd, BT, Cw);
    kc_result(x, "backward dinp = dres + the input gradient", dinp, BT * Cw, KC_ELEMWISE);
    kc_result(x, "backward dweight+=", dw, Cw, KC_ELEMWISE);
    x->k->rmsnorm_backward_bf16(parts, dres, NULL, dout, inp, w, rstd, BT, Cw);
    x->k->rmsnorm_backward_bf16(NULL, NULL, dw2, dout, inp, NULL, rstd, BT, Cw);
    kc_same(x, "backward dinp: the input half's bits", dinp, parts, BT * Cw * sizeof *dinp);
    kc_same(x, "backward dweight: the weight half's bits", dw, dw2, Cw * sizeof *dw);
    x->k->rmsnorm_backward_bf16(dres, dres, NULL, dout, inp, w, rstd, BT, Cw);
    kc_same(x, "backward in place: the same dinp", dres, dinp, BT * Cw * sizeof *dinp);
}

static void case_rmsnorm_bf16(kc_ctx *x) { rmsnorm_at(x, 96); }
/* more columns than a warp's lanes take in one pass, and not a multiple of 4 */
static void case_rmsnorm_bf16_wide(kc_ctx *x) { rmsnorm_at(x, 301); }

/* 3 query and 1 key heads of size 32 rotated in rows of a wider bf16
 * buffer (the columns past them untouched), by angles of positions that
 * are not 0..T-1, and back. */
static void case_rope_bf16(kc_ctx *x) {
    KC_NEED(x, rope_bf16);
    const int64_t HS = 32, heads = 4, stride = (heads + 1) * HS + 8;
    const float *cs = kc_rope_angles(x, T, HS);
    plait_bf16 *buf = kc_rand_bf16(x, BT * stride, -2, 2);
    x->k->rope_bf16(buf, cs, B, T, stride, heads, HS, 0);
    kc_result(x, "forward", buf, BT * stride, KC_BF16);
    x->k->rope_bf16(buf, cs, B, T, stride, heads, HS, 1);
    kc_result(x, "inverse of the forward", buf, BT * stride, KC_BF16);
}

/* SwiGLU on gu[BT, 2F] at F = 1000 (not a multiple of 8): out and dgu
 * bf16, rounded once from the float32 formulas. */
static void case_swiglu_bf16(kc_ctx *x) {
    KC_NEED(x, swiglu_forward_bf16);
    KC_NEED(x, swiglu_backward_bf16);
    const int64_t F = 1000;
    plait_bf16 *gu = kc_rand_bf16(x, BT * 2 * F, -8, 8), *out = kc_out_bf16(x, BT * F);
    x->k->swiglu_forward_bf16(out, gu, BT, F);
    kc_result(x, "forward", out, BT * F, KC_BF16);
    plait_bf16 *dout = kc_rand_bf16(x, BT * F, -1, 1), *dgu = kc_out_bf16(x, BT * 2 * F);
    x->k->swiglu_backward_bf16(dgu, dout, gu, BT, F);
    kc_result(x, "backward dgate|dup", dgu, BT * 2 * F, KC_BF16);
}

/* out, lse and dqkv of one grouped-query shape against the reference */
static void gqa_shape(kc_ctx *x, const char *const names[3], int64_t b, int64_t t, int64_t nh, int64_t nkv,
                      int64_t hs) {
    const int64_t row = (nh + 2 * nkv) * hs, bt = b * t;
    const size_t nlse = (size_t)(b * nh * t), nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    plait_bf16 *qkv = kc_rand_bf16(x, (size_t)(bt * row), -1, 1), *out = kc_out_bf16(x, (size_t)(bt * nh * hs));
    float *lse = kc_out(x, nlse), *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_gqa_forward_bf16(out, lse, scratch, qkv, b, t, nh, nkv, hs);
    kc_result(x, names[0], out, (size_t)(bt * nh * hs), KC_BF16);
    kc_result(x, names[1], lse, nlse, KC_BF16);
    plait_bf16 *dout = kc_rand_bf16(x, (size_t)(bt * nh * hs), -1, 1), *dqkv = kc_out_bf16(x, (size_t)(bt * row));
    x->k->attention_gqa_backward_bf16(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hs);
    kc_result(x, names[2], dqkv, (size_t)(bt * row), KC_BF16);
}

/* The bf16 grouped-query entries against the float32 ones on the same
 * values (the bf16 inputs widened; the backward's out the bf16
 * forward's): out and dqkv the float32 results rounded once, lse the
 * same, bit for bit (cases_bf16_rows.c's check of the GPT's). */
static void gqa_as_f32(kc_ctx *x, const char *name, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
    const int64_t bt = b * t;
    const size_t nq = (size_t)(bt * (nh + 2 * nkv) * hs), no = (size_t)(bt * nh * hs), nlse = (size_t)(b * nh * t);
    const size_t nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    plait_bf16 *qkv = kc_rand_bf16(x, nq, -1, 1), *dout = kc_rand_bf16(x, no, -1, 1);
    plait_bf16 *out = kc_out_bf16(x, no), *dqkv = kc_out_bf16(x, nq);
    float *lse = kc_out(x, nlse), *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_gqa_forward_bf16(out, lse, scratch, qkv, b, t, nh, nkv, hs);
    x->k->attention_gqa_backward_bf16(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hs);
    float *qf = kc_widened(x, qkv, nq), *df = kc_widened(x, dout, no), *of = kc_widened(x, out, no);
    float *outf = kc_out(x, no), *lsef = kc_out(x, nlse), *dqf = kc_out(x, nq);
    x->k->attention_gqa_forward(outf, lsef, scratch, qf, b, t, nh, nkv, hs);
    x->k->attention_gqa_backward(dqf, scratch, df, qf, of, lse, b, t, nh, nkv, hs);
    kc_attention_rounded(x, name, out, outf, no, lse, lsef, nlse, dqkv, dqf, nq);
}

/* Two query heads a key/value head (llama-tiny's), multi-query at a head
 * size of no specialised kernel over three tiles, and NKV = NH, which
 * must give the fused bf16 entries' bits. */
static void case_attention_gqa_bf16(kc_ctx *x) {
    KC_NEED(x, attention_gqa_forward_bf16);
    KC_NEED(x, attention_gqa_backward_bf16);
    static const char *const a[3] = {"NH4 NKV2 HS32 T67 out", "NH4 NKV2 HS32 T67 lse", "NH4 NKV2 HS32 T67 dqkv"};
    static const char *const m[3] = {"NH4 NKV1 HS24 T130 out", "NH4 NKV1 HS24 T130 lse", "NH4 NKV1 HS24 T130 dqkv"};
    gqa_shape(x, a, B, T, 4, 2, 32);
    gqa_shape(x, m, 1, 130, 4, 1, 24);
    const int64_t nh = 3, hs = 32, c = nh * hs;
    plait_bf16 *qkv = kc_rand_bf16(x, BT * 3 * c, -1, 1), *o1 = kc_out_bf16(x, BT * c), *o2 = kc_out_bf16(x, BT * c);
    float *l1 = kc_out(x, B * nh * T), *l2 = kc_out(x, B * nh * T);
    const size_t nscr = x->k->attention_fused_scratch(B, T, nh, hs);
    float *s1 = kc_out(x, nscr ? nscr : 1);
    x->k->attention_gqa_forward_bf16(o1, l1, s1, qkv, B, T, nh, nh, hs);
    x->k->attention_fused_forward_bf16(o2, l2, s1, qkv, B, T, nh, hs);
    kc_same(x, "NKV = NH: the fused bf16 forward's out", o1, o2, BT * c * sizeof *o1);
    kc_same(x, "NKV = NH: the fused bf16 forward's lse", l1, l2, B * nh * T * sizeof *l1);
    plait_bf16 *dout = kc_rand_bf16(x, BT * c, -1, 1), *d1 = kc_out_bf16(x, BT * 3 * c),
               *d2 = kc_out_bf16(x, BT * 3 * c);
    x->k->attention_gqa_backward_bf16(d1, s1, dout, qkv, o1, l1, B, T, nh, nh, hs);
    x->k->attention_fused_backward_bf16(d2, s1, dout, qkv, o2, l2, B, T, nh, hs);
    kc_same(x, "NKV = NH: the fused bf16 backward's dqkv", d1, d2, BT * 3 * c * sizeof *d1);
}

static void case_attention_gqa_bf16_as_f32(kc_ctx *x) {
    KC_NEED(x, attention_gqa_forward_bf16);
    KC_NEED(x, attention_gqa_backward_bf16);
    gqa_as_f32(x, "NH4 NKV2 HS24 T67: out, lse, dqkv = the float32 entries' rounded", B, T, 4, 2, 24);
    gqa_as_f32(x, "NH4 NKV1 HS24 T130: out, lse, dqkv = the float32 entries' rounded", 1, 130, 4, 1, 24);
}

const kc_named kc_llama_bf16_cases[] = {
    {"rmsnorm_bf16", case_rmsnorm_bf16},
    {"rmsnorm_bf16_wide", case_rmsnorm_bf16_wide},
    {"rope_bf16", case_rope_bf16},
    {"swiglu_bf16", case_swiglu_bf16},
    {"attention_gqa_bf16", case_attention_gqa_bf16},
    {"attention_gqa_bf16_as_f32", case_attention_gqa_bf16_as_f32},
};
const size_t kc_llama_bf16_count = sizeof kc_llama_bf16_cases / sizeof kc_llama_bf16_cases[0];
