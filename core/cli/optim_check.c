/* The optimizer against a layout with experts and the schedule, before any rank starts (cli/optim_check.h). */
#include "cli/optim_check.h"

#include <plait/optim.h>

#include "plugin/loader.h"
#include "runtime/error.h"
#include "train/optim_abi.h"

plait_status plait_cli_check_optim(const plait_config *cfg) {
    const int ep = (int)plait_config_int(cfg, "parallel", "ep");
    if (ep <= 1 && plait_lr_schedule_minor(cfg) == 0) return PLAIT_OK; /* nothing to ask the plugin */
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, plait_config_str(cfg, "optim", "plugin"));
    if (!d || !d->ops) {
        plait_clear_error(); /* the ranks load it, and say why it does not */
        return PLAIT_OK;
    }
    const plait_optim_ops *ops = d->ops;
    return plait_check_optim_abi(cfg, (int)plait_config_int(cfg, "parallel", "tp"), ep, ops->flags, d->abi_minor);
}
