/*
 * The check that the plugins' calls left the process as it was when the run
 * began to open (run.h): the set-up, each step, a checkpoint and the
 * memory report all compare through it.
 */
#include <stdio.h>

#include "train/run.h"

plait_status plait_run_check_process(const plait_run *run, const char *when) {
    static const char *const kinds[] = {"comm", "parallel", "optim", "device"};
    char subject[512];
    int n = snprintf(subject, sizeof subject, "%s into the plugins", when);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && n > 0 && (size_t)n < sizeof subject; k++)
        n += snprintf(subject + n, sizeof subject - (size_t)n, "%s '%s' (%s)", k ? "," : "",
                      plait_config_str(run->cfg, kinds[k], "plugin"), kinds[k]);
    return plait_process_state_refuse(&run->process, subject, "");
}
