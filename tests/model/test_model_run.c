/*
 * Running the model: bit-identical results with 1, 2, 3 and 8 math threads;
 * a two-stage pipeline split through the boundary buffers (bit-identical to
 * one stage); slots; the fused loss, layernorm and GELU against the unfused
 * kernels; and the API's error paths. Tensor and sequence parallelism are
 * test_model_tp.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_harness.h"
#include "model/model_internal.h"
#include "runtime/error.h"

/* Big enough that products are cut into several tiles (the MLP's 256 x 512
 * x 128 into 4) and attention runs on every thread. */
static const char *GPT_INI = "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 128\n"
                             "block_size = 64\nvocab_size = 100\n";
static const char *MLP_INI = "[run]\nseed = 5\n[model]\narch = mlp\nn_layer = 2\nn_embd = 64\n"
                             "block_size = 64\nvocab_size = 100\n";

typedef struct result {
    float *logits, *grads;
    double loss;
    size_t n_logits, n_grads;
} result;

static void run_once(harness *h, result *r, uint32_t seed) {
    size_t n = (size_t)h->B * (size_t)h->T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    assert_non_null(tok);
    assert_non_null(tgt);
    harness_tokens(tok, n, h->V, seed);
    harness_tokens(tgt, n, h->V, seed + 1);
    harness_zero_grads(h);
    assert_int_equal(harness_forward(h, tok, tgt), PLAIT_OK);
    r->n_logits = n * (size_t)(h->model->Vl);
    r->logits = malloc(r->n_logits * sizeof(float));
    assert_non_null(r->logits);
    memcpy(r->logits, plait_model_logits(h->model, 0), r->n_logits * sizeof(float));
    r->loss = plait_model_loss_sum(h->model, 0);
    for (int32_t l = h->spec->n_layers - 1; l >= 0; l--)
        assert_int_equal(plait_model_backward_layer(h->model, l, 0), PLAIT_OK);
    r->n_grads = h->set.numel;
    r->grads = malloc(r->n_grads * sizeof(float));
    assert_non_null(r->grads);
    memcpy(r->grads, h->grad, r->n_grads * sizeof(float));
    free(tok);
    free(tgt);
}

static void result_free(result *r) {
    free(r->logits);
    free(r->grads);
}

static void check_thread_invariance(const char *ini) {
    harness h;
    assert_int_equal(harness_init(&h, ini, 4, 1, 0, NULL), 0);
    result r1, r2;
    plait_kernels_set_threads(1);
    run_once(&h, &r1, 3);
    static const int counts[] = {2, 3, 8};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        plait_kernels_set_threads(counts[c]);
        assert_int_equal(plait_kernels_threads(), counts[c]);
        run_once(&h, &r2, 3);
        plait_kernels_set_threads(1);
        assert_true(r1.loss == r2.loss);
        assert_memory_equal(r1.logits, r2.logits, r1.n_logits * sizeof(float));
        assert_memory_equal(r1.grads, r2.grads, r1.n_grads * sizeof(float));
        if (c + 1 < sizeof counts / sizeof counts[0]) result_free(&r2);
    }
    /* and the gradients are not trivially zero */
    size_t nonzero = 0;
    for (size_t i = 0; i < r1.n_grads; i++) nonzero += r1.grads[i] != 0.0f;
    assert_true(nonzero > r1.n_grads / 2);
    result_free(&r1);
    result_free(&r2);
    harness_free(&h);
}

static void test_threads_gpt(void **state) {
    (void)state;
    check_thread_invariance(GPT_INI);
}

static void test_threads_mlp(void **state) {
    (void)state;
    check_thread_invariance(MLP_INI);
}

/* ---- pipeline split through boundary buffers ---------------------------- */

/* test_model_tp.c's smallest model: a vocabulary of 37 pads every slice */
static const char *TP_GPT_INI = "[run]\nseed = 9\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 16\n"
                                "block_size = 9\nvocab_size = 37\n";

