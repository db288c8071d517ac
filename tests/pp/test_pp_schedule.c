/*
 * Pipeline schedules, proved without communication: every stage's list runs
 * in the simulator (pp_sim.h), which checks dependencies, message matching,
 * deadlock freedom and the step's end, and measures idle time and live
 * activations; these must equal the closed forms documented in schedule.h
 * (re-derived here independently of the code under test).
 * The simulator itself is tested on broken lists first: it must catch them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pp/pp_sim.h"
#include "schedule.h"

#define I(op_, c_, mb_) ((plait_instr){.op = PLAIT_INSTR_##op_, .chunk = (c_), .mb = (mb_)})
#define END I(REDUCE_GRADS, 0, -1), I(OPTIM_STEP, 0, -1)

/* ---- closed forms, written out from schedule.h's documentation ----------- */

static int64_t expect_idle_steps(int32_t p, int32_t m, int32_t v) {
    return (p - 1) + (int64_t)(v - 1) * (p > m ? p - m : 0);
}

static int64_t expect_peak_live(pp_schedule_kind kind, int32_t p, int32_t s, int32_t m, int32_t v) {
    int64_t mv = (int64_t)m * v;
    switch (kind) {
    case PP_SCHEDULE_GPIPE: return mv;
    case PP_SCHEDULE_1F1B: return p - s < m ? p - s : m;
    default: {
        /* G: the largest micro-batch group, ceil(m / floor(m/p)), or m if m < p. */
        int64_t groups = m < p ? 1 : m / p, G = (m + groups - 1) / groups;
        int64_t b = (p - s) + (int64_t)(v - 1) * G;
        return b < mv ? b : mv;
    }
    }
}

/* ---- helpers ------------------------------------------------------------- */

typedef struct lists {
    int32_t p;
    plait_instr *items[16];
    size_t len[16];
} lists;

static void lists_free(lists *L) {
    for (int32_t s = 0; s < L->p; s++) free(L->items[s]);
}

/* Build every stage's list; returns the first failing status. */
static plait_status build_all(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v, lists *L) {
    memset(L, 0, sizeof *L);
    L->p = p;
    assert_true(p <= 16);
    for (int32_t s = 0; s < p; s++) {
        size_t need = pp_schedule_length(kind, p, s, m, v);
        L->items[s] = malloc((need ? need : 1) * sizeof(plait_instr));
        assert_non_null(L->items[s]);
        char err[256] = "";
        plait_status st = pp_schedule_build(kind, p, s, m, v, L->items[s], need, &L->len[s], err, sizeof err);
        if (st != PLAIT_OK) return st;
        assert_int_equal(L->len[s], need);
    }
    return PLAIT_OK;
}

/* The executor's send window of each stage (train/step_pipeline.c,
 * plait_step_send_window): 1 with one chunk a stage, p + 1 where a
 * backward comes before the last forward, else 0 (never waits). */
static void executor_windows(const lists *L, int32_t v, int32_t *w) {
    for (int32_t s = 0; s < L->p; s++) {
        size_t last_f = 0, first_b = L->len[s];
        for (size_t i = 0; i < L->len[s]; i++) {
            uint32_t op = L->items[s][i].op;
            if (op == PLAIT_INSTR_FORWARD) last_f = i;
            if ((op == PLAIT_INSTR_BACKWARD || op == PLAIT_INSTR_BACKWARD_INPUT) && i < first_b) first_b = i;
        }
        w[s] = v == 1 ? 1 : first_b < last_f ? L->p + 1 : 0;
    }
}

/* windowed: the sends wait as the executor's do (executor_windows) */
static int windowed;

static pp_sim_verdict run(const lists *L, int32_t m, int32_t v, int64_t tf, int64_t tb, pp_sim_result *res) {
    int32_t w[16];
    executor_windows(L, v, w);
    pp_sim_config cfg = {.stages = L->p,
                         .chunks = v,
                         .micro_batches = m,
                         .t_forward = tf,
                         .t_backward = tb,
                         .send_window = windowed ? w : NULL};
    const plait_instr *ptrs[16];
    for (int32_t s = 0; s < L->p; s++) ptrs[s] = L->items[s];
    return pp_sim_run(&cfg, ptrs, L->len, res);
}

static pp_sim_verdict run_raw(int32_t p, int32_t m, int32_t v, const plait_instr *const *ptrs, const size_t *lens,
                              pp_sim_result *res) {
    pp_sim_config cfg = {.stages = p, .chunks = v, .micro_batches = m, .t_forward = 1, .t_backward = 2};
    return pp_sim_run(&cfg, ptrs, lens, res);
}

static void expect_verdict(pp_sim_verdict got, pp_sim_verdict want, const pp_sim_result *res, const char *needle) {
    if (got != want || !strstr(res->message, needle))
        fail_msg("verdict %s (want %s), message: %s (want it to mention '%s')", pp_sim_verdict_name(got),
                 pp_sim_verdict_name(want), res->message, needle);
}

/* ---- the simulator catches broken lists ---------------------------------- */

/* Hand-checked timing: p = 2, m = 1, GPipe, tF = 1, tB = 2.
 * stage 0: F [0,1) send; waits for the gradient until 4; B [4,6).
 * stage 1: waits for the activation until 1; F [1,2); B [2,4); done at 4. */
