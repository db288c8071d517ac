/*
 * Every kernel of the cuda device against the core's CPU kernel, on fresh
 * random inputs each run (the seed is printed; PLAIT_TEST_SEED repeats a
 * run), outputs poisoned with NaN before each call, in the precision given
 * as argv[1] (fp32, tf32 or bf16; GEMM-based results within 1e-5, 1e-3 and
 * 2e-2 relative, element-wise kernels within 1e-5, the exact Σx²
 * accumulator and the embedding gradients bit for bit), each case run
 * twice on the device and required bit-identical. Plus the device's memory
 * functions.
 *
 * Label `gpu`: where no CUDA device is found this exits 77, which ctest
 * reports as skipped (never as passed); docs/gpu.md says where these tests
 * have run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/kcase.h"
#include "device/kref_bf16.h"
#include "host/host_table.h"
#include "kernels/kernels.h"
#include "plugin/loader.h"
#include "runtime/error.h"

#define B 2
#define T 67
#define NH 3
#define HS 32
#define C (NH * HS)
#define OC 160
#define BT (B * T)
#define V 1000

/* ---- the CPU reference table -------------------------------------------- */

static plait_kernels g_cpu;

/* the core's CPU kernels, with the references of the bf16-activation
 * entries the CPU device does not have */
static void cpu_table(void) {
    g_cpu = *plait_kernels_table();
    kref_bf16_fill(&g_cpu);
}

/* bf16 mode (and the self-check) also runs the bf16-activation cases */
static int g_bf16_cases;
/* the run's precision is fp32 (argv[1]) */
static int g_fp32;

/* ---- cases ---------------------------------------------------------------- */

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
        if (!g_fp32) continue;
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
static void fused_attention_shape(kc_ctx *x, const char *const names[3], int64_t b, int64_t t, int64_t nh,
                                  int64_t hs) {
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

/* The embedding's entries at width w (96: 16-byte groups; odd: one
 * column at a time). */
static void embedding_at(kc_ctx *x, int64_t w) {
    /* tokens from a narrow range repeat often: the gradient's order matters */
    int32_t *tok = kc_ints(x, BT, 280, 340, 0);
    float *wte = kc_rand(x, V * w, -1, 1), *wpe = kc_rand(x, T * w, -1, 1), *out = kc_out(x, BT * w);
    x->k->embedding_forward(out, tok, wte, wpe, B, T, w);
    kc_result(x, "forward", out, BT * w, KC_EXACT);
    float *dout = kc_rand(x, BT * w, -1, 1), *dwte = kc_rand(x, V * w, -1, 1), *dwpe = kc_rand(x, T * w, -1, 1);
    x->k->embedding_backward(dwte, dwpe, dout, tok, B, T, w);
    kc_result(x, "backward dwte+=", dwte, V * w, KC_EXACT);
    kc_result(x, "backward dwpe+=", dwpe, T * w, KC_EXACT);
    /* vocabulary-parallel: rows [300, 320) here; other tokens give zero rows */
    const int64_t start = 300, rows = 20;
    float *wl = kc_rand(x, rows * w, -1, 1), *outv = kc_out(x, BT * w), *outn = kc_out(x, BT * w);
    x->k->embedding_forward_vocab(outv, tok, wl, start, rows, wpe, B, T, w);
    x->k->embedding_forward_vocab(outn, tok, wl, start, rows, NULL, B, T, w);
    kc_result(x, "vocab forward", outv, BT * w, KC_EXACT);
    kc_result(x, "vocab forward, no positions", outn, BT * w, KC_EXACT);
    float *dwl = kc_rand(x, rows * w, -1, 1), *dwpe2 = kc_rand(x, T * w, -1, 1);
    x->k->embedding_backward_vocab(dwl, dwpe2, dout, tok, start, rows, B, T, w);
    kc_result(x, "vocab backward dwte+=", dwl, rows * w, KC_EXACT);
    kc_result(x, "vocab backward dwpe+=", dwpe2, T * w, KC_EXACT);
    float *o = kc_rand(x, BT * w, -1, 1);
    x->k->add_positions(o, wpe, B, T, w);
    kc_result(x, "add_positions", o, BT * w, KC_EXACT);
}

static void case_embedding(kc_ctx *x) { embedding_at(x, C); }
static void case_embedding_odd(kc_ctx *x) { embedding_at(x, 37); }

/* Text-like tokens: a few rows take most of them (the order of one row's
 * many additions is what matters), the rest Zipf-like over ZV rows, some
 * -1; more than one pass of the gradient kernel's tiles (4096 tokens). Two
 * hot rows 1024 apart share a block of the gradient when the table has
 * more rows than its blocks. Whole table; a slice of more rows than the
 * blocks; a slice of 10 rows around a hot one. */
#define ZB 2
#define ZT 2300
#define ZV 3000
static void embedding_zipf_at(kc_ctx *x, int64_t w) {
    const int64_t n = ZB * ZT;
    int32_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t u = kc_next(x) % 1000;
        if (u < 250) h[i] = 13;
        else if (u < 370) h[i] = 1037;
        else if (u < 450) h[i] = 11;
        else if (u < 455) h[i] = -1;
        else /* rank ~ ZV^v, v uniform: a Zipf-like tail */
            h[i] = (int32_t)(pow((double)ZV, (double)(kc_next(x) % 100000) / 100000.0) - 1.0);
    }
    int32_t *tok = kc_bytes(x, h, (size_t)n * sizeof *h);
    free(h);
    float *dout = kc_rand(x, (size_t)(n * w), -1, 1);
    float *dwte = kc_rand(x, (size_t)(ZV * w), -1, 1), *dwpe = kc_rand(x, (size_t)(ZT * w), -1, 1);
    x->k->embedding_backward(dwte, dwpe, dout, tok, ZB, ZT, w);
    kc_result(x, "backward dwte+=", dwte, (size_t)(ZV * w), KC_EXACT);
    kc_result(x, "backward dwpe+=", dwpe, (size_t)(ZT * w), KC_EXACT);
    static const int64_t slice[2][2] = {{2, 1100}, {1032, 10}};
    static const char *const name[2] = {"vocab [2, 1102) backward dwte+=", "vocab [1032, 1042) backward dwte+="};
    for (int s = 0; s < 2; s++) {
        float *dwl = kc_rand(x, (size_t)(slice[s][1] * w), -1, 1);
        x->k->embedding_backward_vocab(dwl, NULL, dout, tok, slice[s][0], slice[s][1], ZB, ZT, w);
        kc_result(x, name[s], dwl, (size_t)(slice[s][1] * w), KC_EXACT);
    }
}

