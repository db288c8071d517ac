/*
 * The mixture of experts ([model] moe_*): every parameter tensor's
 * gradient against central finite differences of the loss plus the
 * auxiliary and z losses along a random direction (gpt and llama, softmax
 * and sigmoid routers, shared experts, a capacity that drops routes, a
 * model with dense and sparse blocks); the router's top-k, its ties and
 * the selection bias; the load-balancing and z losses' values against a
 * hand computation; DeepSeek-V3's bias balancing; the loss falling under
 * training; bit-identical results with 1 and 3 math threads; and what is
 * refused, naming the keys.
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

static const char *const gpt_base =
    "[run]\nseed = 7\n[model]\narch = gpt\nn_layer = 2\nn_head = 2\nn_embd = 8\nblock_size = 8\nvocab_size = 11\n";
static const char *const llama_base = "[run]\nseed = 7\n[model]\narch = llama\nn_layer = 2\nn_head = 2\nn_embd = "
                                      "8\nffn_hidden = 12\nblock_size = 8\nvocab_size = 11\n";

static uint64_t g_rng = 99;
static double urand(void) { /* [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* The objective the backward differentiates: the mean token loss plus the
 * sparse blocks' auxiliary and z losses (one micro-batch: its share is 1);
 * the routes it took per block and expert into counts[64]. */
static double objective(harness *h, const int32_t *tok, const int32_t *tgt, double *counts) {
    assert_int_equal(harness_forward(h, tok, tgt), PLAIT_OK);
    double totals[3];
    memset(counts, 0, 64 * sizeof *counts);
    plait_model_moe_take(h->model, counts, totals);
    return plait_model_loss_sum(h->model, 0) / (double)(h->B * h->T) + totals[0] + totals[1];
}

/* g·v against the central difference (J(p + εv) − J(p − εv)) / 2ε of
 * parameter p's data `keep`. The expert choice is piecewise constant: a
 * step that changes any expert's count crossed an edge, where J jumps, and
 * is tried again ten times shorter. */
static void check_direction(harness *h, plait_param *p, const float *keep, const double *v, double gv,
                            const double *base, const char *moe, const int32_t *tok, const int32_t *tgt) {
    double cp[64], cm[64];
    for (double eps = 1e-3; eps > 1e-6; eps /= 10) {
        for (size_t e = 0; e < p->numel; e++) p->data[e] = (float)((double)keep[e] + eps * v[e]);
        const double lp = objective(h, tok, tgt, cp);
        for (size_t e = 0; e < p->numel; e++) p->data[e] = (float)((double)keep[e] - eps * v[e]);
        const double lm = objective(h, tok, tgt, cm);
        memcpy(p->data, keep, p->numel * sizeof *keep);
        if (memcmp(cp, base, sizeof cp) != 0 || memcmp(cm, base, sizeof cm) != 0) continue;
        const double fd = (lp - lm) / (2 * eps);
        /* a shorter step loses digits of the float32 loss: the bound grows with it */
        if (fabs(gv - fd) > 2e-3 * (1e-3 / eps) + 0.03 * fabs(fd))
            fail_msg("%s: %s: g·v = %.6g, finite differences %.6g (step %g)", moe, p->name, gv, fd, eps);
        return;
    }
    fail_msg("%s: %s: every step down to 1e-6 changed the experts' choice", moe, p->name);
}

static void check_gradients(const char *base, const char *moe) {
    char ini[1024];
    snprintf(ini, sizeof ini, "%s%s", base, moe);
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, h.V, 1);
    harness_tokens(tgt, n, h.V, 2);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    double counts[64], totals[3];
    memset(counts, 0, sizeof counts);
    plait_model_moe_take(h.model, counts, totals);
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue; /* checked through the embedding's */
        if (strstr(p->name, "expert_bias")) {           /* moves the choice only: no gradient */
            for (size_t e = 0; e < p->numel; e++) assert_true(p->grad[e] == 0.0f);
            continue;
        }
        double *v = malloc(p->numel * sizeof *v);
        float *keep = malloc(p->numel * sizeof *keep);
        assert_non_null(v);
        assert_non_null(keep);
        memcpy(keep, p->data, p->numel * sizeof *keep);
        double gv = 0;
        for (size_t e = 0; e < p->numel; e++) {
            v[e] = urand();
            gv += v[e] * (double)p->grad[e];
        }
        if (i == h.desc->p_wte && h.desc->tied)
            for (size_t e = 0; e < p->numel; e++) gv += v[e] * (double)h.params[h.desc->p_lm_head].grad[e];
        check_direction(&h, p, keep, v, gv, counts, moe, tok, tgt);
        free(v);
        free(keep);
    }
    harness_free(&h);
}