static void test_pipeline_split(void **state) {
    (void)state;
    const int32_t B = 2;
    harness full, st0, st1;
    assert_int_equal(harness_init(&full, TP_GPT_INI, B, 1, 0, NULL), 0);
    const int32_t stages[4] = {0, 0, 1, 1}; /* embedding, h.0 | h.1, head */
    harness_opts o0 = {1, 0, NULL, stages, 0, 2}, o1 = {1, 0, NULL, stages, 1, 2};
    assert_int_equal(harness_init_ex(&st0, TP_GPT_INI, B, &o0), 0);
    assert_int_equal(harness_init_ex(&st1, TP_GPT_INI, B, &o1), 0);
    size_t n = (size_t)B * (size_t)full.T, nb = plait_model_boundary_numel(full.model);
    int32_t *tok = malloc(2 * n * sizeof *tok), *tgt = malloc(2 * n * sizeof *tgt);
    harness_tokens(tok, 2 * n, full.V, 5);
    harness_tokens(tgt, 2 * n, full.V, 6);
    /* one stage: micro-batch a, then b, accumulating */
    assert_int_equal(harness_step(&full, tok, tgt), PLAIT_OK);
    double loss_a = plait_model_loss_sum(full.model, 0);
    assert_int_equal(harness_step(&full, tok + n, tgt + n), PLAIT_OK);
    double loss_b = plait_model_loss_sum(full.model, 0);

    /* two stages, a and b in flight together in slots 0 and 1 */
    for (int32_t slot = 0; slot < 2; slot++) {
        assert_int_equal(plait_model_set_batch(st0.model, slot, tok + slot * n, NULL), PLAIT_OK);
        assert_int_equal(plait_model_set_batch(st1.model, slot, NULL, tgt + slot * n), PLAIT_OK);
        assert_int_equal(plait_model_forward_layer(st0.model, 0, slot), PLAIT_OK);
        assert_int_equal(plait_model_forward_layer(st0.model, 1, slot), PLAIT_OK);
        memcpy(plait_model_boundary(st1.model, slot, 1), plait_model_boundary(st0.model, slot, 1),
               nb * sizeof(float));
        assert_int_equal(plait_model_forward_layer(st1.model, 2, slot), PLAIT_OK);
        assert_int_equal(plait_model_forward_layer(st1.model, 3, slot), PLAIT_OK);
    }
    assert_true(plait_model_loss_sum(st1.model, 0) == loss_a);
    assert_true(plait_model_loss_sum(st1.model, 1) == loss_b);
    for (int32_t slot = 0; slot < 2; slot++) {
        assert_int_equal(plait_model_backward_layer(st1.model, 3, slot), PLAIT_OK);
        assert_int_equal(plait_model_backward_layer(st1.model, 2, slot), PLAIT_OK);
        memcpy(plait_model_boundary_grad(st0.model, slot, 1),
               plait_model_boundary_grad(st1.model, slot, 1), nb * sizeof(float));
        assert_int_equal(plait_model_backward_layer(st0.model, 1, slot), PLAIT_OK);
        assert_int_equal(plait_model_backward_layer(st0.model, 0, slot), PLAIT_OK);
    }
    /* the same arithmetic in the same order: bit-identical */
    for (int32_t i = 0; i < full.set.n_params; i++) {
        const plait_param *f = &full.params[i];
        const plait_param *p = f->layer <= 1 ? &st0.params[i] : &st1.params[i];
        assert_memory_equal(p->grad, f->grad, f->numel * sizeof(float));
    }
    /* stage 0 holds nothing of layers 2 and 3 */
    assert_int_equal(plait_model_forward_layer(st0.model, 2, 0), PLAIT_ERR_INVALID_ARG);
    assert_true(plait_model_activation_bytes(st0.model) < plait_model_activation_bytes(full.model) * 2);
    free(tok);
    free(tgt);
    harness_free(&full);
    harness_free(&st0);
    harness_free(&st1);
}

/* ---- errors -------------------------------------------------------------- */

/* The tp test model with two slots, slot 0's batch set: the slot tests'. */
static plait_model *two_slots(harness *h) {
    harness_opts o = {.tp = 1, .max_slots = 2};
    assert_int_equal(harness_init_ex(h, TP_GPT_INI, 1, &o), 0);
    static const int32_t tok[9] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    assert_int_equal(plait_model_set_batch(h->model, 0, tok, tok), PLAIT_OK);
    return h->model;
}

/* A slot restricted to a model chunk (interleaved schedules) holds only
 * that chunk's activations, computes the same bits, and refuses layers
 * outside its range. */
