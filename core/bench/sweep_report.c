/* `plait bench sweep --report DIR`: gnuplot PNGs and a markdown report. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench/bench_sweep.h"
#include "checkpoint/checkpoint.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

static plait_status write_data(const char *path, const plait_sweep_row *rows, size_t n, double *max_ms,
                               double *max_mib, size_t *max_name) {
    FILE *f;
    plait_status opened = plait_out_fopen(path, "w", &f); /* never through a link */
    if (opened != PLAIT_OK) return opened;
    fprintf(f, "# idx layout tokens_s pred_tokens_s compute_ms comm_ms idle_ms peak_mib pred_mib meas_ms pred_ms\n");
    *max_ms = *max_mib = 0;
    *max_name = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        plait_sweep_view v;
        if (!plait_sweep_row_view(r, &v)) continue;
        fprintf(f, "%zu \"%s\" %.1f %.1f %.3f %.3f %.3f %.1f %.1f %.3f %.3f\n", k++, v.name, r->tokens_per_s,
                r->predicted.tokens_per_s, r->compute_ms, r->comm_ms, r->idle_ms, r->peak_mib, v.pred_mib, r->ms_per_step,
                v.pred_ms);
        if (r->ms_per_step > *max_ms) *max_ms = r->ms_per_step;
        if (v.pred_ms > *max_ms) *max_ms = v.pred_ms;
        if (r->peak_mib > *max_mib) *max_mib = r->peak_mib;
        if (v.pred_mib > *max_mib) *max_mib = v.pred_mib;
        if (strlen(v.name) > *max_name) *max_name = strlen(v.name);
    }
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot write: %s", path, strerror(errno));
    return PLAIT_OK;
}

/* The layout names are x tic labels rotated by 35 degrees, each starting at
 * its bar and running down to the right: the bottom margin (in lines) holds
 * their drop, the right margin (in characters) the last one's run and the
 * key, so no name is cut off (measured at this font: a character drops 0.31
 * lines and runs 0.75 characters to the right). */
static void label_margins(size_t longest, int *bottom, int *right) {
    *bottom = 2 + (int)(0.31 * (double)longest + 0.99);
    *right = 2 + (int)(0.75 * (double)longest + 0.99);
    if (*right < 26) *right = 26; /* the key's widest entry */
}

static plait_status write_script(const char *path, double limit_mib, double max_ms, double max_mib,
                                 size_t longest_name) {
    int bottom, right;
    label_margins(longest_name, &bottom, &right);
    /* a limit far above every bar would flatten them: then it is named, not drawn */
    char memory_plot[512];
    if (limit_mib > 0 && limit_mib < 3 * max_mib)
        snprintf(memory_plot, sizeof memory_plot,
                 "set title 'peak memory per rank (the largest rank) against the limit'\n"
                 "plot 'sweep.dat' using 8:xtic(2) title 'measured peak RSS', '' using 9 title 'predicted', %.1f with "
                 "lines lw 2 title 'limit %.0f MiB'",
                 limit_mib, limit_mib);
    else
        snprintf(memory_plot, sizeof memory_plot,
                 "set title 'peak memory per rank (the largest rank); the limit, %.0f MiB, is off the scale'\n"
                 "plot 'sweep.dat' using 8:xtic(2) title 'measured peak RSS', '' using 9 title 'predicted'",
                 limit_mib);
    FILE *f;
    plait_status opened = plait_out_fopen(path, "w", &f); /* never through a link */
    if (opened != PLAIT_OK) return opened;
    fprintf(f,
            "set terminal pngcairo size 1100,650 noenhanced font ',10'\n"
            "set datafile separator whitespace\n"
            /* beside the plot, where no bar can hide an entry */
            "set key outside right top vertical\n"
            "set grid ytics\n"
            "set xtics rotate by -35 left\n"
            "set bmargin %d\n"
            "set rmargin %d\n"
            "set style fill solid 0.8 border -1\n"
            "set yrange [0:*]\n"
            "set output 'tokens.png'\n"
            "set title 'tokens/s per layout, best first (measured; predicted beside)'\n"
            "set ylabel 'tokens/s'\n"
            "set style data histograms\n"
            "set style histogram clustered gap 1\n"
            "plot 'sweep.dat' using 3:xtic(2) title 'measured', '' using 4 title 'predicted (plait plan)'\n"
            "set output 'split.png'\n"
            "set title 'step time split per layout: the median step of the slowest rank, its parts adding up to it'\n"
            "set ylabel 'ms per step'\n"
            "set style histogram rowstacked\n"
            "plot 'sweep.dat' using 5:xtic(2) title 'compute', '' using 6 title 'communication', '' using 7 title "
            "'idle', '' using 0:10 with points pt 7 ps 1.3 lc rgb 'black' title 'measured ms/step'\n"
            "set output 'memory.png'\n"
            "set ylabel 'MiB'\n"
            "set style histogram clustered gap 1\n"
            "%s\n"
            "set output 'predicted.png'\n"
            "set title 'predicted against measured step time'\n"
            "unset style\n"
            "set xtics norotate\n"
            "set bmargin\n"
            "set rmargin\n"
            "set xlabel 'measured ms per step'\n"
            "set ylabel 'predicted ms per step'\n"
            "set xrange [0:%.1f]\n"
            "set yrange [0:%.1f]\n"
            "set size square\n"
            "plot 'sweep.dat' using 10:11 with points pt 7 ps 1.5 title 'layouts', x with lines title 'y = x'\n",
            bottom, right, memory_plot, 1.1 * max_ms, 1.1 * max_ms);
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot write: %s", path, strerror(errno));
    return PLAIT_OK;
}

