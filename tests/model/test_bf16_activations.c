/*
 * bf16 activations (plait_model_create_args.activations_bf16) on the CPU,
 * with the references of the kernel table's bf16 entries
 * (tests/device/kref_bf16.c: the float32 kernel on widened inputs, each
 * bf16 output rounded once) standing in for a device's: the model's bf16
 * path trains as the float32 model does within bf16's rounding, holds its
 * activations in about half the memory, makes its bf16 weight copies again
 * after each update (and is caught when told nothing), gives the same bits
 * twice, under selective recomputation keeps one GELU output for all
 * blocks, under full recomputation one block's working set for all blocks
 * with the bits of no recomputation, computes the head a chunk of rows
 * at a time and keeps no logits (nor, forward-only, any of the head's
 * gradients), reads the residual stream's gradient in bf16 as its
 * LayerNorm backward wrote it (the bits of converting it apart, and not
 * after a write through plait_model_boundary_grad), writes that copy only
 * where a block of the same rank reads it, splits its backward in two
 * halves with the one pass's bits, keeps its weight copy one layer at a
 * time where the parameters are gathered so (ZeRO-3) with the whole
 * copy's bits, is granted only where every piece exists, refuses to
 * keep float32 logits it does not have, and under a bf16 residual stream
 * stores the boundary a pipeline stage receives in bf16 with the one-stage
 * model's bits.
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
#include "runtime/error.h"

#define STEPS 6
#define SLOTS 2
#define GPT_INI "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\nblock_size = 32\nvocab_size = 100\n"

static const plait_kernels *bf16_table(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

/* The same without layernorm_backward_fused_bf16_copy (ABI 1.9): the
 * model converts the residual stream's gradient with to_bf16. */
static const plait_kernels *bf16_table_no_copy(void) {
    static plait_kernels k;
    k = *bf16_table();
    k.layernorm_backward_fused_bf16_copy = NULL;
    return &k;
}

/* A copy entry whose copy is off by one unit in the last place wherever
 * it is nonzero: what a model that reads the copy trains on changes. */
static void copy_off_by_one(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight, float *dbias,
                            const plait_bf16 *dout, const float *inp, const float *weight, const float *mean,
                            const float *rstd, int64_t BT, int64_t C) {
    bf16_table()->layernorm_backward_fused_bf16_copy(dinp, dinp_bf, dres, dweight, dbias, dout, inp, weight, mean,
                                                     rstd, BT, C);
    for (int64_t i = 0; i < BT * C; i++)
        if (dinp_bf[i] & 0x7fff) dinp_bf[i]++;
}

static const plait_kernels *bf16_table_bad_copy(void) {
    static plait_kernels k;
    k = *bf16_table();
    k.layernorm_backward_fused_bf16_copy = copy_off_by_one;
    return &k;
}

static void trace_on(const char *ini, const plait_kernels *k, int bf16, int stale, int split, harness_trace *t) {
    harness_opts o = {.tp = 1, .max_slots = SLOTS, .kernels = k, .activations_bf16 = bf16,
                      .stale_weights = stale, .split_backward = split};
    t->steps = STEPS;
    assert_int_equal(harness_trace_run(ini, 2, &o, t), 0);
}

static void trace(const char *ini, int bf16, int stale, int split, harness_trace *t) {
    trace_on(ini, bf16_table(), bf16, stale, split, t);
}

/* The largest relative difference of the per-slot losses, and of the
 * gradients (norm of the difference over the norm) over every step. */
static double loss_dev(const harness_trace *a, const harness_trace *b) { return harness_loss_dev(a, b, SLOTS); }

static double grad_dev(const harness_trace *a, const harness_trace *b) { return harness_grad_dev(a, b); }

static void test_trains_as_float32(void **state) {
    (void)state;
    harness_trace f32, bf, again, stale;
    trace(GPT_INI, 0, 0, 0, &f32);
    trace(GPT_INI, 1, 0, 0, &bf);
    trace(GPT_INI, 1, 0, 0, &again);
    trace(GPT_INI, 1, 1, 0, &stale);
    assert_false(f32.bf16);
    assert_true(bf.bf16);
    const double dl = loss_dev(&bf, &f32), dg = grad_dev(&bf, &f32), ds = loss_dev(&stale, &f32);
    printf("bf16 against float32 over %d steps: losses within %.2e, gradients within %.2e (norm-wise); "
           "with stale weight copies the losses are %.2e off\n", STEPS, dl, dg, ds);
    /* bf16's 2^-8 rounding of every stored activation, a few layers deep */
    assert_true(dl <= 1e-2);
    assert_true(dg <= 5e-2);
    assert_true(dl > 0); /* it did round */
    /* weights used a step late: the updates' effect (lr 0.05) is missed */
    assert_true(ds > 10 * dl);
    assert_memory_equal(bf.loss, again.loss, sizeof(double) * STEPS * SLOTS);
    assert_memory_equal(bf.grads, again.grads, sizeof(float) * STEPS * bf.numel);
    /* the slots' blocks and head (C-wide and 4C-wide activations, the
     * logits), the backward scratch: half, but for the float32 residual
     * stream and the row statistics */
    printf("activation bytes: float32 %llu, bf16 %llu (%.2f)\n", (unsigned long long)f32.act_bytes,
           (unsigned long long)bf.act_bytes, (double)bf.act_bytes / (double)f32.act_bytes);
    assert_true(bf.act_bytes * 10 < f32.act_bytes * 7);
    harness_trace_free(&f32);
    harness_trace_free(&bf);
    harness_trace_free(&again);
    harness_trace_free(&stale);
}

