/*
 * ZeRO-1/2/3 against plain Adam, N data-parallel ranks as threads:
 *   - deterministic mode: every stage at dp 2 and 4 (and 1), with and without
 *     accumulation, is bit-identical to one process running plain adam over
 *     the same micro-batches (parameters and the data seen during every hook,
 *     gradient norms, optimizer state), on a model whose sizes divide nothing
 *     (uneven shards), with clipping active;
 *   - default mode: within float tolerance of plain DP + adam at the same
 *     layout;
 *   - ZeRO-3 under pipeline-like hook orders (GPipe, 1F1B), evaluation passes
 *     between steps, and different prefetch depths: still bit-identical;
 *   - small units (a layer split in several), one collective in flight;
 *   - the tree plugins reach through host->sum_tree is the core's, bit for bit;
 *   - ZeRO-1 accumulating in bf16 ([optim.zero1] grad_accum = bf16): the
 *     gradients are the plugin's; one micro-batch a step is bit-identical to
 *     one process, several follow plain DP within bf16's rounding of the
 *     running sums (and differ from it: the sums are rounded), and
 *     deterministic mode with several is refused;
 *   - Adam's moments in bf16 ([optim] moments = bf16): deterministic runs of
 *     every stage at dp 2 and 4 are one process's bits, the moments they
 *     export are bf16 values widened, a run resumed from them is the
 *     uninterrupted run's bits, and the curve follows float32 moments'
 *     within bf16's rounding of them (and differs from it);
 *   - the optimizers refuse offload_params where they keep every parameter
 *     whole, and offload = host on host memory, themselves (a rank that no
 *     launcher of plait's checked first meets these).
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

#include "coll/sum_tree.h"
#include "plugin/loader.h"
#include "runtime/memory.h"
#include "zero/zero_harness.h"
#include "host/host_table.h"

static zh_model uneven; /* C = 24, V = 37, T = 13: no unit divides by 2 or 4 */

static int setup(void **state) {
    (void)state;
    zh_setup_host();
    zh_model_gpt(&uneven, 3, 24, 37, 13);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    plait_plugins_unload_all();
    return 0;
}

static void run_or_fail(zh_run *r) {
    if (zh_run_exec(r) != 0) fail_msg("%s n=%d m=%d det=%d: %s", r->plugin, r->n, r->m, r->det, zh_run_error(r));
}

/* One process, plain adam, all N*M micro-batches. */
static void reference(zh_run *ref, const zh_model *m, int micro_batches, int det, int steps, double clip) {
    memset(ref, 0, sizeof *ref);
    ref->plugin = "adam";
    ref->model = m;
    ref->n = 1;
    ref->m = micro_batches;
    ref->det = det;
    ref->steps = steps;
    ref->grad_clip = clip;
    run_or_fail(ref);
}

static void assert_same_run(const zh_run *a, const zh_run *ref, int states) {
    char why[256];
    for (int s = 0; s < a->steps; s++) {
        if (!zh_snapshot_equal(a->model, &a->traj[s], &ref->traj[s], 0, why, sizeof why))
            fail_msg("%s n=%d m=%d: step %d differs from the reference: %s", a->plugin, a->n, a->m, s, why);
        if (memcmp(&a->norm[s], &ref->norm[s], sizeof(double)) != 0)
            fail_msg("%s n=%d m=%d: step %d gradient norm %.17g, reference %.17g", a->plugin, a->n, a->m, s,
                     a->norm[s], ref->norm[s]);
        assert_true(a->lr[s] == ref->lr[s]);
    }
    if (states && !zh_snapshot_equal(a->model, &a->final, &ref->final, 1, why, sizeof why))
        fail_msg("%s n=%d m=%d: final optimizer state differs: %s", a->plugin, a->n, a->m, why);
}

#define STEPS 5

