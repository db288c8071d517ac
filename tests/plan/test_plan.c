/*
 * The cost model of `plait plan` against hand-computed cases: the
 * alpha-beta link times, the bubble formula, memory by the ZeRO formulas,
 * the step time of a pipeline on GPUs and of ranks sharing CPU cores;
 * Spearman's rho. The layouts are test_plan_layouts.c's, the cluster file
 * test_plan_cluster.c's.
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
#include "cost/cluster.h"
#include "cost/cost.h"
#include "cost/table.h"
#include "layout/mesh.h"
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
    /* units smaller than a layer (a bucket of 25,000 floats; the largest
     * tensor, 50,000, a unit alone): the units in flight are that tensor's
     * 0.2 MB, the layer's gradients and gathers stay whole */
    r.largest_tensor_numel = 5e4;
    j.bucket_bytes = 1e5;
    j.zero = 1;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 2 * (2e5 + 5e4));
    j.zero = 2;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 8e5 + 2 * 2e5);
    j.zero = 3;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 8e5 + 2 * 2e5 + 2 * 8e5);
    /* [optim.zero3] max_inflight = 3 and prefetch_layers = 0 (one layer
     * gathered at a time), then 2 (three) */
    j.zero_inflight[3] = 3, j.zero3_gathered = 1;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 8e5 + 3 * 2e5 + 8e5);
    j.zero3_gathered = 3;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 8e5 + 3 * 2e5 + 3 * 8e5);
    /* [optim.zero1] max_inflight = 4; another stage's key leaves it */
    j.zero = 1;
    j.zero_inflight[1] = 4;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 4 * (2e5 + 5e4));
    j.zero_inflight[1] = 0;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 2 * (2e5 + 5e4));
    j.zero_inflight[3] = 0, j.zero3_gathered = 0;
    /* the bucket larger than the largest tensor: units of the bucket */
    j.bucket_bytes = 4e5;
    j.zero = 2;
    plait_cost_memory(&r, &j, 1e6, &m);
    NEAR(m.buffers, 8e5 + 2 * 4e5);
    r.largest_tensor_numel = 0;
    j.bucket_bytes = 25e6;
    /* a bf16 run whose model stores bf16 activations: the same float32
     * state, plus 2 bytes an element of the weights' bf16 copy, whole
     * under ZeRO-1 and 2, its largest layer's alone under ZeRO-3 (which
     * makes each layer's while it runs); the activations as the rank
     * counted them */
    j.precision = PLAIT_PRECISION_BF16;
    r.bf16 = 1;
    r.weight_copy_numel = 9e5;
    r.largest_copy_numel = 2e5;
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
    NEAR(m.param, 4e6 / 4 + 4e5);
    NEAR(m.param + m.grad + m.state, 16e6 / 4 + 4e5);
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
    /* under ZeRO-3 the copy is made at each forward and backward of each
     * of the 4 micro-batches, from the gathered parameters */
    j.zero = 3;
    plait_cost_step_time(r, &j, &c, &t);
    NEAR(t.optim, (28e6 + 8 * 5.4e6) / 1e11);
    j.zero = 0;
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
    /* over nccl they travel as bf16 tensors where the device widens them
     * back (the cuda device: half the bytes, as over tcp), float32 on a
     * device without from_bf16; a float32 run's are float32 everywhere */
    snprintf(l.comm, sizeof l.comm, "nccl");
    plait_cost_device_cuda(1024, 64, &x.device);
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 2);
    plait_cost_step_time(r, &j, &c, &t);
    NEAR(t.comm, half);
    NEAR(t.pp_bytes, 2e6);
    x.device.bf16_tensors = 0;
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 4);
    plait_cost_step_time(r, &j, &c, &t);
    NEAR(t.comm, pp);
    NEAR(t.pp_bytes, 4e6);
    snprintf(l.comm, sizeof l.comm, "tcp");
    x.precision = PLAIT_PRECISION_FP32;
    plait_cost_job_of(&l, &x, 25e6, &j);
    assert_true(j.wire_bytes == 4);
    /* tp 2's all-reduces (float32 activations: the stage's messages are
     * float32) over nccl on the cuda device: bf16 on the wire */
    plait_cost_rank tr = {.dp = 1,
                          .tp = 2,
                          .pp = 1,
                          .micro_batches = 1,
                          .chunks = 1,
                          .param_numel = 1e6,
                          .flops = 1e11,
                          .tp_msgs = 8,
                          .tp_msg_elems = 2.5e5};
    plait_cost_layout lt = {.dp = 1, .tp = 2, .pp = 1, .comm = "nccl"};
    x.precision = PLAIT_PRECISION_BF16;
    x.device.bf16_tensors = 1;
    plait_cost_job_of(&lt, &x, 25e6, &j);
    plait_cost_step_time(&tr, &j, &c, &t);
    NEAR(t.tp_bytes, 8 * 2.5e5 * 2);
    const double one = plait_cost_allreduce_bw_s(c.intra.latency, c.intra.bandwidth, 2, 2.5e5 * 2);
    NEAR(t.tp_s, 8 * one);
    NEAR(t.tp_hidden, 0.0);
    /* [parallel.tp] overlap: 2 of the 8 sums travel beside weight
     * gradients of 1e10 FLOPs (at the stage's rate, longer than the two
     * sums), hidden as far as those last: all of them here; beside weight
     * gradients a thousandth of one sum long, only that much */
    tr.tp_hide_msgs = 2;
    tr.tp_hide_flops = 1e10;
    j.tp_overlap = 1;
    plait_cost_step_time(&tr, &j, &c, &t);
    const double behind = 1e10 / t.rate;
    assert_true(2 * one < behind);
    NEAR(t.tp_hidden, 2 * one);
    NEAR(t.tp_s, 6 * one);
    NEAR(t.tp_bytes, 8 * 2.5e5 * 2); /* the same bytes move */
    tr.tp_hide_flops = 1e-3 * one * t.rate;
    plait_cost_step_time(&tr, &j, &c, &t);
    NEAR(t.tp_hidden, 1e-3 * one);
    NEAR(t.tp_s, 8 * one - 1e-3 * one);
    /* off: all of it on the critical path */
    j.tp_overlap = 0;
    plait_cost_step_time(&tr, &j, &c, &t);
    NEAR(t.tp_hidden, 0.0);
    NEAR(t.tp_s, 8 * one);
}

