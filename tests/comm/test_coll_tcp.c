/*
 * The conformance matrix over the TCP plugin with real processes: 1, 2, 3,
 * 4, 5 and 8 ranks under plait's launcher, and 4 ranks under
 * `mpirun --allow-run-as-root --oversubscribe -np 4`; a rank that stalls in
 * an allreduce, and one SIGKILLed during it (default algorithm and ring).
 *
 * Every run covers every collective and send/recv × dtype × operator ×
 * algorithm × in-place form at the small sizes (0, 1, 7, n-1, n+1). At
 * 1 MiB + 3 elements, where the time goes (moving and checking megabytes on
 * 2 cores), each (collective, dtype, op) runs one algorithm-and-form,
 * rotating; and also only one dtype per (collective, op), rotating from a
 * start the commit chooses (coll_mp_driver big-subset, conformance_sample):
 * 8 ranks take 13 s that way, 60 s with every dtype. `make test-all`
 * (PLAIT_TEST_ALL) runs every dtype on 1 to 4 ranks, the subset at 5 and 8
 * ranks and under mpirun. A sanitizer's build leaves 5 ranks to `make
 * test-all` (3 take the same paths).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/conformance.h"
#include "launch/launch.h"
#include "host/host_table.h"

static const char *driver(void) {
    const char *d = getenv("PLAIT_COLL_DRIVER");
    return d ? d : "tests/coll_mp_driver";
}

/* Output of a job: stdout + stderr of every rank, in a temporary file. */
static char *slurp_fd(int fd) {
    off_t n = lseek(fd, 0, SEEK_END);
    char *s = malloc((size_t)n + 1);
    ssize_t got = pread(fd, s, (size_t)n, 0);
    s[got > 0 ? got : 0] = '\0';
    return s;
}

static int tmp_out(void) {
    char path[] = "/tmp/plait-coll-test-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    return fd;
}

static void expect_ok(int code, char *out) {
    if (code != 0 || !strstr(out, "coll_mp_driver: ok")) fail_msg("driver exited %d:\n%s", code, out);
    fprintf(stderr, "%s", strstr(out, "coll_mp_driver: ") ? strstr(out, "coll_mp_driver: ") : out);
    free(out);
}

/* Run n ranks; once one fails the launcher gives the others `grace_s`. */
static char *run_launch(int n, char **argv, char **env, double grace_s, plait_launch_result *res) {
    int fd = tmp_out();
    plait_launch_opts o = {.nranks = n, .exe = driver(), .argv = argv, .extra_env = env, .grace_s = grace_s,
                           .stdout_fd = fd, .stderr_fd = fd, .quiet = 1};
    assert_int_equal(plait_launch_local(&o, res), PLAIT_OK);
    char *out = slurp_fd(fd);
    close(fd);
    return out;
}

/* Rank r's report of its failed call (coll_mp_driver's report_failure),
 * copied to msg: present, within `max_s` and naming the operation `op`. */
static void failure_report(const char *out, int r, double max_s, const char *op, char *msg, size_t len) {
    char key[64];
    snprintf(key, sizeof key, "coll_mp_driver: rank %d: ", r);
    const char *line = strstr(out, key);
    if (!line) fail_msg("no report from rank %d:\n%s", r, out);
    const char *eol = strchr(line, '\n');
    snprintf(msg, len, "%.*s", eol ? (int)(eol - line) : (int)strlen(line), line);
    const char *after = strstr(msg, " after ");
    double secs = after ? atof(after + 7) : 1e9;
    if (secs > max_s) fail_msg("rank %d took %.2f s to fail (at most %.0f s): %s", r, secs, max_s, msg);
    if (!strstr(msg, op)) fail_msg("rank %d's message does not name the operation '%s': %s", r, op, msg);
}

/* The matrix on n ranks; `mode` NULL (complete) or "big-subset". */
static void launch(int n, char *mode) {
    if (!mode && !conformance_complete()) mode = "big-subset";
    char *argv[] = {"coll_mp_driver", mode, NULL};
    char sample[48];
    snprintf(sample, sizeof sample, "PLAIT_TEST_SAMPLE=%u", conformance_sample());
    char *env[] = {"PLAIT_COMM_TIMEOUT=120", "PLAIT_LOG_LEVEL=warn", sample, NULL};
    plait_launch_result res;
    char *out = run_launch(n, argv, env, 5, &res);
    char want[96];
    snprintf(want, sizeof want, "coll_mp_driver: %d ranks over tcp%s: ", n, mode ? " (1 MiB + 3 for a subset)" : "");
    if (!strstr(out, want)) fail_msg("no \"%s\" summary:\n%s", want, out);
    expect_ok(res.exit_code, out);
}

static void test_tcp_1_rank_plait_launcher(void **state) {
    (void)state;
    launch(1, NULL);
}

static void test_tcp_2_ranks_plait_launcher(void **state) {
    (void)state;
    launch(2, NULL);
}

static void test_tcp_3_ranks_plait_launcher(void **state) {
    (void)state;
    launch(3, NULL);
}

static void test_tcp_4_ranks_plait_launcher(void **state) {
    (void)state;
    launch(4, NULL);
}