static void test_deterministic_bitwise(void **state) {
    (void)state;
    static const int layouts[][2] = {{2, 1}, {2, 2}, {4, 1}, {4, 2}, {1, 2}};
    zh_run ref[9];
    int have[9] = {0};
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        int n = layouts[k][0], m = layouts[k][1], total = n * m;
        if (!have[total]) {
            reference(&ref[total], &uneven, total, 1, STEPS, 0.5);
            have[total] = 1;
            /* clipping really happens */
            assert_true(ref[total].norm[0] > 0.5);
        }
        /* plain DP + adam is the same (the harness's core part is right) */
        zh_run dp = {.plugin = "adam", .model = &uneven, .n = n, .m = m, .det = 1, .steps = STEPS, .grad_clip = 0.5};
        run_or_fail(&dp);
        assert_same_run(&dp, &ref[total], 1);
        zh_run_free(&dp);
        for (int stage = 1; stage <= 3; stage++) {
            char name[8];
            snprintf(name, sizeof name, "zero%d", stage);
            zh_run z = {.plugin = name, .model = &uneven, .n = n, .m = m, .det = 1, .steps = STEPS, .grad_clip = 0.5,
                        .expect = ref[total].traj, .expect_tol = 0};
            run_or_fail(&z);
            assert_same_run(&z, &ref[total], 1);
            zh_run_free(&z);
        }
    }
    for (int t = 0; t < 9; t++)
        if (have[t]) zh_run_free(&ref[t]);
}

static void test_default_mode_close(void **state) {
    (void)state;
    static const int layouts[][2] = {{2, 1}, {2, 2}, {4, 1}, {4, 2}};
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        int n = layouts[k][0], m = layouts[k][1];
        zh_run dp = {.plugin = "adam", .model = &uneven, .n = n, .m = m, .steps = STEPS, .grad_clip = 0.5};
        run_or_fail(&dp);
        for (int stage = 1; stage <= 3; stage++) {
            char name[8];
            snprintf(name, sizeof name, "zero%d", stage);
            zh_run z = {.plugin = name, .model = &uneven, .n = n, .m = m, .steps = STEPS, .grad_clip = 0.5,
                        .expect = dp.traj, .expect_tol = 1e-4};
            run_or_fail(&z);
            for (int s = 0; s < STEPS; s++) {
                /* Summation order differs; Adam turns that into update
                 * differences only where a gradient is near eps (a sign flip
                 * would move an element by ~lr = 1e-2). */
                double diff = zh_snapshot_maxrel(&uneven, &z.traj[s], &dp.traj[s], 1e30) * 1e30;
                if (diff > 1e-5) fail_msg("%s n=%d m=%d step %d: max parameter difference %.3g", name, n, m, s, diff);
                if (fabs(z.norm[s] - dp.norm[s]) > 1e-5 * dp.norm[s])
                    fail_msg("%s n=%d m=%d step %d: norm %.9g vs %.9g", name, n, m, s, z.norm[s], dp.norm[s]);
            }
            zh_run_free(&z);
        }
        zh_run_free(&dp);
    }
}

