/*
 * [model] recompute: selective and full give losses and gradients
 * bit-identical to none over 20 steps in fp32 (GPT and MLP arches), with
 * two micro-batches in flight the way a pipeline schedule interleaves them
 * (forward 0, forward 1, backward 1, backward 0: the shared recompute
 * buffers are overwritten by the other slot's forward in between); and they
 * keep less: activation bytes none > selective > full, each by at least the
 * parts the mode drops. GPT with the CPU's fused attention (no
 * probabilities kept) and with a table without it.
 *
 * [model] recompute_offload = host under full: the same losses and
 * gradients bit for bit, float32 and under a bf16 residual stream (the
 * bf16 entries' CPU references standing in for a device's), GPT, Llama
 * and MLP; the device keeps every kept boundary fewer but the two it
 * runs a layer in, and the host holds them, exactly.
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
#include "model/model_internal.h"
#include "runtime/error.h"

#define STEPS 20
#define SLOTS 2

static const char *const modes[] = {"none", "selective", "full"};

static void run(const char *arch_ini, const char *mode, const plait_kernels *k, harness_trace *t) {
    char ini[512];
    snprintf(ini, sizeof ini, "%s\nrecompute = %s\n", arch_ini, mode);
    harness_opts o = {.tp = 1, .max_slots = SLOTS, .kernels = k};
    t->steps = STEPS;
    assert_int_equal(harness_trace_run(ini, 2, &o, t), 0);
}

/* k: the kernels (NULL: the CPU's, with the fused attention; else the
 * table without it, where a GPT block keeps the probabilities) */
static void check_arch(const char *arch_ini, int is_gpt, const plait_kernels *k) {
    harness_trace t[3];
    for (int m = 0; m < 3; m++) run(arch_ini, modes[m], k, &t[m]);
    for (int m = 1; m < 3; m++) {
        for (int step = 0; step < STEPS; step++)
            for (int s = 0; s < SLOTS; s++)
                if (t[m].loss[step * SLOTS + s] != t[0].loss[step * SLOTS + s])
                    fail_msg("recompute = %s: step %d slot %d loss %.17g, none %.17g", modes[m],
                             step, s, t[m].loss[step * SLOTS + s], t[0].loss[step * SLOTS + s]);
        assert_int_equal(t[m].numel, t[0].numel);
        size_t total = STEPS * t[0].numel;
        for (size_t i = 0; i < total; i++)
            if (memcmp(&t[m].grads[i], &t[0].grads[i], sizeof(float)) != 0)
                fail_msg("recompute = %s: step %zu gradient element %zu is %.9g, none %.9g",
                         modes[m], i / t[0].numel, i % t[0].numel, (double)t[m].grads[i],
                         (double)t[0].grads[i]);
    }
    /* the losses moved: the comparison covered changing parameters */
    assert_true(t[0].loss[(STEPS - 1) * SLOTS] != t[0].loss[0]);
    /* memory: B=2, T=32, C=32, H=4, 2 blocks, 2 slots. Selective drops per
     * block and slot the probabilities (B·H·T² floats, GPT without fused
     * attention) and the GELU output (B·T·4C) and adds one shared copy of
     * each; full keeps nothing of a block but shares one block's worth. */
    const uint64_t f = sizeof(float), BT = 2 * 32, C = 32;
    const uint64_t att = is_gpt && k ? 2 * 4 * 32 * 32 : 0, gelu = BT * 4 * C;
    const uint64_t blocks = 2 * SLOTS;
    printf("%s%s activation bytes: none %llu, selective %llu, full %llu\n", is_gpt ? "gpt" : "mlp",
           k ? " (unfused attention)" : "",
           (unsigned long long)t[0].act_bytes, (unsigned long long)t[1].act_bytes,
           (unsigned long long)t[2].act_bytes);
    assert_true(t[0].act_bytes - t[1].act_bytes >= (blocks - 1) * (att + gelu) * f);
    assert_true(t[1].act_bytes > t[2].act_bytes);
    for (int m = 0; m < 3; m++) harness_trace_free(&t[m]);
}

#define GPT_INI "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\nblock_size = 32\nvocab_size = 100"

