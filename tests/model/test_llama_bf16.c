/*
 * The llama arch under bf16 activations on the CPU, with the references
 * of the kernel table's bf16 entries (tests/device/kref_bf16.c: the
 * float32 kernel on widened inputs, each bf16 output rounded once)
 * standing in for a device's: granted where the table has the Llama
 * family's bf16 entries, in one pass, it trains as the float32 model
 * does within the GPT's bf16 bounds (test_bf16_activations), gives the
 * same bits twice, makes the stacked projections' weight gradients where
 * the float32 gradients lie apart as where they lie side by side, under
 * selective and full recomputation gives the bits of none in less
 * memory, split in two halves the bits of one pass, holds its blocks'
 * activations in less memory, does all of that with q, k and v biases
 * ([model] qkv_bias) and with q and k norms ([model] qk_norm), runs its
 * head in bf16 a chunk of rows at a time (evaluation's loss the training
 * forward's bits), and falls
 * back to float32 activations (the float32 model's numbers) where the
 * table lacks the entries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/kref_bf16.h"
#include "kernels/kernels.h"
#include "model/model_harness.h"

#define STEPS 6
#define SLOTS 2
/* llama-tiny's shape (tests/e2e/llama.ini): grouped-query attention, two
 * query heads a key/value head */
#define LLAMA_INI                                                                                                      \
    "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 64\n"                    \
    "ffn_hidden = 176\nblock_size = 32\nvocab_size = 100\n"

