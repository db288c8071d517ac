#include "runtime/map_guard.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

static _Thread_local plait_map_guard *innermost;
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
    const void *addr = info ? info->si_addr : NULL;
    for (plait_map_guard *g = innermost; g; g = g->outer)
        if (g->covers(g->ctx, addr)) {
            innermost = g->outer;
            siglongjmp(g->jump, 1);
        }
    /* Not ours: hand it to whoever had it before, as if we were not here. */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, info, uctx);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler) {
        previous.sa_handler(sig);
        return;
    }
    /* Default action: restore it; returning re-executes the faulting access. */
    signal(SIGBUS, SIG_DFL);
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &previous);
}

void plait_map_guard_enter(plait_map_guard *g, plait_map_guard_covers covers, const void *ctx) {
    pthread_once(&installed, install);
    g->covers = covers;
    g->ctx = ctx;
    g->outer = innermost;
    innermost = g;
}

void plait_map_guard_leave(plait_map_guard *g) {
    /* After a jump the handler already unlinked g. */
    if (innermost == g) innermost = g->outer;
}