/* Selective recomputation under bf16 activations drops GELU's output
 * alone: one buffer the blocks share instead of one per block and slot,
 * rebuilt in each block's backward with the forward's own kernel. */
static void test_selective(void **state) {
    (void)state;
    harness_trace f32, none, sel;
    trace(GPT_INI, 0, 0, 0, &f32);
    trace(GPT_INI, 1, 0, 0, &none);
    trace(GPT_INI "recompute = selective\n", 1, 0, 0, &sel);
    assert_true(sel.bf16);
    const double dl = loss_dev(&sel, &f32), dg = grad_dev(&sel, &f32);
    printf("bf16, recompute selective, against float32: losses within %.2e, gradients within %.2e; activation "
           "bytes %llu (none: %llu)\n", dl, dg, (unsigned long long)sel.act_bytes, (unsigned long long)none.act_bytes);
    assert_true(dl <= 1e-2);
    assert_true(dg <= 5e-2);
    /* B 2, T 32, 4C 128: a GELU output is 8192 bf16 (4096 floats); 2
     * blocks x 2 slots kept without recomputation, one shared with it */
    const uint64_t fcg = 4096 * sizeof(float);
    assert_int_equal(none.act_bytes - sel.act_bytes, (2 * SLOTS - 1) * fcg);
    harness_trace_free(&f32);
    harness_trace_free(&none);
    harness_trace_free(&sel);
}

/* Full recomputation under bf16 activations keeps only each block's input
 * (the float32 residual stream): the backward reruns the block's forward
 * with the bf16 bodies, the same kernels on the same bf16 weight copies,
 * into one bf16 working set the blocks share, so losses and gradients are
 * those of no recomputation, bit for bit. */
static void test_full(void **state) {
    (void)state;
    harness_trace none, full;
    trace(GPT_INI, 1, 0, 0, &none);
    trace(GPT_INI "recompute = full\n", 1, 0, 0, &full);
    assert_true(none.bf16);
    assert_true(full.bf16);
    printf("bf16, recompute full: activation bytes %llu (none: %llu)\n", (unsigned long long)full.act_bytes,
           (unsigned long long)none.act_bytes);
    assert_memory_equal(full.loss, none.loss, sizeof(double) * STEPS * SLOTS);
    assert_memory_equal(full.grads, none.grads, sizeof(float) * STEPS * full.numel);
    /* B 2, T 32, C 32, 4C 128, 4 heads: a block's working set in floats is
     * ln_1 and ln_2 (2048 bf16: 1024 each), q/k/v (6144 bf16: 3072), the
     * attention output (1024), c_fc's output and GELU's (8192 bf16: 4096
     * each), res2 (2048 float32), the log-sum-exps (256) and 4 row
     * statistics (64 each); 2 blocks x 2 slots kept without
     * recomputation, one shared with it */
    const uint64_t block = (2 * 1024 + 3072 + 1024 + 2 * 4096 + 2048 + 256 + 4 * 64) * sizeof(float);
    assert_int_equal(none.act_bytes - full.act_bytes, (2 * SLOTS - 1) * block);
    harness_trace_free(&none);
    harness_trace_free(&full);
}

/* The head computes its logits a chunk of rows at a time (gpt_bf16.c):
 * with 200 rows and 500 classes two chunks of 104 and 96 rows fill the
 * backward scratch's room; with 256 rows and 2,048 classes the room holds
 * under 64 rows, so the scratch grows to four chunks of 64. Either trains
 * as the float32 model does, twice to the same bits, and keeps no
 * logits: what the float32 model keeps of them (4 bytes a row and class,
 * a slot) is gone. */
