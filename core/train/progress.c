#include "train/progress.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/log.h"
#include "runtime/phase.h"
#include "train/mfu_peak.h"

void plait_progress_init(plait_progress *p, const char *mode, FILE *out, int64_t total_steps,
                         double flops_per_token, double peak_flops) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->total_steps = total_steps;
    p->flops_per_token = flops_per_token;
    p->peak_flops = peak_flops;
    if (strcmp(mode, "off") == 0)
        p->mode = PLAIT_PROGRESS_OFF;
    else if (strcmp(mode, "plain") == 0)
        p->mode = PLAIT_PROGRESS_PLAIN;
    else if (strcmp(mode, "tty") == 0)
        p->mode = PLAIT_PROGRESS_TTY;
    else
        p->mode = isatty(fileno(out)) ? PLAIT_PROGRESS_TTY : PLAIT_PROGRESS_PLAIN;
}

static void fmt_eta(double s, char *buf, size_t len) {
    if (s < 0 || s > 1e7) {
        snprintf(buf, len, "--");
        return;
    }
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%dh%02dm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, len, "%dm%02ds", t / 60, t % 60);
}

void plait_progress_step(plait_progress *p, int64_t step, double loss, double val_loss, double lr,
                         double tokens_per_s, double eta) {
    if (p->mode == PLAIT_PROGRESS_OFF) return;
    char line[320], eta_text[32], val[32] = "", mfu[80] = "";
    fmt_eta(eta, eta_text, sizeof eta_text);
    if (val_loss >= 0) snprintf(val, sizeof val, " val %.4f", val_loss);
    if (p->peak_flops > 0 && p->flops_per_token > 0) {
        char text[48];
        plait_mfu_text(tokens_per_s * p->flops_per_token, p->peak_flops, text, sizeof text);
        snprintf(mfu, sizeof mfu, " | MFU %s", text);
    }
    snprintf(line, sizeof line, "step %5lld/%lld | loss %.4f%s | lr %.2e | %8.0f tok/s%s | ETA %s",
             (long long)step, (long long)p->total_steps, loss, val, lr, tokens_per_s, mfu, eta_text);
    if (p->mode == PLAIT_PROGRESS_TTY) {
        plait_phase_fit(p->out, line);
        fprintf(p->out, "\r\033[K%s", line);
        p->line_open = 1;
        if (val_loss >= 0) { /* keep evaluation results visible */
            fputc('\n', p->out);
            p->line_open = 0;
        }
        fflush(p->out);
        /* log lines (a checkpoint saved) go above it, not after it */
        plait_log_set_status_line(fileno(p->out), p->line_open ? line : NULL);
    } else {
        /* piped output: one line a second at most, plus evaluations and the end */
        double t = plait_clock_now();
        if (t - p->last_print < 1.0 && val_loss < 0 && step != p->total_steps && p->last_print > 0) return;
        fprintf(p->out, "%s\n", line);
        p->last_print = t;
    }
    fflush(p->out);
}

void plait_progress_step_begin(plait_progress *p, int64_t step) {
    if (p->mode == PLAIT_PROGRESS_OFF) return;
    plait_phase_begin(&p->within, p->out, p->mode == PLAIT_PROGRESS_TTY);
    p->step_running = step;
    p->evaluating = 0;
}

void plait_progress_eval_begin(plait_progress *p, int64_t step) {
    plait_progress_step_begin(p, step);
    p->evaluating = 1;
}

void plait_progress_layer(plait_progress *p, int backward, int32_t layer, int32_t n_layers, int32_t mb,
                          int32_t n_mb) {
    if (p->mode == PLAIT_PROGRESS_OFF || !p->step_running) return;
    double t = plait_phase_elapsed(&p->within);
    if (t < PLAIT_PROGRESS_WITHIN_S || !plait_phase_due(&p->within)) return;
    plait_phase_report(&p->within, "%s %5lld/%lld | %s, layer %d/%d, micro-batch %d/%d | %.0f s into the %s",
                       p->evaluating ? "evaluation after step" : "step", (long long)p->step_running,
                       (long long)p->total_steps, backward ? "backward" : "forward", layer + 1, n_layers, mb + 1,
                       n_mb, t, p->evaluating ? "evaluation" : "step");
    if (p->mode == PLAIT_PROGRESS_TTY) p->line_open = 1;
}

/* End the in-place line: what follows starts on a line of its own. */
static void close_line(plait_progress *p) {
    if (p->line_open) fputc('\n', p->out);
    if (p->line_open) plait_log_set_status_line(-1, NULL);
    p->line_open = 0;
}

void plait_progress_note(plait_progress *p, const char *fmt, ...) {
    if (p->mode == PLAIT_PROGRESS_OFF) return;
    close_line(p);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

void plait_progress_finish(plait_progress *p) {
    close_line(p);
    if (p->out) fflush(p->out);
}
