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
 * bit, as the GPT's bf16 attention is; and ring attention's bf16 block
 * entries (ABI 1.25) against the float32 ones. Run by test_cuda_kernels
 * in bf16 mode.
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

/* Ring attention on bf16 activations (ABI 1.25): rank 1 of a cp 2 ring
 * (query chunks 1 and 2 of 4) folds in its own block, read from
 * q|k|v's columns, then rank 0's packed (chunks 0 and 3), grouped-query;
 * the output float32 after ring_attention_finish, the backward given a
 * bf16 output of its own. The running rows,
 * lse and the gradients (float32) against the CPU's within 1e-5, and
 * against the same device's float32 entries on the widened values bit
 * for bit (the entries' contract). */
#define RING_B 2
#define RING_T 16
#define RING_NH 4
#define RING_NKV 2
#define RING_HS 8
#define RING_W ((RING_NH + 2 * RING_NKV) * RING_HS)
#define RING_KVW (2 * RING_NKV * RING_HS)

static const plait_ring_block ring_blk[2] = {{.q_chunk = {1, 2}, .k_chunk = {1, 2}, .first = 1},
                                             {.q_chunk = {1, 2}, .k_chunk = {0, 3}, .first = 0}};

/* Block i's K|V: the own block in q|k|v's columns, the other packed
 * (elements of es bytes), and its row stride. */
static const void *ring_block(int i, const void *qkv, const void *kv, size_t es, int64_t *stride) {
    *stride = i ? RING_KVW : RING_W;
    return i ? kv : (const char *)qkv + (size_t)(RING_NH * RING_HS) * es;
}

/* The two blocks folded in and finished, by the bf16 entries (qkv and kv
 * plait_bf16) or the float32 ones. */
static void ring_fwd(kc_ctx *x, int bf16, float *out, float *lse, float *l, const void *qkv, const void *kv) {
    for (int i = 0; i < 2; i++) {
        int64_t st;
        const void *blk = ring_block(i, qkv, kv, bf16 ? sizeof(plait_bf16) : sizeof(float), &st);
        if (bf16)
            x->k->ring_attention_forward_bf16(out, lse, l, qkv, blk, st, RING_B, RING_T, RING_NH, RING_NKV, RING_HS,
                                              &ring_blk[i]);
        else
            x->k->ring_attention_forward(out, lse, l, qkv, blk, st, RING_B, RING_T, RING_NH, RING_NKV, RING_HS,
                                         &ring_blk[i]);
    }
    x->k->ring_attention_finish(out, lse, l, RING_B, RING_T, RING_NH, RING_HS);
}

/* dq (over both blocks) and each block's dK|dV, from zero. */
static void ring_bwd(kc_ctx *x, int bf16, float *dq, float *const dkv[2], const void *qkv, const void *kv,
                     const void *dout, const void *out, const float *lse) {
    x->k->zero(dq, (size_t)(RING_B * RING_T * RING_W));
    for (int i = 0; i < 2; i++) {
        int64_t st;
        const void *blk = ring_block(i, qkv, kv, bf16 ? sizeof(plait_bf16) : sizeof(float), &st);
        x->k->zero(dkv[i], (size_t)(RING_B * RING_T * RING_KVW));
        if (bf16)
            x->k->ring_attention_backward_bf16(dq, dkv[i], qkv, blk, st, dout, out, lse, RING_B, RING_T, RING_NH,
                                               RING_NKV, RING_HS, &ring_blk[i]);
        else
            x->k->ring_attention_backward(dq, dkv[i], qkv, blk, st, dout, out, lse, RING_B, RING_T, RING_NH, RING_NKV,
                                          RING_HS, &ring_blk[i]);
    }
}

static void case_ring_attention_bf16(kc_ctx *x) {
    KC_NEED(x, ring_attention_forward_bf16);
    KC_NEED(x, ring_attention_backward_bf16);
    const size_t bt = RING_B * RING_T, nq = bt * RING_W, nkv = bt * RING_KVW, no = bt * RING_NH * RING_HS,
                 nrow = RING_B * RING_NH * RING_T;
    plait_bf16 *qkv = kc_rand_bf16(x, nq, -1, 1), *kv = kc_rand_bf16(x, nkv, -1, 1), *dout = kc_rand_bf16(x, no, -1, 1);
    float *out = kc_out(x, no), *lse = kc_out(x, nrow), *l = kc_out(x, nrow), *dq = kc_out(x, nq);
    float *const dkv[2] = {kc_out(x, nkv), kc_out(x, nkv)};
    /* the backward's out drawn in bf16, not rounded from this forward's:
     * where a float32 output lies nearer a bf16 rounding boundary than the
     * device's and the CPU's outputs differ (rare, but a seed finds one),
     * the two roundings differ by a bf16 step, which the float32
     * gradients' 1e-5 sees (the backward reads out only through each row's
     * sum of dout x out) */
    plait_bf16 *ob = kc_rand_bf16(x, no, -1, 1);
    ring_fwd(x, 1, out, lse, l, qkv, kv);
    ring_bwd(x, 1, dq, dkv, qkv, kv, dout, ob, lse);
    kc_result(x, "ring bf16 out (float32, before rounding)", out, no, KC_ELEMWISE);
    kc_result(x, "ring bf16 lse", lse, nrow, KC_ELEMWISE);
    kc_result(x, "ring bf16 dqkv (float32)", dq, nq, KC_ELEMWISE);
    kc_result(x, "ring bf16 dK|dV of the own block", dkv[0], nkv, KC_ELEMWISE);
    kc_result(x, "ring bf16 dK|dV of the other block", dkv[1], nkv, KC_ELEMWISE);
    float *outf = kc_out(x, no), *lsef = kc_out(x, nrow), *lf = kc_out(x, nrow), *dqf = kc_out(x, nq);
    float *const dkvf[2] = {kc_out(x, nkv), kc_out(x, nkv)};
    const float *qf = kc_widened(x, qkv, nq), *kvf = kc_widened(x, kv, nkv);
    ring_fwd(x, 0, outf, lsef, lf, qf, kvf);
    ring_bwd(x, 0, dqf, dkvf, qf, kvf, kc_widened(x, dout, no), kc_widened(x, ob, no), lsef);
    kc_same(x, "ring bf16 out: the float32 entries' on the widened values", out, outf, no * sizeof *out);
    kc_same(x, "ring bf16 lse: the float32 entries'", lse, lsef, nrow * sizeof *lse);
    kc_same(x, "ring bf16 dqkv: the float32 entries'", dq, dqf, nq * sizeof *dq);
    kc_same(x, "ring bf16 dK|dV (own block): the float32 entries'", dkv[0], dkvf[0], nkv * sizeof *dq);
    kc_same(x, "ring bf16 dK|dV (other block): the float32 entries'", dkv[1], dkvf[1], nkv * sizeof *dq);
}

const kc_named kc_llama_bf16_cases[] = {
    {"rmsnorm_bf16", case_rmsnorm_bf16},
    {"rmsnorm_bf16_wide", case_rmsnorm_bf16_wide},
    {"rope_bf16", case_rope_bf16},
    {"swiglu_bf16", case_swiglu_bf16},
    {"attention_gqa_bf16", case_attention_gqa_bf16},
    {"attention_gqa_bf16_as_f32", case_attention_gqa_bf16_as_f32},
    {"ring_attention_bf16", case_ring_attention_bf16},
};
const size_t kc_llama_bf16_count = sizeof kc_llama_bf16_cases / sizeof kc_llama_bf16_cases[0];