/* One stage of one rank: 1e11 FLOPs a step (2e10 of them recomputed),
 * products 768 wide, 1e6 parameters. */
static plait_cost_rank one_gpu_stage(void) {
    return (plait_cost_rank){.dp = 1,
                             .tp = 1,
                             .pp = 1,
                             .micro_batches = 1,
                             .chunks = 1,
                             .param_numel = 1e6,
                             .flops = 1e11,
                             .recompute_flops = 2e10,
                             .width = 768};
}

/* A GPU's rate by its products' width: w / (w + half_width) of it, the
 * compute and its recomputed share slowed alike; no change without a
 * half width or on a CPU node. */
static void test_time_width(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    plait_cost_rank r = one_gpu_stage();
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

/* A GPU's fused attention at its own rate where the cluster gives one:
 * the products at the width's share of the precision's rate, the
 * attention's FLOPs (and its share of the recomputed ones) at
 * peak x attention efficiency; the products' rate for them without it. */
static void test_time_attention(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    c.half_width = 256;
    plait_cost_rank r = one_gpu_stage();
    r.attention_flops = 3e10, r.recompute_attention_flops = 4e9;
    plait_cost_job j = {.dp = 1, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_BF16};
    plait_cost_time t;
    plait_cost_step_time(&r, &j, &c, &t); /* no attention rate: all at 2e12 x 0.75 */
    NEAR(t.attention_rate, 0.0);
    NEAR(t.compute, 1e11 / 1.5e12);
    NEAR(t.recompute, 2e10 / 1.5e12);
    c.attention_efficiency_bf16 = 0.1; /* 4e11 FLOP/s */
    c.attention_efficiency = 0.9;      /* fp32's: not this run's */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.attention_rate, 4e11);
    NEAR(t.compute, 7e10 / 1.5e12 + 3e10 / 4e11);
    NEAR(t.recompute, 1.6e10 / 1.5e12 + 4e9 / 4e11);
    NEAR(plait_cost_compute_s(&c, &t, t.rate, &r, 0), t.compute);
    j.precision = PLAIT_PRECISION_FP32; /* fp32's key: 1e12 x 0.9, the products at 5e11 x 0.75 */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 7e10 / 3.75e11 + 3e10 / 9e11);
    c.gpu = 0; /* a CPU node: the attention as the products */
    assert_true(plait_cluster_attention_rate(&c, PLAIT_PRECISION_FP32) == 0);
}

