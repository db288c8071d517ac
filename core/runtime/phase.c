#include "runtime/phase.h"

#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"

void plait_phase_begin(plait_phase *p, FILE *out, int tty) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = tty >= 0 ? tty : isatty(fileno(out));
    p->start = plait_clock_now();
}

double plait_phase_elapsed(const plait_phase *p) { return plait_clock_now() - p->start; }

int plait_phase_due(const plait_phase *p) {
    double now = plait_clock_now();
    if (p->tty) return now - p->last >= 0.2;
    return p->last > 0 ? now - p->last >= PLAIT_PHASE_EVERY_S : now - p->start >= PLAIT_PHASE_FIRST_S;
}

void plait_phase_fit(FILE *out, char *line) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && strlen(line) >= ws.ws_col)
        line[ws.ws_col - 1] = '\0';
}

static void draw(plait_phase *p, const char *fmt, va_list ap, int closing) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    if (p->tty) {
        plait_phase_fit(p->out, line);
        fprintf(p->out, "\r\033[K%s%s", line, closing ? "\n" : "");
        fflush(p->out);
        p->open = !closing;
        plait_log_set_status_line(fileno(p->out), p->open ? line : NULL);
    } else {
        fprintf(p->out, "%s\n", line);
        fflush(p->out);
    }
    p->last = plait_clock_now();
}

void plait_phase_report(plait_phase *p, const char *fmt, ...) {
    if (!plait_phase_due(p)) return;
    va_list ap;
    va_start(ap, fmt);
    draw(p, fmt, ap, 0);
    va_end(ap);
}

void plait_phase_end(plait_phase *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    draw(p, fmt, ap, 1);
    va_end(ap);
}
