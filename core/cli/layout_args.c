/* Options shared by `plait plan` and `plait bench sweep`, and their loader. */
#include "cli/layout_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/model.h"
#include "model/sgemm_peak.h"
#include "cli/cli.h"
#include "cli/memory_check.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "layout/batch.h"
#include "train/preflight.h"

static int bad(const char *cmd, const char *what, const char *arg) {
    fprintf(stderr, "plait %s: %s '%s'; 'plait help %s' lists the options\n", cmd, what, arg,
            strncmp(cmd, "bench", 5) == 0 ? "bench" : cmd);
    return 2;
}

/* Whether --NAME is one of the cost model's axes (--dp, --schedule...). */
static int axis_known(const char *name) {
    plait_cost_axes scratch = {0};
    int known = strcmp(name, "all") != 0 && plait_cost_axes_parse(&scratch, name) == PLAIT_OK;
    plait_clear_error();
    return known;
}

int plait_cli_layout_args_parse(int argc, char **argv, int sweep, const char *cmd, plait_cli_layout_args *a) {
    memset(a, 0, sizeof *a);
    a->steps = 6;
    a->warmup = 2;
    a->repeat = 3;
    a->top = 20;
    a->over = calloc((size_t)argc + 1, sizeof *a->over);
    if (!a->over) return bad(cmd, "out of memory at", argv[0]);
    /* plan weighs the whole space; a sweep measures, so it varies less */
    const char *axes = sweep ? "dp,tp,pp,schedule,cp" : "all";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (o[0] != '-') {
            if (!a->config && !strchr(o, '=')) a->config = o;
            else if (strchr(o, '=')) a->over[a->n_over++] = argv[i];
            else return bad(cmd, "unexpected argument", o);
            continue;
        }
        if (!v) return bad(cmd, "a value is missing after", o);
        char *end = NULL;
        i++;
        if (!strcmp(o, "--ranks") || !strcmp(o, "-n")) {
            a->ranks = (int)strtol(v, &end, 10);
            if (*end || a->ranks < 1 || a->ranks > 1048576) return bad(cmd, "ranks must be 1..1048576, not", v);
        } else if (!strcmp(o, "--cluster")) {
            a->cluster = v;
        } else if (!strcmp(o, "--comm-csv")) {
            a->comm_csv = v;
        } else if (!strcmp(o, "--axes")) {
            axes = v;
        } else if (!strcmp(o, "--mem-limit")) {
            a->mem_limit = strtod(v, &end) * 1048576.0;
            if (*end || a->mem_limit <= 0) return bad(cmd, "--mem-limit takes MiB per rank, not", v);
        } else if (!sweep && !strcmp(o, "--top")) {
            int all = strcmp(v, "all") == 0; /* 0 below */
            long t = all ? 0 : strtol(v, &end, 10);
            if (!all && (*end || end == v || t < 1))
                return bad(cmd, "--top takes a number of layouts (1 or more) or 'all', not", v);
            a->top = (size_t)t;
        } else if (!sweep && !strcmp(o, "--explain")) {
            if (!*v) return bad(cmd, "--explain takes a layout as the table prints it (\"dp2 tp2 pp1\"), not", v);
            a->explain = v;
        } else if (!sweep && !strcmp(o, "--tokens")) {
            a->train_tokens = strtod(v, &end);
            const double unit = !*end               ? 1
                                : !strcmp(end, "K") ? 1e3
                                : !strcmp(end, "M") ? 1e6
                                : !strcmp(end, "B") ? 1e9
                                : !strcmp(end, "T") ? 1e12
                                                    : 0;
            a->train_tokens *= unit;
            if (end == v || !(a->train_tokens >= 1 && a->train_tokens < 1e18))
                return bad(cmd, "--tokens takes a number of tokens, with K, M, B or T after it (300B, 15T), not", v);
        } else if (!sweep && !strcmp(o, "--trace")) {
            if (!*v) return bad(cmd, "--trace takes the file to write the predicted step to, not", v);
            a->trace = v;
        } else if (sweep && !strcmp(o, "--steps")) {
            a->steps = (int)strtol(v, &end, 10);
            if (*end || a->steps < 1) return bad(cmd, "--steps must be >= 1, not", v);
        } else if (sweep && !strcmp(o, "--warmup")) {
            a->warmup = (int)strtol(v, &end, 10);
            if (*end || a->warmup < 0) return bad(cmd, "--warmup must be >= 0, not", v);
        } else if (sweep && !strcmp(o, "--repeat")) {
            a->repeat = (int)strtol(v, &end, 10);
            if (*end || a->repeat < 1 || a->repeat > 16) return bad(cmd, "--repeat must be 1..16, not", v);
        } else if (sweep && !strcmp(o, "--max-minutes")) {
            a->max_minutes = strtod(v, &end);
            if (*end || a->max_minutes <= 0) return bad(cmd, "--max-minutes must be > 0, not", v);
        } else if (sweep && !strcmp(o, "--csv")) {
            a->csv = v;
        } else if (sweep && !strcmp(o, "--report")) {
            a->report = v;
        } else if (!strncmp(o, "--", 2) && axis_known(o + 2)) {
            /* --dp 1,2 / --schedule gpipe,1f1b / --micro_batch 1,2 ... */
            if (plait_cost_axes_values(&a->axes, o + 2, v) != PLAIT_OK) {
                fprintf(stderr, "plait %s: %s\n", cmd, plait_last_error());
                return 2;
            }
        } else {
            plait_clear_error();
            return bad(cmd, "unknown option", o);
        }
    }
    if (!a->config || !a->ranks) {
        fprintf(stderr, "usage: plait %s CONFIG %s N [options] (see 'plait help %s')\n", cmd,
                sweep ? "-n" : "--ranks", strncmp(cmd, "bench", 5) == 0 ? "bench" : cmd);
        return 2;
    }
    if (a->trace && !a->explain) {
        fprintf(stderr, "plait %s: --trace %s writes the step of one layout: give it with --explain LAYOUT\n", cmd,
                a->trace);
        return 2;
    }
    /* explicit values (--tp 1,2) made their axes vary already; --axes adds */
    unsigned explicit_axes = a->axes.vary;
    if (plait_cost_axes_parse(&a->axes, axes) != PLAIT_OK) {
        fprintf(stderr, "plait %s: --axes: %s\n", cmd, plait_last_error());
        return 2;
    }
    a->axes.vary |= explicit_axes;
    /* a sweep runs each layout: sequence parallelism only where the tp
     * plugin reads [parallel.tp] sequence_parallel, which the layout's
     * overrides do not set (the planner weighs it from the model's shape) */
    if (sweep && (explicit_axes >> PLAIT_AXIS_N_SP & 1u)) {
        fprintf(stderr,
                "plait %s: --sp: a sweep measures each layout as the config runs it; set [parallel.tp] "
                "sequence_parallel in the config instead (plait plan weighs --sp 0,1)\n",
                cmd);
        return 2;
    }
    if (sweep) a->axes.vary &= ~(1u << PLAIT_AXIS_N_SP);
    a->axes.ranks = a->ranks;
    return 0;
}

