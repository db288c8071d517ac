/*
 * Running the model: bit-identical results with 1, 2, 3 and 8 math threads;
 * tensor parallelism of the gpt, mlp and llama archs (tp = 2, 4 "ranks" as threads with an in-process
 * all-reduce) against the unsharded model, layer by layer (every layer's
 * output and the gradient reaching it, the logits of the vocab-parallel
 * head with a vocabulary of 37, divisible by neither 2 nor 4, the loss of
 * the vocab-parallel cross-entropy, and every parameter's gradient); a two-stage pipeline split
 * through the boundary buffers (bit-identical to one stage); sequence
 * parallelism against tp alone; bf16 activations under tp and sequence
 * parallelism against float32 (the bf16 entries' CPU references standing
 * in for a device's); slots; and the API's error paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/kref_bf16.h"
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

/* ---- tensor parallelism with threads as ranks --------------------------- */

#define MAX_TP 4

typedef struct tp_group {
    int n;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int arrived;
    uint64_t generation;
    float *bufs[MAX_TP];
} tp_group;

typedef struct tp_rank {
    tp_group *g;
    int rank;
    plait_tp_ops ops;
    uint64_t calls;
} tp_rank;

/* Barrier with a deadline: a rank that never arrives fails the test
 * instead of hanging it. */
static plait_status group_barrier(tp_group *g) {
    pthread_mutex_lock(&g->lock);
    uint64_t gen = g->generation;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cond);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 30;
        while (g->generation == gen)
            if (pthread_cond_timedwait(&g->cond, &g->lock, &until) == ETIMEDOUT) {
                pthread_mutex_unlock(&g->lock);
                return plait_set_error(PLAIT_ERR_TIMEOUT, "test tp group: barrier timed out");
            }
    }
    pthread_mutex_unlock(&g->lock);
    return PLAIT_OK;
}

/* In-place all-reduce: every rank combines all buffers in rank order. */
static plait_status group_allreduce(void *ctx, float *x, size_t count, int is_max) {
    tp_rank *r = ctx;
    tp_group *g = r->g;
    r->calls++;
    g->bufs[r->rank] = x;
    plait_status st = group_barrier(g);
    if (st != PLAIT_OK) return st;
    float *tmp = malloc((count ? count : 1) * sizeof *tmp);
    if (!tmp) return plait_set_error(PLAIT_ERR_NO_MEMORY, "test tp group");
    for (size_t i = 0; i < count; i++) {
        float acc = g->bufs[0][i];
        for (int k = 1; k < g->n; k++)
            acc = is_max ? (g->bufs[k][i] > acc ? g->bufs[k][i] : acc) : acc + g->bufs[k][i];
        tmp[i] = acc;
    }
    st = group_barrier(g); /* everyone has read every buffer */
    memcpy(x, tmp, count * sizeof *tmp);
    free(tmp);
    return st;
}

static plait_status op_sum(void *ctx, float *x, size_t n) { return group_allreduce(ctx, x, n, 0); }
static plait_status op_max(void *ctx, float *x, size_t n) { return group_allreduce(ctx, x, n, 1); }

/* Sequence parallelism's collectives: the all-gather copies every rank's
 * block in rank order; the reduce-scatter sums this rank's block of every
 * rank's buffer in rank order, as group_allreduce sums every element (so
 * the same bits). Both block; `req` is always left NULL. */
static plait_status op_allgather(void *ctx, const float *local, float *full, size_t count, void **req) {
    tp_rank *r = ctx;
    tp_group *g = r->g;
    if (req) *req = NULL;
    r->calls++;
    g->bufs[r->rank] = (float *)(uintptr_t)local;
    plait_status st = group_barrier(g);
    if (st != PLAIT_OK) return st;
    for (int k = 0; k < g->n; k++) memcpy(full + (size_t)k * count, g->bufs[k], count * sizeof *full);
    return group_barrier(g);
}

