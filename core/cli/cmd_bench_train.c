/* plait bench train CONFIG [--steps S] [--warmup W] [--csv FILE] [section.key=value ...] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_train.h"
#include "cli/cli.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

int plait_cli_bench_train(int argc, char **argv, int full_argc, char **full_argv, const plait_cli_job_opts *job);

/* The folder that will hold --csv FILE (written when the benchmark ends)
 * exists and can be written to: checked before any rank starts. */
static int csv_folder_ok(const char *csv) {
    char dir[4096];
    const char *slash = strrchr(csv, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == csv ? 1 : (int)(slash - csv), csv);
    struct stat sb;
    const char *why = stat(dir, &sb) != 0         ? strerror(errno)
                      : !S_ISDIR(sb.st_mode)       ? "not a directory"
                      : access(dir, W_OK | X_OK) ? strerror(errno)
                                                   : NULL;
    if (why) fprintf(stderr, "plait bench train: --csv %s: its folder %s: %s\n", csv, dir, why);
    return why == NULL;
}

int plait_cli_bench_train(int argc, char **argv, int full_argc, char **full_argv, const plait_cli_job_opts *job) {
    plait_bench_train_opts o = {.warmup = 3, .steps = 10, .csv = NULL};
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0;
    const char *bad = NULL; /* the option whose value is missing or wrong */
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n;
        if (!strcmp(a, "--steps") || !strcmp(a, "--warmup")) {
            int steps = !strcmp(a, "--steps");
            if (plait_cli_parse_int(v, steps ? 1 : 0, 1000000, &n) != 0) {
                bad = a;
            } else {
                *(steps ? &o.steps : &o.warmup) = n;
                i++;
            }
        } else if (!strcmp(a, "--csv")) {
            if (!v || !*v) bad = a;
            else o.csv = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "plait bench train: unknown option '%s'; 'plait help bench' lists them\n", a);
            free(over);
            return 2;
        } else {
            plait_cli_take_positional(argv[i], &path, over, &n_over);
        }
    }
    if (bad) {
        const char *v = NULL;
        for (int i = 1; i + 1 < argc && !v; i++)
            if (argv[i] == bad) v = argv[i + 1];
        fprintf(stderr, "plait bench train: %s needs %s%s%s%s\n", bad,
                !strcmp(bad, "--csv")     ? "a file name"
                : !strcmp(bad, "--steps") ? "a whole number of steps in 1..1000000"
                                          : "a whole number of steps in 0..1000000",
                v ? ", not '" : "", v ? v : "", v ? "'" : "");
        free(over);
        return 2;
    }
    if (!path) {
        fprintf(stderr, "usage: plait bench train CONFIG [--steps S>=1] [--warmup W] [--csv FILE] [section.key=value ...]\n");
        free(over);
        return 2;
    }
    if (o.csv && plait_out_check_own(o.csv, plait_bench_train_csv_header, "--csv") != PLAIT_OK) {
        fprintf(stderr, "plait bench train: %s\n", plait_last_error());
        free(over);
        return 2;
    }
    if (o.csv && !csv_folder_ok(o.csv)) {
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
