/*
 * The cpu device ([device] plugin = cpu, the default): tensors in host
 * memory, computed by plait's CPU kernels (core/kernels, linked into this
 * plugin as a static library; libplait has its own copy for its host-side
 * math). Every call completes before it returns, so there is nothing to
 * synchronise: its two streams (plait/device.h, ABI 1.4) are the calling
 * threads, and every event is complete when recorded.
 *
 * open() sizes the kernels' thread pool to the rank's math threads and sets
 * their precision: fp32, or bf16 (oneDNN's bf16 matmul or the BLAS's
 * cblas_sbgemm, core/kernels/kernels_bf16.c; with [run] debug_bf16_emulate the operands rounded to bf16 and multiplied in fp32).
 * The core has already checked bf16 against the CPU's features before any
 * rank started (core/train/precision.c); tf32 has no CPU form.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <plait/device.h>
#include <plait/host.h>
#include <plait/plugin.h>

#include "kernels/kernels.h"

/* Each block carries its size in front, so memory_stats can count frees. */
#define HEADER 256

static const plait_host *g_host;
static _Atomic uint64_t g_in_use, g_peak;

static plait_status cpu_count(const plait_host *host, int32_t *out) {
    (void)host;
    *out = 1;
    return PLAIT_OK;
}

static plait_status cpu_open(const plait_host *host, const plait_device_open_args *args, plait_device_info *info) {
    g_host = host;
    plait_kernels_set_log(host->log);
    int mode = PLAIT_KERNELS_FP32;
    if (args->precision == PLAIT_PRECISION_TF32)
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "tf32 is a format of NVIDIA GPUs' tensor cores; the cpu device "
                                                      "runs fp32 or bf16");
    if (args->precision == PLAIT_PRECISION_BF16) {
        plait_value emulate = {0};
        if (args->cfg && host->config_get(args->cfg, "run", "debug_bf16_emulate", &emulate) == PLAIT_OK && emulate.i)
            mode = PLAIT_KERNELS_BF16_EMULATED;
        else
            mode = PLAIT_KERNELS_BF16;
    }
    char why[768];
    if (plait_kernels_set_precision(mode) != 0) {
        plait_kernels_bf16_native(NULL, 0, why, sizeof why);
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "bf16: %s", why);
    }
    if (plait_kernels_set_gemm(NULL, why, sizeof why) != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG, "the cpu's matrix products: %s", why);
    plait_kernels_set_threads(args->math_threads);
    plait_device_info mine = {.struct_size = sizeof mine, .mem_kind = PLAIT_MEM_HOST, .ordinal = -1};
    snprintf(mine.name, sizeof mine.name, "cpu");
    plait_fill_versioned(info, &mine, sizeof mine);
    return PLAIT_OK;
}

static void cpu_close(void) {
    plait_kernels_set_threads(1); /* stops the workers */
    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    plait_kernels_set_gemm("blas", NULL, 0);
}

static void *cpu_alloc(size_t bytes, const char *tag) {
    char *base = g_host->alloc(bytes + HEADER, PLAIT_MEM_HOST, HEADER, tag);
    if (!base) return NULL;
    memcpy(base, &bytes, sizeof bytes);
    uint64_t now = atomic_fetch_add(&g_in_use, bytes) + bytes, peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
    }
    return base + HEADER;
}

static void cpu_free(void *ptr) {
    if (!ptr) return;
    char *base = (char *)ptr - HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&g_in_use, bytes);
    g_host->free(base);
}

static plait_status cpu_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    (void)dir;
    if (bytes) memmove(dst, src, bytes);
    return PLAIT_OK;
}

static plait_status cpu_fill_zero(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
    return PLAIT_OK;
}

static plait_status cpu_synchronize(void) { return PLAIT_OK; }

/* ---- streams and events (ABI 1.4): all work is done when queued ---------- */

/* Every event is this one token: there is no state to tell apart. */
static char g_event_token;

static plait_device_event *cpu_event_create(void) { return (plait_device_event *)(void *)&g_event_token; }
static void cpu_event_destroy(plait_device_event *ev) { (void)ev; }
static plait_status cpu_event_at(plait_device_event *ev, plait_device_stream stream) {
    (void)ev;
    (void)stream;
    return PLAIT_OK;
}
static plait_status cpu_event_synchronize(plait_device_event *ev) {
    (void)ev;
    return PLAIT_OK;
}
static plait_status cpu_copy_on(plait_device_stream stream, void *dst, const void *src, size_t bytes,
                                plait_copy_dir dir) {
    (void)stream;
    return cpu_copy(dst, src, bytes, dir);
}
static void *cpu_event_native(plait_device_event *ev) {
    (void)ev;
    return NULL;
}

static void cpu_memory_stats(uint64_t *in_use, uint64_t *peak) {
    *in_use = atomic_load(&g_in_use);
    *peak = atomic_load(&g_peak);
}

static const plait_device_ops cpu_ops = {
    .struct_size = sizeof(plait_device_ops),
    .count = cpu_count,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .synchronize = cpu_synchronize,
    .memory_stats = cpu_memory_stats,
    .kernels = plait_kernels_table,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_at,
    .event_wait = cpu_event_at,
    .event_synchronize = cpu_event_synchronize,
    .copy_on = cpu_copy_on,
    .event_native = cpu_event_native,
};

static const plait_plugin_desc cpu_desc = {
    PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_DEVICE, "cpu", PLAIT_ABI_MINOR),
    .version = "1.0.0",
    .description = "the CPU: host memory, plait's threaded, deterministic CPU kernels (OpenBLAS)",
    .ops = &cpu_ops,
};

PLAIT_PLUGIN_DEFINE_ENTRY("device/cpu", 3, NULL, &cpu_desc)
