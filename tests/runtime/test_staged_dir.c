/*
 * Staged directories leave nothing behind: a process interrupted (SIGINT,
 * SIGTERM, SIGHUP) while it stages removes its staging directory and still
 * ends by that signal; the staging and ".old-" directories of a process
 * that is gone (SIGKILL) are removed by the next begin of the same
 * destination, while a live process's are kept; a destination that is a
 * symbolic link is refused; a commit over an earlier output replaces it
 * whole; a destination that is a file or holds someone else's file is
 * refused before the caller's work (check, begin), not at commit; so is
 * one holding a directory or a link by an output's name. A signal the
 * process handles itself ([run] exit_signal's, runtime/stop_signal.h) is
 * left to it: the staging goes on and commits.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/error.h"
#include "runtime/staged_dir.h"
#include "runtime/stop_signal.h"

static char scratch[64];
static pid_t children[16]; /* killed at the end, whatever failed */
static int n_children;

static int owned(const char *name) { return strncmp(name, "out", 3) == 0; }

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* A child that stages `dest`, writes a file, tells the parent (one byte on
 * `ready`) and waits to be signalled or killed; or, with `handled` a
 * signal, catches it as a stop signal, waits for it, commits and exits 0. */
static pid_t stage_in_child(const char *dest, int *ready_fd, int handled) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        /* as from a terminal, whatever the test runner ignores */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        if (plait_stop_signal_catch(handled) != 0) _exit(5);
        plait_staged_dir d;
        if (plait_staged_dir_begin(&d, dest, owned) != PLAIT_OK) _exit(2);
        if (plait_staged_dir_write(&d, "out.bin", "x", 1) != PLAIT_OK) _exit(3);
        if (write(p[1], "r", 1) != 1) _exit(4);
        if (!handled)
            for (;;) pause();
        while (!plait_stop_signal_seen()) usleep(1000);
        _exit(plait_staged_dir_commit(&d) == PLAIT_OK && plait_stop_signal_seen() == handled ? 0 : 6);
    }
    close(p[1]);
    if (n_children < 16) children[n_children++] = pid;
    *ready_fd = p[0];
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    return pid;
}

static void test_interrupt_removes_staging(void **state) {
    (void)state;
    const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        char dest[128], staging[160];
        snprintf(dest, sizeof dest, "%s/sig%zu", scratch, i);
        int ready;
        pid_t pid = stage_in_child(dest, &ready, 0);
        snprintf(staging, sizeof staging, "%s.staging-%ld", dest, (long)pid);
        assert_true(exists(staging));
        kill(pid, signals[i]);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(ready);
        /* it still ends by the signal (exit status 128 + n in a shell) */
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), signals[i]);
        if (exists(staging)) fail_msg("%s left behind after signal %d", staging, signals[i]);
        assert_false(exists(dest));
    }
}

/* SIGTERM caught as a stop signal while a directory is staged: the child
 * finishes and commits it. */
static void test_handled_signal_left_to_its_handler(void **state) {
    (void)state;
    char dest[128], staging[160];
    snprintf(dest, sizeof dest, "%s/handled", scratch);
    int ready;
    pid_t pid = stage_in_child(dest, &ready, SIGTERM);
    snprintf(staging, sizeof staging, "%s.staging-%ld", dest, (long)pid);
    assert_true(exists(staging));
    kill(pid, SIGTERM);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(ready);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the child that handles SIGTERM ended with status %#x", status);
    assert_true(exists(dest));
    assert_false(exists(staging));
}

static void test_stale_staging_removed_live_kept(void **state) {
    (void)state;
    char dest[128], dead[160], live[160], old[160], path[200];
    snprintf(dest, sizeof dest, "%s/stale", scratch);
    int ready_dead, ready_live;
    pid_t a = stage_in_child(dest, &ready_dead, 0);
    pid_t b = stage_in_child(dest, &ready_live, 0);
    snprintf(dead, sizeof dead, "%s.staging-%ld", dest, (long)a);
    snprintf(live, sizeof live, "%s.staging-%ld", dest, (long)b);
    kill(a, SIGKILL); /* no handler runs: its staging directory stays */
    waitpid(a, NULL, 0);
    close(ready_dead);
    assert_true(exists(dead));
    /* an ".old-" directory of a process that is gone (killed mid-commit) */
    snprintf(old, sizeof old, "%s.old-%ld", dest, (long)a);
    assert_int_equal(mkdir(old, 0777), 0);
    snprintf(path, sizeof path, "%s/out.bin", old);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);

    plait_staged_dir d;
    assert_int_equal(plait_staged_dir_begin(&d, dest, owned), PLAIT_OK);
    if (exists(dead)) fail_msg("the staging directory of a killed process was not removed: %s", dead);
    if (exists(old)) fail_msg("the .old- directory of a killed process was not removed: %s", old);
    if (!exists(live)) fail_msg("the staging directory of a live process was removed: %s", live);
    assert_int_equal(plait_staged_dir_write(&d, "out.bin", "y", 1), PLAIT_OK);
    assert_int_equal(plait_staged_dir_commit(&d), PLAIT_OK);
    snprintf(path, sizeof path, "%s/out.bin", dest);
    assert_true(exists(path));

    kill(b, SIGTERM);
    waitpid(b, NULL, 0);
    close(ready_live);
    assert_false(exists(live));
}

