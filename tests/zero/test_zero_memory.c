/*
 * What the ZeRO plugins hold and move, against the ZeRO paper's formulas
 * (fp32: parameters 4Ψ, gradients 4Ψ, Adam moments 8Ψ per replica):
 *   plain DP  4Ψ + 4Ψ   + 8Ψ   = 16Ψ
 *   ZeRO-1    4Ψ + 4Ψ   + 8Ψ/N = 8Ψ + 8Ψ/N
 *   ZeRO-2    4Ψ + 4Ψ/N + 8Ψ/N = 4Ψ + 12Ψ/N
 *   ZeRO-3    4Ψ/N + 4Ψ/N + 8Ψ/N = 16Ψ/N
 * exactly when every unit divides by N (padding 0), and with Ψ + padding in
 * place of Ψ for the sharded terms otherwise; the bytes reported equal the
 * host allocator's counts under the plugins' tags. Working buffers: the
 * pool never allocates more than the buffers the plan declares, derived here
 * from the model as zero.h documents the units (consecutive parameters of a
 * layer packed on 16-float boundaries up to bucket_size, a larger tensor or
 * a tied parameter alone, each padded to a multiple of N): in flight at once
 * at most max_inflight reductions of a unit (stage 1 with its received
 * slice), stages 2/3 also the gradient buffers of the layer in backward,
 * stage 3 also the parameters of the layer at hand and of the
 * prefetch_layers after it; the reported buffer bytes are exactly that plan
 * plus the tied copy's gradient. ZeRO-2/3 therefore hold the owned gradient
 * shard plus about a layer and the in-flight units, never the whole gradient.
 * Bytes sent per step: ZeRO-1/2 as plain DP's all-reduce,
 * ZeRO-3 about 1.5 times that; the time step() reports waiting on it.
 * Plus error paths.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "zero/zero_harness.h"
#include "host/host_table.h"

static zh_model even, uneven, deep;

static int setup(void **state) {
    (void)state;
    zh_setup_host();
    zh_model_gpt(&even, 2, 64, 128, 64);   /* every tensor a multiple of 64 elements */
    zh_model_gpt(&uneven, 3, 24, 37, 13);
    zh_model_gpt(&deep, 6, 32, 40, 16);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    plait_plugins_unload_all();
    return 0;
}

static void run_or_fail(zh_run *r) {
    if (zh_run_exec(r) != 0) fail_msg("%s n=%d m=%d: %s", r->plugin, r->n, r->m, zh_run_error(r));
}

/* Copy elements: the tied head's own gradient, reported as a buffer. */
static uint64_t copy_elems(const zh_model *m) {
    uint64_t n = 0;
    for (int32_t i = 0; i < m->n_params; i++)
        if (m->p[i].tied_to >= 0) n += zh_numel(&m->p[i]);
    return n;
}

/* The working buffers the plan declares, derived from the model. */
typedef struct buffer_plan {
    uint64_t max_unit;     /* P: the largest padded unit */
    uint64_t max_grad;     /* the largest layer's gradient units, padded */
    uint64_t max_gather;   /* the largest layer's gathered units (a tied copy gathers its original) */
    uint64_t copy_padded;  /* the tied copies' units, padded */
} buffer_plan;

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void derive_plan(const zh_model *m, int n, uint64_t bucket_elems, buffer_plan *bp) {
    int32_t unit_of[ZH_MAX_PARAMS], layer_of[ZH_MAX_PARAMS], original_of[ZH_MAX_PARAMS];
    uint64_t numel[ZH_MAX_PARAMS];
    int32_t units = 0;
    int cur_alone = 0;
    for (int32_t i = 0; i < m->n_params; i++) {
        const zh_pspec *p = &m->p[i];
        int has_copy = 0;
        for (int32_t j = 0; j < m->n_params; j++) has_copy |= m->p[j].tied_to == i;
        int alone = p->tied_to >= 0 || has_copy || zh_numel(p) >= bucket_elems;
        uint64_t off = units ? round_up(numel[units - 1], 16) : 0;
        if (!(units && !alone && !cur_alone && layer_of[units - 1] == p->layer && off + zh_numel(p) <= bucket_elems)) {
            layer_of[units] = p->layer;
            original_of[units] = p->tied_to >= 0 ? unit_of[p->tied_to] : -1;
            numel[units++] = 0;
            cur_alone = alone;
            off = 0;
        }
        unit_of[i] = units - 1;
        numel[units - 1] = off + zh_numel(p);
    }
    memset(bp, 0, sizeof *bp);
    for (int32_t l = 0; l < m->n_layers; l++) {
        uint64_t grad = 0, gather = 0;
        int gathered[ZH_MAX_PARAMS] = {0};
        for (int32_t u = 0; u < units; u++) {
            if (layer_of[u] != l) continue;
            uint64_t padded = round_up(numel[u], (uint64_t)n);
            grad += padded;
            if (original_of[u] >= 0) bp->copy_padded += padded;
            int32_t g = original_of[u] >= 0 ? original_of[u] : u;
            if (!gathered[g]) gather += round_up(numel[g], (uint64_t)n);
            gathered[g] = 1;
            if (padded > bp->max_unit) bp->max_unit = padded;
        }
        if (grad > bp->max_grad) bp->max_grad = grad;
        if (gather > bp->max_gather) bp->max_gather = gather;
    }
}

