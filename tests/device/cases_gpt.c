/*
 * Kernel cases of the GPT layer's float32 entries (plait/kernels.h): the
 * products (sgemm, the linear layer with and without its bias, residual
 * and GELU), the bias, LayerNorm (plain, narrow and one-pass backward),
 * GELU and attention (plain and fused over four head sizes), each against
 * the core's CPU kernel in the run's precision (products within its
 * tolerance, element-wise results within 1e-5), outputs poisoned with
 * NaN, each case run twice on the device and required bit-identical
 * (kcase.h).
 */
#include <stdlib.h>

#include "device/kcase.h"

#define B 2
#define T 67 /* two row tiles of the attention, the second of 3 rows */
#define NH 3
#define HS 32
#define C (NH * HS)
#define OC 160
#define BT (B * T)

static void case_sgemm(kc_ctx *x) {
    static const char *names[] = {"C=A.B", "C=A.Bt", "C=At.B", "C=At.Bt"};
    const int64_t M = 37, N = 53, K = 70;
    for (int t = 0; t < 4; t++) {
        int ta = t / 2, tb = t % 2;
        int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        float *A = kc_rand(x, (size_t)((ta ? K : M) * lda), -1, 1);
        float *Bm = kc_rand(x, (size_t)((tb ? N : K) * ldb), -1, 1);
        float *Cm = kc_rand(x, (size_t)(M * ldc), -1, 1);
        x->k->sgemm(ta, tb, M, N, K, 1.25f, A, lda, Bm, ldb, 0.5f, Cm, ldc);
        kc_result(x, names[t], Cm, (size_t)(M * ldc), KC_GEMM);
    }
    /* beta = 0 overwrites whatever C held (NaN included) */
    float *A = kc_rand(x, (size_t)(BT * C), -1, 1), *W = kc_rand(x, (size_t)(OC * C), -1, 1);
    float *Cm = kc_out(x, (size_t)(BT * OC));
    x->k->sgemm(0, 1, BT, OC, C, 1.0f, A, C, W, C, 0.0f, Cm, OC);
    kc_result(x, "beta=0", Cm, (size_t)(BT * OC), KC_GEMM);
}

static void case_matmul(kc_ctx *x) {
    float *inp = kc_rand(x, BT * C, -1, 1), *w = kc_rand(x, OC * C, -0.5f, 0.5f), *bias = kc_rand(x, OC, -1, 1);
    float *out = kc_out(x, BT * OC), *out_nb = kc_out(x, BT * OC);
    x->k->matmul_forward(out, inp, w, bias, BT, C, OC);
    x->k->matmul_forward(out_nb, inp, w, NULL, BT, C, OC);
    kc_result(x, "forward+bias", out, BT * OC, KC_GEMM);
    kc_result(x, "forward", out_nb, BT * OC, KC_GEMM);
    float *res = kc_rand(x, BT * OC, -1, 1), *out_r = kc_out(x, BT * OC);
    x->k->matmul_forward_residual(out_r, res, inp, w, bias, BT, C, OC);
    kc_result(x, "forward_residual", out_r, BT * OC, KC_GEMM);
    float *inplace = kc_rand(x, BT * OC, -1, 1);
    x->k->matmul_forward_residual(inplace, inplace, inp, w, NULL, BT, C, OC);
    kc_result(x, "forward_residual in place", inplace, BT * OC, KC_GEMM);
    float *dout = kc_rand(x, BT * OC, -1, 1), *dinp = kc_out(x, BT * C);
    float *dw = kc_rand(x, OC * C, -1, 1), *db = kc_rand(x, OC, -1, 1);
    x->k->matmul_backward(dinp, dw, db, dout, inp, w, BT, C, OC);
    kc_result(x, "backward dinp", dinp, BT * C, KC_GEMM);
    kc_result(x, "backward dweight+=", dw, OC * C, KC_GEMM);
    kc_result(x, "backward dbias+=", db, OC, KC_ELEMWISE); /* row chunks: the CPU's sums, not its order */
    /* the halves in two calls give one call's bits (a device may convert
     * dout once for both products of one call) */
    float *dinp2 = kc_out(x, BT * C), *dw2 = kc_rand(x, OC * C, -1, 1);
    float *dw1 = kc_out(x, OC * C), *dinp1 = kc_out(x, BT * C);
    x->k->copy(dw1, dw2, OC * C);
    x->k->matmul_backward(dinp1, dw1, NULL, dout, inp, w, BT, C, OC);
    x->k->matmul_backward(dinp2, NULL, NULL, dout, inp, w, BT, C, OC);
    x->k->matmul_backward(NULL, dw2, NULL, dout, inp, NULL, BT, C, OC);
    kc_same(x, "backward dinp: one call = two", dinp1, dinp2, BT * C * sizeof(float));
    kc_same(x, "backward dweight: one call = two", dw1, dw2, OC * C * sizeof(float));
}