static void test_sim_timing_by_hand(void **state) {
    (void)state;
    const plait_instr s0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0), END};
    const plait_instr s1[] = {I(RECV_ACT, 0, 0), I(FORWARD, 0, 0), I(BACKWARD, 0, 0), I(SEND_GRAD, 0, 0), END};
    const plait_instr *ptrs[] = {s0, s1};
    size_t lens[] = {6, 6};
    pp_sim_result res;
    assert_int_equal(run_raw(2, 1, 1, ptrs, lens, &res), PP_SIM_OK);
    assert_int_equal(res.makespan, 6);
    assert_int_equal(res.stage[0].busy, 3);
    assert_int_equal(res.stage[0].recv_wait, 3);
    assert_int_equal(res.stage[0].idle, 3);
    assert_int_equal(res.stage[0].finish, 6);
    assert_int_equal(res.stage[1].recv_wait, 1);
    /* stage 1's REDUCE_GRADS waits for stage 0 (embedding group) until 6. */
    assert_int_equal(res.stage[1].sync_wait, 2);
    assert_int_equal(res.stage[1].idle, 3);
    assert_int_equal(res.stage[0].peak_live, 1);
    pp_sim_result_free(&res);
}

/* Stage 0 runs no warm-up (waits for gradient 0 right after forward 0),
 * stage 1 runs GPipe (needs activation 1 before it sends gradient 0). */
static void test_sim_detects_deadlock(void **state) {
    (void)state;
    const plait_instr s0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0),
                              I(FORWARD, 0, 1), I(SEND_ACT, 0, 1), I(RECV_GRAD, 0, 1), I(BACKWARD, 0, 1), END};
    const plait_instr s1[] = {I(RECV_ACT, 0, 0), I(FORWARD, 0, 0), I(RECV_ACT, 0, 1), I(FORWARD, 0, 1),
                              I(BACKWARD, 0, 0), I(SEND_GRAD, 0, 0), I(BACKWARD, 0, 1), I(SEND_GRAD, 0, 1), END};
    const plait_instr *ptrs[] = {s0, s1};
    size_t lens[] = {10, 10};
    pp_sim_result res;
    pp_sim_verdict v = run_raw(2, 2, 1, ptrs, lens, &res);
    expect_verdict(v, PP_SIM_DEADLOCK, &res, "stage 0 waits at #2 RECV_GRAD(chunk 0, mb 0) from stage 1");
    assert_non_null(strstr(res.message, "stage 1 waits at #2 RECV_ACT(chunk 0, mb 1)"));
    pp_sim_result_free(&res);
}

static void test_sim_detects_dependency(void **state) {
    (void)state;
    pp_sim_result res;
    /* Backward before forward. */
    const plait_instr a0[] = {I(BACKWARD, 0, 0), I(FORWARD, 0, 0), END};
    const plait_instr *pa[] = {a0};
    size_t la[] = {4};
    expect_verdict(run_raw(1, 1, 1, pa, la, &res), PP_SIM_DEPENDENCY, &res, "BACKWARD(chunk 0, mb 0) before its FORWARD");
    pp_sim_result_free(&res);
    /* Stage 1 computes without receiving its input. */
    const plait_instr b0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0), END};
    const plait_instr b1[] = {I(FORWARD, 0, 0), I(RECV_ACT, 0, 0), I(BACKWARD, 0, 0), I(SEND_GRAD, 0, 0), END};
    const plait_instr *pb[] = {b0, b1};
    size_t lb[] = {6, 6};
    expect_verdict(run_raw(2, 1, 1, pb, lb, &res), PP_SIM_DEPENDENCY, &res, "before its input activation");
    pp_sim_result_free(&res);
    /* Stage 0's backward without the gradient of its output. */
    const plait_instr c0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(BACKWARD, 0, 0), I(RECV_GRAD, 0, 0), END};
    const plait_instr *pc[] = {c0, b1};
    expect_verdict(run_raw(2, 1, 1, pc, lb, &res), PP_SIM_DEPENDENCY, &res, "before the gradient of its output");
    pp_sim_result_free(&res);
    /* Forward twice, and REDUCE_GRADS with work missing. */
    const plait_instr d0[] = {I(FORWARD, 0, 0), I(FORWARD, 0, 0), END};
    const plait_instr *pd[] = {d0};
    expect_verdict(run_raw(1, 1, 1, pd, la, &res), PP_SIM_DEPENDENCY, &res, "twice");
    pp_sim_result_free(&res);
    const plait_instr e0[] = {I(FORWARD, 0, 0), END, I(BACKWARD, 0, 0)};
    const plait_instr *pe[] = {e0};
    expect_verdict(run_raw(1, 1, 1, pe, la, &res), PP_SIM_DEPENDENCY, &res, "REDUCE_GRADS before BACKWARD");
    pp_sim_result_free(&res);
}