/* Bytes of buffers the plan of `stage` declares (max_inflight f, prefetch_layers k). */
static uint64_t planned_bytes(const buffer_plan *bp, int stage, int n, int f, int k) {
    uint64_t P = bp->max_unit, elems = stage == 1 ? (uint64_t)f * (P + P / (uint64_t)n) : bp->max_grad + (uint64_t)f * P;
    if (stage == 3) elems += (uint64_t)(k + 1) * bp->max_gather;
    return 4 * elems;
}

#define DEFAULT_BUCKET_ELEMS (25ull * 1024 * 1024 / 4)

static void check_formula(const zh_model *model, int stage, int n, int m, int det) {
    char name[8];
    snprintf(name, sizeof name, "zero%d", stage);
    zh_run r = {.plugin = name, .model = model, .n = n, .m = m, .det = det, .steps = 2, .grad_clip = 1.0};
    run_or_fail(&r);
    uint64_t psi = zh_model_psi(model);
    for (int k = 0; k < n; k++) {
        const plait_optim_memory *mem = &r.mem[k];
        uint64_t pad = mem->padding_elems, sharded = psi + pad;
        if (sharded % (uint64_t)n) fail_msg("%s: Ψ + padding = %llu is not a multiple of %d", name, (unsigned long long)sharded, n);
        uint64_t S = sharded / (uint64_t)n;
        uint64_t want_param = stage == 3 ? 4 * S : 4 * psi;
        uint64_t want_grad = stage == 1 ? 4 * psi : 4 * S;
        if (mem->param_bytes != want_param || mem->grad_bytes != want_grad || mem->state_bytes != 8 * S)
            fail_msg("%s n=%d rank %d: param %llu grad %llu state %llu bytes, formula %llu %llu %llu (Ψ=%llu, padding %llu)",
                     name, n, k, (unsigned long long)mem->param_bytes, (unsigned long long)mem->grad_bytes,
                     (unsigned long long)mem->state_bytes, (unsigned long long)want_param, (unsigned long long)want_grad,
                     (unsigned long long)(8 * S), (unsigned long long)psi, (unsigned long long)pad);
        /* the same before the first step */
        assert_memory_equal(&r.mem0[k].param_bytes, &mem->param_bytes, 3 * sizeof(uint64_t));
        /* padding: per unit < N, plus at most 15 alignment elements per tensor */
        assert_true(pad <= (uint64_t)model->n_params * (uint64_t)(n - 1 + 15));
        /* the tied copy's gradient (whole in stage 1, its slice in 2/3) is a declared buffer */
        uint64_t copy = copy_elems(model);
        assert_true(mem->buffer_bytes >= 4 * (stage == 1 ? copy : copy / (uint64_t)n));
    }
    /* The reported bytes are the allocations. */
    assert_int_equal(r.tag_state, (uint64_t)n * r.mem[0].state_bytes);
    if (stage >= 2) assert_true(r.tag_grad == (uint64_t)n * r.mem[0].grad_bytes);
    if (stage == 3) assert_int_equal(r.tag_param, (uint64_t)n * r.mem[0].param_bytes);
    /* The pool against the plan (defaults: max_inflight 2, prefetch_layers 1),
     * and the report = plan + the tied copy's gradient (stage 1: whole, in
     * the core; 2/3: its slice) + the accumulation tree (deterministic mode
     * with accumulation, stages 2/3: not derived here). */
    buffer_plan bp;
    derive_plan(model, n, DEFAULT_BUCKET_ELEMS, &bp);
    uint64_t plan = planned_bytes(&bp, stage, n, 2, 1);
    uint64_t copy = 4 * (stage == 1 ? copy_elems(model) : bp.copy_padded / (uint64_t)n);
    uint64_t peak = 0;
    for (int k = 0; k < n; k++) peak = r.buffers_peak[k] > peak ? r.buffers_peak[k] : peak;
    if (peak > (uint64_t)n * plan)
        fail_msg("%s n=%d m=%d: the pools held %llu bytes, more than the %d x %llu the plan declares", name, n, m,
                 (unsigned long long)peak, n, (unsigned long long)plan);
    assert_true(r.tag_buffers <= peak);
    for (int k = 0; k < n && !(stage >= 2 && det && m > 1); k++)
        if (r.mem[k].buffer_bytes != plan + copy)
            fail_msg("%s n=%d rank %d: %llu buffer bytes reported, the plan declares %llu + %llu (tied copy)", name, n,
                     k, (unsigned long long)r.mem[k].buffer_bytes, (unsigned long long)plan,
                     (unsigned long long)copy);
    zh_run_free(&r);
}