static const plait_kernels *bf16_table(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

/* The same without the Llama family's bf16 entries (ABI 1.22). */
static const plait_kernels *gpt_only_table(void) {
    static plait_kernels k;
    k = *bf16_table();
    k.rope_bf16 = NULL;
    return &k;
}

static void trace_on(const char *ini, const plait_kernels *k, int bf16, int split, harness_trace *t) {
    harness_opts o = {.tp = 1, .max_slots = SLOTS, .kernels = k, .activations_bf16 = bf16, .split_backward = split};
    t->steps = STEPS;
    assert_int_equal(harness_trace_run(ini, 2, &o, t), 0);
}

/* The largest relative difference of the per-slot losses; of the
 * gradients, norm-wise, over every step. */
static double loss_dev(const harness_trace *a, const harness_trace *b) { return harness_loss_dev(a, b, SLOTS); }

static double grad_dev(const harness_trace *a, const harness_trace *b) { return harness_grad_dev(a, b); }

/* grad_dev per parameter tensor, the worst over tensors and steps (its
 * name in *which): a wrong gradient of one projection (q_proj's, say)
 * hides in the whole vector's norm, not in its own tensor's. */
static double tensor_dev(const char *ini, const harness_trace *a, const harness_trace *b, const char **which) {
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    double worst = 0;
    static char name[128];
    for (int32_t p = 0; p < h.set.n_params; p++) {
        const plait_param *pa = &h.set.params[p];
        if (pa->tied_to >= 0) continue;
        const size_t at = (size_t)(pa->grad - h.grad);
        for (int s = 0; s < a->steps; s++) {
            double d = 0, n = 0;
            for (size_t i = at; i < at + pa->numel; i++) {
                const double x = a->grads[(size_t)s * a->numel + i], y = b->grads[(size_t)s * b->numel + i];
                d += (x - y) * (x - y);
                n += y * y;
            }
            if (n > 0 && sqrt(d / n) > worst) {
                worst = sqrt(d / n);
                snprintf(name, sizeof name, "%s", pa->name);
            }
        }
    }
    harness_free(&h);
    *which = name;
    return worst;
}

/* A bf16 trace `bf` of the model `ini` (named `what`) against its float32
 * trace within the GPT's bounds (test_bf16_activations), the gradients'
 * tensor by tensor too, printed; returns the losses' deviation. */
static double within_bounds(const char *ini, const char *what, const harness_trace *bf, const harness_trace *f32) {
    const char *worst = NULL;
    const double dl = loss_dev(bf, f32), dg = grad_dev(bf, f32), dt = tensor_dev(ini, bf, f32, &worst);
    printf("%s bf16 against float32 over %d steps: losses within %.2e, gradients within %.2e (norm-wise), "
           "each tensor's within %.2e (%s)\n",
           what, STEPS, dl, dg, dt, worst);
    assert_true(dl <= 1e-2);
    assert_true(dg <= 5e-2);
    assert_true(dt <= 5e-2);
    return dl;
}

static void test_trains_as_float32(void **state) {
    (void)state;
    harness_trace f32, bf, again;
    trace_on(LLAMA_INI, bf16_table(), 0, 0, &f32);
    trace_on(LLAMA_INI, bf16_table(), 1, 0, &bf);
    trace_on(LLAMA_INI, bf16_table(), 1, 0, &again);
    assert_false(f32.bf16);
    assert_true(bf.bf16);
    assert_true(within_bounds(LLAMA_INI, "llama", &bf, &f32) > 0); /* it did round */
    assert_memory_equal(bf.loss, again.loss, sizeof(double) * STEPS * SLOTS);
    assert_memory_equal(bf.grads, again.grads, sizeof(float) * STEPS * bf.numel);
    /* the blocks' activations and the backward scratch in about half,
     * the float32 residual stream, the head's logits and the row
     * statistics not */
    printf("activation bytes: float32 %llu, bf16 %llu (%.2f)\n", (unsigned long long)f32.act_bytes,
           (unsigned long long)bf.act_bytes, (double)bf.act_bytes / (double)f32.act_bytes);
    assert_true(bf.act_bytes * 10 < f32.act_bytes * 8);
    harness_trace_free(&f32);
    harness_trace_free(&bf);
    harness_trace_free(&again);
}

/* q|k|v's and gate|up's weight gradients where the float32 gradients do
 * not lie side by side (an optimizer that owns them may place them
 * anywhere): one product a projection from its columns packed
 * (llama_bf16.c), against the one product over the stacked columns of a
 * model whose gradients lie side by side: within 1e-6 a tensor,
 * norm-wise. */
static void check_gradients_apart(const char *ini, const char *const *moved, int n_moved) {
    harness h[2];
    float *apart[3] = {NULL, NULL, NULL};
    for (int r = 0; r < 2; r++) {
        harness_opts o = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1};
        assert_int_equal(harness_init_ex(&h[r], ini, 2, &o), 0);
        assert_true(plait_model_bf16_activations(h[r].model));
        harness_zero_grads(&h[r]);
        for (int i = 0; r && i < n_moved; i++) {
            plait_param *p = harness_param(&h[r], moved[i]);
            assert_non_null(p);
            apart[i] = calloc(p->numel, sizeof(float));
            p->grad = apart[i];
        }
        const size_t n = (size_t)(h[r].B * h[r].T);
        int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
        harness_tokens(tok, n, h[r].V, 11);
        harness_tokens(tgt, n, h[r].V, 12);
        assert_int_equal(harness_step(&h[r], tok, tgt), PLAIT_OK);
        free(tok);
        free(tgt);
    }
    for (int32_t i = 0; i < h[0].set.n_params; i++) {
        const plait_param *a = &h[1].params[i], *b = &h[0].params[i];
        if (b->tied_to >= 0) continue;
        double d = 0, nb = 0;
        for (size_t j = 0; j < b->numel; j++) {
            d += ((double)a->grad[j] - b->grad[j]) * ((double)a->grad[j] - b->grad[j]);
            nb += (double)b->grad[j] * b->grad[j];
        }
        if (sqrt(d) > 1e-6 * sqrt(nb)) fail_msg("%s: gradients apart differ by %.2e norm-wise", b->name, sqrt(d / nb));
    }
    for (int r = 0; r < 2; r++) harness_free(&h[r]);
    for (int i = 0; i < 3; i++) free(apart[i]);
}

/* The same with q, k and v biases ([model] qkv_bias), k's bias gradient
 * apart too: one product a projection, each with its bias's gradient. */
