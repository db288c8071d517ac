/*
 * The cost model's cuts along the sequence against hand-computed cases:
 * sequence parallelism's activations and messages under tp, and context
 * parallelism's (a cp rank's T / cp of every sequence, ring attention's
 * K/V traffic behind the attention, ZeRO over dp x cp, the cp sizes the
 * search tries).
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

/* Sequence parallelism cuts along the sequence what tp leaves whole: per
 * block the LayerNorms' outputs and statistics and the attention's
 * residual output, and the slot's residual stream at its input boundary
 * (float32 here: 4·BT·C + 4·BT floats of a one-block slot before the
 * head), and each buffer of the boundary pool (its sent output and its
 * gradients: BT·C floats); the products read the LayerNorms' outputs gathered
 * into one buffer the blocks share (model/model_slots.c, counted in the
 * scratch), and tp's own cuts stay. On a bf16 run both keep
 * bf16 blocks (and a float32 head, vocabulary-parallel), as the model
 * does; the messages of the sequence-parallel path are counted bf16. */
static void test_sequence_parallel_activations(void **state) {
    (void)state;
    const plait_model_spec spec = {.struct_size = sizeof spec,
                                   .arch = "gpt",
                                   .n_layer = 2,
                                   .n_head = 8,
                                   .n_embd = 64,
                                   .block_size = 64,
                                   .vocab_size = 512,
                                   .n_kv_head = 8};
    const double t = 4, BT = 64, C = 64;
    plait_cost_shape_in in = {.B = 1, .tp = 4, .tensor_parallel = 1, .precision = PLAIT_PRECISION_FP32};
    plait_cost_shape a, b;
    plait_cost_shape_init(&a, &spec, &in);
    in.sp = 1;
    plait_cost_shape_init(&b, &spec, &in);
    NEAR(plait_cost_slot_bytes(&a, 1, 1) - plait_cost_slot_bytes(&b, 1, 1), 4 * (1 - 1 / t) * (4 * BT * C + 4 * BT));
    NEAR(plait_cost_boundary_bytes(&a) - plait_cost_boundary_bytes(&b), 4 * (1 - 1 / t) * BT * C);
    /* the sequence-parallel buffers: a gathered gradient, this rank's rows,
     * a norm's parameter gradients and the shared gathered norm output */
    NEAR(plait_cost_scratch_bytes(&b) - plait_cost_scratch_bytes(&a), 4 * (2 * BT * C + BT * C / t + 2 * C));
    /* the head's tp-split logits and its gathered ln_f output stay, its
     * input boundary and statistics are cut */
    NEAR(plait_cost_slot_bytes(&a, 3, 3) - plait_cost_slot_bytes(&b, 3, 3), 4 * (1 - 1 / t) * (BT * C + 2 * BT));
    assert_int_equal(plait_cost_message_bytes(&b), 4);
    const double f32_sp = plait_cost_slot_bytes(&b, 1, 1);
    /* bf16 on the cuda device: granted with tp, with sp or without */
    plait_cost_device cuda;
    plait_cost_device_cuda(64, 8, &cuda);
    in.precision = PLAIT_PRECISION_BF16;
    in.device = &cuda;
    in.sp = 0;
    plait_cost_shape_init(&a, &spec, &in);
    in.sp = 1;
    plait_cost_shape_init(&b, &spec, &in);
    assert_true(a.bf16);
    assert_true(b.bf16);
    assert_false(a.bf16_head);
    assert_false(b.bf16_head);
    assert_int_equal(plait_cost_message_bytes(&a), 4);
    assert_int_equal(plait_cost_message_bytes(&b), 2);
    /* the block's norms' outputs and the products' operands in 2 bytes:
     * 2·BT·C/t + 12·BT·C/t elements of a block */
    NEAR(f32_sp - plait_cost_slot_bytes(&b, 1, 1), 2 * (2 * BT * C / t + 12 * BT * C / t));
    /* tp 1 has no sequence parallelism to count */
    in.tp = 1;
    in.tensor_parallel = 0;
    plait_cost_shape_init(&b, &spec, &in);
    assert_false(b.sp);
    /* and a layout name says it, read back; sp without tp is refused */
    plait_cost_layout
        l = {.dp = 2, .tp = 4, .pp = 1, .chunks = 1, .optim = "adam", .micro_batch = 1, .sp = 1, .comm = "tcp"},
        back;
    char name[128], why[256];
    plait_cost_layout_name(&l, name, sizeof name);
    assert_string_equal(name, "dp2 tp4 pp1 mb1 adam sp");
    assert_int_equal(plait_cost_layout_parse(name, &l, &back), PLAIT_OK);
    assert_true(back.sp);
    assert_int_equal(plait_cost_layout_parse("dp2 tp4 pp1", &l, &back), PLAIT_OK);
    assert_false(back.sp);
    assert_int_not_equal(plait_cost_layout_parse("dp8 tp1 pp1 sp", &l, &back), PLAIT_OK);
    /* chunks a layout cannot run are refused, not explained as another
     * layout (v2 of 1f1b, zb1 or gpipe read as one chunk; interleaved v1
     * read as v2; v2 without a pipeline dropped) */
    assert_int_not_equal(plait_cost_layout_parse("dp4 tp1 pp2 1f1b v2", &l, &back), PLAIT_OK);
    assert_int_not_equal(plait_cost_layout_parse("dp4 tp1 pp2 zb1 v2", &l, &back), PLAIT_OK);
    assert_int_not_equal(plait_cost_layout_parse("dp4 tp1 pp2 gpipe v4", &l, &back), PLAIT_OK);
    assert_int_not_equal(plait_cost_layout_parse("dp4 tp1 pp2 interleaved v1", &l, &back), PLAIT_OK);
    assert_int_not_equal(plait_cost_layout_parse("dp8 tp1 pp1 interleaved v2", &l, &back), PLAIT_OK);
    assert_int_equal(plait_cost_layout_parse("dp4 tp1 pp2 interleaved v4", &l, &back), PLAIT_OK);
    assert_int_equal(back.chunks, 4);
    assert_int_equal(plait_cost_layout_parse("dp4 tp1 pp2 v2 interleaved", &l, &back), PLAIT_OK);
    assert_int_equal(back.chunks, 2);
    assert_int_equal(plait_cost_layout_parse("dp4 tp1 pp2 1f1b v1", &l, &back), PLAIT_OK);
    assert_int_equal(back.chunks, 1);
    assert_null(plait_cost_sp_refuses(&l, 64, why, sizeof why));
    assert_non_null(plait_cost_sp_refuses(&l, 66, why, sizeof why));
    assert_non_null(strstr(why, "block_size 66 does not divide by tp 4"));
}