static void case_bias(kc_ctx *x) {
    float *xs = kc_rand(x, BT * C, -1, 1), *res = kc_rand(x, BT * C, -1, 1), *bias = kc_rand(x, C, -1, 1);
    x->k->add_bias_residual(xs, res, bias, BT, C);
    kc_result(x, "add_bias_residual", xs, BT * C, KC_EXACT);
    float *xs2 = kc_rand(x, BT * C, -1, 1);
    x->k->add_bias_residual(xs2, res, NULL, BT, C);
    kc_result(x, "add_residual", xs2, BT * C, KC_EXACT);
    /* a width of no whole 16-byte groups: one element at a time */
    float *xo = kc_rand(x, BT * 37, -1, 1), *ro = kc_rand(x, BT * 37, -1, 1), *bo = kc_rand(x, 37, -1, 1);
    x->k->add_bias_residual(xo, ro, bo, BT, 37);
    kc_result(x, "add_bias_residual width 37", xo, BT * 37, KC_EXACT);
    float *db = kc_rand(x, OC, -1, 1), *dout = kc_rand(x, BT * OC, -1, 1);
    x->k->bias_backward(db, dout, BT, OC);
    kc_result(x, "bias_backward", db, OC, KC_ELEMWISE);
    /* a width of no whole 16-byte groups: one column a thread */
    float *db2 = kc_rand(x, OC + 2, -1, 1), *dout2 = kc_rand(x, BT * (OC + 2), -1, 1);
    x->k->bias_backward(db2, dout2, BT, OC + 2);
    kc_result(x, "bias_backward narrow", db2, OC + 2, KC_ELEMWISE);
}

/* LayerNorm at width Cw: forward, backward; and the one-pass backward's
 * dinp beside them. */
static void layernorm_at(kc_ctx *x, int64_t Cw) {
    float *inp = kc_rand(x, BT * Cw, -2, 3), *w = kc_rand(x, Cw, 0.5f, 1.5f), *b = kc_rand(x, Cw, -1, 1);
    float *out = kc_out(x, BT * Cw), *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward(out, mean, rstd, inp, w, b, BT, Cw);
    kc_result(x, "forward out", out, BT * Cw, KC_ELEMWISE);
    kc_result(x, "forward mean", mean, BT, KC_ELEMWISE);
    kc_result(x, "forward rstd", rstd, BT, KC_ELEMWISE);
    float *dout = kc_rand(x, BT * Cw, -1, 1), *dinp = kc_rand(x, BT * Cw, -1, 1);
    float *dw = kc_rand(x, Cw, -1, 1), *db = kc_rand(x, Cw, -1, 1);
    x->k->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, BT, Cw);
    kc_result(x, "backward dinp+=", dinp, BT * Cw, KC_ELEMWISE);
    kc_result(x, "backward dweight+=", dw, Cw, KC_ELEMWISE);
    kc_result(x, "backward dbias+=", db, Cw, KC_ELEMWISE);
    if (!PLAIT_KERNELS_HAS_FUSED_LAYERNORM(x->k)) return;
    float *d0 = kc_out(x, BT * Cw);
    x->k->layernorm_backward_fused(d0, dinp, NULL, NULL, dout, inp, w, mean, rstd, BT, Cw);
    kc_result(x, "one-pass dinp", d0, BT * Cw, KC_ELEMWISE);
}

