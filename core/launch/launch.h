/*
 * The local launcher behind `plait <command> -n N`: spawns N ranks of a
 * program on this host and supervises them.
 *
 * Each rank gets PLAIT_RANK, PLAIT_WORLD_SIZE, PLAIT_LOCAL_RANK,
 * PLAIT_LOCAL_SIZE, PLAIT_STORE_ADDR (127.0.0.1:<port>), PLAIT_JOB_TOKEN (24
 * random bytes, hex), PLAIT_REPORT_FD (a pipe for its final error line and
 * the mark that its command has finished) and
 * OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = PLAIT_MATH_THREADS =
 * max(1, cores / N) (or the PLAIT_MATH_THREADS already set). The launcher
 * creates the store's listening socket itself and hands it to rank 0
 * (PLAIT_STORE_FD), so the address is fixed before any rank starts and no
 * other process can take the port; it serves nothing itself.
 *
 * Several hosts (torchrun's --nnodes/--node-rank): one launcher per host,
 * each with `nnodes` and its `node_rank`, starts ranks node_rank·N ..
 * node_rank·N + N-1 of a world of nnodes·N; every rank gets
 * PLAIT_STORE_ADDR = store_host:store_port (MASTER_ADDR:MASTER_PORT), the
 * shared PLAIT_JOB_TOKEN and PLAIT_NNODES; node 0's launcher binds that
 * address itself and hands the socket to rank 0, as on one host.
 *
 * Supervision: the ranks run in their own process group and die with the
 * launcher (PR_SET_PDEATHSIG). Ctrl-C / SIGTERM / SIGHUP are forwarded once;
 * a second one kills the ranks. When a rank fails (non-zero exit or a
 * signal; with expect_finished, also an exit with status 0 before the rank
 * marked its command finished), the others get `grace_s` to finish or fail
 * on their own, then SIGTERM, then after another `grace_s` SIGKILL. The
 * result names the first rank that failed with its last error line ("rank 2
 * failed: ...") or its signal ("rank 2 was killed by SIGKILL").
 */
#ifndef PLAIT_CORE_LAUNCH_H
#define PLAIT_CORE_LAUNCH_H

#include <plait/types.h>

/* What a supervisor above the launcher may add (the elastic launcher,
 * cli/cli_elastic.c); NULL in plait_launch_opts = none of it. The fds are
 * the caller's except store_fd, which the launcher takes over. */
typedef struct plait_launch_hooks {
    int stop_fd;         /* >= 0: when it becomes readable every rank is killed at once
                            (SIGKILL) and the result says stopped: a decision taken
                            elsewhere (a host of the job was lost) */
    int store_fd;        /* >= 0: the listening socket rank 0 serves the job's store on
                            (made by the caller, taken over and closed here), instead of
                            binding store_host:store_port; only on the host of rank 0 */
    const int *rank_fds; /* NULL, or nranks fds: local rank i inherits rank_fds[i], named by
                            PLAIT_AGENT_FD in its environment (-1: none for that rank) */
    /* Called once per rank after all have ended: its local index and world
     * rank, its waitpid status (that of exit status 1 for a rank counted as
     * failed for exiting with status 0 unfinished: see expect_finished),
     * whether a signal that ended it was the launcher's own, and its last
     * error line ("" if none). */
    void (*rank_ended)(void *ctx, int local_rank, int world_rank, int status, int by_launcher,
                       const char *last_error);
    int clean_exit;      /* > 0: a rank exiting with this status has not failed (it stopped
                            by agreement: PLAIT_RESTART_REGROUP_EXIT) */
    void *ctx;
} plait_launch_hooks;

typedef struct plait_launch_opts {
    int nranks;               /* >= 1 */
    const char *exe;          /* program to run; NULL = this program (/proc/self/exe) */
    char *const *argv;        /* its argv, NULL-terminated (argv[0] is only a name) */
    char *const *extra_env;   /* "NAME=value" entries added for every rank; NULL = none */
    double grace_s;           /* after the first failure, before SIGTERM/SIGKILL; <= 0 = 3 s */
    int stdout_fd, stderr_fd; /* the ranks' stdout/stderr; -1 = inherit */
    int quiet;                /* 1: do not print the summary to stderr */
    int nnodes;               /* hosts of the job, one launcher each; <= 1 = this host only */
    int node_rank;            /* this launcher's host, 0..nnodes-1 */
    const char *store_host;   /* nnodes > 1: rank 0's host (MASTER_ADDR) */
    int store_port;           /* nnodes > 1: its port (MASTER_PORT) */
    const char *token;        /* nnodes > 1: the job's shared PLAIT_JOB_TOKEN; else NULL (a fresh one) */
    int expect_finished;      /* 1: the ranks are plait commands, each of which marks on its report
                                 pipe that its command has finished (plait_launch_report_finished);
                                 one that exits with status 0 unmarked was ended by code it loaded
                                 (an _exit(0) no exit handler sees) and is counted as a failed rank
                                 with exit status 1. 0: any program, whose exit status 0 is success */
    const plait_launch_hooks *hooks; /* NULL = none */
} plait_launch_opts;

typedef struct plait_launch_result {
    int exit_code;        /* what the launcher should exit with: 0, the failed rank's
                             code, 128+signal, or 130 after Ctrl-C */
    int failed_rank;      /* world rank of the first rank that failed (on host i of a job on
                             several hosts: i·nranks + its index here); -1 if none */
    int term_signal;      /* the signal that killed it; 0 if it exited */
    int interrupted;      /* the launcher received SIGINT/SIGTERM/SIGHUP */
    int stopped;          /* hooks->stop_fd stopped the ranks (exit_code is then 0 unless a
                             rank had failed before) */
    char message[2048];   /* "rank 2 failed: <its last error>", "" on success */
} plait_launch_result;

/* Spawn and supervise the ranks; returns when all have ended. PLAIT_OK
 * means the launch itself worked (read res->exit_code for the job's
 * outcome); an error means nothing could be started. Prints the summary
 * to stderr unless opts->quiet. Not thread-safe (changes the signal mask
 * of the calling thread while it runs; call it from the main thread). */
plait_status plait_launch_local(const plait_launch_opts *opts, plait_launch_result *res);

/* Remove "-n N" / "-nN" / "--nranks N" / "--nranks=N" from argv (after
 * argv[0]), returning N through *nranks (0 if absent). Returns 0, or -1
 * with a message in *err (static text) when the value is missing or not
 * in 1..4096. *argc is updated; argv stays NULL-terminated. */
int plait_launch_take_nranks(int *argc, char **argv, int *nranks, const char **err);

#endif
