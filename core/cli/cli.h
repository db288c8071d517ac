/*
 * The `plait` command line: one function per command, each returning the
 * process exit code (0 ok, 1 failure, 2 usage error). Commands print their
 * own errors; nothing below the CLI calls exit().
 */
#ifndef PLAIT_CLI_H
#define PLAIT_CLI_H

#include <stdio.h>

#include "config/config.h"

/* Options of the launcher that every command takes, like -n:
 *   --nnodes N       the job spans N hosts, one launcher each (torchrun's
 *                    --nnodes); rank 0's host from MASTER_ADDR/MASTER_PORT,
 *                    [comm] rendezvous or a Slurm allocation's first node,
 *                    the shared secret from PLAIT_JOB_TOKEN
 *   --nnodes MIN:MAX plait train, elastic (cli/cli_elastic.c): at least
 *                    MIN, at most MAX hosts; "MIN:" takes MAX from Slurm's
 *                    SLURM_NNODES
 *   --node-rank K    this host's index (default SLURM_NODEID under Slurm)
 *   --max-restarts K plait train: relaunch a failed job from its latest
 *                    complete checkpoint up to K times (launch/restart.h) */
typedef struct plait_cli_job_opts {
    int nnodes;       /* 0 = not given; elastic: MAX (0 = from Slurm) */
    int nnodes_min;   /* elastic: MIN; 0 = a fixed number of hosts */
    int node_rank;    /* -1 = not given */
    int max_restarts; /* -1 = not given ([run] max_restarts) */
    int local_ranks;  /* -n N: ranks on this host (0 = no -n: this process is one rank, or the command's own) */
} plait_cli_job_opts;

typedef struct plait_command {
    const char *name;
    const char *summary;   /* one line for `plait help` */
    const char *usage;     /* full text for `plait help <name>` */
    /* argv[0] is the command name; `job`: the launcher options given with
     * it (commands that start ranks themselves use them) */
    int (*run)(int argc, char **argv, const plait_cli_job_opts *job);
    /* Optional: what `plait <command> -n N` checks once, in the launcher,
     * before any rank starts (arguments as for run); 0 to start the ranks,
     * else the exit code, the error printed. */
    int (*before_launch)(int argc, char **argv, const plait_cli_job_opts *job);
} plait_command;

/* Bytes from data (a model's generated text, decoded token ids) to `out`:
 * as they are when piped, but on a terminal (`tty`) a control character
 * other than a line break or a tab is shown as \xNN, so that what a model
 * learned or a file held (escape sequences) cannot drive the terminal. */
void plait_cli_put_bytes(const void *bytes, size_t len, FILE *out, int tty);

/* All commands, NULL-terminated (commands.c). */
extern const plait_command *const plait_commands[];

/* Load FILE plus `section.key=value` overrides, load the plugins it selects
 * (and those whose sections it has), declare their sections, apply the
 * environment and validate. Prints nothing; on error the message lists every
 * problem. */
plait_status plait_cli_load_config(const char *path, int n_overrides, char *const *overrides,
                                   plait_config **out);

/* An option's value as a whole number in [lo, hi]: 0 with *out set, or -1
 * (nothing set) for no value, an empty one, trailing text ("5x", "1e3") or
 * one out of range, so that the caller's usage error names the option. */
int plait_cli_parse_int(const char *s, int lo, int hi, int *out);

/* A command's argument that is no option: the config file (the first one
 * without '=', into *path), else a section.key=value override (appended to
 * over, *n_over of them). */
void plait_cli_take_positional(char *arg, const char **path, char **over, int *n_over);

/* The configuration of a command that runs one plugin by itself (bench
 * comm, plugin test): the core sections, the section of `plugin` of `kind`
 * (a name or a path; NULL = [comm] plugin as configured, for comm;
 * "threads" = the in-process transport, no section), the overrides `first`
 * (NULL-terminated, may be NULL) then `over`, and the environment,
 * finalized. */
plait_status plait_cli_load_plugin_config(uint32_t kind, const char *plugin, const char *const *first,
                                          int n_over, char *const *over, plait_config **out);

/* Check [run] log_level of a finalized config (an error names where it was
 * set) and apply it unless PLAIT_LOG_LEVEL is set, which wins. */
plait_status plait_cli_apply_log_level(const plait_config *cfg);

