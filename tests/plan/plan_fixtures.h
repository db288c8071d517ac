/*
 * What the cost model's unit tests share (tests/plan/test_plan*.c): a small
 * GPU cluster, the axes of a 4-rank search, a relative comparison, the path
 * of a file of the source tree.
 */
#ifndef PLAIT_TESTS_PLAN_FIXTURES_H
#define PLAIT_TESTS_PLAN_FIXTURES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cluster.h"
#include "cost/cost.h"
#include "cost/layouts.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-15)

/* 1 node of 2 GPUs: 1 TFLOP/s at half efficiency, 100 GB/s memory, links of
 * 10 GB/s and 10 us */
static inline plait_cluster gpu_cluster(void) {
    return (plait_cluster){.nodes = 1,
                           .gpu = 1,
                           .units_per_node = 2,
                           .memory = 1e10,
                           .peak_flops = 1e12,
                           .efficiency = 0.5,
                           .peak_bf16 = 4e12,
                           .efficiency_bf16 = 0.5,
                           .memory_bandwidth = 1e11,
                           .intra = {.kind = "nvlink", .bandwidth = 1e10, .latency = 1e-5},
                           .inter = {.kind = "none", .bandwidth = 1e9, .latency = 1e-5}};
}

/* the axes of a 4-rank search of 8 sequences over LIST (plait_cost_axes_parse) */
static inline plait_cost_axes axes4(const char *list) {
    plait_cost_axes a;
    memset(&a, 0, sizeof a);
    a.ranks = 4;
    a.global_batch = 8;
    a.base =
        (plait_cost_layout){.dp = 1, .tp = 1, .pp = 1, .schedule = "1f1b", .chunks = 1, .optim = "adam", .comm = "tcp"};
    assert_int_equal(plait_cost_axes_parse(&a, list), PLAIT_OK);
    return a;
}

/* REL under the source tree (PLAIT_SOURCE_DIR, which ctest sets; else the
 * working directory), in a buffer the next call overwrites */
static inline char *source_path(const char *rel) {
    static char buf[1024];
    const char *src = getenv("PLAIT_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", src ? src : ".", rel);
    return buf;
}

#endif