/* `path`, from the folder of the report `report` when it lies in it. */
static const char *from_report(const char *report, const char *path) {
    const char *slash = strrchr(report, '/');
    size_t n = slash ? (size_t)(slash - report) + 1 : 0;
    return n && strncmp(path, report, n) == 0 ? path + n : path;
}

/* Each traced layout's trace (bench sweep with [run] trace), and its
 * picture where `plait trace plot` drew one beside it. */
static void write_traces(FILE *f, const char *report, const plait_sweep_row *rows, size_t n) {
    int any = 0;
    for (size_t i = 0; i < n; i++) any |= rows[i].state == 1 && rows[i].trace[0];
    if (!any) return;
    fprintf(f, "\n## Traces\n\nEach layout's traced steps ([run] trace; docs/trace.md): open a trace.json in "
               "https://ui.perfetto.dev, or `plait trace summary` it.\n\n");
    for (size_t i = 0, k = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        plait_sweep_view v;
        if (!plait_sweep_row_view(r, &v)) continue;
        k++;
        if (!r->trace[0]) continue;
        const char *rel = from_report(report, r->trace);
        fprintf(f, "- %zu, %s: [%s](%s)\n", k, v.name, rel, rel);
        char png[1200];
        struct stat sb;
        snprintf(png, sizeof png, "%.*s/step.png", (int)(strlen(r->trace) - strlen("/trace.json")), r->trace);
        if (stat(png, &sb) == 0) fprintf(f, "\n  ![%s, one row per rank](%s)\n", v.name, from_report(report, png));
    }
}

static plait_status write_markdown(const char *path, const plait_sweep_row *rows, size_t n, const char *header) {
    FILE *f;
    plait_status opened = plait_out_fopen(path, "w", &f); /* never through a link */
    if (opened != PLAIT_OK) return opened;
    fprintf(f, "# plait bench sweep\n\n%s\n", header);
    fprintf(f, "| rank | layout | tokens/s | spread | MFU | ms/step | compute | comm | idle | peak MiB | predicted "
               "ms/step | error | predicted MiB | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        plait_sweep_view v;
        if (!plait_sweep_row_view(r, &v)) continue;
        char spread[48] = "1 run";
        if (r->n_runs > 1)
            snprintf(spread, sizeof spread, "%.0f-%.0f (%d runs)", r->tokens_min, r->tokens_max, r->n_runs);
        fprintf(f, "| %zu | %s | %.0f | %s | %.1f%% | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %+.1f%% | %.1f | %+.1f%% |\n",
                ++k, v.name, r->tokens_per_s, spread, 100 * r->mfu, r->ms_per_step, r->compute_ms, r->comm_ms, r->idle_ms,
                r->peak_mib, v.pred_ms, 100 * v.step_err, v.pred_mib, 100 * v.mem_err);
    }
    fprintf(f, "\n");
    for (size_t i = 0; i < n; i++) {
        char name[128];
        plait_cost_layout_name(&rows[i].predicted.layout, name, sizeof name);
        if (!rows[i].predicted.valid || !rows[i].predicted.fits) fprintf(f, "- skipped: %s: %s\n", name, rows[i].predicted.why);
        else if (rows[i].state != 1) fprintf(f, "- not measured: %s: %s\n", name, rows[i].note);
    }
    write_traces(f, path, rows, n);
    fprintf(f, "\n![tokens/s per layout](tokens.png)\n\n![step split](split.png)\n\n"
               "![peak memory per rank](memory.png)\n\n![predicted against measured step time](predicted.png)\n");
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot write: %s", path, strerror(errno));
    return PLAIT_OK;
}

plait_status plait_sweep_report_check(const char *dir) {
    const char *role = plait_ckpt_dir_role(dir);
    if (role)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "--report %s is a %s: choose another directory", dir, role);
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", dir);
    return plait_out_check_own(path, "# plait bench sweep\n", "--report");
}

plait_status plait_sweep_report(const char *dir, const plait_sweep_opts *o, const plait_sweep_row *rows, size_t n,
                                const char *header) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot create the report directory: %s", dir, strerror(errno));
    char path[1024];
    plait_status own = plait_sweep_report_check(dir);
    if (own != PLAIT_OK) return own;
    double max_ms = 0, max_mib = 0;
    size_t longest = 0;
    snprintf(path, sizeof path, "%s/sweep.dat", dir);
    plait_status st = write_data(path, rows, n, &max_ms, &max_mib, &longest);
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    if (st == PLAIT_OK)
        st = write_script(path, o->mem_limit / 1048576.0, max_ms > 0 ? max_ms : 1, max_mib, longest);
    snprintf(path, sizeof path, "%s/report.md", dir);
    if (st == PLAIT_OK) st = write_markdown(path, rows, n, header);
    if (st != PLAIT_OK) return st;
    /* gnuplot reads sweep.dat and writes the PNGs relative to DIR */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp", dir);
    if (strchr(dir, '\''))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "--report %s: a directory name with a quote", dir);
    int rc = system(cmd);
    if (rc != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM,
                               "%s/plots.gp: gnuplot failed (exit %d); is it installed? scripts/deps.sh installs "
                               "gnuplot-nox",
                               dir, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return PLAIT_OK;
}
