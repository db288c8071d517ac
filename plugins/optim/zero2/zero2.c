/*
 * ZeRO-2: moments and gradients sharded across the DP group. A layer's
 * gradient buffer lives only from its backward to the reduce-scatter that
 * follows (every micro-batch); the rank keeps the running sum of its slice,
 * updates it and all-gathers the parameters at the end of the step.
 * The engine is shared by the three stages (../common/zero.h); this file is
 * the plugin's descriptor.
 */
#include "zero.h"

static const plait_plugin_desc zero2_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = "zero2",
    .version = "1.0.0",
    .description =
        "AdamW with moments and gradients sharded over DP (ZeRO-2): per-layer reduce-scatter during backward",
    .keys = zero_keys + 1,
    .n_keys = 6,
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &zero2_ops,
    .uses = NULL,
};

PLAIT_PLUGIN_DEFINE_ENTRY("optim/zero2", 0, NULL, &zero2_desc)