static void head_in_chunks(const char *ini, int64_t rows, int64_t chunks, int64_t V, int64_t C, int64_t BT) {
    harness_trace f32, bf, again;
    trace(ini, 0, 0, 0, &f32);
    trace(ini, 1, 0, 0, &bf);
    trace(ini, 1, 0, 0, &again);
    assert_true(bf.bf16);
    /* the room: the bf16 gradients after dln, dfc [BT,4C], datty [BT,C],
     * dqkv [BT,3C], dres [BT,C] */
    size_t extra = 0;
    const size_t room = (size_t)(BT * 9 * C / 2);
    assert_int_equal(plait_model_head_rows(BT, V, room, &extra), rows);
    assert_int_equal((BT + rows - 1) / rows, chunks);
    assert_true(rows * V <= 2 * (int64_t)(room + extra));
    const double dl = loss_dev(&bf, &f32), dg = grad_dev(&bf, &f32);
    printf("bf16 head in %lld chunks of %lld rows (V %lld): losses within %.2e, gradients within %.2e of float32; "
           "activation bytes %llu (float32: %llu)\n", (long long)chunks, (long long)rows, (long long)V, dl, dg,
           (unsigned long long)bf.act_bytes, (unsigned long long)f32.act_bytes);
    assert_true(dl <= 1e-2);
    assert_true(dg <= 5e-2);
    assert_memory_equal(bf.loss, again.loss, sizeof(double) * STEPS * SLOTS);
    assert_memory_equal(bf.grads, again.grads, sizeof(float) * STEPS * bf.numel);
    assert_true(bf.act_bytes + (uint64_t)(SLOTS * BT * V) * sizeof(float) / 2 < f32.act_bytes);
    harness_trace_free(&f32);
    harness_trace_free(&bf);
    harness_trace_free(&again);
}

static void test_head_in_chunks(void **state) {
    (void)state;
    head_in_chunks("[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\nblock_size = 100\n"
                   "vocab_size = 500\n",
                   104, 2, 500, 32, 200);
    head_in_chunks("[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\nblock_size = 128\n"
                   "vocab_size = 2048\n",
                   64, 4, 2048, 32, 256);
    /* one chunk when the room holds every row, the least chunk when the
     * rows are fewer than it */
    size_t extra = 1;
    assert_int_equal(plait_model_head_rows(64, 100, 9216, &extra), 64);
    assert_int_equal(extra, 0);
    assert_int_equal(plait_model_head_rows(40, 4096, 10, &extra), 40);
    assert_int_equal(extra, 40 * 4096 / 2 - 10);
}

/* A forward-only forward (evaluation) gives the loss a training forward
 * gives, bit for bit; the head's backward after it is refused, naming
 * why (it computed no gradient to start from); training goes on after it.
 * Four chunks, as above. */
static void test_forward_only(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h,
                                     "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\n"
                                     "block_size = 128\nvocab_size = 2048\n",
                                     2, &o),
                     0);
    assert_int_equal(plait_model_head_chunk_rows(h.model), 64);
    assert_int_equal(harness_forward_only_agrees(&h), 0);
    harness_free(&h);
}

/* The LayerNorm backward that makes the residual stream's gradient also
 * writes the bf16 copy the next block half's products read (ABI 1.9):
 * the same bits as converting it apart with to_bf16, with two slots
 * interleaved as a pipeline runs them and under full recomputation; and
 * the copy is what they read (a copy off by one unit changes the
 * gradients). */
