/*
 * The llama arch: every parameter tensor's gradient against central
 * finite differences of the loss along a random direction (multi-query,
 * grouped-query and multi-head attention, tied and untied heads);
 * bit-identical results with 1 and 3 math threads; a two-stage pipeline
 * split bit-identical to one stage; a split backward's halves bit-identical
 * to one pass; selective and full recomputation bit-identical to none;
 * the same with q, k and v biases ([model] qkv_bias) and with heads of
 * their own size ([model] head_dim) and with q and k norms ([model]
 * qk_norm); and what is refused (n_kv_head not dividing n_head, rope_theta <= 0, an
 * odd head size) naming the key.
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

/* Set: the models have q, k and v biases ([model] qkv_bias, Qwen2's);
 * heads of their own size ([model] head_dim: 0 = n_embd / n_head); q and
 * k norms ([model] qk_norm, Qwen3's). */
static int g_qkv_bias, g_head_dim, g_qk_norm;

static char *llama_ini(int kv, int tied) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "[run]\nseed = 7\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = %d\nn_embd = 16\n"
             "ffn_hidden = 24\nblock_size = 8\nvocab_size = 11\nrope_theta = 500\ntie_embeddings = %s\n"
             "qkv_bias = %s\nhead_dim = %d\nqk_norm = %s\n",
             kv, tied ? "true" : "false", g_qkv_bias ? "true" : "false", g_head_dim, g_qk_norm ? "true" : "false");
    return buf;
}

static uint64_t g_rng = 99;
static double urand(void) { /* [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* The mean loss of the current parameters (a forward of every layer). */
static double mean_loss(harness *h, const int32_t *tok, const int32_t *tgt) {
    assert_int_equal(harness_forward(h, tok, tgt), PLAIT_OK);
    return plait_model_loss_sum(h->model, 0) / (double)(h->B * h->T);
}

/* For each parameter tensor p and a random direction v over it: the
 * gradient's g·v against (L(p + εv) − L(p − εv)) / 2ε. */
static void check_gradients(int kv, int tied) {
    harness h;
    assert_int_equal(harness_init(&h, llama_ini(kv, tied), 2, 1, 0, NULL), 0);
    for (int32_t i = 0; g_qk_norm && i < h.set.n_params; i++) /* weights other than 1 scale what they normalise */
        if (strstr(h.params[i].name, ".q_norm.") || strstr(h.params[i].name, ".k_norm."))
            for (size_t e = 0; e < h.params[i].numel; e++) h.params[i].data[e] = (float)(1.0 + 0.5 * urand());
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, h.V, 1);
    harness_tokens(tgt, n, h.V, 2);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    const double eps = 1e-3;
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue; /* its gradient is checked through the embedding's */
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
        /* a tied embedding's gradient is its own part plus the head's copy */
        if (tied && i == h.desc->p_wte)
            for (size_t e = 0; e < p->numel; e++) gv += v[e] * (double)h.params[h.desc->p_lm_head].grad[e];
        for (size_t e = 0; e < p->numel; e++) p->data[e] = (float)((double)keep[e] + eps * v[e]);
        const double lp = mean_loss(&h, tok, tgt);
        for (size_t e = 0; e < p->numel; e++) p->data[e] = (float)((double)keep[e] - eps * v[e]);
        const double lm = mean_loss(&h, tok, tgt);
        memcpy(p->data, keep, p->numel * sizeof *keep);
        const double fd = (lp - lm) / (2 * eps);
        if (fabs(gv - fd) > 2e-3 + 0.03 * fabs(fd))
            fail_msg("n_kv_head %d%s: %s: g·v = %.6g, finite differences %.6g", kv, tied ? " tied" : "", p->name, gv,
                     fd);
        free(v);
        free(keep);
    }
    harness_free(&h);
}

static void test_gradients_gqa(void **state) {
    (void)state;
    check_gradients(2, 0);
}

static void test_gradients_mqa_tied(void **state) {
    (void)state;
    check_gradients(1, 1);
}

static void test_gradients_mha(void **state) {
    (void)state;
    check_gradients(4, 0);
}

/* The loss and every gradient, bit for bit, with 1 and 3 threads. */
static void test_threads(void **state) {
    (void)state;
    assert_int_equal(harness_threads_agree(llama_ini(2, 0), 3), 0);
}

/* Stage 0 (embedding, h.0) and stage 1 (h.1, head) through the boundary
 * buffers: the loss and every gradient of one stage's, bit for bit. */
