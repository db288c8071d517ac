/* The local launcher (see launch.h). */
#include "launch/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "launch/math_threads.h"
#include "launch/net.h"
#include "launch/rank_env.h"
#include "launch/rank_report.h"
#include "launch/store.h"
#include "runtime/error.h"

#define LAST_LINE PLAIT_REPORT_LINE

struct rank_proc {
    pid_t pid;
    int pidfd;         /* readable when the rank ends; -1 if unavailable */
    int alive;
    int status;        /* from waitpid */
    int report_fd;     /* read end, -1 when closed */
    char partial[LAST_LINE];
    size_t partial_len;
    char last[LAST_LINE];
    int finished;        /* it marked its command finished (PLAIT_REPORT_FINISHED_MARK with its pid) */
    int unfinished;      /* it exited with status 0 unmarked, counted as exit status 1 */
    int external_signal; /* killed by a signal the launcher did not send: a root cause */
    int handles;         /* the signal it stops at with a checkpoint (PLAIT_REPORT_HANDLES_MARK); 0 none */
};

/* ---- launcher ----------------------------------------------------------- */

/* A line of a rank's report is complete (or the last one, without a
 * newline): the finished mark or the handled signal's with the rank's own
 * pid (a process it started may have inherited the pipe: its mark is not
 * the rank's), else an error line, kept as its last. */
static void take_line(struct rank_proc *p) {
    size_t k = sizeof PLAIT_REPORT_FINISHED_MARK - 1, h = sizeof PLAIT_REPORT_HANDLES_MARK - 1;
    p->partial[p->partial_len] = '\0';
    if (p->partial_len >= k && memcmp(p->partial, PLAIT_REPORT_FINISHED_MARK, k) == 0) {
        char *end = NULL;
        long pid = strtol(p->partial + k, &end, 10);
        if (end && !*end && pid == (long)p->pid) p->finished = 1;
    } else if (p->partial_len >= h && memcmp(p->partial, PLAIT_REPORT_HANDLES_MARK, h) == 0) {
        char *end = NULL, *end2 = NULL;
        long sig = strtol(p->partial + h, &end, 10);
        long pid = end && *end == ' ' ? strtol(end + 1, &end2, 10) : -1;
        if (end2 && !*end2 && pid == (long)p->pid && sig >= 0 && sig < 65) p->handles = (int)sig;
    } else if (p->partial_len) {
        memcpy(p->last, p->partial, p->partial_len + 1);
    }
    p->partial_len = 0;
}

/* Read what a rank reported. */
static void drain_report(struct rank_proc *p) {
    while (p->report_fd >= 0) {
        char buf[4096];
        ssize_t r = read(p->report_fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (r <= 0) {
            if (p->partial_len) take_line(p); /* a last line without newline */
            close(p->report_fd);
            p->report_fd = -1;
            return;
        }
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] == '\n')
                take_line(p);
            else if (p->partial_len + 1 < sizeof p->partial)
                p->partial[p->partial_len++] = buf[i];
        }
    }
}

static const char *signame(int sig) {
    const char *d = sigabbrev_np(sig);
    static __thread char buf[32];
    snprintf(buf, sizeof buf, "SIG%s", d ? d : "?");
    return buf;
}

static void describe(const struct rank_proc *p, int rank, char *out, size_t cap) {
    if (p->unfinished) {
        snprintf(out, cap, "rank %d failed: exited with status 0 before its command finished (a call to _exit() in "
                 "a plugin or library?)%s%s", rank, p->last[0] ? "; its last error: " : "", p->last);
    } else if (WIFSIGNALED(p->status)) {
        snprintf(out, cap, "rank %d was killed by %s%s%s", rank, signame(WTERMSIG(p->status)),
                 p->last[0] ? "; its last error: " : "", p->last);
    } else if (p->last[0]) {
        snprintf(out, cap, "rank %d failed: %s", rank, p->last);
    } else {
        snprintf(out, cap, "rank %d failed with exit code %d (it reported no error)", rank,
                 WEXITSTATUS(p->status));
    }
}

/* Signal every rank still running, and their process group (so helpers
 * they started go too). */
