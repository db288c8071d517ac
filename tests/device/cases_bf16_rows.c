/*
 * Kernel cases of the bf16-activation row kernels (plait/kernels.h, ABI
 * 1.8, and 1.9's LayerNorm backward with a bf16 copy): LayerNorm, the fused attention and the fused cross-entropy with
 * bf16 activations, each against kref_bf16.h's reference (the float32
 * entry on the widened inputs, outputs rounded). Run by test_cuda_kernels
 * in bf16 mode.
 */

#include "device/kc_shared.h"
#include "device/kcase.h"

#define BT 134
#define C 96

/* LayerNorm forward at width Cw: the bf16 output is rounded once (KC_BF16);
 * mean and rstd are fp32 from the same fp32 input and arithmetic as the
 * reference's (KC_ELEMWISE). */
static void layernorm_forward_at(kc_ctx *x, int64_t Cw) {
    KC_NEED(x, layernorm_forward_bf16);
    float *inp = kc_rand(x, BT * Cw, -2.0f, 2.0f), *w = kc_rand(x, Cw, 0.5f, 1.5f), *b = kc_rand(x, Cw, -0.5f, 0.5f);
    plait_bf16 *out = kc_out_bf16(x, BT * Cw);
    float *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward_bf16(out, mean, rstd, inp, w, b, BT, Cw);
    kc_result(x, "out", out, BT * Cw, KC_BF16);
    kc_result(x, "mean", mean, BT, KC_ELEMWISE);
    kc_result(x, "rstd", rstd, BT, KC_ELEMWISE);
}

/* C a multiple of 8 (a device's 16-byte path: 8 bf16 a store) */
static void case_layernorm_bf16(kc_ctx *x) { layernorm_forward_at(x, C); }

/* C a multiple of 4 but not of 8: one column a load on the bf16 side */
static void case_layernorm_bf16_narrow(kc_ctx *x) { layernorm_forward_at(x, C + 4); }

/* LayerNorm's fused backward with a bf16 dout at width Cw: the residual's
 * gradient beside dinp, in place (dres == dinp), absent (NULL), without
 * the parameters' gradients, and the parameters' alone. Every output is fp32 computed in fp32 from
 * the bf16 dout widened exactly, the reference's values, so the fp32
 * kernels' bound holds (KC_ELEMWISE), not bf16's. */
static void layernorm_backward_at(kc_ctx *x, int64_t Cw) {
    KC_NEED(x, layernorm_backward_fused_bf16);
    float *inp = kc_rand(x, BT * Cw, -2.0f, 3.0f), *w = kc_rand(x, Cw, 0.5f, 1.5f), *b = kc_rand(x, Cw, -1.0f, 1.0f);
    float *out = kc_out(x, BT * Cw), *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward(out, mean, rstd, inp, w, b, BT, Cw);
    plait_bf16 *dout = kc_rand_bf16(x, BT * Cw, -1.0f, 1.0f);
    float *dres = kc_rand(x, BT * Cw, -1.0f, 1.0f), *dinp = kc_out(x, BT * Cw);
    float *dw = kc_rand(x, Cw, -1.0f, 1.0f), *db = kc_rand(x, Cw, -1.0f, 1.0f);
    float *dw2 = kc_out(x, Cw), *db2 = kc_out(x, Cw), *w0 = kc_out(x, Cw), *dropped = kc_out(x, BT * Cw);
    x->k->copy(dw2, dw, (size_t)Cw);
    x->k->copy(db2, db, (size_t)Cw);
    x->k->layernorm_backward_fused_bf16(dinp, dres, dw, db, dout, inp, w, mean, rstd, BT, Cw);
    kc_result(x, "dinp = dres + the input gradient", dinp, BT * Cw, KC_ELEMWISE);
    /* the parameters' gradients alone, as a split backward's weight half
     * makes them (gpt_bf16.c): a weight of zeros, no residual, the input
     * gradient dropped; they read dout and inp only, so the one call's bits */
    x->k->zero(w0, (size_t)Cw);
    x->k->layernorm_backward_fused_bf16(dropped, NULL, dw2, db2, dout, inp, w0, mean, rstd, BT, Cw);
    kc_same(x, "dweight alone (a weight of zeros): the one call's", dw2, dw, (size_t)Cw * sizeof *dw);
    kc_same(x, "dbias alone: the one call's", db2, db, (size_t)Cw * sizeof *db);
    kc_result(x, "dweight+=", dw, Cw, KC_ELEMWISE);
    kc_result(x, "dbias+=", db, Cw, KC_ELEMWISE);
    x->k->layernorm_backward_fused_bf16(dres, dres, NULL, NULL, dout, inp, w, mean, rstd, BT, Cw);
    kc_same(x, "in place, no parameters: the same dinp", dres, dinp, BT * Cw * sizeof *dinp);
    float *d0 = kc_out(x, BT * Cw);
    x->k->layernorm_backward_fused_bf16(d0, NULL, NULL, NULL, dout, inp, w, mean, rstd, BT, Cw);
    kc_result(x, "dinp without a residual", d0, BT * Cw, KC_ELEMWISE);
}

