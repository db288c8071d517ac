/* plait trace merge DIR | summary FILE | compare MEASURED PREDICTED (docs/trace.md) */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/trace_compare.h"
#include "cli/trace_plot.h"
#include "cli/trace_summary.h"
#include "runtime/error.h"
#include "runtime/trace_merge.h"

static int usage_error(const char *msg) {
    fprintf(stderr, "plait trace: %s; 'plait help trace' lists the subcommands\n", msg);
    return 2;
}

static int cmd_trace(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc == 4 && strcmp(argv[1], "compare") == 0) {
        if (plait_trace_compare(argv[2], argv[3], 24, stdout) != PLAIT_OK) {
            plait_cli_print_error("trace compare");
            return 1;
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "plot") == 0) {
        if (argc != 5 || strcmp(argv[3], "--out") != 0 || !*argv[4])
            return usage_error("plot takes a trace and the PNG to draw: plot FILE --out step.png");
        if (plait_trace_plot(argv[2], argv[4]) != PLAIT_OK) {
            plait_cli_print_error("trace plot");
            return 1;
        }
        printf("%s: the traced steps of %s, a row per rank\n", argv[4], argv[2]);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "compare") == 0)
        return usage_error("give a subcommand and its arguments: merge DIR, summary FILE, compare MEASURED "
                           "PREDICTED, or plot FILE --out PNG");
    if (strcmp(argv[1], "merge") == 0) {
        int ranks = 0;
        if (plait_trace_merge(argv[2], &ranks) != PLAIT_OK) {
            plait_cli_print_error("trace merge");
            return 1;
        }
        printf("merged %d rank trace%s into %s/trace.json\n", ranks, ranks == 1 ? "" : "s", argv[2]);
        return 0;
    }
    if (strcmp(argv[1], "summary") == 0) {
        if (plait_trace_summary(argv[2], stdout) != PLAIT_OK) {
            plait_cli_print_error("trace summary");
            return 1;
        }
        return 0;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "unknown subcommand '%.60s' (allowed: merge, summary, compare, plot)", argv[1]);
    return usage_error(msg);
}

const plait_command plait_cmd_trace = {
    "trace",
    "merge the ranks' traces of a run; summarise, plot, or compare one with the plan's",
    "plait trace merge DIR\n"
    "    merge DIR/trace/rank-NNNNN.trace (written by a run with [run] trace) into\n"
    "    DIR/trace.json, a Chrome trace-event file that opens in https://ui.perfetto.dev;\n"
    "    a traced run's rank 0 does it itself: this is for a run whose rank 0 stopped\n"
    "plait trace summary FILE\n"
    "    per rank, over the traced steps: compute, exposed communication by axis\n"
    "    (dp, tp, pp, cp, other), waits on pipeline neighbours and idle, in ms; then the\n"
    "    largest exposed transfers (docs/trace.md)\n"
    "plait trace compare MEASURED PREDICTED\n"
    "    a run's trace beside the planner's prediction of its step (`plait plan CONFIG\n"
    "    --ranks N --explain LAYOUT --trace PREDICTED`): per rank and stage, each part of\n"
    "    the summary's split, measured and predicted, largest differences first\n"
    "plait trace plot FILE --out step.png\n"
    "    the traced steps as a timeline: a row per rank, compute and each axis's\n"
    "    communication in their own colours, the bubble, idle, a legend (drawn by\n"
    "    gnuplot, as bench sweep's plots; scripts/deps.sh installs gnuplot-nox)\n",
    cmd_trace,
    NULL,
};
