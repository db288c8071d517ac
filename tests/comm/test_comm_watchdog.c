/*
 * The watchdog over plugin calls (commstate/comm_watchdog.h): a call still
 * inside the plugin past its limit ends the process with status 1 and a
 * message naming the call; many short calls whose sum passes the limit do
 * not; a call that left is forgotten; a child forked while another thread
 * is inside a call is not ended for that thread's call, and a child of a
 * thread that made watched calls has a watchdog of its own; a stuck setup
 * call names its rule, and one that changed the process is refused. Each
 * stuck case runs in a forked child, since the watchdog ends the process it
 * runs in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <cmocka.h>

#include "commstate/comm_watchdog.h"
#include "runtime/error.h"

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

static plait_watched_call call(double limit_s) {
    return (plait_watched_call){.fn = "wait", .rule = "timeout", .comm_name = "dp", .peer = 3,
                                .timeout_s = 0.25, .limit_s = limit_s};
}

/* Run fn in a child with stderr into a pipe; its status and what it said. */
static int in_child(void (*fn)(void), char *said, size_t cap, double *took) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        alarm(20); /* a watchdog that never fires must not hang the test */
        fn();
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(p[0], said + n, cap - 1 - n)) > 0) n += (size_t)r;
    said[n] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return status;
}

static void stuck(plait_watched_call c) {
    plait_watchdog_enter(&c);
    sleep_s(15); /* a plugin that never returns */
    plait_watchdog_leave();
}

static void stuck_call(void) { stuck(call(0.6)); }

/* fn, in a child, is ended by the watchdog past its limit of 0.6 s: what it
 * said into `said`. */
static void assert_ended(void (*fn)(void), char *said, size_t cap) {
    double took = 0;
    int status = in_child(fn, said, cap, &took);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_true(took >= 0.6 && took < 5.0);
}

static void test_stuck_call_ends_the_process(void **state) {
    (void)state;
    char said[4096];
    assert_ended(stuck_call, said, sizeof said);
    /* no plugin is loaded for this table: named as the transport */
    assert_non_null(strstr(said, "the transport has been inside wait() for"));
    assert_non_null(strstr(said, "though it was given 0.25 s (communicator 'dp', waiting on world rank 3)"));
    assert_non_null(strstr(said, "plait/comm.h [timeout]"));
}

/* A setup call (init, derive, destroy) is named with its own rule. */
static void stuck_setup_call(void) {
    stuck((plait_watched_call){.fn = "init", .rule = "setup", .comm_name = "world", .peer = -1, .timeout_s = 0.25,
                               .limit_s = 0.6});
}

static void test_stuck_setup_call_names_its_rule(void **state) {
    (void)state;
    char said[4096];
    assert_ended(stuck_setup_call, said, sizeof said);
    assert_non_null(strstr(said, "the transport has been inside init() for"));
    assert_non_null(strstr(said, "past its timeout of 0.25 s (communicator 'world'); plait/comm.h [setup]: init() and "
                                 "derive() return within the bootstrap's timeout"));
}

/* A setup call that returns in time passes its status on, and one that
 * changed the working directory is refused, naming the call. */
static void test_setup_call_checks_the_process(void **state) {
    (void)state;
    plait_plugin_call pc;
    plait_watchdog_enter_setup(&pc, NULL, "derive", "dp", 2.0);
    assert_int_equal(plait_watchdog_leave_setup(&pc, PLAIT_ERR_TIMEOUT), PLAIT_ERR_TIMEOUT);
    char here[4096];
    assert_non_null(getcwd(here, sizeof here));
    plait_watchdog_enter_setup(&pc, NULL, "init", "world", 2.0);
    assert_int_equal(chdir("/"), 0);
    assert_int_equal(plait_watchdog_leave_setup(&pc, PLAIT_OK), PLAIT_ERR_ABI);
    assert_int_equal(chdir(here), 0);
    assert_non_null(strstr(plait_last_error(), "the comm plugin's init() changed the process: the working directory"));
}