static void test_pipeline_split(void **state) {
    (void)state;
    harness full, st0, st1;
    const char *ini = llama_ini(2, 0);
    assert_int_equal(harness_init(&full, ini, 2, 1, 0, NULL), 0);
    const int32_t stages[4] = {0, 0, 1, 1};
    harness_opts o0 = {1, 0, NULL, stages, 0, 1}, o1 = {1, 0, NULL, stages, 1, 1};
    assert_int_equal(harness_init_ex(&st0, ini, 2, &o0), 0);
    assert_int_equal(harness_init_ex(&st1, ini, 2, &o1), 0);
    const size_t n = (size_t)full.B * (size_t)full.T, nb = plait_model_boundary_numel(full.model);
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, full.V, 5);
    harness_tokens(tgt, n, full.V, 6);
    assert_int_equal(harness_step(&full, tok, tgt), PLAIT_OK);
    assert_int_equal(plait_model_set_batch(st0.model, 0, tok, NULL), PLAIT_OK);
    assert_int_equal(plait_model_set_batch(st1.model, 0, NULL, tgt), PLAIT_OK);
    assert_int_equal(plait_model_forward_layer(st0.model, 0, 0), PLAIT_OK);
    assert_int_equal(plait_model_forward_layer(st0.model, 1, 0), PLAIT_OK);
    memcpy(plait_model_boundary(st1.model, 0, 1), plait_model_boundary(st0.model, 0, 1), nb * sizeof(float));
    assert_int_equal(plait_model_forward_layer(st1.model, 2, 0), PLAIT_OK);
    assert_int_equal(plait_model_forward_layer(st1.model, 3, 0), PLAIT_OK);
    assert_true(plait_model_loss_sum(st1.model, 0) == plait_model_loss_sum(full.model, 0));
    assert_int_equal(plait_model_backward_layer(st1.model, 3, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(st1.model, 2, 0), PLAIT_OK);
    memcpy(plait_model_boundary_grad(st0.model, 0, 1), plait_model_boundary_grad(st1.model, 0, 1), nb * sizeof(float));
    assert_int_equal(plait_model_backward_layer(st0.model, 1, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(st0.model, 0, 0), PLAIT_OK);
    for (int32_t i = 0; i < full.set.n_params; i++) {
        const plait_param *f = &full.params[i];
        const plait_param *p = f->layer <= 1 ? &st0.params[i] : &st1.params[i];
        assert_memory_equal(p->grad, f->grad, f->numel * sizeof(float));
    }
    harness_free(&full);
    harness_free(&st0);
    harness_free(&st1);
}

/* A split backward (the zb1 schedule's halves): every layer's input half,
 * last layer first, then every weight half, gives one pass's gradients bit
 * for bit, under tensor parallelism's absence and with a tied head. */
static void check_split(int tied) {
    harness one, two;
    const char *ini = llama_ini(2, tied);
    harness_opts o = {.tp = 1, .max_slots = 1, .split_backward = 1};
    assert_int_equal(harness_init(&one, ini, 2, 1, 0, NULL), 0);
    assert_int_equal(harness_init_ex(&two, llama_ini(2, tied), 2, &o), 0);
    const size_t n = (size_t)one.B * (size_t)one.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, one.V, 7);
    harness_tokens(tgt, n, one.V, 8);
    assert_int_equal(harness_step(&one, tok, tgt), PLAIT_OK);
    assert_int_equal(plait_model_set_batch(two.model, 0, tok, tgt), PLAIT_OK);
    const int32_t nl = two.spec->n_layers;
    for (int32_t l = 0; l < nl; l++) assert_int_equal(plait_model_forward_layer(two.model, l, 0), PLAIT_OK);
    for (int32_t l = nl - 1; l >= 0; l--) assert_int_equal(plait_model_backward_input(two.model, l, 0), PLAIT_OK);
    /* nothing of the weights' gradients yet */
    for (int32_t i = 0; i < two.set.n_params; i++)
        for (size_t e = 0; e < two.params[i].numel; e++) assert_true(two.params[i].grad[e] == 0.0f);
    for (int32_t l = nl - 1; l >= 0; l--) assert_int_equal(plait_model_backward_weight(two.model, l, 0), PLAIT_OK);
    assert_memory_equal(one.grad, two.grad, one.set.numel * sizeof(float));
    harness_free(&one);
    harness_free(&two);
}

static void test_split_backward(void **state) {
    (void)state;
    check_split(0);
    check_split(1);
}

