/* plait train CONFIG [section.key=value ...] [--resume] [--eval-only] [--progress MODE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/restart.h"
#include "runtime/error.h"
#include "train/train_loop.h"

static int cmd_train(int argc, char **argv, const plait_cli_job_opts *job) {
    const char *path = NULL, *progress = NULL;
    plait_train_options opts = {.resume = PLAIT_RESUME_FROM_CONFIG};
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--resume") == 0) {
            opts.resume = PLAIT_RESUME_REQUIRED;
        } else if (strcmp(argv[i], "--eval-only") == 0) {
            opts.eval_only = 1;
            if (opts.resume != PLAIT_RESUME_REQUIRED) opts.resume = PLAIT_RESUME_IF_ANY;
        } else if (strcmp(argv[i], "--progress") == 0 && i + 1 < argc) {
            progress = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "plait train: unknown option '%s'; 'plait help train' lists them\n", argv[i]);
            free(over);
            return 2;
        } else {
            plait_cli_take_positional(argv[i], &path, over, &n_over);
        }
    }
    if (!path) {
        fprintf(stderr, "usage: plait train CONFIG [section.key=value ...] [--resume]\n");
        free(over);
        return 2;
    }
    plait_config *cfg = NULL;
    plait_status loaded = plait_cli_load_config(path, n_over, over, &cfg);
    if (loaded != PLAIT_OK) {
        plait_cli_print_error("train"); /* its errors name the file */
        free(over);
        return plait_restart_failure_exit(loaded);
    }
    /* a layout that cannot fit is refused before any rank starts */
    if (plait_cli_check_memory(cfg, path, n_over, over, job) != PLAIT_OK) {
        plait_cli_print_error("train");
        plait_config_free(cfg);
        free(over);
        return 1;
    }
    free(over);
    /* Not started by any launcher and the layout needs several ranks: this
     * process becomes the local launcher of that many (argv - 1 is the full
     * command line: commands receive the program's argv from index 1). */
    int code;
    if (plait_cli_launch_layout(cfg, "train", argc + 1, argv - 1, job, &code)) return code;
    opts.progress = progress;
    int regrouped = 0;
    opts.regrouped = &regrouped;
    plait_status st = plait_train(cfg, &opts);
    if (st != PLAIT_OK) plait_cli_print_error("train");
    plait_config_free(cfg);
    return st != PLAIT_OK ? plait_restart_failure_exit(st) : regrouped ? PLAIT_RESTART_REGROUP_EXIT : 0;
}

/* `plait train CONFIG -n N`: the layout's preflight, the masters', the
 * optimizer's and the memory check, once, before the ranks start (they
 * skip the memory check: their launcher checked). */
static int train_before_launch(int argc, char **argv, const plait_cli_job_opts *job) {
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0, rc = 0;
    if (!over) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--progress") == 0) i++;
        else if (argv[i][0] != '-') plait_cli_take_positional(argv[i], &path, over, &n_over);
    }
    plait_config *cfg = NULL;
    if (path && plait_cli_load_config(path, n_over, over, &cfg) == PLAIT_OK &&
        plait_cli_check_ranks(cfg, job) != PLAIT_OK) {
        plait_cli_print_error("train");
        rc = 2;
    }
    /* what every rank would refuse alone, once, as the launcher of a
     * layout says it; the files only where ranks start here */
    if (rc == 0 && cfg && plait_cli_check_job(cfg, "train", job->local_ranks > 0) != PLAIT_OK) {
        plait_cli_print_error("train");
        rc = 1;
    }
    if (rc == 0 && cfg && plait_cli_check_memory(cfg, path, n_over, over, job) != PLAIT_OK) {
        plait_cli_print_error("train");
        rc = 1;
    }
    if (rc == 0 && cfg && job->local_ranks > 0 && plait_cli_print_placement(cfg, job->local_ranks, "train")) rc = 2;
    plait_clear_error(); /* a config error is the ranks' to report */
    plait_config_free(cfg);
    free(over);
    return rc;
}

const plait_command plait_cmd_train = {
    "train", "train a model: plait train CONFIG [section.key=value ...] [--resume]",
    "usage: plait train CONFIG [section.key=value ...] [--resume] [--eval-only] [--progress auto|tty|plain|off]\n"
    "                   [--max-restarts K] [--nnodes N --node-rank K | --nnodes MIN:MAX]\n\n"
    "Trains the model CONFIG describes. A layout of dp x tp x pp > 1 ranks starts that many local\n"
    "ranks over the comm plugin (TCP by default); under mpirun, srun or a torchrun-style environment\n"
    "this process is one rank of the job instead. Rank 0 shows progress; every rank logs to\n"
    "<out_dir>/rank-<r>.log; rank 0 writes <out_dir>/metrics.csv and the checkpoints\n"
    "<out_dir>/ckpt-<step>/ (every [run] ckpt_every steps and at the end).\n\n"
    "  --resume       continue from the latest complete checkpoint in out_dir (it must exist);\n"
    "                 any layout resumes any other layout's checkpoint\n"
    "  --eval-only    no training: the validation loss and perplexity of the state the run starts\n"
    "                 from (its latest checkpoint, [run] init_from, or the initialisation) over\n"
    "                 [run] eval_batches micro-batches of the validation split ([data] val_path,\n"
    "                 or the tail by val_fraction); nothing is saved\n"
    "  --progress M   progress display (step, loss, lr, tokens/s, MFU, ETA): auto (in place on a\n"
    "                 terminal), tty, plain, off; MFU is against [run] mfu_peak GFLOP/s, or an\n"
    "                 SGEMM peak measured at start when that is 0\n"
    "  --max-restarts K  when a rank fails, stop the job, then relaunch every rank from the latest\n"
    "                 complete checkpoint, up to K times ([run] max_restarts; logged in rank 0's log,\n"
    "                 the restarts column of metrics.csv and on stderr)\n"
    "  --nnodes N --node-rank K  one launcher per host: this host starts its share of the layout's\n"
    "                 ranks; rank 0's host from MASTER_ADDR/MASTER_PORT (or [comm] rendezvous, or a\n"
    "                 Slurm allocation's first node), the same PLAIT_JOB_TOKEN on every host\n"
    "                 (docs/multi-node.md)\n"
    "  --nnodes MIN:MAX  an elastic job, one launcher per host: it starts with MIN to MAX hosts\n"
    "                 (the config's layout is the job at MAX) and goes on with the hosts that\n"
    "                 remain when one is lost, or grows when one joins, from the latest\n"
    "                 checkpoint, or from the replicas in memory with [run] replica_every\n"
    "  section.key=value  override any config key, e.g. optim.lr=3e-4 run.steps=50\n",
    cmd_train, train_before_launch};
