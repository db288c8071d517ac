/*
 * `plait trace plot FILE --out step.png`: a trace (a run's merged
 * trace.json, or a predicted one) drawn as a timeline: a row per rank, its
 * step thread's spans coloured by the part `plait trace summary` counts
 * them in (compute, dp / tp / pp / other communication, the bubble of
 * pipeline waits, idle where none is), a legend below. Drawn by gnuplot's
 * pngcairo terminal, the plotting path of `plait bench sweep --report`.
 *
 * Thread-safe apart from the child it starts (gnuplot, through popen).
 * Errors: no gnuplot on PATH (PLAIT_ERR_UNSUPPORTED, saying how to install
 * it), the trace's (the summary's), an --out over a file that is not a PNG
 * or through a link (runtime/out_file.h), gnuplot failing (its exit status;
 * nothing is left at --out).
 */
#ifndef PLAIT_CLI_TRACE_PLOT_H
#define PLAIT_CLI_TRACE_PLOT_H

#include <plait/types.h>

/* Whether gnuplot is on PATH. */
int plait_trace_plot_available(void);

/* Draw trace `path` into the PNG `out` (written whole, or not at all). */
plait_status plait_trace_plot(const char *path, const char *out);

#endif
