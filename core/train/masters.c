#include "train/masters.h"

#include <stdio.h>

#include <plait/optim.h>

#include "device/device.h"
#include "runtime/error.h"

/* The choices of [optim.zeroN] master, in the order the plugins declare them. */
enum { MASTER_AUTO, MASTER_SHARDED, MASTER_WHOLE };

plait_status plait_check_masters(const plait_config *cfg, uint32_t optim_flags, int bf16_copy, int *sharded) {
    *sharded = 0;
    if (!(optim_flags & PLAIT_OPTIM_SHARDS_MASTERS)) return PLAIT_OK;
    char section[64];
    snprintf(section, sizeof section, "optim.%s", plait_config_str(cfg, "optim", "plugin"));
    plait_value v;
    plait_status st = plait_config_get(cfg, section, "master", &v);
    if (st != PLAIT_OK || v.i == MASTER_WHOLE) return st;
    /* Only where the products read bf16 copies is there a whole copy to
     * gather into; elsewhere the float32 weights are what the model reads. */
    if (bf16_copy) {
        *sharded = 1;
        return PLAIT_OK;
    }
    if (v.i == MASTER_AUTO) return PLAIT_OK;
    const char *where = NULL;
    plait_config_origin(cfg, section, "master", &where);
    const int bf16 = plait_device_precision(cfg) == PLAIT_PRECISION_BF16;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [%s] master = sharded: the model reads float32 weights on this run (%s), so no bf16 "
                           "copy holds them whole; use master = auto (sharded where it applies) or whole",
                           where ? where : "config", section,
                           bf16 ? "its device or layout keeps float32 activations: a device without the bf16 "
                                  "entries, context parallelism on one without bf16 ring attention, or a head "
                                  "size past the fused attention's"
                                : "[run] precision is not bf16");
}