static void test_gradients_apart(void **state) {
    (void)state;
    static const char *const moved[3] = {"model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.up_proj.weight",
                                         "model.layers.1.self_attn.k_proj.bias"};
    check_gradients_apart(LLAMA_INI, moved, 2);
    check_gradients_apart(LLAMA_INI "qkv_bias = true\n", moved, 3);
}

/* Recomputation in bf16: selective drops SwiGLU's output alone (one bf16
 * buffer the blocks share, rebuilt from gate|up with the forward's
 * kernel), full every part but the block's input (one block's working set
 * for all, rebuilt by the block's own forward): the bits of recompute
 * none, in less memory, and full in less than selective. */
static void test_recompute(void **state) {
    (void)state;
    harness_trace none, sel, full;
    trace_on(LLAMA_INI, bf16_table(), 1, 0, &none);
    trace_on(LLAMA_INI "recompute = selective\n", bf16_table(), 1, 0, &sel);
    trace_on(LLAMA_INI "recompute = full\n", bf16_table(), 1, 0, &full);
    const harness_trace *t[2] = {&sel, &full};
    for (int i = 0; i < 2; i++) {
        assert_true(t[i]->bf16);
        assert_memory_equal(t[i]->loss, none.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(t[i]->grads, none.grads, sizeof(float) * STEPS * none.numel);
    }
    printf("activation bytes: recompute none %llu, selective %llu, full %llu\n", (unsigned long long)none.act_bytes,
           (unsigned long long)sel.act_bytes, (unsigned long long)full.act_bytes);
    assert_true(sel.act_bytes < none.act_bytes);
    assert_true(full.act_bytes < sel.act_bytes);
    harness_trace_free(&none);
    harness_trace_free(&sel);
    harness_trace_free(&full);
}

/* A split backward (zero-bubble schedules) in bf16: every slot's input
 * halves, then the weight halves from what the input halves kept, give
 * the one pass's bits, with and without selective recomputation. */
static void test_split_backward(void **state) {
    (void)state;
    for (int sel = 0; sel < 2; sel++) {
        const char *ini = sel ? LLAMA_INI "recompute = selective\n" : LLAMA_INI;
        harness_trace one, split;
        trace_on(ini, bf16_table(), 1, 0, &one);
        trace_on(ini, bf16_table(), 1, 1, &split);
        assert_true(split.bf16);
        assert_memory_equal(split.loss, one.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(split.grads, one.grads, sizeof(float) * STEPS * one.numel);
        harness_trace_free(&one);
        harness_trace_free(&split);
    }
}

/* A variant of the model (`ini`, named `what`) in bf16: within the bounds
 * above of its float32 trace, tensor by tensor; recompute full, and none
 * and selective each split in two halves, give the bits of one pass
 * without recomputation. */
static void check_variant(const char *ini, const char *what) {
    harness_trace f32, bf;
    trace_on(ini, bf16_table(), 0, 0, &f32);
    trace_on(ini, bf16_table(), 1, 0, &bf);
    assert_true(bf.bf16);
    within_bounds(ini, what, &bf, &f32);
    char other_ini[600];
    for (int mode = 0; mode < 3; mode++) {
        snprintf(other_ini, sizeof other_ini, "%s%s", ini,
                 mode == 0   ? ""
                 : mode == 1 ? "recompute = full\n"
                             : "recompute = selective\n");
        harness_trace other;
        trace_on(other_ini, bf16_table(), 1, mode != 1, &other); /* none and selective split in halves */
        assert_memory_equal(other.loss, bf.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(other.grads, bf.grads, sizeof(float) * STEPS * bf.numel);
        harness_trace_free(&other);
    }
    harness_trace_free(&f32);
    harness_trace_free(&bf);
}

/* [model] qkv_bias (Qwen2's q, k and v biases) in bf16: the products add
 * the biases' bf16 copies, their gradients come from the same output
 * gradient as the weights': trains as float32 does within the bounds
 * above, tensor by tensor (the biases among them), where the biases'
 * copies lie side by side (llama-tiny's shape, with heads of 32 for its width of 64 over 4 heads: [model] head_dim) and where they are stacked
 * apart (one key/value head of 4 elements, under the copies' 8-element
 * alignment); recomputation and a split backward give the bits of one
 * pass without recomputation. */
static void test_qkv_bias(void **state) {
    (void)state;
    static const char *const inis[2] = {
        LLAMA_INI "qkv_bias = true\nhead_dim = 32\n",
        "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 1\nn_embd = 16\n"
        "ffn_hidden = 40\nblock_size = 32\nvocab_size = 100\nqkv_bias = true\n"};
    check_variant(inis[0], "llama with qkv biases");
    check_variant(inis[1], "llama with qkv biases, 4-element key/value heads");
}

/* [model] qk_norm (Qwen3's q and k norms) in bf16: the heads widened for
 * their float32 RMSNorm and rounded once after it, its gradient the same
 * way: trains as float32 does within the bounds above, tensor by tensor
 * (the norms' weights among them), on llama-tiny's shape and on one whose
 * q heads end off a 32-element boundary (k's part then starts rounded up:
 * heads of 6, 5 tokens, with q, k and v biases); recomputation and a
 * split backward give the bits of one pass without recomputation. */
static void test_qk_norm(void **state) {
    (void)state;
    static const char *const inis[2] = {
        LLAMA_INI "qk_norm = true\n",
        "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 24\n"
        "ffn_hidden = 40\nblock_size = 5\nvocab_size = 100\nqkv_bias = true\nqk_norm = true\n"};
    check_variant(inis[0], "llama with q and k norms");
    check_variant(inis[1], "llama with q and k norms, heads of 6");
}

/* Where a piece is missing the model keeps float32 activations, with the
 * float32 model's numbers: a table without the Llama family's bf16
 * entries. */
/* The head without tp runs in bf16 a chunk of rows at a time (the GPT's
 * chunked head): at a vocabulary of 2,048 and 256 rows a micro-batch in
 * four chunks of 64, within the bounds of float32 over the steps; a
 * forward-only forward (evaluation) gives the training forward's loss bit
 * for bit, and the head's backward after it is refused, naming why. */
#define LLAMA_WIDE_VOCAB_INI                                                                                           \
    "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 64\n"                    \
    "ffn_hidden = 176\nblock_size = 128\nvocab_size = 2048\n"

static void test_head_in_chunks(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h, LLAMA_WIDE_VOCAB_INI, 2, &o), 0);
    assert_int_equal(plait_model_head_chunk_rows(h.model), 64);
    assert_int_equal(harness_forward_only_agrees(&h), 0);
    harness_free(&h);
    harness_trace f32, bf;
    trace_on(LLAMA_WIDE_VOCAB_INI, bf16_table(), 0, 0, &f32);
    trace_on(LLAMA_WIDE_VOCAB_INI, bf16_table(), 1, 0, &bf);
    assert_true(bf.bf16);
    within_bounds(LLAMA_WIDE_VOCAB_INI, "llama, the head in 4 chunks,", &bf, &f32);
    harness_trace_free(&f32);
    harness_trace_free(&bf);
}

static void test_granted_only_where_whole(void **state) {
    (void)state;
    harness_trace f32, t;
    trace_on(LLAMA_INI, bf16_table(), 0, 0, &f32);
    trace_on(LLAMA_INI, gpt_only_table(), 1, 0, &t);
    assert_false(t.bf16);
    assert_memory_equal(t.loss, f32.loss, sizeof(double) * STEPS * SLOTS);
    harness_trace_free(&t);
    harness_trace_free(&f32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trains_as_float32), cmocka_unit_test(test_gradients_apart),
        cmocka_unit_test(test_recompute),         cmocka_unit_test(test_split_backward),
        cmocka_unit_test(test_qkv_bias),          cmocka_unit_test(test_granted_only_where_whole),
        cmocka_unit_test(test_qk_norm),           cmocka_unit_test(test_head_in_chunks),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kref_bf16_release();
    return rc;
}
