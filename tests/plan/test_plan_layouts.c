/*
 * The layouts of `plait plan`: those the enumeration yields along its axes
 * and its refusals of bad axes and values; the stage costs from the model's
 * shape against the parallel plugin's plans for every layout of 4 ranks;
 * the table's columns; bench sweep's groups of indistinguishable rows.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/bench_sweep.h"
#include "cli/cli.h"
#include "cost/stages.h"
#include "host/host_table.h"
#include "cost/cluster.h"
#include "cost/cost.h"
#include "cost/layouts.h"
#include "cost/table.h"
#include "runtime/error.h"

#include "plan_fixtures.h"

/* plan's table: a layout name longer than the column's default width
 * (interleaved, virtual stages, selective recompute, a bucket) widens the
 * column for every row, so each line, the heading's too, ends at the same
 * character: the numbers stand under their headings */
static void test_table_columns_aligned(void **state) {
    (void)state;
    plait_cost_result r[3];
    memset(r, 0, sizeof r);
    const char *schedules[3] = {"1f1b", "interleaved", "interleaved"};
    for (int i = 0; i < 3; i++) {
        plait_cost_layout *l = &r[i].layout;
        l->dp = 2, l->tp = 1, l->pp = 2, l->chunks = i ? 2 : 1, l->micro_batch = 4, l->recompute = i;
        l->bucket_mb = i == 2 ? 25 : 0;
        snprintf(l->schedule, sizeof l->schedule, "%s", schedules[i]);
        snprintf(l->optim, sizeof l->optim, "zero1");
        snprintf(l->comm, sizeof l->comm, i == 2 ? "verbs" : "tcp");
        r[i].valid = 1, r[i].fits = i != 1, r[i].tokens_per_s = 4413.0 * (i + 1);
        r[i].time.step = 0.232, r[i].mem.total = 27.3 * 1048576.0;
    }
    char name[128];
    plait_cost_layout_name(&r[2].layout, name, sizeof name);
    assert_true(strlen(name) > 44); /* longer than the default column */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_int_equal(plait_cost_print_table(out, r, 3), 2);
    fclose(out);
    size_t width = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "# does not fit", 14) == 0) continue;
        if (!width) {
            assert_non_null(strstr(line, "tokens/s")); /* the heading comes first */
            width = strlen(line);
        }
        if (strlen(line) != width)
            fail_msg("misaligned row (%zu characters, the heading %zu): %s", strlen(line), width, line);
        lines++;
    }
    assert_int_equal(lines, 4);
    free(text);
}

/* rows ranked by median: overlapping spreads share a group */
static void test_sweep_groups(void **state) {
    (void)state;
    plait_sweep_row r[5];
    memset(r, 0, sizeof r);
    const double lo[5] = {95, 92, 80, 70, 69}, med[5] = {100, 96, 85, 72, 71}, hi[5] = {104, 97, 90, 74, 73};
    for (int i = 0; i < 5; i++) {
        r[i].state = 1;
        r[i].n_runs = 3;
        r[i].tokens_min = lo[i];
        r[i].tokens_per_s = med[i];
        r[i].tokens_max = hi[i];
    }
    int g[5];
    /* 1 and 2 overlap (97 >= 95); 3 does not reach 92; 4 and 5 overlap */
    assert_int_equal(plait_sweep_groups(r, 5, g), 3);
    assert_int_equal(g[0], 1);
    assert_int_equal(g[1], 1);
    assert_int_equal(g[2], 3);
    assert_int_equal(g[3], 4);
    assert_int_equal(g[4], 4);
    /* a single run has no spread: it is never called indistinguishable */
    r[1].n_runs = 1;
    assert_int_equal(plait_sweep_groups(r, 5, g), 4);
    assert_int_equal(g[1], 2);
}

static void test_enumerate_default_axes(void **state) {
    (void)state;
    plait_cost_axes a = axes4("dp,tp,pp,schedule");
    plait_cost_layout l[64];
    size_t n = plait_cost_enumerate(&a, l, 64);
    /* dp x tp x pp = 4: (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1);
     * the three with a pipeline once per schedule */
    static const char *const want[] = {"dp1 tp1 pp4 gpipe mb1 adam",
                                       "dp1 tp1 pp4 1f1b mb1 adam",
                                       "dp1 tp1 pp4 interleaved v2 mb1 adam",
                                       "dp1 tp2 pp2 gpipe mb1 adam",
                                       "dp1 tp2 pp2 1f1b mb1 adam",
                                       "dp1 tp2 pp2 interleaved v2 mb1 adam",
                                       "dp1 tp4 pp1 mb8 adam",
                                       "dp2 tp1 pp2 gpipe mb1 adam",
                                       "dp2 tp1 pp2 1f1b mb1 adam",
                                       "dp2 tp1 pp2 interleaved v2 mb1 adam",
                                       "dp2 tp2 pp1 mb4 adam",
                                       "dp4 tp1 pp1 mb2 adam"};
    assert_int_equal(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) {
        char name[128];
        plait_cost_layout_name(&l[i], name, sizeof name);
        assert_string_equal(name, want[i]);
    }
    /* the overrides that make the config into a layout */
    char ov[16][96];
    int k = plait_cost_layout_overrides(&l[5], 8, ov);
    int seen = 0;
    for (int i = 0; i < k; i++)
        seen += !strcmp(ov[i], "parallel.tp=2") + !strcmp(ov[i], "parallel.pp.schedule=interleaved") +
                !strcmp(ov[i], "parallel.pp.virtual_stages=2") + !strcmp(ov[i], "parallel.plugin=hybrid") +
                !strcmp(ov[i], "data.global_batch=8") + !strcmp(ov[i], "data.micro_batch=1");
    assert_int_equal(seen, 6);
}