/* Stage 0 sends activation 1 before activation 0: FIFO matching breaks. */
static void test_sim_detects_order(void **state) {
    (void)state;
    const plait_instr s0[] = {I(FORWARD, 0, 0), I(FORWARD, 0, 1), I(SEND_ACT, 0, 1), I(SEND_ACT, 0, 0),
                              I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0), I(RECV_GRAD, 0, 1), I(BACKWARD, 0, 1), END};
    const plait_instr s1[] = {I(RECV_ACT, 0, 0), I(FORWARD, 0, 0), I(BACKWARD, 0, 0), I(SEND_GRAD, 0, 0),
                              I(RECV_ACT, 0, 1), I(FORWARD, 0, 1), I(BACKWARD, 0, 1), I(SEND_GRAD, 0, 1), END};
    const plait_instr *ptrs[] = {s0, s1};
    size_t lens[] = {10, 10};
    pp_sim_result res;
    expect_verdict(run_raw(2, 2, 1, ptrs, lens, &res), PP_SIM_ORDER, &res,
                   "RECV_ACT(chunk 0, mb 0) from stage 0, but the next activation on that link is (chunk 0, mb 1)");
    pp_sim_result_free(&res);
}

static void test_sim_detects_unmatched(void **state) {
    (void)state;
    pp_sim_result res;
    /* Stage 0 never sends activation 1: stage 1 waits on a finished peer. */
    const plait_instr s0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(FORWARD, 0, 1),
                              I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0), I(RECV_GRAD, 0, 1), I(BACKWARD, 0, 1), END};
    const plait_instr s1[] = {I(RECV_ACT, 0, 0), I(FORWARD, 0, 0), I(BACKWARD, 0, 0), I(SEND_GRAD, 0, 0),
                              I(RECV_ACT, 0, 1), I(FORWARD, 0, 1), I(BACKWARD, 0, 1), I(SEND_GRAD, 0, 1), END};
    const plait_instr *ptrs[] = {s0, s1};
    size_t lens[] = {9, 10};
    pp_sim_verdict v = run_raw(2, 2, 1, ptrs, lens, &res);
    /* Stage 0 itself waits for gradient 1 (never sent); stage 1 for activation 1. */
    expect_verdict(v, PP_SIM_DEADLOCK, &res, "stage 1 waits at #4 RECV_ACT(chunk 0, mb 1) from stage 0");
    pp_sim_result_free(&res);
    /* Stage 1's list stops after micro-batch 0: stage 0's send of activation
     * 1 is never received, and its receive of gradient 1 never sent. */
    size_t short_lens[] = {10, 4};
    const plait_instr s0_full[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(FORWARD, 0, 1), I(SEND_ACT, 0, 1),
                                   I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0), I(RECV_GRAD, 0, 1), I(BACKWARD, 0, 1), END};
    const plait_instr *ptrs2[] = {s0_full, s1};
    expect_verdict(run_raw(2, 2, 1, ptrs2, short_lens, &res), PP_SIM_UNMATCHED, &res, "has finished its list");
    pp_sim_result_free(&res);
}

static void test_sim_detects_bad_and_incomplete(void **state) {
    (void)state;
    pp_sim_result res;
    const plait_instr a[] = {I(FORWARD, 0, 0), I(BACKWARD, 0, 0), I(REDUCE_GRADS, 0, -1)};
    const plait_instr *pa[] = {a};
    size_t la[] = {3};
    expect_verdict(run_raw(1, 1, 1, pa, la, &res), PP_SIM_INCOMPLETE, &res, "without OPTIM_STEP");
    pp_sim_result_free(&res);
    const plait_instr b[] = {I(FORWARD, 0, 0), I(BACKWARD, 0, 0)};
    size_t lb[] = {2};
    const plait_instr *pb[] = {b};
    expect_verdict(run_raw(1, 2, 1, pb, lb, &res), PP_SIM_INCOMPLETE, &res, "never ran FORWARD(chunk 0, mb 1)");
    pp_sim_result_free(&res);
    const plait_instr c[] = {I(FORWARD, 0, 0), I(BACKWARD, 0, 0), END, I(FORWARD, 0, 0)};
    const plait_instr *pc[] = {c};
    size_t lc[] = {5};
    expect_verdict(run_raw(1, 1, 1, pc, lc, &res), PP_SIM_BAD_INSTR, &res, "after OPTIM_STEP");
    pp_sim_result_free(&res);
    const plait_instr d[] = {I(FORWARD, 1, 0), END};
    const plait_instr *pd[] = {d};
    size_t ld[] = {3};
    expect_verdict(run_raw(1, 1, 1, pd, ld, &res), PP_SIM_BAD_INSTR, &res, "outside 1 chunks");
    pp_sim_result_free(&res);
    const plait_instr e[] = {{.op = 99, .chunk = 0, .mb = 0}};
    const plait_instr *pe[] = {e};
    size_t le[] = {1};
    expect_verdict(run_raw(1, 1, 1, pe, le, &res), PP_SIM_BAD_INSTR, &res, "unknown op 99");
    pp_sim_result_free(&res);
    /* The last virtual stage has nobody to send its activation to. */
    const plait_instr f[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0), I(BACKWARD, 0, 0), END};
    const plait_instr *pf[] = {f};
    size_t lf[] = {5};
    expect_verdict(run_raw(1, 1, 1, pf, lf, &res), PP_SIM_BAD_INSTR, &res, "has no successor");
    pp_sim_result_free(&res);
}

/* ---- the schedules ------------------------------------------------------- */