static void case_layernorm_backward_bf16(kc_ctx *x) { layernorm_backward_at(x, C); }
static void case_layernorm_backward_bf16_narrow(kc_ctx *x) { layernorm_backward_at(x, C + 4); }

/* The same backward with dinp's bf16 copy (ABI 1.9), in place as the
 * model calls it: dinp and the parameters' gradients as the entry without
 * the copy gives them, bit for bit, and the copy to_bf16's bits of dinp. */
static void layernorm_backward_copy_at(kc_ctx *x, int64_t Cw) {
    KC_NEED(x, layernorm_backward_fused_bf16_copy);
    const size_t n = (size_t)(BT * Cw);
    float *inp = kc_rand(x, n, -2.0f, 3.0f), *w = kc_rand(x, Cw, 0.5f, 1.5f), *b = kc_rand(x, Cw, -1.0f, 1.0f);
    float *out = kc_out(x, n), *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward(out, mean, rstd, inp, w, b, BT, Cw);
    plait_bf16 *dout = kc_rand_bf16(x, n, -1.0f, 1.0f), *dinp_bf = kc_out_bf16(x, n), *ref_bf = kc_out_bf16(x, n);
    float *dres = kc_rand(x, n, -1.0f, 1.0f), *dres2 = kc_out(x, n);
    float *dw = kc_rand(x, Cw, -1.0f, 1.0f), *db = kc_rand(x, Cw, -1.0f, 1.0f);
    float *dw2 = kc_out(x, Cw), *db2 = kc_out(x, Cw);
    x->k->copy(dres2, dres, n);
    x->k->copy(dw2, dw, (size_t)Cw);
    x->k->copy(db2, db, (size_t)Cw);
    x->k->layernorm_backward_fused_bf16_copy(dres, dinp_bf, dres, dw, db, dout, inp, w, mean, rstd, BT, Cw);
    x->k->layernorm_backward_fused_bf16(dres2, dres2, dw2, db2, dout, inp, w, mean, rstd, BT, Cw);
    kc_result(x, "dinp = dres + the input gradient", dres, n, KC_ELEMWISE);
    kc_result(x, "dinp_bf", dinp_bf, n, KC_BF16);
    kc_same(x, "dinp as without the copy", dres, dres2, n * sizeof *dres);
    kc_same(x, "dweight as without the copy", dw, dw2, (size_t)Cw * sizeof *dw);
    kc_same(x, "dbias as without the copy", db, db2, (size_t)Cw * sizeof *db);
    x->k->to_bf16(ref_bf, dres, n);
    kc_same(x, "dinp_bf: to_bf16 of dinp", dinp_bf, ref_bf, n * sizeof *ref_bf);
}

static void case_layernorm_backward_bf16_copy(kc_ctx *x) { layernorm_backward_copy_at(x, C); }
static void case_layernorm_backward_bf16_copy_narrow(kc_ctx *x) { layernorm_backward_copy_at(x, C + 4); }

/* Fused attention with bf16 activations on one shape: out (bf16, KC_BF16),
 * lse (fp32 from the bf16 q and k, but on a device's tensor cores summed
 * in another order and in log2 units: KC_BF16, the bound its products
 * get) and dqkv (bf16). names: the three results' names. */
static void attention_shape(kc_ctx *x, const char *const names[3], int64_t b, int64_t t, int64_t nh, int64_t hs) {
    const int64_t c = nh * hs, bt = b * t;
    const size_t nlse = (size_t)(b * nh * t), nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    plait_bf16 *qkv = kc_rand_bf16(x, (size_t)(bt * 3 * c), -1.0f, 1.0f), *out = kc_out_bf16(x, (size_t)(bt * c));
    float *lse = kc_out(x, nlse), *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_fused_forward_bf16(out, lse, scratch, qkv, b, t, nh, hs);
    kc_result(x, names[0], out, (size_t)(bt * c), KC_BF16);
    kc_result(x, names[1], lse, nlse, KC_BF16);
    plait_bf16 *dout = kc_rand_bf16(x, (size_t)(bt * c), -1.0f, 1.0f), *dqkv = kc_out_bf16(x, (size_t)(bt * 3 * c));
    x->k->attention_fused_backward_bf16(dqkv, scratch, dout, qkv, out, lse, b, t, nh, hs);
    kc_result(x, names[2], dqkv, (size_t)(bt * 3 * c), KC_BF16);
}