void plait_cli_layout_args_free(plait_cli_layout_args *a) {
    free(a->over);
    a->over = NULL;
    plait_config_free(a->base);
    a->base = NULL;
}

plait_status plait_cli_layout_load(void *ctx, int n, char *const *overrides, plait_config **out) {
    plait_cli_layout_args *a = ctx;
    char **all = calloc((size_t)(a->n_over + n) + 2, sizeof *all);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < a->n_over; i++) all[i] = a->over[i];
    for (int i = 0; i < n; i++) all[a->n_over + i] = overrides[i];
    /* quiet: the plugins' start-up notes for every candidate would bury the
     * table (a user's own run.log_level comes first and wins) */
    int quiet = 1;
    for (int i = 0; i < a->n_over; i++) quiet &= strncmp(a->over[i], "run.log_level=", 14) != 0;
    char level[] = "run.log_level=error";
    if (quiet && !getenv("PLAIT_LOG_LEVEL")) all[a->n_over + n++] = level;
    plait_status st = plait_cli_load_config(a->config, a->n_over + n, all, out);
    free(all);
    return st;
}

static const char *str_or(const plait_config *cfg, const char *sec, const char *key, const char *dflt) {
    plait_value v;
    return plait_config_get(cfg, sec, key, &v) == PLAIT_OK && v.s ? v.s : dflt;
}