/* One micro-batch through h layer by layer (the backward in one pass, or
 * split into its input and weight halves), its loss equal to ref's bit for
 * bit; ref has run harness_step on the same tokens. */
static void run_like(harness *h, const harness *ref, const int32_t *tok, const int32_t *tgt, int split) {
    assert_int_equal(plait_model_set_batch(h->model, 0, tok, tgt), PLAIT_OK);
    const int32_t nl = h->spec->n_layers;
    for (int32_t l = 0; l < nl; l++) assert_int_equal(plait_model_forward_layer(h->model, l, 0), PLAIT_OK);
    assert_true(plait_model_loss_sum(h->model, 0) == plait_model_loss_sum(ref->model, 0));
    for (int32_t l = nl - 1; l >= 0; l--)
        assert_int_equal(split ? plait_model_backward_input(h->model, l, 0)
                               : plait_model_backward_layer(h->model, l, 0),
                         PLAIT_OK);
    for (int32_t l = nl - 1; split && l >= 0; l--)
        assert_int_equal(plait_model_backward_weight(h->model, l, 0), PLAIT_OK);
}

/* q's, k's and v's weights lie one after another in the flat storage, and
 * the block runs each of its q|k|v products as one over them; a layout
 * keeping them apart (k's data and gradient moved elsewhere) runs the
 * same products on a stacked copy: the same loss and gradients, bit for
 * bit, in one pass and split into halves. */
static plait_param *moved_apart(harness *h, const char *before, const char *name, float **flat_grad);

static void check_qkv_apart(int split) {
    harness one, two;
    harness_opts o = {.tp = 1, .max_slots = 1, .split_backward = split};
    /* with biases: 4 key/value heads, so that q's, k's and v's biases (16
     * floats each) lie one after another too, and k's is moved apart */
    const int kv = g_qkv_bias ? 4 : 2;
    assert_int_equal(harness_init(&one, llama_ini(kv, 0), 2, 1, 0, NULL), 0);
    assert_int_equal(harness_init_ex(&two, llama_ini(kv, 0), 2, &o), 0);
    const size_t n = (size_t)one.B * (size_t)one.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, one.V, 11);
    harness_tokens(tgt, n, one.V, 12);
    plait_param *q = harness_param(&two, "model.layers.0.self_attn.q_proj.weight");
    plait_param *k = harness_param(&two, "model.layers.0.self_attn.k_proj.weight");
    assert_non_null(q);
    assert_non_null(k);
    assert_ptr_equal(q->data + q->numel, k->data); /* the layout the one product reads in place */
    assert_ptr_equal(q->grad + q->numel, k->grad);
    float *data = malloc(k->numel * sizeof *data), *grad = calloc(k->numel, sizeof *grad);
    assert_non_null(data);
    assert_non_null(grad);
    memcpy(data, k->data, k->numel * sizeof *data);
    float *const flat_grad = k->grad;
    k->data = data;
    k->grad = grad;
    float *bias_flat = NULL;
    plait_param *kb = g_qkv_bias ? moved_apart(&two, "model.layers.0.self_attn.q_proj.bias",
                                               "model.layers.0.self_attn.k_proj.bias", &bias_flat)
                                 : NULL;
    assert_int_equal(harness_step(&one, tok, tgt), PLAIT_OK);
    run_like(&two, &one, tok, tgt, split);
    memcpy(flat_grad, grad, k->numel * sizeof *grad); /* k's gradient back in the flat storage, to compare */
    if (kb) memcpy(bias_flat, kb->grad, kb->numel * sizeof *kb->grad);
    assert_memory_equal(one.grad, two.grad, one.set.numel * sizeof(float));
    k->data = q->data + q->numel;
    k->grad = flat_grad;
    free(data);
    free(grad);
    if (kb) {
        free(kb->data);
        free(kb->grad);
        kb->data = NULL; /* harness_free frees the flat storage, not the tensors */
        kb->grad = NULL;
    }
    harness_free(&one);
    harness_free(&two);
}

/* Moves tensor `name`, which lies right after `before` in h's flat
 * storage, to memory of its own (its values copied, its gradient zero);
 * *flat_grad: where its gradient was. */
static plait_param *moved_apart(harness *h, const char *before, const char *name, float **flat_grad) {
    plait_param *b = harness_param(h, before), *p = harness_param(h, name);
    assert_non_null(b);
    assert_non_null(p);
    assert_ptr_equal(b->data + b->numel, p->data);
    float *data = malloc(p->numel * sizeof *data), *grad = calloc(p->numel, sizeof *grad);
    assert_non_null(data);
    assert_non_null(grad);
    memcpy(data, p->data, p->numel * sizeof *data);
    *flat_grad = p->grad;
    p->data = data;
    p->grad = grad;
    return p;
}