static void test_memory_even_is_exact(void **state) {
    (void)state;
    uint64_t psi = zh_model_psi(&even);
    for (int stage = 1; stage <= 3; stage++)
        for (int n = 2; n <= 4; n += 2) {
            char name[8];
            snprintf(name, sizeof name, "zero%d", stage);
            zh_run r = {.plugin = name, .model = &even, .n = n, .m = 1, .steps = 1, .grad_clip = 1.0};
            run_or_fail(&r);
            assert_int_equal(r.mem[0].padding_elems, 0);
            uint64_t total = r.mem[0].param_bytes + r.mem[0].grad_bytes + r.mem[0].state_bytes;
            uint64_t formula = stage == 1 ? 8 * psi + 8 * psi / (uint64_t)n
                               : stage == 2 ? 4 * psi + 12 * psi / (uint64_t)n
                                            : 16 * psi / (uint64_t)n;
            if (total != formula)
                fail_msg("%s n=%d: %llu bytes, formula %llu", name, n, (unsigned long long)total, (unsigned long long)formula);
            zh_run_free(&r);
            check_formula(&even, stage, n, 1, 0);
        }
    /* plain DP + adam: 16Ψ */
    zh_run dp = {.plugin = "adam", .model = &even, .n = 2, .m = 1, .steps = 1, .grad_clip = 1.0};
    run_or_fail(&dp);
    assert_int_equal(dp.mem[0].param_bytes + dp.mem[0].grad_bytes + dp.mem[0].state_bytes, 16 * psi);
    assert_int_equal(dp.mem[0].buffer_bytes, 4 * copy_elems(&even));
    zh_run_free(&dp);
}

static void test_memory_uneven(void **state) {
    (void)state;
    for (int stage = 1; stage <= 3; stage++) {
        check_formula(&uneven, stage, 4, 1, 0);
        check_formula(&uneven, stage, 2, 2, 1); /* deterministic accumulation (stages 2/3: the tree) */
        check_formula(&uneven, stage, 3, 1, 0);
    }
}

/* ZeRO-2/3 never hold the whole gradient: each rank keeps its owned shard
 * (4Ψ/N bytes, grad_bytes) and, in working buffers, at most the gradient
 * units of the layer in backward plus max_inflight units being reduced —
 * units cut at bucket_size (a larger tensor alone), so about a layer and one
 * bucket here — and ZeRO-3 also the gathered parameters of prefetch_layers + 1
 * layers. On a 6-block model that is a small part of the full gradient. */
