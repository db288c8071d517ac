/*
 * The progress display on rank 0: one line that updates in place on a
 * terminal (carriage return + clear to end of line) and plain lines when
 * output is piped. Shows step, loss, lr, tokens/s, ETA and an MFU estimate.
 *
 * Not thread-safe: rank 0's run thread prints progress.
 */
#ifndef PLAIT_CORE_PROGRESS_H
#define PLAIT_CORE_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/phase.h"

typedef enum { PLAIT_PROGRESS_OFF, PLAIT_PROGRESS_PLAIN, PLAIT_PROGRESS_TTY } plait_progress_mode;

typedef struct plait_progress {
    plait_progress_mode mode;
    FILE *out;
    int64_t total_steps;
    double peak_flops;     /* FLOP/s the MFU is measured against (0 = unknown) */
    double flops_per_token;
    int line_open;         /* a TTY line is showing */
    double last_print;     /* monotonic seconds of the last plain line */
    plait_phase within;    /* the step running (plait_progress_layer) */
    int64_t step_running;  /* its number, 1-based */
    int evaluating;        /* the evaluation after that step, not the step */
} plait_progress;

/* A step longer than this shows where it is (plait_progress_layer). */
#define PLAIT_PROGRESS_WITHIN_S 5.0

/* mode_name: "auto", "tty", "plain" or "off" ([run] progress). */
void plait_progress_init(plait_progress *p, const char *mode_name, FILE *out, int64_t total_steps,
                         double flops_per_token, double peak_flops);
/* Report a finished step. step_seconds excludes evaluation. val_loss < 0 = none. */
void plait_progress_step(plait_progress *p, int64_t step, double loss, double val_loss, double lr,
                         double tokens_per_s, double eta_seconds);
/* Within a step: begin before it runs; layer() before each layer's forward
 * or backward (the step executor's hook). Once the step has run
 * PLAIT_PROGRESS_WITHIN_S seconds, it shows which pass, layer and
 * micro-batch it is at: in place on a terminal, a plain line every
 * PLAIT_PHASE_EVERY_S seconds when piped (the first step of a large model
 * on a CPU takes minutes). */
void plait_progress_step_begin(plait_progress *p, int64_t step);
/* The same for the evaluation after `step`. */
void plait_progress_eval_begin(plait_progress *p, int64_t step);
void plait_progress_layer(plait_progress *p, int backward, int32_t layer, int32_t n_layers, int32_t mb,
                          int32_t n_mb);
/* Print a message without breaking the in-place line. */
void plait_progress_note(plait_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void plait_progress_finish(plait_progress *p);

#endif