/* Run one configuration and check every property of a schedule. */
static void check_schedule(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v, int64_t tf, int64_t tb) {
    lists L;
    plait_status st = build_all(kind, p, m, v, &L);
    if (st != PLAIT_OK) fail_msg("%s p=%d m=%d v=%d: build failed (%d)", pp_schedule_name(kind), p, m, v, st);
    pp_sim_result res;
    pp_sim_verdict verdict = run(&L, m, v, tf, tb, &res);
    if (verdict != PP_SIM_OK)
        fail_msg("%s p=%d m=%d v=%d: %s: %s", pp_schedule_name(kind), p, m, v, pp_sim_verdict_name(verdict),
                 res.message);
    int64_t idle = expect_idle_steps(p, m, v) * (tf + tb);
    if (res.makespan != (int64_t)m * v * (tf + tb) + idle)
        fail_msg("%s p=%d m=%d v=%d: step takes %lld, formula %lld", pp_schedule_name(kind), p, m, v,
                 (long long)res.makespan, (long long)((int64_t)m * v * (tf + tb) + idle));
    for (int32_t s = 0; s < p; s++) {
        const pp_sim_stage *x = &res.stage[s];
        if (x->idle != idle)
            fail_msg("%s p=%d m=%d v=%d tF=%lld tB=%lld: stage %d idle %lld, formula %lld", pp_schedule_name(kind),
                     p, m, v, (long long)tf, (long long)tb, s, (long long)x->idle, (long long)idle);
        assert_int_equal(x->busy, (int64_t)m * v * (tf + tb));
        assert_int_equal(x->idle, x->recv_wait + x->sync_wait + (res.makespan - x->finish));
        int64_t bound = expect_peak_live(kind, p, s, m, v);
        if (x->peak_live != bound)
            fail_msg("%s p=%d m=%d v=%d: stage %d peak live activations %lld, bound %lld", pp_schedule_name(kind), p,
                     m, v, s, (long long)x->peak_live, (long long)bound);
        if (kind == PP_SCHEDULE_1F1B) assert_true(x->peak_live <= p - s);
        assert_int_equal(pp_schedule_peak_live(kind, p, s, m, v), bound);
        /* Slots held until sends are received: at most one more than live. */
        /* Slots held until their sends are received (what an executor
         * needs that never waits to reuse a buffer under a rendezvous
         * transport): one more than live with one chunk per stage; with
         * interleaving, gradients wait longer upstream (informative only). */
        assert_true(x->peak_held >= x->peak_live);
        if (v == 1) assert_true(x->peak_held <= x->peak_live + 1);
    }
    assert_int_equal(pp_schedule_idle_steps(kind, p, m, v), expect_idle_steps(p, m, v));
    double bubble = (double)expect_idle_steps(p, m, v) / (double)((int64_t)m * v + expect_idle_steps(p, m, v));
    assert_float_equal(pp_schedule_bubble(kind, p, m, v), bubble, 1e-12);
    assert_float_equal((double)idle / (double)res.makespan, bubble, 1e-12);
    pp_sim_result_free(&res);
    lists_free(&L);
}

/* The matrix: pp in {2,3,4}, m in {1,2,3,4,8}, v in {1,2}, every
 * schedule (1f1b has one chunk per stage: v = 2 must be refused). */
static void test_matrix(void **state) {
    (void)state;
    static const int32_t ms[] = {1, 2, 3, 4, 8};
    int checked = 0;
    for (int kind = PP_SCHEDULE_GPIPE; kind <= PP_SCHEDULE_INTERLEAVED; kind++)
        for (int32_t p = 2; p <= 4; p++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (int32_t v = 1; v <= 2; v++) {
                    if (kind == PP_SCHEDULE_1F1B && v == 2) {
                        char err[256] = "";
                        assert_int_equal(pp_schedule_check(kind, p, 0, ms[mi], v, err, sizeof err),
                                         PLAIT_ERR_INVALID_ARG);
                        assert_non_null(strstr(err, "interleaved"));
                        lists L;
                        assert_int_equal(build_all(kind, p, ms[mi], v, &L), PLAIT_ERR_INVALID_ARG);
                        lists_free(&L);
                        continue;
                    }
                    check_schedule((pp_schedule_kind)kind, p, ms[mi], v, 1, 2);
                    checked++;
                }
    assert_int_equal(checked, 3 * 3 * 5 * 2 - 3 * 5);
}

/* Beyond the matrix: more stages, micro-batch counts around multiples of p,
 * three and four chunks, and other forward/backward cost ratios. */
static void test_sweep(void **state) {
    (void)state;
    static const int64_t costs[][2] = {{1, 1}, {1, 2}, {2, 3}, {1, 3}};
    for (int kind = PP_SCHEDULE_GPIPE; kind <= PP_SCHEDULE_INTERLEAVED; kind++)
        for (int32_t p = 1; p <= 7; p++)
            for (int32_t m = 1; m <= 15; m++)
                for (int32_t v = 1; v <= 4; v++) {
                    if (pp_schedule_check((pp_schedule_kind)kind, p, 0, m, v, NULL, 0) != PLAIT_OK) continue;
                    for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++)
                        check_schedule((pp_schedule_kind)kind, p, m, v, costs[c][0], costs[c][1]);
                }
}

static int count_op(const plait_instr *in, size_t n, int op) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += in[i].op == op;
    return k;
}

