/* A signal that asks for a stop at the next safe point (stop_signal.h). */
#include "runtime/stop_signal.h"

#include <signal.h>
#include <string.h>

static const struct {
    const char *name;
    int sig;
} known[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
#define N_KNOWN (sizeof known / sizeof known[0])

static volatile sig_atomic_t g_seen;
static int g_caught; /* the signal caught, 0 for none */
static struct sigaction g_previous;

static void on_stop_signal(int sig) { g_seen = sig; }

int plait_stop_signal_number(const char *name) {
    for (size_t i = 0; name && i < N_KNOWN; i++)
        if (strcmp(name, known[i].name) == 0) return known[i].sig;
    return 0;
}

const char *plait_stop_signal_name(int sig) {
    for (size_t i = 0; i < N_KNOWN; i++)
        if (known[i].sig == sig) return known[i].name;
    return "none";
}

int plait_stop_signal_catch(int sig) {
    plait_stop_signal_release();
    g_seen = 0;
    if (sig == 0) return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a read or write it interrupts goes on */
    if (sigaction(sig, &sa, &g_previous) != 0) return -1;
    g_caught = sig;
    return 0;
}

int plait_stop_signal_seen(void) { return g_seen; }

void plait_stop_signal_release(void) {
    if (!g_caught) return;
    sigaction(g_caught, &g_previous, NULL);
    g_caught = 0;
}