static void case_embedding_zipf(kc_ctx *x) { embedding_zipf_at(x, C); }
static void case_embedding_zipf_odd(kc_ctx *x) { embedding_zipf_at(x, 37); }

static void case_crossentropy(kc_ctx *x) {
    int32_t *tg = kc_ints(x, BT, 0, V, 7); /* every 7th row without a target */
    float *logits = kc_rand(x, BT * V, -4, 4), *losses = kc_out(x, BT), *dl = kc_out(x, BT * V);
    x->k->crossentropy(losses, dl, logits, tg, BT, V, 1.0f / BT);
    kc_result(x, "losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "dlogits", dl, BT * V, KC_ELEMWISE);
    float *ev = kc_out(x, BT);
    x->k->crossentropy(ev, NULL, logits, tg, BT, V, 1.0f);
    kc_result(x, "losses, evaluation", ev, BT, KC_ELEMWISE);
    float *inpl = kc_rand(x, BT * V, -4, 4), *l2 = kc_out(x, BT);
    x->k->crossentropy(l2, inpl, inpl, tg, BT, V, 0.5f); /* dlogits == logits */
    kc_result(x, "dlogits in place", inpl, BT * V, KC_ELEMWISE);
    kc_result(x, "losses (in place run)", l2, BT, KC_ELEMWISE);
}

static void case_vocab_loss(kc_ctx *x) {
    /* this rank: columns [600, 900), the last 10 of them padding */
    const int64_t start = 600, Vl = 300, valid = 290;
    int32_t *tg = kc_ints(x, BT, 0, V, 5);
    float *logits = kc_rand(x, BT * Vl, -4, 4);
    float *mx = kc_out(x, BT), *se = kc_out(x, BT), *tl = kc_out(x, BT);
    x->k->logits_rowmax(mx, logits, BT, Vl, valid);
    x->k->logits_sumexp(se, logits, mx, BT, Vl, valid);
    x->k->logits_target(tl, logits, tg, start, BT, Vl, valid);
    kc_result(x, "rowmax", mx, BT, KC_EXACT);
    kc_result(x, "sumexp", se, BT, KC_ELEMWISE);
    kc_result(x, "target logit", tl, BT, KC_EXACT);
    const double half = 0.5;
    double *sum = kc_bytes(x, &half, sizeof half);
    float *lse = kc_out(x, BT), *losses = kc_out(x, BT);
    x->k->loss_rows(losses, lse, mx, se, tl, tg, BT, sum);
    kc_result(x, "loss_rows lse", lse, BT, KC_ELEMWISE);
    kc_result(x, "loss_rows losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "loss_rows sum+=", sum, 1, KC_ELEMWISE);
    /* in place: lse over rowmax, losses over tlogit */
    x->k->loss_rows(tl, mx, mx, se, tl, tg, BT, sum);
    kc_result(x, "loss_rows in place", tl, BT, KC_ELEMWISE);
    float *dl = kc_out(x, BT * Vl);
    x->k->crossentropy_backward(dl, logits, lse, tg, start, BT, Vl, valid, 1.0f / BT);
    kc_result(x, "backward", dl, BT * Vl, KC_ELEMWISE);
    x->k->crossentropy_backward(logits, logits, lse, tg, start, BT, Vl, valid, 2.0f);
    kc_result(x, "backward in place", logits, BT * Vl, KC_ELEMWISE);
    double *z = kc_bytes(x, &half, sizeof half);
    x->k->zero_f64(z, 1);
    kc_result(x, "zero_f64", z, 1, KC_EXACT);
}

/* The head's whole loss in one pass (every class on this rank, 10 padding
 * columns, every 5th row without a target): against the CPU's, which is
 * the pieces' arithmetic; the gradient in place and beside, and the loss
 * alone. */
static void case_fused_loss(kc_ctx *x) {
    const int has = PLAIT_KERNELS_HAS_FUSED_LOSS(x->k);
    kc_value(x, "the table has crossentropy_fused", has, KC_EXACT);
    if (!has) return;
    const int64_t Vl = 300, valid = 290;
    int32_t *tg = kc_ints(x, BT, 0, (int32_t)valid, 5);
    float *logits = kc_rand(x, BT * Vl, -4, 4), *losses = kc_out(x, BT), *lse = kc_out(x, BT);
    float *dl = kc_out(x, BT * Vl);
    const double half = 0.5;
    double *sum = kc_bytes(x, &half, sizeof half), *sum2 = kc_bytes(x, &half, sizeof half);
    x->k->crossentropy_fused(losses, lse, sum, dl, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_result(x, "losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "lse", lse, BT, KC_ELEMWISE);
    kc_result(x, "loss sum+=", sum, 1, KC_ELEMWISE);
    kc_result(x, "dlogits", dl, BT * Vl, KC_ELEMWISE);
    float *l2 = kc_out(x, BT);
    x->k->crossentropy_fused(l2, NULL, sum2, NULL, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "the loss without the gradient: the same losses", l2, losses, BT * sizeof *l2);
    x->k->crossentropy_fused(l2, NULL, sum2, logits, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "the gradient in place: the same values", logits, dl, (size_t)(BT * Vl) * sizeof *dl);
    /* rows whose width is not a multiple of 4 (a device's one-column path) */
    const int64_t Vn = Vl + 2;
    float *ln = kc_rand(x, BT * Vn, -4, 4), *dn = kc_out(x, BT * Vn), *lossn = kc_out(x, BT);
    x->k->crossentropy_fused(lossn, NULL, sum2, dn, ln, tg, BT, Vn, valid, 1.0f / BT);
    kc_result(x, "losses, odd width", lossn, BT, KC_ELEMWISE);
    kc_result(x, "dlogits, odd width", dn, BT * Vn, KC_ELEMWISE);
}

static void case_vector(kc_ctx *x) {
    const size_t n = 70001;
    float *a = kc_rand(x, n, -1, 1), *b = kc_rand(x, n, -1, 1), *c = kc_out(x, n);
    x->k->copy(c, a, n);
    kc_result(x, "copy", c, n, KC_EXACT);
    x->k->scale(c, n, 0.75f);
    kc_result(x, "scale", c, n, KC_EXACT);
    x->k->axpy(c, b, n, -1.5f);
    kc_result(x, "axpy", c, n, KC_ELEMWISE);
    kc_value(x, "sumsq", x->k->sumsq(c, n), KC_ELEMWISE);
    x->k->zero(c, n);
    kc_result(x, "zero", c, n, KC_EXACT);
    float *p = kc_rand(x, n, -1, 1), *g = kc_rand(x, n, -1, 1), *m = kc_rand(x, n, -0.1f, 0.1f);
    float *v = kc_rand(x, n, 0, 0.01f);
    plait_adamw_args args = {sizeof args, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f};
    x->k->adamw(p, g, m, v, n, &args);
    /* exact: the CPU kernel's operations in its order, each rounded on its
     * own, so every layout's optimizer gives the same bits */
    kc_result(x, "adamw param", p, n, KC_EXACT);
    kc_result(x, "adamw m", m, n, KC_EXACT);
    kc_result(x, "adamw v", v, n, KC_EXACT);
}

/* The element-wise kernels on both of a device's paths: 16-byte aligned
 * pointers (cuda: float4 groups, then a tail of n % 4), pointers one float
 * off (one element at a time), and a span shorter than one group. */
static void case_vector_paths(kc_ctx *x) {
    static const struct {
        size_t off, n;
        const char *gelu, *dgelu, *axpy;
    } runs[3] = {{0, 40003, "gelu, aligned", "gelu backward, aligned", "scale+axpy, aligned"},
                 {1, 40002, "gelu, one float off", "gelu backward, one float off", "scale+axpy, one float off"},
                 {0, 3, "gelu, 3 elements", "gelu backward, 3 elements", "scale+axpy, 3 elements"}};
    float *a = kc_rand(x, 40004, -4, 4), *b = kc_rand(x, 40004, -1, 1);
    for (int r = 0; r < 3; r++) {
        const size_t o = runs[r].off, n = runs[r].n;
        float *y = kc_out(x, o + n), *d = kc_out(x, o + n), *c = kc_out(x, o + n);
        x->k->gelu_forward(y + o, a + o, n);
        kc_result_add(x, runs[r].gelu, y + o, n, sizeof *y, KC_ELEMWISE);
        x->k->gelu_backward(d + o, a + o, b + o, n);
        kc_result_add(x, runs[r].dgelu, d + o, n, sizeof *d, KC_ELEMWISE);
        x->k->copy(c + o, a + o, n);
        x->k->scale(c + o, n, 0.75f);
        x->k->axpy(c + o, b + o, n, -1.5f);
        kc_result_add(x, runs[r].axpy, c + o, n, sizeof *c, KC_ELEMWISE);
    }
}

/* AdamW over a list of three tensors (one of a single element, one
 * without weight decay), the clipping factor read from device memory:
 * the CPU's bits, and the bits of the per-tensor kernel given the same
 * factor on the host (one rank steps with the list, data-parallel ranks
 * with the per-tensor kernel: their parameters must agree bit for bit);
 * a NaN factor leaves every tensor as it was. */
static void case_adamw_multi(kc_ctx *x) {
    const size_t n = 70001, sizes[3] = {30000, 1, 40000};
    const float decays[3] = {0.1f, 0.0f, 0.1f};
    float *p = kc_rand(x, n, -1, 1), *g = kc_rand(x, n, -1, 1), *m = kc_rand(x, n, -0.1f, 0.1f);
    float *v = kc_rand(x, n, 0, 0.01f);
    plait_adamw_tensor t[3];
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        t[i] = (plait_adamw_tensor){p + off, g + off, m + off, v + off, sizes[i], off, decays[i], 0};
        off += sizes[i];
    }
    const plait_adamw_tensor *list = kc_bytes(x, t, sizeof t);
    const float half = 0.5f, nan = NAN;
    const float *scale = kc_bytes(x, &half, sizeof half), *no = kc_bytes(x, &nan, sizeof nan);
    plait_adamw_args args = {sizeof args, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 7, 1.0f};
    float *p1 = kc_out(x, n), *m1 = kc_out(x, n), *v1 = kc_out(x, n);
    x->k->copy(p1, p, n), x->k->copy(m1, m, n), x->k->copy(v1, v, n);
    x->k->adamw_multi(list, 3, n, &args, scale);
    kc_result(x, "param", p, n, KC_EXACT);
    kc_result(x, "m", m, n, KC_EXACT);
    kc_result(x, "v", v, n, KC_EXACT);
    off = 0;
    for (int i = 0; i < 3; i++) {
        plait_adamw_args one = args;
        one.weight_decay = decays[i], one.grad_scale = half;
        x->k->adamw(p1 + off, g + off, m1 + off, v1 + off, sizes[i], &one);
        off += sizes[i];
    }
    kc_same(x, "param = the per-tensor kernel's", p1, p, n * sizeof *p);
    kc_same(x, "m = the per-tensor kernel's", m1, m, n * sizeof *m);
    kc_same(x, "v = the per-tensor kernel's", v1, v, n * sizeof *v);
    float *before = kc_out(x, n);
    x->k->copy(before, p, n);
    x->k->adamw_multi(list, 3, n, &args, no);
    kc_same(x, "a NaN factor changes nothing", p, before, n * sizeof *p);
}

/* Values over the whole float range: normals of every exponent, denormals,
 * zeros of both signs; `special` adds an Inf and a NaN. */
static float *wide_values(kc_ctx *x, size_t n, int special) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kc_next(x);
        uint32_t bits = (uint32_t)(r & 0x807fffffu) | (uint32_t)((r >> 32) % 255) << 23;
        if (i % 97 == 0) bits &= 0x807fffffu; /* denormal or zero */
        memcpy(&h[i], &bits, sizeof bits);
    }
    if (special) {
        h[n / 3] = INFINITY;
        h[n / 2] = NAN;
    }
    float *p = kc_bytes(x, h, n * sizeof *h);
    free(h);
    return p;
}

static void case_sumsq_exact(kc_ctx *x) {
    const size_t n = 200003;
    static const plait_sumsq_acc zero;
    float *vals = wide_values(x, n, 0), *more = wide_values(x, 1001, 1);
    plait_sumsq_acc *acc = kc_bytes(x, &zero, sizeof zero), *acc2 = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc, vals, n / 2);
    x->k->sumsq_exact(acc, vals + n / 2, n - n / 2);
    kc_result_add(x, "accumulator", acc, sizeof *acc, 1, KC_EXACT);
    const plait_sumsq_acc *h = kc_host_copy(x, acc, sizeof *acc);
    kc_value(x, "value", x->k->sumsq_value(h), KC_EXACT);
    x->k->sumsq_exact(acc2, more, 1001);
    x->k->sumsq_merge(acc2, acc);
    kc_result_add(x, "merged with Inf and NaN", acc2, sizeof *acc2, 1, KC_EXACT);
    kc_value(x, "value with Inf and NaN", x->k->sumsq_value(kc_host_copy(x, acc2, sizeof *acc2)), KC_EXACT);
    /* the value and the clipping factor on the device: clipping (the sum is
     * huge), no clipping (grad_clip 0), and a NaN factor for Inf */
    const double zd = 0;
    const float zf = 0;
    double *sq = kc_bytes(x, &zd, sizeof zd), *sq0 = kc_bytes(x, &zd, sizeof zd), *sq2 = kc_bytes(x, &zd, sizeof zd);
    float *sc = kc_bytes(x, &zf, sizeof zf), *sc0 = kc_bytes(x, &zf, sizeof zf), *sc2 = kc_bytes(x, &zf, sizeof zf);
    x->k->sumsq_clip(sq, sc, acc, 1.0);
    x->k->sumsq_clip(sq0, sc0, acc, 0.0);
    x->k->sumsq_clip(sq2, sc2, acc2, 1.0);
    kc_result(x, "sumsq_clip value", sq, 1, KC_EXACT);
    kc_result(x, "sumsq_clip factor", sc, 1, KC_EXACT);
    kc_result(x, "sumsq_clip factor without clipping", sc0, 1, KC_EXACT);
    kc_value(x, "sumsq_clip factor of Inf is NaN", isnan(*(const float *)kc_host_copy(x, sc2, sizeof *sc2)), KC_EXACT);
    /* one exponent, mantissas near the top: every lane of a warp in one bin,
     * and the bin's 64-bit low word carries (2^17 squares near 2^48) */
    float *hv = malloc(n * sizeof *hv);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = 0x3f7f0000u | (uint32_t)(kc_next(x) & 0xffffu) | (uint32_t)(i & 1) << 31;
        memcpy(&hv[i], &bits, sizeof bits);
    }
    float *same = kc_bytes(x, hv, n * sizeof *hv);
    free(hv);
    plait_sumsq_acc *acc3 = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc3, same, n);
    kc_result_add(x, "one exponent, carrying", acc3, sizeof *acc3, 1, KC_EXACT);
}

