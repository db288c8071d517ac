/* plait plan CONFIG --ranks N [--cluster CLUSTER.ini] [axes options] [section.key=value ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/layout_args.h"
#include "cost/ckpt_cost.h"
#include "cost/predicted_trace.h"
#include "cost/table.h"
#include "runtime/error.h"
#include "runtime/log.h"

/* What a checkpoint of layout `l` costs (its own function: the search
 * never weighs it). */
static void print_checkpoint(plait_cli_layout_args *a, const plait_cost_layout *l, const plait_cluster *cluster) {
    plait_cost_ckpt k;
    if (plait_cost_ckpt_of_config(a->base, l, a->axes.global_batch, cluster, &k) != PLAIT_OK) {
        plait_cli_print_error("plan: checkpoint");
        return;
    }
    printf("\n");
    if (!a->explain) printf("the best layout's ");
    plait_cost_ckpt_print(stdout, &k, a->base, cluster);
}

/* How long the run's tokens (--tokens, else the config's [run] steps x
 * global batch x block size) take at `tokens_per_s` on the layout's ranks:
 * Narayanan et al.'s end-to-end estimate, from the planner's step. */
static void print_training_time(const plait_cli_layout_args *a, double tokens_per_s, const char *whose) {
    if (!(tokens_per_s > 0)) return;
    double tokens = a->train_tokens;
    char from[160];
    if (tokens > 0) {
        snprintf(from, sizeof from, "--tokens");
    } else {
        const int64_t steps = plait_config_int(a->base, "run", "steps"),
                      T = plait_config_int(a->base, "model", "block_size");
        tokens = (double)steps * (double)a->axes.global_batch * (double)T;
        snprintf(from, sizeof from, "[run] steps = %lld of %lld sequences of %lld tokens", (long long)steps,
                 (long long)a->axes.global_batch, (long long)T);
    }
    const double s = tokens / tokens_per_s;
    printf("\ntraining %.4g tokens (%s) at %s %.0f tokens/s: %.3g s = %.3g days on %d ranks (%.4g rank-days)\n", tokens,
           from, whose, tokens_per_s, s, s / 86400, a->ranks, s / 86400 * a->ranks);
}

/* --explain LAYOUT: one layout through its plugin's plan, broken down. */
static int explain(plait_cli_layout_args *a, const plait_cluster *cluster) {
    plait_cost_layout l;
    if (plait_cost_layout_parse(a->explain, &a->axes.base, &l) != PLAIT_OK) {
        fprintf(stderr, "plait plan: --explain: %s\n", plait_last_error());
        return 2;
    }
    /* in 64 bits: each size a name gives can be up to 1e8 */
    int64_t ranks = (int64_t)l.dp * plait_cost_layout_cp(&l) * l.tp * l.pp;
    if (ranks != a->ranks) {
        fprintf(stderr, "plait plan: --explain '%s': dp %d x cp %d x tp %d x pp %d is %lld ranks, not --ranks %d\n",
                a->explain, l.dp, plait_cost_layout_cp(&l), l.tp, l.pp, (long long)ranks, a->ranks);
        return 2;
    }
    if (l.micro_batch == 0) l.micro_batch = l.pp > 1 ? 1 : (a->axes.global_batch / l.dp > 0 ? a->axes.global_batch / l.dp : 1);
    plait_cost_ctx x;
    plait_cli_layout_ctx(a, cluster, &x);
    plait_cost_result r;
    plait_cost_rank *stages = calloc((size_t)l.pp, sizeof *stages);
    if (!stages || plait_cost_evaluate_stages(&l, &x, &r, stages, l.pp) != PLAIT_OK) {
        plait_cli_print_error("plan --explain");
        free(stages);
        return 1;
    }
    int rc = 0;
    if (!r.valid) {
        char name[128];
        plait_cost_layout_name(&l, name, sizeof name);
        fprintf(stderr, "plait: error: plan --explain: %s is not a valid layout: %s\n", name, r.why);
        rc = 1;
    } else {
        char line[800];
        plait_cli_device_line(&a->device, line, sizeof line);
        plait_cost_print_explain(stdout, &r, stages, &x, line);
        print_training_time(a, r.tokens_per_s, "its");
        print_checkpoint(a, &l, cluster);
        if (a->trace && plait_cost_write_trace(a->trace, &r, stages) != PLAIT_OK) {
            plait_cli_print_error("plan --explain --trace");
            rc = 1;
        } else if (a->trace) {
            printf("\npredicted step written to %s (open it in https://ui.perfetto.dev; `plait trace compare "
                   "MEASURED %s` sets a run's trace beside it)\n",
                   a->trace, a->trace);
        }
    }
    free(stages);
    return rc;
}

