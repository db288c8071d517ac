/* plait's local launcher: the environment each rank gets, failure reports
 * ("rank R failed: <its last error>", signals), stopping the others, Ctrl-C
 * forwarding, the -n argument, and `plait <command> -n N` end to end. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <poll.h>
#include <time.h>
#include <sys/resource.h>

#include "job_runner.h"
#include "runtime/error.h"

/* Run `script` with /bin/sh as every rank; `expect_finished` as in
 * plait_launch_opts. */
static void launch_sh_as(int n, const char *script, double grace, int expect_finished, job_outcome *out) {
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    char path[64];
    int fd = out_file(path, sizeof path);
    plait_launch_opts o = {0};
    o.nranks = n;
    o.exe = "/bin/sh";
    o.argv = argv;
    o.grace_s = grace;
    o.expect_finished = expect_finished;
    o.stdout_fd = o.stderr_fd = fd;
    o.quiet = 1;
    double t0 = plait_clock_now();
    plait_status st = plait_launch_local(&o, &out->res);
    out->seconds = plait_clock_now() - t0;
    close(fd);
    out->output = slurp(path);
    unlink(path);
    out->exit_code = st == PLAIT_OK ? out->res.exit_code : -1;
}

static void launch_sh(int n, const char *script, double grace, job_outcome *out) {
    launch_sh_as(n, script, grace, 0, out);
}

/* poll() as the launcher sees it: with g_poll_fails set, every call fails
 * with ENOMEM (the kernel's answer when it cannot allocate the poll
 * table). This executable's definition is the one the launcher's calls
 * reach; the ranks, being other programs, keep the C library's. */
static int g_poll_fails;

int poll(struct pollfd *fds, nfds_t n, int timeout_ms) {
    if (g_poll_fails) {
        errno = ENOMEM;
        return -1;
    }
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    return ppoll(fds, n, timeout_ms < 0 ? NULL : &ts, NULL);
}