static int g_launcher_signalled; /* the launcher has signalled its ranks */

static void signal_all(struct rank_proc *procs, int n, pid_t pgid, int sig) {
    int any = 0;
    g_launcher_signalled = 1;
    for (int r = 0; r < n; r++)
        if (procs[r].alive) {
            kill(procs[r].pid, sig);
            any = 1;
        }
    if (pgid > 0 && (any || sig == SIGKILL)) killpg(pgid, sig);
}

/* The store's listening socket: loopback on a free port for a job on this
 * host; `host`:`port` for node 0 of a multi-host job (all addresses when the
 * name is not one of this host's, as behind NAT). -1 with the error set. */
static int store_listener(const char *host, int port) {
    if (!host) {
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return plait_net_listen((struct sockaddr *)&sa, sizeof sa, 1024);
    }
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (plait_net_resolve(host, port, &ss, &len) != PLAIT_OK) return -1;
    int fd = plait_net_listen((struct sockaddr *)&ss, len, 1024);
    if (fd < 0 && strstr(plait_last_error(), strerror(EADDRNOTAVAIL))) {
        struct sockaddr_in any = {0};
        any.sin_family = AF_INET;
        any.sin_port = htons((uint16_t)port);
        fd = plait_net_listen((struct sockaddr *)&any, sizeof any, 1024);
    }
    return fd;
}

static int g_clean_exit; /* hooks->clean_exit of the launch in progress */

static int failed(int status) {
    return WIFSIGNALED(status) ||
           (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != g_clean_exit);
}

/* What one launch shares between its steps. */
struct launch {
    const plait_launch_opts *o;
    const plait_launch_hooks *hk;
    int n;                   /* ranks on this host */
    int multi;               /* a job on several hosts */
    double grace;
    const char *exe;         /* what the ranks execute */
    char self[4096];         /* its resolved path, for messages */
    int threads;             /* each rank's PLAIT_MATH_THREADS */
    char token[PLAIT_STORE_MAX_TOKEN + 1];
    char store_addr[300];
    int listen_fd;           /* the store's listening socket, for rank 0; -1 if none here */
    struct rank_proc *procs;
    int *report_w;           /* write ends of the report pipes, -1 once closed */
    sigset_t old_mask;       /* the caller's signal mask, the ranks' too */
    int sfd;                 /* signalfd of SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 */
    pid_t launcher;
    pid_t pgid;              /* the ranks' process group; 0 before the first starts */
    int started;
    plait_status st;         /* PLAIT_OK, or why a rank could not start */
    char start_error[1024];
    int alive;
    int first;               /* the rank to blame; -1 if none */
    int interrupts, int_sig, stopped;
    int saving; /* the signal passed on to ranks that each stop at it with a checkpoint */
    int stop_fd;
    double term_at, kill_at; /* when the ranks get SIGTERM / SIGKILL; -1 if not due */
};

/* Reports name world ranks: on host i of a job on several hosts this
 * launcher's ranks are i·n .. i·n + n-1, not 0 .. n-1. */
static int world_base(const struct launch *l) {
    return (l->o->nnodes > 1 ? l->o->node_rank : 0) * l->n;
}

/* The program the ranks run, and its path for messages. */
static void resolve_exe(struct launch *l) {
    const plait_launch_opts *o = l->o;
    /* The children run this very binary: /proc/self/exe is this process's
     * executable itself, not a path to look up, so a binary replaced or
     * removed on disk since the launcher started (a reinstall, a rebuild)
     * still starts the ranks, and every --max-restarts relaunch runs what the
     * first attempt ran. Its resolved path is for messages only. */
    l->exe = o->exe ? o->exe : "/proc/self/exe";
    snprintf(l->self, sizeof l->self, "%s", l->exe);
    if (!o->exe) {
        ssize_t len = readlink("/proc/self/exe", l->self, sizeof l->self - 1);
        l->self[len > 0 ? len : 0] = '\0';
        if (len <= 0) snprintf(l->self, sizeof l->self, "%s", l->exe);
    }
}