static void test_qkv_apart(void **state) {
    (void)state;
    check_qkv_apart(0);
    check_qkv_apart(1);
}

/* [model] recompute selective and full: the loss and every gradient of
 * recompute none, bit for bit, in one pass and split into halves. */
static void check_recompute(const char *mode, int split) {
    char ini[600];
    snprintf(ini, sizeof ini, "%srecompute = %s\n", llama_ini(2, 0), mode);
    harness none, rc;
    harness_opts o = {.tp = 1, .max_slots = 1, .split_backward = split};
    assert_int_equal(harness_init(&none, llama_ini(2, 0), 2, 1, 0, NULL), 0);
    assert_int_equal(harness_init_ex(&rc, ini, 2, &o), 0);
    const size_t n = (size_t)none.B * (size_t)none.T;
    int32_t tok[16], tgt[16];
    harness_tokens(tok, n, none.V, 9);
    harness_tokens(tgt, n, none.V, 10);
    assert_int_equal(harness_step(&none, tok, tgt), PLAIT_OK);
    run_like(&rc, &none, tok, tgt, split);
    assert_memory_equal(none.grad, rc.grad, none.set.numel * sizeof(float));
    /* and it keeps less */
    assert_true(plait_model_activation_bytes(rc.model) <
                plait_model_activation_bytes(none.model) + (split ? 1u << 20 : 0));
    harness_free(&none);
    harness_free(&rc);
}

static void test_recompute(void **state) {
    (void)state;
    check_recompute("selective", 0);
    check_recompute("full", 0);
    check_recompute("selective", 1);
    check_recompute("full", 1);
}

/* [model] qkv_bias (Qwen2's q, k and v biases): the gradients against
 * finite differences (grouped-query attention, whose biases lie apart in
 * the flat storage, and multi-head, where they lie one after another),
 * threads, a pipeline split, a split backward, recomputation and q, k, v
 * kept apart as without biases; and the biases are parameters a step
 * changes. */
static void test_qkv_bias(void **state) {
    (void)state;
    g_qkv_bias = 1;
    check_gradients(2, 0);
    check_gradients(4, 1);
    assert_int_equal(harness_threads_agree(llama_ini(2, 0), 3), 0);
    test_pipeline_split(state);
    check_split(0);
    check_recompute("full", 0);
    check_recompute("selective", 1);
    check_qkv_apart(0);
    check_qkv_apart(1);
    harness h;
    assert_int_equal(harness_init(&h, llama_ini(2, 0), 2, 1, 0, NULL), 0);
    const char *names[] = {"model.layers.1.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.bias",
                           "model.layers.1.self_attn.v_proj.bias"};
    const int64_t widths[] = {16, 8, 8};
    int32_t tok[16], tgt[16];
    harness_tokens(tok, 16, h.V, 13);
    harness_tokens(tgt, 16, h.V, 14);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    for (int i = 0; i < 3; i++) {
        const plait_param *b = harness_param(&h, names[i]);
        assert_non_null(b);
        assert_int_equal(b->ndim, 1);
        assert_int_equal(b->shape[0], widths[i]);
        double sum = 0;
        for (size_t e = 0; e < b->numel; e++) sum += fabs((double)b->grad[e]);
        assert_true(sum > 0); /* the loss depends on it */
    }
    harness_free(&h);
    g_qkv_bias = 0;
}

/* [model] qk_norm (Qwen3's q_norm and k_norm), alone and with heads of
 * their own size and biases: the gradients against finite differences
 * (the norms' weights drawn away from their init of 1, so that they
 * scale what they normalise), threads, a pipeline split, a split backward
 * and recomputation bit for bit as above; the two weights [head_dim]
 * each, and the loss depending on both. */