/* 5 ranks take the code paths 3 ranks take (a size that is not a power of
 * two); in a sanitizer's build, where 5 ranks cost 18 s, the sanitizer
 * reads them at 3, and `make test-all` at 5 too */
static void test_tcp_5_ranks_plait_launcher(void **state) {
    (void)state;
#ifdef PLAIT_SANITIZED
    if (!conformance_complete()) {
        fprintf(stderr, "skipped in a sanitizer's build: 3 ranks take the same paths (PLAIT_TEST_ALL runs it)\n");
        skip();
    }
#endif
    launch(5, "big-subset");
}

static void test_tcp_8_ranks_plait_launcher(void **state) {
    (void)state;
    launch(8, "big-subset");
}

/* Rank 2 sits out an allreduce: the others fail within the timeout (2 s),
 * naming the operation, its sequence number and a peer. */
static void test_tcp_stalled_rank(void **state) {
    (void)state;
    char *argv[] = {"coll_mp_driver", "stall", "2", NULL};
    char *env[] = {"PLAIT_COMM_TIMEOUT=2", "PLAIT_LOG_LEVEL=error", NULL};
    plait_launch_result res;
    char *out = run_launch(4, argv, env, 5, &res);
    fprintf(stderr, "%s", out);
    if (res.exit_code != 0) fail_msg("stall scenario exited %d:\n%s", res.exit_code, out);
    int named = 0;
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        char msg[2048];
        failure_report(out, r, 3 * 2 + 2, "allreduce #2 'stall test'", msg, sizeof msg);
        if (!strstr(msg, "1024 B")) fail_msg("rank %d's message does not give the size: %s", r, msg);
        if (strstr(msg, "rank 2 (world rank 2)")) named++;
    }
    if (!named) fail_msg("no rank named the stalled rank 2:\n%s", out);
    free(out);
}

/* Rank 2 dies by SIGKILL while a 32 MiB allreduce moves data: every other
 * rank's allreduce fails within the timeout (30 s; the launcher waits as
 * long), each naming the operation and the lost rank 2, directly or as the
 * cause a neighbour passed on. A neighbour going down says why even when
 * every stream to a peer is in the middle of a chunk (it finishes one chunk
 * first: tcp_notice.c), so no rank names only the neighbour whose
 * connection ended. `algorithm` (an environment setting, or NULL for the
 * default) picks who talks to whom. */
static void killed_in_allreduce(char *algorithm) {
    char *argv[] = {"coll_mp_driver", "kill", "2", NULL};
    char *env[] = {"PLAIT_COMM_TIMEOUT=30", "PLAIT_LOG_LEVEL=error", algorithm, NULL};
    plait_launch_result res;
    char *out = run_launch(4, argv, env, 30, &res);
    fprintf(stderr, "%s", out);
    assert_int_equal(res.failed_rank, 2);
    assert_int_equal(res.term_signal, SIGKILL);
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        char msg[2048];
        failure_report(out, r, 30, "'kill test'", msg, sizeof msg);
        if (!strstr(msg, "allreduce #")) fail_msg("rank %d's message does not name the allreduce: %s", r, msg);
        if (!strstr(msg, "rank 2")) fail_msg("rank %d's message does not name the lost rank 2: %s", r, msg);
    }
    free(out);
}

static void test_tcp_rank_killed_in_allreduce(void **state) {
    (void)state;
    killed_in_allreduce(NULL);
}

/* In a ring, rank 0 exchanges data with ranks 3 and 1 only: it learns of
 * rank 2's loss only as the cause one of them passes on. */
static void test_tcp_rank_killed_in_ring_allreduce(void **state) {
    (void)state;
    killed_in_allreduce("PLAIT_COMM_ALGORITHM=ring");
}

static void test_tcp_4_ranks_mpirun(void **state) {
    (void)state;
    const char *mpirun = getenv("PLAIT_MPIRUN") ? getenv("PLAIT_MPIRUN") : "/usr/bin/mpirun";
    if (access(mpirun, X_OK) != 0) fail_msg("%s not found: install openmpi-bin", mpirun);
    int fd = tmp_out();
    char sample[16];
    snprintf(sample, sizeof sample, "%u", conformance_sample());
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("PLAIT_TEST_SAMPLE", sample, 1);
        execl(mpirun, mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4", "-x",
              "PLAIT_COMM_TIMEOUT=120", "-x", "PLAIT_LOG_LEVEL=warn", "-x", "PLAIT_TEST_SAMPLE", driver(), "big-subset",
              (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char *out = slurp_fd(fd);
    close(fd);
    expect_ok(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out);
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_1_rank_plait_launcher),    cmocka_unit_test(test_tcp_2_ranks_plait_launcher),
        cmocka_unit_test(test_tcp_3_ranks_plait_launcher),   cmocka_unit_test(test_tcp_4_ranks_plait_launcher),
        cmocka_unit_test(test_tcp_5_ranks_plait_launcher),   cmocka_unit_test(test_tcp_8_ranks_plait_launcher),
        cmocka_unit_test(test_tcp_4_ranks_mpirun),           cmocka_unit_test(test_tcp_stalled_rank),
        cmocka_unit_test(test_tcp_rank_killed_in_allreduce), cmocka_unit_test(test_tcp_rank_killed_in_ring_allreduce),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
