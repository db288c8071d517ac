#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cpu/blas.h"
#include "launch/launch.h"
#include "launch/rank_report.h"
#include "plugin/loader.h"
#include "runtime/exit_guard.h"
#include "runtime/log.h"
#include "host/host_table.h"

static int run_main(int argc, char **argv) {
    /* A file growing past `ulimit -f` would end the process by SIGXFSZ,
     * silently and leaving its temporary files; ignored, the write fails
     * (EFBIG, "File too large") and is reported and cleaned up like a full
     * disk. */
    signal(SIGXFSZ, SIG_IGN);
    plait_log_init_from_env();
    /* before anything uses the BLAS: may re-execute this process once with
     * OPENBLAS_CORETYPE set (see cpu/blas.h) */
    plait_blas_autoselect(argv);
    if (argc < 2) {
        plait_cli_print_overview(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("plait %s (plugin ABI v%d.%d)\n", PLAIT_VERSION, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        plait_cli_print_overview(stdout);
        return 0;
    }
    const plait_command *c = plait_cli_find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "plait: no command '%s'; 'plait help' lists them\n", argv[1]);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", c->usage);
            return 0;
        }
    /* `-n N` works for every command: this process becomes the launcher of
     * N ranks running the same command line without it. */
    int nranks = 0;
    const char *bad = NULL;
    /* ...except where -n N is the command's own: the ranks the layouts of
     * `plan` and `bench sweep` have (both run as one process; the sweep
     * starts each layout's ranks itself) */
    int own_n = strcmp(argv[1], "plan") == 0 ||
                (argc > 2 && strcmp(argv[1], "bench") == 0 && strcmp(argv[2], "sweep") == 0);
    if (!own_n && plait_launch_take_nranks(&argc, argv, &nranks, &bad) != 0) {
        fprintf(stderr, "plait: %s\n", bad);
        return 2;
    }
    plait_cli_job_opts job;
    if (plait_cli_take_job_options(&argc, argv, &job, &bad) != 0) {
        fprintf(stderr, "plait: %s\n", bad);
        return 2;
    }
    job.local_ranks = nranks;
    plait_host_install();
    if (nranks > 0) {
        /* one check for the whole job, not the same error from every rank */
        int rc = c->before_launch ? c->before_launch(argc - 1, argv + 1, &job) : 0;
        plait_host_uninstall();
        return rc ? rc : plait_cli_launch(nranks, argc, argv, &job);
    }
    /* From here on this process runs plugins and libraries: one of them
     * calling exit(0) would pass for a rank that finished (runtime/exit_guard.h). */
    char command[64];
    snprintf(command, sizeof command, "plait %s", c->name);
    plait_exit_guard_arm(command, plait_launch_report_error);
    int rc = c->run(argc - 1, argv + 1, &job);
    plait_host_uninstall();
    plait_exit_guard_disarm();
    return rc;
}

int main(int argc, char **argv) {
    int rc = run_main(argc, argv);
    /* Returning from here is how every command ends; a rank of plait's
     * launcher that ends any other way (an _exit(0) in a plugin or a
     * library, which the exit guard cannot see) has not marked itself
     * finished and counts as failed (launch/launch.h). */
    plait_launch_report_finished();
    return rc;
}