/* two nodes of 4 GPUs (NVLink at 100 GB/s), each GPU with a 10 GB/s NIC,
 * the nodes' NICs together 20 GB/s */
static plait_cluster two_nodes(void) {
    plait_cluster c = gpu_cluster();
    c.nodes = 2;
    c.units_per_node = 4;
    c.intra = (plait_link){.kind = "nvlink", .bandwidth = 1e11, .latency = 0};
    c.inter = (plait_link){.kind = "infiniband", .bandwidth = 1e10, .latency = 0};
    c.inter_node_bandwidth = 2e10;
    return c;
}

/* a DP all-reduce across the nodes, flat and hierarchical */
static void test_time_hierarchy(void **state) {
    (void)state;
    plait_cluster c = two_nodes();
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
    /* [run] deterministic: the ordered all-reduce sends each owner its
     * piece directly, flat over the network as the ring */
    j.deterministic = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_inter, 2 * 7 * (S / 8) / 5e9);
    assert_true(t.dp_intra == 0);
    /* ZeRO-1: its reduce-scatter flat, the updated weights' all-gather
     * still hierarchical */
    j.zero = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_inter, 7 * (S / 8) / 5e9 + 1 * (S / 4 / 2) / 5e9);
    NEAR(t.dp_intra, 3 * (S / 4) / 1e11);
    j.zero = 0, j.deterministic = 0;
    /* tp 4 stays on a node's NVLink; tp 8 would cross */
    plait_cluster_link(&c, 8, 4, 1);
    assert_ptr_equal(plait_cluster_link(&c, 8, 4, 1), &c.intra);
    assert_ptr_equal(plait_cluster_link(&c, 8, 8, 1), &c.inter);
    /* a node's share: the NIC when few ranks send, the node's total / ranks when all do */
    NEAR(plait_cluster_inter_share(&c, 1), 1e10);
    NEAR(plait_cluster_inter_share(&c, 4), 5e9);
}

/* [parallel] order places the groups: on two nodes of 4 GPUs, tp 4 x dp 2
 * keeps tp on a node's NVLink by default and sends dp over the network;
 * order dp,tp,pp puts tp 2 ranks apart, across the nodes, and dp beside
 * each other; with cp 2 too (dp, tp, cp, pp: dp, tp and cp 1, 2 and 4
 * ranks apart) the DP group {0, 1, 4, 5} has 2 members a node. */
