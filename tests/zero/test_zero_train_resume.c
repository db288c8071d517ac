/*
 * End to end: a checkpoint written by ZeRO-3 at dp 4 (full tensors) resumes
 * with ZeRO-1 at dp 2, plain adam on one process, ZeRO-2 at dp 4 and ZeRO-3
 * at dp 2; in deterministic mode every continuation ends bit-identical to one
 * process that never stopped (final checkpoint: parameters and optimizer
 * state; losses of the resumed steps). With Adam's moments in bf16
 * ([optim] moments = bf16) the same holds: ZeRO-2 at dp 2 stopped and
 * resumed with ZeRO-3 at dp 4 ends as one process that never stopped.
 */
#include "zero/zero_train_util.h"

static char dir[4096], ini[4200];

static int setup(void **state) {
    (void)state;
    zt_scratch(dir, sizeof dir, "zero-resume");
    /* the schedule must not depend on where a run stops */
    zt_config(dir, ini, sizeof ini, "lr_decay_steps = 10\n");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zt_rm_rf(dir);
    return 0;
}

static void copy_dir(const char *from, const char *to) {
    pid_t pid = fork();
    if (pid == 0) {
        execlp("cp", "cp", "-r", from, to, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_resume_across_stages_and_sizes(void **state) {
    (void)state;
    char ref[4300], first[4300];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(first, sizeof first, "%s/zero3-dp4", dir);
    zt_train(ini, 1, ref, 120, "run.deterministic=true", "run.steps=10", (char *)NULL);
    zt_train(ini, 4, first, 120, "run.deterministic=true", "run.steps=5", "parallel.dp=4", "optim.plugin=zero3",
             "data.micro_batch=2", (char *)NULL);
    double want[16], got[16];
    assert_int_equal(zt_metrics(ref, "loss", want, 16), 10);
    static const struct {
        const char *plugin;
        int dp;
    } next[] = {{"zero1", 2}, {"adam", 1}, {"zero2", 4}, {"zero3", 2}};
    for (size_t k = 0; k < sizeof next / sizeof next[0]; k++) {
        char out[4300], a1[64], a2[64];
        snprintf(out, sizeof out, "%s/then-%s-dp%d", dir, next[k].plugin, next[k].dp);
        copy_dir(first, out);
        snprintf(a1, sizeof a1, "parallel.dp=%d", next[k].dp);
        snprintf(a2, sizeof a2, "optim.plugin=%s", next[k].plugin);
        zt_train(ini, next[k].dp, out, 120, "run.deterministic=true", "run.steps=10", "run.resume=yes", a1, a2,
                 (char *)NULL);
        /* metrics.csv continues the first run's rows */
        int rows = zt_metrics(out, "loss", got, 16);
        assert_int_equal(rows, 10);
        for (int s = 0; s < rows; s++)
            if (got[s] != want[s])
                fail_msg("resumed with %s at dp %d: step %d loss %.9g, uninterrupted %.9g", next[k].plugin, next[k].dp,
                         s + 1, got[s], want[s]);
        zt_assert_same_ckpt(out, ref, 10);
    }
}

static void test_resume_bf16_moments(void **state) {
    (void)state;
    char ref[4300], first[4300], out[4300];
    snprintf(ref, sizeof ref, "%s/m16-ref", dir);
    snprintf(first, sizeof first, "%s/m16-zero2-dp2", dir);
    snprintf(out, sizeof out, "%s/m16-then-zero3-dp4", dir);
    zt_train(ini, 1, ref, 120, "run.deterministic=true", "run.steps=10", "optim.moments=bf16", (char *)NULL);
    zt_train(ini, 2, first, 120, "run.deterministic=true", "run.steps=5", "parallel.dp=2", "optim.plugin=zero2",
             "optim.moments=bf16", (char *)NULL);
    copy_dir(first, out);
    zt_train(ini, 4, out, 120, "run.deterministic=true", "run.steps=10", "run.resume=yes", "parallel.dp=4",
             "optim.plugin=zero3", "data.micro_batch=2", "optim.moments=bf16", (char *)NULL);
    double want[16], got[16];
    assert_int_equal(zt_metrics(ref, "loss", want, 16), 10);
    assert_int_equal(zt_metrics(out, "loss", got, 16), 10);
    for (int s = 0; s < 10; s++)
        if (got[s] != want[s]) fail_msg("bf16 moments resumed: step %d loss %.9g, uninterrupted %.9g", s + 1, got[s], want[s]);
    zt_assert_same_ckpt(out, ref, 10);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_resume_across_stages_and_sizes),
                                       cmocka_unit_test(test_resume_bf16_moments)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
