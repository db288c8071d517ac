/*
 * A mixture of experts under bf16 activations on the CPU, with the
 * references of the kernel table's bf16 entries (tests/device/
 * kref_bf16.c) standing in for a device's: a model with experts keeps
 * its dense blocks' and attention halves' activations in bf16 as a model
 * without experts does, its sparse MLP halves' norm, router and gates in
 * float32 between the float32 residual stream's rows (core/model/
 * moe_bf16.c), and the experts' rows and hidden tensors in bf16 (core/
 * model/moe_experts_bf16.c). For moe-tiny's shape, gpt (every block
 * sparse) and llama (a dense block, then a sparse one with a shared
 * expert): bf16 is granted, trains as the float32 model does within the
 * dense bf16 tests' bounds (test_bf16_activations, test_llama_bf16),
 * gives the same bits twice, selective and full recomputation give the
 * bits of none, and the activations take less memory than float32's and
 * than those of the same model whose table lacks the experts' bf16
 * entries (ABI 1.29: its experts run float32), whose losses differ; a
 * forward-only model holds the sparse halves' float32 norm output and
 * not its gradient; the backward in two halves (zero-bubble schedules)
 * gives the one pass's bits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/kref_bf16.h"
#include "kernels/kernels.h"
#include "model/model_harness.h"
#include "runtime/error.h"

#define STEPS 6
#define SLOTS 2
/* configs/moe-tiny.ini cut to 2 blocks and a sequence of 32 */
#define MOE_INI                                                                                                        \
    "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 32\nvocab_size = 100\n"              \
    "moe_experts = 8\nmoe_top_k = 2\nmoe_ffn_hidden = 128\nmoe_aux_loss = 0.01\nmoe_z_loss = 0.001\n"
#define GPT_INI MOE_INI "arch = gpt\nmoe_every = 1\n"
#define LLAMA_INI MOE_INI "arch = llama\nn_kv_head = 2\nffn_hidden = 176\nmoe_every = 2\nmoe_shared_experts = 1\n"