/* A llama of 8 heads of 8 sharing 2 kv heads, T 64: the cp tests' model. */
static const plait_model_spec llama_cp_spec = {.struct_size = sizeof(plait_model_spec),
                                               .arch = "llama",
                                               .n_layer = 2,
                                               .n_head = 8,
                                               .n_embd = 64,
                                               .block_size = 64,
                                               .vocab_size = 512,
                                               .ffn_hidden = 128,
                                               .n_kv_head = 2};

/* Context parallelism: the axis takes the cp sizes whose 2cp chunks
 * divide the sequence and leave a rank 1,024 tokens or more; a cp rank
 * keeps and computes T / cp of every sequence; the ring moves its K and V
 * (kv heads only), hidden behind a block's attention as far as it lasts;
 * ZeRO shards over dp x cp; names carry "cpN"; train's rules refuse. */
static void test_context_parallel(void **state) {
    (void)state;
    plait_cost_axes a = axes4("cp");
    a.ranks = 8;
    a.seq = 16384;
    a.attention = 1;
    a.base.dp = 1;
    /* cp 1, 2, 4 (16384 / 8 = 2048 tokens a rank is too few), dp x tp x pp fixed at the base's 1: none of 8
     * ranks but cp 8 would make 8, and it is left out: no layout */
    assert_int_equal(plait_cost_enumerate(&a, NULL, 0), 0);
    a = axes4("dp,cp");
    a.ranks = 8;
    a.seq = 16384;
    a.attention = 1;
    plait_cost_layout l[8];
    assert_int_equal(plait_cost_enumerate(&a, l, 8), 3); /* dp 8 cp 1, dp 4 cp 2, dp 2 cp 4 */
    char name[128];
    plait_cost_layout_name(&l[1], name, sizeof name);
    assert_string_equal(name, "dp4 tp1 pp1 cp2 mb2 adam");
    plait_cost_layout back;
    assert_int_equal(plait_cost_layout_parse(name, &a.base, &back), PLAIT_OK);
    assert_int_equal(back.cp, 2);
    assert_int_equal(plait_cost_layout_ranks(&back), 8);
    char ov[16][96];
    int k = plait_cost_layout_overrides(&l[1], 8, ov), seen = 0;
    for (int i = 0; i < k; i++) seen += !strcmp(ov[i], "parallel.cp=2");
    assert_int_equal(seen, 1);
    a.attention = 0; /* no attention: cp stays the base's */
    assert_int_equal(plait_cost_enumerate(&a, NULL, 0), 1);
    /* train's rules */
    char why[256];
    plait_cost_layout c = {.dp = 1, .tp = 2, .pp = 1, .cp = 3, .sp = 1};
    assert_non_null(plait_cost_cp_refuses(&c, 64, 1, why, sizeof why));
    assert_non_null(strstr(why, "2cp = 6 equal chunks"));
    c.cp = 4;
    assert_null(plait_cost_cp_refuses(&c, 64, 1, why, sizeof why));
    assert_non_null(plait_cost_cp_refuses(&c, 64, 0, why, sizeof why));
    assert_null(plait_cost_sp_refuses(&c, 64, why, sizeof why)); /* 16 tokens a cp rank, by tp 2 */
    c.tp = 32;
    assert_non_null(plait_cost_sp_refuses(&c, 64, why, sizeof why));

    /* a cp rank's shapes, activations and ring traffic: llama, 8 heads of
     * 8 sharing 2 kv heads, T 64, cp 4 */
    const plait_model_spec spec = llama_cp_spec;
    plait_cost_shape_in in = {.B = 2, .tp = 1, .precision = PLAIT_PRECISION_FP32};
    plait_cost_shape one, four;
    plait_cost_shape_init(&one, &spec, &in);
    in.cp = 4;
    plait_cost_shape_init(&four, &spec, &in);
    NEAR(four.T, 16.0);
    NEAR(four.cp, 4.0);
    /* every tensor of a block is of T rows: a quarter of them (each
     * rounded up to 16 floats: within a percent) */
    double b1 = plait_cost_slot_bytes(&one, 1, 1), b4 = plait_cost_slot_bytes(&four, 1, 1);
    assert_true(fabs(b4 - b1 / 4) <= 0.01 * b1);
    plait_cost_rank r;
    memset(&r, 0, sizeof r);
    plait_cost_ring_traffic(&four, 2, 3, &r);
    NEAR(r.cp_passes, 3.0 * 2 * 3);             /* cp - 1 passes a block and micro-batch */
    NEAR(r.cp_msg_elems, 2.0 * 16 * 2 * 2 * 8); /* B x T/cp x (K and V) x kv heads x head size */
    NEAR(r.cp_hide_flops, 2.0 * 2 * 16 * 16 * 64);
    NEAR(r.cp_tail_msgs, 2.0 * 3);
    memset(&r, 0, sizeof r);
    plait_cost_ring_traffic(&one, 2, 3, &r);
    NEAR(r.cp_passes, 0.0);
    /* the ring's time: a transfer 10 us + 8 KiB at 1 GB/s against a
     * block's attention at 1e12 x 0.5: exposed in full where the block is
     * shorter, nothing of the passes where it is longer */
    plait_cluster cl = gpu_cluster();
    cl.intra.bandwidth = 1e9;
    plait_cost_rank st = {.dp = 1,
                          .tp = 1,
                          .pp = 1,
                          .cp = 4,
                          .micro_batches = 1,
                          .chunks = 1,
                          .param_numel = 1e3,
                          .flops = 1e9,
                          .cp_passes = 6,
                          .cp_msg_elems = 2048,
                          .cp_hide_flops = 0,
                          .cp_tail_msgs = 2};
    plait_cost_job j = {.dp = 1, .cp = 4, .tp = 1, .pp = 1, .bucket_bytes = 25e6, .precision = PLAIT_PRECISION_FP32};
    plait_cost_time t;
    plait_cost_step_time(&st, &j, &cl, &t);
    double x = 1e-5 + 8192 / 1e9;
    NEAR(t.cp_s, 6 * 3 * x + 2 * x);
    NEAR(t.cp_total, 6 * 3 * x + 2 * x);
    st.cp_hide_flops = 2 * 5e11 * x; /* a block lasts 2x the transfer at 1e12 x 0.5 */
    plait_cost_step_time(&st, &j, &cl, &t);
    NEAR(t.cp_s, 2 * x);
    NEAR(t.compute, 1e9 / 5e11);
    NEAR(t.step, 1e9 / 5e11 + 2 * x + t.comm - t.cp_s + t.optim);
    /* a bf16 run over tcp: K and V in bf16 (4 KiB), dK and dV float32;
     * behind no attention, all of it exposed */
    st.cp_hide_flops = 0;
    j.cp_kv_bytes = 2;
    plait_cost_step_time(&st, &j, &cl, &t);
    double kv = 1e-5 + 4096 / 1e9;
    NEAR(t.cp_s, 6 * (2 * kv + x) + 2 * x);
    NEAR(t.cp_total, t.cp_s);
    j.cp_kv_bytes = 0;
    /* which runs send them bf16: the job's type as plait_cost_job_of sets it */
    plait_cost_layout cl4 = {.dp = 1, .tp = 1, .pp = 1, .cp = 4, .comm = "tcp"};
    plait_cost_ctx cx = {.precision = PLAIT_PRECISION_BF16};
    plait_cost_job cj;
    plait_cost_job_of(&cl4, &cx, 25e6, &cj);
    NEAR(cj.cp_kv_bytes, 2.0);
    snprintf(cl4.comm, sizeof cl4.comm, "nccl");
    plait_cost_job_of(&cl4, &cx, 25e6, &cj);
    NEAR(cj.cp_kv_bytes, 4.0);
    cx.precision = PLAIT_PRECISION_FP32;
    snprintf(cl4.comm, sizeof cl4.comm, "tcp");
    plait_cost_job_of(&cl4, &cx, 25e6, &cj);
    NEAR(cj.cp_kv_bytes, 4.0);
    /* ZeRO-1 shards the moments over dp x cp: 8 bytes a parameter / 8 */
    plait_cost_rank mr = {.dp = 2, .tp = 1, .pp = 1, .param_numel = 1e6, .largest_layer_numel = 1e5};
    plait_cost_job mj = {.dp = 2, .cp = 4, .tp = 1, .pp = 1, .zero = 1, .bucket_bytes = 25e6};
    plait_cost_mem m;
    plait_cost_memory(&mr, &mj, 0, &m);
    NEAR(m.state, 8e6 / 8);
    NEAR(m.param, 4e6);
    NEAR(m.grad, 4e6);
}