static void test_qk_norm(void **state) {
    g_qk_norm = 1;
    for (int variant = 0; variant < 2; variant++) {
        g_head_dim = variant ? 8 : 0;
        g_qkv_bias = variant;
        check_gradients(2, 0);
        check_gradients(1, 1);
        check_gradients(4, 0);
        assert_int_equal(harness_threads_agree(llama_ini(2, 0), 3), 0);
        test_pipeline_split(state);
        check_split(0);
        check_recompute("full", 0);
        check_recompute("selective", 1);
        check_qkv_apart(variant);
    }
    harness h;
    assert_int_equal(harness_init(&h, llama_ini(2, 0), 2, 1, 0, NULL), 0);
    const char *names[] = {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"};
    int32_t tok[16], tgt[16];
    harness_tokens(tok, 16, h.V, 13);
    harness_tokens(tgt, 16, h.V, 14);
    harness_zero_grads(&h);
    assert_int_equal(harness_step(&h, tok, tgt), PLAIT_OK);
    for (int i = 0; i < 2; i++) {
        const plait_param *w = harness_param(&h, names[i]);
        assert_non_null(w);
        assert_int_equal(w->ndim, 1);
        assert_int_equal(w->shape[0], 8);
        double sum = 0;
        for (size_t e = 0; e < w->numel; e++) sum += fabs((double)w->grad[e]);
        assert_true(sum > 0); /* the loss depends on it */
    }
    harness_free(&h);
    g_qk_norm = g_qkv_bias = g_head_dim = 0;
}

/* [model] head_dim of 8 where n_embd / n_head is 4 (q_proj 32 rows for a
 * width of 16, o_proj reading 32), without and with q, k and v biases:
 * the gradients against finite differences, threads, a pipeline split,
 * a split backward and recomputation as with heads n_embd / n_head wide. */
static void test_head_dim(void **state) {
    g_head_dim = 8;
    for (int bias = 0; bias < 2; bias++) {
        g_qkv_bias = bias;
        check_gradients(2, 0);
        check_gradients(1, 1);
        assert_int_equal(harness_threads_agree(llama_ini(2, 0), 3), 0);
        test_pipeline_split(state);
        check_split(0);
        check_recompute("full", 0);
        check_recompute("selective", 1);
    }
    harness h;
    assert_int_equal(harness_init(&h, llama_ini(2, 0), 2, 1, 0, NULL), 0);
    const plait_param *q = harness_param(&h, "model.layers.0.self_attn.q_proj.weight");
    const plait_param *o = harness_param(&h, "model.layers.0.self_attn.o_proj.weight");
    assert_non_null(q);
    assert_non_null(o);
    assert_int_equal(q->shape[0], 32);
    assert_int_equal(q->shape[1], 16);
    assert_int_equal(o->shape[0], 16);
    assert_int_equal(o->shape[1], 32);
    assert_int_equal(plait_model_spec_head_size(h.spec), 8);
    harness_free(&h);
    g_head_dim = 0;
    g_qkv_bias = 0;
}

/* harness_init fails for `ini`, the last error naming `want`. */
static void refused(const char *ini, const char *want) {
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1};
    assert_int_equal(harness_init_ex(&h, ini, 2, &o), -1);
    if (!strstr(plait_last_error(), want)) fail_msg("refused with \"%s\", not naming \"%s\"", plait_last_error(), want);
    harness_free(&h);
}

static void test_refused(void **state) {
    (void)state;
    const char *base = "[model]\narch = llama\nn_layer = 1\nn_head = 4\nn_embd = 16\nblock_size = 8\nvocab_size = 11\n";
    char ini[512];
    snprintf(ini, sizeof ini, "%sn_kv_head = 3\n", base);
    refused(ini, "n_kv_head = 3 does not divide n_head = 4");
    snprintf(ini, sizeof ini, "%srope_theta = -1\n", base);
    refused(ini, "rope_theta");
    refused("[model]\narch = llama\nn_layer = 1\nn_head = 4\nn_embd = 12\nblock_size = 8\nvocab_size = 11\n",
            "head size must be even");
    snprintf(ini, sizeof ini, "%shead_dim = 6\n", base); /* fine */
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1};
    assert_int_equal(harness_init_ex(&h, ini, 2, &o), 0);
    harness_free(&h);
    snprintf(ini, sizeof ini, "%shead_dim = 5\n", base);
    refused(ini, "[model] head_dim = 5: the llama arch's head size must be even");
}

int main(void) {
    plait_kernels_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_gqa),  cmocka_unit_test(test_gradients_mqa_tied),
        cmocka_unit_test(test_gradients_mha),  cmocka_unit_test(test_threads),
        cmocka_unit_test(test_pipeline_split), cmocka_unit_test(test_split_backward),
        cmocka_unit_test(test_recompute),      cmocka_unit_test(test_qkv_apart),
        cmocka_unit_test(test_qkv_bias),       cmocka_unit_test(test_head_dim),
        cmocka_unit_test(test_qk_norm),        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