static void test_slot_layers(void **state) {
    (void)state;
    harness h;
    plait_model *m = two_slots(&h);
    uint64_t whole = plait_model_activation_bytes(m); /* slot 0: every layer */
    assert_int_equal(plait_model_slot_layers(m, 1, 1, 2), PLAIT_OK);
    assert_int_equal(plait_model_slot_layers(m, 1, 1, 2), PLAIT_OK); /* same range: no-op */
    assert_int_equal(plait_model_slot_layers(m, 1, 2, 1), PLAIT_ERR_INVALID_ARG);
    for (int32_t l = 0; l < 3; l++) assert_int_equal(plait_model_forward_layer(m, l, 0), PLAIT_OK);
    size_t btc = plait_model_boundary_numel(m);
    memcpy(plait_model_boundary(m, 1, 0), plait_model_boundary(m, 0, 0), btc * sizeof(float));
    uint64_t chunk = plait_model_activation_bytes(m) - whole;
    assert_true(chunk > 0 && chunk < whole); /* no embedding, head or logits */
    assert_int_equal(plait_model_forward_layer(m, 0, 1), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "holds layers 1..2"));
    assert_int_equal(plait_model_forward_layer(m, 3, 1), PLAIT_ERR_INVALID_ARG);
    for (int32_t l = 1; l < 3; l++) assert_int_equal(plait_model_forward_layer(m, l, 1), PLAIT_OK);
    assert_memory_equal(plait_model_boundary(m, 1, 2), plait_model_boundary(m, 0, 2), btc * sizeof(float));
    assert_int_equal(plait_model_slot_layers(m, 1, 0, 2), PLAIT_ERR_INVALID_ARG); /* already laid out */
    assert_int_equal(plait_model_slot_layers(m, 2, 0, 1), PLAIT_ERR_INVALID_ARG); /* no such slot */
    harness_free(&h);
}

/* A slot laid out for one block moves to another alike block in the
 * memory it holds (interleaved stages share slots among alike chunks,
 * train/step_pipeline.c) and computes that block's bits there; a range
 * of other kinds (the embedding, the head, two blocks) is refused. */
static void test_slot_moves(void **state) {
    (void)state;
    harness h;
    plait_model *m = two_slots(&h);
    for (int32_t l = 0; l < 3; l++) assert_int_equal(plait_model_forward_layer(m, l, 0), PLAIT_OK);
    size_t btc = plait_model_boundary_numel(m);
    assert_true(plait_model_layers_alike(m, 1, 1, 2, 2));
    assert_false(plait_model_layers_alike(m, 0, 0, 1, 1));
    assert_false(plait_model_layers_alike(m, 1, 1, 3, 3));
    assert_false(plait_model_layers_alike(m, 1, 1, 1, 2));
    assert_int_equal(plait_model_slot_layers(m, 1, 1, 1), PLAIT_OK);
    memcpy(plait_model_boundary(m, 1, 0), plait_model_boundary(m, 0, 0), btc * sizeof(float));
    assert_int_equal(plait_model_forward_layer(m, 1, 1), PLAIT_OK);
    uint64_t laid = plait_model_activation_bytes(m);
    /* its output, to be sent, is a buffer of the boundary pool: not idle */
    assert_int_equal(plait_model_slot_layers(m, 1, 2, 2), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "cannot move before it gives them back"));
    plait_model_boundary_release(m, 1, -1);
    assert_int_equal(plait_model_slot_layers(m, 1, 2, 2), PLAIT_OK); /* moved: no allocation */
    assert_true(plait_model_activation_bytes(m) == laid);
    assert_int_equal(plait_model_forward_layer(m, 1, 1), PLAIT_ERR_INVALID_ARG); /* no longer its layer */
    memcpy(plait_model_boundary(m, 1, 1), plait_model_boundary(m, 0, 1), btc * sizeof(float));
    assert_int_equal(plait_model_forward_layer(m, 2, 1), PLAIT_OK);
    assert_memory_equal(plait_model_boundary(m, 1, 2), plait_model_boundary(m, 0, 2), btc * sizeof(float));
    assert_int_equal(plait_model_slot_layers(m, 1, 3, 3), PLAIT_ERR_INVALID_ARG); /* the head */
    assert_int_equal(plait_model_slot_layers(m, 1, 0, 0), PLAIT_ERR_INVALID_ARG); /* the embedding */
    assert_int_equal(plait_model_slot_layers(m, 1, 1, 2), PLAIT_ERR_INVALID_ARG); /* two blocks */
    harness_free(&h);
}