/* Varied chunks: 2, 4 and 8, and the divisors of a stage's blocks from 3
 * up (whole blocks a virtual stage, as Megatron-LM's recipes' v5, v7, v12):
 * 24 blocks over pp 4 hold 6 a stage (2, 3, 4, 6, 8); over pp 2, 12 (2, 3,
 * 4, 6, 8, 12); a model of unknown depth keeps 2, 4, 8. */
static void test_enumerate_chunks(void **state) {
    (void)state;
    static const int want4[] = {2, 3, 4, 6, 8}, want2[] = {2, 3, 4, 6, 8, 12}, plain[] = {2, 4, 8};
    const struct {
        int pp;
        int64_t layers;
        const int *want;
        size_t n;
    } cases[] = {{4, 24, want4, 5}, {2, 24, want2, 6}, {2, 0, plain, 3}, {4, 22, plain, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        plait_cost_axes a = axes4("chunks");
        plait_cost_axes_values(&a, "schedule", "interleaved");
        a.base.pp = cases[c].pp;
        a.base.dp = 4 / cases[c].pp;
        a.layers = cases[c].layers;
        plait_cost_layout l[32];
        size_t n = plait_cost_enumerate(&a, l, 32);
        if (n != cases[c].n)
            fail_msg("pp %d, %lld blocks: %zu chunk counts, expected %zu", cases[c].pp, (long long)cases[c].layers, n,
                     cases[c].n);
        for (size_t i = 0; i < n; i++) assert_int_equal(l[i].chunks, cases[c].want[i]);
    }
}

static void test_enumerate_bounds_and_optim(void **state) {
    (void)state;
    plait_cost_axes a = axes4("dp,tp,pp,schedule,optim");
    /* ZeRO only where there is DP: 7 layouts with dp = 1 (adam), 4 x 4 with
     * dp = 2, 4 with dp = 4 */
    assert_int_equal(plait_cost_enumerate(&a, NULL, 0), 7 + 16 + 4);
    /* bounds: tp in {1}, pp in {1, 2}, one schedule */
    a = axes4("dp,tp,pp,schedule");
    assert_int_equal(plait_cost_axes_values(&a, "tp", "1"), PLAIT_OK);
    assert_int_equal(plait_cost_axes_values(&a, "pp", "1,2"), PLAIT_OK);
    assert_int_equal(plait_cost_axes_values(&a, "schedule", "1f1b"), PLAIT_OK);
    plait_cost_layout l[8];
    assert_int_equal(plait_cost_enumerate(&a, l, 8), 2);
    assert_true(l[0].dp == 2 && l[0].pp == 2 && !strcmp(l[0].schedule, "1f1b"));
    assert_true(l[1].dp == 4 && l[1].pp == 1);
    /* micro-batches: every divisor of the per-replica batch */
    a = axes4("micro_batch");
    a.base.dp = 2;
    a.ranks = 2;
    assert_int_equal(plait_cost_enumerate(&a, l, 8), 3); /* 4 per replica: 1, 2, 4 */
    /* mistakes name what is allowed */
    assert_int_equal(plait_cost_axes_parse(&a, "dp,tensor"), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "unknown axis 'tensor'"));
    assert_non_null(strstr(plait_last_error(), "micro_batch"));
    assert_int_equal(plait_cost_axes_values(&a, "schedule", "zigzag"), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "gpipe, 1f1b, interleaved"));
    assert_int_equal(plait_cost_axes_values(&a, "tp", "0"), PLAIT_ERR_INVALID_ARG);
}


/* The costs the model's shape gives each pipeline stage are those the
 * parallel plugin's plans give, for every layout of 4 ranks of gpt-small
 * (and in each schedule and recompute mode): in fp32 on the cpu device,
 * and in bf16 on the cuda device, where the layouts without tensor
 * parallelism (zero-bubble's among them) store bf16 activations and a bf16
 * copy of the weights. */
typedef struct small_ctx {
    char *over[4];
    int n;
} small_ctx;