static const plait_kernels *bf16_table(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

/* The same without the experts' bf16 entries: the experts run float32. */
static const plait_kernels *float_experts_table(void) {
    static plait_kernels k;
    k = *bf16_table();
    k.moe_permute_bf16 = NULL;
    return &k;
}

static void trace_split(const char *ini, const plait_kernels *k, int bf16, int split, harness_trace *t) {
    harness_opts o = {.tp = 1, .max_slots = SLOTS, .kernels = k, .activations_bf16 = bf16, .split_backward = split};
    t->steps = STEPS;
    assert_int_equal(harness_trace_run(ini, 2, &o, t), 0);
}

static void trace_with(const char *ini, const plait_kernels *k, int bf16, harness_trace *t) {
    trace_split(ini, k, bf16, 0, t);
}

static void trace_on(const char *ini, int bf16, harness_trace *t) { trace_with(ini, bf16_table(), bf16, t); }

static void check_trains_as_float32(const char *arch, const char *ini) {
    harness_trace f32, bf, again, fx;
    trace_on(ini, 0, &f32);
    trace_on(ini, 1, &bf);
    trace_on(ini, 1, &again);
    trace_with(ini, float_experts_table(), 1, &fx);
    assert_false(f32.bf16);
    assert_true(bf.bf16);
    /* the first step's gradients, from the same weights */
    harness_trace bf1 = bf, f321 = f32;
    bf1.steps = f321.steps = 1;
    const double dl = harness_loss_dev(&bf, &f32, SLOTS), dg1 = harness_grad_dev(&bf1, &f321),
                 dg = harness_grad_dev(&bf, &f32);
    printf("%s with experts, bf16 against float32 over %d steps: losses within %.2e, gradients within %.2e "
           "(norm-wise; %.2e at the first step); activation bytes float32 %llu, bf16 %llu (float32 experts %llu)\n",
           arch, STEPS, dl, dg, dg1, (unsigned long long)f32.act_bytes, (unsigned long long)bf.act_bytes,
           (unsigned long long)fx.act_bytes);
    /* the dense bf16 models' bounds for the losses and, from the same
     * weights, the gradients. Later the weights differ, and a route is
     * piecewise constant in them: a token whose choice flips between two
     * experts moves its whole gradient from one to the other, so the later
     * steps' gradients get a looser bound (a wrong gradient anywhere
     * shows at the first step) */
    assert_true(dl <= 1e-2);
    assert_true(dg1 <= 5e-2);
    assert_true(dg <= 2e-1);
    assert_true(dl > 0); /* it did round */
    assert_memory_equal(bf.loss, again.loss, sizeof(double) * STEPS * SLOTS);
    assert_memory_equal(bf.grads, again.grads, sizeof(float) * STEPS * bf.numel);
    assert_true(bf.act_bytes < f32.act_bytes);
    /* the experts' own rows in bf16: less memory, other bits */
    assert_true(fx.bf16);
    assert_true(bf.act_bytes < fx.act_bytes);
    assert_true(memcmp(bf.loss, fx.loss, sizeof(double) * STEPS * SLOTS) != 0);
    harness_trace_free(&fx);
    harness_trace_free(&f32);
    harness_trace_free(&bf);
    harness_trace_free(&again);
}

static void test_gpt_trains_as_float32(void **state) {
    (void)state;
    check_trains_as_float32("gpt", GPT_INI);
}

static void test_llama_trains_as_float32(void **state) {
    (void)state;
    check_trains_as_float32("llama", LLAMA_INI);
}

/* selective and full recomputation: the bits of none (the sparse half
 * rebuilds its float32 norm output in its backward in every mode) */
static void check_recompute(const char *ini) {
    harness_trace none, sel, full;
    trace_on(ini, 1, &none);
    char buf[1024];
    snprintf(buf, sizeof buf, "%srecompute = selective\n", ini);
    trace_on(buf, 1, &sel);
    snprintf(buf, sizeof buf, "%srecompute = full\n", ini);
    trace_on(buf, 1, &full);
    const harness_trace *t[2] = {&sel, &full};
    for (int i = 0; i < 2; i++) {
        assert_true(t[i]->bf16);
        assert_memory_equal(t[i]->loss, none.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(t[i]->grads, none.grads, sizeof(float) * STEPS * none.numel);
    }
    assert_true(full.act_bytes < none.act_bytes);
    harness_trace_free(&none);
    harness_trace_free(&sel);
    harness_trace_free(&full);
}

static void test_gpt_recompute(void **state) {
    (void)state;
    check_recompute(GPT_INI);
}

static void test_llama_recompute(void **state) {
    (void)state;
    check_recompute(LLAMA_INI);
}

/* The backward in two halves (zero-bubble schedules: every slot's input
 * half, then the weight halves, so each weight half runs after the other
 * slot's sparse halves overwrote the buffers they share) gives the one
 * pass's bits in every recompute mode, with the experts in bf16 and, on a
 * table without their bf16 entries, in float32; the slot keeps more
 * between the halves (the sparse half's float32 norm gradient, its
 * products' output gradients). */
static void check_split(const char *ini) {
    static const char *const modes[] = {"none", "selective", "full"};
    const plait_kernels *tables[2] = {bf16_table(), float_experts_table()};
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) {
            char buf[1024];
            snprintf(buf, sizeof buf, "%srecompute = %s\n", ini, modes[m]);
            harness_trace one, two;
            trace_split(buf, tables[k], 1, 0, &one);
            trace_split(buf, tables[k], 1, 1, &two);
            assert_true(two.bf16);
            for (int i = 0; i < STEPS * SLOTS; i++)
                if (one.loss[i] != two.loss[i])
                    fail_msg("%s experts, recompute %s: step %d slot %d loss %.17g split, %.17g one pass",
                             k ? "float32" : "bf16", modes[m], i / SLOTS, i % SLOTS, two.loss[i], one.loss[i]);
            assert_int_equal(one.numel, two.numel);
            for (size_t i = 0; i < STEPS * one.numel; i++)
                if (memcmp(&one.grads[i], &two.grads[i], sizeof(float)) != 0)
                    fail_msg("%s experts, recompute %s: step %zu gradient %zu is %.9g split, %.9g one pass",
                             k ? "float32" : "bf16", modes[m], i / one.numel, i % one.numel, (double)two.grads[i],
                             (double)one.grads[i]);
            assert_true(one.loss[(STEPS - 1) * SLOTS] != one.loss[0]);
            assert_true(two.act_bytes > one.act_bytes);
            harness_trace_free(&one);
            harness_trace_free(&two);
        }
}

static void test_gpt_split(void **state) {
    (void)state;
    check_split(GPT_INI);
}

static void test_llama_split(void **state) {
    (void)state;
    check_split(LLAMA_INI);
}

/* The activation bytes after one forward of micro-batch 2 (slot 0), the
 * model forward-only (evaluation, sampling) or not, then with `again` a
 * second forward of the same model with forward_only cleared. */
static uint64_t forward_bytes(const char *ini, int forward_only, int again) {
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1, .kernels = bf16_table(), .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h, ini, 2, &o), 0);
    assert_true(plait_model_bf16_activations(h.model));
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t *tok = malloc(2 * n * sizeof *tok);
    assert_non_null(tok);
    harness_tokens(tok, 2 * n, h.V, 7);
    plait_model_forward_only(h.model, forward_only);
    for (int pass = 0; pass <= again; pass++) {
        if (pass) plait_model_forward_only(h.model, 0);
        plait_status st = plait_model_set_batch(h.model, 0, tok, tok + n);
        for (int32_t l = 0; st == PLAIT_OK && l < h.spec->n_layers; l++) st = plait_model_forward_layer(h.model, l, 0);
        if (st != PLAIT_OK) fail_msg("%s", plait_last_error());
    }
    const uint64_t bytes = plait_model_activation_bytes(h.model);
    free(tok);
    harness_free(&h);
    return bytes;
}

/* A forward-only model never runs the sparse halves' backward, so it
 * holds their float32 norm output and not its gradient (moe_bf16.c):
 * 4·B·T·C bytes less than a model that trains; a later forward that a
 * backward follows allocates the gradient's buffer then. */
static void check_forward_only(const char *ini) {
    const uint64_t train = forward_bytes(ini, 0, 0), eval = forward_bytes(ini, 1, 0), later = forward_bytes(ini, 1, 1);
    print_message("activation bytes after a forward: training %llu, forward-only %llu, then training %llu\n",
                  (unsigned long long)train, (unsigned long long)eval, (unsigned long long)later);
    assert_int_equal(train - eval, 4ull * 2 * 32 * 64); /* B 2, T 32, C 64 */
    assert_int_equal(later, train);
}

static void test_gpt_forward_only(void **state) {
    (void)state;
    check_forward_only(GPT_INI);
}

static void test_llama_forward_only(void **state) {
    (void)state;
    check_forward_only(LLAMA_INI);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_trains_as_float32),
        cmocka_unit_test(test_llama_trains_as_float32),
        cmocka_unit_test(test_gpt_recompute),
        cmocka_unit_test(test_llama_recompute),
        cmocka_unit_test(test_gpt_forward_only),
        cmocka_unit_test(test_llama_forward_only),
        cmocka_unit_test(test_gpt_split),
        cmocka_unit_test(test_llama_split),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kref_bf16_release();
    return rc;
}
