/* plait bench train CONFIG [--steps S] [--warmup W] [--csv FILE] [section.key=value ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_train.h"
#include "cli/cli.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

int plait_cli_bench_train(int argc, char **argv, int full_argc, char **full_argv, const plait_cli_job_opts *job);

int plait_cli_bench_train(int argc, char **argv, int full_argc, char **full_argv, const plait_cli_job_opts *job) {
    plait_bench_train_opts o = {.warmup = 3, .steps = 10, .csv = NULL};
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--steps") && v) {
            o.steps = atoll(argv[++i]);
        } else if (!strcmp(a, "--warmup") && v) {
            o.warmup = atoll(argv[++i]);
        } else if (!strcmp(a, "--csv") && v) {
            o.csv = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "plait bench train: unknown option '%s'; 'plait help bench' lists them\n", a);
            free(over);
            return 2;
        } else {
            plait_cli_take_positional(argv[i], &path, over, &n_over);
        }
    }
    if (!path || o.steps < 1 || o.warmup < 0) {
        fprintf(stderr, "usage: plait bench train CONFIG [--steps S>=1] [--warmup W] [--csv FILE] [section.key=value ...]\n");
        free(over);
        return 2;
    }
    if (o.csv && plait_out_check_own(o.csv, plait_bench_train_csv_header, "--csv") != PLAIT_OK) {
        fprintf(stderr, "plait bench train: %s\n", plait_last_error());
        free(over);
        return 2;
    }
    plait_config *cfg = NULL;
    if (plait_cli_load_config(path, n_over, over, &cfg) != PLAIT_OK) {
        plait_cli_print_error("bench train"); /* its errors name the file */
        free(over);
        return 1;
    }
    if (plait_cli_check_memory(cfg, path, n_over, over, job) != PLAIT_OK) {
        plait_cli_print_error("bench train");
        plait_config_free(cfg);
        free(over);
        return 1;
    }
    free(over);
    int code;
    if (plait_cli_launch_layout(cfg, "bench train", full_argc, full_argv, job, &code)) return code;
    plait_status st = plait_bench_train_run(cfg, &o, stdout);
    if (st != PLAIT_OK) plait_cli_print_error("bench train");
    plait_config_free(cfg);
    return st == PLAIT_OK ? 0 : 1;
}