/* One step (harness_step) on a fresh model over table k: the loss and
 * every gradient must equal `loss` and `grads`. */
static void expect_step(const plait_kernels *k, const int32_t *tok, const int32_t *tgt, double loss,
                        const float *grads) {
    harness h;
    harness_opts o = {.tp = 1, .kernels = k};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    assert_true(plait_model_loss_sum(h.model, 0) == loss);
    assert_memory_equal(h.grad, grads, h.set.numel * sizeof *grads);
    harness_free(&h);
}

/* The loss fused with the logits' gradient in the forward (the default,
 * as training runs) gives the loss and every gradient of the kept-logits
 * path bit for bit on the CPU (the same arithmetic), and leaves no logits
 * to read; without crossentropy_fused in the table the pieces run, to the
 * same bits. */
static void test_fused_loss(void **state) {
    (void)state;
    harness h;
    assert_int_equal(harness_init(&h, GPT_INI, 2, 1, 0, NULL), 0);
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    assert_non_null(tok);
    assert_non_null(tgt);
    harness_tokens(tok, n, h.V, 3);
    harness_tokens(tgt, n, h.V, 4);
    tgt[5] = -1; /* a row without a target */
    float *kept = malloc(h.set.numel * sizeof *kept);
    assert_non_null(kept);
    harness_zero_grads(&h);
    assert_int_equal(harness_forward(&h, tok, tgt), PLAIT_OK);
    assert_non_null(plait_model_logits(h.model, 0));
    double kept_loss = plait_model_loss_sum(h.model, 0);
    for (int32_t l = h.spec->n_layers - 1; l >= 0; l--)
        assert_int_equal(plait_model_backward_layer(h.model, l, 0), PLAIT_OK);
    memcpy(kept, h.grad, h.set.numel * sizeof *kept);

    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    assert_true(plait_model_loss_sum(h.model, 0) == kept_loss);
    assert_memory_equal(h.grad, kept, h.set.numel * sizeof *kept);
    assert_int_equal(plait_model_set_batch(h.model, 0, tok, tgt), PLAIT_OK);
    for (int32_t l = 0; l < h.spec->n_layers; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    assert_null(plait_model_logits(h.model, 0)); /* they became their gradient */
    harness_free(&h);

    /* the pieces (a table without crossentropy_fused) */
    plait_kernels pieces = *plait_kernels_table();
    pieces.crossentropy_fused = NULL;
    expect_step(&pieces, tok, tgt, kept_loss, kept);
    free(kept);
    free(tok);
    free(tgt);
}

/* A batch of tokens and targets (seeds `seed`, `seed` + 1) for GPT_INI at
 * micro-batch 2, malloc'ed. */
static void new_batch(int seed, int32_t **tok, int32_t **tgt) {
    harness h;
    assert_int_equal(harness_init(&h, GPT_INI, 2, 1, 0, NULL), 0);
    const size_t n = (size_t)h.B * (size_t)h.T;
    *tok = malloc(n * sizeof **tok);
    *tgt = malloc(n * sizeof **tgt);
    assert_non_null(*tok);
    assert_non_null(*tgt);
    harness_tokens(*tok, n, h.V, seed);
    harness_tokens(*tgt, n, h.V, seed + 1);
    harness_free(&h);
}

/* One step of a fresh model over table `with` and over `without` (the same
 * table lacking what is tested): the same loss and gradients, bit for bit. */
static void expect_same_step(const plait_kernels *with, const plait_kernels *without, int seed) {
    int32_t *tok, *tgt;
    new_batch(seed, &tok, &tgt);
    harness h;
    harness_opts o = {.tp = 1, .kernels = with};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    float *grads = malloc(h.set.numel * sizeof *grads);
    assert_non_null(grads);
    memcpy(grads, h.grad, h.set.numel * sizeof *grads);
    double loss = plait_model_loss_sum(h.model, 0);
    harness_free(&h);
    expect_step(without, tok, tgt, loss, grads);
    free(grads);
    free(tok);
    free(tgt);
}

/* LayerNorm's backward in one pass per LayerNorm (the residual's gradient
 * added there, the parameters' gradients from the same call) gives every
 * gradient of the parts it replaces (a table without the entry) bit for
 * bit. */
static void test_fused_layernorm(void **state) {
    (void)state;
    assert_true(PLAIT_KERNELS_HAS_FUSED_LAYERNORM(plait_kernels_table()));
    plait_kernels parts = *plait_kernels_table();
    parts.layernorm_backward_fused = NULL;
    expect_same_step(plait_kernels_table(), &parts, 5);
}

/* The MLP's first linear layer and GELU as one entry each way (the
 * product's epilogue on a GPU) give the loss and every gradient of the
 * separate kernels (a table without the entries) bit for bit on the CPU. */
static void test_fused_gelu(void **state) {
    (void)state;
    assert_true(PLAIT_KERNELS_HAS_FUSED_GELU(plait_kernels_table()));
    plait_kernels apart = *plait_kernels_table();
    apart.matmul_forward_gelu = NULL;
    apart.matmul_backward_gelu = NULL;
    expect_same_step(plait_kernels_table(), &apart, 7);
}

static void test_errors(void **state) {
    (void)state;
    harness h;
    assert_int_equal(harness_init(&h, TP_GPT_INI, 1, 1, 0, NULL), 0);
    plait_model *m = h.model;
    int32_t tok[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, bad[9] = {0, 1, 2, 3, 37, 5, 6, 7, 8};
    assert_int_equal(plait_model_set_batch(m, 1, tok, tok), PLAIT_ERR_INVALID_ARG); /* one slot */
    assert_int_equal(plait_model_set_batch(m, 0, bad, NULL), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "position 4"));
    assert_int_equal(plait_model_forward_layer(m, 0, 0), PLAIT_ERR_INVALID_ARG); /* no tokens */
    assert_int_equal(plait_model_forward_layer(m, 9, 0), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_model_set_batch(m, 0, tok, NULL), PLAIT_OK);
    for (int32_t l = 0; l < 4; l++) assert_int_equal(plait_model_forward_layer(m, l, 0), PLAIT_OK);
    assert_non_null(plait_model_logits(m, 0));
    assert_true(plait_model_loss_sum(m, 0) == 0.0); /* no targets, no loss */
    assert_int_equal(plait_model_backward_layer(m, 3, 0), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_model_set_batch(m, 0, NULL, tok), PLAIT_OK);
    assert_int_equal(plait_model_forward_layer(m, 3, 0), PLAIT_OK);
    assert_true(plait_model_loss_sum(m, 0) > 0.0);
    /* released gradient storage (ZeRO-2) during a backward is an error */
    plait_param *lnf = harness_param(&h, "transformer.ln_f.weight");
    float *keep = lnf->grad;
    lnf->grad = NULL;
    assert_int_equal(plait_model_backward_layer(m, 3, 0), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "transformer.ln_f.weight"));
    lnf->grad = keep;
    assert_int_equal(plait_model_forward_layer(m, 3, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(m, 3, 0), PLAIT_OK);
    assert_null(plait_model_logits(m, 0)); /* consumed by the backward */
    assert_int_equal(plait_model_backward_layer(m, 3, 0), PLAIT_ERR_INVALID_ARG);
    assert_null(plait_model_boundary(m, 0, 3));
    assert_non_null(plait_model_boundary(m, 0, 2));
    assert_true(plait_model_activation_bytes(m) > 0);
    harness_free(&h);

    /* a plan that splits without operators is refused at creation */
    assert_int_equal(harness_init(&h, TP_GPT_INI, 1, 2, 0, NULL), -1);
    assert_non_null(strstr(plait_last_error(), "tp_ops"));
    harness_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_gpt),    cmocka_unit_test(test_threads_mlp),
        cmocka_unit_test(test_pipeline_split), cmocka_unit_test(test_slot_layers),
        cmocka_unit_test(test_slot_moves),     cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fused_loss),     cmocka_unit_test(test_fused_layernorm),
        cmocka_unit_test(test_fused_gelu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
