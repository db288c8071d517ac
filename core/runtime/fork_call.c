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
        close(p[0]);
        _exit(fn(p[1], arg));
    }
    close(p[1]);
    res->started = 1;
    size_t cap = 0;
    double deadline = plait_clock_now() + limit_s;
    for (;;) {
        double left = deadline - plait_clock_now();
        if (left <= 0) {
            res->hung = 1;
            break;
        }
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        if (res->len + 65536 > cap) {
            char *nb = realloc(res->out, cap = res->len + 65536);
            if (!nb) break;
            res->out = nb;
        }
        ssize_t k = read(p[0], res->out + res->len, cap - res->len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        res->len += (size_t)k;
    }
    close(p[0]);
    if (res->hung) kill(pid, SIGKILL);
    while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR) {}
}

int plait_fork_ok(const plait_fork_result *res) {
    return res->started && !res->hung && WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0;
}