static void test_list_shape(void **state) {
    (void)state;
    for (int kind = PP_SCHEDULE_GPIPE; kind <= PP_SCHEDULE_INTERLEAVED; kind++)
        for (int32_t p = 2; p <= 4; p++)
            for (int32_t m = 1; m <= 8; m++) {
                int32_t v = kind == PP_SCHEDULE_1F1B ? 1 : 2;
                lists L;
                assert_int_equal(build_all((pp_schedule_kind)kind, p, m, v, &L), PLAIT_OK);
                for (int32_t s = 0; s < p; s++) {
                    const plait_instr *in = L.items[s];
                    size_t n = L.len[s];
                    assert_int_equal(in[n - 2].op, PLAIT_INSTR_REDUCE_GRADS);
                    assert_int_equal(in[n - 1].op, PLAIT_INSTR_OPTIM_STEP);
                    assert_int_equal(in[n - 1].mb, -1);
                    assert_int_equal(count_op(in, n, PLAIT_INSTR_FORWARD), m * v);
                    assert_int_equal(count_op(in, n, PLAIT_INSTR_BACKWARD), m * v);
                    /* Forwards before the first backward = warm-up + 1 (or all). */
                    int64_t before = 0;
                    for (size_t i = 0; i < n && in[i].op != PLAIT_INSTR_BACKWARD; i++)
                        before += in[i].op == PLAIT_INSTR_FORWARD;
                    int64_t w = pp_schedule_warmup((pp_schedule_kind)kind, p, s, m, v);
                    assert_int_equal(before, w < (int64_t)m * v ? w + 1 : w);
                    /* Interleaved wrap-around: the last stage's chunk 0 sends to
                     * stage 0's chunk 1, and gets its gradient back from it. */
                    if (v == 2 && s == p - 1) {
                        assert_int_equal(count_op(in, n, PLAIT_INSTR_SEND_ACT), m);
                        assert_int_equal(count_op(in, n, PLAIT_INSTR_RECV_GRAD), m);
                        for (size_t i = 0; i < n; i++)
                            if (in[i].op == PLAIT_INSTR_SEND_ACT || in[i].op == PLAIT_INSTR_RECV_GRAD)
                                assert_int_equal(in[i].chunk, 0);
                    }
                    if (v == 2 && s == 0) {
                        for (size_t i = 0; i < n; i++)
                            if (in[i].op == PLAIT_INSTR_RECV_ACT || in[i].op == PLAIT_INSTR_SEND_GRAD)
                                assert_int_equal(in[i].chunk, 1);
                    }
                }
                if (kind == PP_SCHEDULE_GPIPE) {
                    /* GPipe: every forward precedes every backward. */
                    int64_t first_b = (int64_t)L.len[0], last_f = -1;
                    for (size_t i = 0; i < L.len[0]; i++) {
                        if (L.items[0][i].op == PLAIT_INSTR_BACKWARD && (int64_t)i < first_b) first_b = (int64_t)i;
                        if (L.items[0][i].op == PLAIT_INSTR_FORWARD) last_f = (int64_t)i;
                    }
                    assert_true(last_f < first_b);
                }
                lists_free(&L);
            }
}

/* Interleaved with one chunk per stage is 1F1B, instruction for instruction. */
static void test_interleaved_v1_is_1f1b(void **state) {
    (void)state;
    for (int32_t p = 1; p <= 5; p++)
        for (int32_t m = 1; m <= 9; m++) {
            lists a, b;
            assert_int_equal(build_all(PP_SCHEDULE_1F1B, p, m, 1, &a), PLAIT_OK);
            assert_int_equal(build_all(PP_SCHEDULE_INTERLEAVED, p, m, 1, &b), PLAIT_OK);
            for (int32_t s = 0; s < p; s++) {
                assert_int_equal(a.len[s], b.len[s]);
                assert_memory_equal(a.items[s], b.items[s], a.len[s] * sizeof(plait_instr));
            }
            lists_free(&a);
            lists_free(&b);
        }
}

/* The exact 1F1B list of a small case, as a reader would write it. */
static void test_1f1b_literal(void **state) {
    (void)state;
    const plait_instr want0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0),                     /* warm-up */
                                 I(FORWARD, 0, 1), I(SEND_ACT, 0, 1),                     /* steady */
                                 I(RECV_GRAD, 0, 0), I(BACKWARD, 0, 0),
                                 I(FORWARD, 0, 2), I(SEND_ACT, 0, 2),
                                 I(RECV_GRAD, 0, 1), I(BACKWARD, 0, 1),
                                 I(RECV_GRAD, 0, 2), I(BACKWARD, 0, 2), END};             /* cool-down */
    plait_instr got[32];
    size_t n = 0;
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_1F1B, 2, 0, 3, 1, got, 32, &n, NULL, 0), PLAIT_OK);
    assert_int_equal(n, sizeof want0 / sizeof want0[0]);
    assert_memory_equal(got, want0, sizeof want0);
}

