/*
 * The cost model of `plait plan` against hand-computed cases: the
 * alpha-beta link times, the bubble formula, memory by the ZeRO formulas,
 * the step time of a pipeline on GPUs and of ranks sharing CPU cores;
 * Spearman's rho; the layouts the enumeration yields; CLUSTER.ini parsing
 * (the shipped examples and errors with FILE:LINE and the allowed values).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

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


static void test_link_formulas(void **state) {
    (void)state;
    plait_link l = {.bandwidth = 1e9, .latency = 1e-5};
    /* ring all-reduce of 4 MB over 4 ranks: 6 steps of 1 MB */
    NEAR(plait_cost_allreduce_s(&l, 4, 4e6), 6 * (1e-5 + 1e-3));
    NEAR(plait_cost_gather_s(&l, 4, 4e6), 3 * (1e-5 + 1e-3));
    NEAR(plait_cost_p2p_s(&l, 4e6), 1e-5 + 4e-3);
    assert_true(plait_cost_allreduce_s(&l, 1, 4e6) == 0);
    assert_true(plait_cost_gather_s(&l, 1, 4e6) == 0);
}

static void test_bubble(void **state) {
    (void)state;
    NEAR(plait_cost_bubble("1f1b", 4, 8, 1), 3.0 / 11.0);
    NEAR(plait_cost_bubble("gpipe", 4, 8, 1), 3.0 / 11.0);
    NEAR(plait_cost_bubble("interleaved", 4, 8, 2), 3.0 / 19.0);
    NEAR(plait_cost_bubble("1f1b", 2, 1, 1), 0.5);
    /* interleaved with fewer micro-batches than stages: (v(p-m)+m-1)/(vp+m-1) */
    NEAR(plait_cost_bubble("interleaved", 4, 2, 2), (2.0 * 2 + 1) / (8.0 + 1));
    /* zb1: the weight halves fill two thirds of 1F1B's bubble */
    NEAR(plait_cost_bubble("zb1", 4, 8, 1), 3.0 / 27.0);
    NEAR(plait_cost_bubble("zb1", 4, 2, 1), 5.0 / 11.0);
    assert_true(plait_cost_bubble("1f1b", 1, 8, 1) == 0);
}

/* the bytes per element of each kind of state plait stores: float32
 * parameters, gradients and moments in every precision, a bf16 copy of the
 * weights under bf16 activations, float32 messages */
static void test_stored_bytes(void **state) {
    (void)state;
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    assert_true(b.weight == 4 && b.weight_copy == 2 && b.grad == 4 && b.optim == 8 && b.message == 4);
    assert_true(b.adam_io == 28 && b.copy_io == 6);
}

static void test_memory_zero_formulas(void **state) {
    (void)state;
    plait_cost_rank r = {.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1, .param_numel = 1e6,
                         .largest_layer_numel = 2e5, .act_bytes = 1e7};
    plait_cost_job j = {.dp = 4, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_mem m;
    /* plain DP: 16 bytes per parameter, a bucket (the whole 4 MB gradient)
     * of collective scratch plus a quarter */
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.param + m.grad + m.state, 16e6);
    NEAR(m.activations, 1e7);
    NEAR(m.buffers, 5e6);
    NEAR(m.total, 16e6 + 1e7 + 5e6 + 1e6);
    /* ZeRO-1: 8Ψ + 8Ψ/N; two units of 0.8 MB and their shards */
    j.zero = 1;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.param + m.grad + m.state, 8e6 + 8e6 / 4);
    NEAR(m.buffers, 2 * (8e5 + 2e5));
    NEAR(m.total, 10e6 + 1e7 + 2e6 + 1e6);
    /* gathering bf16 weights, ZeRO-1 keeps its float32 shard as the master copy */
    r.param_wire = 0.5;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.param, 4e6 + 4e6 / 4);
    r.param_wire = 0;
    /* ZeRO-2: 4Ψ + 12Ψ/N; a layer's gradients and two units */
    j.zero = 2;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.param + m.grad + m.state, 4e6 + 12e6 / 4);
    NEAR(m.buffers, 3 * 8e5);
    /* ZeRO-3: 16Ψ/N; plus the running and the prefetched layer */
    j.zero = 3;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.param + m.grad + m.state, 16e6 / 4);
    NEAR(m.buffers, 5 * 8e5);
    NEAR(m.total, 4e6 + 1e7 + 4e6 + 1e6);
    /* a bf16 run whose model stores bf16 activations: the same float32
     * state, plus 2 bytes an element of the weights' bf16 copy, whole
     * under every ZeRO stage; the activations as the rank counted them */
    j.precision = PLAIT_PRECISION_BF16;
    r.bf16 = 1;
    r.weight_copy_numel = 9e5;
    j.zero = 0;
    plait_cost_memory(&r, &j, 0, &m);
    NEAR(m.param, 4e6 + 1.8e6);
    NEAR(m.grad, 4e6);
    NEAR(m.state, 8e6);
    NEAR(m.activations, 1e7);
    j.zero = 1;
    plait_cost_memory(&r, &j, 0, &m);
    NEAR(m.param + m.grad + m.state, 8e6 + 8e6 / 4 + 1.8e6);
    j.zero = 3;
    plait_cost_memory(&r, &j, 0, &m);
    NEAR(m.param, 4e6 / 4 + 1.8e6);
    NEAR(m.param + m.grad + m.state, 16e6 / 4 + 1.8e6);
    /* TP: the largest TP all-reduce (float32) sets the scratch */
    plait_cost_rank t = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1, .param_numel = 1e6, .tp_msgs = 10,
                         .tp_msg_elems = 5e5};
    plait_cost_job jt = {.dp = 1, .tp = 2, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_BF16};
    plait_cost_memory(&t, &jt, 0, &m);
    NEAR(m.buffers, 2.5e6);
}