static void test_rank_environment(void **state) {
    (void)state;
    job_outcome o;
    launch_sh(3,
              "echo \"rank=$PLAIT_RANK size=$PLAIT_WORLD_SIZE local=$PLAIT_LOCAL_RANK/$PLAIT_LOCAL_SIZE "
              "blas=$OPENBLAS_NUM_THREADS omp=$OMP_NUM_THREADS math=$PLAIT_MATH_THREADS "
              "store=${PLAIT_STORE_ADDR%%:*} tok=${#PLAIT_JOB_TOKEN} fd=${PLAIT_STORE_FD:-none}\"",
              1, &o);
    assert_int_equal(o.exit_code, 0);
    assert_int_equal(o.res.failed_rank, -1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores / 3 > 0 ? (int)(cores / 3) : 1;
    char want[256];
    for (int r = 0; r < 3; r++) {
        snprintf(want, sizeof want,
                 "rank=%d size=3 local=%d/3 blas=%d omp=%d math=%d store=127.0.0.1 tok=48 fd=%s", r, r, threads,
                 threads, threads, r == 0 ? "" : "none");
        if (r == 0) want[strlen(want)] = '\0';
        assert_contains(o.output, want);
    }
    outcome_free(&o);
}

static void test_failure_names_rank_and_last_error(void **state) {
    (void)state;
    job_outcome o;
    /* rank 1 reports an error and fails; the others would sleep for 600 s,
     * past ctest's TIMEOUT, unless the launcher stopped them */
    launch_sh(4,
              "if [ $PLAIT_RANK = 1 ]; then echo 'first problem' > /proc/$$/fd/$PLAIT_REPORT_FD; "
              "echo 'disk on fire' > /proc/$$/fd/$PLAIT_REPORT_FD; exit 3; fi; exec sleep 600",
              0.3, &o);
    assert_int_equal(o.exit_code, 3);
    assert_int_equal(o.res.failed_rank, 1);
    assert_string_equal(o.res.message, "rank 1 failed: disk on fire");
    outcome_free(&o);
}

static void test_failure_without_report(void **state) {
    (void)state;
    job_outcome o;
    launch_sh(2, "if [ $PLAIT_RANK = 0 ]; then exit 5; fi; exec sleep 30", 0.3, &o);
    assert_int_equal(o.exit_code, 5);
    assert_int_equal(o.res.failed_rank, 0);
    assert_contains(o.res.message, "rank 0 failed with exit code 5");
    outcome_free(&o);
}

/* poll failing (ENOMEM) does not end the launcher's watch: it returns
 * only after every rank has ended, with their outcomes, and still stops
 * the others when one fails. */
static void test_watch_survives_poll_failing(void **state) {
    (void)state;
    char done[64];
    snprintf(done, sizeof done, "/tmp/plait-launch-poll-%d", (int)getpid());
    char script[256];
    snprintf(script, sizeof script, "sleep 0.4; touch %s-$PLAIT_RANK", done);
    job_outcome o;
    g_poll_fails = 1;
    launch_sh(2, script, 1, &o);
    g_poll_fails = 0;
    assert_int_equal(o.exit_code, 0);
    assert_int_equal(o.res.failed_rank, -1);
    for (int r = 0; r < 2; r++) {
        char path[80];
        snprintf(path, sizeof path, "%s-%d", done, r);
        assert_int_equal(access(path, F_OK), 0); /* the rank had ended when the launcher returned */
        unlink(path);
    }
    assert_true(o.seconds >= 0.4);
    outcome_free(&o);
    g_poll_fails = 1;
    /* the sleepers (600 s, past ctest's TIMEOUT) are stopped */
    launch_sh(3, "if [ $PLAIT_RANK = 2 ]; then sleep 0.2; exit 5; fi; exec sleep 600", 0.3, &o);
    g_poll_fails = 0;
    assert_int_equal(o.exit_code, 5);
    assert_int_equal(o.res.failed_rank, 2);
    outcome_free(&o);
}

static void test_killed_rank_is_the_cause(void **state) {
    (void)state;
    job_outcome o;
    /* rank 2 dies by SIGKILL; rank 0 "notices" and fails right after; rank 1
     * sleeps past ctest's TIMEOUT unless stopped */
    launch_sh(3,
              "if [ $PLAIT_RANK = 2 ]; then kill -9 $$; fi; "
              "if [ $PLAIT_RANK = 0 ]; then sleep 0.2; echo 'lost rank 2' > /proc/$$/fd/$PLAIT_REPORT_FD; exit 1; fi; "
              "exec sleep 600",
              0.5, &o);
    assert_int_equal(o.res.failed_rank, 2);
    assert_int_equal(o.res.term_signal, SIGKILL);
    assert_string_equal(o.res.message, "rank 2 was killed by SIGKILL");
    assert_int_equal(o.exit_code, 128 + SIGKILL);
    outcome_free(&o);
}

static void test_first_hand_failure_is_the_cause(void **state) {
    (void)state;
    job_outcome o;
    /* rank 1 stops first, because of rank 2 (its error relays rank 2's);
     * rank 2, which failed first-hand, ends a moment later */
    launch_sh(3,
              "if [ $PLAIT_RANK = 1 ]; then echo 'train: step 7: world rank 1 stopped after world rank 2 failed (its "
              "error names the cause)' > /proc/$$/fd/$PLAIT_REPORT_FD; exit 1; fi; "
              "if [ $PLAIT_RANK = 2 ]; then sleep 0.2; echo 'train: step 7: out of memory in the optimizer' "
              "> /proc/$$/fd/$PLAIT_REPORT_FD; exit 1; fi; exec sleep 30",
              2.0, &o);
    assert_int_equal(o.res.failed_rank, 2);
    assert_string_equal(o.res.message, "rank 2 failed: train: step 7: out of memory in the optimizer");
    outcome_free(&o);
}

static void test_store_host_failure_is_the_cause(void **state) {
    (void)state;
    job_outcome o;
    /* rank 1 ends first: it found the store closed as it joined, because
     * rank 0 (the store's host) refused the run and went down */
    launch_sh(2,
              "if [ $PLAIT_RANK = 1 ]; then echo \"train: rank 1 joining the plait -n job: the job's store (hosted by "
              "rank 0) at 127.0.0.1:4000 closed the connection during the handshake\" > /proc/$$/fd/$PLAIT_REPORT_FD; "
              "exit 1; fi; sleep 0.2; echo 'train: run directory runs/x is in use by another run' "
              "> /proc/$$/fd/$PLAIT_REPORT_FD; exit 1",
              2.0, &o);
    assert_int_equal(o.res.failed_rank, 0);
    assert_string_equal(o.res.message, "rank 0 failed: train: run directory runs/x is in use by another run");
    outcome_free(&o);
}

static void test_ranks_ignoring_sigterm_are_killed(void **state) {
    (void)state;
    job_outcome o;
    /* rank 1's sleep ignores SIGTERM (an ignored signal stays so across
     * exec) and would outlast ctest's TIMEOUT: only SIGKILL ends it */
    launch_sh(2, "if [ $PLAIT_RANK = 0 ]; then exit 1; fi; trap '' TERM; exec sleep 600", 0.3, &o);
    assert_int_equal(o.res.failed_rank, 0);
    outcome_free(&o);
}

/* Ranks that are plait commands mark their command finished on the report
 * pipe (plait_launch_report_finished), as "\006finished <pid>". One that
 * exits with status 0 unmarked (an _exit(0) in a plugin) failed: the job
 * ends at once naming it, not when its peers give up waiting for it. */
static void test_exit_before_finished_is_a_failure(void **state) {
    (void)state;
    job_outcome o;
    const char *mark = "printf '\\006finished %s\\n' $$ > /proc/$$/fd/$PLAIT_REPORT_FD";
    char script[512];
    /* rank 1 exits 0 unmarked; rank 2 marks and exits 0; rank 0 would run
     * 600 s, past ctest's TIMEOUT */
    snprintf(script, sizeof script, "if [ $PLAIT_RANK = 1 ]; then exit 0; fi; "
             "if [ $PLAIT_RANK = 2 ]; then %s; exit 0; fi; exec sleep 600", mark);
    launch_sh_as(3, script, 0.3, 1, &o);
    assert_int_equal(o.exit_code, 1);
    assert_int_equal(o.res.failed_rank, 1);
    assert_string_equal(o.res.message, "rank 1 failed: exited with status 0 before its command finished (a call to "
                                       "_exit() in a plugin or library?)");
    outcome_free(&o);
    /* every rank marked: a success; a mark without its newline counts */
    snprintf(script, sizeof script, "%s; exit 0", mark);
    launch_sh_as(2, script, 0.3, 1, &o);
    assert_int_equal(o.exit_code, 0);
    assert_int_equal(o.res.failed_rank, -1);
    outcome_free(&o);
    launch_sh_as(1, "printf '\\006finished %s' $$ > /proc/$$/fd/$PLAIT_REPORT_FD", 0.3, 1, &o);
    assert_int_equal(o.exit_code, 0);
    outcome_free(&o);
    /* a mark naming another process (one the rank started, which inherited
     * the pipe) is not the rank's */
    launch_sh_as(1, "sh -c \"printf '\\006finished %s\\n' \\$\\$ > /proc/$$/fd/$PLAIT_REPORT_FD\"; exit 0", 0.3,
                 1, &o);
    assert_int_equal(o.exit_code, 1);
    assert_contains(o.res.message, "rank 0 failed: exited with status 0 before its command finished");
    outcome_free(&o);
    /* without expect_finished (any program) status 0 is success */
    launch_sh(2, "exit 0", 0.3, &o);
    assert_int_equal(o.exit_code, 0);
    outcome_free(&o);
}

/* n ranks of `exe`, output inherited, no summary printed. */
static plait_launch_opts quiet_job(int n, const char *exe, char **argv) {
    plait_launch_opts o = {0};
    o.nranks = n;
    o.exe = exe;
    o.argv = argv;
    o.grace_s = 0.3;
    o.stdout_fd = o.stderr_fd = -1;
    o.quiet = 1;
    return o;
}

static void test_exec_failure(void **state) {
    (void)state;
    char *argv[] = {"nope", NULL};
    plait_launch_opts o = quiet_job(2, "/nonexistent/binary", argv);
    plait_launch_result res;
    assert_int_equal(plait_launch_local(&o, &res), PLAIT_OK);
    assert_int_equal(res.exit_code, 127);
    assert_contains(res.message, "cannot execute /nonexistent/binary: No such file or directory");
    /* a file that is not executable: execve's EACCES in the C library's words */
    o = quiet_job(1, "/etc/passwd", argv);
    assert_int_equal(plait_launch_local(&o, &res), PLAIT_OK);
    assert_int_equal(res.exit_code, 127);
    assert_contains(res.message, "cannot execute /etc/passwd: Permission denied");
}

/* The launcher of host 1 of a job on 2 hosts runs world ranks 2 and 3:
 * its report names them so, not by their index on this host. */
static void test_second_host_names_world_ranks(void **state) {
    (void)state;
    char *argv[] = {"sh", "-c", "if [ $PLAIT_RANK = 3 ]; then exit 4; fi; exec sleep 30", NULL};
    plait_launch_opts o = quiet_job(2, "/bin/sh", argv);
    o.nnodes = 2;
    o.node_rank = 1;
    o.store_host = "127.0.0.1";
    o.store_port = 9; /* host 1 binds nothing; its ranks would connect there */
    o.token = "shared-token";
    plait_launch_result res;
    assert_int_equal(plait_launch_local(&o, &res), PLAIT_OK);
    assert_int_equal(res.exit_code, 4);
    assert_int_equal(res.failed_rank, 3);
    assert_string_equal(res.message, "rank 3 failed with exit code 4 (it reported no error)");
}

/* Processes of user `uid` now (each thread counts against RLIMIT_NPROC). */
static long threads_of(uid_t uid) {
    long count = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long real = -1, threads = 0;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "Uid: %ld", &real) == 1) continue;
            sscanf(line, "Threads: %ld", &threads);
        }
        fclose(f);
        if (real == (long)uid) count += threads;
    }
    if (d) closedir(d);
    return count;
}

