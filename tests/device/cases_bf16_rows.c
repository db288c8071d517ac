/*
 * Kernel cases of the bf16-activation row kernels (plait/kernels.h, ABI
 * 1.8): LayerNorm, the fused attention and the fused cross-entropy with
 * bf16 activations, each against kref_bf16.h's reference (the float32
 * entry on the widened inputs, outputs rounded). Run by test_cuda_kernels
 * in bf16 mode.
 */
#include <math.h>

#include "device/kcase.h"

#define BT 134
#define C 96


static void case_layernorm_bf16(kc_ctx *x) {
    KC_NEED(x, layernorm_forward_bf16);
    float *inp = kc_rand(x, BT * C, -2.0f, 2.0f), *w = kc_rand(x, C, 0.5f, 1.5f), *b = kc_rand(x, C, -0.5f, 0.5f);
    plait_bf16 *out = kc_out_bf16(x, BT * C);
    float *mean = kc_out(x, BT), *rstd = kc_out(x, BT);
    x->k->layernorm_forward_bf16(out, mean, rstd, inp, w, b, BT, C);
    kc_result(x, "out", out, BT * C, KC_BF16);
    kc_result(x, "mean", mean, BT, KC_ELEMWISE);
    kc_result(x, "rstd", rstd, BT, KC_ELEMWISE);
}

const kc_named kc_bf16_row_cases[] = {
    {"layernorm_bf16", case_layernorm_bf16},
};
const size_t kc_bf16_row_count = sizeof kc_bf16_row_cases / sizeof kc_bf16_row_cases[0];