static void test_zero2_never_holds_full_gradient(void **state) {
    (void)state;
    const int n = 2, inflight = 1, prefetch = 1;
    const uint64_t bucket_bytes = 4096;
    uint64_t psi = zh_model_psi(&deep);
    buffer_plan bp;
    derive_plan(&deep, n, bucket_bytes / 4, &bp);
    /* the bound is a layer and a bucket (the largest tensor, 3C x C, exceeds
     * the bucket and is a unit alone) */
    assert_int_equal(bp.max_unit, 3 * 32 * 32);
    for (int stage = 2; stage <= 3; stage++) {
        char name[8], ini[128];
        snprintf(name, sizeof name, "zero%d", stage);
        snprintf(ini, sizeof ini, "[optim.%s]\nmax_inflight = %d\nbucket_size = %llu\n%s", name, inflight,
                 (unsigned long long)bucket_bytes, stage == 3 ? "prefetch_layers = 1\n" : "");
        zh_run r = {.plugin = name, .model = &deep, .n = n, .m = 2, .steps = 2, .grad_clip = 1.0, .extra_ini = ini};
        run_or_fail(&r);
        uint64_t bound = planned_bytes(&bp, stage, n, inflight, prefetch), peak = 0;
        for (int k = 0; k < n; k++) peak = r.buffers_peak[k] > peak ? r.buffers_peak[k] : peak;
        fprintf(stderr, "%s: buffers at most %llu bytes per rank (%llu for all ranks), bound %llu; owned gradient "
                        "shard %llu; the whole gradient is %llu\n", name, (unsigned long long)(peak / (uint64_t)n),
                (unsigned long long)peak, (unsigned long long)bound, (unsigned long long)r.mem[0].grad_bytes,
                (unsigned long long)(4 * psi));
        if (peak > (uint64_t)n * bound)
            fail_msg("%s: the ranks' buffers held %llu bytes, above %d x (a layer %llu + %d unit(s) of %llu%s) = %llu",
                     name, (unsigned long long)peak, n, (unsigned long long)(4 * bp.max_grad), inflight,
                     (unsigned long long)(4 * bp.max_unit), stage == 3 ? " + gathered layers" : "",
                     (unsigned long long)((uint64_t)n * bound));
        if (stage == 2) {
            /* shard + buffers: half the whole gradient, plus under a quarter of it */
            assert_int_equal(r.mem[0].grad_bytes * (uint64_t)n, 4 * (psi + r.mem[0].padding_elems));
            assert_true(4 * (bp.max_grad + bp.max_unit) < 4 * psi / 4);
        }
        zh_run_free(&r);
    }
}

/* Bytes per rank per step: ZeRO-1/2 = DP's all-reduce (reduce-scatter +
 * all-gather of the same elements), ZeRO-3 ≈ 1.5x (a second gather). */
static void test_comm_volume(void **state) {
    (void)state;
    uint64_t b[4] = {0};
    const char *names[4] = {"adam", "zero1", "zero2", "zero3"};
    for (int k = 0; k < 4; k++) {
        /* prefetch 0: every layer gathered before its forward and again before its backward */
        zh_run r = {.plugin = names[k], .model = &uneven, .n = 4, .m = 1, .steps = 2, .grad_clip = 1.0,
                    .extra_ini = k == 3 ? "[optim.zero3]\nprefetch_layers = 0\n" : NULL};
        run_or_fail(&r);
        for (int q = 0; q < 4; q++) b[k] += r.bytes[q][1]; /* ranks differ by a few bytes (uneven segments) */
        zh_run_free(&r);
    }
    double z1 = (double)b[1] / (double)b[0], z2 = (double)b[2] / (double)b[0], z3 = (double)b[3] / (double)b[2];
    fprintf(stderr, "bytes per rank per step: dp %llu, zero1 %llu (%.3f), zero2 %llu (%.3f), zero3 %llu (%.3f x zero2)\n",
            (unsigned long long)b[0], (unsigned long long)b[1], z1, (unsigned long long)b[2], z2,
            (unsigned long long)b[3], z3);
    assert_int_equal(b[1], b[2]);
    /* Evaluation passes between steps are not counted in the next step. */
    zh_run e = {.plugin = "zero3", .model = &uneven, .n = 4, .m = 1, .steps = 2, .grad_clip = 1.0, .eval_passes = 2,
                .extra_ini = "[optim.zero3]\nprefetch_layers = 0\n"};
    run_or_fail(&e);
    uint64_t be = 0;
    for (int q = 0; q < 4; q++) be += e.bytes[q][1];
    assert_int_equal(be, b[3]);
    zh_run_free(&e);
    /* A little less than DP: the tied copy is reduced but never gathered
     * (it shares the original's values), and no alignment gaps travel
     * between units. */
    assert_true(z1 > 0.95 && z1 <= 1.0);
    assert_true(z3 > 1.45 && z3 < 1.52);
}

