/*
 * Expert parallelism in the cost model against hand-computed cases: the
 * all-to-alls on the ep group's link, the experts' gradients reduced over
 * edp (dp x cp / ep) instead of dp x cp, a rank's experts' parameters
 * divided by ep and the rows it holds for other ranks' tokens.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "cost/activations.h"
#include "cost/cluster.h"
#include "cost/cost.h"
#include "cost/layouts.h"
#include "cost/stages.h"
#include "host/host_table.h"
#include "runtime/error.h"

#include "plan_fixtures.h"

static char *source_path(const char *rel) {
    static char buf[1024];
    const char *src = getenv("PLAIT_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", src ? src : ".", rel);
    return buf;
}

/* Four ranks, one node: 8 all-to-alls of 3 sends each at 10 us, 1 MB at
 * 1 GB/s on the critical path; the experts' 1e5 of the 1e6 parameters
 * reduced over edp = 4 / ep. */
static void test_ep_step_time(void **state) {
    (void)state;
    plait_cluster cl = gpu_cluster();
    cl.intra.bandwidth = 1e9;
    cl.intra.latency = 1e-5;
    plait_cost_rank st = {.dp = 4,
                          .tp = 1,
                          .pp = 1,
                          .micro_batches = 1,
                          .chunks = 1,
                          .param_numel = 1e6,
                          .largest_layer_numel = 1e5,
                          .flops = 1e9,
                          .ep = 4,
                          .ep_msgs = 8,
                          .ep_bytes = 1e6,
                          .expert_numel = 1e5};
    plait_cost_job j = {.dp = 4, .tp = 1, .pp = 1, .ep = 4, .bucket_bytes = 1e9, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t4, t1;
    plait_cost_step_time(&st, &j, &cl, &t4);
    NEAR(t4.ep_s, 8 * 3 * 1e-5 + 1e6 / 1e9);
    NEAR(t4.ep_bytes, 1e6);
    assert_string_equal(t4.ep_link, cl.intra.kind);
    /* edp = 1: only the dense 9e5 parameters' gradients are all-reduced */
    NEAR(t4.dp_bytes, 2.0 * 3 / 4 * 4 * 9e5);
    /* ep 2: edp = 2 reduces the experts' gradients too, 2(n-1)/n of them */
    j.ep = st.ep = 2;
    plait_cost_step_time(&st, &j, &cl, &t1);
    NEAR(t1.ep_s, 8 * 1e-5 + 1e6 / 1e9);
    NEAR(t1.dp_bytes, 2.0 * 3 / 4 * 4 * 9e5 + 2.0 * 1 / 2 * 4 * 1e5);
    /* ep 1: no all-to-all, every gradient over the four */
    j.ep = st.ep = 1;
    plait_cost_step_time(&st, &j, &cl, &t1);
    NEAR(t1.ep_s, 0.0);
    assert_null(t1.ep_link);
    NEAR(t1.dp_bytes, 2.0 * 3 / 4 * 4 * 1e6);
    /* the all-to-alls are in the step's communication */
    assert_true(t4.comm >= t4.ep_s);
    NEAR(t4.step, t4.compute + t4.comm + t4.idle + t4.optim);
}

/* configs/moe-tiny.ini: 4 sparse blocks of 8 GPT experts, each c_fc and
 * c_proj of 64 x 128 and their biases (16576 elements), k 2, T 64. */
static void test_ep_stages(void **state) {
    (void)state;
    plait_host_install();
    char lvl[] = "run.log_level=error", gb[] = "data.global_batch=8";
    char *over[] = {lvl, gb};
    plait_config *cfg = NULL;
    assert_int_equal(plait_cli_load_config(source_path("configs/moe-tiny.ini"), 2, over, &cfg), PLAIT_OK);
    plait_cost_model *m = NULL;
    assert_int_equal(plait_cost_model_new(cfg, &m), PLAIT_OK);
    plait_cost_device dev;
    plait_cost_device_planned(cfg, 0, &dev);
    plait_cost_layout l = {.dp = 4, .tp = 1, .pp = 1, .chunks = 1, .micro_batch = 2, .optim = "adam", .comm = "tcp"};
    plait_cost_rank one, two;
    assert_int_equal(plait_cost_model_stages(m, &l, 8, PLAIT_PRECISION_FP32, &dev, &one), 0);
    l.ep = 2;
    assert_int_equal(plait_cost_model_stages(m, &l, 8, PLAIT_PRECISION_FP32, &dev, &two), 0);
    const double experts = 4 * 8 * 16576.0;
    NEAR(one.param_numel - two.param_numel, experts / 2);
    NEAR(two.expert_numel, experts / 2);
    NEAR(one.ep_bytes, 0.0);
    /* as `plait config check configs/moe-tiny.ini parallel.dp=4
     * parallel.ep=2 data.global_batch=8` prints it: per block 4 trades of
     * half the 128 tokens' 2 routes, 64 float32 wide, and 4 counts */
    NEAR(two.ep_bytes, 4 * (4 * 128 * 2 / 2.0 * 64 * 4 + 4 * 4));
    NEAR(two.ep_bytes, 524352.0);
    NEAR(two.ep_msgs, 4 * 4.0);
    /* the held rows: 256 rows of 2·64 + 3·128 floats and 8 counts a block,
     * one micro-batch alive */
    NEAR(two.act_bytes - one.act_bytes, 4.0 * 4 * (256 * (2 * 64 + 3 * 128) + 8));
    plait_cost_model_free(m);
    plait_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ep_step_time),
        cmocka_unit_test(test_ep_stages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
