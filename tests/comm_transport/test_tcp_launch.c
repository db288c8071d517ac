/* The TCP plugin across processes started by plait's own launcher (and by a
 * torchrun-style environment): correctness of every byte, and the fault
 * scenarios — a rank that never joins, a rank SIGKILLed during
 * a transfer, stray clients on the store and the transport ports (after
 * which the core's collectives over the same connections must be exact).
 * A rank killed during a core collective: test_coll_tcp. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "job_runner.h"

static void expect_ok(job_outcome *o, const char *mode) {
    if (o->exit_code != 0) fail_msg("job exited %d (%s):\n%s", o->exit_code, o->res.message, o->output);
    char want[64];
    snprintf(want, sizeof want, "driver: %s: ok", mode);
    assert_contains(o->output, want);
}

/* The line of `text` starting with `prefix` exists and contains `needle`. */
static void expect_line_naming(const char *text, const char *prefix, const char *needle) {
    const char *p = strstr(text, prefix);
    if (!p) fail_msg("no line \"%s...\" in:\n%s", prefix, text);
    const char *end = strchr(p, '\n');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)n, p);
    if (!strstr(line, needle)) fail_msg("expected \"%s\" in: %s", needle, line);
}

static void test_basic_4_ranks(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(4, (const char *const[]){"basic", NULL}, NULL, 2, &o);
    expect_ok(&o, "basic");
    outcome_free(&o);
}

static void test_basic_3_ranks_one_stream_sockets_only(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(3, (const char *const[]){"basic", NULL},
                  (const char *const[]){"PLAIT_COMM_TCP_STREAMS=1", "PLAIT_COMM_TCP_CHUNK_SIZE=64K",
                                        "PLAIT_COMM_TCP_CMA=off", NULL},
                  2, &o);
    expect_ok(&o, "basic");
    outcome_free(&o);
}

static void test_basic_2_ranks_sockets_only_no_progress_thread(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(2, (const char *const[]){"basic", NULL},
                  (const char *const[]){"PLAIT_COMM_TCP_PROGRESS_THREAD=false", "PLAIT_COMM_TCP_STREAMS=4",
                                        "PLAIT_COMM_TCP_CMA=off", NULL},
                  2, &o);
    expect_ok(&o, "basic");
    outcome_free(&o);
}

static void test_rank_never_joins(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(4, (const char *const[]){"nojoin", "2", NULL}, (const char *const[]){"PLAIT_COMM_TIMEOUT=2", NULL}, 1,
                  &o);
    assert_int_not_equal(o.exit_code, 0);
    assert_true(o.res.failed_rank != 2); /* a rank that waited for it, not the sleeper */
    assert_contains(o.res.message, "rank 2 never joined the job within 2 s");
    assert_contains(o.output, "rank 2 never joined");
    outcome_free(&o);
}

static void test_rank_zero_never_joins(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(3, (const char *const[]){"nojoin", "0", NULL}, (const char *const[]){"PLAIT_COMM_TIMEOUT=2", NULL}, 1,
                  &o);
    assert_int_not_equal(o.exit_code, 0);
    /* the store is rank 0's: the others say so */
    assert_contains(o.res.message, "rank 0 never joined the job or is stuck");
    outcome_free(&o);
}

static void test_rank_killed_mid_transfer(void **state) {
    (void)state;
    job_outcome o;
    /* an hour's timeout: the survivors must notice the loss, not time out */
    launch_driver(4, (const char *const[]){"kill", "2", NULL}, (const char *const[]){"PLAIT_COMM_TIMEOUT=3600", NULL},
                  5, &o);
    assert_int_not_equal(o.exit_code, 0);
    assert_int_equal(o.res.failed_rank, 2);
    assert_int_equal(o.res.term_signal, SIGKILL);
    assert_contains(o.res.message, "rank 2 was killed by SIGKILL");
    /* rank 3 receives from it: it fails naming rank 2 (the others may see
     * the cascade first: rank 1's send may have finished into the kernel) */
    expect_line_naming(o.output, "driver: error: rank 3: ", "rank 2");
    /* the loss is said by whichever path finds it first: a socket that
     * closed ("the process probably exited or died") or a direct read of
     * the peer's memory whose process is gone */
    assert_true(strstr(o.output, "the process probably") || strstr(o.output, "process is gone"));
    assert_no_timeout(o.output);
    outcome_free(&o);
}