static void case_layernorm(kc_ctx *x) { layernorm_at(x, C); }

/* A width that is not a multiple of 4: a device's rows then take one
 * column a load (cuda's 16-byte path needs C % 4 == 0). */
static void case_layernorm_narrow(kc_ctx *x) { layernorm_at(x, C + 2); }

/* LayerNorm's whole backward in one pass: against the CPU's, with the
 * residual's gradient beside dinp, in place and absent (zeros: dinp is
 * overwritten); and the bits of the parts it replaces (a copy of the
 * residual, then layernorm_backward's two halves) on the same table. */
static void case_layernorm_fused(kc_ctx *x) {
    const int has = PLAIT_KERNELS_HAS_FUSED_LAYERNORM(x->k);
    kc_value(x, "the table has layernorm_backward_fused", has, KC_EXACT);
    if (!has) return;
    float *inp = kc_rand(x, BT * C, -2, 3), *w = kc_rand(x, C, 0.5f, 1.5f), *b = kc_rand(x, C, -1, 1);
    float *out = kc_out(x, BT * C), *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward(out, mean, rstd, inp, w, b, BT, C);
    float *dout = kc_rand(x, BT * C, -1, 1), *dres = kc_rand(x, BT * C, -1, 1), *dinp = kc_out(x, BT * C);
    float *dw = kc_rand(x, C, -1, 1), *db = kc_rand(x, C, -1, 1);
    float *dw2 = kc_out(x, C), *db2 = kc_out(x, C), *parts = kc_out(x, BT * C);
    x->k->copy(dw2, dw, C);
    x->k->copy(db2, db, C);
    x->k->layernorm_backward_fused(dinp, dres, dw, db, dout, inp, w, mean, rstd, BT, C);
    kc_result(x, "dinp = dres + the input gradient", dinp, BT * C, KC_ELEMWISE);
    kc_result(x, "dweight+=", dw, C, KC_ELEMWISE);
    kc_result(x, "dbias+=", db, C, KC_ELEMWISE);
    x->k->copy(parts, dres, BT * C);
    x->k->layernorm_backward(parts, NULL, NULL, dout, inp, w, mean, rstd, BT, C);
    x->k->layernorm_backward(NULL, dw2, db2, dout, inp, NULL, mean, rstd, BT, C);
    kc_same(x, "dinp: the parts' bits", dinp, parts, BT * C * sizeof *dinp);
    kc_same(x, "dweight: the parts' bits", dw, dw2, C * sizeof *dw);
    kc_same(x, "dbias: the parts' bits", db, db2, C * sizeof *db);
    x->k->layernorm_backward_fused(dres, dres, NULL, NULL, dout, inp, w, mean, rstd, BT, C);
    kc_same(x, "in place, no parameters: the same dinp", dres, dinp, BT * C * sizeof *dinp);
    float *d0 = kc_out(x, BT * C);
    x->k->layernorm_backward_fused(d0, NULL, NULL, NULL, dout, inp, w, mean, rstd, BT, C);
    kc_result(x, "dinp without a residual", d0, BT * C, KC_ELEMWISE);
}

/* A linear layer and GELU in one product, forward and backward: against
 * the CPU's (which is the separate kernels), at an output width the
 * cuBLASLt epilogues take (a multiple of 8) and one they do not (the
 * product, then gelu.cu); the backward's halves in one call and in two. */
