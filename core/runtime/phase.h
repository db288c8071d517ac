/*
 * A long phase's progress (learning a tokenizer's merges, preparing token
 * shards): on a terminal one line redrawn in place (at most five times a
 * second, log lines printed above it); piped, plain lines: the first once
 * the phase has run PLAIT_PHASE_FIRST_S seconds, then one every
 * PLAIT_PHASE_EVERY_S, so a log shows the phase moving without filling up;
 * and one closing line at the end, in both cases.
 *
 * Not thread-safe: one thread reports a phase. Writes to the stream given,
 * which must stay open until the end.
 */
#ifndef PLAIT_CORE_RUNTIME_PHASE_H
#define PLAIT_CORE_RUNTIME_PHASE_H

#include <stdio.h>

#define PLAIT_PHASE_FIRST_S 2.0
#define PLAIT_PHASE_EVERY_S 10.0

typedef struct plait_phase {
    FILE *out;
    int tty;        /* draw in place */
    int open;       /* an in-place line is showing */
    double start;   /* monotonic seconds */
    double last;    /* of the last line drawn, 0 = none */
} plait_phase;

/* Cut `line` to the width of the terminal `out` is (a line as wide wraps,
 * and a carriage return then redraws only its last row); nothing when
 * `out` is no terminal. */
void plait_phase_fit(FILE *out, char *line);

/* Start a phase reported on `out`; tty: 1 in place, 0 plain lines, -1 in
 * place when `out` is a terminal. */
void plait_phase_begin(plait_phase *p, FILE *out, int tty);
/* Seconds since the phase began. */
double plait_phase_elapsed(const plait_phase *p);
/* Whether a report now would be drawn (so a caller can skip formatting). */
int plait_phase_due(const plait_phase *p);
/* Draw the formatted state if it is due (see above); else nothing. */
void plait_phase_report(plait_phase *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The closing line, always drawn (ending the in-place line). */
void plait_phase_end(plait_phase *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
