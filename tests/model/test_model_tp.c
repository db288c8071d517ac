/*
 * Tensor and sequence parallelism of the model's bodies, with tp = 2 and 4
 * "ranks" as threads and in-process collectives, against the unsharded
 * model: the gpt, mlp and llama archs layer by layer (every layer's output
 * and the gradient reaching it, the logits of the vocab-parallel head with
 * a vocabulary of 37, divisible by neither 2 nor 4, the loss of the
 * vocab-parallel cross-entropy, and every parameter's gradient); sequence
 * parallelism against tp alone; bf16 activations under tp and sequence
 * parallelism against float32 (the bf16 entries' CPU references standing
 * in for a device's).
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
    /* overlap_input_grads: a started reduction is only recorded, and runs
     * when the model waits for it (so a model that read or wrote its
     * buffers in between would see other values); deferred counts them */
    int overlap, pending; /* pending: 0, 1 an all-reduce, 2 a reduce-scatter, 3 an all-gather */
    float *p_x;
    const float *p_full;
    size_t p_count;
    uint64_t deferred, gathers; /* the sums started, the all-gathers started */
} tp_rank;

/* No tensor-parallel call may come while a reduction is in flight
 * (plait_tp_ops.overlap_input_grads). */
static plait_status in_flight(const tp_rank *r) {
    return r->pending ? plait_set_error(PLAIT_ERR_INTERNAL,
                                        "test tp group: a tensor-parallel call while a reduction is in flight")
                      : PLAIT_OK;
}

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
    if (in_flight(r) != PLAIT_OK) return PLAIT_ERR_INTERNAL;
    r->calls++;
    g->bufs[r->rank] = x;
    plait_status st = group_barrier(g);
    if (st != PLAIT_OK) return st;
    float *tmp = malloc((count ? count : 1) * sizeof *tmp);
    if (!tmp) return plait_set_error(PLAIT_ERR_NO_MEMORY, "test tp group");
    for (size_t i = 0; i < count; i++) {
        float acc = g->bufs[0][i];
        for (int k = 1; k < g->n; k++) acc = is_max ? (g->bufs[k][i] > acc ? g->bufs[k][i] : acc) : acc + g->bufs[k][i];
        tmp[i] = acc;
    }
    st = group_barrier(g); /* everyone has read every buffer */
    memcpy(x, tmp, count * sizeof *tmp);
    free(tmp);
    return st;
}

static plait_status op_sum(void *ctx, float *x, size_t n) { return group_allreduce(ctx, x, n, 0); }
static plait_status op_max(void *ctx, float *x, size_t n) { return group_allreduce(ctx, x, n, 1); }

/* A started collective recorded for op_wait: `kind` as tp_rank.pending,
 * x the buffer it writes, in the one it reads. */
static plait_status defer(tp_rank *r, int kind, float *x, const float *in, size_t count, void **req) {
    r->pending = kind;
    r->p_x = x;
    r->p_full = in;
    r->p_count = count;
    if (kind == 3) r->gathers++;
    else r->deferred++;
    *req = r;
    return PLAIT_OK;
}

/* Sequence parallelism's collectives: the all-gather copies every rank's
 * block in rank order; the reduce-scatter sums this rank's block of every
 * rank's buffer in rank order, as group_allreduce sums every element (so
 * the same bits). Started with a request where r->overlap, each is only
 * recorded and runs at op_wait, as f's all-reduce. */