/* A block's FLOPs in a step: plait's fused attention walks only the key
 * tiles a causal query sees, so its forward is 2·T·C a token (half of
 * model_desc's 4·T·C), its backward the device's products a tile pair of
 * T·C each (7 on cuda, 5 on the CPU), and full recomputation runs the
 * products and the attention's forward again; an MLP block keeps 3f. */
static void test_causal_attention_flops(void **state) {
    (void)state;
    const plait_model_spec gpt = {.struct_size = sizeof gpt,
                                  .arch = "gpt",
                                  .n_layer = 2,
                                  .n_head = 4,
                                  .n_embd = 64,
                                  .block_size = 128,
                                  .vocab_size = 512,
                                  .ffn_hidden = 256,
                                  .n_kv_head = 4};
    const double TC = 128.0 * 64, f = 1000 + 4 * TC, products = 1000;
    plait_cost_device cuda, cpu = {.att_backward_products = 5};
    plait_cost_device_cuda(128, 16, &cuda);
    NEAR(cuda.att_backward_products, 7.0);
    plait_cost_shape_in in = {.B = 2, .tp = 1, .precision = PLAIT_PRECISION_BF16, .device = &cuda};
    plait_cost_shape s;
    double train, again;
    plait_cost_shape_init(&s, &gpt, &in);
    plait_cost_block_flops_per_token(&s, f, &train, &again, NULL);
    NEAR(train, 3 * products + 2 * TC + 7 * TC);
    NEAR(again, 0.0); /* the scores again are among the backward's products */
    in.recompute = 2;
    in.device = &cpu;
    plait_cost_shape_init(&s, &gpt, &in);
    plait_cost_block_flops_per_token(&s, f, &train, &again, NULL);
    NEAR(train, 3 * products + 2 * TC + 5 * TC);
    NEAR(again, products + 2 * TC);
    /* under cp a token still attends over the whole sequence, half of it */
    in.cp = 4;
    plait_cost_shape_init(&s, &gpt, &in);
    plait_cost_block_flops_per_token(&s, f, &train, &again, NULL);
    NEAR(train, 3 * products + 2 * TC + 5 * TC);
    /* no attention (the mlp arch): the backward twice the forward */
    const plait_model_spec mlp = {
        .struct_size = sizeof mlp, .arch = "mlp", .n_layer = 2, .n_embd = 64, .block_size = 128};
    in.cp = 1;
    plait_cost_shape_init(&s, &mlp, &in);
    plait_cost_block_flops_per_token(&s, 1000, &train, &again, NULL);
    NEAR(train, 3000.0);
    NEAR(again, 1000.0);
}

