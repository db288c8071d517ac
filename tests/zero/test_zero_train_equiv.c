/*
 * End to end, `plait train` on a tiny GPT over TCP ranks:
 *   - each ZeRO stage at dp 2 and dp 4, with and without gradient
 *     accumulation, reproduces plain DP + adam's loss curve (same layout) over
 *     50 steps to 1e-5 relative (a sanitizer's build: dp 4 with
 *     accumulation alone);
 *   - in deterministic mode each stage at dp 2, dp 4 and dp 2 x pp 2 is
 *     bit-identical to one process running plain adam over the same
 *     micro-batches: the same loss every step and the same final checkpoint
 *     (parameters and optimizer state), for micro-batches of 2 (dp 4: no
 *     accumulation) and of 1, over 5 steps (the warmup's 2 and 3 of the
 *     decay: a step's code path is the same from the second on). Under pp the tied embedding's halves sit on
 *     the first and the last stage, each reduced over DP before the two are
 *     summed;
 *   - zero1 accumulating in bf16 ([optim.zero1] grad_accum = bf16) at dp 2
 *     with 4 micro-batches, and at dp 2 x pp 2 with 2 (the tied embedding's
 *     halves whole on two stages), follows plain DP + adam's loss curve
 *     within bf16's rounding of the running sums, and differs from it (the
 *     sums are rounded); in deterministic mode with one micro-batch a step
 *     it is one process's bits, and with several it is refused.
 */
#include "zero/zero_train_util.h"

static char dir[4096], ini[4200];