static plait_status op_reduce_scatter(void *ctx, const float *full, float *local, size_t count, void **req) {
    tp_rank *r = ctx;
    tp_group *g = r->g;
    if (req) *req = NULL;
    r->calls++;
    g->bufs[r->rank] = (float *)(uintptr_t)full;
    plait_status st = group_barrier(g);
    if (st != PLAIT_OK) return st;
    const size_t at = (size_t)r->rank * count;
    for (size_t i = 0; i < count; i++) {
        float acc = g->bufs[0][at + i];
        for (int k = 1; k < g->n; k++) acc += g->bufs[k][at + i];
        local[i] = acc;
    }
    return group_barrier(g);
}

static plait_status op_wait(void *ctx, void *req) {
    (void)ctx;
    return req ? plait_set_error(PLAIT_ERR_INTERNAL, "test tp group: no request was handed out") : PLAIT_OK;
}

/* The TP operators of rank `r`, with sequence parallelism or without. */
static plait_tp_ops group_ops(tp_rank *r, int sequence_parallel) {
    return (plait_tp_ops){.struct_size = sizeof(plait_tp_ops),
                          .ctx = r,
                          .enter_backward = op_sum,
                          .exit_forward = op_sum,
                          .reduce_max = op_max,
                          .reduce_sum = op_sum,
                          .sequence_parallel = sequence_parallel,
                          .allgather = op_allgather,
                          .reduce_scatter = op_reduce_scatter,
                          .wait = op_wait};
}

typedef struct tp_job {
    harness *h;
    int32_t *tok, *tgt;
    plait_status st;
    char err[512];
    double loss;
    float *logits;
    /* Per layer l = 0 .. n_layers-2 (every layer with a residual-stream
     * output): its output after the forward, and the gradient of that output
     * as the backward of layer l+1 leaves it (the input gradient of l+1).
     * [B,T,C] each, full on every TP rank. */
    float *outs, *out_grads;
    int split; /* the backward in halves: input, then weight, layer by layer */
} tp_job;

/* Forward of every layer, keeping each layer's output (run_backward keeps
 * each layer's output gradient), so every layer is compared on its own. */
static plait_status run_layers(harness *h, const int32_t *tok, const int32_t *tgt, float *outs) {
    plait_model *m = h->model;
    size_t btc = plait_model_boundary_numel(m);
    int32_t nl = h->spec->n_layers;
    plait_model_keep_logits(m, 1); /* compared below */
    plait_status st = plait_model_set_batch(m, 0, tok, tgt);
    for (int32_t l = 0; st == PLAIT_OK && l < nl; l++) {
        st = plait_model_forward_layer(m, l, 0);
        const float *b = l < nl - 1 ? plait_model_boundary(m, 0, l) : NULL;
        if (st == PLAIT_OK && b) memcpy(outs + (size_t)l * btc, b, btc * sizeof(float));
    }
    return st;
}

static plait_status run_backward_ex(harness *h, float *out_grads, int split) {
    plait_model *m = h->model;
    size_t btc = plait_model_boundary_numel(m);
    plait_status st = PLAIT_OK;
    for (int32_t l = h->spec->n_layers - 1; st == PLAIT_OK && l >= 0; l--) {
        if (split) {
            st = plait_model_backward_input(m, l, 0);
            if (st == PLAIT_OK) st = plait_model_backward_weight(m, l, 0);
        } else {
            st = plait_model_backward_layer(m, l, 0);
        }
        const float *g = l > 0 ? plait_model_boundary_grad(m, 0, l - 1) : NULL;
        if (st == PLAIT_OK && g) memcpy(out_grads + (size_t)(l - 1) * btc, g, btc * sizeof(float));
    }
    return st;
}

static plait_status run_backward(harness *h, float *out_grads) { return run_backward_ex(h, out_grads, 0); }