/* Head sizes 32, 64 and 128 (a device's tensor cores) over row tiles of
 * 64 whose last is partial (T 67: 3 rows; T 130: 2; T 70: 6), and 24 (the
 * fp32 kernels, widening bf16 on load). */
static void case_attention_bf16(kc_ctx *x) {
    KC_NEED(x, attention_fused_forward_bf16);
    KC_NEED(x, attention_fused_backward_bf16);
    static const char *const a[3] = {"HS32 T67 forward out", "HS32 T67 forward lse", "HS32 T67 backward dqkv"};
    static const char *const b[3] = {"HS64 T130 forward out", "HS64 T130 forward lse", "HS64 T130 backward dqkv"};
    static const char *const d[3] = {"HS128 T70 forward out", "HS128 T70 forward lse", "HS128 T70 backward dqkv"};
    static const char *const c[3] = {"HS24 T70 forward out", "HS24 T70 forward lse", "HS24 T70 backward dqkv"};
    attention_shape(x, a, 2, 67, 3, 32);
    attention_shape(x, b, 1, 130, 2, 64);
    attention_shape(x, d, 1, 70, 1, 128);
    attention_shape(x, c, 1, 70, 1, 24);
}

/* The bf16 entries against the float32 entries run on the same values
 * (the bf16 inputs widened; the backward's out the bf16 forward's): out and
 * dqkv must be the float32 results rounded once and lse the same, bit for
 * bit (as kref_bf16.h's reference is by construction). On a device both
 * take the same kernels at these head sizes, tiles that arrive by cp.async
 * as bf16 against tiles rounded from floats on load: a tile that came in
 * wrong, late or partly shows here even where it stays within KC_BF16. */
static void attention_as_f32(kc_ctx *x, const char *name, int64_t b, int64_t t, int64_t nh, int64_t hs) {
    const int64_t c = nh * hs, bt = b * t;
    const size_t nq = (size_t)(bt * 3 * c), no = (size_t)(bt * c), nlse = (size_t)(b * nh * t);
    const size_t nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    plait_bf16 *qkv = kc_rand_bf16(x, nq, -1.0f, 1.0f), *dout = kc_rand_bf16(x, no, -1.0f, 1.0f);
    plait_bf16 *out = kc_out_bf16(x, no), *dqkv = kc_out_bf16(x, nq);
    float *lse = kc_out(x, nlse), *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_fused_forward_bf16(out, lse, scratch, qkv, b, t, nh, hs);
    x->k->attention_fused_backward_bf16(dqkv, scratch, dout, qkv, out, lse, b, t, nh, hs);
    float *qf = kc_widened(x, qkv, nq), *df = kc_widened(x, dout, no), *of = kc_widened(x, out, no);
    float *outf = kc_out(x, no), *lsef = kc_out(x, nlse), *dqf = kc_out(x, nq);
    x->k->attention_fused_forward(outf, lsef, scratch, qf, b, t, nh, hs);
    x->k->attention_fused_backward(dqf, scratch, df, qf, of, lse, b, t, nh, hs);
    kc_attention_rounded(x, name, out, outf, no, lse, lsef, nlse, dqkv, dqf, nq);
}

static void case_attention_bf16_as_f32(kc_ctx *x) {
    KC_NEED(x, attention_fused_forward_bf16);
    KC_NEED(x, attention_fused_backward_bf16);
    attention_as_f32(x, "HS32 T67: out, lse, dqkv = the float32 entries' rounded", 2, 67, 3, 32);
    attention_as_f32(x, "HS64 T130: out, lse, dqkv = the float32 entries' rounded", 1, 130, 2, 64);
    attention_as_f32(x, "HS128 T70: out, lse, dqkv = the float32 entries' rounded", 1, 70, 1, 128);
}

/* The gradient's entries that must be exactly 0 (padding columns, and
 * every column of a row without a target), gathered on the host into a
 * buffer of their own, compared bit for bit: the relative bound of
 * KC_BF16 would let a small stray value there pass. */
static void zeros_of(kc_ctx *x, const char *name, const plait_bf16 *dl, const int32_t *tg, int64_t Vl, int64_t valid) {
    const plait_bf16 *h = kc_host_copy(x, dl, (size_t)(BT * Vl) * sizeof *dl);
    const int32_t *th = kc_host_copy(x, tg, BT * sizeof *tg);
    plait_bf16 *z = kc_host_copy(x, dl, (size_t)(BT * Vl) * sizeof *dl); /* room enough */
    size_t n = 0;
    for (int64_t r = 0; r < BT; r++)
        for (int64_t c = th[r] < 0 ? 0 : valid; c < Vl; c++) z[n++] = h[r * Vl + c];
    kc_result(x, name, (const plait_bf16 *)kc_bytes(x, z, n * sizeof *z), n, KC_EXACT);
}