static int setup(void **state) {
    (void)state;
    zt_scratch(dir, sizeof dir, "zero-train");
    zt_config(dir, ini, sizeof ini, NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zt_rm_rf(dir);
    return 0;
}

static const char *const plugins[] = {"adam", "zero1", "zero2", "zero3"};

/* A sanitizer's build (zt_sanitized) looks for memory errors, which the
 * curves' numbers do not show: it runs their last layout alone (dp 4 with
 * accumulation: the others' code paths), the deterministic runs below
 * checking dp 2, dp 4 and pp 2 there as well. */
static void test_loss_curves(void **state) {
    (void)state;
    static const int layouts[][2] = {{2, 1}, {2, 2}, {4, 1}, {4, 2}}; /* dp, accumulation */
    const size_t n = sizeof layouts / sizeof layouts[0];
    for (size_t k = zt_sanitized() ? n - 1 : 0; k < n; k++) {
        int dp = layouts[k][0], acc = layouts[k][1];
        double loss[4][64];
        for (int p = 0; p < 4; p++) {
            char out[4300], a1[64], a2[64], a3[64];
            snprintf(out, sizeof out, "%s/%s-dp%d-acc%d", dir, plugins[p], dp, acc);
            snprintf(a1, sizeof a1, "parallel.dp=%d", dp);
            snprintf(a2, sizeof a2, "data.micro_batch=%d", 8 / dp / acc);
            snprintf(a3, sizeof a3, "optim.plugin=%s", plugins[p]);
            zt_train(ini, dp, out, 120, a1, a2, a3, "run.steps=50", (char *)NULL);
            assert_int_equal(zt_metrics(out, "loss", loss[p], 64), 50);
        }
        for (int p = 1; p < 4; p++)
            for (int s = 0; s < 50; s++) {
                double rel = fabs(loss[p][s] - loss[0][s]) / fabs(loss[0][s]);
                if (!(rel <= 1e-5))
                    fail_msg("%s dp %d accumulation %d: step %d loss %.6g, plain DP %.6g (%.2g relative)", plugins[p],
                             dp, acc, s + 1, loss[p][s], loss[0][s], rel);
            }
    }
}

/* A deterministic run's losses and final checkpoint equal one process's. */
#define DET_STEPS 5

static void assert_as_one_process(const char *out, const char *ref, const double *want, const char *what) {
    double got[32];
    assert_int_equal(zt_metrics(out, "loss", got, 32), DET_STEPS);
    for (int s = 0; s < DET_STEPS; s++)
        if (got[s] != want[s]) fail_msg("%s: step %d loss %.9g, one process %.9g", what, s + 1, got[s], want[s]);
    zt_assert_same_ckpt(out, ref, DET_STEPS);
}

static void test_deterministic_bitwise(void **state) {
    (void)state;
    for (int mb = 2; mb >= 1; mb--) {
        char ref[4300], a_mb[64], a_steps[32];
        snprintf(ref, sizeof ref, "%s/det-ref-mb%d", dir, mb);
        snprintf(a_mb, sizeof a_mb, "data.micro_batch=%d", mb);
        snprintf(a_steps, sizeof a_steps, "run.steps=%d", DET_STEPS);
        zt_train(ini, 1, ref, 120, a_mb, a_steps, "run.deterministic=true", (char *)NULL);
        double want[32];
        assert_int_equal(zt_metrics(ref, "loss", want, 32), DET_STEPS);
        for (int p = 1; p < 4; p++) {
            char out[4300], a1[64], a3[64], what[64];
            snprintf(a3, sizeof a3, "optim.plugin=%s", plugins[p]);
            for (int dp = 2; dp <= 4; dp += 2) {
                snprintf(out, sizeof out, "%s/det-%s-dp%d-mb%d", dir, plugins[p], dp, mb);
                snprintf(a1, sizeof a1, "parallel.dp=%d", dp);
                zt_train(ini, dp, out, 120, a1, a_mb, a3, a_steps, "run.deterministic=true", (char *)NULL);
                snprintf(what, sizeof what, "%s dp %d", plugins[p], dp);
                assert_as_one_process(out, ref, want, what);
            }
            snprintf(out, sizeof out, "%s/det-%s-dp2pp2-mb%d", dir, plugins[p], mb);
            zt_train(ini, 4, out, 120, "parallel.plugin=hybrid", "parallel.dp=2", "parallel.pp=2", a_mb, a3, a_steps,
                     "run.deterministic=true", (char *)NULL);
            snprintf(what, sizeof what, "%s dp 2 x pp 2", plugins[p]);
            assert_as_one_process(out, ref, want, what);
        }
    }
}

/* zero1 with the micro-batches' gradients added up in bf16. */
static void test_grad_accum_bf16(void **state) {
    (void)state;
    static const struct {
        int pp, mb; /* pipeline stages, sequences a micro-batch (global batch 8, dp 2) */
    } cases[] = {{1, 1}, {2, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double loss[2][64];
        for (int p = 0; p < 2; p++) {
            char out[4300], a_pp[64], a_mb[64];
            snprintf(out, sizeof out, "%s/bf16acc-%s-pp%d", dir, p ? "zero1" : "adam", cases[k].pp);
            snprintf(a_pp, sizeof a_pp, "parallel.pp=%d", cases[k].pp);
            snprintf(a_mb, sizeof a_mb, "data.micro_batch=%d", cases[k].mb);
            zt_train(ini, 2 * cases[k].pp, out, 120, "parallel.plugin=hybrid", "parallel.dp=2", a_pp, a_mb,
                     p ? "optim.plugin=zero1" : "optim.plugin=adam", p ? "optim.zero1.grad_accum=bf16" : "run.steps=30",
                     "run.steps=30", (char *)NULL);
            assert_int_equal(zt_metrics(out, "loss", loss[p], 64), 30);
        }
        double worst = 0;
        for (int s = 0; s < 30; s++) {
            double rel = fabs(loss[1][s] - loss[0][s]) / fabs(loss[0][s]);
            if (!(rel <= 1e-3))
                fail_msg("zero1 grad_accum = bf16, pp %d: step %d loss %.6g, plain DP %.6g (%.2g relative)",
                         cases[k].pp, s + 1, loss[1][s], loss[0][s], rel);
            if (rel > worst) worst = rel;
        }
        if (!(worst > 0)) fail_msg("zero1 grad_accum = bf16, pp %d: the curve is plain DP's to the bit", cases[k].pp);
    }
    /* one micro-batch a step, deterministic: the float32 gradient, the
     * same bits on every layout, rounded once into the bf16 slices, so
     * dp 4 and dp 4 x pp 2 end alike; and not as float32 slices do */
    char ref[4300], out[4300], a_steps[32];
    snprintf(a_steps, sizeof a_steps, "run.steps=%d", DET_STEPS);
    snprintf(ref, sizeof ref, "%s/bf16acc-det-dp4", dir);
    zt_train(ini, 4, ref, 120, "parallel.dp=4", "data.micro_batch=2", "optim.plugin=zero1",
             "optim.zero1.grad_accum=bf16", a_steps, "run.deterministic=true", (char *)NULL);
    double want[32];
    assert_int_equal(zt_metrics(ref, "loss", want, 32), DET_STEPS);
    snprintf(out, sizeof out, "%s/bf16acc-det-dp4-pp2", dir);
    zt_train(ini, 8, out, 120, "parallel.plugin=hybrid", "parallel.dp=4", "parallel.pp=2", "data.micro_batch=2",
             "optim.plugin=zero1", "optim.zero1.grad_accum=bf16", a_steps, "run.deterministic=true", (char *)NULL);
    assert_as_one_process(out, ref, want, "zero1 grad_accum = bf16 dp 4 x pp 2");
    snprintf(out, sizeof out, "%s/bf16acc-det-fp32", dir);
    zt_train(ini, 1, out, 120, "data.micro_batch=2", a_steps, "run.deterministic=true", (char *)NULL);
    double fp32[32];
    assert_int_equal(zt_metrics(out, "loss", fp32, 32), DET_STEPS);
    if (!memcmp(fp32, want, sizeof(double) * DET_STEPS))
        fail_msg("zero1 grad_accum = bf16 dp 4: float32 slices' losses to the bit");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_curves),
        cmocka_unit_test(test_deterministic_bitwise),
        cmocka_unit_test(test_grad_accum_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