/* Check the options and settle what every rank shares: the program, its
 * math threads, the job's token. Nothing is open yet. */
static plait_status launch_init(struct launch *l, const plait_launch_opts *o) {
    memset(l, 0, sizeof *l);
    l->o = o;
    l->hk = o->hooks;
    l->n = o->nranks;
    l->listen_fd = -1;
    l->sfd = -1;
    l->first = -1;
    if (l->n < 1 || !o->argv || !o->argv[0])
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "launch: need at least one rank and a command line");
    l->grace = o->grace_s > 0 ? o->grace_s : 3.0;
    resolve_exe(l);
    const char *mt = getenv("PLAIT_MATH_THREADS");
    l->threads = plait_math_threads_rule(mt ? atoi(mt) : 0, l->n);

    l->multi = o->nnodes > 1;
    if (l->multi && (o->node_rank < 0 || o->node_rank >= o->nnodes || !o->store_host || !*o->store_host ||
                     o->store_port < 1 || o->store_port > 65535 || !o->token || !*o->token))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "launch: a job on %d hosts needs this host's rank "
                               "(0..%d), rank 0's host and port and the job's token", o->nnodes, o->nnodes - 1);
    plait_status st = PLAIT_OK;
    if (l->multi) {
        snprintf(l->token, sizeof l->token, "%s", o->token);
    } else {
        unsigned char raw[24];
        if ((st = plait_net_random(raw, sizeof raw)) != PLAIT_OK) return st;
        plait_net_hex(raw, sizeof raw, l->token);
    }
    return st;
}

/* The store's listening socket (the caller's, or made here on the host of
 * rank 0) and the address every rank reaches it at. */
static plait_status open_store(struct launch *l) {
    const plait_launch_opts *o = l->o;
    const plait_launch_hooks *hk = l->hk;
    g_clean_exit = hk && hk->clean_exit > 0 ? hk->clean_exit : 0;
    if (hk && hk->store_fd >= 0) {
        l->listen_fd = hk->store_fd;
    } else if (!l->multi || o->node_rank == 0) {
        l->listen_fd = store_listener(l->multi ? o->store_host : NULL, l->multi ? o->store_port : 0);
        if (l->listen_fd < 0) return plait_wrap_error(PLAIT_ERR_SYSTEM, "launch: creating the job's store socket");
    }
    if (l->multi) {
        snprintf(l->store_addr, sizeof l->store_addr, "%s%s%s:%d", strchr(o->store_host, ':') ? "[" : "",
                 o->store_host, strchr(o->store_host, ':') ? "]" : "", o->store_port);
    } else {
        struct sockaddr_in sa = {0};
        socklen_t sl = sizeof sa;
        getsockname(l->listen_fd, (struct sockaddr *)&sa, &sl);
        snprintf(l->store_addr, sizeof l->store_addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    }
    return PLAIT_OK;
}

/* The table of ranks, none started; on error the store socket is closed. */
static plait_status alloc_procs(struct launch *l) {
    l->procs = calloc((size_t)l->n, sizeof *l->procs);
    l->report_w = malloc(sizeof(int) * (size_t)l->n);
    if (!l->procs || !l->report_w) {
        free(l->procs);
        free(l->report_w);
        close(l->listen_fd);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int r = 0; r < l->n; r++) {
        l->procs[r].report_fd = l->report_w[r] = -1;
        l->procs[r].pidfd = -1;
    }
    return PLAIT_OK;
}

/* SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 arrive on a signalfd while
 * the ranks run (the last two, whose default would end the launcher alone,
 * are passed on as the others are); on error everything made so far is
 * undone. */
static plait_status block_signals(struct launch *l) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &mask, &l->old_mask);
    l->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (l->sfd < 0) {
        plait_status st = plait_set_error(PLAIT_ERR_SYSTEM, "launch: signalfd: %s", strerror(errno));
        pthread_sigmask(SIG_SETMASK, &l->old_mask, NULL);
        close(l->listen_fd);
        free(l->procs);
        free(l->report_w);
        return st;
    }
    return PLAIT_OK;
}

