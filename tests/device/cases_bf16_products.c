/*
 * Kernel cases of the bf16-activation products (plait/kernels.h, ABI 1.8):
 * to_bf16 (and its inverse from_bf16, ABI 1.23) and the matmul_*_bf16 entries, each against kref_bf16.h's
 * reference (the float32 entry on the widened inputs, outputs rounded).
 * Run by test_cuda_kernels in bf16 mode.
 */
#include <math.h>

#include "device/kcase.h"

#define BT 134
#define C 96
#define OC 160


/* Rounding: values spread over many binades, with ties and NaN, bit for bit. */
static void case_to_bf16(kc_ctx *x) {
    KC_NEED(x, to_bf16);
    const size_t n = 4099; /* not a multiple of any vector width */
    float *src = kc_rand(x, n, -3.0f, 3.0f);
    plait_bf16 *dst = kc_out_bf16(x, n);
    x->k->to_bf16(dst, src, n);
    kc_result(x, "rounded", dst, n, KC_EXACT);
}

/* Widening: random bf16 values back to float32, bit for bit (a bf16
 * message back in its float32 buffer). */
static void case_from_bf16(kc_ctx *x) {
    KC_NEED(x, from_bf16);
    const size_t n = 4099;
    plait_bf16 *src = kc_rand_bf16(x, n, -3.0f, 3.0f);
    float *dst = kc_out(x, n);
    x->k->from_bf16(dst, src, n);
    kc_result(x, "widened", dst, n, KC_EXACT);
}

/* matmul_forward_bf16: with a bias and without; a bias one element off
 * 16-byte alignment (no epilogue can read it: the product apart, then the
 * bias); a width that is not a multiple of 8; no inputs (C = 0: the bias
 * alone, apart). */
static void case_matmul_forward_bf16(kc_ctx *x) {
    KC_NEED(x, matmul_forward_bf16);
    plait_bf16 *inp = kc_rand_bf16(x, BT * C, -1, 1), *w = kc_rand_bf16(x, OC * C, -0.5f, 0.5f);
    plait_bf16 *bias = kc_rand_bf16(x, OC + 8, -1, 1);
    plait_bf16 *out = kc_out_bf16(x, BT * OC), *out_nb = kc_out_bf16(x, BT * OC), *out_mis = kc_out_bf16(x, BT * OC);
    x->k->matmul_forward_bf16(out, inp, w, bias, BT, C, OC);
    x->k->matmul_forward_bf16(out_nb, inp, w, NULL, BT, C, OC);
    x->k->matmul_forward_bf16(out_mis, inp, w, bias + 1, BT, C, OC);
    kc_result(x, "out, bias", out, BT * OC, KC_BF16);
    kc_result(x, "out, no bias", out_nb, BT * OC, KC_BF16);
    kc_result(x, "out, bias apart", out_mis, BT * OC, KC_BF16);
    plait_bf16 *out_n = kc_out_bf16(x, BT * (OC - 4)), *out_0 = kc_out_bf16(x, BT * OC);
    x->k->matmul_forward_bf16(out_n, inp, w, bias, BT, C, OC - 4);
    x->k->matmul_forward_bf16(out_0, inp, w, bias, BT, 0, OC);
    kc_result(x, "out, width 156", out_n, BT * (OC - 4), KC_BF16);
    kc_result(x, "out, no inputs", out_0, BT * OC, KC_BF16);
}

/* matmul_forward_residual_bf16: float32 residual, bias and output; in
 * place (out == res), without a residual, a bias apart */
