/*
 * The llama arch's rotary frequencies (core/model/rope_freq.c): without
 * scaling 1 / theta^(2i/HS) bit for bit; under rope_scaling = llama3
 * (Llama 3.1 8B's: theta 500000, head size 128, factor 8, low_freq_factor
 * 1, high_freq_factor 4, original context 8192) a high, a low and two
 * blended frequencies against values worked out by hand from transformers'
 * _compute_llama3_parameters:
 *
 *   inv = 1 / theta^(2i/HS); wavelen = 2π / inv
 *   wavelen < 8192 / 4:  inv                      (high: kept)
 *   wavelen > 8192 / 1:  inv / 8                  (low: divided by factor)
 *   otherwise:           s = (8192 / wavelen - 1) / (4 - 1),
 *                        (1 - s) · inv / 8 + s · inv
 *
 * in double (i = 30: inv 2.131119537e-3, wavelen 2948.3, s 0.592849,
 * 1.371893568e-3; i = 33: inv 1.152042740e-3, s 0.167343, 3.126937504e-4);
 * float32 arithmetic stays within 2e-6 relative of them. And the keys:
 * [model] rope_scaling reaches the description, a llama3 parameter without
 * rope_scaling = llama3 and a band with low_freq_factor not below
 * high_freq_factor are refused, naming the key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_harness.h"
#include "model/model_internal.h"
#include "model/rope_freq.h"
#include "runtime/error.h"

static void test_unscaled(void **state) {
    (void)state;
    for (int64_t i = 0; i < 64; i++) {
        const float want = 1.0f / powf(500000.0f, (float)(2 * i) / 128.0f);
        const plait_rope_scaling none = {.type = PLAIT_ROPE_SCALING_NONE, .factor = 8};
        assert_true(plait_rope_inv_freq(500000, NULL, i, 128) == want);
        assert_true(plait_rope_inv_freq(500000, &none, i, 128) == want);
    }
}

static void test_llama3(void **state) {
    (void)state;
    const plait_rope_scaling s = {PLAIT_ROPE_SCALING_LLAMA3, 8, 1, 4, 8192};
    static const struct {
        int64_t i;
        double want;
    } cases[] = {
        {0, 1.0},              /* wavelength 2π: high, kept */
        {20, 1.656044008e-02}, /* wavelength 379: high, kept */
        {30, 1.371893568e-03}, /* blended, s = 0.593 */
        {33, 3.126937504e-04}, /* blended, s = 0.167 */
        {63, 3.068925989e-07}, /* wavelength 2.6e6: low, 2.455140791e-06 / 8 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const double got = plait_rope_inv_freq(500000, &s, cases[k].i, 128);
        if (fabs(got - cases[k].want) > 2e-6 * cases[k].want)
            fail_msg("i = %lld: %.9e, want %.9e", (long long)cases[k].i, got, cases[k].want);
    }
}

static const char *const base = "[model]\narch = llama\nn_layer = 1\nn_head = 4\nn_embd = 16\nblock_size = 8\n"
                                "vocab_size = 11\n";

static void test_keys(void **state) {
    (void)state;
    char ini[512];
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1};
    snprintf(ini, sizeof ini, "%srope_scaling = llama3\nrope_factor = 32\nrope_original_max_pos = 4\n", base);
    assert_int_equal(harness_init_ex(&h, ini, 2, &o), 0);
    assert_int_equal(h.desc->rope_scaling.type, PLAIT_ROPE_SCALING_LLAMA3);
    assert_true(h.desc->rope_scaling.factor == 32 && h.desc->rope_scaling.low_freq_factor == 1 &&
                h.desc->rope_scaling.high_freq_factor == 4 && h.desc->rope_scaling.original_max_pos == 4);
    harness_free(&h);
    struct {
        const char *add, *want;
    } refused[] = {
        {"rope_factor = 16\n", "rope_factor is a parameter of rope_scaling = llama3"},
        {"rope_scaling = llama3\nrope_low_freq_factor = 4\n", "rope_low_freq_factor = 4, rope_high_freq_factor = 4"},
        {"rope_scaling = yarn\n", "rope_scaling"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        snprintf(ini, sizeof ini, "%s%s", base, refused[k].add);
        assert_int_equal(harness_init_ex(&h, ini, 2, &o), -1);
        if (!strstr(plait_last_error(), refused[k].want))
            fail_msg("refused with \"%s\", not naming \"%s\"", plait_last_error(), refused[k].want);
        harness_free(&h);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unscaled),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