/* What execve's failure `err` means, in the C library's words, without
 * calling it (async-signal-safe: a table of the errors execve returns);
 * NULL for another error. */
static const char *exec_error_text(int err) {
    switch (err) {
    case ENOENT: return "No such file or directory";
    case EACCES: return "Permission denied";
    case ENOEXEC: return "Exec format error";
    case ENOMEM: return "Cannot allocate memory";
    case E2BIG: return "Argument list too long";
    case ETXTBSY: return "Text file busy";
    case ELOOP: return "Too many levels of symbolic links";
    case ENAMETOOLONG: return "File name too long";
    case ENOTDIR: return "Not a directory";
    case EISDIR: return "Is a directory";
    case EPERM: return "Operation not permitted";
    case EIO: return "Input/output error";
    case EMFILE: return "Too many open files";
    case ENFILE: return "Too many open files in system";
    case ELIBBAD: return "Accessing a corrupted shared library";
    default: return NULL;
    }
}

/* In the forked rank: set it up and run the command; never returns. */
static _Noreturn void exec_rank(const struct launch *l, int r, int report_fd, int agent_fd, char **env) {
    const plait_launch_opts *o = l->o;
    /* child: only async-signal-safe calls until exec */
    setpgid(0, l->pgid);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != l->launcher) _exit(126);
    if (o->stdout_fd >= 0) dup2(o->stdout_fd, STDOUT_FILENO);
    if (o->stderr_fd >= 0) dup2(o->stderr_fd, STDERR_FILENO);
    fcntl(report_fd, F_SETFD, 0);
    if (r == 0 && l->listen_fd >= 0) fcntl(l->listen_fd, F_SETFD, 0);
    if (agent_fd >= 0) fcntl(agent_fd, F_SETFD, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &l->old_mask, NULL);
    execve(l->exe, o->argv, env);
    /* still async-signal-safe: snprintf and strerror may take locks that
     * another thread of the launcher held at the fork, and a rank stuck
     * here would never end */
    int err = errno;
    char num[16] = "error ";
    const char *why = exec_error_text(err);
    if (!why) { /* "error N" by hand */
        char digits[12];
        int nd = 0;
        for (unsigned v = (unsigned)err; nd == 0 || v; v /= 10) digits[nd++] = (char)('0' + v % 10);
        size_t at = 6;
        while (nd) num[at++] = digits[--nd];
        num[at] = '\0';
        why = num;
    }
    const char *const parts[] = {"cannot execute ", l->self, ": ", why, "\n"};
    char msg[4200];
    size_t len = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const char *c = parts[i]; *c && len < sizeof msg; c++) msg[len++] = *c;
    if (write(report_fd, msg, len) < 0) {
    }
    _exit(127);
}

/* Why fork failed, with the user's process limit when that is what it
 * ran into. */
static plait_status fork_error(int err) {
    struct rlimit lim;
    char hint[128] = "";
    if (err == EAGAIN && getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
        snprintf(hint, sizeof hint, " (this user may run %llu processes: ulimit -u)",
                 (unsigned long long)lim.rlim_cur);
    return plait_set_error(PLAIT_ERR_SYSTEM, "fork: %s%s", strerror(err), hint);
}

/* Start rank r with its report pipe. What it leaves open on error (the
 * pipe) is closed by the steps after. */
static plait_status start_rank(struct launch *l, int r) {
    const plait_launch_hooks *hk = l->hk;
    struct rank_proc *p = &l->procs[r];
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "pipe: %s", strerror(errno));
    p->report_fd = pfd[0];
    l->report_w[r] = pfd[1];
    plait_net_set_nonblocking(pfd[0]);
    int agent_fd = hk && hk->rank_fds ? hk->rank_fds[r] : -1;
    char **env = plait_launch_rank_env(l->o, r, l->store_addr, l->token, l->listen_fd, pfd[1], l->threads, agent_fd);
    if (!env) return plait_set_error(PLAIT_ERR_NO_MEMORY, "launch: out of memory");
    pid_t pid = fork();
    if (pid < 0) {
        plait_status st = fork_error(errno);
        plait_launch_rank_env_free(env);
        return st;
    }
    if (pid == 0) exec_rank(l, r, pfd[1], agent_fd, env);
    setpgid(pid, l->pgid); /* also in the parent: no race with the first kill */
    if (l->pgid == 0) l->pgid = pid;
    plait_launch_rank_env_free(env);
    close(pfd[1]);
    l->report_w[r] = -1;
    p->pid = pid;
    p->alive = 1;
    /* pidfds tell us about our own children only, so a launcher inside a
     * bigger program (tests) never needs SIGCHLD or reaps others' children */
    p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    l->started++;
    return PLAIT_OK;
}