static void *tp_thread(void *arg) {
    tp_job *j = arg;
    j->st = run_layers(j->h, j->tok, j->tgt, j->outs);
    if (j->st == PLAIT_OK) {
        j->loss = plait_model_loss_sum(j->h->model, 0);
        size_t n = (size_t)j->h->B * (size_t)j->h->T * (size_t)j->h->model->Vl;
        j->logits = malloc(n * sizeof(float));
        memcpy(j->logits, plait_model_logits(j->h->model, 0), n * sizeof(float));
    }
    if (j->st == PLAIT_OK) j->st = run_backward_ex(j->h, j->out_grads, j->split);
    if (j->st != PLAIT_OK) snprintf(j->err, sizeof j->err, "%s", plait_last_error());
    kref_bf16_release(); /* this thread's scratch, where a bf16 model used the references */
    return NULL;
}

static void expect_near(const char *what, int rank, float got, double want, double scale) {
    if (fabs((double)got - want) > 2e-5 * fabs(want) + 2e-6 * scale)
        fail_msg("tp rank %d: %s is %.9g, unsharded %.9g", rank, what, (double)got, want);
}

/* Residual-stream tensors of every layer against the unsharded model's. */
static void expect_layers(const char *what, int rank, const float *got, const float *want, size_t btc,
                          int32_t n_layers) {
    for (int32_t l = 0; l < n_layers - 1; l++) {
        const float *g = got + (size_t)l * btc, *w = want + (size_t)l * btc;
        double scale = 0;
        for (size_t k = 0; k < btc; k++) scale = fmax(scale, fabs(w[k]));
        assert_true(scale > 0); /* the layer produced something to compare */
        char name[64];
        snprintf(name, sizeof name, "%s of layer %d", what, (int)l);
        for (size_t k = 0; k < btc; k++) expect_near(name, rank, g[k], w[k], scale);
    }
}