static void test_gradients_gpt(void **state) {
    (void)state;
    check_gradients(gpt_base, "moe_experts = 4\nmoe_top_k = 2\nmoe_shared_experts = 1\nmoe_ffn_hidden = 6\n"
                              "moe_aux_loss = 0.5\nmoe_z_loss = 1\n");
    check_gradients(gpt_base, "moe_experts = 4\nmoe_top_k = 1\nmoe_every = 2\nmoe_router = sigmoid\n");
    check_gradients(gpt_base, "moe_experts = 4\nmoe_top_k = 1\nmoe_every = 2\nmoe_capacity = 1\n");
}

static void test_gradients_llama(void **state) {
    (void)state;
    check_gradients(llama_base, "moe_experts = 4\nmoe_top_k = 2\nmoe_router = sigmoid\nmoe_aux_loss = 0.1\n"
                                "moe_z_loss = 0.01\nmoe_capacity = 1\n");
    check_gradients(llama_base, "moe_experts = 3\nmoe_top_k = 3\nmoe_shared_experts = 2\nmoe_ffn_hidden = 4\n"
                                "moe_every = 2\n");
}

/* Writes `value` into every element of parameter `name`. */
static void fill(harness *h, const char *name, float value) {
    plait_param *p = harness_param(h, name);
    assert_non_null(p);
    for (size_t e = 0; e < p->numel; e++) p->data[e] = value;
}

/* A router of zero weights scores every expert alike: the ties go to the
 * lowest indices, a bias moves the choice, and the losses are what a hand
 * computation gives: Switch's aux·E/(N²k)·Σ P_e·c_e with P_e = N/E and
 * c_e = N for the k chosen, i.e. aux; the z-loss z·log(E)². */
static void test_router_hand(void **state) {
    (void)state;
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 2\nmoe_every = 2\nmoe_aux_loss = 0.3\nmoe_z_loss = 0.5\n",
             gpt_base);
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    const int64_t N = (int64_t)h.B * h.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, (size_t)N, h.V, 1);
    harness_tokens(tgt, (size_t)N, h.V, 2);
    fill(&h, "transformer.h.1.mlp.router.weight", 0.0f);
    assert_int_equal(harness_forward(&h, tok, tgt), PLAIT_OK);
    double counts[2 * 4], totals[3];
    plait_model_moe_take(h.model, counts, totals);
    for (int e = 0; e < 4; e++) assert_true(counts[e] == 0.0); /* block 0 is dense */
    const double want[4] = {(double)N, (double)N, 0, 0};
    for (int e = 0; e < 4; e++) assert_true(counts[4 + e] == want[e]);
    assert_true(fabs(totals[0] - 0.3) < 1e-6);
    assert_true(fabs(totals[1] - 0.5 * log(4.0) * log(4.0)) < 1e-5);
    assert_true(totals[2] == 0.0);
    /* a bias on expert 2 makes it every token's first choice, 0 the second
     * (the bias a model buffer: the model's copy, not the parameter set's) */
    const int32_t gi = harness_param(&h, "transformer.h.1.mlp.router.expert_bias")->index;
    assert_true(plait_model_has_buffer(h.model, gi));
    const float bias[4] = {0.0f, 0.0f, 0.5f, 0.0f};
    assert_int_equal(plait_model_buffer_write(h.model, gi, bias), PLAIT_OK);
    assert_int_equal(harness_forward(&h, tok, tgt), PLAIT_OK);
    plait_model_moe_take(h.model, counts, totals);
    const double want_b[4] = {(double)N, 0, (double)N, 0};
    for (int e = 0; e < 4; e++) assert_true(counts[4 + e] == want_b[e]);
    /* the selection bias is not the gate: the output equals the unbiased
     * choice's only through the weights, so the z-loss is unchanged */
    assert_true(fabs(totals[1] - 0.5 * log(4.0) * log(4.0)) < 1e-5);
    harness_free(&h);
}

/* A capacity factor of 0.5 takes at most 0.5·N·k/E routes an expert, in
 * token order: with every token on experts 0 and 1, each keeps N/4 routes
 * of its N and drops the rest, counted. */
static void test_capacity(void **state) {
    (void)state;
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 2\nmoe_capacity = 0.5\n", gpt_base);
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    const int64_t N = (int64_t)h.B * h.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, (size_t)N, h.V, 1);
    harness_tokens(tgt, (size_t)N, h.V, 2);
    fill(&h, "transformer.h.0.mlp.router.weight", 0.0f);
    fill(&h, "transformer.h.1.mlp.router.weight", 0.0f);
    assert_int_equal(harness_forward(&h, tok, tgt), PLAIT_OK);
    double counts[8], totals[3];
    plait_model_moe_take(h.model, counts, totals);
    /* routed counts are before the drop; 2 blocks × 2 experts × (N - N/4) dropped */
    assert_true(counts[0] == (double)N && counts[1] == (double)N);
    assert_true(totals[2] == (double)(2 * 2 * (N - N / 4)));
    harness_free(&h);
}