/* A launch that hits the process limit (dp=1000) reports the
 * fork failure as the cause, not the ranks it then had to stop. Run as an
 * unprivileged user (root is exempt from RLIMIT_NPROC) in a child. */
static void test_fork_failure_is_the_cause(void **state) {
    (void)state;
    const uid_t nobody = 65534;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], STDERR_FILENO);
        rlim_t allow = (rlim_t)threads_of(nobody) + 3;
        struct rlimit lim = {allow, allow};
        if (setrlimit(RLIMIT_NPROC, &lim) != 0 || setgid(nobody) != 0 || setuid(nobody) != 0) _exit(77);
        job_outcome o;
        /* the ranks started sleep past ctest's TIMEOUT unless stopped */
        launch_sh(12, "exec sleep 600", 0.3, &o);
        const char *err = plait_last_error();
        int ok = o.exit_code == -1 && strstr(err, "could not start rank ") && strstr(err, " of 12: fork: ") &&
                 strstr(err, "already started were stopped") && !strstr(o.res.message, "killed by");
        fprintf(stderr, "exit %d, error '%s', launcher message '%s'\n", o.exit_code, err, o.res.message);
        _exit(ok ? 0 : 1);
    }
    close(pfd[1]);
    char report[4096] = "";
    ssize_t got, len = 0;
    while ((got = read(pfd[0], report + len, sizeof report - 1 - (size_t)len)) > 0) len += got;
    report[len] = '\0';
    close(pfd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) skip(); /* cannot become an unprivileged user here */
    if (WEXITSTATUS(status) != 0) fail_msg("%s", report);
}

