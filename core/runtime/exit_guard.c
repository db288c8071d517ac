/* The guard against a clean-looking early exit (see exit_guard.h). */
#include "runtime/exit_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime/log.h"

#define DEPTH 4
#define MARK_TEXT 160

typedef struct marks {
    int depth; /* entered and not left; only the first DEPTH have their text */
    char text[DEPTH][MARK_TEXT];
} marks;

static __thread marks t_marks;
static marks *g_arming_marks; /* the arming thread's, for an exit from a thread that entered none */
static pid_t g_armed_pid;     /* 0: disarmed; a forked child sees its parent's pid here */
static int g_registered;
static char g_command[48];
static void (*g_report)(const char *message);

/* The innermost part of `m` with a text, or NULL. */
static const char *innermost(const marks *m) {
    int d = m ? m->depth : 0;
    if (d <= 0) return NULL;
    return m->text[(d < DEPTH ? d : DEPTH) - 1];
}

static void on_process_exit(int status, void *arg) {
    (void)arg;
    if (!g_armed_pid || getpid() != g_armed_pid) return;
    g_armed_pid = 0;
    const char *where = innermost(&t_marks);
    if (!where) where = innermost(g_arming_marks);
    char msg[MARK_TEXT + 400];
    snprintf(msg, sizeof msg,
             "%s: exited with status %d%s%s before the command had finished: something it loaded called exit()%s; "
             "a plugin reports a failure by returning an error (host->set_error)",
             g_command, status, where ? " " : "", where ? where : "",
             status == 0 ? ", counted as a failure (exit status 1)" : "");
    fprintf(stderr, "plait: error: %s\n", msg);
    plait_log_file_only(PLAIT_LOG_ERROR, "plait", "%s", msg);
    if (g_report) g_report(msg);
    if (status != 0) return; /* already a failure: its status stands */
    /* _exit skips the flush of stdio that exit() would make after this */
    fflush(NULL);
    _exit(1);
}

void plait_exit_guard_arm(const char *command, void (*report)(const char *message)) {
    snprintf(g_command, sizeof g_command, "%s", command ? command : "plait");
    g_report = report;
    g_arming_marks = &t_marks;
    if (!g_registered) g_registered = on_exit(on_process_exit, NULL) == 0;
    g_armed_pid = getpid();
}

void plait_exit_guard_disarm(void) { g_armed_pid = 0; }

void plait_exit_guard_enter(const char *fmt, ...) {
    marks *m = &t_marks;
    if (m->depth >= 0 && m->depth < DEPTH) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->text[m->depth], sizeof m->text[m->depth], fmt, ap);
        va_end(ap);
    }
    m->depth++;
}

void plait_exit_guard_leave(void) {
    if (t_marks.depth > 0) t_marks.depth--;
}
