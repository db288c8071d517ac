/* plait plugin test PATH.so: the conformance kit a plugin author runs on their
 * own plugin. This file parses the command line, starts the local jobs and
 * prints the verdict; the checks live in core/conformance/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "launch/bootstrap.h"
#include "conformance/kit_comm.h"
#include "conformance/kit_optim.h"
#include "conformance/kit_report.h"
#include "config/config_value.h"
#include "plugin/loader.h"
#include "runtime/error.h"

static const char plugin_usage[] =
    "usage: plait plugin test PATH.so [--ranks LIST] [--timeout S] [--large SIZE] [section.key=value ...]\n"
    "\n"
    "Checks a plugin against the rules of the SDK headers and prints a pass/fail table; a failing\n"
    "row says what happened and the rule it breaks (where the rule is written). The kind comes\n"
    "from the file name (libplait-<kind>-<name>.so).\n"
    "\n"
    "comm plugins, on local jobs of each rank count in LIST (default 2,4,8), each rank one process:\n"
    "  init         init() over the job's bootstrap\n"
    "  order        16 messages per peer on 2 tags, receives posted across tags in another order\n"
    "  tags         tags 0, 1, 2^31-1, 2^31, 2^32-2, 2^32-1 kept apart\n"
    "  zero-byte    0-byte messages between others on one tag\n"
    "  truncation   a message longer than its receive fails that receive only, no overrun\n"
    "  large+posting  64 B and SIZE (default 16M) sent before their receives are posted\n"
    "  progress     a request completed by test() alone (no wait), as the core does while computing\n"
    "  timeout      wait() times out with the request kept; a later wait completes it\n"
    "  collectives  every core collective x every dtype through the plugin, #wrong 0\n"
    "  split        every collective on split communicators (derive) in reverse rank order\n"
    "  abort        abort() from another thread fails a pending receive at once, and later sends\n"
    "  cleanup      no file descriptor or thread left after destroy()\n"
    "  peer-lost    the last rank exits mid-operation: receives from it fail with 'peer lost'\n"
    "\n"
    "optim plugins, in this process, on three parameters the kit owns (4.1 K elements):\n"
    "  step-math    3 steps against the reference math its state names imply (exp_avg, exp_avg_sq:\n"
    "               AdamW; momentum: SGD with momentum), with warmup, cosine decay, clipping by the\n"
    "               global norm and weight decay; the lr and norm it reports\n"
    "  state-restore  state exported after 2 steps and materialized anew continues bit for bit\n"
    "  memory       memory() counts parameters, gradients and each state tensor (4 B per element)\n"
    "  (plugins that own storage or reduce gradients themselves, like ZeRO, are not checked yet)\n"
    "\n"
    "  --ranks LIST   rank counts, comma-separated, each 2..64 (default 2,4,8)\n"
    "  --timeout S    the longest any check waits, seconds (default 10)\n"
    "  --large SIZE   bytes of the large message (default 16M)\n"
    "  section.key=value  configuration for the plugin, e.g. comm.tcp.streams=1 (optim: after the kit's\n"
    "                 own [optim] values: lr 0.05, warmup 1, decay over 4 steps, grad_clip 0.5)\n"
    "\n"
    "Exit status: 0 when every check passed, 1 when one failed, 2 for usage errors.\n";

typedef struct kit_args {
    const char *path;
    const char *ranks;
    double timeout_s;
    uint64_t large;
    int n_over;
    char **over;
} kit_args;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "plait plugin test: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n'plait help plugin' lists the options\n");
    return 2;
}

/* The kind named in the file name libplait-<kind>-<name>.so, or 0. */
static uint32_t kind_of_path(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "libplait-", 9) != 0) return 0;
    const char *dash = strchr(base + 9, '-');
    if (!dash) return 0;
    char kind[32];
    snprintf(kind, sizeof kind, "%.*s", (int)(dash - base - 9), base + 9);
    return plait_kind_parse(kind);
}

/* One rank of a comm job: run the checks, rank 0 prints the table. */
static int comm_rank(const kit_args *a, const plait_plugin_desc *d) {
    plait_config *cfg = NULL;
    if (plait_cli_load_plugin_config(PLAIT_KIND_COMM, a->path, NULL, a->n_over, a->over, &cfg) != PLAIT_OK) {
        plait_cli_print_error("configuration");
        return 2;
    }
    plait_job *job = NULL;
    if (plait_job_join(cfg, &job) != PLAIT_OK) {
        plait_cli_print_error("plugin test");
        plait_config_free(cfg);
        return 1;
    }
    kit_report *rep = calloc(1, sizeof *rep);
    if (!rep) {
        plait_job_leave(job, 1);
        plait_config_free(cfg);
        return 1;
    }
    snprintf(rep->title, sizeof rep->title, "plait plugin test: comm/%s %s (needs ABI %u.%u; this plait %d.%d), "
             "%d ranks, timeout %g s\n  %s", d->name, d->version, d->abi_major, d->abi_minor, PLAIT_ABI_MAJOR,
             PLAIT_ABI_MINOR, plait_job_size(job), a->timeout_s, a->path);
    kit_comm_opts o = {.host = plait_plugin_host(), .timeout_s = a->timeout_s, .large_bytes = (size_t)a->large, .lose_peer = 1};
    plait_kit_comm_run(job, d, cfg, &o, rep);
    int rc = 0;
    if (plait_job_rank(job) == 0) {
        kit_report_print(rep, stdout);
        fflush(stdout);
        rc = kit_report_failures(rep) ? 1 : 0;
    }
    free(rep);
    plait_job_leave(job, 1); /* a rank exited on purpose: nobody waits for it */
    plait_config_free(cfg);
    return rc;
}

