/*
 * The options `plait plan` and `plait bench sweep` share: the config, the
 * ranks, the cluster, the axes and their values, the memory limit, and the
 * user's `section.key=value` overrides; and the loader that turns the config
 * plus a layout's overrides into a finalized config (cost/layouts.h); the
 * search over the layouts (cost/search.h).
 * Not thread-safe; the struct points into argv (no ownership beyond `over`,
 * freed by plait_cli_layout_args_free).
 */
#ifndef PLAIT_CLI_LAYOUT_ARGS_H
#define PLAIT_CLI_LAYOUT_ARGS_H

#include "cli/cost_device.h"
#include "cost/layouts.h"
#include "cost/search.h"

typedef struct plait_cli_layout_args {
    const char *config;
    int ranks;
    const char *cluster;      /* CLUSTER.ini, or NULL: this machine */
    const char *comm_csv;     /* a bench comm CSV calibrating the intra-node link, or NULL */
    double mem_limit;         /* bytes per rank, 0 = the cluster's */
    plait_cost_axes axes;
    /* plan only */
    size_t top;               /* layouts to show (0 = all) */
    const char *explain;      /* a layout to explain, or NULL */
    const char *trace;        /* with explain: the file for its predicted step (cost/predicted_trace.h), or NULL */
    double train_tokens;      /* --tokens: the tokens whose training time is said; 0 = the config's run's */
    /* set up from the config and the cluster */
    plait_precision precision;
    int precision_from_config; /* [run] precision set in the config, not the cluster's */
    int hierarchical;
    plait_cli_device device;  /* the device whose memory is counted: the cluster's, or the config's */
    plait_config *base;       /* the config as given (the model the search weighs) */
    char **over;              /* the user's overrides (malloc'd array of argv pointers) */
    int n_over;
    /* bench sweep only */
    int steps, warmup, repeat;
    double max_minutes;
    const char *csv, *report;
} plait_cli_layout_args;

/* Parse argv (argv[0] = the command). `sweep` accepts the sweep's options.
 * Prints a usage error and returns 2, or 0. */
int plait_cli_layout_args_parse(int argc, char **argv, int sweep, const char *cmd, plait_cli_layout_args *a);
void plait_cli_layout_args_free(plait_cli_layout_args *a);

/* Load the config as given (a->base), fill axes->base and global_batch
 * from it, load the cluster (measuring this machine's SGEMM when it gives
 * no peak), settle the precision (the config's [run] precision when it sets
 * one, else the cluster's) and check the cluster has a rate for it, and
 * settle the device whose memory is counted (a->device: a cluster file's,
 * else the config's [device] plugin, asked in a child process).
 * Prints errors as "plait: error: ..." and returns 1, or 0. */
int plait_cli_layout_setup(plait_cli_layout_args *a, plait_cluster *cluster);

/* The context of an evaluation for `a` on `cluster` (after setup). */
void plait_cli_layout_ctx(plait_cli_layout_args *a, const plait_cluster *cluster, plait_cost_ctx *x);

/* The front `plan` and `bench sweep` share: parse, quiet the plugins' logs,
 * set up, search the layouts (keeping a->top of the best, or, for the
 * sweep, every valid one). On success returns 0 with *s filled (free with
 * plait_cost_search_free); else the exit code, errors printed. */
int plait_cli_layout_search(int argc, char **argv, int sweep, const char *cmd, plait_cli_layout_args *a,
                            plait_cluster *cluster, plait_cost_search *s);

/* With a search whose space held no layout at all (candidates 0): to
 * stderr, as "plait CMD: ...", each size axis whose every value fails to
 * divide the ranks, or that no combination of them makes the ranks. */
void plait_cli_layout_say_no_space(const plait_cli_layout_args *a, const char *cmd);

/* plait_cost_loader for `a` (ctx): the file, the user's overrides, then the
 * layout's. */
plait_status plait_cli_layout_load(void *ctx, int n, char *const *overrides, plait_config **out);

#endif
