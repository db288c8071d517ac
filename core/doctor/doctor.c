/* plait doctor's output: labelled facts, problems, the summary (doctor.h). */
#include "doctor/doctor.h"

#include <stdarg.h>
#include <string.h>

#define LABEL_WIDTH 16

void plait_doctor_line(plait_doctor *d, const char *label, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(d->out, "%-*s %s\n", LABEL_WIDTH, label, text);
}

void plait_doctor_problem(plait_doctor *d, const char *label, const char *fix, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(d->out, "%-*s problem: %s\n", LABEL_WIDTH, label, text);
    if (d->n_problems == PLAIT_DOCTOR_MAX_PROBLEMS) return;
    snprintf(d->problem[d->n_problems], sizeof d->problem[0], "%s: %s", label, text);
    snprintf(d->fix[d->n_problems], sizeof d->fix[0], "%s", fix ? fix : "");
    d->n_problems++;
}

int plait_doctor_summary(plait_doctor *d) {
    fprintf(d->out, "\n");
    if (d->n_problems == 0) {
        fprintf(d->out, "problems: none found\n");
        return 0;
    }
    fprintf(d->out, "problems: %d\n", d->n_problems);
    for (int i = 0; i < d->n_problems; i++) {
        fprintf(d->out, "  %d. %s\n", i + 1, d->problem[i]);
        if (d->fix[i][0]) fprintf(d->out, "     fix: %s\n", d->fix[i]);
    }
    return d->n_problems;
}