static plait_status op_allgather(void *ctx, const float *local, float *full, size_t count, void **req) {
    tp_rank *r = ctx;
    tp_group *g = r->g;
    if (req) *req = NULL;
    if (in_flight(r) != PLAIT_OK) return PLAIT_ERR_INTERNAL;
    if (req && r->overlap) return defer(r, 3, full, local, count, req);
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
    if (in_flight(r) != PLAIT_OK) return PLAIT_ERR_INTERNAL;
    if (req && r->overlap) return defer(r, 2, local, full, count, req);
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

/* f's all-reduce started: recorded for op_wait where r->overlap. */
static plait_status op_sum_start(void *ctx, float *x, size_t n, void **req) {
    tp_rank *r = ctx;
    if (req) *req = NULL;
    if (!req || !r->overlap) return op_sum(ctx, x, n);
    if (in_flight(r) != PLAIT_OK) return PLAIT_ERR_INTERNAL;
    return defer(r, 1, x, x, n, req);
}

/* Runs the recorded reduction (every rank waits in the same order). */
static plait_status op_wait(void *ctx, void *req) {
    tp_rank *r = ctx;
    if (!req) return PLAIT_OK;
    if (req != r || !r->pending) return plait_set_error(PLAIT_ERR_INTERNAL, "test tp group: no such request");
    const int kind = r->pending;
    r->pending = 0;
    return kind == 1   ? op_sum(r, r->p_x, r->p_count)
           : kind == 2 ? op_reduce_scatter(r, r->p_full, r->p_x, r->p_count, NULL)
                       : op_allgather(r, r->p_full, r->p_x, r->p_count, NULL);
}

/* The TP operators of rank `r`, with sequence parallelism or without,
 * overlapping the backward's input-gradient sums or not. */
static plait_tp_ops group_ops(tp_rank *r, int sequence_parallel, int overlap) {
    r->overlap = overlap;
    return (plait_tp_ops){.struct_size = sizeof(plait_tp_ops),
                          .ctx = r,
                          .enter_backward = op_sum,
                          .exit_forward = op_sum,
                          .reduce_max = op_max,
                          .reduce_sum = op_sum,
                          .sequence_parallel = sequence_parallel,
                          .allgather = op_allgather,
                          .reduce_scatter = op_reduce_scatter,
                          .wait = op_wait,
                          .overlap_input_grads = overlap,
                          .enter_backward_start = op_sum_start};
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
        ranks[r] = (tp_rank){.g = &g, .rank = r};
        ranks[r].ops = group_ops(&ranks[r], 0, 0);
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
                if (gcol >= V) assert_true(got == 0.0f);
                else expect_near("logit", r, got, ref_logits[t * (size_t)V + (size_t)gcol], 1.0);
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
                if (gk < 0) assert_true(p->grad[k] == 0.0f);
                else expect_near(p->name, r, p->grad[k], fp->grad[gk], scale);
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
    int overlap; /* set before tp_run_go: the operators' overlap_input_grads */
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
        t->ranks[r] = (tp_rank){.g = &t->g, .rank = r};
        t->ranks[r].ops = group_ops(&t->ranks[r], sp, t->overlap);
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

/* One thread of math; B sequences of the model `ini` as token ids and
 * targets (seeds `seed` and seed + 1), malloc'd into *tok and *tgt: their
 * count. */
static size_t batch_of(const char *ini, int32_t B, uint32_t seed, int32_t **tok, int32_t **tgt) {
    plait_kernels_set_threads(1);
    harness probe;
    assert_int_equal(harness_init(&probe, ini, B, 1, 0, NULL), 0);
    const size_t n = (size_t)B * (size_t)probe.T;
    *tok = malloc(n * sizeof **tok);
    *tgt = malloc(n * sizeof **tgt);
    harness_tokens(*tok, n, probe.V, seed);
    harness_tokens(*tgt, n, probe.V, seed + 1);
    harness_free(&probe);
    return n;
}

/* Sequence-parallel tp against tp alone, rank by rank, both with kernels
 * kern (NULL: the CPU's float32 ones; bf16_kernels: bf16 activations): the
 * loss, the logits, every layer's output and input gradient (this rank's
 * rows of them) and every gradient but the norms' bit for bit; the norms'
 * gradients within 1e-6 of their largest element; and less activation
 * memory. */
static void check_sequence_parallel_k(const char *ini, int tp, int split, const plait_kernels *kern) {
    const int32_t B = 2;
    int32_t *tok, *tgt;
    const size_t n = batch_of(ini, B, 31, &tok, &tgt);
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
 * test_bf16_activations), in less activation memory where less_memory. */
static void check_bf16_tp_ex(const char *ini, int tp, int sp, int split, int less_memory) {
    const int32_t B = 2;
    int32_t *tok, *tgt;
    (void)batch_of(ini, B, 41, &tok, &tgt);
    tp_run *f32 = calloc(1, sizeof *f32), *bf = calloc(1, sizeof *bf);
    tp_run_go(f32, ini, tp, sp, split, NULL, B, tok, tgt);
    tp_run_go(bf, ini, tp, sp, split, bf16_kernels(), B, tok, tgt);
    for (int r = 0; r < tp; r++) {
        plait_model *ma = f32->hs[r].model, *mb = bf->hs[r].model;
        const tp_job *ja = &f32->jobs[r], *jb = &bf->jobs[r];
        assert_false(plait_model_bf16_activations(ma));
        assert_true(plait_model_bf16_activations(mb));
        const double dl = fabs(jb->loss - ja->loss) / fabs(ja->loss);
        double dout = 0, wout = 0, dgrad = 0, wgrad = 0, dp = 0, wp = 0, dh = 0, wh = 0;
        const size_t rc = plait_model_boundary_numel(ma) * (size_t)(f32->hs[r].spec->n_layers - 1);
        add_dev(jb->outs, ja->outs, rc, &dout, &wout);
        add_dev(jb->out_grads, ja->out_grads, rc, &dgrad, &wgrad);
        for (int32_t i = 0; i < f32->hs[r].set.n_params; i++) {
            const plait_param *pa = &f32->hs[r].params[i], *pb = &bf->hs[r].params[i];
            add_dev(pb->grad, pa->grad, pa->numel, &dp, &wp);
            /* lm_head's own (llama's; gpt's is wte's, the embedding's gradient beside it) */
            if (strcmp(pa->name, "lm_head.weight") == 0) add_dev(pb->grad, pa->grad, pa->numel, &dh, &wh);
        }
        /* the head's products bf16 (core/model/tp_head_bf16.c): rounded, within bf16's bound */
        if (wh > 0) {
            printf("bf16 tp %d rank %d: lm_head's gradient within %.2e of float32's\n", tp, r, sqrt(dh / wh));
            assert_true(dh > 0);
            assert_true(sqrt(dh / wh) <= 2e-2);
        }
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
        if (less_memory) assert_true(plait_model_activation_bytes(mb) < plait_model_activation_bytes(ma));
    }
    tp_run_free(f32);
    tp_run_free(bf);
    free(f32);
    free(bf);
    free(tok);
    free(tgt);
}

static void check_bf16_tp(const char *ini, int tp, int sp, int split) { check_bf16_tp_ex(ini, tp, sp, split, 1); }

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

/* The llama arch's, untied head too: its lm_head's gradient alone
 * checked (check_bf16_tp); with 128 rows a micro-batch and 500 classes a
 * rank, the head's backward takes the logits' gradient in chunks of 64
 * rows (plait_model_head_rows: the blocks' gradients leave room for 16),
 * the scratch grown for them, more than the float32 model's activations
 * at this tiny width */
#define WIDE_VOCAB_LLAMA_INI                                                                                           \
    "[run]\nseed = 9\n[model]\nblock_size = 64\nvocab_size = 1000\nn_layer = 2\narch = llama\nn_head = 4\n"            \
    "n_kv_head = 2\nn_embd = 16\nffn_hidden = 24\n"
static void test_bf16_tp_llama(void **state) {
    (void)state;
    for (int sp = 0; sp <= 1; sp++) {
        check_bf16_tp(SP_LLAMA_INI, 2, sp, 0);
        check_bf16_tp(SP_LLAMA_INI, 2, sp, 1);
        check_bf16_tp_ex(WIDE_VOCAB_LLAMA_INI, 2, sp, 0, 0);
        check_bf16_tp_ex(WIDE_VOCAB_LLAMA_INI, 2, sp, 1, 0);
    }
}

/* A model with experts under bf16 activations (its dense halves bf16, its
 * sparse MLP halves float32 with each expert's width split over tp,
 * core/model/moe_bf16.c), with and without sequence parallelism: gpt
 * with every block sparse, llama with a dense block and a sparse one
 * with a shared expert, within the same bounds of float32 */
#define MOE_TP "moe_experts = 4\nmoe_top_k = 2\nmoe_ffn_hidden = 16\n"
static void test_bf16_tp_experts(void **state) {
    (void)state;
    for (int sp = 0; sp <= 1; sp++) {
        check_bf16_tp(SP_GPT_INI MOE_TP, 2, sp, 0);
        check_bf16_tp(SP_LLAMA_INI MOE_TP "moe_every = 2\nmoe_shared_experts = 1\n", 2, sp, 0);
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

/* The backward's overlap: each column-parallel product's input-gradient
 * sum started before its weight gradient and waited for after
 * (plait_tp_ops.overlap_input_grads; the group runs a started sum only at
 * the wait, so reading or writing its buffers in between would change
 * bits): the same loss, logits, layer outputs and gradients bit for bit as
 * with every sum blocking, two sums a block started and the head's, none
 * under a split backward (whose weight half runs later anyway); under
 * sequence parallelism `gathers` all-gathers a block started too (the
 * norms' outputs gathered again while the products before their weight
 * gradients run: the float32 llama blocks keep theirs gathered). */
static void check_overlap(const char *ini, int tp, int sp, int split, const plait_kernels *kern, int gathers) {
    const int32_t B = 2;
    int32_t *tok, *tgt;
    const size_t n = batch_of(ini, B, 41, &tok, &tgt);
    tp_run *blocking = calloc(1, sizeof *blocking), *over = calloc(1, sizeof *over);
    over->overlap = 1;
    tp_run_go(blocking, ini, tp, sp, split, kern, B, tok, tgt);
    tp_run_go(over, ini, tp, sp, split, kern, B, tok, tgt);
    for (int r = 0; r < tp; r++) {
        const tp_job *ja = &blocking->jobs[r], *jb = &over->jobs[r];
        plait_model *m = over->hs[r].model;
        const int32_t nl = over->hs[r].spec->n_layers;
        assert_int_equal(m->tp_overlap, 1);
        assert_int_equal(blocking->hs[r].model->tp_overlap, 0);
        const int want = split ? 0 : 2 * (nl - 2) + 1; /* two a block, the head's */
        if (over->ranks[r].deferred != (uint64_t)want)
            fail_msg("tp rank %d (sp %d, split %d): %llu sums started, want %d", r, sp, split,
                     (unsigned long long)over->ranks[r].deferred, want);
        const int want_gathers = split || !sp ? 0 : gathers * (nl - 2);
        if (over->ranks[r].gathers != (uint64_t)want_gathers)
            fail_msg("tp rank %d (sp %d, split %d): %llu all-gathers started, want %d", r, sp, split,
                     (unsigned long long)over->ranks[r].gathers, want_gathers);
        if (memcmp(&ja->loss, &jb->loss, sizeof ja->loss) != 0)
            fail_msg("tp rank %d: loss %.17g overlapped, %.17g blocking", r, jb->loss, ja->loss);
        assert_memory_equal(jb->logits, ja->logits, n * (size_t)m->Vl * sizeof(float));
        const size_t rc = plait_model_boundary_numel(m) * (size_t)(nl - 1);
        assert_memory_equal(jb->outs, ja->outs, rc * sizeof(float));
        assert_memory_equal(jb->out_grads, ja->out_grads, rc * sizeof(float));
        for (int32_t i = 0; i < over->hs[r].set.n_params; i++) {
            const plait_param *pa = &blocking->hs[r].params[i], *pb = &over->hs[r].params[i];
            if (memcmp(pb->grad, pa->grad, pa->numel * sizeof(float)) != 0)
                fail_msg("tp rank %d (sp %d): the gradient of %s differs when overlapped", r, sp, pa->name);
        }
    }
    tp_run_free(blocking);
    tp_run_free(over);
    free(blocking);
    free(over);
    free(tok);
    free(tgt);
}

static void test_overlap(void **state) {
    (void)state;
    for (int sp = 0; sp <= 1; sp++) {
        check_overlap(SP_GPT_INI, 2, sp, 0, NULL, 2);
        check_overlap(SP_GPT_INI, 4, sp, 0, NULL, 2);
        check_overlap(SP_LLAMA_INI, 2, sp, 0, NULL, 0);
        check_overlap(SP_GPT_INI, 2, sp, 0, bf16_kernels(), 2);
        check_overlap(SP_LLAMA_INI, 2, sp, 0, bf16_kernels(), 2);
        check_overlap(SP_LLAMA_INI "recompute = full\n", 2, sp, 0, bf16_kernels(), 2);
        check_overlap(SP_GPT_INI, 2, sp, 1, NULL, 2);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp2_gpt),         cmocka_unit_test(test_tp4_gpt),
        cmocka_unit_test(test_tp2_mlp),         cmocka_unit_test(test_tp2_llama),
        cmocka_unit_test(test_tp4_llama),       cmocka_unit_test(test_sp_gpt),
        cmocka_unit_test(test_sp_gpt_bf16),     cmocka_unit_test(test_sp_llama),
        cmocka_unit_test(test_bf16_tp_gpt),     cmocka_unit_test(test_bf16_tp_llama),
        cmocka_unit_test(test_bf16_tp_experts), cmocka_unit_test(test_overlap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
