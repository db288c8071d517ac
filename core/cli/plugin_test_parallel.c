/* plait plugin test on a parallel plugin: writes the kit's configuration,
 * trains one process as the reference, then checks every layout the
 * plugin's axes allow (plans here, losses through `plait train` children).
 * The checks live in core/conformance/kit_parallel.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <plait/parallel.h>

#include "cli/cli.h"
#include "cli/plugin_test.h"
#include "conformance/kit_parallel.h"
#include "conformance/kit_report.h"
#include "runtime/error.h"
#include "runtime/scratch_dir.h"
#include "runtime/self_child.h"

/* `plait train INI over... extra...` with its output in LOG; 0 when it exited 0. */
static int train_child(const char *ini, int n_over, char *const *over, const char *const *extra, const char *log) {
    const char *argv[96];
    int a = 0;
    argv[a++] = "plait";
    argv[a++] = "train";
    argv[a++] = ini;
    for (int i = 0; i < n_over && a < 80; i++) argv[a++] = over[i];
    for (int i = 0; extra[i] && a < 95; i++) argv[a++] = extra[i];
    argv[a] = NULL;
    return plait_self_child_run(argv, log) == 0 ? 0 : -1;
}

int plait_cli_plugin_test_parallel(const char *path, const plait_plugin_desc *d, int n_over, char *const *over) {
    const plait_parallel_ops *ops = d->ops;
    char ini[4096], work[4096];
    if (plait_scratch_dir_make("plait-kit", work, sizeof work) != PLAIT_OK) {
        fprintf(stderr, "plait plugin test: %s\n", plait_last_error());
        return 1;
    }
    if (kit_parallel_write_config(work, ini, sizeof ini) != 0) {
        plait_cli_print_error("plugin test");
        return 1;
    }
    kit_report *rep = calloc(1, sizeof *rep);
    if (!rep) return 1;
    snprintf(rep->title, sizeof rep->title,
             "plait plugin test: parallel/%s %s (needs ABI %u.%u; this plait %d.%d), axes%s%s%s\n  %s\n  work: %s",
             d->name, d->version, d->abi_major, d->abi_minor, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR,
             ops->axes & PLAIT_PARALLEL_AXIS_DP ? " dp" : "", ops->axes & PLAIT_PARALLEL_AXIS_TP ? " tp" : "",
             ops->axes & PLAIT_PARALLEL_AXIS_PP ? " pp" : "", path, work);

    /* the reference: one process with plait's own dp plugin */
    char base_dir[4200], base_log[4200], base_csv[4300], od[4300];
    snprintf(base_dir, sizeof base_dir, "%s/one-process", work);
    snprintf(base_log, sizeof base_log, "%s.log", base_dir);
    snprintf(base_csv, sizeof base_csv, "%s/metrics.csv", base_dir);
    snprintf(od, sizeof od, "run.out_dir=%s", base_dir);
    const char *base_extra[] = {"parallel.plugin=dp", "parallel.dp=1", od, NULL};
    int base_ok = train_child(ini, 0, NULL, base_extra, base_log) == 0;
    if (!base_ok) {
        char last[300];
        plait_file_last_line(base_log, last, sizeof last);
        kit_report_add(rep, "one process", "losses", KIT_FAIL, "the reference run failed: %s (%s)", last, base_log);
    }

    int sizes[KIT_PARALLEL_MAX_LAYOUTS][3];
    int n = kit_parallel_layouts(ops->axes, sizes);
    for (int i = 0; i < n; i++) {
        char layout[32], plug[4200], sdp[32], stp[32], spp[32];
        /* named by the axes it uses: "dp2", "tp2pp2" */
        layout[0] = 0;
        static const char *const axis[3] = {"dp", "tp", "pp"};
        for (int x = 0; x < 3; x++)
            if (sizes[i][x] > 1)
                snprintf(layout + strlen(layout), sizeof layout - strlen(layout), "%s%d", axis[x], sizes[i][x]);
        snprintf(plug, sizeof plug, "parallel.plugin=%s", path);
        snprintf(sdp, sizeof sdp, "parallel.dp=%d", sizes[i][0]);
        snprintf(stp, sizeof stp, "parallel.tp=%d", sizes[i][1]);
        snprintf(spp, sizeof spp, "parallel.pp=%d", sizes[i][2]);
        /* plans: the user's overrides, then the layout */
        char **all = calloc((size_t)n_over + 5, sizeof *all);
        if (!all) break;
        for (int k = 0; k < n_over; k++) all[k] = over[k];
        all[n_over] = plug, all[n_over + 1] = sdp, all[n_over + 2] = stp, all[n_over + 3] = spp;
        plait_config *cfg = NULL;
        char name[48];
        snprintf(name, sizeof name, "plan %s", layout);
        if (plait_cli_load_config(ini, n_over + 4, all, &cfg) != PLAIT_OK)
            kit_report_add(rep, name, "plan", KIT_FAIL, "configuration: %s", plait_last_error());
        else
            plait_kit_parallel_plans(cfg, layout, rep);
        plait_config_free(cfg);
        free(all);
        /* losses: the same layout trained */
        char run_dir[4200], run_log[4300], run_csv[4300], rod[4300];
        snprintf(run_dir, sizeof run_dir, "%s/dp%d-tp%d-pp%d", work, sizes[i][0], sizes[i][1], sizes[i][2]);
        snprintf(run_log, sizeof run_log, "%s.log", run_dir);
        snprintf(run_csv, sizeof run_csv, "%s/metrics.csv", run_dir);
        snprintf(rod, sizeof rod, "run.out_dir=%s", run_dir);
        const char *extra[] = {plug, sdp, stp, spp, rod, NULL};
        snprintf(name, sizeof name, "losses %s", layout);
        if (!base_ok)
            kit_report_add(rep, name, "losses", KIT_SKIP, "skipped: no reference run");
        else if (train_child(ini, n_over, over, extra, run_log) != 0) {
            char last[300];
            plait_file_last_line(run_log, last, sizeof last);
            kit_report_add(rep, name, "losses", KIT_FAIL, "training failed: %s (%s)", last, run_log);
        } else
            plait_kit_parallel_losses(layout, base_csv, run_csv, sizes[i][1] > 1 ? 1e-5 : 0.0, rep);
    }
    kit_report_print(rep, stdout);
    int rc = kit_report_failures(rep) ? 1 : 0;
    if (rc)
        printf("plait plugin test: %s FAILED (runs and logs kept in %s)\n", path, work);
    else {
        printf("plait plugin test: %s passed every check on %d layouts\n", path, n);
        if (plait_scratch_dir_remove(work) != PLAIT_OK) fprintf(stderr, "plait plugin test: %s\n", plait_last_error());
    }
    free(rep);
    return rc;
}