static int cmd_plan(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    plait_cli_layout_args a;
    plait_cluster cluster;
    int rc = plait_cli_layout_args_parse(argc, argv, 0, "plan", &a);
    /* the plugins' start-up notes for every candidate would bury the table */
    if (!getenv("PLAIT_LOG_LEVEL")) (void)plait_log_configure("warn");
    if (rc == 0) rc = plait_cli_layout_setup(&a, &cluster) ? 1 : 0;
    if (rc == 0 && a.explain) {
        rc = explain(&a, &cluster);
    } else if (rc == 0) {
        plait_cost_ctx x;
        plait_cli_layout_ctx(&a, &cluster, &x);
        plait_cost_search s;
        plait_status st = plait_cost_search_run(&a.axes, a.base, &x, a.top ? a.top : PLAIT_COST_SHOW_ALL, &s);
        if (st != PLAIT_OK) {
            plait_cli_print_error("plan");
            rc = 1;
        } else {
            char line[800];
            plait_cli_device_line(&a.device, line, sizeof line);
            plait_cost_print_header(stdout, a.config, a.ranks, &cluster, a.precision, a.mem_limit, line);
            plait_cost_print_table(stdout, s.results, s.n);
            plait_cost_print_families(stdout, s.families, s.n_families);
            plait_cost_print_search(stdout, &s);
            if (s.n > 0) print_training_time(&a, s.results[0].tokens_per_s, "the best layout's");
            if (s.n > 0) print_checkpoint(&a, &s.results[0].layout, &cluster);
            if (s.n == 0 && s.candidates == 0) plait_cli_layout_say_no_space(&a, "plan");
            if (s.n == 0) {
                fprintf(stderr, "plait: error: plan: no layout of %d ranks is valid and fits (reasons above)\n",
                        a.ranks);
                rc = 1;
            }
        }
        plait_cost_search_free(&s);
    }
    plait_cli_layout_args_free(&a);
    return rc;
}

const plait_command plait_cmd_plan = {
    "plan", "predict step time and memory per rank of every layout of N ranks",
    "usage: plait plan CONFIG --ranks N [--cluster CLUSTER.ini] [--comm-csv FILE] [--axes LIST]\n"
    "                  [--AXIS VALUES ...] [--mem-limit MiB] [--top N|all] [--tokens N] [section.key=value ...]\n"
    "       plait plan CONFIG --ranks N [--cluster CLUSTER.ini] --explain LAYOUT [--trace FILE]\n"
    "                  [section.key=value ...]\n"
    "\n"
    "Searches the layouts of N ranks along the chosen axes (default all: dp,tp,pp,cp,ep,schedule,\n"
    "chunks,optim,micro_batch,recompute,sp; also bucket_mb and comm) for the cluster, in the precision the\n"
    "config sets ([run] precision) or else the cluster's ([node] precision: bf16 on GPUs). Rules that\n"
    "need no plan set families aside, each said once with why (n_head divisible by tp, a layer per\n"
    "pipeline chunk, the batch arithmetic, tp inside a node); every other layout is costed from the\n"
    "model's shape (docs/plan.md): compute at the precision's rate, the recompute mode's extra\n"
    "forward, alpha-beta communication per link (tp inside a node, the network shared by a node's\n"
    "ranks, hierarchical DP across nodes), the schedule's bubble, DP overlapped with the backward\n"
    "pass; memory by the ZeRO formulas per precision and activations per recompute mode. The best\n"
    "are checked as 'plait train' would (the parallel plugin's plan of each pipeline stage) and\n"
    "shown ranked by predicted tokens/s.\n"
    "\n"
    "  --ranks N          world size (also -n N)\n"
    "  --cluster FILE     the cluster (configs/clusters/*.ini); default: this machine, its ranks'\n"
    "                     memory counted on the config's [device] plugin (asked in a child\n"
    "                     process; the cpu device where it does not open here, said so)\n"
    "  --comm-csv FILE    calibrate the intra-node link (latency, bandwidth) from a\n"
    "                     'plait bench comm -n N --op allreduce --csv FILE' table\n"
    "  --axes LIST        axes to vary (or all); the others keep the config's setting\n"
    "  --dp/--tp/--pp/--schedule/--chunks/--optim/--micro_batch/--recompute/--bucket_mb/--comm VALUES\n"
    "                     the values an axis takes (comma-separated; makes it vary)\n"
    "  --sp 0,1           sequence parallelism over the tp group: without, with (tp > 1)\n"
    "  --cp VALUES        context parallelism: each rank holds 2 of 2 x cp chunks of every sequence\n"
    "                     (varied by default: cp dividing the ranks where each rank keeps at least\n"
    "                     4096 tokens of a sequence)\n"
    "  --ep VALUES        expert parallelism of a model with experts (varied by default: ep\n"
    "                     dividing dp x cp and moe_experts)\n"
    "  --mem-limit MiB    memory per rank (default: the cluster's)\n"
    "  --top N            layouts to show (default 20; all: every one that fits, the best 20 checked\n"
    "                     against their plugin's plan, the others ranked by the model's shape)\n"
    "  --explain LAYOUT   one layout's step, broken down: compute per stage, each communication\n"
    "                     by axis and link, bubble, optimizer, memory by part; LAYOUT as the\n"
    "                     table prints it, e.g. \"dp8 tp8 pp4 interleaved v2 mb1 zero1 full\"\n"
    "  --trace FILE       with --explain: also write that step as a trace (the format of a run's\n"
    "                     [run] trace, docs/trace.md: per stage, compute per forward and backward,\n"
    "                     each axis's communication, the bubble) for Perfetto and `plait trace compare`\n"
    "  --tokens N         the tokens whose training time is said under the table (300B, 15T; K, M, B\n"
    "                     and T allowed); default: the config's [run] steps x global batch x block_size\n"
    "\n"
    "Exit status: 0 when at least one layout is valid and fits, 1 otherwise, 2 for usage errors.\n",
    cmd_plan};