static void test_layernorm_writes_the_copy(void **state) {
    (void)state;
    const char *inis[] = {GPT_INI, GPT_INI "recompute = full\n"};
    for (int i = 0; i < 2; i++) {
        harness_trace copy, conv, bad;
        trace_on(inis[i], bf16_table(), 1, 0, 0, &copy);
        trace_on(inis[i], bf16_table_no_copy(), 1, 0, 0, &conv);
        trace_on(inis[i], bf16_table_bad_copy(), 1, 0, 0, &bad);
        assert_true(copy.bf16 && conv.bf16 && bad.bf16);
        assert_memory_equal(copy.loss, conv.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(copy.grads, conv.grads, sizeof(float) * STEPS * copy.numel);
        printf("%s: the copy written by LayerNorm, the same bits as to_bf16's; a copy off by one ulp moves the "
               "gradients by %.2e\n", i ? "recompute full" : "recompute none", grad_dev(&bad, &copy));
        assert_true(memcmp(copy.grads, bad.grads, sizeof(float) * STEPS * copy.numel) != 0);
        harness_trace_free(&copy);
        harness_trace_free(&conv);
        harness_trace_free(&bad);
    }
}

/* On a bf16-activation model: zeroed gradients and slot 0's batch set
 * (tokens for targets too, no logits kept). Returns the tokens (free). */
static int32_t *first_batch(harness *h) {
    assert_true(plait_model_bf16_activations(h->model));
    const size_t n = (size_t)h->B * (size_t)h->T;
    int32_t *tok = malloc(n * sizeof *tok);
    harness_tokens(tok, n, h->V, 3);
    plait_model_keep_logits(h->model, 0);
    harness_zero_grads(h);
    assert_int_equal(plait_model_set_batch(h->model, 0, tok, tok), PLAIT_OK);
    return tok;
}

/* One step on table k in which the gradient at block 1's output is
 * doubled between block 2's backward and block 1's (as a pipeline stage
 * receives it there through plait_model_boundary_grad); the gradients
 * after it into grads. */
static void step_with_boundary_write(const plait_kernels *k, float *grads) {
    harness h;
    harness_opts o = {.tp = 1, .kernels = k, .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    const size_t nb = (size_t)h.B * (size_t)h.T * (size_t)h.C;
    int32_t *tok = first_batch(&h);
    const int32_t L = h.spec->n_layers; /* embedding, 2 blocks, head */
    for (int32_t l = 0; l < L; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(h.model, L - 1, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(h.model, 2, 0), PLAIT_OK);
    float *g = plait_model_boundary_grad(h.model, 0, 1);
    for (size_t i = 0; i < nb; i++) g[i] *= 2.0f;
    assert_int_equal(plait_model_backward_layer(h.model, 1, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(h.model, 0, 0), PLAIT_OK);
    memcpy(grads, h.grad, h.set.numel * sizeof *grads);
    free(tok);
    harness_free(&h);
}

/* A gradient written through plait_model_boundary_grad is converted
 * again: the model does not read a copy its LayerNorm made of what was
 * there before. */
static void test_boundary_write_drops_the_copy(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    const size_t numel = h.set.numel;
    harness_free(&h);
    float *copy = malloc(numel * sizeof *copy), *conv = malloc(numel * sizeof *conv);
    step_with_boundary_write(bf16_table(), copy);
    step_with_boundary_write(bf16_table_no_copy(), conv);
    assert_memory_equal(copy, conv, numel * sizeof *copy);
    free(copy);
    free(conv);
}

/* One step of two slots on table k, slot 1's forward run between slot 0's
 * block 2 and block 1 backwards (as 1F1B runs a last stage): slot 1's
 * head borrows the scratch that holds slot 0's bf16 copy. Returns the
 * gradients after it (malloc'ed, numel of them). 2,048 classes: each chunk of logits covers the
 * whole scratch. */
static float *step_with_head_between(const plait_kernels *k, size_t *numel) {
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 2, .kernels = k, .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h,
                                     "[run]\nseed = 5\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 32\n"
                                     "block_size = 128\nvocab_size = 2048\n",
                                     2, &o),
                     0);
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t *tok = malloc(n * sizeof *tok), *tok1 = malloc(n * sizeof *tok1);
    harness_tokens(tok, n, h.V, 3);
    harness_tokens(tok1, n, h.V, 4);
    plait_model_keep_logits(h.model, 0);
    harness_zero_grads(&h);
    assert_int_equal(plait_model_set_batch(h.model, 0, tok, tok), PLAIT_OK);
    assert_int_equal(plait_model_set_batch(h.model, 1, tok1, tok1), PLAIT_OK);
    const int32_t L = h.spec->n_layers;
    for (int32_t l = 0; l < L; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(h.model, L - 1, 0), PLAIT_OK);
    assert_int_equal(plait_model_backward_layer(h.model, 2, 0), PLAIT_OK);
    for (int32_t l = 0; l < L; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 1), PLAIT_OK);
    for (int32_t l = 1; l >= 0; l--) assert_int_equal(plait_model_backward_layer(h.model, l, 0), PLAIT_OK);
    for (int32_t l = L - 1; l >= 0; l--) assert_int_equal(plait_model_backward_layer(h.model, l, 1), PLAIT_OK);
    *numel = h.set.numel;
    float *grads = malloc(*numel * sizeof *grads);
    memcpy(grads, h.grad, *numel * sizeof *grads);
    free(tok);
    free(tok1);
    harness_free(&h);
    return grads;
}

/* The head's forward borrows the scratch: a copy made before it is made
 * again after it, so the gradients are those of converting each time. */
static void test_head_forward_drops_the_copy(void **state) {
    (void)state;
    size_t numel = 0, numel2 = 0;
    float *copy = step_with_head_between(bf16_table(), &numel);
    float *conv = step_with_head_between(bf16_table_no_copy(), &numel2);
    assert_int_equal(numel, numel2);
    assert_memory_equal(copy, conv, numel * sizeof *copy);
    free(copy);
    free(conv);
}

/* A table that counts the two fused LayerNorm backwards, with and
 * without the bf16 copy. */
static int g_with_copy, g_without_copy;

static void count_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight, float *dbias,
                       const plait_bf16 *dout, const float *inp, const float *weight, const float *mean,
                       const float *rstd, int64_t BT, int64_t C) {
    g_with_copy++;
    bf16_table()->layernorm_backward_fused_bf16_copy(dinp, dinp_bf, dres, dweight, dbias, dout, inp, weight, mean,
                                                     rstd, BT, C);
}

