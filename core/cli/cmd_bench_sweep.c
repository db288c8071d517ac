/* plait bench sweep CONFIG -n N [axes options] [--steps S] [--max-minutes M] [--csv FILE] [--report DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/bench_sweep.h"
#include "cli/cli.h"
#include "cli/layout_args.h"
#include "cli/trace_plot.h"
#include "config/config.h"
#include "cost/table.h"
#include "runtime/error.h"
#include "runtime/scratch_dir.h"

int plait_cli_bench_sweep(int argc, char **argv);

static void load_average(char *buf, size_t len) {
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, len, "%.2f, %.2f, %.2f", a, b, c);
    else snprintf(buf, len, "unknown");
    if (f) fclose(f);
}

/* Each traced layout's step drawn beside its trace (step.png), for the
 * report; without gnuplot the report links the traces alone. */
static void plot_traces(const plait_sweep_row *rows, size_t n) {
    if (!plait_trace_plot_available()) return;
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].trace[0]) continue;
        char png[1200];
        snprintf(png, sizeof png, "%.*s/step.png", (int)(strlen(rows[i].trace) - strlen("/trace.json")), rows[i].trace);
        if (plait_trace_plot(rows[i].trace, png) != PLAIT_OK)
            fprintf(stderr, "plait: warning: bench sweep: %s\n", plait_last_error());
    }
}

int plait_cli_bench_sweep(int argc, char **argv) {
    plait_cli_layout_args a;
    plait_cluster cluster;
    plait_cost_search srch;
    int rc = plait_cli_layout_search(argc, argv, 1, "bench sweep", &a, &cluster, &srch);
    if (rc != 0) {
        plait_cli_layout_args_free(&a);
        return rc;
    }
    plait_cost_result *res = srch.results;
    size_t n = srch.n, usable = 0;
    for (size_t i = 0; i < n; i++) usable += res[i].valid && res[i].fits;
    char load_start[64];
    load_average(load_start, sizeof load_start);
    plait_sweep_row *rows = calloc(n + 1, sizeof *rows);
    /* Results go where the user says (--csv, or --report's directory); with
     * neither, the table on stdout is the result and the CSV and the
     * layouts' output live in a scratch directory, removed at the end
     * unless a layout failed (then its log explains why). */
    char csv[4200], logs[4300], scratch[4096] = "";
    plait_status st = rows ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK && a.report) st = plait_sweep_report_check(a.report);
    if (a.csv) snprintf(csv, sizeof csv, "%s", a.csv);
    else if (a.report) snprintf(csv, sizeof csv, "%s/sweep.csv", a.report);
    else if (st == PLAIT_OK && (st = plait_scratch_dir_make("plait-sweep", scratch, sizeof scratch)) == PLAIT_OK)
        snprintf(csv, sizeof csv, "%s/sweep.csv", scratch);
    snprintf(logs, sizeof logs, "%s.logs", csv);
    plait_sweep_opts o = {.config = a.config,
                          .overrides = a.over,
                          .n_overrides = a.n_over,
                          .global_batch = a.axes.global_batch,
                          .steps = a.steps,
                          .warmup = a.warmup,
                          .repeat = a.repeat,
                          .max_minutes = a.max_minutes,
                          .csv = csv,
                          .csv_is_scratch = scratch[0] != 0,
                          .log_dir = logs,
                          .mem_limit = a.mem_limit > 0 ? a.mem_limit : plait_cost_mem_limit(&cluster, a.ranks),
                          .trace = a.base && *plait_config_str(a.base, "run", "trace")};
    for (size_t i = 0; rows && i < n; i++) rows[i].predicted = res[i];
    if (st == PLAIT_OK && !usable) {
        plait_cost_print_table(stdout, res, n);
        plait_cost_print_families(stdout, srch.families, srch.n_families);
        if (srch.candidates == 0) plait_cli_layout_say_no_space(&a, "bench sweep");
        fprintf(stderr, "plait: error: bench sweep: none of the %zu layouts of %d ranks is valid and fits (reasons "
                        "above); nothing to measure\n",
                srch.candidates, a.ranks);
        rc = 1;
    } else if (st == PLAIT_OK) {
        if (a.report && mkdir(a.report, 0755) != 0 && errno != EEXIST)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "--report %s: cannot create: %s", a.report, strerror(errno));
        if (st == PLAIT_OK) st = plait_sweep_run(&o, rows, n, stderr);
    }
    if (st == PLAIT_OK && rc == 0) {
        plait_sweep_rank(rows, n);
        char load[64], when[64];
        load_average(load, sizeof load);
        time_t t = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
        char header[1024], memory_for[800];
        plait_cli_device_line(&a.device, memory_for, sizeof memory_for);
        snprintf(header, sizeof header,
                 "%s, %d ranks, %s; %d run%s of %d timed steps after %d warm-up per layout; SGEMM peak %.1f "
                 "GFLOP/s; load average %s at the start, %s at the end (%s)\n",
                 a.config, a.ranks, cluster.name, a.repeat, a.repeat == 1 ? "" : "s", a.steps, a.warmup,
                 cluster.peak_flops / 1e9, load_start, load, when);
        printf("# plait bench sweep %s# predicted %s\n", header, memory_for);
        plait_sweep_print(stdout, rows, n);
        plait_cost_print_families(stdout, srch.families, srch.n_families);
        if (a.report) {
            if (o.trace) plot_traces(rows, n);
            char text[2048];
            snprintf(text, sizeof text, "%s\nPredicted %s.\n", header, memory_for);
            st = plait_sweep_report(a.report, &o, rows, n, text);
            if (st == PLAIT_OK) printf("# report: %s/report.md (tokens.png, split.png, memory.png, predicted.png)\n", a.report);
        }
        int measured = 0, failed = 0;
        for (size_t i = 0; i < n; i++) {
            measured += rows[i].state == 1;
            failed += rows[i].state == 2;
        }
        if (failed || !measured) rc = 1;
        if (scratch[0] && failed)
            fprintf(stderr, "sweep: the failed layouts' output is kept in %s\n", logs);
    }
    if (scratch[0] && rc == 0 && st == PLAIT_OK && plait_scratch_dir_remove(scratch) != PLAIT_OK)
        fprintf(stderr, "plait: warning: bench sweep: %s\n", plait_last_error());
    if (st != PLAIT_OK) {
        plait_cli_print_error("bench sweep");
        rc = 1;
    }
    plait_cost_search_free(&srch);
    free(rows);
    plait_cli_layout_args_free(&a);
    return rc;
}