static void case_gelu_fused(kc_ctx *x) {
    const int has = PLAIT_KERNELS_HAS_FUSED_GELU(x->k);
    kc_value(x, "the table has matmul_forward_gelu and matmul_backward_gelu", has, KC_EXACT);
    if (!has) return;
    static const int64_t widths[2] = {OC, OC - 4}; /* 160: the epilogues; 156: apart */
    for (int i = 0; i < 2; i++) {
        const int64_t F = widths[i], Cin = i ? C - 4 : C;
        float *inp = kc_rand(x, BT * Cin, -1, 1), *w = kc_rand(x, F * Cin, -0.3f, 0.3f), *bias = kc_rand(x, F, -1, 1);
        float *out = kc_out(x, BT * F), *pre = kc_out(x, BT * F);
        x->k->matmul_forward_gelu(out, pre, inp, w, bias, BT, Cin, F);
        kc_result(x, i ? "forward gelu (apart)" : "forward gelu", out, BT * F, KC_GEMM);
        kc_result(x, i ? "forward pre (apart)" : "forward pre", pre, BT * F, KC_GEMM);
        /* the backward of a layer reading out = gelu(pre): [BT,F] -> [BT,Cin] */
        float *w2 = kc_rand(x, Cin * F, -0.3f, 0.3f), *dout = kc_rand(x, BT * Cin, -1, 1);
        float *dpre = kc_out(x, BT * F), *dw = kc_rand(x, Cin * F, -1, 1), *db = kc_rand(x, Cin, -1, 1);
        x->k->matmul_backward_gelu(dpre, dw, db, dout, out, w2, pre, BT, F, Cin);
        kc_result(x, i ? "backward dpre (apart)" : "backward dpre", dpre, BT * F, KC_GEMM);
        kc_result(x, i ? "backward dweight+= (apart)" : "backward dweight+=", dw, Cin * F, KC_GEMM);
        if (i) continue;
        float *dpre2 = kc_out(x, BT * F);
        x->k->matmul_backward_gelu(dpre2, NULL, NULL, dout, out, w2, pre, BT, F, Cin);
        kc_same(x, "backward dpre: one call = the input half alone", dpre, dpre2, BT * F * sizeof *dpre);
        if (!kc_fp32) continue;
        /* fp32 takes no GELU epilogue: an H100's cuBLASLt computes GELU and
         * its gradient to about 1e-6 (measured), ten times float32's
         * rounding, which the PyTorch fixtures' fp32 bounds notice; so the
         * fused entries are the product, then gelu.cu, bit for bit */
        float *pre3 = kc_out(x, BT * F), *out3 = kc_out(x, BT * F), *tmp = kc_out(x, BT * F);
        x->k->matmul_forward(pre3, inp, w, bias, BT, Cin, F);
        x->k->gelu_forward(out3, pre3, (size_t)(BT * F));
        kc_same(x, "fp32: forward = the product, then gelu_forward", out, out3, BT * F * sizeof *out);
        x->k->matmul_backward(tmp, NULL, NULL, dout, out, w2, BT, F, Cin);
        x->k->gelu_backward(tmp, pre, tmp, (size_t)(BT * F));
        kc_same(x, "fp32: backward dpre = the product, then gelu_backward", dpre, tmp, BT * F * sizeof *dpre);
    }
}

static void case_gelu(kc_ctx *x) {
    const size_t n = 10007;
    float *inp = kc_rand(x, n, -6, 6), *out = kc_out(x, n);
    x->k->gelu_forward(out, inp, n);
    kc_result(x, "forward", out, n, KC_ELEMWISE);
    float *dout = kc_rand(x, n, -1, 1), *dinp = kc_out(x, n);
    x->k->gelu_backward(dinp, inp, dout, n);
    kc_result(x, "backward", dinp, n, KC_ELEMWISE);
    x->k->gelu_backward(dout, inp, dout, n); /* dinp == dout */
    kc_result(x, "backward in place", dout, n, KC_ELEMWISE);
    x->k->gelu_forward(inp, inp, n); /* out == inp */
    kc_result(x, "forward in place", inp, n, KC_ELEMWISE);
}