static void test_time_order(void **state) {
    (void)state;
    plait_cluster c = two_nodes();
    plait_cost_rank r = {.dp = 2, .tp = 4, .pp = 1, .micro_batches = 1, .param_numel = 2e8, .flops = 0};
    plait_cost_job j = {.dp = 2, .tp = 4, .pp = 1, .bucket_bytes = 1e12, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    plait_cost_step_time(&r, &j, &c, &t);
    assert_string_equal(t.tp_link, "nvlink");
    assert_string_equal(t.dp_link, "infiniband");
    assert_int_equal(plait_mesh_parse_order("dp,tp,pp", j.axes), PLAIT_OK);
    plait_cost_step_time(&r, &j, &c, &t);
    assert_string_equal(t.tp_link, "infiniband");
    assert_string_equal(t.dp_link, "nvlink");
    double S = 8e8;
    NEAR(t.dp_intra, 2 * 1 * (S / 2) / 1e11);
    /* dp 2 x cp 2 apart: hierarchical, 2 a node on NVLink, then the 2 nodes */
    r.dp = j.dp = 2, r.tp = j.tp = 2, r.cp = j.cp = 2;
    j.hierarchical = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    assert_string_equal(t.dp_link, "infiniband");
    assert_true(t.dp_hierarchical);
    NEAR(t.dp_intra, 2 * 1 * (S / 2) / 1e11);
    NEAR(t.dp_inter, 2 * 1 * (S / 2 / 2) / 5e9);
}

/* The DP reduction pays the ring's latency once a collective: the DP
 * plugin's buckets and ZeRO's units put a tensor larger than a bucket in
 * one of its own, so a rank of 10 tensors of 400 MB starts 10 collectives,
 * not 4 GB / 25 MB of them. */
static void test_time_dp_buckets(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    c.intra.bandwidth = 1e30; /* the latency alone */
    plait_cost_rank r = {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 1, .param_numel = 1e9};
    plait_cost_job j = {.dp = 2, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    /* tensors not known: the 4 GB before the last bucket in 159 buckets,
     * each all-reduce 2 (n - 1) latencies */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 159 * 2e-5);
    NEAR(t.dp_exposed, 2e-5);
    r.tensors = 10;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 10 * 2e-5);
    NEAR(t.dp_exposed, 2e-5);
    r.tensors = 1000; /* small tensors fill buckets */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 159 * 2e-5);
    /* [parallel.dp] overlap = false: the same buckets, all after the backward */
    j.dp_serial = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 0.0);
    NEAR(t.dp_exposed, 160 * 2e-5);
    j.dp_serial = 0;
    /* ZeRO-2: a reduce-scatter of each unit, n - 1 latencies, and the
     * updated weights' all-gather as many */
    j.zero = 2;
    r.tensors = 10;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden + t.dp_exposed, 10 * 1e-5 + 10 * 1e-5);
    /* ZeRO-3: each unit gathered before its forward and again before its
     * backward, and its gradients reduce-scattered, 3 x 10 collectives; the
     * first layer's gather (the rank's one layer here) and the last unit's
     * reduce-scatter exposed */
    j.zero = 3;
    r.largest_layer_numel = r.param_numel;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 30 * 1e-5 - 2e-5);
    NEAR(t.dp_exposed, 2e-5);
    /* [optim.zero3] prefetch_layers = 0: each hook waits for its layer's
     * gathers, 20 collectives exposed; only the reductions but the last
     * hide */
    j.zero3_gathered = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 9 * 1e-5);
    NEAR(t.dp_exposed, 21 * 1e-5);
}

/* What the DP reduction hides behind. Plain DP starts its buckets at the
 * last micro-batch's backward: with 4 micro-batches of 0.25 s, behind
 * two thirds of the last one. ZeRO-2 reduce-scatters every micro-batch's
 * gradients, which travel beside the micro-batches after it. */