static void test_time_pipeline_on_gpus(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    /* pp = 2, m = 4: each stage 1e11 FLOPs at 1e12 x 0.5 = 0.2 s, 4 sends of
     * 1 MB at 10 GB/s + 10 us; the bubble 1/5 stretches the busy time by
     * 1/(1 - 1/5); AdamW moves 28 bytes per parameter at 100 GB/s */
    plait_cost_rank r[2];
    for (int i = 0; i < 2; i++)
        r[i] = (plait_cost_rank){.dp = 1, .tp = 1, .pp = 2, .stage = i, .micro_batches = 4, .chunks = 1,
                                 .param_numel = 1e6, .flops = 1e11, .pp_msgs = 4, .pp_msg_elems = 2.5e5, .bubble = 0.2};
    plait_cost_job j = {.dp = 1, .tp = 1, .pp = 2, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    plait_cost_step_time(r, &j, &c, &t);
    double pp = 4 * (1e-5 + 1e6 / 1e10), span = (0.2 + pp) / 0.8;
    NEAR(t.compute, 0.2);
    NEAR(t.comm, pp);
    NEAR(t.idle, span - 0.2 - pp);
    NEAR(t.optim, 28e6 / 1e11);
    NEAR(t.step, span + 28e6 / 1e11);
    NEAR(t.pp_bytes, 4e6);
    /* in bf16: the bf16 rate (4x), the same float32 messages, AdamW's 28
     * bytes a parameter and the bf16 copy of 0.9M weights made again (6
     * bytes an element) */
    j.precision = PLAIT_PRECISION_BF16;
    for (int i = 0; i < 2; i++) r[i].bf16 = 1, r[i].weight_copy_numel = 9e5;
    plait_cost_step_time(r, &j, &c, &t);
    NEAR(t.compute, 0.05);
    NEAR(t.comm, pp);
    NEAR(t.optim, (28e6 + 5.4e6) / 1e11);
    NEAR(t.step, (0.05 + pp) / 0.8 + (28e6 + 5.4e6) / 1e11);
    NEAR(t.pp_bytes, 4e6);
    /* a bf16 run over a comm plugin that sends bf16 (tcp, verbs): the
     * sends take half the bytes, nothing else changes */
    plait_cost_layout l = {.dp = 1, .tp = 1, .pp = 2, .comm = "tcp"};
    plait_cost_ctx x = {.precision = PLAIT_PRECISION_BF16};
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 2);
    plait_cost_step_time(r, &j, &c, &t);
    double half = 4 * (1e-5 + 5e5 / 1e10);
    NEAR(t.compute, 0.05);
    NEAR(t.comm, half);
    NEAR(t.step, (0.05 + half) / 0.8 + (28e6 + 5.4e6) / 1e11);
    NEAR(t.pp_bytes, 2e6);
    /* nccl's tp and pipeline messages stay float32, as do a float32 run's */
    snprintf(l.comm, sizeof l.comm, "nccl");
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 0);
    snprintf(l.comm, sizeof l.comm, "tcp");
    x.precision = PLAIT_PRECISION_FP32;
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 0);
}