int plait_cli_layout_setup(plait_cli_layout_args *a, plait_cluster *cluster) {
    plait_config *cfg = NULL;
    plait_batch batch;
    /* the rules between the core's keys hold for every layout: a config
     * that breaks one is refused once, not layout by layout */
    if (plait_cli_load_config(a->config, a->n_over, a->over, &cfg) != PLAIT_OK ||
        plait_batch_from_config(cfg, &batch) != PLAIT_OK || plait_check_key_rules(cfg) != PLAIT_OK) {
        plait_cli_print_error(NULL); /* its errors name the file or the command line, as config check's do */
        plait_config_free(cfg);
        return 1;
    }
    a->base = cfg;
    plait_cost_layout *b = &a->axes.base;
    b->dp = (int)plait_config_int(cfg, "parallel", "dp");
    b->tp = (int)plait_config_int(cfg, "parallel", "tp");
    b->pp = (int)plait_config_int(cfg, "parallel", "pp");
    b->cp = (int)plait_config_int(cfg, "parallel", "cp");
    b->ep = (int)plait_config_int(cfg, "parallel", "ep");
    a->axes.experts = plait_config_int(cfg, "model", "moe_experts");
    a->axes.seq = plait_config_int(cfg, "model", "block_size");
    a->axes.attention = strcmp(plait_config_str(cfg, "model", "arch"), "mlp") != 0;
    a->axes.layers = a->axes.attention ? plait_config_int(cfg, "model", "n_layer") : 0;
    snprintf(b->schedule, sizeof b->schedule, "%s", str_or(cfg, "parallel.pp", "schedule", "1f1b"));
    plait_value v;
    b->chunks = plait_config_get(cfg, "parallel.pp", "virtual_stages", &v) == PLAIT_OK ? (int)v.i : 1;
    /* train loops gpipe over a stage's chunks; the cost model weighs chunks
     * for interleaved alone, so such a layout is said to be weighed as
     * plain gpipe rather than taken for what train runs */
    if (b->pp > 1 && b->chunks > 1 && strcmp(b->schedule, "gpipe") == 0)
        fprintf(stderr,
                "plait: note: [parallel.pp] schedule = gpipe with virtual_stages = %d runs %d chunks a stage; "
                "the planner weighs gpipe with one chunk a stage (it models chunks for interleaved alone)\n",
                b->chunks, b->chunks);
    snprintf(b->optim, sizeof b->optim, "%s", plait_config_str(cfg, "optim", "plugin"));
    snprintf(b->comm, sizeof b->comm, "%s", plait_config_str(cfg, "comm", "plugin"));
    const char *rc = plait_config_str(cfg, "model", "recompute");
    b->recompute = strcmp(rc, "full") == 0 ? 2 : strcmp(rc, "selective") == 0 ? 1 : 0;
    b->micro_batch = batch.micro_batch;
    b->sp = b->tp > 1 && plait_cost_config_sp(cfg);
    a->axes.global_batch = batch.global_batch;
    a->axes.offload_params = plait_config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK && v.i;
    a->axes.recompute_offload = plait_cost_config_recompute_offload(cfg);
    /* the comm plugins that reduce hierarchically across nodes: nccl, and
     * the core's collectives unless an algorithm is forced (coll/coll_hier.c) */
    const char *algo = plait_config_str(cfg, "comm", "algorithm");
    a->hierarchical = strcmp(b->comm, "nccl") == 0 || strcmp(algo, "auto") == 0 || strcmp(algo, "hier") == 0;
    if (a->cluster) {
        if (plait_cluster_load(a->cluster, cluster) != PLAIT_OK) {
            plait_cli_print_error(NULL); /* its errors name the file */
            return 1;
        }
    } else {
        plait_cluster_default(cluster);
    }
    /* a cluster file's ranks run its kind of device; this machine's run the
     * config's, which may not open here (then the cpu device counts). Asked
     * before the SGEMM measurement below starts the math threads: the
     * child that asks is forked from this process. */
    if (a->cluster) plait_cli_device_planned(cfg, cluster, &a->device);
    else plait_cli_device_ask(cfg, &a->device);
    /* a layout that keeps the blocks' inputs in host memory on a device
     * whose memory is host memory: refused as `train` and `config check`
     * refuse it, not planned as if the key were unset */
    if (plait_model_check_recompute_offload(cfg, a->device.fell_back || a->device.cost.own_memory, a->device.counted) !=
        PLAIT_OK) {
        plait_cli_print_error(NULL);
        return 1;
    }
    /* the precision: the config's when it sets one, else what the cluster
     * trains in; only `plait train` asks this machine whether it can */
    const char *where = NULL;
    a->precision_from_config = plait_config_origin(cfg, "run", "precision", &where) != PLAIT_ORIGIN_DEFAULT;
    a->precision = a->precision_from_config ? plait_device_precision(cfg) : cluster->precision;
    if (a->comm_csv && plait_cluster_fit_comm(cluster, a->comm_csv) != PLAIT_OK) {
        plait_cli_print_error("--comm-csv");
        return 1;
    }
    if (plait_cluster_check_ranks(cluster, a->ranks) != PLAIT_OK) {
        plait_cli_print_error(NULL);
        return 1;
    }
    if (cluster->peak_flops <= 0) { /* this machine: its SGEMM rate with every core */
        cluster->peak_flops = plait_sgemm_peak(cluster->units_per_node, 0.3);
        /* and how it falls with the rows of a micro-batch, at the model's
         * width and on the threads a rank of this job gets */
        if (cluster->half_rows <= 0) {
            int threads = plait_cluster_rank_threads(cluster, a->ranks, (int)plait_config_int(cfg, "run", "threads"));
            cluster->half_rows = plait_sgemm_half_rows(threads, plait_config_int(cfg, "model", "n_embd"), 0.05);
        }
    }
    double rate;
    if (plait_cluster_rate(cluster, a->precision, &rate) != PLAIT_OK) {
        plait_cli_print_error(NULL);
        return 1;
    }
    return 0;
}

