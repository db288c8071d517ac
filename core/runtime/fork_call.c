/* Untrusted code in a forked child: see fork_call.h. */
#include "runtime/fork_call.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"

int plait_write_all(int fd, const void *buf, size_t n) {
    const char *c = buf;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read what is there (without waiting when `wait_ms` is 0); 0 at the end
 * of the pipe or on an error, 1 while it may say more. */
static int read_some(int fd, plait_fork_result *res, size_t *cap, int wait_ms) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, wait_ms);
    if (r < 0) return errno == EINTR;
    if (r == 0) return 1;
    if (res->len + 4096 > *cap) {
        size_t ncap = *cap ? 2 * *cap : 65536;
        char *nb = realloc(res->out, ncap);
        if (!nb) return 0;
        res->out = nb;
        *cap = ncap;
    }
    ssize_t k = read(fd, res->out + res->len, *cap - res->len);
    if (k < 0) return errno == EINTR || errno == EAGAIN;
    res->len += (size_t)k;
    return k > 0;
}

void plait_fork_call(int (*fn)(int fd, void *arg), void *arg, double limit_s, plait_fork_result *res) {
    memset(res, 0, sizeof *res);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return;
    }
    if (pid == 0) {
        /* a group of its own: a helper it forks is stopped with it */
        setpgid(0, 0);
        close(p[0]);
        _exit(fn(p[1], arg));
    }
    setpgid(pid, pid); /* either side may get there first */
    close(p[1]);
    res->started = 1;
    size_t cap = 0;
    double deadline = plait_clock_now() + limit_s;
    /* Until the child ends (not the pipe: a helper it forked may hold the
     * pipe open, and a child may close it and go on), or the time is up. */
    int open_pipe = 1, ended = 0;
    while (!ended) {
        pid_t w = waitpid(pid, &res->status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) {
            ended = 1;
            break;
        }
        double left = deadline - plait_clock_now();
        if (left <= 0) {
            res->hung = 1;
            break;
        }
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        if (open_pipe) {
            open_pipe = read_some(p[0], res, &cap, ms);
        } else {
            struct timespec t = {0, (long)ms * 1000000L};
            nanosleep(&t, NULL);
        }
    }
    /* what it wrote before it ended, as far as it is there now (a helper
     * still holding the pipe is not waited for) */
    while (ended && open_pipe) {
        size_t before = res->len;
        open_pipe = read_some(p[0], res, &cap, 0);
        if (res->len == before) break;
    }
    close(p[0]);
    if (res->hung) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR) {}
    } else {
        kill(-pid, SIGKILL); /* helpers it left behind */
    }
}

int plait_fork_ok(const plait_fork_result *res) {
    return res->started && !res->hung && WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0;
}