static void count_plain(float *dinp, const float *dres, float *dweight, float *dbias, const plait_bf16 *dout,
                        const float *inp, const float *weight, const float *mean, const float *rstd, int64_t BT,
                        int64_t C) {
    g_without_copy++;
    bf16_table()->layernorm_backward_fused_bf16(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
}

/* One micro-batch through pipeline stage `stage` of a 4-block GPT whose
 * layers (embedding, blocks 1-4, head) are on the stages `cut` says (two
 * stages): the boundary activation and gradient it would receive are set
 * by hand. */
static void stage_step(const int32_t *cut, int32_t stage) {
    static plait_kernels k;
    k = *bf16_table();
    k.layernorm_backward_fused_bf16_copy = count_copy;
    k.layernorm_backward_fused_bf16 = count_plain;
    harness h;
    harness_opts o = {.tp = 1, .kernels = &k, .activations_bf16 = 1, .layer_stage = cut, .stage = stage};
    assert_int_equal(harness_init_ex(&h, "[run]\nseed = 5\n[model]\nn_layer = 4\nn_head = 4\nn_embd = 32\n"
                                         "block_size = 32\nvocab_size = 100\n",
                                     2, &o),
                     0);
    const size_t nb = (size_t)h.B * (size_t)h.T * (size_t)h.C;
    int32_t *tok = first_batch(&h);
    int32_t first = -1, last = -1;
    for (int32_t l = 0; l < 6; l++)
        if (cut[l] == stage) {
            if (first < 0) first = l;
            last = l;
        }
    if (stage) {
        float *x = plait_model_boundary(h.model, 0, first - 1);
        for (size_t i = 0; i < nb; i++) x[i] = 0.01f * (float)(i % 7);
    }
    for (int32_t l = first; l <= last; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    if (!stage) {
        float *g = plait_model_boundary_grad(h.model, 0, last);
        for (size_t i = 0; i < nb; i++) g[i] = 1e-3f * (float)(i % 5);
    }
    g_with_copy = g_without_copy = 0;
    for (int32_t l = last; l >= first; l--) assert_int_equal(plait_model_backward_layer(h.model, l, 0), PLAIT_OK);
    free(tok);
    harness_free(&h);
}

/* Each LayerNorm backward writes the copy where a block of the same rank
 * reads it next, and only there: not under a stage's first layer, whose
 * input gradient leaves the rank in float32 (a head alone on its stage
 * too), nor under block 1, below which the embedding reads float32. */
static void test_copy_only_where_read(void **state) {
    (void)state;
    static const int32_t halves[] = {0, 0, 0, 1, 1, 1}, head_alone[] = {0, 0, 0, 0, 0, 1};
    stage_step(halves, 1); /* head, 4 mlp, 4 attention, 3 mlp: copies; 3 attention: none */
    assert_int_equal(g_with_copy, 4);
    assert_int_equal(g_without_copy, 1);
    stage_step(halves, 0); /* 2 mlp, 2 attention, 1 mlp: copies; 1 attention: none */
    assert_int_equal(g_with_copy, 3);
    assert_int_equal(g_without_copy, 1);
    stage_step(head_alone, 1); /* the head's gradient leaves the stage: no copy */
    assert_int_equal(g_with_copy, 0);
    assert_int_equal(g_without_copy, 1);
}

/* A split backward (zero-bubble schedules) under bf16 activations: every
 * slot's input halves, then every weight half (model_harness.c), give the
 * one-pass backward's losses and gradients bit for bit under each
 * recompute mode. Each slot keeps per block what its weight half reads,
 * in bf16: the output gradients of the block, attn.c_proj, ln_1 and ln_2
 * (B 2, T 32, C 32: 1024 floats each), and c_fc's and c_attn's (4C: 4096;
 * 3C: 3072), which recompute none keeps over those products' outputs
 * instead. The head keeps nothing more: its weight half reads what its
 * forward left. */
static void test_split_backward(void **state) {
    (void)state;
    static const char *const ini[3] = {GPT_INI, GPT_INI "recompute = selective\n", GPT_INI "recompute = full\n"};
    static const char *const mode[3] = {"none", "selective", "full"};
    static const uint64_t kept[3] = {4 * 1024, 4 * 1024 + 4096 + 3072, 4 * 1024 + 4096 + 3072};
    for (int i = 0; i < 3; i++) {
        harness_trace one, split;
        trace(ini[i], 1, 0, 0, &one);
        trace(ini[i], 1, 0, 1, &split);
        assert_true(one.bf16);
        assert_true(split.bf16);
        assert_memory_equal(split.loss, one.loss, sizeof(double) * STEPS * SLOTS);
        assert_memory_equal(split.grads, one.grads, sizeof(float) * STEPS * split.numel);
        printf("bf16, split backward, recompute %s: the one pass's bits; activation bytes %llu (one pass: %llu)\n",
               mode[i], (unsigned long long)split.act_bytes, (unsigned long long)one.act_bytes);
        assert_int_equal(split.act_bytes - one.act_bytes, 2 * SLOTS * kept[i] * sizeof(float));
        harness_trace_free(&one);
        harness_trace_free(&split);
    }
}

/* Where the parameters are gathered a layer at a time (ZeRO-3:
 * create_args.params_gathered) the bf16 weight copy is one buffer the
 * largest layer's copy fills, each layer's made in it at every forward
 * and backward call: the same rounding of the same float32 values, so
 * the losses and gradients of the whole copy, bit for bit, in one pass,
 * with a split backward and with full recomputation (whose backward reruns
 * the forward on the copy). Here a block's copy is the largest: c_attn
 * 3C x C and its bias 3C, c_proj C x C, c_fc 4C x C and its bias 4C,
 * mlp's c_proj C x 4C (C 32: 12,512 bf16); the head's tied copy V x C
 * (3,200) is smaller, and the whole copy is 2 blocks' and the head's. */
static void test_copy_per_layer(void **state) {
    (void)state;
    const uint64_t block = (3 * 32 * 32 + 3 * 32 + 32 * 32 + 4 * 32 * 32 + 4 * 32 + 4 * 32 * 32) * 2,
                   head = 100 * 32 * 2;
    static const char *const ini[2] = {GPT_INI, GPT_INI "recompute = full\n"};
    for (int i = 0; i < 2; i++)
        for (int split = 0; split < 2; split++) {
            harness_trace whole, per_layer;
            const harness_opts g = {.tp = 1,
                                    .max_slots = SLOTS,
                                    .kernels = bf16_table(),
                                    .activations_bf16 = 1,
                                    .split_backward = split,
                                    .params_gathered = 1};
            trace(ini[i], 1, 0, split, &whole);
            per_layer.steps = STEPS;
            assert_int_equal(harness_trace_run(ini[i], 2, &g, &per_layer), 0);
            assert_true(per_layer.bf16);
            printf("bf16 weight copy, recompute %s%s: %llu bytes whole, %llu a layer at a time\n", i ? "full" : "none",
                   split ? ", split backward" : "", (unsigned long long)whole.copy_bytes,
                   (unsigned long long)per_layer.copy_bytes);
            assert_int_equal(whole.copy_bytes, 2 * block + head);
            assert_int_equal(per_layer.copy_bytes, block);
            assert_memory_equal(per_layer.loss, whole.loss, sizeof(double) * STEPS * SLOTS);
            assert_memory_equal(per_layer.grads, whole.grads, sizeof(float) * STEPS * whole.numel);
            harness_trace_free(&whole);
            harness_trace_free(&per_layer);
        }
}

/* A split backward's input halves add to no parameter gradient (a
 * trainer may take each micro-batch's gradients after its weight halves,
 * while the next one's input halves have run): every gradient is zero
 * after them, the head's, LayerNorms' and products' all made by the
 * weight halves. */
static void test_split_input_adds_no_gradient(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 1, .kernels = bf16_table(), .activations_bf16 = 1, .split_backward = 1};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    assert_true(plait_model_bf16_activations(h.model));
    const size_t n = (size_t)h.B * (size_t)h.T;
    const int32_t L = 2 + 2; /* embedding, 2 blocks, head */
    int32_t *tok = malloc(n * sizeof *tok);
    harness_tokens(tok, n, h.V, 11);
    harness_zero_grads(&h);
    assert_int_equal(plait_model_set_batch(h.model, 0, tok, tok), PLAIT_OK);
    for (int32_t l = 0; l < L; l++) assert_int_equal(plait_model_forward_layer(h.model, l, 0), PLAIT_OK);
    for (int32_t l = L - 1; l >= 0; l--) assert_int_equal(plait_model_backward_input(h.model, l, 0), PLAIT_OK);
    size_t nonzero = 0;
    for (size_t i = 0; i < h.set.numel; i++) nonzero += h.grad[i] != 0.0f;
    assert_int_equal(nonzero, 0);
    for (int32_t l = L - 1; l >= 0; l--) assert_int_equal(plait_model_backward_weight(h.model, l, 0), PLAIT_OK);
    for (size_t i = 0; i < h.set.numel; i++) nonzero += h.grad[i] != 0.0f;
    printf("split backward: no gradient after the input halves; %zu of %zu after the weight halves\n", nonzero,
           h.set.numel);
    assert_true(nonzero > h.set.numel / 2);
    free(tok);
    harness_free(&h);
}

/* Where a piece is missing the model keeps float32 activations (and the
 * same numbers as a float32 model). */
static void test_granted_only_where_whole(void **state) {
    (void)state;
    harness_trace t;
    trace("[run]\nseed = 5\n[model]\narch = mlp\nn_layer = 2\nn_embd = 32\nblock_size = 8\nvocab_size = 50\n", 1, 0, 0,
          &t);
    assert_false(t.bf16);
    harness_trace_free(&t);
    plait_kernels partial = *plait_kernels_table(); /* the CPU's, one bf16 entry short */
    partial.crossentropy_fused_bf16 = NULL;
    harness_opts o = {.tp = 1, .max_slots = 1, .kernels = &partial, .activations_bf16 = 1};
    t.steps = 1;
    assert_int_equal(harness_trace_run(GPT_INI, 2, &o, &t), 0);
    assert_false(t.bf16);
    harness_trace_free(&t);
}

/* A bf16 residual stream on kernels that cannot widen bf16 (no from_bf16)
 * is refused, naming the entry. */
static void test_residual_needs_widening(void **state) {
    (void)state;
    plait_kernels no_widen = *plait_kernels_table();
    no_widen.from_bf16 = NULL;
    harness h;
    harness_opts o = {.tp = 1, .kernels = &no_widen, .activations_bf16 = 1, .residual_bf16 = 1};
    assert_int_not_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    assert_non_null(strstr(plait_last_error(), "kernels widen bf16 (from_bf16)"));
    harness_free(&h);
    o.kernels = plait_kernels_table(); /* the CPU's widen them */
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    harness_free(&h);
}

/* A forward that would keep float32 logits is refused, naming why. */
/* A bf16 residual stream split over two stages (embedding, h.0, h.1 |
 * h.2, h.3, head), two micro-batches in flight: the later stage stores the
 * boundary it receives in bf16, as it stores those it writes itself, so
 * its activation bytes exceed the float32 stream's by just the running
 * layer's two float32 buffers less half of each of its three boundaries
 * (received, h.2's, h.3's); its losses and gradients are the one-stage
 * model's bits. */
static void test_received_boundary_in_bf16(void **state) {
    (void)state;
    const int32_t stages[6] = {0, 0, 0, 1, 1, 1}, B = 2;
    harness full, st0, st1, f32;
    harness_opts of = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1, .residual_bf16 = 1};
    harness_opts o0 = of, o1 = of, o32 = of;
    o0.layer_stage = o1.layer_stage = o32.layer_stage = stages;
    o0.max_slots = o1.max_slots = o32.max_slots = 2;
    o1.stage = o32.stage = 1;
    o32.residual_bf16 = 0;
    const char *ini = "[run]\nseed = 5\n[model]\nn_layer = 4\nn_head = 4\nn_embd = 32\nblock_size = 32\n"
                      "vocab_size = 100\n";
    assert_int_equal(harness_init_ex(&full, ini, B, &of), 0);
    assert_int_equal(harness_init_ex(&st0, ini, B, &o0), 0);
    assert_int_equal(harness_init_ex(&st1, ini, B, &o1), 0);
    assert_int_equal(harness_init_ex(&f32, ini, B, &o32), 0);
    const size_t n = (size_t)B * (size_t)full.T, nb = plait_model_boundary_numel(full.model);
    int32_t *tok = malloc(2 * n * sizeof *tok), *tgt = malloc(2 * n * sizeof *tgt);
    harness_tokens(tok, 2 * n, full.V, 5);
    harness_tokens(tgt, 2 * n, full.V, 6);
    double loss[2];
    for (int32_t mb = 0; mb < 2; mb++) {
        assert_int_equal(harness_step(&full, tok + mb * n, tgt + mb * n), PLAIT_OK);
        loss[mb] = plait_model_loss_sum(full.model, 0);
    }
    for (int32_t slot = 0; slot < 2; slot++) { /* both forwards, then both backwards */
        assert_int_equal(plait_model_set_batch(st0.model, slot, tok + slot * n, NULL), PLAIT_OK);
        assert_int_equal(plait_model_set_batch(st1.model, slot, NULL, tgt + slot * n), PLAIT_OK);
        for (int32_t l = 0; l <= 2; l++) assert_int_equal(plait_model_forward_layer(st0.model, l, slot), PLAIT_OK);
        float *in = plait_model_boundary(st1.model, slot, 2);
        assert_non_null(in);
        memcpy(in, plait_model_boundary(st0.model, slot, 2), nb * sizeof(float));
        assert_int_equal(plait_model_boundary_store(st1.model, slot, 2), PLAIT_OK);
    }
    for (int32_t slot = 0; slot < 2; slot++) {
        for (int32_t l = 3; l <= 5; l++) assert_int_equal(plait_model_forward_layer(st1.model, l, slot), PLAIT_OK);
        assert_true(plait_model_loss_sum(st1.model, slot) == loss[slot]);
        for (int32_t l = 5; l >= 3; l--) assert_int_equal(plait_model_backward_layer(st1.model, l, slot), PLAIT_OK);
        memcpy(plait_model_boundary_grad(st0.model, slot, 2), plait_model_boundary_grad(st1.model, slot, 2),
               nb * sizeof(float));
        for (int32_t l = 2; l >= 0; l--) assert_int_equal(plait_model_backward_layer(st0.model, l, slot), PLAIT_OK);
    }
    for (int32_t i = 0; i < full.set.n_params; i++) {
        const plait_param *f = &full.params[i];
        const plait_param *p = f->layer <= 2 ? &st0.params[i] : &st1.params[i];
        assert_memory_equal(p->grad, f->grad, f->numel * sizeof(float));
    }
    /* the float32 stream's stage 1, its slots used as st1's */
    for (int32_t slot = 0; slot < 2; slot++) {
        assert_int_equal(plait_model_set_batch(f32.model, slot, NULL, tgt + slot * n), PLAIT_OK);
        memcpy(plait_model_boundary(f32.model, slot, 2), plait_model_boundary(st0.model, slot, 2), nb * sizeof(float));
        for (int32_t l = 3; l <= 5; l++) assert_int_equal(plait_model_forward_layer(f32.model, l, slot), PLAIT_OK);
        for (int32_t l = 5; l >= 3; l--) assert_int_equal(plait_model_backward_layer(f32.model, l, slot), PLAIT_OK);
    }
    const uint64_t fb = (uint64_t)nb * sizeof(float); /* nb: a multiple of the slots' alignment */
    printf("stage 1's activation bytes: float32 stream %llu, bf16 stream %llu\n",
           (unsigned long long)plait_model_activation_bytes(f32.model),
           (unsigned long long)plait_model_activation_bytes(st1.model));
    assert_true(plait_model_activation_bytes(st1.model) + 2 * 3 * fb / 2 ==
                plait_model_activation_bytes(f32.model) + 2 * fb);
    free(tok);
    free(tgt);
    harness_free(&full);
    harness_free(&st0);
    harness_free(&st1);
    harness_free(&f32);
}