static void check_tp(const char *ini, int tp) {
    plait_kernels_set_threads(1);
    harness full;
    const int32_t B = 2;
    assert_int_equal(harness_init(&full, ini, B, 1, 0, NULL), 0);
    size_t n = (size_t)B * (size_t)full.T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    harness_tokens(tok, n, full.V, 21);
    harness_tokens(tgt, n, full.V, 22);
    const int32_t nl = full.spec->n_layers;
    const size_t btc = plait_model_boundary_numel(full.model);
    float *ref_outs = calloc((size_t)nl * btc, sizeof(float)), *ref_out_grads = calloc((size_t)nl * btc, sizeof(float));
    assert_int_equal(run_layers(&full, tok, tgt, ref_outs), PLAIT_OK);
    const int64_t V = full.V;
    float *ref_logits = malloc(n * (size_t)V * sizeof(float));
    memcpy(ref_logits, plait_model_logits(full.model, 0), n * (size_t)V * sizeof(float));
    double ref_loss = plait_model_loss_sum(full.model, 0);
    assert_int_equal(run_backward(&full, ref_out_grads), PLAIT_OK);

    tp_group g = {.n = tp};
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.cond, NULL);
    tp_rank ranks[MAX_TP];
    harness hs[MAX_TP];
    tp_job jobs[MAX_TP];
    pthread_t th[MAX_TP];
    for (int r = 0; r < tp; r++) {
        ranks[r] = (tp_rank){&g, r, group_ops(&ranks[r], 0), 0};
        assert_int_equal(harness_init(&hs[r], ini, B, tp, r, &ranks[r].ops), 0);
        jobs[r] = (tp_job){&hs[r],
                           tok,
                           tgt,
                           PLAIT_OK,
                           "",
                           0,
                           NULL,
                           calloc((size_t)nl * btc, sizeof(float)),
                           calloc((size_t)nl * btc, sizeof(float)),
                           0};
    }
    for (int r = 0; r < tp; r++) assert_int_equal(pthread_create(&th[r], NULL, tp_thread, &jobs[r]), 0);
    for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < tp; r++)
        if (jobs[r].st != PLAIT_OK) fail_msg("tp rank %d: %s", r, jobs[r].err);

    for (int r = 0; r < tp; r++) {
        harness *h = &hs[r];
        plait_model *m = h->model;
        assert_int_equal(m->tp, tp);
        assert_int_equal(m->tp_rank, r);
        assert_true(ranks[r].calls > 0);
        if (fabs(jobs[r].loss - ref_loss) > 1e-5 * fabs(ref_loss))
            fail_msg("tp rank %d: loss %.9g, unsharded %.9g", r, jobs[r].loss, ref_loss);
        /* this rank's logit columns; vocabulary padding gives 0 */
        int64_t Vl = m->Vl;
        for (size_t t = 0; t < n; t++)
            for (int64_t j = 0; j < Vl; j++) {
                int64_t gcol = r * Vl + j;
                float got = jobs[r].logits[t * (size_t)Vl + (size_t)j];
                if (gcol >= V)
                    assert_true(got == 0.0f);
                else
                    expect_near("logit", r, got, ref_logits[t * (size_t)V + (size_t)gcol], 1.0);
            }
        /* each layer's output (forward) and the gradient reaching it (backward) */
        expect_layers("output", r, jobs[r].outs, ref_outs, btc, nl);
        expect_layers("output gradient", r, jobs[r].out_grads, ref_out_grads, btc, nl);
        free(jobs[r].outs);
        free(jobs[r].out_grads);
        /* every local gradient element against the unsharded one */
        for (int32_t i = 0; i < h->set.n_params; i++) {
            const plait_param *p = &h->params[i], *fp = &full.params[i];
            double scale = 0;
            for (size_t k = 0; k < fp->numel; k++) scale = fmax(scale, fabs(fp->grad[k]));
            for (size_t k = 0; k < p->numel; k++) {
                int64_t gk = plait_shard_global_index(p, k);
                if (gk < 0)
                    assert_true(p->grad[k] == 0.0f);
                else
                    expect_near(p->name, r, p->grad[k], fp->grad[gk], scale);
            }
        }
        free(jobs[r].logits);
        harness_free(h);
    }
    pthread_mutex_destroy(&g.lock);
    pthread_cond_destroy(&g.cond);
    free(ref_logits);
    free(ref_outs);
    free(ref_out_grads);
    free(tok);
    free(tgt);
    harness_free(&full);
}

/* vocabulary 37 is divisible by neither 2 nor 4: padded slices */
static const char *TP_GPT_INI = "[run]\nseed = 9\n[model]\nn_layer = 2\nn_head = 4\nn_embd = 16\n"
                                "block_size = 9\nvocab_size = 37\n";
static const char *TP_MLP_INI = "[run]\nseed = 9\n[model]\narch = mlp\nn_layer = 2\nn_embd = 16\n"
                                "block_size = 9\nvocab_size = 37\n";

static void test_tp2_gpt(void **state) {
    (void)state;
    check_tp(TP_GPT_INI, 2);
}

static void test_tp4_gpt(void **state) {
    (void)state;
    check_tp(TP_GPT_INI, 4);
}

/* the llama arch: two query heads a key/value head, whole groups per rank */
static const char *TP_LLAMA_INI = "[run]\nseed = 9\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
                                  "n_embd = 16\nffn_hidden = 24\nblock_size = 9\nvocab_size = 37\n";
static const char *TP4_LLAMA_INI = "[run]\nseed = 9\n[model]\narch = llama\nn_layer = 2\nn_head = 8\nn_kv_head = 4\n"
                                   "n_embd = 32\nffn_hidden = 48\nblock_size = 9\nvocab_size = 37\n";

static void test_tp2_llama(void **state) {
    (void)state;
    check_tp(TP_LLAMA_INI, 2);
}

static void test_tp4_llama(void **state) {
    (void)state;
    check_tp(TP4_LLAMA_INI, 4);
}