static void test_build_errors(void **state) {
    (void)state;
    char err[256];
    plait_instr buf[8];
    size_t n = 0;
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_1F1B, 2, 2, 4, 1, buf, 8, &n, err, sizeof err),
                     PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "stage 2 is outside [0, 2)"));
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_GPIPE, 2, 0, 0, 1, buf, 8, &n, err, sizeof err),
                     PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "micro-batches m = 0"));
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_INTERLEAVED, 1, 0, 4, 2, buf, 8, &n, err, sizeof err),
                     PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "at least 2 pipeline stages"));
    assert_int_equal(pp_schedule_build((pp_schedule_kind)7, 2, 0, 4, 1, buf, 8, &n, err, sizeof err),
                     PLAIT_ERR_INVALID_ARG);
    /* Too small a buffer: the needed length comes back, nothing written. */
    memset(buf, 0xAB, sizeof buf);
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_1F1B, 4, 1, 8, 1, buf, 8, &n, err, sizeof err),
                     PLAIT_ERR_NO_MEMORY);
    assert_int_equal(n, pp_schedule_length(PP_SCHEDULE_1F1B, 4, 1, 8, 1));
    assert_int_equal(n, 8 * 6 + 2);
    assert_int_equal(buf[0].op, 0xABAB);
    n = 0;
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_GPIPE, 3, 0, 2, 2, NULL, 0, &n, NULL, 0), PLAIT_ERR_NO_MEMORY);
    assert_int_equal(n, pp_schedule_length(PP_SCHEDULE_GPIPE, 3, 0, 2, 2));
    assert_int_equal(pp_schedule_length(PP_SCHEDULE_1F1B, 2, 0, 4, 2), 0);
    pp_schedule_kind k;
    assert_int_equal(pp_schedule_parse("interleaved", &k), 0);
    assert_int_equal(k, PP_SCHEDULE_INTERLEAVED);
    assert_int_equal(pp_schedule_parse("1F1B", &k), -1);
    assert_string_equal(pp_schedule_name(PP_SCHEDULE_GPIPE), "gpipe");
}

/* ---- zero bubble (ZB-H1) ------------------------------------------------- */

/* Idle per stage, written out from schedule.h: with equal pass times t any
 * m gives ((p-1) + max(0, p-m)) * t; m >= p gives (p-1)*max(tF, tB, tF+tB-tW)
 * for any times. -1 where neither form applies. */
static int64_t expect_zb1_idle(int32_t p, int32_t m, int64_t tf, int64_t tb, int64_t tw) {
    if (tf == tb && tb == tw) return ((p - 1) + (p > m ? p - m : 0)) * tf;
    if (m < p) return -1;
    int64_t x = tf > tb ? tf : tb;
    if (tf + tb - tw > x) x = tf + tb - tw;
    return (p - 1) * x;
}

static void check_zb1(int32_t p, int32_t m, int64_t tf, int64_t tb, int64_t tw) {
    lists L;
    plait_status st = build_all(PP_SCHEDULE_ZB1, p, m, 1, &L);
    if (st != PLAIT_OK) fail_msg("zb1 p=%d m=%d: build failed (%d)", p, m, st);
    int32_t w[16];
    executor_windows(&L, 1, w);
    pp_sim_config cfg = {.stages = p,
                         .chunks = 1,
                         .micro_batches = m,
                         .t_forward = tf,
                         .t_backward = tb,
                         .t_weight = tw,
                         .send_window = windowed ? w : NULL};
    const plait_instr *ptrs[16];
    for (int32_t s = 0; s < p; s++) ptrs[s] = L.items[s];
    pp_sim_result res;
    pp_sim_verdict verdict = pp_sim_run(&cfg, ptrs, L.len, &res);
    if (verdict != PP_SIM_OK) fail_msg("zb1 p=%d m=%d: %s: %s", p, m, pp_sim_verdict_name(verdict), res.message);
    int64_t want = expect_zb1_idle(p, m, tf, tb, tw), busy = (int64_t)m * (tf + tb + tw);
    for (int32_t s = 0; s < p; s++) {
        const pp_sim_stage *x = &res.stage[s];
        assert_int_equal(x->busy, busy);
        if (want >= 0 && x->idle != want)
            fail_msg("zb1 p=%d m=%d tF=%lld tB=%lld tW=%lld: stage %d idle %lld, formula %lld", p, m, (long long)tf,
                     (long long)tb, (long long)tw, s, (long long)x->idle, (long long)want);
        /* never idler than 1F1B with the whole backward (tB + tW) */
        assert_true(x->idle <= (p - 1) * (tf + tb + tw));
        int64_t live = p < m ? p : m;
        if (x->peak_live != live)
            fail_msg("zb1 p=%d m=%d: stage %d holds %lld micro-batches, bound %lld", p, m, s, (long long)x->peak_live,
                     (long long)live);
        assert_int_equal(pp_schedule_peak_live(PP_SCHEDULE_ZB1, p, s, m, 1), live);
        assert_true(x->peak_held >= x->peak_live && x->peak_held <= x->peak_live + 1);
    }
    if (tf == tb && tb == tw) {
        assert_int_equal(pp_schedule_idle_steps(PP_SCHEDULE_ZB1, p, m, 1) * tf, want);
        assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_ZB1, p, m, 1), (double)want / (double)res.makespan, 1e-12);
    }
    pp_sim_result_free(&res);
    lists_free(&L);
}

/* Every stage count and micro-batch count, equal and unequal pass times. */
static void test_zb1_sweep(void **state) {
    (void)state;
    static const int64_t costs[][3] = {{1, 1, 1}, {2, 2, 2}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2},
                                       {3, 2, 2}, {2, 3, 1}, {1, 3, 4}};
    for (int32_t p = 1; p <= 8; p++)
        for (int32_t m = 1; m <= 17; m++)
            for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++)
                check_zb1(p, m, costs[c][0], costs[c][1], costs[c][2]);
}