static void test_zero3_hook_orders(void **state) {
    (void)state;
    zh_run ref;
    reference(&ref, &uneven, 8, 1, 4, 1.0);
    static const struct {
        int order, prefetch, eval;
    } cases[] = {{ZH_ORDER_GPIPE, 1, 0}, {ZH_ORDER_1F1B, 2, 1}, {ZH_ORDER_1F1B, 0, 0}, {ZH_ORDER_FB, 5, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char ini[128];
        snprintf(ini, sizeof ini, "[optim.zero3]\nprefetch_layers = %d\n", cases[k].prefetch);
        zh_run z = {.plugin = "zero3", .model = &uneven, .n = 2, .m = 4, .det = 1, .steps = 4, .grad_clip = 1.0,
                    .order = cases[k].order, .eval_passes = cases[k].eval, .extra_ini = ini, .expect = ref.traj};
        run_or_fail(&z);
        assert_same_run(&z, &ref, 1);
        zh_run_free(&z);
    }
    zh_run_free(&ref);
}

/* Units smaller than a layer (several per layer), one collective in flight. */
static void test_small_units(void **state) {
    (void)state;
    zh_run ref;
    reference(&ref, &uneven, 4, 1, 3, 0.0);
    for (int stage = 1; stage <= 3; stage++) {
        char name[8];
        snprintf(name, sizeof name, "zero%d", stage);
        char ini[128];
        snprintf(ini, sizeof ini, "[optim.%s]\nbucket_size = 3K\nmax_inflight = 1\n", name);
        zh_run z = {.plugin = name, .model = &uneven, .n = 4, .m = 1, .det = 1, .steps = 3, .extra_ini = ini,
                    .expect = ref.traj};
        run_or_fail(&z);
        assert_same_run(&z, &ref, 1);
        zh_run_free(&z);
    }
    zh_run_free(&ref);
}

/* What a plugin reaches through host->sum_tree is the core's one tree: fed
 * range by range (streaming, as ZeRO-2/3 do) it equals the all-at-once fold
 * of the ordered collectives bit for bit; wrong calls are errors. */
static void test_tree_matches_core(void **state) {
    (void)state;
    const plait_host *h = zh_host();
    assert_true(PLAIT_HOST_HAS(h, sum_tree));
    const plait_sum_tree_api *api = h->sum_tree;
    const size_t n = 1000;
    float *mbs = malloc(9 * n * sizeof(float)), *fresh = malloc(n * sizeof(float));
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *work[9];
    const void *leaves[9];
    for (int32_t j = 0; j < 9; j++) {
        work[j] = malloc(n * sizeof(float));
        leaves[j] = mbs + (size_t)j * n;
        for (size_t i = 0; i < n; i++) /* wide exponents so the order shows */
            mbs[(size_t)j * n + i] =
                (float)ldexp(sin((double)(i * 7 + (size_t)j * 13 + 1)), (int)((i + (size_t)j) % 40) - 20);
    }
    for (int32_t m = 1; m <= 9; m++) {
        plait_sum_tree *t = NULL;
        assert_int_equal(api->create(n, PLAIT_F32, PLAIT_SUM, m, "test tree", &t), PLAIT_OK);
        for (int32_t j = 0; j < m; j++) {
            memcpy(fresh, mbs + (size_t)j * n, n * sizeof(float)); /* the plugin reuses its buffer */
            size_t cuts[] = {0, 17, 555, n};
            for (int c = 0; c < 3; c++) {
                int done = -1;
                assert_int_equal(api->add(t, j, fresh + cuts[c], b + cuts[c], cuts[c], cuts[c + 1] - cuts[c], &done),
                                 PLAIT_OK);
                assert_int_equal(done, j == m - 1);
            }
        }
        plait_sum_tree_fold(a, leaves, (void *const *)work, m, n, PLAIT_F32, PLAIT_SUM);
        assert_memory_equal(a, b, n * sizeof(float));
        assert_true(api->bytes(t) <= (size_t)api->max_levels(m) * n * sizeof(float));
        assert_true(m == 1 || api->bytes(t) > 0);
        /* out of range: refused with a message, the tree untouched */
        assert_int_equal(api->add(t, m, fresh, b, 0, 1, NULL), PLAIT_ERR_INVALID_ARG);
        assert_int_equal(api->add(t, 0, fresh, b, 990, 11, NULL), PLAIT_ERR_INVALID_ARG);
        assert_non_null(strstr(h->last_error(), "test tree"));
        api->destroy(t);
    }
    plait_sum_tree *t = NULL;
    assert_int_equal(api->create(n, PLAIT_F32, PLAIT_SUM, 0, "test tree", &t), PLAIT_ERR_INVALID_ARG);
    assert_null(t);
    api->destroy(NULL);
    for (int32_t j = 0; j < 9; j++) free(work[j]);
    free(mbs), free(fresh), free(a), free(b);
}

/* ZeRO-1 with its micro-batches' gradients added up in bf16 (zero.h,
 * grad_accum16). */
/* The largest mean parameter difference of run a from ref over the steps
 * (0: the same values), failing where a step's mean passes 2e-5 a step or
 * the gradient norm moves by more than rel of itself. bf16 keeps 8 bits: a
 * rounded gradient is off by up to 2^-9 of itself, and the global norm by
 * that share at most. Adam's update normalises each element, so where its
 * parts cancel an element can move by up to 2 lr = 2e-2 a step: the
 * parameters are held to their mean difference (measured, 2 ranks of 4
 * micro-batches: 4.5e-6 a step, the norm within 6e-5 relative). */
static double mean_drift(const zh_run *a, const zh_run *ref, double rel) {
    double worst = 0;
    for (int s = 0; s < a->steps; s++) {
        double sum = 0, count = 0;
        for (int32_t i = 0; i < a->model->n_params; i++) {
            if (a->model->p[i].tied_to >= 0) continue;
            size_t n = zh_numel(&a->model->p[i]);
            for (size_t e = 0; e < n; e++) sum += fabs((double)a->traj[s].t[0][i][e] - (double)ref->traj[s].t[0][i][e]);
            count += (double)n;
        }
        double mean = sum / count;
        if (!(mean <= 2e-5 * (s + 1)))
            fail_msg("n=%d m=%d step %d: mean parameter difference %.3g", a->n, a->m, s, mean);
        if (!(fabs(a->norm[s] - ref->norm[s]) <= rel * ref->norm[s]))
            fail_msg("n=%d m=%d step %d: norm %.9g vs %.9g", a->n, a->m, s, a->norm[s], ref->norm[s]);
        if (mean > worst) worst = mean;
    }
    return worst;
}

static void test_grad_accum_bf16(void **state) {
    (void)state;
    const char *ini = "[optim.zero1]\ngrad_accum = bf16\n";
    /* one micro-batch a step: one process's float32 gradient, reduced in
     * float32 and rounded once into the bf16 slice the update reads */
    zh_run ref;
    reference(&ref, &uneven, 4, 1, STEPS, 0.5);
    for (int n = 2; n <= 4; n += 2) {
        zh_run z = {.plugin = "zero1",
                    .model = &uneven,
                    .n = n,
                    .m = 4 / n,
                    .det = 1,
                    .steps = STEPS,
                    .grad_clip = 0.5,
                    .extra_ini = ini};
        if (n == 4) {
            run_or_fail(&z);
            assert_true(z.flags & PLAIT_OPTIM_OWNS_GRADS);
            assert_true(mean_drift(&z, &ref, 0x1p-9) > 0); /* the slices were rounded */
            zh_run again = {.plugin = "zero1",
                            .model = &uneven,
                            .n = n,
                            .m = 1,
                            .det = 1,
                            .steps = STEPS,
                            .grad_clip = 0.5,
                            .extra_ini = ini,
                            .expect = z.traj}; /* deterministic: the same bits again */
            run_or_fail(&again);
            zh_run_free(&again);
            /* the bf16 slices alone, each rounded up to 8 elements: no
             * running sums at one micro-batch */
            uint64_t S = z.mem0[0].state_bytes / 8;
            assert_true(z.mem0[0].grad_bytes >= 2 * S && z.mem0[0].grad_bytes <= 2 * S + S / 8);
        } else {
            /* deterministic with 2 micro-batches: refused, naming the keys */
            assert_int_not_equal(zh_run_exec(&z), 0);
            assert_non_null(strstr(zh_run_error(&z), "grad_accum = bf16"));
            assert_non_null(strstr(zh_run_error(&z), "deterministic"));
            /* ...said by ops.check before any rank, where it was set */
            assert_non_null(strstr(z.check_err, "zero-test.ini:"));
            assert_non_null(strstr(z.check_err, "[optim.zero1] grad_accum = bf16 with [run] deterministic"));
        }
        zh_run_free(&z);
    }
    zh_run_free(&ref);
    /* 4 micro-batches on each of 2 ranks: the sums of the first 3 in bf16 */
    zh_run dp = {.plugin = "adam", .model = &uneven, .n = 2, .m = 4, .steps = STEPS, .grad_clip = 0.5};
    run_or_fail(&dp);
    zh_run z = {
        .plugin = "zero1", .model = &uneven, .n = 2, .m = 4, .steps = STEPS, .grad_clip = 0.5, .extra_ini = ini};
    run_or_fail(&z);
    assert_true(mean_drift(&z, &dp, 1e-3) > 0); /* the running sums were rounded */
    /* 2 bytes each, the running sums of every gradient (the units'
     * padding too), whose buffer holds the bf16 slices: less than sums
     * and slices side by side would take */
    uint64_t S = z.mem0[0].state_bytes / 8, psi = zh_model_psi(&uneven);
    assert_true(z.mem0[0].grad_bytes >= 2 * psi);
    assert_true(z.mem0[0].grad_bytes < 2 * S + 2 * psi);
    zh_run_free(&z);
    zh_run_free(&dp);
}

/* Every value of the run's exported moments is a bf16 value (its low 16
 * bits clear). */
static int moments_are_bf16(const zh_model *m, const zh_snapshot *s) {
    for (int w = 1; w < ZH_WHICH; w++)
        for (int32_t i = 0; i < m->n_params; i++) {
            if (m->p[i].tied_to >= 0) continue;
            size_t n = zh_numel(&m->p[i]);
            for (size_t e = 0; e < n; e++) {
                uint32_t b;
                memcpy(&b, &s->t[w][i][e], sizeof b);
                if (b & 0xffffu) return 0;
            }
        }
    return 1;
}

static void test_moments_bf16(void **state) {
    (void)state;
    const char *ini = "[optim]\nmoments = bf16\n";
    zh_run ref = {.plugin = "adam",
                  .model = &uneven,
                  .n = 1,
                  .m = 4,
                  .det = 1,
                  .steps = STEPS,
                  .grad_clip = 0.5,
                  .extra_ini = ini};
    run_or_fail(&ref);
    assert_true(ref.final.have_state);
    assert_true(moments_are_bf16(&uneven, &ref.final));
    /* 2 bytes a moment and element */
    assert_int_equal(ref.mem0[0].state_bytes, 2 * 2 * zh_model_psi(&uneven));
    static const int layouts[][2] = {{2, 2}, {4, 1}};
    static const char *const plugins[] = {"adam", "zero1", "zero2", "zero3"};
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++)
        for (int p = 0; p < 4; p++) {
            zh_run z = {.plugin = plugins[p],
                        .model = &uneven,
                        .n = layouts[k][0],
                        .m = layouts[k][1],
                        .det = 1,
                        .steps = STEPS,
                        .grad_clip = 0.5,
                        .extra_ini = ini,
                        .expect = ref.traj};
            run_or_fail(&z);
            assert_same_run(&z, &ref, 1);
            /* this rank's slices of both moments (adam: all), 2 bytes an element */
            uint64_t psi = zh_model_psi(&uneven), S = p ? (psi + z.mem0[0].padding_elems) / (uint64_t)z.n : psi;
            assert_int_equal(z.mem0[0].state_bytes, 2 * 2 * S);
            zh_run_free(&z);
        }
    /* resumed after 3 steps from what the run exported: the same bits */
    zh_run first = {
        .plugin = "zero2", .model = &uneven, .n = 2, .m = 2, .det = 1, .steps = 3, .grad_clip = 0.5, .extra_ini = ini};
    run_or_fail(&first);
    zh_run rest = {.plugin = "zero2",
                   .model = &uneven,
                   .n = 2,
                   .m = 2,
                   .det = 1,
                   .steps = STEPS - 3,
                   .first_step = 3,
                   .grad_clip = 0.5,
                   .extra_ini = ini,
                   .from = &first.final};
    run_or_fail(&rest);
    char why[256];
    if (!zh_snapshot_equal(&uneven, &rest.final, &ref.final, 1, why, sizeof why))
        fail_msg("resumed from bf16 moments: %s", why);
    zh_run_free(&rest);
    zh_run_free(&first);
    /* against float32 moments: close, not equal */
    zh_run f32 = {.plugin = "adam", .model = &uneven, .n = 1, .m = 4, .det = 1, .steps = STEPS, .grad_clip = 0.5};
    run_or_fail(&f32);
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        double d = zh_snapshot_maxrel(&uneven, &ref.traj[s], &f32.traj[s], 1e30) * 1e30;
        /* a moment rounded to 8 bits moves an update by up to 2^-8 of lr */
        if (!(d <= 1e-4 * (s + 1))) fail_msg("step %d: max parameter difference %.3g from float32 moments", s, d);
        if (d > worst) worst = d;
    }
    assert_true(worst > 0);
    zh_run_free(&f32);
    zh_run_free(&ref);
    /* refused beside offload, whose store keeps float32 moments */
    zh_run off = {.plugin = "adam",
                  .model = &uneven,
                  .n = 1,
                  .m = 1,
                  .steps = 1,
                  .extra_ini = "[optim]\nmoments = bf16\noffload = nvme\noffload_path = /tmp\n"};
    assert_int_not_equal(zh_run_exec(&off), 0);
    assert_non_null(strstr(zh_run_error(&off), "moments = bf16 with [optim] offload = nvme"));
    zh_run_free(&off);
}