void plait_cli_layout_ctx(plait_cli_layout_args *a, const plait_cluster *cluster, plait_cost_ctx *x) {
    *x = (plait_cost_ctx){.cluster = cluster, .precision = a->precision, .hierarchical = a->hierarchical,
                          .mem_limit = a->mem_limit, .global_batch = a->axes.global_batch,
                          .load = plait_cli_layout_load, .load_ctx = a, .device = a->device.cost};
    if (a->base) {
        plait_cost_ctx_from_config(a->base, x);
        double free_bytes = x->offload == 2 ? plait_cli_offload_free(a->base, NULL, 0) : 0;
        x->offload_disk_free = free_bytes > 0 ? free_bytes : 0;
    }
}

int plait_cli_layout_search(int argc, char **argv, int sweep, const char *cmd, plait_cli_layout_args *a,
                            plait_cluster *cluster, plait_cost_search *s) {
    memset(s, 0, sizeof *s);
    int rc = plait_cli_layout_args_parse(argc, argv, sweep, cmd, a);
    /* the plugins' start-up notes for every candidate would bury the table */
    if (!getenv("PLAIT_LOG_LEVEL")) (void)plait_log_configure("warn");
    if (rc == 0) rc = plait_cli_layout_setup(a, cluster) ? 1 : 0;
    if (rc != 0) return rc;
    plait_cost_ctx x;
    plait_cli_layout_ctx(a, cluster, &x);
    plait_status st = plait_cost_search_run(&a->axes, a->base, &x, sweep ? 0 : (a->top ? a->top : PLAIT_COST_SHOW_ALL),
                                            s);
    if (st != PLAIT_OK) {
        plait_cli_print_error(cmd);
        plait_cost_search_free(s);
        return 1;
    }
    return 0;
}

/* With no layout in the space at all: the size axes whose every value
 * leaves no room for N ranks (dp x cp x tp x pp = N), each named with
 * where its values came from. */
void plait_cli_layout_say_no_space(const plait_cli_layout_args *a, const char *cmd) {
    static const struct {
        int axis;
        const char *name;
    } sizes[] = {{PLAIT_AXIS_N_DP, "dp"}, {PLAIT_AXIS_N_TP, "tp"}, {PLAIT_AXIS_N_PP, "pp"}, {PLAIT_AXIS_N_CP, "cp"}};
    const plait_cost_axes *ax = &a->axes;
    const int base[] = {ax->base.dp, ax->base.tp, ax->base.pp, ax->base.cp > 0 ? ax->base.cp : 1};
    int said = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const int k = sizes[i].axis, varied = (ax->vary >> k) & 1u;
        if (varied && ax->n[k] == 0) continue; /* every divisor */
        int fits = 0;
        char vals[200] = "";
        size_t used = 0;
        for (int v = 0; v < (varied ? ax->n[k] : 1); v++) {
            const int64_t x = varied ? ax->num[k][v] : base[i];
            fits |= x > 0 && a->ranks % x == 0;
            if (used < sizeof vals)
                used += (size_t)snprintf(vals + used, sizeof vals - used, "%s%lld", v ? ", " : "", (long long)x);
        }
        if (fits) continue;
        fprintf(stderr, "plait %s: %s %s (%s) does not divide %d ranks: no layout has dp x cp x tp x pp = %d\n", cmd,
                sizes[i].name, vals, varied ? "the values given" : "the config's, not varied: give --axes or values",
                a->ranks, a->ranks);
        said = 1;
    }
    if (!said)
        fprintf(stderr, "plait %s: no combination of the axes' values has dp x cp x tp x pp = %d ranks\n", cmd,
                a->ranks);
}