/* Start the ranks in order, up to the first that cannot start (l->st says
 * why), and close what only the ranks need. */
static void start_ranks(struct launch *l) {
    l->launcher = getpid();
    l->pgid = 0;
    l->started = 0;
    l->st = PLAIT_OK;
    for (int r = 0; r < l->n; r++)
        if ((l->st = start_rank(l, r)) != PLAIT_OK) break;
    if (l->listen_fd >= 0) close(l->listen_fd); /* rank 0 has its own copy */
    for (int r = 0; r < l->n; r++)
        if (l->report_w[r] >= 0) close(l->report_w[r]);
    free(l->report_w);
    l->report_w = NULL;
    /* A start that failed is the cause; the ranks stopped for it are not. */
    l->start_error[0] = '\0';
    if (l->st != PLAIT_OK) snprintf(l->start_error, sizeof l->start_error, "%s", plait_last_error());
}

/* What the next poll waits on: the signalfd, the stop fd, and (`ranks`)
 * each rank's report pipe and pidfd. Returns how many. */
static int poll_set(const struct launch *l, struct pollfd *pfds, int ranks) {
    int np = 0;
    pfds[np++] = (struct pollfd){l->sfd, POLLIN, 0};
    if (l->stop_fd >= 0 && !l->stopped) pfds[np++] = (struct pollfd){l->stop_fd, POLLIN, 0};
    for (int r = 0; r < l->n && ranks; r++) {
        const struct rank_proc *p = &l->procs[r];
        if (p->report_fd >= 0) pfds[np++] = (struct pollfd){p->report_fd, POLLIN, 0};
        if (p->alive && p->pidfd >= 0) pfds[np++] = (struct pollfd){p->pidfd, POLLIN, 0};
    }
    return np;
}

/* Milliseconds until the next SIGTERM or SIGKILL is due; -1 if none is. */
static int poll_timeout(const struct launch *l, int have_pidfds) {
    int timeout = -1;
    double now = plait_clock_now();
    double next = l->term_at >= 0 ? l->term_at : l->kill_at;
    if (l->kill_at >= 0 && (next < 0 || l->kill_at < next)) next = l->kill_at;
    if (next >= 0) timeout = next > now ? (int)((next - now) * 1000) + 1 : 0;
    /* no pidfds (an old kernel), or not polling the ranks: look every 0.1 s */
    if (!have_pidfds && (timeout < 0 || timeout > 100)) timeout = 100;
    return timeout;
}

/* 1 if every rank still running said that it stops at `sig` with a
 * checkpoint ([run] exit_signal). */
static int ranks_handle(const struct launch *l, int sig) {
    int any = 0;
    for (int r = 0; r < l->n; r++) {
        if (!l->procs[r].alive) continue;
        if (l->procs[r].handles != sig) return 0;
        any = 1;
    }
    return any;
}

/* The launcher's own SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2: the first is
 * passed on to the ranks, any later one kills them. One that every rank
 * said it stops at with a checkpoint is passed on to them alone (not their
 * helpers) and is no interruption: the ranks save, exit 0, and the job
 * succeeds; nothing is killed while they save, unless another signal
 * comes. */