/* The launcher forwards SIGINT to the ranks and exits 130. */
static void test_ctrl_c_forwarded(void **state) {
    (void)state;
    char pidfile[64];
    int fd = out_file(pidfile, sizeof pidfile);
    close(fd);
    pid_t child = fork();
    if (child == 0) {
        char script[256];
        /* a sleep past ctest's TIMEOUT, ended with its rank */
        snprintf(script, sizeof script, "echo $$ >> %s; trap 'kill $!; exit 7' INT; sleep 600 & wait", pidfile);
        char *argv[] = {"sh", "-c", script, NULL};
        plait_launch_opts o = {0};
        o.nranks = 2;
        o.exe = "/bin/sh";
        o.argv = argv;
        o.grace_s = 1;
        o.stdout_fd = o.stderr_fd = open("/dev/null", O_WRONLY);
        o.quiet = 1;
        plait_launch_result res;
        if (plait_launch_local(&o, &res) != PLAIT_OK) _exit(99);
        _exit(res.exit_code);
    }
    /* wait until both ranks run */
    double deadline = plait_clock_now() + 10;
    for (;;) {
        char *s = slurp(pidfile);
        int lines = 0;
        for (char *p = s; *p; p++) lines += *p == '\n';
        free(s);
        if (lines >= 2 || plait_clock_now() > deadline) break;
        usleep(20000);
    }
    kill(child, SIGINT);
    int status;
    waitpid(child, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    char *s = slurp(pidfile);
    unlink(pidfile);
    /* both ranks are gone */
    for (char *p = s; *p;) {
        int pid = atoi(p);
        if (pid > 0) assert_int_not_equal(kill(pid, 0), 0);
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    free(s);
}

static void test_take_nranks(void **state) {
    (void)state;
    char *a1[] = {"plait", "train", "cfg.ini", "-n", "4", "run.steps=3", NULL};
    int argc = 6, n = 0;
    const char *err = NULL;
    assert_int_equal(plait_launch_take_nranks(&argc, a1, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_int_equal(argc, 4);
    assert_string_equal(a1[3], "run.steps=3");
    assert_null(a1[4]);
    char *a2[] = {"plait", "bench", "-n2", NULL};
    argc = 3;
    assert_int_equal(plait_launch_take_nranks(&argc, a2, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(argc, 2);
    char *a3[] = {"plait", "bench", "--nranks=8", NULL};
    argc = 3;
    assert_int_equal(plait_launch_take_nranks(&argc, a3, &n, &err), 0);
    assert_int_equal(n, 8);
    char *a4[] = {"plait", "bench", "-n", NULL};
    argc = 3;
    assert_int_equal(plait_launch_take_nranks(&argc, a4, &n, &err), -1);
    assert_contains(err, "-n");
    char *a5[] = {"plait", "bench", "-n", "0", NULL};
    argc = 4;
    assert_int_equal(plait_launch_take_nranks(&argc, a5, &n, &err), -1);
    char *a6[] = {"plait", "train", "x.ini", NULL};
    argc = 3;
    assert_int_equal(plait_launch_take_nranks(&argc, a6, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(argc, 3);
}

/* `plait <command> -n N` through the real CLI binary. */
static void test_cli_dash_n(void **state) {
    (void)state;
    const char *bin = getenv("PLAIT_BIN");
    if (!bin) fail_msg("PLAIT_BIN is not set (ctest sets it)");
    job_outcome o;
    char *ok[] = {(char *)bin, "plugins", "-n", "2", NULL};
    run_command(ok, NULL, &o);
    assert_int_equal(o.exit_code, 0);
    /* two ranks each printed the table */
    char *first = strstr(o.output, "libplait-comm-tcp.so");
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "libplait-comm-tcp.so"));
    outcome_free(&o);
    char *bad[] = {(char *)bin, "config", "check", "/nonexistent/x.ini", "-n", "3", NULL};
    run_command(bad, NULL, &o);
    assert_int_equal(o.exit_code, 1);
    assert_contains(o.output, "failed: cannot open config file /nonexistent/x.ini: No such file");
    if (strstr(o.output, "/nonexistent/x.ini: cannot open")) fail_msg("the file is named twice: %s", o.output);
    assert_contains(o.output, "plait: rank ");
    outcome_free(&o);
    /* nested -n inside a rank is refused */
    char *nested[] = {(char *)bin, "plugins", "-n", "2", NULL};
    /* The caller's environment without its PLAIT_ variables, plus
     * PLAIT_RANK=0: the libraries may come from LD_LIBRARY_PATH (HPC
     * modules, the GPU machine), so the environment is not emptied. */
    extern char **environ;
    size_t n_env = 0;
    while (environ[n_env]) n_env++;
    char **env = calloc(n_env + 2, sizeof *env);
    assert_non_null(env);
    size_t k = 0;
    env[k++] = "PLAIT_RANK=0";
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "PLAIT_", 6) != 0) env[k++] = environ[i];
    run_command(nested, env, &o);
    free(env);
    assert_int_equal(o.exit_code, 2);
    assert_contains(o.output, "already rank 0");
    outcome_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_environment),
        cmocka_unit_test(test_failure_names_rank_and_last_error),
        cmocka_unit_test(test_failure_without_report),
        cmocka_unit_test(test_watch_survives_poll_failing),
        cmocka_unit_test(test_killed_rank_is_the_cause),
        cmocka_unit_test(test_first_hand_failure_is_the_cause),
        cmocka_unit_test(test_store_host_failure_is_the_cause),
        cmocka_unit_test(test_ranks_ignoring_sigterm_are_killed),
        cmocka_unit_test(test_exit_before_finished_is_a_failure),
        cmocka_unit_test(test_exec_failure),
        cmocka_unit_test(test_second_host_names_world_ranks),
        cmocka_unit_test(test_fork_failure_is_the_cause),
        cmocka_unit_test(test_ctrl_c_forwarded),
        cmocka_unit_test(test_take_nranks),
        cmocka_unit_test(test_cli_dash_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
