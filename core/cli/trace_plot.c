/*
 * `plait trace plot FILE --out step.png` (trace_plot.h): each rank's step
 * thread as a row of coloured spans, drawn by gnuplot as `plait bench
 * sweep --report` draws its plots (scripts/deps.sh installs gnuplot-nox).
 * The spans go to gnuplot inline (a datablock) through a pipe; the PNG is
 * written to a temporary file beside --out and renamed into place.
 */
#include "cli/trace_plot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/trace_summary.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

/* What a PNG starts with: plait writes --out over nothing else. */
#define PNG_MAGIC "\x89PNG\r\n\x1a\n"

/* The layers drawn, bottom first: the step's extent (what no span below
 * covers is idle), then each part; a span nested in another is drawn
 * over it (a TP all-reduce over its layer's forward). */
static const struct {
    int part; /* PLAIT_TRACE_PART_*, or STEP for the extent */
    const char *title, *colour;
} layers[] = {
    {PLAIT_TRACE_PART_STEP, "idle (bookkeeping, data, gaps)", "#e6e6e6"},
    {PLAIT_TRACE_PART_COMPUTE, "compute (forward, backward, optimizer)", "#4c72b0"},
    {PLAIT_TRACE_PART_DP, "dp communication", "#dd8452"},
    {PLAIT_TRACE_PART_TP, "tp communication", "#55a868"},
    {PLAIT_TRACE_PART_PP, "pp communication", "#c44e52"},
    {PLAIT_TRACE_PART_CP, "cp communication (ring attention)", "#937860"},
    {PLAIT_TRACE_PART_OTHER, "other communication (world)", "#8172b3"},
    {PLAIT_TRACE_PART_WAIT, "bubble (waiting on a pipeline neighbour)", "#f0c808"},
};
enum { N_LAYERS = sizeof layers / sizeof layers[0] };

int plait_trace_plot_available(void) {
    const char *path = getenv("PATH");
    char buf[4096];
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, p);
        if (access(buf, X_OK) == 0) return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/* Each rank's step thread and the start of the first step; the ranks'
 * rows. */
typedef struct plot_frame {
    double t0, t1; /* µs: the earliest step start, the latest step end */
    int max_rank, steps;
    int *main_tid; /* [max_rank + 1], -1: a rank without a step */
} plot_frame;

static plait_status frame_of(const plait_trace_event *ev, size_t n, const char *path, plot_frame *f) {
    *f = (plot_frame){.t0 = 1e300, .t1 = -1e300, .max_rank = -1};
    for (size_t i = 0; i < n; i++)
        if (ev[i].rank > f->max_rank) f->max_rank = ev[i].rank;
    f->main_tid = malloc(sizeof(int) * (size_t)(f->max_rank + 1 > 0 ? f->max_rank + 1 : 1));
    if (!f->main_tid) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory plotting %s", path);
    for (int r = 0; r <= f->max_rank; r++) f->main_tid[r] = -1;
    int first = -1; /* the lowest rank with a step: its steps are counted */
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].cat, "step") != 0 || ev[i].rank < 0) continue;
        f->main_tid[ev[i].rank] = ev[i].tid;
        if (ev[i].ts < f->t0) f->t0 = ev[i].ts;
        if (ev[i].ts + ev[i].dur > f->t1) f->t1 = ev[i].ts + ev[i].dur;
        if (first < 0) first = ev[i].rank;
        f->steps += ev[i].rank == first;
    }
    if (f->t1 < f->t0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s holds no step span: nothing to plot (was it written by a "
                               "run with [run] trace?)",
                               path);
    return PLAIT_OK;
}

/* Layer k's spans as gnuplot boxes "x0 x1 y0 y1" (ms from the first
 * step's start; a row per rank, rank 0 on top). */
static int write_layer(FILE *g, const plait_trace_event *ev, size_t n, const plot_frame *f, int k) {
    int rows = 0;
    fprintf(g, "$layer%d << EOD\n", k);
    for (size_t i = 0; i < n; i++) {
        const plait_trace_event *e = &ev[i];
        if (e->rank < 0 || e->tid != f->main_tid[e->rank]) continue;
        int part = strcmp(e->cat, "step") == 0 ? PLAIT_TRACE_PART_STEP : plait_trace_event_part(e);
        if (part != layers[k].part) continue;
        fprintf(g, "%.4f %.4f %.2f %.2f\n", (e->ts - f->t0) / 1e3, (e->ts + e->dur - f->t0) / 1e3, e->rank - 0.38,
                e->rank + 0.38);
        rows++;
    }
    fputs("EOD\n", g);
    return rows;
}

