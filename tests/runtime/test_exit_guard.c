/*
 * The guard against a clean-looking early exit (runtime/exit_guard.h): an
 * exit(0) while armed ends the process with status 1, naming the part it
 * was inside (its own thread's, else the arming thread's) on stderr and
 * through the report function, after flushing stdio; another status is
 * named and kept; a disarmed guard, and a child forked while armed, let
 * exit(0) be.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/exit_guard.h"
#include "runtime/fork_call.h"

static int g_report_fd = -1;

static void report(const char *message) {
    plait_write_all(g_report_fd, "report: ", 8);
    plait_write_all(g_report_fd, message, strlen(message));
    plait_write_all(g_report_fd, "\n", 1);
}

/* In the child: what it prints and its stderr go to the pipe. */
static void arm_into(int fd) {
    g_report_fd = fd;
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    plait_exit_guard_arm("test", report);
}

static int exits_0_in_init(int fd, void *arg) {
    (void)arg;
    arm_into(fd);
    printf("buffered");
    plait_exit_guard_enter("inside the comm plugin '%s''s %s()", "x", "init");
    plait_exit_guard_enter("deeper");
    plait_exit_guard_leave();
    exit(0);
}

static int exits_3(int fd, void *arg) {
    (void)arg;
    arm_into(fd);
    exit(3);
}

static int exits_0_disarmed(int fd, void *arg) {
    (void)arg;
    arm_into(fd);
    plait_exit_guard_enter("inside something");
    plait_exit_guard_leave();
    plait_exit_guard_disarm();
    exit(0);
}

static void *thread_exits_0(void *arg) {
    (void)arg;
    exit(0);
}

static int other_thread_exits_0(int fd, void *arg) {
    (void)arg;
    arm_into(fd);
    plait_exit_guard_enter("inside the optim plugin 'y''s create()");
    pthread_t t;
    if (pthread_create(&t, NULL, thread_exits_0, NULL) == 0) pthread_join(t, NULL);
    return 9;
}

/* A child forked while armed exits 0 on its own terms; the parent writes
 * the child's status. */
static int forks_a_child_that_exits_0(int fd, void *arg) {
    (void)arg;
    arm_into(fd);
    pid_t p = fork();
    if (p == 0) exit(0);
    int status = -1;
    waitpid(p, &status, 0);
    plait_exit_guard_disarm();
    printf("child %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    fflush(stdout);
    return 0;
}

/* One case: fn, run in a child, exits with `status`, and what it wrote
 * holds each of `has` and not `lacks` (NULL: anything goes). */
typedef struct guard_case {
    int (*fn)(int, void *);
    int status;
    const char *has[4];
    const char *lacks;
} guard_case;

static void check(void **state) {
    const guard_case *c = *state;
    plait_fork_result r;
    plait_fork_call(c->fn, NULL, 20, &r);
    assert_true(r.started);
    assert_false(r.hung);
    assert_true(WIFEXITED(r.status));
    assert_int_equal(WEXITSTATUS(r.status), c->status);
    char *out = realloc(r.out, r.len + 1);
    assert_non_null(out);
    out[r.len] = '\0';
    for (const char *const *h = c->has; *h; h++) assert_non_null(strstr(out, *h));
    if (c->lacks) assert_null(strstr(out, c->lacks));
    free(out);
}

static guard_case exit_0_is_a_failure = {
    exits_0_in_init, 1,
    {"buffered", "plait: error: test: exited with status 0 inside the comm plugin 'x''s init()",
     "report: test: exited with status 0 inside the comm plugin 'x''s init()", NULL},
    "deeper"};
static guard_case other_status_kept = {
    exits_3, 3, {"report: test: exited with status 3 before the command had finished", NULL}, NULL};
static guard_case disarmed = {exits_0_disarmed, 0, {NULL}, "exited"};
static guard_case other_thread_names_arming_thread = {
    other_thread_exits_0, 1, {"report: test: exited with status 0 inside the optim plugin 'y''s create()", NULL}, NULL};
static guard_case forked_child_not_guarded = {forks_a_child_that_exits_0, 0, {"child 0", NULL}, "exited"};

#define CASE(c) {#c, check, NULL, NULL, &c}

int main(void) {
    const struct CMUnitTest tests[] = {
        CASE(exit_0_is_a_failure),
        CASE(other_status_kept),
        CASE(disarmed),
        CASE(other_thread_names_arming_thread),
        CASE(forked_child_not_guarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