/* An optimizer: one process, the kit's [optim] settings, then the user's. */
static int optim_test(const kit_args *a, const plait_plugin_desc *d) {
    plait_config *cfg = NULL;
    if (plait_cli_load_plugin_config(PLAIT_KIND_OPTIM, a->path, kit_optim_overrides, a->n_over, a->over, &cfg) !=
        PLAIT_OK) {
        plait_cli_print_error("configuration");
        return 2;
    }
    kit_report *rep = calloc(1, sizeof *rep);
    if (!rep) {
        plait_config_free(cfg);
        return 1;
    }
    snprintf(rep->title, sizeof rep->title, "plait plugin test: optim/%s %s (needs ABI %u.%u; this plait %d.%d)\n  %s",
             d->name, d->version, d->abi_major, d->abi_minor, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR, a->path);
    plait_kit_optim_run(d, cfg, plait_plugin_host(), rep);
    kit_report_print(rep, stdout);
    int rc = kit_report_failures(rep) ? 1 : 0;
    printf("plait plugin test: %s %s\n", a->path, rc ? "FAILED" : "passed every check");
    free(rep);
    plait_config_free(cfg);
    return rc;
}

/* The outer process: one local job per rank count. */
static int comm_jobs(const kit_args *a, int argc, char **argv) {
    char list[256];
    snprintf(list, sizeof list, "%s", a->ranks);
    int failed = 0, jobs = 0;
    char passed[256] = "";
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        long n = strtol(tok, &end, 10);
        if (!end || *end || n < 2 || n > 64) return usage_error("--ranks: '%s' is not a rank count 2..64", tok);
        /* the same command line with --ranks N, run by N ranks */
        char **child = calloc((size_t)argc + 5, sizeof *child);
        if (!child) return 1;
        int c = 0;
        child[c++] = argv[-2]; /* "plait" */
        child[c++] = argv[-1]; /* "plugin"; argv[0] is "test" */
        for (int i = 0; i < argc; i++) {
            if (!strcmp(argv[i], "--ranks")) {
                i++;
                continue;
            }
            child[c++] = argv[i];
        }
        child[c++] = "--ranks";
        child[c++] = tok;
        child[c] = NULL;
        int rc = plait_cli_launch((int)n, c, child);
        free(child);
        jobs++;
        if (rc) failed++;
        else snprintf(passed + strlen(passed), sizeof passed - strlen(passed), "%s%ld", passed[0] ? ", " : "", n);
    }
    if (failed) fprintf(stderr, "plait plugin test: %s FAILED on %d of %d rank counts\n", a->path, failed, jobs);
    else printf("plait plugin test: %s passed every check on %s ranks\n", a->path, passed);
    return failed ? 1 : 0;
}

static int plugin_test(int argc, char **argv) {
    kit_args a = {.ranks = "2,4,8", .timeout_s = 10, .large = 16u << 20};
    a.over = calloc((size_t)argc + 1, sizeof *a.over);
    if (!a.over) return 1;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *arg = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = arg[0] == '-';
        if (takes && !v) rc = usage_error("%s needs a value", arg);
        else if (!strcmp(arg, "--ranks")) a.ranks = v;
        else if (!strcmp(arg, "--timeout")) {
            char *end = NULL;
            a.timeout_s = strtod(v, &end);
            if (!end || *end || !(a.timeout_s > 0) || a.timeout_s > 3600)
                rc = usage_error("--timeout must be seconds in (0, 3600], not '%s'", v);
        } else if (!strcmp(arg, "--large")) {
            if (plait_parse_bytes(v, &a.large) != 0 || a.large < 64 || a.large > (1ull << 32))
                rc = usage_error("--large must be a size from 64 to 4G, not '%s'", v);
        } else if (!takes && strchr(arg, '=')) {
            a.over[a.n_over++] = argv[i];
            continue;
        } else if (!takes && !a.path) {
            a.path = arg;
            continue;
        } else {
            rc = usage_error("unexpected argument '%s'", arg);
        }
        i++;
    }
    if (!rc && !a.path) rc = usage_error("%s", "which plugin? give the path of its .so file");
    uint32_t kind = rc ? 0 : kind_of_path(a.path);
    if (!rc && !kind)
        rc = usage_error("'%s' is not named libplait-<kind>-<name>.so (kind comm, parallel or optim)", a.path);
    const plait_plugin_desc *d = NULL;
    char path[4096];
    if (!rc) {
        /* a bare file name would be searched for by name: make it a path */
        snprintf(path, sizeof path, "%s%s", strchr(a.path, '/') ? "" : "./", a.path);
        a.path = path;
        d = plait_plugin_load(kind, path);
        if (!d) {
            plait_cli_print_error("plugin test");
            rc = 1;
        }
        if (d && kind == PLAIT_KIND_PARALLEL) {
            fprintf(stderr, "plait plugin test: checking parallel plugins is not implemented yet; comm and optim "
                            "plugins are\n");
            rc = 2;
        }
    }
    if (!rc && kind == PLAIT_KIND_OPTIM) rc = optim_test(&a, d);
    else if (!rc) rc = getenv("PLAIT_RANK") ? comm_rank(&a, d) : comm_jobs(&a, argc, argv);
    free(a.over);
    return rc;
}

static int cmd_plugin(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "test") == 0) return plugin_test(argc - 1, argv + 1);
    fprintf(stderr, "%s", plugin_usage);
    return 2;
}

const plait_command plait_cmd_plugin = {"plugin", "check a plugin: 'plait plugin test PATH.so' (conformance kit)",
                                        plugin_usage, cmd_plugin};