static void short_calls(void) {
    plait_watched_call c = call(0.6);
    for (int i = 0; i < 40; i++) { /* 2 s in all, each call 50 ms */
        plait_watchdog_enter(&c);
        sleep_s(0.05);
        plait_watchdog_leave();
    }
    sleep_s(1.0); /* outside any call, past the limit */
}

static void test_short_calls_are_not_stuck(void **state) {
    (void)state;
    char said[4096];
    double took = 0;
    int status = in_child(short_calls, said, sizeof said, &took);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_string_equal(said, "");
}

static void *stuck_thread(void *arg) {
    (void)arg;
    plait_watched_call c = call(0.6);
    plait_watchdog_enter(&c);
    sleep_s(30);
    return NULL;
}

/* A thread is inside a long call when the process forks: the child (which
 * has no such thread) must not be ended for it; the parent is. */
static void fork_during_call(void) {
    pthread_t t;
    pthread_create(&t, NULL, stuck_thread, NULL);
    sleep_s(0.2);
    pid_t pid = fork();
    if (pid == 0) {
        plait_watched_call c = call(0.6); /* the child's own short calls are watched */
        plait_watchdog_enter(&c);
        sleep_s(0.1);
        plait_watchdog_leave();
        sleep_s(1.5);
        _exit(7);
    }
    int status = 0;
    waitpid(pid, &status, 0); /* the parent's watchdog ends it before this returns */
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) + 100 : 99);
}

static void test_fork_leaves_other_threads_calls_behind(void **state) {
    (void)state;
    char said[4096];
    double took = 0;
    int status = in_child(fork_during_call, said, sizeof said, &took);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1); /* the parent, for its stuck thread */
    assert_non_null(strstr(said, "has been inside wait()"));
    /* one message: the child said nothing */
    assert_null(strstr(strstr(said, "has been inside wait()") + 1, "has been inside wait()"));
}

/* A thread that has made watched calls forks: the child's own stuck call
 * is ended (its watchdog starts on that call). */
static void child_of_a_watched_thread(void) {
    plait_watched_call c = call(0.6);
    plait_watchdog_enter(&c);
    plait_watchdog_leave();
    pid_t pid = fork();
    if (pid == 0) {
        stuck_call();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) + 100 : 99);
}

static void test_child_of_a_watched_thread(void **state) {
    (void)state;
    char said[4096];
    double took = 0;
    int status = in_child(child_of_a_watched_thread, said, sizeof said, &took);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 101); /* the grandchild, ended by its watchdog */
    assert_true(took < 5.0);
    assert_non_null(strstr(said, "has been inside wait()"));
}

/* Time the process spends stopped (SIGSTOP, a suspended job, a debugger)
 * is not time inside the call. */
static void test_stopped_time_does_not_count(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        plait_watched_call c = call(0.6);
        plait_watchdog_enter(&c);
        raise(SIGSTOP);
        sleep_s(0.1);
        plait_watchdog_leave();
        _exit(0);
    }
    sleep_s(1.5);
    kill(pid, SIGCONT);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_limit(void **state) {
    (void)state;
    assert_true(plait_watchdog_limit(0) == 0);
    assert_true(plait_watchdog_limit(-1) == 0);
    assert_true(plait_watchdog_limit(INFINITY) == 0);
    assert_true(plait_watchdog_limit(300) == 300 + 5 + 30);
    assert_true(plait_watchdog_limit(0.2) > 5.2 - 1e-9 && plait_watchdog_limit(0.2) < 5.3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_stuck_call_ends_the_process),
        cmocka_unit_test(test_stuck_setup_call_names_its_rule),
        cmocka_unit_test(test_setup_call_checks_the_process),
        cmocka_unit_test(test_short_calls_are_not_stuck),
        cmocka_unit_test(test_fork_leaves_other_threads_calls_behind),
        cmocka_unit_test(test_child_of_a_watched_thread),
        cmocka_unit_test(test_stopped_time_does_not_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
