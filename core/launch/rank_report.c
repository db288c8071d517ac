/* The rank's side of its report pipe to plait's launcher (rank_report.h). */
#include "launch/rank_report.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t g_report_once = PTHREAD_ONCE_INIT;
static int g_report_fd = -1;

static void report_init(void) {
    const char *v = getenv("PLAIT_REPORT_FD");
    if (!v) return;
    char *end = NULL;
    long fd = strtol(v, &end, 10);
    if (end && !*end && fd > 2 && fd < (1 << 20) && fcntl((int)fd, F_GETFD) >= 0) g_report_fd = (int)fd;
}

/* One line to the launcher, in one write below PIPE_BUF (never
 * interleaved). A launcher that is gone has closed the pipe: the EPIPE is
 * ignored and the SIGPIPE it raises in this thread taken back, so that
 * reporting never ends the process. */
static void report_line(const char *line, size_t n) {
    int saved = errno;
    sigset_t pipe_sig, old;
    sigemptyset(&pipe_sig);
    sigaddset(&pipe_sig, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_sig, &old);
    ssize_t w = write(g_report_fd, line, n);
    if (w < 0 && errno == EPIPE && !sigismember(&old, SIGPIPE)) {
        const struct timespec now = {0, 0};
        while (sigtimedwait(&pipe_sig, NULL, &now) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
}

void plait_launch_report_error(const char *message) {
    pthread_once(&g_report_once, report_init);
    if (g_report_fd < 0 || !message) return;
    char line[PLAIT_REPORT_LINE];
    size_t n = 0;
    for (const char *p = message; *p && n + 4 < sizeof line; p++) {
        if (*p == '\n') {
            if (p[1] == '\0') break;
            line[n++] = ' ';
            line[n++] = '|';
            line[n++] = ' ';
        } else {
            line[n++] = *p == PLAIT_REPORT_FINISHED_MARK[0] ? '?' : *p; /* never read as the mark */
        }
    }
    line[n++] = '\n';
    report_line(line, n);
}

void plait_launch_report_finished(void) {
    pthread_once(&g_report_once, report_init);
    if (g_report_fd < 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, PLAIT_REPORT_FINISHED_MARK "%ld\n", (long)getpid());
    if (n > 0 && (size_t)n < sizeof line) report_line(line, (size_t)n);
}

void plait_launch_report_handles(int sig) {
    pthread_once(&g_report_once, report_init);
    if (g_report_fd < 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, PLAIT_REPORT_HANDLES_MARK "%d %ld\n", sig, (long)getpid());
    if (n > 0 && (size_t)n < sizeof line) report_line(line, (size_t)n);
}