/* DeepSeek-V3's balancing: after a step's counts each bias moves by the
 * rate, up below the mean load, down above it, unchanged at it. */
static void test_bias_balance(void **state) {
    (void)state;
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 2\nmoe_bias_rate = 0.25\n", gpt_base);
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    const double counts[8] = {10, 2, 6, 6, 0, 0, 0, 24};
    assert_int_equal(plait_model_moe_balance(h.model, counts), PLAIT_OK);
    float b0[4], b1[4];
    assert_int_equal(plait_model_buffer_read(h.model,
                                             harness_param(&h, "transformer.h.0.mlp.router.expert_bias")->index, b0),
                     PLAIT_OK);
    assert_int_equal(plait_model_buffer_read(h.model,
                                             harness_param(&h, "transformer.h.1.mlp.router.expert_bias")->index, b1),
                     PLAIT_OK);
    /* a buffer, not a parameter: nothing of the model's parameters is one */
    assert_false(plait_model_has_buffer(h.model, harness_param(&h, "transformer.h.1.mlp.router.weight")->index));
    const float w0[4] = {-0.25f, 0.25f, 0.0f, 0.0f}, w1[4] = {0.25f, 0.25f, 0.25f, -0.25f};
    for (int e = 0; e < 4; e++) {
        assert_true(b0[e] == w0[e]);
        assert_true(b1[e] == w1[e]);
    }
    harness_free(&h);
}

/* Training on one batch (plain SGD, the selection bias balanced after
 * each step): the loss falls, for both architectures. */
static void check_trains(const char *base) {
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 2\nmoe_shared_experts = 1\nmoe_bias_rate = 0.001\n",
             base);
    harness h;
    assert_int_equal(harness_init(&h, ini, 2, 1, 0, NULL), 0);
    const int64_t N = (int64_t)h.B * h.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, (size_t)N, h.V, 1);
    harness_tokens(tgt, (size_t)N, h.V, 2);
    double first = 0, last = 0, counts[8], totals[3];
    for (int step = 0; step < 40; step++) {
        harness_zero_grads(&h);
        assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
        last = plait_model_loss_sum(h.model, 0) / (double)N;
        if (step == 0) first = last;
        for (size_t i = 0; i < h.set.numel; i++) h.data[i] -= 0.5f * h.grad[i];
        plait_model_moe_take(h.model, counts, totals);
        assert_int_equal(plait_model_moe_balance(h.model, counts), PLAIT_OK);
    }
    if (!(last < 0.7 * first)) fail_msg("%s: the loss went from %g to %g in 40 steps", base, first, last);
    harness_free(&h);
}

static void test_trains(void **state) {
    (void)state;
    check_trains(gpt_base);
    check_trains(llama_base);
}

/* The loss and every gradient, bit for bit, with 1 and 3 math threads
 * (both archs, shared experts, the auxiliary losses on). */
static void check_threads(const char *base) {
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 2\nmoe_shared_experts = 1\nmoe_z_loss = 0.1\n", base);
    assert_int_equal(harness_threads_agree(ini, 3), 0);
}

static void test_threads(void **state) {
    (void)state;
    check_threads(gpt_base);
    check_threads(llama_base);
}

/* harness_init_ex fails for `ini`, the last error naming `want`. */
static void refused(const char *ini, const harness_opts *o, const char *want) {
    harness h;
    assert_int_equal(harness_init_ex(&h, ini, 2, o), -1);
    if (!strstr(plait_last_error(), want)) fail_msg("refused with \"%s\", not naming \"%s\"", plait_last_error(), want);
    harness_free(&h);
}

static void test_refused(void **state) {
    (void)state;
    const harness_opts one = {.tp = 1, .max_slots = 1};
    char ini[1024];
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_top_k = 5\n", gpt_base);
    refused(ini, &one, "moe_top_k = 5 is more than moe_experts = 4");
    snprintf(ini, sizeof ini, "%smoe_top_k = 2\n", gpt_base);
    refused(ini, &one, "moe_top_k configures a mixture of experts, and this model has none");
    snprintf(ini, sizeof ini, "%smoe_experts = 4\nmoe_every = 3\n", gpt_base);
    refused(ini, &one, "moe_every = 3 is more than n_layer = 2");
    snprintf(ini, sizeof ini, "%smoe_experts = 1\n", gpt_base);
    refused(ini, &one, "moe_experts = 1");
    refused("[model]\narch = mlp\nn_layer = 2\nmoe_experts = 4\n", &one, "arch = mlp has no MLP to make sparse");
}

int main(void) {
    plait_kernels_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_gpt), cmocka_unit_test(test_gradients_llama),
        cmocka_unit_test(test_router_hand),   cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_bias_balance),  cmocka_unit_test(test_trains),
        cmocka_unit_test(test_threads),       cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