/* The optimizers' own refusals of [optim] offload's keys, which the core
 * says first before a run (the plugin's ops.check, or its own rule for
 * offload = host: train/preflight.c) but a rank started by another
 * launcher meets here: offload_params where the optimizer keeps
 * every parameter whole, offload = host where the device's memory is the
 * host's (the harness's host: no device of its own). */
static void test_offload_refused(void **state) {
    (void)state;
    static const char *const params = "[optim]\noffload = nvme\noffload_path = /tmp\noffload_params = true\n";
    const struct {
        const char *plugin, *ini, *want;
        int n;
    } cases[] = {
        {"adam", params,
         "zero-test.ini:18: [optim] offload_params = true: the optimizer (adam) keeps every "
         "parameter whole",
         1},
        {"zero1", params,
         "zero-test.ini:18: [optim] offload_params = true: the optimizer (zero1) keeps every "
         "parameter whole",
         2},
        {"adam", "[optim]\noffload = host\n", "offload = host: this device's memory is host memory already", 1},
        {"zero2", "[optim]\noffload = host\n", "offload = host: this device's memory is host memory already", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        zh_run r = {.plugin = cases[k].plugin,
                    .model = &uneven,
                    .n = cases[k].n,
                    .m = 1,
                    .steps = 1,
                    .extra_ini = cases[k].ini};
        if (zh_run_exec(&r) == 0) fail_msg("%s with %s was not refused", cases[k].plugin, cases[k].ini);
        if (!strstr(zh_run_error(&r), cases[k].want))
            fail_msg("%s: refused as '%s', not '%s'", cases[k].plugin, zh_run_error(&r), cases[k].want);
        /* offload_params is the plugin's to say before any rank starts
         * (ops.check); offload = host, the device's */
        if (strstr(cases[k].want, "offload_params") && !strstr(r.check_err, cases[k].want))
            fail_msg("%s: ops.check said '%s', not '%s'", cases[k].plugin, r.check_err, cases[k].want);
        zh_run_free(&r);
    }
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_matches_core),  cmocka_unit_test(test_deterministic_bitwise),
        cmocka_unit_test(test_default_mode_close), cmocka_unit_test(test_zero3_hook_orders),
        cmocka_unit_test(test_small_units),        cmocka_unit_test(test_grad_accum_bf16),
        cmocka_unit_test(test_moments_bf16),       cmocka_unit_test(test_offload_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