static void take_signals(struct launch *l) {
    struct signalfd_siginfo si;
    while (read(l->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (!l->interrupts && !l->saving && ranks_handle(l, sig)) {
            l->saving = sig;
            g_launcher_signalled = 1;
            for (int r = 0; r < l->n; r++)
                if (l->procs[r].alive) kill(l->procs[r].pid, sig);
            if (!l->o->quiet)
                fprintf(stderr,
                        "plait: %s passed on to the ranks, which save a checkpoint at the end of their step "
                        "and stop ([run] exit_signal); another signal stops them at once\n",
                        signame(sig));
            continue;
        }
        if (l->saving && !l->interrupts) l->interrupts++; /* the save's signal was the first */
        l->interrupts++;
        l->int_sig = (int)si.ssi_signo;
        signal_all(l->procs, l->n, l->pgid, l->interrupts == 1 ? l->int_sig : SIGKILL);
        if (l->interrupts == 1) l->kill_at = plait_clock_now() + 10 * l->grace;
    }
}

/* hooks->stop_fd became readable: every rank is killed at once. */
static void check_stop(struct launch *l, const struct pollfd *pfds) {
    if (l->stop_fd >= 0 && !l->stopped && pfds[1].fd == l->stop_fd &&
        (pfds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        /* decided elsewhere (the job's membership changed): nothing of
         * these ranks is worth waiting for */
        l->stopped = 1;
        signal_all(l->procs, l->n, l->pgid, SIGKILL);
        l->term_at = -1;
    }
}

/* Collect the ranks that have ended; the first failure names the rank to
 * blame and gives the others their grace. */
static void reap_ranks(struct launch *l) {
    int newly[2] = {-1, -1}; /* first failure by signal / by exit this round */
    for (int r = 0; r < l->n; r++) {
        struct rank_proc *p = &l->procs[r];
        if (!p->alive) continue;
        int status;
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w != p->pid) continue;
        p->alive = 0;
        /* what it wrote before it ended is in the pipe now, its mark too */
        drain_report(p);
        if (l->o->expect_finished && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !p->finished) {
            /* ended without returning from main: code it loaded
             * called _exit(0), or something ended it so; its peers
             * would wait for it until [comm] timeout */
            p->unfinished = 1;
            status = W_EXITCODE(1, 0);
        }
        p->status = status;
        if (p->pidfd >= 0) close(p->pidfd);
        p->pidfd = -1;
        l->alive--;
        if (failed(status) && !l->stopped) {
            int k = WIFSIGNALED(status) ? 0 : 1;
            p->external_signal = k == 0 && !g_launcher_signalled;
            if (newly[k] < 0) newly[k] = r;
        }
    }
    if (l->first < 0 && (newly[0] >= 0 || newly[1] >= 0)) {
        /* a rank killed by a signal is the cause; ranks exiting with
         * an error at the same moment are usually its victims */
        l->first = newly[0] >= 0 ? newly[0] : newly[1];
        if (!l->interrupts) l->term_at = plait_clock_now() + l->grace;
    }
}

/* SIGTERM once the grace is over, SIGKILL a grace later. */
static void escalate(struct launch *l) {
    double now = plait_clock_now();
    if (l->term_at >= 0 && now >= l->term_at) {
        signal_all(l->procs, l->n, l->pgid, SIGTERM);
        l->term_at = -1;
        l->kill_at = now + l->grace;
    }
    if (l->kill_at >= 0 && now >= l->kill_at) {
        signal_all(l->procs, l->n, l->pgid, SIGKILL);
        l->kill_at = -1;
    }
}

/* Supervise the started ranks until all have ended. */
static void watch_ranks(struct launch *l) {
    l->alive = l->started;
    l->first = -1;
    l->interrupts = l->int_sig = l->stopped = l->saving = 0;
    l->stop_fd = l->hk && l->hk->stop_fd >= 0 ? l->hk->stop_fd : -1;
    l->term_at = l->kill_at = -1;
    if (l->st != PLAIT_OK && l->started > 0) { /* could not start everyone: stop the rest */
        signal_all(l->procs, l->n, l->pgid, SIGTERM);
        l->kill_at = plait_clock_now() + l->grace;
    }
    struct pollfd *pfds = calloc(2 * (size_t)l->n + 2, sizeof *pfds), few[2];
    int have_pidfds = 1;
    for (int r = 0; r < l->n; r++)
        if (l->procs[r].alive && l->procs[r].pidfd < 0) have_pidfds = 0;
    /* Without the whole poll set (no memory for it, or poll failing: ENOMEM)
     * the launcher still watches every rank to its end, polling only the
     * signal and stop fds and looking at the ranks every 0.1 s: leaving
     * the loop would return with ranks running and unreaped. */
    int degraded = !pfds;
    while (l->alive > 0) {
        struct pollfd *set = degraded ? few : pfds;
        int np = poll_set(l, set, !degraded);
        int rc = poll(set, (nfds_t)np, poll_timeout(l, have_pidfds && !degraded));
        if (rc < 0 && errno != EINTR) {
            if (degraded) { /* not even the two: sleep the 0.1 s instead */
                const struct timespec tenth = {0, 100 * 1000 * 1000};
                nanosleep(&tenth, NULL);
            }
            degraded = 1;
            for (int i = 0; i < np; i++) set[i].revents = 0;
        }
        for (int r = 0; r < l->n; r++)
            if (l->procs[r].report_fd >= 0) drain_report(&l->procs[r]);
        take_signals(l);
        check_stop(l, set);
        reap_ranks(l);
        escalate(l);
    }
    free(pfds);
}

/* Close what the watch used and give the caller its signal mask back. */
static void end_watch(struct launch *l) {
    for (int r = 0; r < l->n; r++) {
        struct rank_proc *p = &l->procs[r];
        /* the rank is gone and what it wrote is in the pipe; never block
         * here (a process it left behind may still hold the pipe open) */
        drain_report(p);
        if (p->partial_len) take_line(p);
        if (p->report_fd >= 0) close(p->report_fd);
        if (p->pidfd >= 0) close(p->pidfd);
    }
    close(l->sfd);
    pthread_sigmask(SIG_SETMASK, &l->old_mask, NULL);
    /* an abnormal end takes down what the ranks left behind in their group */
    if ((l->interrupts || l->first >= 0 || l->stopped) && l->pgid > 0) killpg(l->pgid, SIGKILL);
}

/* A rank killed from outside is the cause even when a peer that lost it
 * exited first (ranks notice a dead peer faster than waitpid reports it). */
static void blame_external_signal(struct launch *l) {
    if (l->first >= 0 && !l->procs[l->first].external_signal)
        for (int r = 0; r < l->n; r++)
            if (l->procs[r].external_signal) {
                l->first = r;
                break;
            }
}

/* A rank whose error relays another rank's going down stopped because
 * of it: the root cause is the rank its error names when that one
 * failed first-hand here, else the first rank here that did. */
static void blame_relay_origin(struct launch *l) {
    const struct rank_proc *procs = l->procs;
    int origin;
    if (l->first >= 0 && !procs[l->first].external_signal && plait_error_relayed(procs[l->first].last, &origin)) {
        int local = origin - world_base(l), ignored; /* its index on this host */
        if (local >= 0 && local < l->n && procs[local].pid && failed(procs[local].status) &&
            !plait_error_relayed(procs[local].last, &ignored)) {
            l->first = local;
        } else {
            for (int r = 0; r < l->n; r++)
                if (procs[r].pid && failed(procs[r].status) && !plait_error_relayed(procs[r].last, &ignored)) {
                    l->first = r;
                    break;
                }
        }
    }
}

/* A rank that could not reach the job's store failed because of its
 * host when that rank exited on an error of its own here (rank 0
 * refused the run directory, say, and closed the store as the others
 * joined); a host the launcher stopped (stuck, never joined) is not. */
static void blame_store_host(struct launch *l) {
    const struct rank_proc *procs = l->procs;
    int first = l->first;
    int host = first >= 0 && !procs[first].external_signal ? plait_error_store_host(procs[first].last) : -1;
    if (host >= 0) {
        int local = host - world_base(l), ignored;
        if (local >= 0 && local < l->n && local != first && procs[local].pid && WIFEXITED(procs[local].status) &&
            WEXITSTATUS(procs[local].status) != 0 && procs[local].last[0] &&
            !plait_error_relayed(procs[local].last, &ignored) && plait_error_store_host(procs[local].last) < 0)
            l->first = local;
    }
}

/* Which rank the job failed because of: l->first, or -1. */
static void root_cause(struct launch *l) {
    blame_external_signal(l);
    blame_relay_origin(l);
    blame_store_host(l);
    if (l->st != PLAIT_OK) l->first = -1; /* the ranks that ended were stopped by the launcher */
}

/* The job's outcome: an interruption, else the exit of the rank to blame. */
static void fill_result(const struct launch *l, plait_launch_result *res) {
    res->stopped = l->stopped;
    if (l->interrupts) {
        res->interrupted = 1;
        res->exit_code = 128 + l->int_sig;
        snprintf(res->message, sizeof res->message, "interrupted by %s; stopped %d rank%s", signame(l->int_sig),
                 l->n, l->n == 1 ? "" : "s");
    }
    if (l->first >= 0) {
        const struct rank_proc *p = &l->procs[l->first];
        int base = world_base(l);
        res->failed_rank = base + l->first;
        res->term_signal = WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0;
        if (!l->interrupts)
            res->exit_code = res->term_signal ? 128 + res->term_signal : WEXITSTATUS(p->status);
        if (!l->interrupts) describe(p, base + l->first, res->message, sizeof res->message);
    }
}

/* The hooks' rank_ended, once for every rank that started. */
static void tell_rank_ended(const struct launch *l) {
    const plait_launch_hooks *hk = l->hk;
    if (hk && hk->rank_ended)
        for (int r = 0; r < l->n; r++) {
            const struct rank_proc *p = &l->procs[r];
            if (p->pid)
                hk->rank_ended(hk->ctx, r, world_base(l) + r, p->status,
                               WIFSIGNALED(p->status) && !p->external_signal, p->last);
        }
}

/* The summary on stderr: the result's message, then the other ranks that
 * failed. */
static void print_summary(const struct launch *l, const plait_launch_result *res) {
    if (l->o->quiet || !res->message[0]) return;
    fprintf(stderr, "plait: %s\n", res->message);
    /* the others, briefly */
    int base = world_base(l);
    char others[1024];
    size_t off = 0;
    for (int r = 0; r < l->n && off + 48 < sizeof others; r++) {
        const struct rank_proc *p = &l->procs[r];
        if (r == l->first || !p->pid || !failed(p->status)) continue;
        if (p->unfinished)
            off += (size_t)snprintf(others + off, sizeof others - off, "%s rank %d (exit 0, unfinished)",
                                    off ? "," : "", base + r);
        else if (WIFSIGNALED(p->status))
            off += (size_t)snprintf(others + off, sizeof others - off, "%s rank %d (%s)", off ? "," : "",
                                    base + r, signame(WTERMSIG(p->status)));
        else
            off += (size_t)snprintf(others + off, sizeof others - off, "%s rank %d (exit %d)", off ? "," : "",
                                    base + r, WEXITSTATUS(p->status));
    }
    /* after an interruption the launcher stopped them all itself: no news */
    if (off && !l->interrupts) fprintf(stderr, "plait: also ended abnormally:%s\n", others);
}

plait_status plait_launch_local(const plait_launch_opts *o, plait_launch_result *res) {
    memset(res, 0, sizeof *res);
    res->failed_rank = -1;
    g_launcher_signalled = 0;
    struct launch l;
    plait_status st = launch_init(&l, o);
    if (st == PLAIT_OK) st = open_store(&l);
    if (st == PLAIT_OK) st = alloc_procs(&l);
    if (st == PLAIT_OK) st = block_signals(&l);
    if (st != PLAIT_OK) return st;

    start_ranks(&l);
    watch_ranks(&l);
    end_watch(&l);
    root_cause(&l);
    fill_result(&l, res);
    tell_rank_ended(&l);
    print_summary(&l, res);
    free(l.procs);
    if (l.st != PLAIT_OK)
        return plait_set_error(l.st, "could not start rank %d of %d: %s; the %d rank%s already started %s stopped",
                               l.started, l.n, l.start_error, l.started, l.started == 1 ? "" : "s",
                               l.started == 1 ? "was" : "were");
    return PLAIT_OK;
}