static void test_no_float32_logits(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .kernels = bf16_table(), .activations_bf16 = 1};
    assert_int_equal(harness_init_ex(&h, GPT_INI, 2, &o), 0);
    assert_true(plait_model_bf16_activations(h.model));
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t *tok = malloc(n * sizeof *tok);
    harness_tokens(tok, n, h.V, 7);
    assert_int_equal(harness_step(&h, tok, NULL), PLAIT_ERR_INVALID_ARG); /* no targets */
    assert_non_null(strstr(plait_last_error(), "bf16 activations"));
    assert_int_equal(harness_forward(&h, tok, tok), PLAIT_ERR_INVALID_ARG); /* logits kept */
    assert_non_null(strstr(plait_last_error(), "plait_model_keep_logits"));
    assert_int_equal(harness_step(&h, tok, tok), PLAIT_OK);
    free(tok);
    harness_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trains_as_float32),
        cmocka_unit_test(test_selective),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_head_in_chunks),
        cmocka_unit_test(test_forward_only),
        cmocka_unit_test(test_layernorm_writes_the_copy),
        cmocka_unit_test(test_boundary_write_drops_the_copy),
        cmocka_unit_test(test_head_forward_drops_the_copy),
        cmocka_unit_test(test_copy_only_where_read),
        cmocka_unit_test(test_split_backward),
        cmocka_unit_test(test_split_input_adds_no_gradient),
        cmocka_unit_test(test_copy_per_layer),
        cmocka_unit_test(test_granted_only_where_whole),
        cmocka_unit_test(test_residual_needs_widening),
        cmocka_unit_test(test_no_float32_logits),
        cmocka_unit_test(test_received_boundary_in_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
