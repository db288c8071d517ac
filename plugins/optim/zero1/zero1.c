/*
 * ZeRO-1: Adam(W) moments sharded across the DP group. The core keeps full
 * parameters and gradients; after each layer's last backward its gradients
 * are reduce-scattered, every rank updates its slice, and the updated
 * parameters are all-gathered at the end of the step.
 * The engine is shared by the three stages (../common/zero.h); this file is
 * the plugin's descriptor.
 */
#include "zero.h"

static const plait_plugin_desc zero1_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = "zero1",
    .version = "1.0.0",
    .description = "AdamW with moments sharded over DP (ZeRO-1): gradients reduce-scattered, parameters all-gathered",
    .keys = zero_keys,
    .n_keys = 4,
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &zero1_ops,
    .uses = NULL,
};

static const plait_plugin_desc *const zero1_list[] = {&zero1_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                             const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    (void)host;
    *descs = zero1_list;
    *count = 1;
    return PLAIT_OK;
}
