/* What an optimizer's ABI allows of a layout with experts and of the learning-rate schedules (optim_abi.h). */
#include "train/optim_abi.h"

#include <string.h>

#include <plait/optim.h>

#include "runtime/error.h"

int plait_lr_schedule_minor(const plait_config *cfg) {
    const char *s = plait_config_str(cfg, "optim", "lr_schedule");
    return strcmp(s, "cosine") != 0 && strcmp(s, "constant") != 0 ? 36 : 0;
}

plait_status plait_check_optim_abi(const plait_config *cfg, int tp, int ep, uint32_t optim_flags, uint16_t abi_minor) {
    /* the schedules of ABI 1.36: a plugin declaring less may carry the
     * older plait/optim_util.h, whose helper reads every unknown name as
     * cosine, so it would train on another schedule than the one set */
    const int need = plait_lr_schedule_minor(cfg);
    if (abi_minor < need) {
        const char *where = "";
        plait_config_origin(cfg, "optim", "lr_schedule", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [optim] lr_schedule = %s with [optim] plugin = %s: the plugin declares ABI 1.%u, "
                               "before that schedule (plait/optim_util.h, 1.%d), and may read it as cosine "
                               "(allowed: an optimizer declaring 1.%d, as adam, zero1, zero2, zero3; or lr_schedule "
                               "= cosine or constant)",
                               where, plait_config_str(cfg, "optim", "lr_schedule"),
                               plait_config_str(cfg, "optim", "plugin"), (unsigned)abi_minor, need, need);
    }
    /* an optimizer that reduces the gradients itself must know the group
     * holding the same experts (plait_optim_init.edp_comm, ABI 1.20), or it
     * would sum and shard an expert tensor over ranks holding other experts */
    const int no_group = ep > 1 && (optim_flags & PLAIT_OPTIM_REDUCES_GRADS) && abi_minor < 20;
    /* at tp × ep an expert slice is cut twice, and an optimizer built
     * before that (ABI 1.28) counts it in the norm on tp rank 0 alone */
    const int cut_once = ep > 1 && tp > 1 && abi_minor < 28;
    if (!no_group && !cut_once) return PLAIT_OK;
    const char *where = "", *plugin = plait_config_str(cfg, "optim", "plugin");
    plait_config_origin(cfg, "parallel", no_group ? "ep" : "tp", &where);
    if (no_group)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel] ep = %d with [optim] plugin = %s: the plugin reduces the gradients "
                               "itself and declares ABI 1.%u, before the experts' group (plait_optim_init.edp_comm, "
                               "1.20), so it would sum expert tensors over ranks holding other experts (allowed with "
                               "ep > 1: an optimizer declaring 1.20, as adam, zero1, zero2, zero3; or ep = 1)",
                               where, ep, plugin, (unsigned)abi_minor);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [parallel] tp = %d with ep = %d and [optim] plugin = %s: the plugin declares ABI "
                           "1.%u, before an expert tensor cut over both (plait_plan.second_shards, 1.28), so its "
                           "gradient norm would miss the tp ranks' slices of the experts (allowed with tp x ep: an "
                           "optimizer declaring 1.28, as adam, zero1, zero2, zero3; or tp = 1, or ep = 1)",
                           where, tp, ep, plugin, (unsigned)abi_minor);
}