static void case_matmul_forward_residual_bf16(kc_ctx *x) {
    KC_NEED(x, matmul_forward_residual_bf16);
    plait_bf16 *inp = kc_rand_bf16(x, BT * C, -1, 1), *w = kc_rand_bf16(x, OC * C, -0.5f, 0.5f);
    float *bias = kc_rand(x, OC + 4, -1, 1), *res = kc_rand(x, BT * OC, -1, 1);
    float *out = kc_out(x, BT * OC), *out_nr = kc_out(x, BT * OC), *out_mis = kc_out(x, BT * OC);
    float *inplace = kc_rand(x, BT * OC, -1, 1);
    x->k->matmul_forward_residual_bf16(out, res, inp, w, bias, BT, C, OC);
    x->k->matmul_forward_residual_bf16(out_nr, NULL, inp, w, bias, BT, C, OC);
    x->k->matmul_forward_residual_bf16(out_mis, res, inp, w, bias + 1, BT, C, OC);
    x->k->matmul_forward_residual_bf16(inplace, inplace, inp, w, NULL, BT, C, OC);
    kc_result(x, "out = res + product + bias", out, BT * OC, KC_GEMM);
    kc_result(x, "out, no residual", out_nr, BT * OC, KC_GEMM);
    kc_result(x, "out, bias apart", out_mis, BT * OC, KC_GEMM);
    kc_result(x, "in place, no bias", inplace, BT * OC, KC_GEMM);
}

/* matmul_forward_gelu_bf16: GELU's input and output in bf16, at a width
 * the epilogue takes (160), one it does not (156: apart), without a bias,
 * and with no inputs (apart: GELU of the bias). */
static void case_matmul_forward_gelu_bf16(kc_ctx *x) {
    KC_NEED(x, matmul_forward_gelu_bf16);
    static const int64_t widths[2] = {OC, OC - 4};
    for (int i = 0; i < 2; i++) {
        const int64_t F = widths[i];
        plait_bf16 *inp = kc_rand_bf16(x, BT * C, -1, 1), *w = kc_rand_bf16(x, F * C, -0.3f, 0.3f);
        plait_bf16 *bias = kc_rand_bf16(x, F, -1, 1);
        plait_bf16 *out = kc_out_bf16(x, BT * F), *pre = kc_out_bf16(x, BT * F);
        x->k->matmul_forward_gelu_bf16(out, pre, inp, w, bias, BT, C, F);
        kc_result(x, i ? "out (apart)" : "out", out, BT * F, KC_BF16);
        kc_result(x, i ? "pre (apart)" : "pre", pre, BT * F, KC_BF16);
        if (i) continue;
        plait_bf16 *out_nb = kc_out_bf16(x, BT * F), *pre_nb = kc_out_bf16(x, BT * F);
        plait_bf16 *out_0 = kc_out_bf16(x, BT * F), *pre_0 = kc_out_bf16(x, BT * F);
        x->k->matmul_forward_gelu_bf16(out_nb, pre_nb, inp, w, NULL, BT, C, F);
        x->k->matmul_forward_gelu_bf16(out_0, pre_0, inp, w, bias, BT, 0, F);
        kc_result(x, "out, no bias", out_nb, BT * F, KC_BF16);
        kc_result(x, "pre, no bias", pre_nb, BT * F, KC_BF16);
        kc_result(x, "out, no inputs", out_0, BT * F, KC_BF16);
        kc_result(x, "pre, no inputs", pre_0, BT * F, KC_BF16);
    }
}

/* The backward of a layer [BT,Cin] -> [BT,F] (pre non-NULL: its input is
 * gelu(pre)): one call into non-zero dweight and dbias, then the input
 * half alone (dweight NULL) and the parameter half alone (dinp NULL),
 * which must give the one call's bits. */
