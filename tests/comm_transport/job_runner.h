/*
 * Helpers for the multi-process tests: run a job (plait's launcher, mpirun,
 * or hand-made torchrun-style processes) with its output captured in a
 * temporary file, and read that output back.
 */
#ifndef PLAIT_TEST_JOB_RUNNER_H
#define PLAIT_TEST_JOB_RUNNER_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch/launch.h"
#include "launch/rank_report.h"
#include "launch/net.h"

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle)))                                                 \
            fail_msg("expected \"%s\" in:\n%s", (needle), (haystack));                      \
    } while (0)

/* No rank of the job's output gave up waiting on a peer: what the core and
 * the tcp transport print when a wait meets its timeout is absent. A test
 * that a loss is noticed at once sets the timeout far above ctest's TIMEOUT
 * and checks this, rather than how long the job took. */
#define assert_no_timeout(output)                                                          \
    do {                                                                                   \
        if (strstr((output), "timed out") || strstr((output), "did not complete within"))  \
            fail_msg("a rank waited for its timeout:\n%s", (output));                       \
    } while (0)

static inline const char *test_driver(void) {
    const char *d = getenv("PLAIT_TCP_DRIVER");
    return d ? d : "tests/tcp_p2p_driver";
}

/* A temporary file for output; returns its fd, path in `path`. */
static inline int out_file(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/plait-test-out-XXXXXX");
    int fd = mkstemp(path);
    return fd;
}

/* The whole file as a string (caller frees). */
static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

typedef struct job_outcome {
    plait_launch_result res; /* plait launcher only */
    int exit_code;
    double seconds;
    char *output; /* stdout + stderr of every rank (and of mpirun) */
} job_outcome;

static inline void outcome_free(job_outcome *o) { free(o->output); }

/* Run `n` ranks of the driver under plait's launcher. */
static inline void launch_driver(int n, const char *const *args, const char *const *env, double grace,
                                 job_outcome *out) {
    char *argv[16];
    int k = 0;
    argv[k++] = (char *)"tcp_p2p_driver";
    for (int i = 0; args[i] && k < 15; i++) argv[k++] = (char *)args[i];
    argv[k] = NULL;
    char path[64];
    int fd = out_file(path, sizeof path);
    plait_launch_opts o = {0};
    o.nranks = n;
    o.exe = test_driver();
    o.argv = argv;
    o.extra_env = (char *const *)env;
    o.grace_s = grace;
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

/* fork + exec argv with output to a file; wait. */
static inline void run_command(char *const argv[], char *const envp[], job_outcome *out) {
    char path[64];
    int fd = out_file(path, sizeof path);
    double t0 = plait_clock_now();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        if (envp) execve(argv[0], argv, envp);
        else execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    out->seconds = plait_clock_now() - t0;
    close(fd);
    out->output = slurp(path);
    unlink(path);
    out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
