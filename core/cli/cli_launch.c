/* `plait <command> -n N`: the CLI side of the local launcher. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "launch/bootstrap.h"
#include "launch/launch.h"
#include "runtime/error.h"
#include "train/preflight.h"

int plait_cli_launch(int nranks, int argc, char **argv) {
    (void)argc;
    if (getenv("PLAIT_RANK")) {
        fprintf(stderr, "plait: -n is for the outer command: this process is already rank %s of a "
                        "plait job\n", getenv("PLAIT_RANK"));
        return 2;
    }
    plait_launch_opts o = {0};
    o.nranks = nranks;
    o.argv = argv; /* argv[0] stays "plait"; the binary is /proc/self/exe */
    o.stdout_fd = o.stderr_fd = -1;
    const char *g = getenv("PLAIT_LAUNCH_GRACE");
    o.grace_s = g ? atof(g) : 0;
    plait_launch_result res;
    if (plait_launch_local(&o, &res) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 1;
    }
    return res.exit_code;
}

int plait_cli_launch_layout(plait_config *cfg, const char *context, int argc, char **argv, int *exit_code) {
    int64_t world = plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "tp") *
                    plait_config_int(cfg, "parallel", "pp");
    plait_job_env env;
    if (world <= 1 || plait_job_env_detect(NULL, plait_config_str(cfg, "comm", "rendezvous"), &env) != PLAIT_OK ||
        env.launcher != PLAIT_LAUNCHER_NONE)
        return 0;
    /* a layout mistake is reported once, here, not by every rank */
    if (plait_layout_preflight(cfg) != PLAIT_OK) {
        plait_cli_print_error(context);
        *exit_code = 1;
    } else {
        *exit_code = plait_cli_launch((int)world, argc, argv);
    }
    plait_config_free(cfg);
    return 1;
}