/* Declare the sections of existing plugins that PLAIT_<KIND>_<NAME>_...
 * variables point into (plait_config_env_plugin_sections), so finalize
 * checks those variables against the plugin's keys instead of calling them
 * unknown keys of [<kind>]. Errors of plugins that do not load are dropped:
 * finalize then reports the variables. */
void plait_cli_declare_env_sections(plait_config *cfg);

/* The overview printed by `plait help` and on usage errors. */
void plait_cli_print_overview(FILE *out);
/* The command named `name`, or NULL. */
const plait_command *plait_cli_find_command(const char *name);

/* Print "plait: error: <msg>" for the thread's last error (and report it
 * to the launcher when this process is a rank of `plait -n`). */
void plait_cli_print_error(const char *context);

/* Remove those options from argv (after argv[0]); 0, or -1 with a static
 * message in *err for a missing or out-of-range value. */
int plait_cli_take_job_options(int *argc, char **argv, plait_cli_job_opts *o, const char **err);
/* "N", "MIN:MAX" or "MIN:" (MAX 0: from Slurm) as --nnodes and [run]
 * nnodes take it. 0, or -1 with a static message in *err. */
int plait_cli_parse_nnodes(const char *text, int *min, int *max, const char **err);

/* Where a job on several hosts meets: `rendezvous` ([comm] rendezvous),
 * else MASTER_ADDR/MASTER_PORT, else a Slurm allocation's first node; and
 * its secret, PLAIT_JOB_TOKEN (*token points into the environment).
 * Errors name `what` (the option: "--nnodes 2") and what to set. */
plait_status plait_cli_job_address(const char *rendezvous, const char *what, char *host, size_t cap, int *port,
                                   const char **token);

/* `plait <command> ... -n N`: run N local ranks of argv (with -n already
 * removed) under the launcher (launch/launch.h) and return the exit code the
 * CLI should exit with. Refuses to nest inside a running job. */
int plait_cli_launch(int nranks, int argc, char **argv, const plait_cli_job_opts *job);

/* For commands that run a training layout (train, bench train): when no
 * launcher started this process and the layout needs dp x tp x pp > 1
 * ranks, check the layout once here (train/preflight.h), then start that
 * many local ranks of argv. Returns 1 when it handled the command (the exit
 * code in *exit_code; `cfg` is freed), 0 when this process should run the
 * command itself as a rank (or the only process). `context` prefixes a
 * preflight error ("train"). */
int plait_cli_launch_layout(plait_config *cfg, const char *context, int argc, char **argv,
                            const plait_cli_job_opts *job, int *exit_code);

/* What every rank of a train or bench train job would refuse alone, said
 * once by the process that starts them (the launcher of a layout, or of
 * -n N): the layout's preflight (train/preflight.h), the masters' and the
 * optimizer's checks (cli/masters_check.h, cli/optim_check.h) and, where
 * `inputs` (ranks start on this host), the files they read at their start:
 * a training job's data and [run] init_from (plait_train_check_inputs), a
 * bench's data (it starts from its own initialisation). PLAIT_OK or the
 * first refusal, for the caller to print with `context`. Not thread-safe
 * (loads plugins, the thread's error slot). */
plait_status plait_cli_check_job(plait_config *cfg, const char *context, int inputs);

/* Where this host's `local` ranks will run ([run] bind, launch/bind.h),
 * printed to stderr before they start; non-zero after printing why it
 * cannot be done (bind = cores on too few cores, a topology file that does
 * not parse). */
int plait_cli_print_placement(const plait_config *cfg, int local, const char *context);

/* For train and bench train, before plait_cli_launch_layout: refuse a
 * layout that does not fit this host's memory (cli/memory_check.h), in the
 * process that would start the ranks (or, under mpirun, srun or torchrun,
 * in each rank, for the ranks on its host); nothing in a rank plait's own
 * launcher started, which checked already. `path` and the overrides are
 * the command's. PLAIT_OK or the error to print. */
plait_status plait_cli_check_memory(plait_config *cfg, const char *path, int n_over, char *const *over,
                                    const plait_cli_job_opts *job);

/* For train and bench train under -n N, in the launcher before any rank
 * starts: the layout's dp x tp x pp must be the ranks -n starts (times
 * --nnodes), said once here rather than by every rank. PLAIT_OK (also
 * without -n, or for an elastic job, whose rounds choose the layout) or
 * PLAIT_ERR_INVALID_CONFIG with the message. */
plait_status plait_cli_check_ranks(const plait_config *cfg, const plait_cli_job_opts *job);

#endif