static void test_rank_killed_mid_transfer_sockets_only(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(4, (const char *const[]){"kill", "1", NULL},
                  (const char *const[]){"PLAIT_COMM_TIMEOUT=3600", "PLAIT_COMM_TCP_CMA=off", NULL}, 5, &o);
    assert_int_equal(o.res.failed_rank, 1);
    assert_int_equal(o.res.term_signal, SIGKILL);
    expect_line_naming(o.output, "driver: error: rank 2: ", "rank 1");
    assert_no_timeout(o.output);
    outcome_free(&o);
}

static void test_stray_clients(void **state) {
    (void)state;
    job_outcome o;
    launch_driver(4, (const char *const[]){"stray", NULL}, NULL, 2, &o);
    expect_ok(&o, "stray");
    assert_contains(o.output, "stray random bytes to the store: rejected as expected");
    assert_contains(o.output, "stray wrong token to the store: rejected as expected");
    assert_contains(o.output, "stray wrong secret to a transport port: rejected as expected");
    assert_contains(o.output, "store warn: rejected connection");
    assert_contains(o.output, "did not prove the job token");
    assert_contains(o.output, "tcp warn: rejected a connection");
    assert_contains(o.output, "wrong secret (claims rank 0)");
    assert_contains(o.output, "bad hello magic");
    assert_contains(o.output, "rejected as expected (port closed)");
    /* the core's collectives over the connections that survived them */
    assert_contains(o.output, "core allreduce after stray clients: ");
    assert_contains(o.output, "core allgather after stray clients: ");
    assert_contains(o.output, "core broadcast after stray clients: ");
    outcome_free(&o);
}

/* torchrun-style: RANK, WORLD_SIZE, LOCAL_*, MASTER_ADDR/PORT, a token. */
static void test_torchrun_environment(void **state) {
    (void)state;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    bind(s, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(s, (struct sockaddr *)&sa, &sl);
    int port = ntohs(sa.sin_port);
    close(s);
    enum { N = 3 };
    pid_t pids[N];
    char path[64];
    int fd = out_file(path, sizeof path);
    for (int r = 0; r < N; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char v[64];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            setenv("WORLD_SIZE", "3", 1);
            setenv("LOCAL_WORLD_SIZE", "3", 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            setenv("PLAIT_JOB_TOKEN", "torchrun-style-test-token", 1);
            setenv("PLAIT_COMM_TIMEOUT", "30", 1);
            dup2(fd, 1);
            dup2(fd, 2);
            execl(test_driver(), "tcp_p2p_driver", "basic", (char *)NULL);
            _exit(127);
        }
    }
    int failed = 0;
    for (int r = 0; r < N; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    close(fd);
    char *out = slurp(path);
    unlink(path);
    if (failed) fail_msg("%d rank(s) failed:\n%s", failed, out);
    assert_contains(out, "driver: basic: ok");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_4_ranks),
        cmocka_unit_test(test_basic_3_ranks_one_stream_sockets_only),
        cmocka_unit_test(test_basic_2_ranks_sockets_only_no_progress_thread),
        cmocka_unit_test(test_rank_never_joins),
        cmocka_unit_test(test_rank_zero_never_joins),
        cmocka_unit_test(test_rank_killed_mid_transfer),
        cmocka_unit_test(test_rank_killed_mid_transfer_sockets_only),
        cmocka_unit_test(test_stray_clients),
        cmocka_unit_test(test_torchrun_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
