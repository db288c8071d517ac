/* plait plan CONFIG --ranks N [--cluster CLUSTER.ini] [axes options] [section.key=value ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/layout_args.h"
#include "cost/table.h"

static int cmd_plan(int argc, char **argv) {
    plait_cli_layout_args a;
    plait_cluster cluster;
    plait_cost_result *res = NULL;
    size_t n = 0, usable = 0;
    int rc = plait_cli_layout_predict(argc, argv, 0, "plan", &a, &cluster, &res, &n, &usable);
    if (rc == 0) {
        plait_cost_sort_results(res, n);
        plait_cost_print_header(stdout, a.config, a.ranks, &cluster, a.mem_limit);
        plait_cost_print_table(stdout, res, n);
        plait_cost_print_skipped(stdout, res, n);
        if (!usable) {
            fprintf(stderr, "plait: error: plan: no layout of %d ranks is valid and fits (reasons above)\n", a.ranks);
            rc = 1;
        }
    }
    free(res);
    plait_cli_layout_args_free(&a);
    return rc;
}

const plait_command plait_cmd_plan = {
    "plan", "predict step time and memory per rank of every layout of N ranks",
    "usage: plait plan CONFIG --ranks N [--cluster CLUSTER.ini] [--comm-csv FILE] [--axes LIST]\n"
    "                  [--AXIS VALUES ...] [--mem-limit MiB] [section.key=value ...]\n"
    "\n"
    "Enumerates every layout of N ranks along the chosen axes (default dp,tp,pp,schedule; all:\n"
    "dp,tp,pp,schedule,chunks,optim,micro_batch,bucket_mb,comm), checks each as 'plait train' would\n"
    "before starting (n_head divisible by tp, no empty pipeline stage, batch arithmetic, ...), and\n"
    "predicts each valid one's step time and memory per rank from a cost model (docs/plan.md):\n"
    "compute from the measured SGEMM rate (or the cluster's peak), alpha-beta communication per\n"
    "link class, the schedule's bubble, DP overlapped with the backward pass; memory by the ZeRO\n"
    "formulas, activations by schedule and micro-batch, working buffers. Layouts are ranked by\n"
    "predicted tokens/s; those over the memory limit are marked; invalid ones are listed with why.\n"
    "\n"
    "  --ranks N          world size (also -n N)\n"
    "  --cluster FILE     the cluster (configs/clusters/*.ini); default: this machine\n"
    "  --comm-csv FILE    calibrate the intra-node link (latency, bandwidth) from a\n"
    "                     'plait bench comm -n N --op allreduce --csv FILE' table\n"
    "  --axes LIST        axes to vary; the others keep the config's setting\n"
    "  --dp/--tp/--pp/--schedule/--chunks/--optim/--micro_batch/--bucket_mb/--comm VALUES\n"
    "                     the values an axis takes (comma-separated; makes it vary)\n"
    "  --mem-limit MiB    memory per rank (default: the cluster's)\n"
    "\n"
    "Exit status: 0 when at least one layout is valid and fits, 1 otherwise, 2 for usage errors.\n",
    cmd_plan};