/* Gradient-like values: runs of 1 to 40,000 values around a scale that
 * changes from run to run (2^-60 to 2^20, up and down: each block's window
 * of exponents moves both ways), zero runs, and one value in 3,000 either
 * 2^40 times larger or 2^-40 times smaller than its run (outside any
 * window: added on its own), at an odd offset (no 16-byte loads). */
static void case_sumsq_runs(kc_ctx *x) {
    const size_t n = 400001;
    static const plait_sumsq_acc zero;
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n;) {
        size_t len = 1 + (size_t)(kc_next(x) % 40000);
        const int zeros = kc_next(x) % 8 == 0;
        const float scale = ldexpf(1.0f, (int)(kc_next(x) % 81) - 60);
        for (; len-- && i < n; i++) {
            float v = 0.0f;
            if (!zeros) {
                for (int u = 0; u < 4; u++) v += (float)(kc_next(x) % 2001) / 1000.0f - 1.0f;
                v *= scale;
                const uint64_t r = kc_next(x) % 3000;
                if (r == 0) v = ldexpf(v, 40);
                if (r == 1) v = ldexpf(v, -40);
            }
            h[i] = v;
        }
    }
    float *vals = kc_bytes(x, h, n * sizeof *h);
    free(h);
    plait_sumsq_acc *acc = kc_bytes(x, &zero, sizeof zero), *odd = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc, vals, n);
    kc_result_add(x, "runs of changing scale", acc, sizeof *acc, 1, KC_EXACT);
    x->k->sumsq_exact(odd, vals + 1, n - 1);
    kc_result_add(x, "runs of changing scale, at an odd offset", odd, sizeof *odd, 1, KC_EXACT);
}