/* A GPU's rate by its products' width: w / (w + half_width) of it, the
 * compute and its recomputed share slowed alike; no change without a
 * half width or on a CPU node. */
static void test_time_width(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    plait_cost_rank r = {.dp = 1,
                         .tp = 1,
                         .pp = 1,
                         .micro_batches = 1,
                         .chunks = 1,
                         .param_numel = 1e6,
                         .flops = 1e11,
                         .recompute_flops = 2e10,
                         .width = 768};
    plait_cost_job j = {.dp = 1, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 0.2);
    c.half_width = 256;
    NEAR(plait_cost_width_share(&c, 768), 0.75);
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 0.2 / 0.75);
    NEAR(t.recompute, 0.04 / 0.75);
    NEAR(t.step, 0.2 / 0.75 + 28e6 / 1e11);
    r.width = 0; /* not known: the whole rate */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 0.2);
    c.gpu = 0;
    assert_true(plait_cost_width_share(&c, 768) == 1);
}

/* two nodes of 4 GPUs, each GPU with a 10 GB/s NIC, the nodes' NICs
 * together 20 GB/s: a DP all-reduce across the nodes, flat and hierarchical */
static void test_time_hierarchy(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    c.nodes = 2;
    c.units_per_node = 4;
    c.intra = (plait_link){.kind = "nvlink", .bandwidth = 1e11, .latency = 0};
    c.inter = (plait_link){.kind = "infiniband", .bandwidth = 1e10, .latency = 0};
    c.inter_node_bandwidth = 2e10;
    plait_cost_rank r = {.dp = 8, .tp = 1, .pp = 1, .micro_batches = 1, .param_numel = 2e8, .flops = 0};
    plait_cost_job j = {.dp = 8, .tp = 1, .pp = 1, .bucket_bytes = 1e12, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    /* the 4 ranks of a node share 20 GB/s: 5 GB/s each; a flat ring of 8
     * over the network: 2 x 7 x (800 MB / 8) / 5 GB/s */
    plait_cost_step_time(&r, &j, &c, &t);
    double S = 8e8;
    NEAR(t.dp_inter, 2 * 7 * (S / 8) / 5e9);
    assert_true(t.dp_intra == 0);
    assert_string_equal(t.dp_link, "infiniband");
    assert_false(t.dp_hierarchical);
    /* hierarchical: reduce-scatter among the node's 4 on NVLink, an
     * all-reduce of a quarter between the 2 nodes, all-gather back */
    j.hierarchical = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_intra, 2 * 3 * (S / 4) / 1e11);
    NEAR(t.dp_inter, 2 * 1 * (S / 4 / 2) / 5e9);
    assert_true(t.dp_hierarchical);
    /* tp 4 stays on a node's NVLink; tp 8 would cross */
    plait_cluster_link(&c, 8, 4, 1);
    assert_ptr_equal(plait_cluster_link(&c, 8, 4, 1), &c.intra);
    assert_ptr_equal(plait_cluster_link(&c, 8, 8, 1), &c.inter);
    /* a node's share: the NIC when few ranks send, the node's total / ranks when all do */
    NEAR(plait_cluster_inter_share(&c, 1), 1e10);
    NEAR(plait_cluster_inter_share(&c, 4), 5e9);
}

/* one node of 2 cores computing 2e11 FLOP/s together */
static plait_cluster cpu_cluster(void) {
    plait_cluster c = gpu_cluster();
    c.gpu = 0;
    c.units_per_node = 2;
    c.peak_flops = 2e11;
    c.efficiency = 1;
    c.memory_bandwidth = 1e10;
    return c;
}