static void test_tp2_mlp(void **state) {
    (void)state;
    check_tp(TP_MLP_INI, 2);
}

/* ---- sequence parallelism ------------------------------------------------ */

/* tp ranks as threads running one micro-batch's forward and backward,
 * with or without sequence parallelism; kept for the caller to compare. */
typedef struct tp_run {
    tp_group g;
    tp_rank ranks[MAX_TP];
    harness hs[MAX_TP];
    tp_job jobs[MAX_TP];
    int tp;
} tp_run;

/* k: the kernels of a model with bf16 activations, or NULL (float32). */
static void tp_run_go(tp_run *t, const char *ini, int tp, int sp, int split, const plait_kernels *k, int32_t B,
                      int32_t *tok, int32_t *tgt) {
    t->tp = tp;
    t->g.n = tp;
    pthread_mutex_init(&t->g.lock, NULL);
    pthread_cond_init(&t->g.cond, NULL);
    pthread_t th[MAX_TP];
    for (int r = 0; r < tp; r++) {
        t->ranks[r] = (tp_rank){&t->g, r, group_ops(&t->ranks[r], sp), 0};
        harness_opts o = {.tp = tp,
                          .tp_rank = r,
                          .ops = &t->ranks[r].ops,
                          .max_slots = 1,
                          .split_backward = split,
                          .kernels = k,
                          .activations_bf16 = k != NULL};
        assert_int_equal(harness_init_ex(&t->hs[r], ini, B, &o), 0);
        const size_t nl = (size_t)t->hs[r].spec->n_layers, btc = plait_model_boundary_numel(t->hs[r].model);
        t->jobs[r] = (tp_job){&t->hs[r],
                              tok,
                              tgt,
                              PLAIT_OK,
                              "",
                              0,
                              NULL,
                              calloc(nl * btc, sizeof(float)),
                              calloc(nl * btc, sizeof(float)),
                              split};
    }
    for (int r = 0; r < tp; r++) assert_int_equal(pthread_create(&th[r], NULL, tp_thread, &t->jobs[r]), 0);
    for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < tp; r++)
        if (t->jobs[r].st != PLAIT_OK) fail_msg("tp rank %d (sequence parallel %d): %s", r, sp, t->jobs[r].err);
}

static void tp_run_free(tp_run *t) {
    for (int r = 0; r < t->tp; r++) {
        free(t->jobs[r].outs);
        free(t->jobs[r].out_grads);
        free(t->jobs[r].logits);
        harness_free(&t->hs[r]);
    }
    pthread_mutex_destroy(&t->g.lock);
    pthread_cond_destroy(&t->g.cond);
}

/* A norm's parameter: under sequence parallelism each rank sums its rows'
 * share of the gradient and an all-reduce adds the shares, a different
 * order of additions than one sum over every row. */
static int is_norm(const char *name) { return strstr(name, "ln_") || strstr(name, "norm"); }

/* The CPU's kernels with the bf16 entries' references (tests/device/
 * kref_bf16.c) standing in for a device's. */
static const plait_kernels *bf16_kernels(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    kref_bf16_fill(&k);
    return &k;
}

/* Sequence-parallel tp against tp alone, rank by rank, both with kernels
 * kern (NULL: the CPU's float32 ones; bf16_kernels: bf16 activations): the
 * loss, the logits, every layer's output and input gradient (this rank's
 * rows of them) and every gradient but the norms' bit for bit; the norms'
 * gradients within 1e-6 of their largest element; and less activation
 * memory. */
