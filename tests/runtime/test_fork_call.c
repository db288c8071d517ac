/*
 * Untrusted code in a forked child (runtime/fork_call.h): what it writes
 * comes back; a crash, an exit and a hang are told apart; a child that
 * closes its pipe and then hangs is stopped at the limit, not waited for;
 * a helper it forked that holds the pipe open neither makes a finished
 * child look hung nor outlives it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/clock.h"
#include "runtime/fork_call.h"

static int says_hello(int fd, void *arg) {
    (void)arg;
    return plait_write_all(fd, "hello", 5) == 0 ? 0 : 9;
}

static int crashes(int fd, void *arg) {
    (void)arg;
    plait_write_all(fd, "before", 6);
    signal(SIGSEGV, SIG_DFL); /* not cmocka's handler, inherited */
    raise(SIGSEGV);
    return 0;
}

static int exits_3(int fd, void *arg) {
    (void)fd;
    (void)arg;
    exit(3);
}

static int hangs(int fd, void *arg) {
    (void)fd;
    (void)arg;
    for (;;) pause();
    return 0;
}

static int closes_then_hangs(int fd, void *arg) {
    (void)arg;
    plait_write_all(fd, "x", 1);
    close(fd);
    for (;;) pause();
    return 0;
}

/* forks a helper that keeps the pipe and sleeps; reports its pid */
static int leaves_a_helper(int fd, void *arg) {
    (void)arg;
    pid_t h = fork();
    if (h == 0) {
        sleep(30);
        _exit(0);
    }
    plait_write_all(fd, &h, sizeof h);
    return 0;
}

static void test_output_and_endings(void **state) {
    (void)state;
    plait_fork_result r;
    plait_fork_call(says_hello, NULL, 10, &r);
    assert_true(plait_fork_ok(&r));
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.out, "hello", 5);
    free(r.out);

    plait_fork_call(crashes, NULL, 10, &r);
    assert_false(plait_fork_ok(&r));
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV);
    assert_int_equal(r.len, 6); /* what it said before it crashed */
    free(r.out);

    plait_fork_call(exits_3, NULL, 10, &r);
    assert_true(!plait_fork_ok(&r) && !r.hung && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3);
    free(r.out);
}

static void test_hangs_are_stopped_at_the_limit(void **state) {
    (void)state;
    int (*const fns[])(int, void *) = {hangs, closes_then_hangs};
    for (size_t i = 0; i < 2; i++) {
        plait_fork_result r;
        double t0 = plait_clock_now();
        plait_fork_call(fns[i], NULL, 0.5, &r);
        double took = plait_clock_now() - t0;
        assert_true(r.hung);
        assert_false(plait_fork_ok(&r));
        assert_true(took >= 0.5); /* not before its limit; a call never stopped meets ctest's TIMEOUT */
        free(r.out);
    }
}

static void test_a_helper_holding_the_pipe(void **state) {
    (void)state;
    plait_fork_result r;
    /* a call that waited for the helper (30 s) to close the pipe would meet
     * its limit of 20 s and be reported hung */
    plait_fork_call(leaves_a_helper, NULL, 20, &r);
    assert_true(plait_fork_ok(&r)); /* it finished: not hung */
    assert_int_equal(r.len, sizeof(pid_t));
    pid_t helper;
    memcpy(&helper, r.out, sizeof helper);
    free(r.out);
    /* stopped with it (the helper is not this process's child: gone once killed) */
    int gone = 0;
    for (int i = 0; i < 200 && !gone; i++) {
        gone = kill(helper, 0) != 0;
        if (!gone) {
            struct timespec ms = {0, 10000000};
            nanosleep(&ms, NULL);
        }
    }
    assert_true(gone);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_and_endings),
        cmocka_unit_test(test_hangs_are_stopped_at_the_limit),
        cmocka_unit_test(test_a_helper_holding_the_pipe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