static void case_attention(kc_ctx *x) {
    const size_t natt = (size_t)B * NH * T * T;
    float *qkv = kc_rand(x, BT * 3 * C, -1, 1), *out = kc_out(x, BT * C), *att = kc_out(x, natt);
    x->k->attention_forward(out, att, qkv, B, T, NH, HS);
    kc_result(x, "forward out", out, BT * C, KC_GEMM);
    kc_result(x, "forward att", att, natt, KC_GEMM);
    float *probs = kc_out(x, natt);
    x->k->attention_probs(probs, qkv, B, T, NH, HS);
    kc_same(x, "probs == forward's att", probs, att, natt * sizeof(float));
    float *dout = kc_rand(x, BT * C, -1, 1), *dqkv = kc_out(x, BT * 3 * C), *scratch = kc_out(x, natt);
    x->k->attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, HS);
    kc_result(x, "backward dqkv", dqkv, BT * 3 * C, KC_GEMM);
}

/* Fused attention on one shape: out and lse (the forward), dqkv (the
 * backward), each against the CPU's fused kernels; outputs poisoned.
 * names: the three results' names. */
static void fused_attention_shape(kc_ctx *x, const char *const names[3], int64_t b, int64_t t, int64_t nh, int64_t hs) {
    const int64_t c = nh * hs, bt = b * t;
    const size_t nlse = (size_t)(b * nh * t), nscr = x->k->attention_fused_scratch(b, t, nh, hs);
    float *qkv = kc_rand(x, (size_t)(bt * 3 * c), -1, 1), *out = kc_out(x, (size_t)(bt * c)), *lse = kc_out(x, nlse);
    float *scratch = kc_out(x, nscr ? nscr : 1);
    x->k->attention_fused_forward(out, lse, scratch, qkv, b, t, nh, hs);
    kc_result(x, names[0], out, (size_t)(bt * c), KC_GEMM);
    kc_result(x, names[1], lse, nlse, KC_GEMM);
    float *dout = kc_rand(x, (size_t)(bt * c), -1, 1), *dqkv = kc_out(x, (size_t)(bt * 3 * c));
    x->k->attention_fused_backward(dqkv, scratch, dout, qkv, out, lse, b, t, nh, hs);
    kc_result(x, names[2], dqkv, (size_t)(bt * 3 * c), KC_GEMM);
}

/* The test's shape (two row tiles, the second of 3 rows; head size 32),
 * GPT-2's head size over three tiles, the tensor cores' largest head size
 * (128: over 48 KiB of shared memory a block), and a head size the tensor
 * cores do not take (24: the fp32 kernels in every precision). */
static void case_attention_fused(kc_ctx *x) {
    const int has = PLAIT_KERNELS_HAS_FUSED_ATTENTION(x->k, HS);
    kc_value(x, "the table has fused attention", has, KC_EXACT);
    if (!has) return;
    static const char *const a[3] = {"HS32 T67 forward out", "HS32 T67 forward lse", "HS32 T67 backward dqkv"};
    static const char *const b[3] = {"HS64 T130 forward out", "HS64 T130 forward lse", "HS64 T130 backward dqkv"};
    static const char *const d[3] = {"HS128 T70 forward out", "HS128 T70 forward lse", "HS128 T70 backward dqkv"};
    static const char *const c[3] = {"HS24 T70 forward out", "HS24 T70 forward lse", "HS24 T70 backward dqkv"};
    fused_attention_shape(x, a, B, T, NH, HS);
    fused_attention_shape(x, b, 1, 130, 2, 64);
    fused_attention_shape(x, d, 1, 70, 1, 128);
    fused_attention_shape(x, c, 1, 70, 1, 24);
}

/* in the order a GPT block runs them */
const kc_named kc_gpt_cases[] = {
    {"sgemm", case_sgemm},
    {"matmul", case_matmul},
    {"bias", case_bias},
    {"layernorm", case_layernorm},
    {"layernorm_fused", case_layernorm_fused},
    {"layernorm_narrow", case_layernorm_narrow},
    {"gelu", case_gelu},
    {"gelu_fused", case_gelu_fused},
    {"attention", case_attention},
    {"attention_fused", case_attention_fused},
};
const size_t kc_gpt_count = sizeof kc_gpt_cases / sizeof kc_gpt_cases[0];