static void check_sequence_parallel_k(const char *ini, int tp, int split, const plait_kernels *kern) {
    plait_kernels_set_threads(1);
    const int32_t B = 2;
    harness probe;
    assert_int_equal(harness_init(&probe, ini, B, 1, 0, NULL), 0);
    const size_t n = (size_t)B * (size_t)probe.T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    harness_tokens(tok, n, probe.V, 31);
    harness_tokens(tgt, n, probe.V, 32);
    harness_free(&probe);
    tp_run *plain = calloc(1, sizeof *plain), *seq = calloc(1, sizeof *seq);
    tp_run_go(plain, ini, tp, 0, split, kern, B, tok, tgt);
    tp_run_go(seq, ini, tp, 1, split, kern, B, tok, tgt);
    for (int r = 0; r < tp; r++) {
        plait_model *ma = plain->hs[r].model, *mb = seq->hs[r].model;
        const tp_job *ja = &plain->jobs[r], *jb = &seq->jobs[r];
        assert_int_equal(ma->sp, 0);
        assert_int_equal(mb->sp, 1);
        assert_int_equal(plait_model_bf16_activations(mb), kern != NULL);
        assert_int_equal(mb->R * tp, (int64_t)n);
        const size_t btc = plait_model_boundary_numel(ma), rc = plait_model_boundary_numel(mb);
        assert_int_equal(rc * (size_t)tp, btc);
        if (memcmp(&ja->loss, &jb->loss, sizeof ja->loss) != 0)
            fail_msg("tp rank %d: loss %.17g with sequence parallelism, %.17g without", r, jb->loss, ja->loss);
        assert_memory_equal(jb->logits, ja->logits, n * (size_t)ma->Vl * sizeof(float));
        for (int32_t l = 0; l < plain->hs[r].spec->n_layers - 1; l++) {
            const size_t at = (size_t)l * btc + (size_t)mb->row0 * (size_t)mb->C;
            if (memcmp(jb->outs + (size_t)l * rc, ja->outs + at, rc * sizeof(float)) != 0)
                fail_msg("tp rank %d: layer %d's output differs with sequence parallelism", r, (int)l);
            if (memcmp(jb->out_grads + (size_t)l * rc, ja->out_grads + at, rc * sizeof(float)) != 0)
                fail_msg("tp rank %d: the gradient of layer %d's output differs with sequence parallelism", r, (int)l);
        }
        int norms = 0;
        for (int32_t i = 0; i < plain->hs[r].set.n_params; i++) {
            const plait_param *pa = &plain->hs[r].params[i], *pb = &seq->hs[r].params[i];
            if (!is_norm(pa->name)) {
                if (memcmp(pb->grad, pa->grad, pa->numel * sizeof(float)) != 0)
                    fail_msg("tp rank %d: the gradient of %s differs with sequence parallelism", r, pa->name);
                continue;
            }
            norms++;
            double scale = 0, worst = 0;
            for (size_t k = 0; k < pa->numel; k++) scale = fmax(scale, fabs(pa->grad[k]));
            for (size_t k = 0; k < pa->numel; k++) worst = fmax(worst, fabs((double)pb->grad[k] - pa->grad[k]));
            assert_true(scale > 0);
            if (worst > 1e-6 * scale)
                fail_msg("tp rank %d: the gradient of %s is %.3g off (of %.3g) with sequence parallelism", r, pa->name,
                         worst, scale);
        }
        assert_true(norms > 0);
        assert_true(plait_model_activation_bytes(mb) < plait_model_activation_bytes(ma));
    }
    tp_run_free(plain);
    tp_run_free(seq);
    free(plain);
    free(seq);
    free(tok);
    free(tgt);
}

static void check_sequence_parallel(const char *ini, int tp, int split) {
    check_sequence_parallel_k(ini, tp, split, NULL);
}

/* block_size 8: divisible by 2 and 4; the vocabulary padded as above */
#define SP_MODEL "[run]\nseed = 9\n[model]\nblock_size = 8\nvocab_size = 37\nn_layer = 2\n"
#define SP_GPT_INI SP_MODEL "n_head = 4\nn_embd = 16\n"
#define SP_LLAMA_INI SP_MODEL "arch = llama\nn_head = 4\nn_kv_head = 2\nn_embd = 16\nffn_hidden = 24\n"
#define SP4_LLAMA_INI SP_MODEL "arch = llama\nn_head = 8\nn_kv_head = 4\nn_embd = 32\nffn_hidden = 48\n"