static void test_time_dp_window(void **state) {
    (void)state;
    plait_cluster c = gpu_cluster();
    c.intra.latency = 0;
    /* 1 s of compute at 0.5 TFLOP/s, 4 GB of float32 gradients */
    plait_cost_rank r = {.dp = 2, .tp = 1, .pp = 1, .micro_batches = 4, .param_numel = 1e9, .flops = 5e11};
    plait_cost_job j = {.dp = 2, .tp = 1, .pp = 1, .bucket_bytes = 1e8, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    /* the all-reduce: 3.9 GB before the last bucket, 0.39 s; the last 0.01 s */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 1.0);
    NEAR(t.dp_hidden, 0.39);
    NEAR(t.dp_exposed, 0.01);
    NEAR(t.dp_window, 2.0 / 3.0 / 4);
    NEAR(t.step - t.optim, 1 + 0.01 + 0.39 - 2.0 / 3.0 / 4);
    /* one micro-batch: its backward hides all but the last bucket */
    r.micro_batches = 1;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_window, 2.0 / 3.0);
    NEAR(t.step - t.optim, 1 + 0.01);
    /* ZeRO-1 under a pipeline starts a unit at its layers' last backward
     * as without one: behind the busiest stage's last micro-batch's
     * backward (test_dp_overlap sees it start there) */
    j.zero = 1;
    j.pp = 2;
    plait_cost_rank two[2] = {r, r};
    two[0].pp = two[1].pp = 2;
    two[0].micro_batches = two[1].micro_batches = 4;
    plait_cost_step_time(two, &j, &c, &t);
    NEAR(t.dp_window, 2.0 / 3.0 * t.compute / 4);
    assert_true(t.dp_hidden > 0);
    /* and --explain says how much of it that backward hides */
    char text[192];
    plait_cost_dp_overlap_text(text, sizeof text, &t);
    assert_non_null(strstr(text, "behind the backward pass"));
    j.pp = 1;
    /* ZeRO-2, 4 micro-batches: 4 reduce-scatters of 4 GB (0.2 s each), the
     * last unit's exposed, and the weights' all-gather (0.2 s) */
    r.micro_batches = 4;
    j.zero = 2;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 0.8 - 0.005);
    NEAR(t.dp_exposed, 0.005 + 0.2);
    NEAR(t.dp_window, 0.75 * 1 + 2.0 / 3.0 / 4);
    NEAR(t.step - t.optim, 1 + 0.205);
    /* more to hide than the window: the rest is exposed */
    r.micro_batches = 16;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_hidden, 3.2 - 0.005);
    NEAR(t.step - t.optim, 1 + 0.205 + (3.2 - 0.005) - (15.0 / 16 + 2.0 / 3.0 / 16));
    /* overlap_param_gather: of the weights' all-gather (40 units of 0.005
     * s), the first unit's exposed and the rest beside the next step's
     * first micro-batch's forward (a third of its 0.25 s) */
    r.micro_batches = 4;
    j.overlap_gather = 1 << 2;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_exposed, 0.005 + 0.005);
    NEAR(t.dp_ahead, 0.2 - 0.005);
    NEAR(t.dp_ahead_window, 1.0 / 3.0 / 4);
    NEAR(t.step - t.optim, 1 + 0.01 + (0.195 - 1.0 / 12));
    char beside[320];
    plait_cost_dp_overlap_text(beside, sizeof beside, &t);
    assert_non_null(strstr(beside, "beside the next step's forward"));
    j.overlap_gather = 1 << 1; /* zero1's alone: zero2 waits */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.dp_ahead, 0.0);
    NEAR(t.step - t.optim, 1 + 0.205);
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

/* [run] threads: one rank alone on the 2 cores computes on both by
 * default, on one at threads = 1 (twice the time), and no faster than on
 * both at threads = 4 */
static void test_time_cpu_threads(void **state) {
    (void)state;
    plait_cluster c = cpu_cluster();
    plait_cost_rank r = {.dp = 1, .tp = 1, .pp = 1, .micro_batches = 1, .chunks = 1, .param_numel = 1e6, .flops = 2e11};
    plait_cost_job j = {.dp = 1, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    const double stream = 3 * 4e6 / 1e10;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 1.0 + stream);
    j.threads = 1; /* the weights' stream counted at the rank's rate too (cpu_pace) */
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 2 * (1.0 + stream));
    j.threads = 4;
    plait_cost_step_time(&r, &j, &c, &t);
    NEAR(t.compute, 1.0 + stream);
    assert_int_equal(plait_cluster_rank_threads(&c, 1, 4), 2);
    assert_int_equal(plait_cluster_rank_threads(&c, 4, 0), 1);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_formulas),
        cmocka_unit_test(test_bubble),
        cmocka_unit_test(test_stored_bytes),
        cmocka_unit_test(test_time_hierarchy),
        cmocka_unit_test(test_time_order),
        cmocka_unit_test(test_time_cpu_threads),
        cmocka_unit_test(test_memory_zero_formulas),
        cmocka_unit_test(test_time_pipeline_on_gpus),
        cmocka_unit_test(test_time_width),
        cmocka_unit_test(test_time_attention),
        cmocka_unit_test(test_time_dp_buckets),
        cmocka_unit_test(test_time_dp_window),
        cmocka_unit_test(test_time_shared_cpu_cores),
        cmocka_unit_test(test_time_cpu_rows),
        cmocka_unit_test(test_time_cpu_pipeline),
        cmocka_unit_test(test_spearman),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