/* The executor waits for each send at a fixed later send of its kind
 * (plait_step_send_window), so that the boundary pool it sends from holds
 * what the schedule fixes: with those waits every schedule still runs
 * without deadlock, each stage as busy and as idle as the closed forms say,
 * for every configuration the sweeps above check. */
static void test_windowed_sends(void **state) {
    windowed = 1;
    test_matrix(state);
    test_sweep(state);
    test_zb1_sweep(state);
    windowed = 0;
}

/* The simulator enforces a window: one send in flight a link deadlocks
 * looped gpipe (stage 0 receives its second chunk's inputs only after
 * all its first chunk's forwards, while the last stage waits for the
 * first of them to be received before it sends the next), which is why
 * the executor never waits there before the step's end; and one in flight
 * makes interleaved slower than its closed form. */
static void test_sim_window_enforced(void **state) {
    (void)state;
    lists L;
    assert_int_equal(build_all(PP_SCHEDULE_GPIPE, 2, 4, 2, &L), PLAIT_OK);
    const int32_t one[16] = {1, 1};
    const plait_instr *ptrs[16];
    for (int32_t s = 0; s < L.p; s++) ptrs[s] = L.items[s];
    pp_sim_config cfg = {
        .stages = 2, .chunks = 2, .micro_batches = 4, .t_forward = 1, .t_backward = 2, .send_window = one};
    pp_sim_result res;
    expect_verdict(pp_sim_run(&cfg, ptrs, L.len, &res), PP_SIM_DEADLOCK, &res, "SEND_ACT");
    pp_sim_result_free(&res);
    lists_free(&L);
    assert_int_equal(build_all(PP_SCHEDULE_INTERLEAVED, 2, 4, 2, &L), PLAIT_OK);
    for (int32_t s = 0; s < L.p; s++) ptrs[s] = L.items[s];
    assert_int_equal(pp_sim_run(&cfg, ptrs, L.len, &res), PP_SIM_OK);
    assert_true(res.makespan > 4 * 2 * 3 + expect_idle_steps(2, 4, 2) * 3);
    pp_sim_result_free(&res);
    lists_free(&L);
}

/* Without its weight halves and with BACKWARD_INPUT read as BACKWARD, a zb1
 * list is the 1F1B list, instruction for instruction: the same messages in
 * the same order; and the weight halves come in micro-batch order, each
 * after its input half, so gradients accumulate as under 1F1B. */
static void test_zb1_is_1f1b_plus_weights(void **state) {
    (void)state;
    for (int32_t p = 1; p <= 6; p++)
        for (int32_t m = 1; m <= 12; m++) {
            lists a, z;
            assert_int_equal(build_all(PP_SCHEDULE_1F1B, p, m, 1, &a), PLAIT_OK);
            assert_int_equal(build_all(PP_SCHEDULE_ZB1, p, m, 1, &z), PLAIT_OK);
            for (int32_t s = 0; s < p; s++) {
                size_t k = 0;
                int32_t next_w = 0;
                for (size_t i = 0; i < z.len[s]; i++) {
                    plait_instr in = z.items[s][i];
                    if (in.op == PLAIT_INSTR_BACKWARD_WEIGHT) {
                        assert_int_equal(in.mb, next_w++);
                        continue;
                    }
                    if (in.op == PLAIT_INSTR_BACKWARD_INPUT) in.op = PLAIT_INSTR_BACKWARD;
                    assert_true(k < a.len[s]);
                    assert_memory_equal(&in, &a.items[s][k], sizeof in);
                    k++;
                }
                assert_int_equal(k, a.len[s]);
                assert_int_equal(next_w, m);
                assert_int_equal(z.len[s], a.len[s] + (size_t)m);
            }
            lists_free(&a);
            lists_free(&z);
        }
}

/* The exact list of a small case: stage 1 of 2 (the last), m = 3, holds two
 * weight halves back (s = 1) and does them at the end. */
static void test_zb1_literal(void **state) {
    (void)state;
    const plait_instr want0[] = {I(FORWARD, 0, 0), I(SEND_ACT, 0, 0),
                                 I(FORWARD, 0, 1), I(SEND_ACT, 0, 1),
                                 I(RECV_GRAD, 0, 0), I(BACKWARD_INPUT, 0, 0), I(BACKWARD_WEIGHT, 0, 0),
                                 I(FORWARD, 0, 2), I(SEND_ACT, 0, 2),
                                 I(RECV_GRAD, 0, 1), I(BACKWARD_INPUT, 0, 1), I(BACKWARD_WEIGHT, 0, 1),
                                 I(RECV_GRAD, 0, 2), I(BACKWARD_INPUT, 0, 2), I(BACKWARD_WEIGHT, 0, 2), END};
    const plait_instr want1[] = {I(RECV_ACT, 0, 0), I(FORWARD, 0, 0), I(BACKWARD_INPUT, 0, 0), I(SEND_GRAD, 0, 0),
                                 I(RECV_ACT, 0, 1), I(FORWARD, 0, 1), I(BACKWARD_INPUT, 0, 1), I(SEND_GRAD, 0, 1),
                                 I(BACKWARD_WEIGHT, 0, 0),
                                 I(RECV_ACT, 0, 2), I(FORWARD, 0, 2), I(BACKWARD_INPUT, 0, 2), I(SEND_GRAD, 0, 2),
                                 I(BACKWARD_WEIGHT, 0, 1), I(BACKWARD_WEIGHT, 0, 2), END};
    plait_instr got[32];
    size_t n = 0;
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_ZB1, 2, 0, 3, 1, got, 32, &n, NULL, 0), PLAIT_OK);
    assert_int_equal(n, sizeof want0 / sizeof want0[0]);
    assert_memory_equal(got, want0, sizeof want0);
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_ZB1, 2, 1, 3, 1, got, 32, &n, NULL, 0), PLAIT_OK);
    assert_int_equal(n, sizeof want1 / sizeof want1[0]);
    assert_memory_equal(got, want1, sizeof want1);
    char err[256] = "";
    assert_int_equal(pp_schedule_check(PP_SCHEDULE_ZB1, 4, 0, 8, 2, err, sizeof err), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "zb1 runs one model chunk per stage"));
    pp_schedule_kind k;
    assert_int_equal(pp_schedule_parse("zb1", &k), 0);
    assert_int_equal(k, PP_SCHEDULE_ZB1);
    assert_string_equal(pp_schedule_bubble_formula(PP_SCHEDULE_ZB1, 4, 8, 1), "(p-1)/(3m+p-1)");
    assert_string_equal(pp_schedule_bubble_formula(PP_SCHEDULE_ZB1, 4, 2, 1), "(2p-m-1)/(2m+2p-1)");
    /* a third of 1F1B's idle time at m = 8, p = 4: 3 passes of 27 against 9 of 33 */
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_ZB1, 4, 8, 1), 3.0 / 27.0, 1e-15);
}