/* ---- the device's memory functions ------------------------------------------ */

static int check_memory(const plait_device_ops *d) {
    int fails = 0;
#define EXPECT(cond)                                                                                                \
    do {                                                                                                            \
        if (!(cond)) {                                                                                              \
            printf("FAIL memory: %s (%s)\n", #cond, plait_last_error());                                             \
            fails++;                                                                                                \
        }                                                                                                           \
    } while (0)
    uint64_t used0, peak0, used, peak;
    d->memory_stats(&used0, &peak0);
    const size_t n = 1 << 20;
    float *a = d->alloc(n * sizeof(float), "test a"), *b = d->alloc(n * sizeof(float), "test b");
    EXPECT(a && b && ((uintptr_t)a % 256) == 0 && ((uintptr_t)b % 256) == 0);
    d->memory_stats(&used, &peak);
    EXPECT(used == used0 + 2 * n * sizeof(float) && peak >= used);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)i;
    EXPECT(d->copy(a, h, n * sizeof *h, PLAIT_COPY_TO_DEVICE) == PLAIT_OK);
    EXPECT(d->copy(b, a, n * sizeof *h, PLAIT_COPY_ON_DEVICE) == PLAIT_OK);
    EXPECT(d->fill_zero(b, 16 * sizeof *h) == PLAIT_OK);
    memset(h, 0xff, n * sizeof *h);
    EXPECT(d->copy(h, b, n * sizeof *h, PLAIT_COPY_TO_HOST) == PLAIT_OK);
    int right = 1;
    for (size_t i = 0; i < n; i++) right &= h[i] == (i < 16 ? 0.0f : (float)i);
    EXPECT(right);
    EXPECT(d->synchronize() == PLAIT_OK);
    d->free(a);
    d->free(b);
    d->free(NULL);
    d->memory_stats(&used, &peak);
    EXPECT(used == used0 && peak >= used0 + 2 * n * sizeof(float));
    /* far more than any GPU has: NULL, with the request named */
    plait_clear_error();
    EXPECT(d->alloc((size_t)1 << 52, "too big") == NULL);
    EXPECT(strstr(plait_last_error(), "too big") != NULL);
    EXPECT(d->synchronize() == PLAIT_OK); /* an out-of-memory is not sticky */
    free(h);
    return fails;
#undef EXPECT
}