static void test_sp_gpt(void **state) {
    (void)state;
    check_sequence_parallel(SP_GPT_INI, 2, 0);
    check_sequence_parallel(SP_GPT_INI, 4, 0);
    check_sequence_parallel(SP_GPT_INI, 2, 1); /* zero-bubble schedules' halves */
    check_sequence_parallel(SP_GPT_INI "recompute = selective\n", 2, 0);
    check_sequence_parallel(SP_GPT_INI "recompute = full\n", 2, 1);
    check_sequence_parallel(SP_MODEL "arch = mlp\nn_embd = 16\n", 2, 0);
}

/* Under bf16 activations too: the slot keeps the norms' bf16 rows, and
 * what they gather is what one tp rank without sequence parallelism
 * computes, in every recompute mode. */
static void test_sp_gpt_bf16(void **state) {
    (void)state;
    check_sequence_parallel_k(SP_GPT_INI, 2, 0, bf16_kernels());
    check_sequence_parallel_k(SP_GPT_INI, 4, 0, bf16_kernels());
    check_sequence_parallel_k(SP_GPT_INI, 2, 1, bf16_kernels());
    check_sequence_parallel_k(SP_GPT_INI "recompute = selective\n", 2, 0, bf16_kernels());
    check_sequence_parallel_k(SP_GPT_INI "recompute = full\n", 2, 1, bf16_kernels());
}

/* ---- bf16 activations under tensor parallelism --------------------------- */

/* sqrt(Σ(x - y)²  / Σ y²) over n pairs, accumulated into *d and *w. */
static void add_dev(const float *x, const float *y, size_t n, double *d, double *w) {
    for (size_t i = 0; i < n; i++) {
        *d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        *w += (double)y[i] * y[i];
    }
}

/* A bf16 model under tp (with sequence parallelism or without; one pass
 * or split) against the float32 one of the same layout, rank by rank: it
 * stores bf16 activations, its loss is within 1e-2 (and rounded: not
 * equal), every layer's output and input gradient and its parameters'
 * gradients within 5e-2 norm-wise (bf16's 2^-8 rounding of every stored
 * activation and of the products' input gradients before the group sums
 * them, a few layers deep; the one-rank bf16 model's bound,
 * test_bf16_activations), in less activation memory. */
static void check_bf16_tp(const char *ini, int tp, int sp, int split) {
    plait_kernels_set_threads(1);
    const int32_t B = 2;
    harness probe;
    assert_int_equal(harness_init(&probe, ini, B, 1, 0, NULL), 0);
    const size_t n = (size_t)B * (size_t)probe.T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    harness_tokens(tok, n, probe.V, 41);
    harness_tokens(tgt, n, probe.V, 42);
    harness_free(&probe);
    tp_run *f32 = calloc(1, sizeof *f32), *bf = calloc(1, sizeof *bf);
    tp_run_go(f32, ini, tp, sp, split, NULL, B, tok, tgt);
    tp_run_go(bf, ini, tp, sp, split, bf16_kernels(), B, tok, tgt);
    for (int r = 0; r < tp; r++) {
        plait_model *ma = f32->hs[r].model, *mb = bf->hs[r].model;
        const tp_job *ja = &f32->jobs[r], *jb = &bf->jobs[r];
        assert_false(plait_model_bf16_activations(ma));
        assert_true(plait_model_bf16_activations(mb));
        const double dl = fabs(jb->loss - ja->loss) / fabs(ja->loss);
        double dout = 0, wout = 0, dgrad = 0, wgrad = 0, dp = 0, wp = 0;
        const size_t rc = plait_model_boundary_numel(ma) * (size_t)(f32->hs[r].spec->n_layers - 1);
        add_dev(jb->outs, ja->outs, rc, &dout, &wout);
        add_dev(jb->out_grads, ja->out_grads, rc, &dgrad, &wgrad);
        for (int32_t i = 0; i < f32->hs[r].set.n_params; i++)
            add_dev(bf->hs[r].params[i].grad, f32->hs[r].params[i].grad, f32->hs[r].params[i].numel, &dp, &wp);
        printf("bf16 tp %d rank %d (sequence parallel %d, split %d) against float32: loss within %.2e, outputs "
               "%.2e, their gradients %.2e, the parameters' gradients %.2e; activations %llu bytes of %llu\n",
               tp, r, sp, split, dl, sqrt(dout / wout), sqrt(dgrad / wgrad), sqrt(dp / wp),
               (unsigned long long)plait_model_activation_bytes(mb),
               (unsigned long long)plait_model_activation_bytes(ma));
        assert_true(dl <= 1e-2);
        assert_true(dl > 0);
        assert_true(sqrt(dout / wout) <= 5e-2);
        assert_true(sqrt(dgrad / wgrad) <= 5e-2);
        assert_true(sqrt(dp / wp) <= 5e-2);
        assert_true(plait_model_activation_bytes(mb) < plait_model_activation_bytes(ma));
    }
    tp_run_free(f32);
    tp_run_free(bf);
    free(f32);
    free(bf);
    free(tok);
    free(tgt);
}

