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
    .n_keys = 7,
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &zero1_ops,
    .uses = NULL,
};

PLAIT_PLUGIN_DEFINE_ENTRY("optim/zero1", 0, NULL, &zero1_desc)