/* A bf16 run keeps bf16 activations at cp > 1 where the device has ring
 * attention's bf16 entries (the model's rule, plait_model_grants_bf16:
 * the cuda device), float32 where it lacks them, as at cp 1 it needs
 * none: a cp 4 rank's bf16 block about half its float32 one. */
static void test_context_parallel_bf16(void **state) {
    (void)state;
    const plait_model_spec spec = llama_cp_spec;
    plait_cost_device dev;
    plait_cost_device_cuda(64, 8, &dev);
    plait_cost_shape_in in = {.B = 2, .tp = 1, .cp = 4, .precision = PLAIT_PRECISION_BF16, .device = &dev};
    plait_cost_shape bf, f32;
    plait_cost_shape_init(&bf, &spec, &in);
    assert_int_equal(bf.bf16, 1);
    in.precision = PLAIT_PRECISION_FP32;
    plait_cost_shape_init(&f32, &spec, &in);
    const double b16 = plait_cost_slot_bytes(&bf, 1, 1), b32 = plait_cost_slot_bytes(&f32, 1, 1);
    assert_true(b16 < 0.75 * b32 && b16 > 0.5 * b32); /* the residual stream and statistics stay float32 */
    in.precision = PLAIT_PRECISION_BF16;
    dev.ring_bf16 = 0; /* no ring entries in bf16: float32 at cp 4, bf16 at cp 1 */
    plait_cost_shape_init(&bf, &spec, &in);
    assert_int_equal(bf.bf16, 0);
    in.cp = 1;
    plait_cost_shape_init(&bf, &spec, &in);
    assert_int_equal(bf.bf16, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_parallel_activations),
        cmocka_unit_test(test_context_parallel),
        cmocka_unit_test(test_context_parallel_bf16),
        cmocka_unit_test(test_causal_attention_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
