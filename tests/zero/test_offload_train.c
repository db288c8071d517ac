/*
 * End to end: [optim] offload = nvme (the moments in files streamed through
 * a small host buffer) leaves a run bit-identical to the same run without
 * it, for adam on one process and ZeRO-1/2/3 at dp 2 (losses and both
 * checkpoint files), ZeRO-3 with its parameter shards on disk too
 * (offload_params) at dp 2 and at dp 1, and resumes with and without offload either way. A
 * disk that fails mid-run (PLAIT_FAULT_OFFLOAD_WRITE) ends the run naming
 * the step and the file, with the earlier checkpoint intact. ZeRO-3's
 * gathers read the parameter slices ahead, and a read ahead that fails
 * (PLAIT_FAULT_OFFLOAD_READ) names the step and the file. The disk's
 * reads and writes go through io_uring where it works here, and a run with
 * the threads forced (PLAIT_OFFLOAD_IO=threads) is bit-identical too; each
 * run's log says which it used. The buffer is 64 KiB, so every step
 * streams several chunks.
 */
#include "zero/zero_train_util.h"

static char dir[4096], ini[4200], disk[4300];

static int setup(void **state) {
    (void)state;
    zt_scratch(dir, sizeof dir, "offload");
    zt_config(dir, ini, sizeof ini, "lr_decay_steps = 10\noffload_buffer = 64K\n");
    snprintf(disk, sizeof disk, "optim.offload_path=%s", dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zt_rm_rf(dir);
    return 0;
}

static void assert_same_losses(const char *run, const char *ref, int want_rows) {
    double want[16], got[16];
    assert_int_equal(zt_metrics(ref, "loss", want, 16), want_rows);
    assert_int_equal(zt_metrics(run, "loss", got, 16), want_rows);
    for (int s = 0; s < want_rows; s++)
        if (got[s] != want[s]) fail_msg("%s: step %d loss %.9g, without offload %.9g", run, s + 1, got[s], want[s]);
}

static void test_nvme_bit_identical(void **state) {
    (void)state;
    char ref[4300];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    zt_train(ini, 1, ref, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", (char *)NULL);
    static const struct {
        const char *plugin;
        int dp;
    } runs[] = {{"adam", 1}, {"zero1", 2}, {"zero2", 2}, {"zero3", 2}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char out[4300], a1[64], a2[64];
        snprintf(out, sizeof out, "%s/nvme-%s-dp%d", dir, runs[k].plugin, runs[k].dp);
        snprintf(a1, sizeof a1, "parallel.dp=%d", runs[k].dp);
        snprintf(a2, sizeof a2, "optim.plugin=%s", runs[k].plugin);
        zt_train(ini, runs[k].dp, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", a1, a2,
                 "optim.offload=nvme", disk, (char *)NULL);
        assert_same_losses(out, ref, 4);
        zt_assert_same_ckpt(out, ref, 2);
        zt_assert_same_ckpt(out, ref, 4);
    }
    for (int dp = 1; dp <= 2; dp++) {
        char out[4300], a1[64];
        snprintf(out, sizeof out, "%s/nvme-params-zero3-dp%d", dir, dp);
        snprintf(a1, sizeof a1, "parallel.dp=%d", dp);
        zt_train(ini, dp, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", a1,
                 "optim.plugin=zero3", "optim.offload=nvme", "optim.offload_params=true", disk, (char *)NULL);
        assert_same_losses(out, ref, 4);
        zt_assert_same_ckpt(out, ref, 4);
    }
}

/* The log of run `out` says how its file was read and written: through
 * io_uring, or by the threads for the reason `why` (any reason if NULL). 1:
 * io_uring. */
static int assert_io_path(const char *out, const char *why) {
    char log[4400];
    snprintf(log, sizeof log, "%s.log", out);
    char *text = zt_slurp(log);
    int ring = strstr(text, "read and written through io_uring") != NULL;
    const char *threads = strstr(text, "read and written by 4 pread/pwrite threads: ");
    int ok = ring + (threads != NULL) == 1 && (why ? threads && strstr(threads, why) : 1);
    free(text);
    if (!ok) {
        char tail[3001];
        zt_tail(log, tail, sizeof tail);
        fail_msg("%s: the log does not say once which way the file was read and written%s%s:\n%s", out,
                 why ? ", expected the threads for " : "", why ? why : "", tail);
    }
    return ring;
}

static void test_io_paths(void **state) {
    (void)state;
    char ref[4300], out[4300];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    /* the optimizers' own lines at info, the rest as the other runs */
    setenv("PLAIT_LOG_LEVEL", "warn,adam=info,zero3=info", 1);
    snprintf(out, sizeof out, "%s/auto-adam", dir);
    zt_train(ini, 1, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "optim.offload=nvme", disk,
             (char *)NULL);
    if (!assert_io_path(out, NULL))
        print_message("io_uring is not available here: the default run used the threads too\n");
    assert_same_losses(out, ref, 4);
    zt_assert_same_ckpt(out, ref, 4);
    /* the threads forced, on one rank and at ZeRO-3 dp 2 with the parameters on disk */
    setenv("PLAIT_OFFLOAD_IO", "threads", 1);
    snprintf(out, sizeof out, "%s/threads-adam", dir);
    zt_train(ini, 1, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "optim.offload=nvme", disk,
             (char *)NULL);
    assert_io_path(out, "PLAIT_OFFLOAD_IO = threads");
    assert_same_losses(out, ref, 4);
    zt_assert_same_ckpt(out, ref, 4);
    snprintf(out, sizeof out, "%s/threads-zero3", dir);
    zt_train(ini, 2, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "parallel.dp=2",
             "optim.plugin=zero3", "optim.offload=nvme", "optim.offload_params=true", disk, (char *)NULL);
    unsetenv("PLAIT_OFFLOAD_IO");
    setenv("PLAIT_LOG_LEVEL", "warn", 1);
    assert_io_path(out, "PLAIT_OFFLOAD_IO = threads");
    assert_same_losses(out, ref, 4);
    zt_assert_same_ckpt(out, ref, 4);
}

/* A run directory holding only `from`'s checkpoint of step 2. */
static void copy_ckpt(const char *from, const char *to) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s'/ckpt-00000002 '%s'/", to, from, to);
    assert_int_equal(system(cmd), 0);
}

/* The resumed run's last two losses are the uninterrupted run's steps 3, 4. */
static void assert_same_resumed_losses(const char *run, const char *ref) {
    double want[16], got[16];
    assert_int_equal(zt_metrics(ref, "loss", want, 16), 4);
    int rows = zt_metrics(run, "loss", got, 16);
    assert_true(rows >= 2);
    for (int s = 0; s < 2; s++)
        if (got[rows - 2 + s] != want[2 + s])
            fail_msg("%s: step %d loss %.9g, uninterrupted %.9g", run, 3 + s, got[rows - 2 + s], want[2 + s]);
}

static void test_resume_across_offload(void **state) {
    (void)state;
    char ref[4300], first[4300], out[4300];
    snprintf(ref, sizeof ref, "%s/ref", dir); /* test_nvme_bit_identical's */
    /* offloaded for two steps (zero2, dp 2), resumed without offload on one process */
    snprintf(first, sizeof first, "%s/nvme-zero2-dp2", dir);
    snprintf(out, sizeof out, "%s/resume-none", dir);
    copy_ckpt(first, out);
    zt_train(ini, 1, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "run.resume=yes",
             (char *)NULL);
    assert_same_resumed_losses(out, ref);
    zt_assert_same_ckpt(out, ref, 4);
    /* without offload for two steps, resumed offloaded (zero3, dp 2) */
    snprintf(out, sizeof out, "%s/resume-nvme", dir);
    copy_ckpt(ref, out);
    zt_train(ini, 2, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "run.resume=yes",
             "parallel.dp=2", "optim.plugin=zero3", "optim.offload=nvme", disk, (char *)NULL);
    assert_same_resumed_losses(out, ref);
    zt_assert_same_ckpt(out, ref, 4);
}

/* `plait train` expected to fail: its exit status and log. */
static int train_failing(const char *out, char *log_text, size_t cap, const char *fault) {
    const char *bin = getenv("PLAIT_BIN");
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "PLAIT_FAULT_OFFLOAD_WRITE=%s timeout 120 '%s' train '%s' run.out_dir='%s' run.deterministic=true "
             "run.steps=4 run.ckpt_every=2 optim.offload=nvme %s > '%s.log' 2>&1",
             fault, bin, ini, out, disk, out);
    int rc = system(cmd);
    char log[4400];
    snprintf(log, sizeof log, "%s.log", out);
    zt_tail(log, log_text, cap);
    return rc;
}

