/*
 * Activation memory per rank against the formulas of docs/parallelism.md
 * (Korthikanti et al. 2022's, adjusted for what plait stores): the bytes a
 * rank's model allocates for one more transformer block (a model of 3
 * blocks less one of 2, so only per-block terms remain) and for the
 * recompute buffers all blocks share, for recompute none, selective and
 * full, under tensor parallelism with and without sequence parallelism,
 * gpt and llama, float32; and gpt and llama with bf16 activations (the
 * bf16 entries' CPU references standing in for a device's), whose
 * products' operands and norm outputs take 2 bytes an element (the residual stream, the
 * norms' statistics and the log-sum-exps stay float32). The sizes are multiples of the
 * slots' 16-float alignment, so the counts are exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>

#include "device/kref_bf16.h"
#include "kernels/kernels.h"
#include "model/model_harness.h"
#include "model/model_internal.h"
#include "runtime/error.h"

/* Never called: the model is only laid out, not run. */
static plait_status never(void *ctx, float *x, size_t n) {
    (void)ctx, (void)x, (void)n;
    return plait_set_error(PLAIT_ERR_INTERNAL, "test: a collective was called");
}
static plait_status never_gather(void *ctx, const float *in, float *out, size_t n, void **req) {
    (void)ctx, (void)in, (void)out, (void)n, (void)req;
    return plait_set_error(PLAIT_ERR_INTERNAL, "test: a collective was called");
}
static plait_status never_wait(void *ctx, void *req) {
    (void)ctx, (void)req;
    return PLAIT_OK;
}

typedef struct shape {
    const char *arch;
    double s, b, h, a, kv, F; /* sequence, micro-batch, width, heads, key/value heads, MLP width */
} shape;

/* Bytes of one block's activations in a slot, and of the shared recompute
 * buffers, by the formulas (float32: 4 bytes an element, the norms'
 * outputs and the products' operands 2 under bf16 activations; t' = t
 * under sequence parallelism, else 1). */
static double block_bytes(const shape *x, double t, int sp, int bf16, const char *recompute, int shared) {
    const double s = x->s, b = x->b, h = x->h, a = x->a, tq = sp ? t : 1;
    const int gpt = x->arch[0] == 'g';
    const int none = recompute[0] == 'n', selective = recompute[0] == 's';
    /* the two norms' outputs (split by sequence parallelism in the gpt
     * arch and under bf16 activations, gathered in the llama arch's float32
     * slots), the products' operands
     * (split by tp), the residual stream's two tensors and the norms'
     * statistics (split by sequence parallelism), the rows' log-sum-exp */
    double products = gpt ? 12 * s * b * h / t : s * b * h * (2 + 2 * x->kv / a) / t + 3 * s * b * x->F / t;
    const double stats = gpt ? 4 : 2,
                 dropped = gpt ? 4 * s * b * h / t : s * b * x->F / t; /* GELU's, SwiGLU's output */
    const double narrow = 2 * s * b * h / (gpt || bf16 ? tq : 1) + products,
                 wide = 2 * s * b * h / tq + s * b * (a / t + stats / tq);
    const double half = bf16 ? 2 : 4, block = half * narrow + 4 * wide, input = 4 * s * b * h / tq;
    if (shared) return none ? 0 : selective ? half * dropped : block - input;
    return none ? block : selective ? block - half * dropped : input;
}

/* The CPU's kernels with the bf16 entries' references. */
static const plait_kernels *bf16_kernels(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

static uint64_t laid_out(const char *ini, int32_t B, int tp, int sp, int bf16, uint64_t *rc_bytes) {
    static plait_tp_ops ops;
    ops = (plait_tp_ops){.struct_size = sizeof ops,
                         .enter_backward = never,
                         .exit_forward = never,
                         .reduce_max = never,
                         .reduce_sum = never,
                         .sequence_parallel = sp,
                         .allgather = never_gather,
                         .reduce_scatter = never_gather,
                         .wait = never_wait};
    harness h;
    harness_opts o = {.tp = tp, .ops = &ops, .kernels = bf16 ? bf16_kernels() : NULL, .activations_bf16 = bf16};
    assert_int_equal(harness_init_ex(&h, ini, B, &o), 0);
    assert_int_equal(h.model->sp, sp);
    assert_int_equal(plait_model_bf16_activations(h.model), bf16);
    model_slot *s;
    assert_int_equal(plait_model_slot_get(h.model, 0, &s), PLAIT_OK);
    uint64_t bytes = plait_model_activation_bytes(h.model);
    *rc_bytes = h.model->rc_bytes;
    harness_free(&h);
    return bytes;
}

static void check(const shape *x, const char *model_keys, int tp, int bf16) {
    static const char *const modes[] = {"none", "selective", "full"};
    for (int sp = 0; sp <= 1; sp++)
        for (int i = 0; i < 3; i++) {
            char ini[2][512];
            uint64_t total[2], rc[2];
            for (int l = 0; l < 2; l++) {
                snprintf(ini[l], sizeof ini[l], "[model]\narch = %s\nn_layer = %d\nrecompute = %s\n%s", x->arch, 2 + l,
                         modes[i], model_keys);
                total[l] = laid_out(ini[l], (int32_t)x->b, tp, sp, bf16, &rc[l]);
            }
            const double want = block_bytes(x, tp, sp, bf16, modes[i], 0),
                         want_rc = block_bytes(x, tp, sp, bf16, modes[i], 1);
            if ((double)(total[1] - total[0]) != want || (double)rc[0] != want_rc)
                fail_msg("%s%s tp %d, sequence parallel %d, recompute %s: a block's activations take %llu bytes "
                         "(formula %.0f), the shared recompute buffers %llu (formula %.0f)",
                         x->arch, bf16 ? " bf16" : "", tp, sp, modes[i], (unsigned long long)(total[1] - total[0]),
                         want, (unsigned long long)rc[0], want_rc);
        }
}

static void test_gpt(void **state) {
    (void)state;
    const shape x = {"gpt", 16, 4, 32, 4, 4, 128};
    const char *keys = "n_head = 4\nn_embd = 32\nblock_size = 16\nvocab_size = 64\n";
    check(&x, keys, 2, 0);
    check(&x, keys, 4, 0);
}

static void test_gpt_bf16(void **state) {
    (void)state;
    const shape x = {"gpt", 16, 4, 32, 4, 4, 128};
    const char *keys = "n_head = 4\nn_embd = 32\nblock_size = 16\nvocab_size = 64\n";
    check(&x, keys, 2, 1);
    check(&x, keys, 4, 1);
}

static void test_llama(void **state) {
    (void)state;
    const shape x = {"llama", 16, 4, 32, 4, 2, 48};
    check(&x, "n_head = 4\nn_kv_head = 2\nn_embd = 32\nffn_hidden = 48\nblock_size = 16\nvocab_size = 64\n", 2, 0);
}

static void test_llama_bf16(void **state) {
    (void)state;
    const shape x = {"llama", 16, 4, 32, 4, 2, 48};
    check(&x, "n_head = 4\nn_kv_head = 2\nn_embd = 32\nffn_hidden = 48\nblock_size = 16\nvocab_size = 64\n", 2, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt), cmocka_unit_test(test_gpt_bf16),
                                       cmocka_unit_test(test_llama), cmocka_unit_test(test_llama_bf16)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