static void test_time_shared_cpu_cores(void **state) {
    (void)state;
    plait_cluster c = cpu_cluster(); /* 4 ranks: each alone gets 1 core */
    c.intra = (plait_link){.kind = "shm", .bandwidth = 1e9, .latency = 1e-5};
    plait_cost_rank r = {.dp = 4, .tp = 1, .pp = 1, .micro_batches = 1, .chunks = 1, .param_numel = 1e6,
                         .flops = 1e11};
    plait_cost_job j = {.dp = 4, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    plait_cost_step_time(&r, &j, &c, &t);
    /* alone a rank would take 1 s, but the node does 4e11 FLOPs at 2e11/s:
     * 2 s, and its one micro-batch streams its 4 MB of weights three times
     * through the node's 10 GB/s (stream); the 4 MB gradient is one bucket,
     * the last, so its all-reduce is not hidden; the four ranks' AdamW
     * share the node's bandwidth */
    double ar = 6 * (1e-5 + 1e6 / 1e9), stream = 4 * 3 * 4e6 / 1e10;
    NEAR(t.compute, 2.0 + stream);
    NEAR(t.comm, ar);
    NEAR(t.optim, 4 * 28e6 / 1e10);
    NEAR(t.step, 2.0 + stream + ar + 4 * 28e6 / 1e10);
    /* the same FLOPs in 4 micro-batches stream the weights 4 times */
    r.micro_batches = 4;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 2.0 + 4 * stream);
    r.micro_batches = 1;
    NEAR(t.dp_bytes, 2.0 * 3 / 4 * 4e6);
    assert_true(t.shared_cores);
    /* with a 1 MB bucket nothing hides: the four ranks fill the 2 cores,
     * so the copies of the 3 buckets before the last take them from the
     * backward pass; each bucket pays the ring's latency */
    j.bucket_bytes = 1e6;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.comm, 6 * (4 * 1e-5 + 1e6 / 1e9));
    /* on 10 cores the four ranks get 2 threads each and leave 2 cores
     * free: 3 of the 4 MB hide behind the backward pass. A rank alone
     * computes at 2e11 / 10 x 2: 2.5 s, more than the node's 2 s */
    c.units_per_node = 10;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.comm, 6 * (1e-5 + 0.25e6 / 1e9));
    NEAR(t.compute, 2.5 + 3 * 4e6 / (1e10 / 10 * 2));
    c.units_per_node = 2;
    /* bf16 gradients: half the bytes and the all-reduce's bandwidth term;
     * ZeRO-2 gathers its parameters in float32 unless param_gather says
     * bf16, ZeRO-3 likewise */
    r.grad_wire = 0.5;
    j.bucket_bytes = 25e6;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_bytes, 2.0 * 3 / 4 * 4e6 * 0.5);
    NEAR(t.comm, 6 * (1e-5 + 0.5e6 / 1e9));
    j.zero = 2;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_bytes, 3.0 / 4 * 4e6 * 1.5);
    r.param_wire = 0.5;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_bytes, 3.0 / 4 * 4e6 * 1.0);
    j.zero = 3;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_bytes, 3.0 / 4 * 4e6 * 1.5);
}

/* a CPU rank's rate at the rows of its micro-batch: rows / (rows + h) of
 * the large-batch rate */
static void test_time_cpu_rows(void **state) {
    (void)state;
    plait_cluster c = cpu_cluster();
    c.half_rows = 16;
    plait_cost_rank r = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1, .chunks = 1, .flops = 1e11, .rows = 16};
    plait_cost_job j = {.dp = 1, .tp = 2, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    /* 2 x 1e11 FLOPs on the node at 2e11/s, at 16 rows half of it: 2 s */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 2.0);
    r.rows = 48; /* 48 / 64 of the rate */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 1.0 * 64 / 48);
    /* a GPU's rate does not depend on them (nor reads half_rows) */
    c.gpu = 1;
    c.units_per_node = 8;
    c.peak_flops = 1e11;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 1.0);
}