static plait_status load_small(void *ctx, int n, char *const *overrides, plait_config **out) {
    small_ctx *c = ctx;
    char *all[24];
    int k = 0;
    for (int i = 0; i < c->n; i++) all[k++] = c->over[i];
    for (int i = 0; i < n && k < 24; i++) all[k++] = overrides[i];
    return plait_cli_load_config(source_path("configs/gpt-small.ini"), k, all, out);
}

static void test_stages_match_plans(void **state) {
    (void)state;
    plait_host_install();
    char lvl[] = "run.log_level=error";
    small_ctx sc = {.over = {lvl}, .n = 1};
    plait_config *cfg = NULL;
    assert_int_equal(load_small(&sc, 0, NULL, &cfg), PLAIT_OK);
    plait_cost_model *m = NULL;
    assert_int_equal(plait_cost_model_new(cfg, &m), PLAIT_OK);
    plait_cost_axes a = axes4("all");
    a.global_batch = 8;
    plait_cost_layout l[2048];
    size_t n = plait_cost_enumerate(&a, l, 2048);
    assert_true(n > 100 && n <= 2048);
    /* zero-bubble layouts, which the search tries only when asked */
    plait_cost_axes z = axes4("dp,tp,pp,micro_batch,recompute");
    z.global_batch = 8;
    snprintf(z.base.schedule, sizeof z.base.schedule, "zb1");
    const size_t all = n;
    n += plait_cost_enumerate(&z, l + n, 2048 - n);
    assert_true(n > all && n <= 2048);
    plait_cluster c;
    plait_cluster_default(&c);
    c.peak_flops = 1e11;
    plait_cost_ctx x = {.cluster = &c, .global_batch = 8, .load = load_small, .load_ctx = &sc};
    for (int mode = 0; mode < 2; mode++) {
        x.precision = mode ? PLAIT_PRECISION_BF16 : PLAIT_PRECISION_FP32;
        plait_cost_device_planned(cfg, mode, &x.device);
        size_t compared = 0, bf16 = 0, zb1_bf16 = 0;
        for (size_t i = 0; i < n; i++) {
            char why[512];
            if (8 % l[i].dp != 0 || 8 / l[i].dp % l[i].micro_batch != 0 ||
                plait_cost_model_refuses(m, l[i].tp, l[i].pp, l[i].chunks, why, sizeof why))
                continue;
            /* bf16: one in four layouts (every schedule and mode) is enough,
             * and every zero-bubble one (the split backward's stash) */
            if (mode && i % 4 && i < all) continue;
            plait_cost_rank shape[4], plan[4];
            plait_cost_result r;
            assert_int_equal(plait_cost_model_stages(m, &l[i], 8, x.precision, &x.device, shape), 0);
            assert_int_equal(plait_cost_evaluate_stages(&l[i], &x, &r, plan, 4), PLAIT_OK);
            char name[128];
            plait_cost_layout_name(&l[i], name, sizeof name);
            if (!r.valid) fail_msg("%s: the plugin refused what the shape allowed: %s", name, r.why);
            for (int s = 0; s < l[i].pp; s++) {
#define SAME(f)                                                                                                        \
    if (fabs((double)shape[s].f - (double)plan[s].f) > 1e-9 * fabs((double)plan[s].f))                                 \
    fail_msg("%s %s stage %d: %s %g from the shape, %g from the plan", mode ? "bf16" : "fp32", name, s, #f,            \
             (double)shape[s].f, (double)plan[s].f)
                SAME(param_numel);
                SAME(largest_layer_numel);
                SAME(largest_tensor_numel);
                SAME(tensors);
                SAME(flops);
                SAME(recompute_flops);
                SAME(act_bytes);
                SAME(bf16);
                SAME(weight_copy_numel);
                SAME(largest_copy_numel);
                SAME(tp_msgs);
                SAME(tp_msg_elems);
                SAME(pp_msgs);
                SAME(bubble);
#undef SAME
                bf16 += plan[s].bf16;
            }
            /* the grant follows the model's rule: every tp, no cp */
            int granted = mode && l[i].cp <= 1;
            zb1_bf16 += mode && granted && strcmp(l[i].schedule, "zb1") == 0;
            if (plan[0].bf16 != granted)
                fail_msg("%s %s: bf16 activations %d, the model's rule says %d", mode ? "bf16" : "fp32", name,
                         plan[0].bf16, granted);
            compared++;
        }
        assert_true(compared > (mode ? 25u : 100u));
        assert_true(mode ? bf16 > 10 : bf16 == 0);
        assert_true(!mode || zb1_bf16 > 0); /* the split backward's stash among them */
    }
    plait_cost_model_free(m);
    plait_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_groups),           cmocka_unit_test(test_table_columns_aligned),
        cmocka_unit_test(test_enumerate_default_axes), cmocka_unit_test(test_enumerate_bounds_and_optim),
        cmocka_unit_test(test_enumerate_chunks),       cmocka_unit_test(test_stages_match_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