/* ---- the harness checked on the CPU (runs everywhere) ------------------------ */

static void *host_alloc(size_t bytes, const char *tag) {
    (void)tag;
    void *p = NULL;
    return posix_memalign(&p, 256, bytes) == 0 ? p : NULL;
}
static plait_status host_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    (void)dir;
    memmove(dst, src, bytes);
    return PLAIT_OK;
}
static plait_status host_sync(void) { return PLAIT_OK; }

/* leaves the last element unwritten */
static void short_gelu(float *out, const float *inp, size_t n) { plait_k_gelu_forward(out, inp, n - 1); }

static uint64_t g_calls;
/* a different answer on every call */
static void drifting_scale(float *x, size_t n, float a) { plait_k_scale(x, n, a * (1.0f + 1e-6f * (float)++g_calls)); }

static int run_cases(const plait_kernels *k, const plait_device_ops *d, double tol, uint64_t seed);

/* The CPU kernels as the "device" must pass every case; a kernel that
 * leaves an element unwritten, or answers differently on a repeat, must
 * fail. */
static int selfcheck(void) {
    plait_device_ops host = {.struct_size = sizeof host, .alloc = host_alloc, .free = free, .copy = host_copy,
                             .synchronize = host_sync};
    cpu_table();
    int fails = run_cases(&g_cpu, &host, 1e-5, 42);
    printf("self-check, CPU against CPU: %d failures (want 0)\n", fails);
    plait_kernels broken = g_cpu;
    broken.gelu_forward = short_gelu;
    broken.scale = drifting_scale;
    int caught = run_cases(&broken, &host, 1e-5, 42);
    printf("self-check, broken kernels: %d failures (want at least 2)\n", caught);
    return fails == 0 && caught >= 2 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fp32";
    g_fp32 = strcmp(mode, "fp32") == 0;
    if (strcmp(mode, "selfcheck") == 0) return g_bf16_cases = 1, selfcheck();
    plait_precision prec = PLAIT_PRECISION_FP32;
    double tol = 1e-5;
    if (strcmp(mode, "tf32") == 0) prec = PLAIT_PRECISION_TF32, tol = 1e-3;
    else if (strcmp(mode, "bf16") == 0) prec = PLAIT_PRECISION_BF16, tol = 2e-2, g_bf16_cases = 1;
    else if (strcmp(mode, "fp32") != 0) {
        fprintf(stderr, "usage: %s fp32|tf32|bf16\n", argv[0]);
        return 2;
    }
    plait_host_install();
    /* PLAIT_TEST_CUDA_PLUGIN=cuda_emu: the same checks on the CPU emulator
     * (tests/cuda_emu), which runs the plugin's own kernel source */
    const char *plugin = getenv("PLAIT_TEST_CUDA_PLUGIN") ? getenv("PLAIT_TEST_CUDA_PLUGIN") : "cuda";
    const plait_plugin_desc *desc = plait_plugin_load(PLAIT_KIND_DEVICE, plugin);
    if (!desc) {
        fprintf(stderr, "FATAL: %s\n", plait_last_error());
        return 1;
    }
    const plait_device_ops *d = desc->ops;
    int32_t count = 0;
    if (d->count(plait_host_table(), &count) != PLAIT_OK || count < 1) {
        printf("SKIP: %s\n", plait_last_error());
        return 77;
    }
    plait_device_open_args args = {sizeof args, NULL, 0, 1, prec, 1};
    plait_device_info info = {.struct_size = sizeof info};
    if (d->open(plait_host_table(), &args, &info) != PLAIT_OK) {
        fprintf(stderr, "FATAL: open: %s\n", plait_last_error());
        return 1;
    }
    printf("device: %s, %.1f GiB, precision %s\n", info.name, (double)info.memory_bytes / (1 << 30), mode);
    cpu_table();
    const plait_kernels *k = d->kernels();
    uint64_t seed = getenv("PLAIT_TEST_SEED") ? strtoull(getenv("PLAIT_TEST_SEED"), NULL, 0)
                                              : (uint64_t)time(NULL) * 2654435761u;
    printf("seed: %llu (PLAIT_TEST_SEED repeats it)\n", (unsigned long long)seed);
    int fails = check_memory(d) + run_cases(k, d, tol, seed);
    d->close();
    printf("%s: %d failure%s\n", fails ? "FAILED" : "passed", fails, fails == 1 ? "" : "s");
    return fails ? 1 : 0;
}