/* a pipeline on a CPU node whose ranks are limited to one thread each */
static void test_time_cpu_pipeline(void **state) {
    (void)state;
    plait_cluster c = cpu_cluster();
    plait_cost_rank st[4];
    for (int s = 0; s < 4; s++)
        st[s] = (plait_cost_rank){.dp = 1, .tp = 1, .pp = 2, .stage = s, .micro_batches = 4, .chunks = 1,
                                  .flops = 1e11, .bubble = plait_cost_bubble("1f1b", 2, 4, 1)};
    plait_cost_job j = {.dp = 1, .tp = 1, .pp = 2, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    /* 2 ranks on 2 cores, a core each: 1 s of compute a stage (4 slots of
     * 0.25 s) and the bubble's slot: 1.25 s. No idle core to lend to the
     * busy stage, which cannot use a second one */
    plait_cost_step_time(st, &j, &c, &t);
    NEAR(t.compute, 1.0);
    NEAR(t.idle, 0.25);
    NEAR(t.step, 1.25);
    NEAR(t.bubble, 0.2);
    /* 4 stages of 0.5e11 FLOPs on the 2 cores, 4 micro-batches, bubble
     * 3/7: S = 4 busy slots a rank of 0.125 s alone; filling and draining
     * 1, 2, 3 busy stages (3 share 2 cores: x 1.5) twice, 1 slot of all 4
     * (x 2): (2 x (1 + 1 + 1.5) + 2) x 0.125 = 1.125 s against the node's
     * 1 s of work */
    j.pp = 4;
    for (int s = 0; s < 4; s++) {
        st[s].pp = 4;
        st[s].flops = 0.5e11;
        st[s].bubble = plait_cost_bubble("1f1b", 4, 4, 1);
    }
    plait_cost_step_time(st, &j, &c, &t);
    NEAR(t.compute, 1.0);
    NEAR(t.idle, 0.125);
    NEAR(t.step, 1.125);
    /* one stage with all the work: it runs alone on its core through its 4
     * micro-batches (1 s), the others' filling and draining cost nothing */
    for (int s = 0; s < 4; s++) st[s].flops = s == 2 ? 1e11 : 0;
    plait_cost_step_time(st, &j, &c, &t);
    NEAR(t.step, 1.0);
}

static void test_spearman(void **state) {
    (void)state;
    double x[5] = {1, 2, 3, 4, 5}, up[5] = {10, 20, 30, 40, 50}, down[5] = {5, 4, 3, 2, 1}, tie[5] = {5, 6, 7, 8, 7};
    NEAR(plait_spearman(x, up, 5), 1.0);
    NEAR(plait_spearman(x, down, 5), -1.0);
    /* ranks of tie: 1, 2, 3.5, 5, 3.5 -> rho = 8 / sqrt(10 x 9.5) */
    NEAR(plait_spearman(x, tie, 5), 8.0 / sqrt(95.0));
}

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
        if (strlen(line) != width) fail_msg("misaligned row (%zu characters, the heading %zu): %s", strlen(line), width, line);
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
    static const char *const want[] = {
        "dp1 tp1 pp4 gpipe mb1 adam", "dp1 tp1 pp4 1f1b mb1 adam", "dp1 tp1 pp4 interleaved v2 mb1 adam",
        "dp1 tp2 pp2 gpipe mb1 adam", "dp1 tp2 pp2 1f1b mb1 adam", "dp1 tp2 pp2 interleaved v2 mb1 adam",
        "dp1 tp4 pp1 mb8 adam",       "dp2 tp1 pp2 gpipe mb1 adam", "dp2 tp1 pp2 1f1b mb1 adam",
        "dp2 tp1 pp2 interleaved v2 mb1 adam", "dp2 tp2 pp1 mb4 adam", "dp4 tp1 pp1 mb2 adam"};
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

static char *source_path(const char *rel) {
    static char buf[1024];
    const char *src = getenv("PLAIT_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", src ? src : ".", rel);
    return buf;
}

static void test_cluster_examples(void **state) {
    (void)state;
    plait_cluster c;
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100.ini"), &c), PLAIT_OK);
    assert_true(c.gpu && c.nodes == 1 && c.units_per_node == 8);
    NEAR(c.memory, 80.0 * 1024 * 1024 * 1024);
    NEAR(c.peak_flops, 19.5e12);
    NEAR(c.intra.bandwidth, 300e9);
    assert_string_equal(c.intra.kind, "nvlink");
    assert_int_equal(plait_cluster_check_ranks(&c, 8), PLAIT_OK);
    assert_int_equal(plait_cluster_check_ranks(&c, 16), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100-2node.ini"), &c), PLAIT_OK);
    assert_true(c.nodes == 2 && !strcmp(c.inter.kind, "infiniband"));
    NEAR(c.inter.bandwidth, 25e9);
    /* 16 ranks, tp innermost: a TP group of 8 stays on NVLink, the DP pair
     * of ranks 8 apart crosses the network */
    assert_ptr_equal(plait_cluster_link(&c, 16, 8, 1), &c.intra);
    assert_ptr_equal(plait_cluster_link(&c, 16, 2, 8), &c.inter);
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/this-machine.ini"), &c), PLAIT_OK);
    assert_true(!c.gpu && c.units_per_node >= 1 && c.memory > 0 && c.peak_flops == 0);
}

/* the precision a cluster plans in, and its rate in it */
static void test_cluster_precision(void **state) {
    (void)state;
    plait_cluster c;
    double rate;
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100.ini"), &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_BF16);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_OK);
    NEAR(rate, 312e12 * 0.55);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_FP32, &rate), PLAIT_OK);
    NEAR(rate, 19.5e12 * 0.6);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_TF32, &rate), PLAIT_OK);
    NEAR(rate, 156e12 * 0.6); /* no tf32_efficiency: the fp32 one */
    /* a CPU node plans in fp32; bf16 without a bf16 peak is its fp32 rate */
    assert_int_equal(plait_cluster_parse("cpu.ini", "[node]\ncores = 2\npeak_gflops = 100\n", &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_FP32);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_OK);
    NEAR(rate, 100e9 * 0.8);
    /* a GPU cluster without the rate of its precision: the file and the key */
    const char *gpu = "[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 19500\n";
    assert_int_equal(plait_cluster_parse("gpu.ini", gpu, &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_BF16);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpu.ini: [node] bf16_peak_gflops is not given"));
    /* precision = fp32 in the file plans it in fp32 */
    assert_int_equal(plait_cluster_parse("gpu.ini", "[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 19500\n"
                                                    "precision = fp32\n", &c),
                     PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_FP32);
    /* a file that sets no key (empty, comments, a header alone): refused
     * naming it, not planned as this machine under its name */
    assert_int_equal(plait_cluster_parse("empty.ini", "", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "empty.ini: the cluster file sets no key"));
    assert_int_equal(plait_cluster_parse("comments.ini", "# nodes = 2\n; [node]\n\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "comments.ini: the cluster file sets no key"));
    assert_int_equal(plait_cluster_parse("header.ini", "[node]\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "header.ini: the cluster file sets no key"));
    /* GPUs without kind = gpu: refused naming the line, not planned as
     * this machine's cores */
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\ngpus = 8\nmemory = 80G\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpus.ini:2: [node] gpus describes GPU nodes, but [node] kind is "
                                               "cpu (the default): add kind = gpu"));
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\nkind = cpu\ngpus = 8\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "kind is cpu (gpus.ini:2)"));
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\ngpus = 0\n", &c), PLAIT_ERR_INVALID_CONFIG);
    /* and cores on GPU nodes */
    assert_int_equal(plait_cluster_parse("cores.ini",
                                         "[node]\nkind = gpu\ngpus = 8\ncores = 64\nmemory = 80G\n"
                                         "peak_gflops = 19500\n",
                                         &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "cores.ini:4: [node] cores describes CPU nodes, but [node] kind is gpu "
                                               "(cores.ini:2): leave it out"));
    /* the GPUs' rate by product width on CPU nodes */
    assert_int_equal(plait_cluster_parse("width.ini", "[node]\ncores = 4\nhalf_rate_width = 650\n", &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "width.ini:3: [node] half_rate_width describes GPU nodes"));
    /* one key is enough: the rest default */
    assert_int_equal(plait_cluster_parse("one.ini", "[cluster]\nnodes = 1\n", &c), PLAIT_OK);
    /* a wrong precision: FILE:LINE and the allowed values */
    assert_int_equal(plait_cluster_parse("gpu.ini", "[node]\nprecision = fp8\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpu.ini:2"));
    assert_non_null(strstr(plait_last_error(), "bf16"));
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
#define SAME(f)                                                                                                      \
    if (fabs((double)shape[s].f - (double)plan[s].f) > 1e-9 * fabs((double)plan[s].f))                                \
    fail_msg("%s %s stage %d: %s %g from the shape, %g from the plan", mode ? "bf16" : "fp32", name, s, #f,           \
             (double)shape[s].f, (double)plan[s].f)
                SAME(param_numel);
                SAME(largest_layer_numel);
                SAME(flops);
                SAME(recompute_flops);
                SAME(act_bytes);
                SAME(bf16);
                SAME(weight_copy_numel);
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

static void test_cluster_errors(void **state) {
    (void)state;
    char path[] = "/tmp/plait-cluster-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "[cluster]\nnodes = 2\n[node]\nkind = tpu\nefficiency = 2\n[intra]\nbandwith = 3\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    plait_cluster c;
    assert_int_equal(plait_cluster_load(path, &c), PLAIT_ERR_INVALID_CONFIG);
    const char *e = plait_last_error();
    char want[1100];
    snprintf(want, sizeof want, "%s:4", path); /* kind = tpu, with the allowed kinds */
    assert_non_null(strstr(e, want));
    assert_non_null(strstr(e, "cpu"));
    assert_non_null(strstr(e, "gpu"));
    snprintf(want, sizeof want, "%s:5", path); /* efficiency out of range */
    assert_non_null(strstr(e, want));
    snprintf(want, sizeof want, "%s:7", path); /* a misspelt key */
    assert_non_null(strstr(e, want));
    assert_non_null(strstr(e, "bandwidth"));
    /* two nodes need a network */
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "[cluster]\nnodes = 2\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(plait_cluster_load(path, &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "[inter]"));
    unlink(path);
    assert_int_equal(plait_cluster_load("/nonexistent/cluster.ini", &c) == PLAIT_OK, 0);
    assert_non_null(strstr(plait_last_error(), "/nonexistent/cluster.ini"));
}

static void test_fit_comm(void **state) {
    (void)state;
    char path[] = "/tmp/plait-comm-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    /* a bench comm table of a ring with alpha = 20 us, beta = 2 GB/s over
     * 4 ranks (and a broadcast row the fit must ignore) */
    fprintf(f, "op,ranks,transport,algo,dtype,redop,size_bytes,count,time_us,time_min_us,algbw_GBps,busbw_GBps,"
               "wrong,loop_us\n");
    for (double S = 4096; S <= 64 << 20; S *= 4)
        fprintf(f, "allreduce,4,tcp,ring,f32,sum,%.0f,%.0f,%.6f,0,0,0,0,0\n", S, S / 4,
                1e6 * (6 * 20e-6 + 1.5 * S / 2e9));
    fprintf(f, "broadcast,4,tcp,tree,f32,sum,4096,1024,99999,0,0,0,0,0\n");
    fclose(f);
    plait_cluster c = gpu_cluster();
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_OK);
    assert_true(fabs(c.intra.latency - 20e-6) < 1e-9);
    assert_true(fabs(c.intra.bandwidth - 2e9) < 1e3);
    f = fopen(path, "w");
    fprintf(f, "size,time\n1,2\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":1: not a 'plait bench comm --csv' table"));
    /* a time that overflows to infinity, or a row longer than any buffer:
     * named with its line, never fitted */
    f = fopen(path, "w");
    fprintf(f, "op,ranks,size_bytes,time_us\nallreduce,4,4096,1e999\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":2: an allreduce row needs numbers"));
    f = fopen(path, "w");
    fprintf(f, "op,ranks,size_bytes,time_us\nallreduce,4,4096,10\nallreduce,4,");
    for (int i = 0; i < 5000; i++) fputc('9', f);
    fprintf(f, ",20\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":3: an allreduce row needs numbers"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_formulas),
        cmocka_unit_test(test_bubble),
        cmocka_unit_test(test_stored_bytes),
        cmocka_unit_test(test_time_hierarchy),
        cmocka_unit_test(test_memory_zero_formulas),
        cmocka_unit_test(test_time_pipeline_on_gpus),
        cmocka_unit_test(test_time_width),
        cmocka_unit_test(test_time_shared_cpu_cores),
        cmocka_unit_test(test_time_cpu_rows),
        cmocka_unit_test(test_time_cpu_pipeline),
        cmocka_unit_test(test_spearman),
        cmocka_unit_test(test_sweep_groups),
        cmocka_unit_test(test_table_columns_aligned),
        cmocka_unit_test(test_enumerate_default_axes),
        cmocka_unit_test(test_enumerate_bounds_and_optim),
        cmocka_unit_test(test_cluster_examples),
        cmocka_unit_test(test_cluster_errors),
        cmocka_unit_test(test_fit_comm),
        cmocka_unit_test(test_cluster_precision),
        cmocka_unit_test(test_stages_match_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
