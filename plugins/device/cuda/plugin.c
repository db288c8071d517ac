/*
 * The cuda device plugin: its descriptor, [device.cuda] keys, probe and
 * count, and the plait_device_ops table.
 *
 * Loading this file must work on any machine with the CUDA toolkit's
 * runtime: loading libcudart initialises nothing (it loads libcuda.so.1
 * itself on the first CUDA call, which only open() makes) and cuBLASLt is
 * loaded by open() (lt.c). probe() and
 * count() read the driver's files only (plugins/common/nvidia) and make no CUDA call, so
 * the launcher may ask before it forks ranks.
 */
#include <string.h>

#include <plait/plugin.h>

#include "nvidia_gpus.h"
#include "pcuda.h"

#ifndef PC_PLUGIN_DESCRIPTION
#define PC_PLUGIN_DESCRIPTION \
    "one NVIDIA GPU: device memory, CUDA kernels, cuBLASLt GEMMs (fp32, tf32, bf16 operands)"
#endif

#define P(k, type, def, lo, hi, flags, doc) {sizeof(plait_key_decl), (flags), (k), (type), (def), (lo), (hi), NULL, (doc)}

static const plait_key_decl g_keys[] = {
    P("workspace_mib", PLAIT_KEY_INT, PLAIT_STRINGIFY(PC_WORKSPACE_MIB), 0, 4096, 0,
      "cuBLASLt workspace in MiB, allocated once at open (0 = none: fewer GEMM algorithms qualify); the same "
      "size on every run keeps the chosen algorithms, and so the results, the same"),
    P("scratch_mib", PLAIT_KEY_INT, PLAIT_STRINGIFY(PC_SCRATCH_MIB), 0, 4096, 0,
      "the kernels' column-sum scratch in MiB, allocated when the device opens, so a step's device memory is "
      "known from its start; a call that needs more grows it in stream order"),
    P("profile", PLAIT_KEY_STRING, "", 0, 0, 0,
      "a file for where the compute stream's time goes, written when the device closes: each kernel launch, "
      "product (by shape) and kernel-table entry with its calls, total and median time (\"%p\" in the name: "
      "the process id; empty = none, and nothing is recorded)"),
};

/* None found is not a failure of count() (plait/device.h): *out = 0 and
 * the reason set, phrased as the whole message the core prints. */
static plait_status cuda_count(const plait_host *host, int32_t *out) {
    char why[512];
    int n = nvidia_visible_gpus(why, sizeof why);
    *out = n > 0 ? n : 0;
    if (n <= 0) (void)host->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (%s)", why);
    return PLAIT_OK;
}

static plait_status cuda_probe(const plait_host *host) {
    char why[512];
    if (nvidia_visible_gpus(why, sizeof why) > 0) return PLAIT_OK;
    return host->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (%s)", why);
}

static const plait_kernels *cuda_kernels(void) { return pc.is_open ? pc_kernels() : NULL; }

static const plait_device_ops g_ops = {
    .struct_size = sizeof(plait_device_ops),
    .count = cuda_count,
    .open = pc_open,
    .close = pc_close,
    .alloc = pc_alloc,
    .free = pc_free,
    .copy = pc_copy,
    .fill_zero = pc_fill_zero,
    .synchronize = pc_synchronize,
    .memory_stats = pc_memory_stats,
    .kernels = cuda_kernels,
    .alloc_pinned = pc_alloc_pinned,
    .free_pinned = pc_free_pinned,
    .event_create = pc_event_create,
    .event_destroy = pc_event_destroy,
    .event_record = pc_event_record,
    .event_wait = pc_event_wait,
    .event_synchronize = pc_event_synchronize,
    .copy_on = pc_copy_on,
    .event_native = pc_event_native,
    .trace_begin = pc_trace_begin,
    .trace_end = pc_trace_end,
};

static const plait_plugin_desc g_desc = {
    PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_DEVICE, PC_PLUGIN_NAME, 3),
    .version = "0.1.0",
    .description = PC_PLUGIN_DESCRIPTION,
    .keys = g_keys,
    .n_keys = sizeof g_keys / sizeof g_keys[0],
    .key_size = sizeof(plait_key_decl),
    .probe = cuda_probe,
    .ops = &g_ops,
    .uses = NULL,
    .report = pc_report,
};

PLAIT_PLUGIN_DEFINE_ENTRY("device/cuda", 3, &pc.host, &g_desc)