static void write_script(FILE *g, const plait_trace_event *ev, size_t n, const plot_frame *f, const char *path,
                         const char *png) {
    int ranks = f->max_rank + 1, height = 160 + 34 * (ranks < 64 ? ranks : 64);
    fprintf(g, "set terminal pngcairo size 1200,%d noenhanced font ',10'\nset output '%s'\n", height, png);
    int has[N_LAYERS];
    for (int k = 0; k < N_LAYERS; k++) has[k] = write_layer(g, ev, n, f, k) > 0;
    const char *base = strrchr(path, '/');
    fprintf(g,
            "set title \"%s: %d rank%s, %d traced step%s; each rank's step thread (exposed communication by "
            "axis, as plait trace summary splits it)\"\n"
            "set xlabel 'ms from the first step start'\nset xrange [0:%.4f]\n"
            "set yrange [%.1f:-0.6]\nset ytics 1 scale 0\nset format y 'rank %%g'\n"
            "set grid xtics\nset key outside below horizontal maxrows 2\nset bmargin 7\n"
            "set style fill solid 1.0 noborder\nplot ",
            base ? base + 1 : path, ranks, ranks == 1 ? "" : "s", f->steps, f->steps == 1 ? "" : "s",
            (f->t1 - f->t0) / 1e3, ranks - 0.4);
    const char *sep = "";
    for (int k = 0; k < N_LAYERS; k++) {
        if (!has[k]) continue;
        fprintf(g,
                "%s$layer%d using (($1+$2)/2):(($3+$4)/2):(($2-$1)/2):(($4-$3)/2) with boxxyerror lc rgb '%s' "
                "title '%s'",
                sep, k, layers[k].colour, layers[k].title);
        sep = ", \\\n  ";
    }
    fputs("\n", g);
}

plait_status plait_trace_plot(const char *path, const char *out) {
    if (!plait_trace_plot_available())
        return plait_set_error(PLAIT_ERR_UNSUPPORTED,
                               "plait trace plot draws with gnuplot (as plait bench sweep --report does), and no "
                               "gnuplot is on PATH: install it (scripts/deps.sh installs gnuplot-nox; Debian/Ubuntu: "
                               "apt-get install gnuplot-nox), or open %s in https://ui.perfetto.dev",
                               path);
    if (strchr(out, '\'') || strchr(out, '\n'))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "--out %s: a file name with a quote or a newline", out);
    plait_status st = plait_out_check_own(out, PNG_MAGIC, "--out");
    if (st != PLAIT_OK) return st;
    plait_trace_event *ev = NULL;
    size_t n = 0;
    st = plait_trace_events_read(path, &ev, &n);
    plot_frame f = {.main_tid = NULL};
    if (st == PLAIT_OK) st = frame_of(ev, n, path, &f);
    char tmp[4400];
    int fd = -1;
    if (st == PLAIT_OK) st = plait_out_temp(out, tmp, sizeof tmp, &fd);
    if (st == PLAIT_OK) {
        close(fd);
        FILE *g = popen("gnuplot", "w");
        if (!g) {
            st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot start gnuplot: %s", strerror(errno));
        } else {
            write_script(g, ev, n, &f, path, tmp);
            int rc = pclose(g);
            struct stat sb;
            if (rc != 0 || stat(tmp, &sb) != 0 || sb.st_size == 0)
                st = plait_set_error(PLAIT_ERR_SYSTEM, "gnuplot failed drawing %s (exit %d; its message above)", out,
                                     rc == -1        ? -1
                                     : WIFEXITED(rc) ? WEXITSTATUS(rc)
                                                     : 128 + WTERMSIG(rc));
            else if (rename(tmp, out) != 0)
                st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", out, strerror(errno));
        }
        if (st != PLAIT_OK) unlink(tmp);
    }
    free(f.main_tid);
    free(ev);
    return st;
}