/* The time step() reports blocked on communication (the global-norm
 * all-reduce; ZeRO-1/2's parameter all-gather) is there with 2 ranks and
 * within step()'s own wall time; one rank of plain Adam does not wait. */
static void test_step_wait(void **state) {
    (void)state;
    const char *names[4] = {"adam", "zero1", "zero2", "zero3"};
    for (int k = 0; k < 4; k++) {
        zh_run r = {.plugin = names[k], .model = &uneven, .n = 2, .m = 1, .steps = 2, .grad_clip = 1.0};
        run_or_fail(&r);
        for (int q = 0; q < 2; q++)
            for (int s = 0; s < 2; s++)
                if (!(r.wait_s[q][s] > 0 && r.wait_s[q][s] <= r.step_s[q][s]))
                    fail_msg("%s rank %d step %d: wait %.9f s, step() took %.9f s", names[k], q, s, r.wait_s[q][s],
                             r.step_s[q][s]);
        zh_run_free(&r);
    }
    zh_run solo = {.plugin = "adam", .model = &uneven, .n = 1, .m = 1, .steps = 1, .grad_clip = 1.0};
    run_or_fail(&solo);
    assert_true(solo.wait_s[0][0] == 0);
    zh_run_free(&solo);
}

/* ---- error paths, one rank ------------------------------------------------ */

typedef struct solo {
    plait_threads_world *w;
    plait_comm *world;
    plait_config *cfg;
    const plait_optim_ops *ops;
    plait_param p[3];
    float data[3][8], grad[3][8];
    plait_param_set set;
} solo;

static void solo_open(solo *s, const char *plugin, int lone_copy) {
    memset(s, 0, sizeof *s);
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, plugin);
    assert_non_null(d);
    s->ops = d->ops;
    s->w = plait_threads_world_new(1, 10.0);
    assert_int_equal(plait_threads_comm_world(s->w, 0, NULL, &s->world), PLAIT_OK);
    s->cfg = plait_config_new();
    char section[32];
    snprintf(section, sizeof section, "optim.%s", plugin);
    char *env[] = {NULL};
    assert_int_equal(plait_config_declare_core(s->cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(s->cfg, section, d->keys, d->n_keys, d->key_size, plugin), PLAIT_OK);
    assert_int_equal(plait_config_load_string(s->cfg, "t.ini", "[optim]\nlr = 0.1\n"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(s->cfg, env), PLAIT_OK);
    const char *names[3] = {"w", "b", "head"};
    for (int i = 0; i < 3; i++) {
        plait_param *p = &s->p[i];
        p->struct_size = sizeof *p;
        p->name = names[i];
        p->index = i;
        p->layer = i;
        p->ndim = 1;
        p->shape[0] = p->local_shape[0] = 8;
        p->numel = 8;
        p->shard = (plait_shard){.dim = -1, .parts = 1, .groups = 1, .padded_len = 8};
        p->tied_to = -1;
        p->data = s->data[i];
        p->grad = s->grad[i];
        for (int k = 0; k < 8; k++) s->data[i][k] = (float)(i + 1) * 0.25f + (float)k;
    }
    if (lone_copy) { /* a copy of a parameter held on another stage (index 9) */
        s->p[2].flags = PLAIT_PARAM_TIED_COPY;
        s->p[2].tied_to = 9;
    }
    s->set = (plait_param_set){.struct_size = sizeof s->set, .n_params = 3, .params = s->p, .n_layers = 3,
                               .n_layers_total = 3, .numel = 24};
}

static void *solo_create(solo *s, plait_status want) {
    plait_optim_init init = {.struct_size = sizeof init, .host = zh_host(), .config = s->cfg,
                             .params = &s->set, .dp_comm = s->world, .world = s->world, .local_micro_batches = 1};
    void *st = NULL;
    plait_status got = s->ops->create(&init, &st);
    if (got != want) fail_msg("create: %s", plait_last_error());
    return st;
}

static void solo_close(solo *s) {
    plait_config_free(s->cfg);
    plait_comm_free(s->world);
    plait_threads_world_free(s->w);
}

static plait_status no_state(void *ctx, int32_t index, const char *which, size_t off, size_t count, float *dst) {
    solo *s = ctx;
    if (strcmp(which, "param") != 0) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "fresh");
    memcpy(dst, s->data[index] + off, count * sizeof(float));
    return PLAIT_OK;
}