static void test_gpt(void **state) {
    (void)state;
    check_arch(GPT_INI, 1, NULL);
}

static void test_gpt_unfused(void **state) {
    (void)state;
    check_arch(GPT_INI, 1, harness_unfused_kernels());
}

static void test_mlp(void **state) {
    (void)state;
    check_arch("[run]\nseed = 5\n[model]\narch = mlp\nn_layer = 2\nn_embd = 32\n"
               "block_size = 32\nvocab_size = 100",
               0, NULL);
}

/* The CPU's kernels with the bf16 entries' references. */
static const plait_kernels *bf16_kernels(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

/* recompute full, with and without the offload; n_layer 2 and SLOTS
 * slots of B = 2, T = 32, C = 32 (the archs' shapes below) */
static void check_offload(const char *arch_ini, int bf16) {
    harness_trace t[2];
    for (int o = 0; o < 2; o++) {
        char ini[512];
        snprintf(ini, sizeof ini, "%s\nrecompute = full\nrecompute_offload = %s\n", arch_ini, o ? "host" : "none");
        harness_opts opts = {.tp = 1,
                             .max_slots = SLOTS,
                             .kernels = bf16 ? bf16_kernels() : NULL,
                             .activations_bf16 = bf16,
                             .residual_bf16 = bf16};
        t[o].steps = STEPS;
        assert_int_equal(harness_trace_run(ini, 2, &opts, &t[o]), 0);
    }
    assert_int_equal(t[0].bf16, bf16);
    for (int i = 0; i < STEPS * SLOTS; i++)
        if (memcmp(&t[1].loss[i], &t[0].loss[i], sizeof(double)) != 0)
            fail_msg("offload%s: step %d slot %d loss %.17g, on the device %.17g", bf16 ? " bf16" : "", i / SLOTS,
                     i % SLOTS, t[1].loss[i], t[0].loss[i]);
    assert_int_equal(t[1].numel, t[0].numel);
    for (size_t i = 0; i < STEPS * t[0].numel; i++)
        if (memcmp(&t[1].grads[i], &t[0].grads[i], sizeof(float)) != 0)
            fail_msg("offload%s: step %zu gradient element %zu is %.9g, on the device %.9g", bf16 ? " bf16" : "",
                     i / t[0].numel, i % t[0].numel, (double)t[1].grads[i], (double)t[0].grads[i]);
    assert_true(t[0].loss[(STEPS - 1) * SLOTS] != t[0].loss[0]);
    /* each slot keeps boundaries 0..2 (the inputs of the blocks and the
     * head), 16-float aligned; the device gains the running layer's two
     * float32 buffers, which a bf16 residual stream has anyway */
    const uint64_t n = 2 * 32 * 32, each = bf16 ? n * 2 : n * 4, kept = 3 * SLOTS * each;
    const uint64_t gained = bf16 ? 0 : 2 * n * 4;
    printf("offload%s: device %llu -> %llu bytes, host %llu -> %llu\n", bf16 ? " bf16" : "",
           (unsigned long long)t[0].act_bytes, (unsigned long long)t[1].act_bytes, (unsigned long long)t[0].host_bytes,
           (unsigned long long)t[1].host_bytes);
    assert_true(t[0].host_bytes == 0 && t[1].host_bytes == kept);
    assert_true(t[0].act_bytes - t[1].act_bytes == kept - gained);
    for (int o = 0; o < 2; o++) harness_trace_free(&t[o]);
}

#define LLAMA_INI                                                                                                      \
    "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 32\n"                    \
    "ffn_hidden = 48\nblock_size = 32\nvocab_size = 100"

static void test_offload(void **state) {
    (void)state;
    check_offload(GPT_INI, 0);
    check_offload(LLAMA_INI, 0);
    check_offload("[run]\nseed = 5\n[model]\narch = mlp\nn_layer = 2\nn_embd = 32\nblock_size = 32\nvocab_size = 100",
                  0);
}

static void test_offload_bf16(void **state) {
    (void)state;
    check_offload(GPT_INI, 1);
    check_offload(LLAMA_INI, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt),     cmocka_unit_test(test_gpt_unfused),  cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_offload), cmocka_unit_test(test_offload_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