/* tp 2 and 4, sequence parallelism or not, one pass and split, every recompute mode */
static void test_bf16_tp_gpt(void **state) {
    (void)state;
    for (int sp = 0; sp <= 1; sp++) {
        check_bf16_tp(SP_GPT_INI, 2, sp, 0);
        check_bf16_tp(SP_GPT_INI, 4, sp, 0);
        check_bf16_tp(SP_GPT_INI, 2, sp, 1); /* zero-bubble schedules' halves */
        check_bf16_tp(SP_GPT_INI "recompute = selective\n", 2, sp, 0);
        check_bf16_tp(SP_GPT_INI "recompute = full\n", 2, sp, 1);
    }
}

static void test_sp_llama(void **state) {
    (void)state;
    check_sequence_parallel(SP_LLAMA_INI, 2, 0);
    check_sequence_parallel(SP4_LLAMA_INI, 4, 0);
    check_sequence_parallel(SP_LLAMA_INI, 2, 1);
    check_sequence_parallel(SP_LLAMA_INI "recompute = selective\n", 2, 0);
    check_sequence_parallel(SP4_LLAMA_INI "recompute = full\n", 4, 1);
}

/* ---- pipeline split through boundary buffers ---------------------------- */

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

/* A slot restricted to a model chunk (interleaved schedules) holds only
 * that chunk's activations, computes the same bits, and refuses layers
 * outside its range. */
static void test_slot_layers(void **state) {
    (void)state;
    harness h;
    harness_opts o = {.tp = 1, .max_slots = 2};
    assert_int_equal(harness_init_ex(&h, TP_GPT_INI, 1, &o), 0);
    plait_model *m = h.model;
    int32_t tok[9] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    assert_int_equal(plait_model_set_batch(m, 0, tok, tok), PLAIT_OK);
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
        cmocka_unit_test(test_threads_gpt), cmocka_unit_test(test_threads_mlp),
        cmocka_unit_test(test_tp2_gpt),     cmocka_unit_test(test_tp4_gpt),
        cmocka_unit_test(test_tp2_mlp),     cmocka_unit_test(test_tp2_llama),
        cmocka_unit_test(test_tp4_llama),   cmocka_unit_test(test_pipeline_split),
        cmocka_unit_test(test_slot_layers), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fused_loss),  cmocka_unit_test(test_fused_layernorm),
        cmocka_unit_test(test_fused_gelu),  cmocka_unit_test(test_sp_gpt),
        cmocka_unit_test(test_sp_gpt_bf16), cmocka_unit_test(test_sp_llama),
        cmocka_unit_test(test_bf16_tp_gpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