static void test_commit_replaces_and_refuses_links(void **state) {
    (void)state;
    char dest[128], link[128], path[200];
    snprintf(dest, sizeof dest, "%s/twice", scratch);
    for (int round = 0; round < 2; round++) {
        plait_staged_dir d;
        assert_int_equal(plait_staged_dir_begin(&d, dest, owned), PLAIT_OK);
        assert_int_equal(plait_staged_dir_write(&d, round ? "out2" : "out1", "z", 1), PLAIT_OK);
        assert_int_equal(plait_staged_dir_commit(&d), PLAIT_OK);
    }
    snprintf(path, sizeof path, "%s/out2", dest);
    assert_true(exists(path));
    snprintf(path, sizeof path, "%s/out1", dest);
    assert_false(exists(path)); /* replaced whole, not merged */

    snprintf(link, sizeof link, "%s/via-link", scratch);
    assert_int_equal(symlink(dest, link), 0);
    plait_staged_dir d;
    assert_int_equal(plait_staged_dir_begin(&d, link, owned), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "is a symbolic link"));
    snprintf(path, sizeof path, "%s/out2", dest);
    assert_true(exists(path));
}

/* A destination that is a file, or a directory holding a file the caller
 * does not write or something not a plain file by a name it writes, is refused by check and by begin (before the caller's
 * work), each naming it, and nothing is created beside it. */
static void test_refused_before_work(void **state) {
    (void)state;
    char file[128], foreign[128], path[200];
    snprintf(file, sizeof file, "%s/a-file", scratch);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(foreign, sizeof foreign, "%s/foreign", scratch);
    assert_int_equal(mkdir(foreign, 0777), 0);
    snprintf(path, sizeof path, "%s/notes.txt", foreign);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    /* an output's name that is not a plain file: commit would carry it off
     * into the staging directory and leave it there */
    char subdir[128], linked[128];
    snprintf(subdir, sizeof subdir, "%s/subdir", scratch);
    snprintf(path, sizeof path, "%s/out1", subdir);
    assert_int_equal(mkdir(subdir, 0777), 0);
    assert_int_equal(mkdir(path, 0777), 0);
    snprintf(linked, sizeof linked, "%s/linked", scratch);
    snprintf(path, sizeof path, "%s/out1", linked);
    assert_int_equal(mkdir(linked, 0777), 0);
    assert_int_equal(symlink(file, path), 0);
    const char *dests[] = {file, foreign, subdir, linked};
    const char *why[] = {"exists and is a regular file, not a directory", "already holds notes.txt",
                         "already holds out1, which is a directory", "already holds out1, which is a symbolic link"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(plait_staged_dir_check(dests[i], owned), PLAIT_ERR_INVALID_ARG);
        assert_non_null(strstr(plait_last_error(), why[i]));
        plait_staged_dir d;
        assert_int_equal(plait_staged_dir_begin(&d, dests[i], owned), PLAIT_ERR_INVALID_ARG);
        assert_non_null(strstr(plait_last_error(), why[i]));
        snprintf(path, sizeof path, "%s.staging-%ld", dests[i], (long)getpid());
        assert_false(exists(path));
    }
    snprintf(path, sizeof path, "%s/fresh/", scratch);
    assert_int_equal(plait_staged_dir_check(path, owned), PLAIT_OK);
}

static int setup(void **state) {
    (void)state;
    snprintf(scratch, sizeof scratch, "/tmp/plait-staged-XXXXXX");
    return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < n_children; i++)
        if (kill(children[i], SIGKILL) == 0) waitpid(children[i], NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interrupt_removes_staging),
        cmocka_unit_test(test_handled_signal_left_to_its_handler),
        cmocka_unit_test(test_stale_staging_removed_live_kept),
        cmocka_unit_test(test_commit_replaces_and_refuses_links),
        cmocka_unit_test(test_refused_before_work),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