static void test_disk_failure_mid_run(void **state) {
    (void)state;
    char ref[4300], out[4300], text[3001];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(out, sizeof out, "%s/disk-fails", dir);
    int rc = train_failing(out, text, sizeof text, "3"); /* step 3's first write fails */
    if (rc == 0) fail_msg("the run with a failing disk succeeded:\n%s", text);
    if (!strstr(text, "step 3") || !strstr(text, "No space left on device") || !strstr(text, "plait-adam-state"))
        fail_msg("the failure does not name the step, the error and the file:\n%s", text);
    zt_assert_same_ckpt(out, ref, 2); /* the checkpoint before it, intact */
    char later[4400];
    snprintf(later, sizeof later, "%s/ckpt-00000004", out);
    assert_int_not_equal(access(later, F_OK), 0);
}

/* With the parameter slices on disk, the gathers read them ahead: rank 0's
 * log counts the fetches that found their slice read ahead, and a read
 * ahead that fails ends the run naming the step, the error and the file,
 * with the earlier checkpoint intact. */
static void test_params_read_ahead(void **state) {
    (void)state;
    char ref[4300], out[4300], log[4400], text[3001];
    snprintf(ref, sizeof ref, "%s/ref", dir); /* test_nvme_bit_identical's */
    snprintf(out, sizeof out, "%s/read-ahead", dir);
    setenv("PLAIT_LOG_LEVEL", "warn,zero3=info", 1);
    zt_train(ini, 1, out, 120, "run.deterministic=true", "run.steps=4", "run.ckpt_every=2", "optim.plugin=zero3",
             "optim.offload=nvme", "optim.offload_params=true", disk, (char *)NULL);
    setenv("PLAIT_LOG_LEVEL", "warn", 1);
    assert_same_losses(out, ref, 4);
    zt_assert_same_ckpt(out, ref, 4);
    snprintf(log, sizeof log, "%s.log", out);
    char *all = zt_slurp(log);
    const char *line = strstr(all, "offload: ");
    unsigned long long ahead = 0, fetches = 0;
    while (line && sscanf(line, "offload: %llu of %llu parameter fetches were read ahead", &ahead, &fetches) != 2)
        line = strstr(line + 1, "offload: ");
    free(all);
    zt_tail(log, text, sizeof text);
    if (!line) fail_msg("%s: the log does not count the fetches read ahead:\n%s", out, text);
    if (ahead == 0 || ahead > fetches)
        fail_msg("%s: %llu of %llu parameter fetches read ahead; the gathers after the first should be:\n%s", out,
                 ahead, fetches, text);
    /* turned off, no fetch is read ahead, and a bogus value is refused */
    setenv("PLAIT_LOG_LEVEL", "warn,zero3=info", 1);
    setenv("PLAIT_OFFLOAD_READ_AHEAD", "off", 1);
    snprintf(out, sizeof out, "%s/read-ahead-off", dir);
    zt_train(ini, 1, out, 120, "run.deterministic=true", "run.steps=2", "optim.plugin=zero3", "optim.offload=nvme",
             "optim.offload_params=true", disk, (char *)NULL);
    setenv("PLAIT_LOG_LEVEL", "warn", 1);
    snprintf(log, sizeof log, "%s.log", out);
    zt_tail(log, text, sizeof text);
    if (!strstr(text, "offload: 0 of "))
        fail_msg("%s: PLAIT_OFFLOAD_READ_AHEAD = off still read ahead:\n%s", out, text);
    setenv("PLAIT_OFFLOAD_READ_AHEAD", "sometimes", 1);
    snprintf(out, sizeof out, "%s/read-ahead-bogus", dir);
    char cmd[9000];
    const char *bin = getenv("PLAIT_BIN");
    snprintf(cmd, sizeof cmd,
             "timeout 120 '%s' train '%s' run.out_dir='%s' run.steps=1 optim.plugin=zero3 optim.offload=nvme "
             "optim.offload_params=true %s > '%s.log' 2>&1",
             bin, ini, out, disk, out);
    int rc = system(cmd);
    unsetenv("PLAIT_OFFLOAD_READ_AHEAD");
    snprintf(log, sizeof log, "%s.log", out);
    zt_tail(log, text, sizeof text);
    if (rc == 0 || !strstr(text, "PLAIT_OFFLOAD_READ_AHEAD = sometimes: use on"))
        fail_msg("PLAIT_OFFLOAD_READ_AHEAD = sometimes was not refused naming it:\n%s", text);
    /* step 3's first read ahead fails */
    snprintf(out, sizeof out, "%s/read-ahead-fails", dir);
    snprintf(cmd, sizeof cmd,
             "PLAIT_FAULT_OFFLOAD_READ=3 timeout 120 '%s' train '%s' run.out_dir='%s' run.deterministic=true "
             "run.steps=4 run.ckpt_every=2 optim.plugin=zero3 optim.offload=nvme optim.offload_params=true %s > "
             "'%s.log' 2>&1",
             bin, ini, out, disk, out);
    rc = system(cmd);
    snprintf(log, sizeof log, "%s.log", out);
    zt_tail(log, text, sizeof text);
    if (rc == 0) fail_msg("the run whose read ahead fails succeeded:\n%s", text);
    if (!strstr(text, "step 3") || !strstr(text, "read ahead") || !strstr(text, "Input/output error") ||
        !strstr(text, "plait-zero3-state"))
        fail_msg("the failed read does not name the step, the error and the file:\n%s", text);
    zt_assert_same_ckpt(out, ref, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvme_bit_identical),    cmocka_unit_test(test_io_paths),
        cmocka_unit_test(test_resume_across_offload), cmocka_unit_test(test_disk_failure_mid_run),
        cmocka_unit_test(test_params_read_ahead),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