static void backward_bf16_at(kc_ctx *x, int64_t Cin, int64_t F, int gelu) {
    plait_bf16 *dout = kc_rand_bf16(x, BT * F, -1, 1), *inp = kc_rand_bf16(x, BT * Cin, -1, 1);
    plait_bf16 *w = kc_rand_bf16(x, F * Cin, -0.5f, 0.5f), *pre = gelu ? kc_rand_bf16(x, BT * Cin, -3, 3) : NULL;
    plait_bf16 *dinp = kc_out_bf16(x, BT * Cin), *dinp2 = kc_out_bf16(x, BT * Cin);
    float *dw = kc_rand(x, F * Cin, -1, 1), *db = kc_rand(x, F, -1, 1);
    float *dw2 = kc_out(x, F * Cin), *db2 = kc_out(x, F);
    x->k->copy(dw2, dw, (size_t)(F * Cin));
    x->k->copy(db2, db, (size_t)F);
    if (gelu) {
        x->k->matmul_backward_gelu_bf16(dinp, dw, db, dout, inp, w, pre, BT, Cin, F);
        x->k->matmul_backward_gelu_bf16(dinp2, NULL, NULL, dout, inp, w, pre, BT, Cin, F);
        x->k->matmul_backward_gelu_bf16(NULL, dw2, db2, dout, inp, NULL, NULL, BT, Cin, F);
    } else {
        x->k->matmul_backward_bf16(dinp, dw, db, dout, inp, w, BT, Cin, F);
        x->k->matmul_backward_bf16(dinp2, NULL, NULL, dout, inp, w, BT, Cin, F);
        x->k->matmul_backward_bf16(NULL, dw2, db2, dout, inp, NULL, BT, Cin, F);
    }
    kc_result(x, "dinp", dinp, BT * Cin, KC_BF16);
    kc_result(x, "dweight+=", dw, F * Cin, KC_GEMM);
    kc_result(x, "dbias+=", db, F, KC_ELEMWISE); /* row chunks: the CPU's sums, not its order */
    kc_same(x, "dinp: one call = the input half alone", dinp, dinp2, (size_t)(BT * Cin) * sizeof *dinp);
    kc_same(x, "dweight: one call = the parameter half alone", dw, dw2, (size_t)(F * Cin) * sizeof *dw);
    kc_same(x, "dbias: one call = the parameter half alone", db, db2, (size_t)F * sizeof *db);
}

/* At widths that are multiples of 8 (the DGELU epilogue; 8 columns a
 * thread in the bias gradient) and ones that are not (apart; a column a
 * thread). */
static void case_matmul_backward_bf16(kc_ctx *x) {
    KC_NEED(x, matmul_backward_bf16);
    backward_bf16_at(x, C, OC, 0);
    backward_bf16_at(x, C - 4, OC - 4, 0);
}

static void case_matmul_backward_gelu_bf16(kc_ctx *x) {
    KC_NEED(x, matmul_backward_gelu_bf16);
    backward_bf16_at(x, C, OC, 1);
    backward_bf16_at(x, C - 4, OC - 4, 1);
}

/* GELU over bf16, in place and not, an odd length. */
static void case_gelu_bf16(kc_ctx *x) {
    KC_NEED(x, gelu_forward_bf16);
    const size_t n = 4099;
    plait_bf16 *inp = kc_rand_bf16(x, n, -4.0f, 4.0f), *out = kc_out_bf16(x, n);
    x->k->gelu_forward_bf16(out, inp, n);
    kc_result(x, "out", out, n, KC_BF16);
    x->k->gelu_forward_bf16(inp, inp, n);
    kc_same(x, "in place = apart", inp, out, n * sizeof *out);
}

const kc_named kc_bf16_product_cases[] = {
    {"gelu_bf16", case_gelu_bf16},
    {"to_bf16", case_to_bf16},
    {"from_bf16", case_from_bf16},
    {"matmul_forward_bf16", case_matmul_forward_bf16},
    {"matmul_forward_residual_bf16", case_matmul_forward_residual_bf16},
    {"matmul_forward_gelu_bf16", case_matmul_forward_gelu_bf16},
    {"matmul_backward_bf16", case_matmul_backward_bf16},
    {"matmul_backward_gelu_bf16", case_matmul_backward_gelu_bf16},
};
const size_t kc_bf16_product_count = sizeof kc_bf16_product_cases / sizeof kc_bf16_product_cases[0];