/* The head's loss in one pass on bf16 logits at row width Vl (valid
 * classes, the rest padding; every 5th row without a target): the
 * losses, lse and their sum are fp32 computed in fp32 from the logits
 * widened exactly, the reference's values (KC_ELEMWISE); the gradient is
 * bf16 (KC_BF16), 0 exactly where it must be; without the gradient the
 * same losses; in place the gradient's bits. */
static void crossentropy_at(kc_ctx *x, int64_t Vl, int64_t valid) {
    KC_NEED(x, crossentropy_fused_bf16);
    int32_t *tg = kc_ints(x, BT, 0, (int32_t)valid, 5);
    plait_bf16 *logits = kc_rand_bf16(x, (size_t)(BT * Vl), -4.0f, 4.0f), *dl = kc_out_bf16(x, (size_t)(BT * Vl));
    float *losses = kc_out(x, BT), *lse = kc_out(x, BT);
    const double half = 0.5;
    double *sum = kc_bytes(x, &half, sizeof half), *sum2 = kc_bytes(x, &half, sizeof half);
    x->k->crossentropy_fused_bf16(losses, lse, sum, dl, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_result(x, "losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "lse", lse, BT, KC_ELEMWISE);
    kc_result(x, "loss sum+=", sum, 1, KC_ELEMWISE);
    kc_result(x, "dlogits", dl, (size_t)(BT * Vl), KC_BF16);
    zeros_of(x, "dlogits: 0 on padding and rows without a target", dl, tg, Vl, valid);
    float *l2 = kc_out(x, BT);
    x->k->crossentropy_fused_bf16(l2, NULL, sum2, NULL, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "dlogits NULL: the same losses", l2, losses, BT * sizeof *l2);
    x->k->crossentropy_fused_bf16(l2, NULL, sum2, logits, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "in place: the gradient's bits", logits, dl, (size_t)(BT * Vl) * sizeof *dl);
}

/* 304: a multiple of 8 (a device's 16-byte path), 14 padding columns */
static void case_crossentropy_bf16(kc_ctx *x) { crossentropy_at(x, 304, 290); }
/* 302: not a multiple of 8 (one column a load) */
static void case_crossentropy_bf16_narrow(kc_ctx *x) { crossentropy_at(x, 302, 290); }
/* GPT-2's padded head (50,304 columns, 50,257 classes: a class past the
 * last group of 8), which a cuda device stages in shared memory, and one
 * group past what it stages there (65,544), which it reads three times */
static void case_crossentropy_bf16_gpt2(kc_ctx *x) { crossentropy_at(x, 50304, 50257); }
static void case_crossentropy_bf16_widest(kc_ctx *x) { crossentropy_at(x, 65544, 65530); }
/* 50,688 columns (101,376 bytes): staged where a block may opt in to
 * more than 99 KiB (sm_80, sm_90), read three times where it may not
 * (sm_86, sm_89: test_cuda_kernels_emu_bf16_optin99) */
static void case_crossentropy_bf16_past_99k(kc_ctx *x) { crossentropy_at(x, 50688, 50600); }

const kc_named kc_bf16_row_cases[] = {
    {"layernorm_bf16", case_layernorm_bf16},
    {"layernorm_bf16_narrow", case_layernorm_bf16_narrow},
    {"layernorm_backward_bf16", case_layernorm_backward_bf16},
    {"layernorm_backward_bf16_narrow", case_layernorm_backward_bf16_narrow},
    {"layernorm_backward_bf16_copy", case_layernorm_backward_bf16_copy},
    {"layernorm_backward_bf16_copy_narrow", case_layernorm_backward_bf16_copy_narrow},
    {"attention_bf16", case_attention_bf16},
    {"attention_bf16_as_f32", case_attention_bf16_as_f32},
    {"crossentropy_bf16", case_crossentropy_bf16},
    {"crossentropy_bf16_narrow", case_crossentropy_bf16_narrow},
    {"crossentropy_bf16_gpt2", case_crossentropy_bf16_gpt2},
    {"crossentropy_bf16_widest", case_crossentropy_bf16_widest},
    {"crossentropy_bf16_past_99k", case_crossentropy_bf16_past_99k},
};
const size_t kc_bf16_row_count = sizeof kc_bf16_row_cases / sizeof kc_bf16_row_cases[0];