/* `name` is one of the comma-separated names in `list` */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

static int run_list(const kc_named *cases, size_t n, const plait_kernels *k, const plait_device_ops *d, double tol,
                    uint64_t seed) {
    /* PLAIT_TEST_CASES=name,name,...: only those (when chasing one kernel) */
    const char *only = getenv("PLAIT_TEST_CASES");
    int fails = 0;
    for (size_t i = 0; i < n; i++)
        if (!only || listed(only, cases[i].name))
            fails += kc_run(cases[i].name, cases[i].fn, &g_cpu, k, d, tol, seed + i);
    return fails;
}

static int run_cases(const plait_kernels *k, const plait_device_ops *d, double tol, uint64_t seed) {
    static const kc_named cases[] = {
        {"sgemm", case_sgemm},           {"matmul", case_matmul},         {"bias", case_bias},
        {"layernorm", case_layernorm},   {"layernorm_fused", case_layernorm_fused}, {"layernorm_narrow", case_layernorm_narrow},   {"gelu", case_gelu}, {"gelu_fused", case_gelu_fused},             {"attention", case_attention},
        {"attention_fused", case_attention_fused},
        {"embedding", case_embedding}, {"embedding_odd", case_embedding_odd},
        {"embedding_zipf", case_embedding_zipf}, {"embedding_zipf_odd", case_embedding_zipf_odd},
        {"crossentropy", case_crossentropy}, {"vocab_loss", case_vocab_loss},
        {"fused_loss", case_fused_loss},
        {"vector", case_vector}, {"vector_paths", case_vector_paths},         {"sumsq_exact", case_sumsq_exact},
        {"sumsq_runs", case_sumsq_runs}, {"adamw_multi", case_adamw_multi},
    };
    const size_t n = sizeof cases / sizeof cases[0];
    int fails = run_list(cases, n, k, d, tol, seed);
    /* the Llama family's (ABI 1.10): a device offering none runs the
     * cases anyway, which then fail naming the missing entry */
    fails += run_list(kc_llama_cases, kc_llama_count, k, d, tol, seed + 1000);
    /* the mixture of experts' (ABI 1.21), likewise */
    fails += run_list(kc_moe_cases, kc_moe_count, k, d, tol, seed + 2000);
    /* optional as a whole (ABI 1.8): a device offering any of them must
     * offer and pass every one */
    const int offered = k->struct_size >= offsetof(plait_kernels, to_bf16) + sizeof k->to_bf16 && k->to_bf16;
    if (g_bf16_cases && !offered) printf("bf16-activation entries: not offered by this device\n");
    if (g_bf16_cases && offered) {
        fails += run_list(kc_bf16_product_cases, kc_bf16_product_count, k, d, tol, seed + n);
        fails += run_list(kc_bf16_row_cases, kc_bf16_row_count, k, d, tol, seed + n + kc_bf16_product_count);
    }
    /* the Llama family's bf16 forms (ABI 1.22), optional as a whole too */
    const int llama_bf16 = k->struct_size >=
                               offsetof(plait_kernels, rmsnorm_forward_bf16) + sizeof k->rmsnorm_forward_bf16 &&
                           k->rmsnorm_forward_bf16;
    if (g_bf16_cases && !llama_bf16) printf("the Llama family's bf16-activation entries: not offered by this device\n");
    if (g_bf16_cases && llama_bf16) fails += run_list(kc_llama_bf16_cases, kc_llama_bf16_count, k, d, tol, seed + 2000);
    return fails;
}
