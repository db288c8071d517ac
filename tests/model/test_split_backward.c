/*
 * The backward in two halves (plait_model_backward_input, then
 * _backward_weight: zero-bubble schedules) gives the one-pass backward's
 * losses and gradients bit for bit over 10 steps, with two micro-batches in
 * flight the way ZB-H1 runs them (forward 0, forward 1, input halves of 1
 * then 0, then the weight halves of 1 then 0, so the gradients accumulate in
 * the one-pass order), for the GPT and MLP arches under every recompute
 * mode; with recompute none the slot holds the weight halves' inputs mostly
 * in buffers the input half leaves dead (only the block's output and ln_2's
 * gradients, and the head's ln_f gradient, are extra); the same for
 * mixtures of experts (gpt and llama, shared experts, the auxiliary and z
 * losses, a dense block beside a sparse one), whose sparse blocks keep each
 * product's output gradient between the halves; and the halves are
 * refused out of order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_harness.h"
#include "runtime/error.h"

#define STEPS 10
#define SLOTS 2

static void run(const char *arch_ini, const char *mode, int split, const plait_kernels *k, harness_trace *t) {
    char ini[512];
    snprintf(ini, sizeof ini, "%s\nrecompute = %s\n", arch_ini, mode);
    harness_opts o = {.tp = 1, .max_slots = SLOTS, .split_backward = split, .kernels = k};
    t->steps = STEPS;
    assert_int_equal(harness_trace_run(ini, 2, &o, t), 0);
}

static void compare(const harness_trace *a, const harness_trace *b, const char *what) {
    for (int i = 0; i < STEPS * SLOTS; i++)
        if (a->loss[i] != b->loss[i])
            fail_msg("%s: step %d slot %d loss %.17g, one pass %.17g", what, i / SLOTS, i % SLOTS, a->loss[i],
                     b->loss[i]);
    assert_int_equal(a->numel, b->numel);
    for (size_t i = 0; i < STEPS * a->numel; i++)
        if (memcmp(&a->grads[i], &b->grads[i], sizeof(float)) != 0)
            fail_msg("%s: step %zu gradient element %zu is %.9g, one pass %.9g", what, i / a->numel, i % a->numel,
                     (double)a->grads[i], (double)b->grads[i]);
}

/* k: NULL, the CPU's kernels (fused attention); else a table without it.
 * per_block: the floats of B·T·C a block's slot keeps extra at recompute
 * none (a dense model's, asserted exactly); 0: a model with sparse blocks,
 * which keep more whatever the mode (their experts' output gradients). */
static void check_arch(const char *arch_ini, const char *name, const plait_kernels *k, int per_block) {
    static const char *const modes[] = {"none", "selective", "full"};
    for (int m = 0; m < 3; m++) {
        harness_trace one, two;
        run(arch_ini, modes[m], 0, k, &one);
        run(arch_ini, modes[m], 1, k, &two);
        char what[96];
        snprintf(what, sizeof what, "%s, recompute %s, split", name, modes[m]);
        compare(&two, &one, what);
        assert_true(one.loss[(STEPS - 1) * SLOTS] != one.loss[0]);
        printf("%s: activation bytes %llu in one pass, %llu split\n", what, (unsigned long long)one.act_bytes,
               (unsigned long long)two.act_bytes);
        if (per_block == 0) assert_true(two.act_bytes > one.act_bytes);
        if (per_block > 0 && m == 0) {
            /* B=2, T=32, C=32, 2 blocks, 2 slots: dy and dln2 per block (64
             * floats aligned: BT*C = 2048 floats each), the head's dln; a
             * GPT block with fused attention has no probabilities to lend
             * dres2 and dln1, so it keeps those too */
            const uint64_t BTC = 2 * 32 * 32 * sizeof(float);
            assert_int_equal(two.act_bytes - one.act_bytes, (uint64_t)SLOTS * (2 * (uint64_t)per_block + 1) * BTC);
        }
        harness_trace_free(&one);
        harness_trace_free(&two);
    }
}

#define GPT_INI "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\nblock_size = 32\nvocab_size = 100"

static void test_gpt(void **state) {
    (void)state;
    check_arch(GPT_INI, "gpt", NULL, 4);
}

static void test_gpt_unfused(void **state) {
    (void)state;
    check_arch(GPT_INI, "gpt (unfused attention)", harness_unfused_kernels(), 2);
}

static void test_mlp(void **state) {
    (void)state;
    check_arch("[run]\nseed = 5\n[model]\narch = mlp\nn_layer = 2\nn_embd = 32\nblock_size = 32\nvocab_size = 100",
               "mlp", NULL, 2);
}

/* Mixtures of experts: the sparse blocks' halves (moe.c) against their one pass. */
static void test_moe_gpt(void **state) {
    (void)state;
    check_arch(GPT_INI "\nmoe_experts = 4\nmoe_top_k = 2\nmoe_ffn_hidden = 16\nmoe_shared_experts = 1\n"
                       "moe_aux_loss = 0.01\nmoe_z_loss = 0.001",
               "gpt with experts", NULL, 0);
}

static void test_moe_llama(void **state) {
    (void)state;
    /* block h.0 dense, h.1 sparse */
    check_arch("[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_embd = 32\nffn_hidden = 48\n"
               "block_size = 32\nvocab_size = 100\nmoe_experts = 4\nmoe_top_k = 2\nmoe_ffn_hidden = 16\n"
               "moe_every = 2\nmoe_shared_experts = 1\nmoe_router = sigmoid\nmoe_aux_loss = 0.01\nmoe_z_loss = 0.001",
               "llama with experts", NULL, 0);
}

/* Out of order: weight before input, input twice, a forward while the
 * weight half is due, halves on a model not laid out for them. */
static void test_order_refused(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1, .split_backward = 1};
    assert_int_equal(harness_init_ex(&h, "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 8\n"
                                         "vocab_size = 50", 1, &o), 0);
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t tok[64];
    harness_tokens(tok, n, h.V, 3);
    assert_int_equal(plait_model_set_batch(h.model, 0, tok, tok), PLAIT_OK);
    for (int32_t l = 0; l < 3; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_weight(h.model, 2, 0), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "before its input half"));
    assert_int_equal(plait_model_backward_input(h.model, 2, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_input(h.model, 2, 0), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "while its weight half is still due"));
    assert_int_equal(plait_model_forward_layer(h.model, 2, 0), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "before the weight half"));
    assert_int_equal(plait_model_backward_weight(h.model, 2, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_input(h.model, 1, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_weight(h.model, 1, 0), PLAIT_OK);
    harness_free(&h);
    o.split_backward = 0;
    assert_int_equal(harness_init_ex(&h, "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 8\n"
                                         "vocab_size = 50", 1, &o), 0);
    assert_int_equal(plait_model_set_batch(h.model, 0, tok, tok), PLAIT_OK);
    for (int32_t l = 0; l < 3; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_input(h.model, 2, 0), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "laid out for a split backward"));
    harness_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt),     cmocka_unit_test(test_gpt_unfused), cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_moe_gpt), cmocka_unit_test(test_moe_llama),   cmocka_unit_test(test_order_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