static void test_errors(void **state) {
    (void)state;
    solo s;
    /* ZeRO-2/3 refuse a tied copy whose original is elsewhere unless the core
     * flags it PLAIT_PARAM_TIED_REMOTE (an older core does not); ZeRO-1 takes it. */
    for (int stage = 1; stage <= 3; stage++) {
        char name[8];
        snprintf(name, sizeof name, "zero%d", stage);
        solo_open(&s, name, 1);
        void *st = solo_create(&s, stage == 1 ? PLAIT_OK : PLAIT_ERR_INVALID_CONFIG);
        if (stage == 1) s.ops->destroy(st);
        else assert_non_null(strstr(plait_last_error(), "another pipeline stage"));
        solo_close(&s);
    }
    /* flagged: accepted, and its gradient stays whole in the plugin's storage
     * for the embedding group's sum while the others are released */
    for (int stage = 2; stage <= 3; stage++) {
        char name[8];
        snprintf(name, sizeof name, "zero%d", stage);
        solo_open(&s, name, 1);
        s.p[2].flags |= PLAIT_PARAM_TIED_REMOTE;
        void *st = solo_create(&s, PLAIT_OK);
        assert_null(s.p[0].grad);
        assert_non_null(s.p[2].grad);
        assert_true(s.p[2].grad != s.grad[2]);
        for (int k = 0; k < 8; k++) assert_true(s.p[2].grad[k] == 0.0f);
        s.ops->destroy(st);
        solo_close(&s);
    }
    for (int stage = 2; stage <= 3; stage++) {
        char name[8];
        snprintf(name, sizeof name, "zero%d", stage);
        solo_open(&s, name, 0);
        void *st = solo_create(&s, PLAIT_OK);
        /* the plugin owns gradients (and for ZeRO-3 parameters): pointers cleared */
        assert_null(s.p[0].grad);
        if (stage == 3) assert_null(s.p[0].data);
        plait_optim_step_in in = {.struct_size = sizeof in};
        plait_optim_step_out out = {.struct_size = sizeof out};
        assert_int_equal(s.ops->step(st, &in, &out), PLAIT_ERR_INVALID_ARG);
        assert_non_null(strstr(plait_last_error(), "before materialize"));
        plait_value_source src = {.struct_size = sizeof src, .ctx = &s, .read = no_state};
        assert_int_equal(s.ops->materialize(st, &src), PLAIT_OK);
        assert_int_equal(s.ops->after_backward(st, 1, 0, 1), PLAIT_ERR_INVALID_ARG);
        assert_int_equal(s.ops->before_backward(st, 7, 0), PLAIT_ERR_INVALID_ARG); /* no such layer */
        /* a non-finite gradient fails the step and changes nothing */
        for (int l = 2; l >= 0; l--) {
            assert_int_equal(s.ops->before_backward(st, l, 0), PLAIT_OK);
            assert_non_null(s.p[l].grad);
            for (int k = 0; k < 8; k++) s.p[l].grad[k] = l == 1 && k == 3 ? NAN : 1.0f;
            assert_int_equal(s.ops->after_backward(st, l, 0, 1), PLAIT_OK);
            assert_null(s.p[l].grad);
        }
        assert_int_equal(s.ops->finish_grads(st), PLAIT_OK);
        assert_int_equal(s.ops->step(st, &in, &out), PLAIT_ERR_INVALID_ARG);
        assert_non_null(strstr(plait_last_error(), "not finite"));
        float got[8];
        assert_int_equal(s.ops->export_tensor(st, 1, "param", got), PLAIT_OK);
        assert_memory_equal(got, s.data[1], sizeof got);
        assert_int_equal(s.ops->export_tensor(st, 1, "momentum", got), PLAIT_ERR_INVALID_ARG);
        assert_int_equal(s.ops->export_tensor(st, 5, "param", got), PLAIT_ERR_INVALID_ARG);
        s.ops->destroy(st);
        solo_close(&s);
    }
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_even_is_exact),
        cmocka_unit_test(test_memory_uneven),
        cmocka_unit_test(test_zero2_never_holds_full_gradient),
        cmocka_unit_test(test_comm_volume),
        cmocka_unit_test(test_step_wait),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
