/*
 * ZeRO-3: moments, gradients and parameters sharded across the DP group. A
 * layer's parameters are all-gathered before its forward and again before its
 * backward and freed after; the next layers' gathers are prefetched
 * ([optim.zero3] prefetch_layers). Gradients are reduce-scattered as in ZeRO-2.
 * The engine is shared by the three stages (../common/zero.h); this file is
 * the plugin's descriptor.
 */
#include "zero.h"

static const plait_plugin_desc zero3_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = "zero3",
    .version = "1.0.0",
    .description =
        "AdamW with moments, gradients and parameters sharded over DP (ZeRO-3): per-layer all-gather with prefetch",
    .keys = zero_keys + 3,
    .n_keys = 5,
    .key_size = sizeof(plait_key_decl),
    .probe = NULL,
    .ops = &zero3_ops,
    .uses = NULL,
};

PLAIT_PLUGIN_DEFINE_ENTRY("optim/zero3", 0, NULL, &zero3_desc)
