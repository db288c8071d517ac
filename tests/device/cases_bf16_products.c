/*
 * Kernel cases of the bf16-activation products (plait/kernels.h, ABI 1.8):
 * to_bf16 and the matmul_*_bf16 entries, each against kref_bf16.h's
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
};
const size_t kc_bf16_product_count = sizeof kc_bf16_product_cases / sizeof kc_bf16_product_cases[0];