/* The simulator catches a broken split backward. */
static void test_sim_detects_split_errors(void **state) {
    (void)state;
    pp_sim_result res;
    const plait_instr a[] = {I(FORWARD, 0, 0), I(BACKWARD_WEIGHT, 0, 0), I(BACKWARD_INPUT, 0, 0), END};
    const plait_instr *pa[] = {a};
    size_t la[] = {5};
    expect_verdict(run_raw(1, 1, 1, pa, la, &res), PP_SIM_DEPENDENCY, &res, "before its BACKWARD_INPUT");
    pp_sim_result_free(&res);
    const plait_instr b[] = {I(FORWARD, 0, 0), I(BACKWARD_INPUT, 0, 0), END};
    const plait_instr *pb[] = {b};
    size_t lb[] = {4};
    expect_verdict(run_raw(1, 1, 1, pb, lb, &res), PP_SIM_DEPENDENCY, &res, "REDUCE_GRADS before BACKWARD_WEIGHT");
    pp_sim_result_free(&res);
    const plait_instr c[] = {I(FORWARD, 0, 0), I(BACKWARD, 0, 0), I(BACKWARD_INPUT, 0, 0), END};
    const plait_instr *pc[] = {c};
    size_t lc[] = {5};
    expect_verdict(run_raw(1, 1, 1, pc, lc, &res), PP_SIM_DEPENDENCY, &res, "twice");
    pp_sim_result_free(&res);
    const plait_instr d[] = {I(FORWARD, 0, 0), I(BACKWARD_INPUT, 0, 0)};
    const plait_instr *pd[] = {d};
    size_t ld[] = {2};
    expect_verdict(run_raw(1, 1, 1, pd, ld, &res), PP_SIM_INCOMPLETE, &res, "never ran BACKWARD_WEIGHT(chunk 0, mb 0)");
    pp_sim_result_free(&res);
}

static void test_formula_text(void **state) {
    (void)state;
    assert_string_equal(pp_schedule_bubble_formula(PP_SCHEDULE_1F1B, 4, 2, 1), "(p-1)/(m+p-1)");
    assert_string_equal(pp_schedule_bubble_formula(PP_SCHEDULE_INTERLEAVED, 4, 8, 2), "(p-1)/(v*m+p-1)");
    assert_string_equal(pp_schedule_bubble_formula(PP_SCHEDULE_INTERLEAVED, 4, 3, 2), "(v*(p-m)+m-1)/(v*p+m-1)");
    /* The textbook cases. */
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_1F1B, 4, 8, 1), 3.0 / 11.0, 1e-15);
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_GPIPE, 4, 1, 1), 3.0 / 4.0, 1e-15);
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_INTERLEAVED, 4, 8, 2), 3.0 / 19.0, 1e-15);
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_INTERLEAVED, 4, 3, 2), 4.0 / 10.0, 1e-15);
    assert_float_equal(pp_schedule_bubble(PP_SCHEDULE_1F1B, 1, 5, 1), 0.0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_timing_by_hand),
        cmocka_unit_test(test_sim_detects_deadlock),
        cmocka_unit_test(test_sim_detects_dependency),
        cmocka_unit_test(test_sim_detects_order),
        cmocka_unit_test(test_sim_detects_unmatched),
        cmocka_unit_test(test_sim_detects_bad_and_incomplete),
        cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_list_shape),
        cmocka_unit_test(test_interleaved_v1_is_1f1b),
        cmocka_unit_test(test_1f1b_literal),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_formula_text),
        cmocka_unit_test(test_zb1_sweep),
        cmocka_unit_test(test_zb1_is_1f1b_plus_weights),
        cmocka_unit_test(test_zb1_literal),
        cmocka_unit_test(test_sim_detects_split_errors),
        cmocka_unit_test(test_windowed_sends),
        cmocka_unit_test(test_sim_window_enforced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
