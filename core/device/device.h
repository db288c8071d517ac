/*
 * The rank's compute device ([device] plugin, sdk/include/plait/device.h):
 * finding it before any rank starts, opening it once per process, and its
 * memory.
 *
 * A process opens at most one device, after the launcher forked it (CUDA
 * does not survive fork) and before any other plugin is created, and keeps
 * it until exit. Until then, and in commands that open none, tensors are
 * host memory and the kernels are the core's CPU kernels (core/kernels).
 *
 * Memory: plait_device_alloc returns the device's memory (host memory on a
 * device whose memory kind is PLAIT_MEM_HOST), counted under its tag in the
 * rank's memory report (runtime/memory.h) like host allocations. Host code
 * never dereferences it: it goes through the device's kernels and
 * plait_device_copy.
 *
 * Thread-safety: open/close from the main thread before/after everything
 * else; alloc, free, owns and copy from any thread; the rest read state
 * fixed at open. Errors: plait_status with the message set (runtime/error.h).
 */
#ifndef PLAIT_CORE_DEVICE_H
#define PLAIT_CORE_DEVICE_H

#include <stddef.h>
#include <plait/device.h>
#include <plait/host.h>
#include <plait/plugin.h>

#include "config/config.h"

/* Before any rank starts: load [device] plugin, probe it and count its
 * devices (count() never creates a driver context in the caller). None
 * found fails with the plugin's reason ("no CUDA device found (...)") and
 * the key's FILE:LINE; the caller adds what to do, which depends on the
 * command. Nothing is opened. */
plait_status plait_device_preflight(const plait_config *cfg);
/* The same, with the number of devices found in *count. */
plait_status plait_device_preflight_count(const plait_config *cfg, int32_t *count);

/* [run] precision as the SDK's enum. */
plait_precision plait_device_precision(const plait_config *cfg);
/* "fp32", "tf32" or "bf16"; plait_device_precision_parse the reverse
 * (returns 0 and sets *p, or -1 for another word). */
const char *plait_device_precision_name(plait_precision p);
int plait_device_precision_parse(const char *name, plait_precision *p);

/* Open [device] plugin for this process: resolve [device] ordinal (-1 = the
 * local rank modulo the visible devices; an ordinal beyond them fails
 * naming the key) and call the plugin's open(). `host` is the table handed
 * to the plugin. Fails if a device is already open. */
plait_status plait_device_open(const plait_host *host, const plait_config *cfg, int local_rank,
                               int math_threads);
/* Close the open device (nothing if none). Every device allocation must be
 * freed before. */
void plait_device_close(void);

/* The open device: its ops, what open() found, its plugin's descriptor;
 * NULL when none is open. */
const plait_device_ops *plait_device_ops_open(void);
const plait_device_info *plait_device_info_open(void);
const plait_plugin_desc *plait_device_desc_open(void);

/* The open device's table when it has streams and events (ABI 1.4,
 * PLAIT_DEVICE_HAS_EVENTS) and its memory is not host memory, else NULL
 * (no device, the cpu device, or a 1.3 device plugin: everything then
 * follows the compute stream). */
const plait_device_ops *plait_device_events_open(void);

/* The open device's kernels, or NULL when none is open. */
const plait_kernels *plait_device_kernels_open(void);
/* The kernels tensors are computed with: the open device's, else the
 * core's CPU kernels (core/kernels: host memory). */
const plait_kernels *plait_device_kernels(void);

/* Memory kind of tensors: the open device's, PLAIT_MEM_HOST when none. */
plait_mem_kind plait_device_mem_kind(void);

/* `bytes` of tensor memory (aligned to 256 bytes) counted under `tag`:
 * the open device's memory, or host memory (runtime/memory.h) when none is
 * open or the device's memory is host memory. NULL with the error set. */
void *plait_device_alloc(size_t bytes, const char *tag);
/* Alignment the device's page-locked memory is asked for at most: a page,
 * as cudaHostAlloc's (plait/device.h); a larger `align` gets plain host
 * memory. */
#define PLAIT_DEVICE_PINNED_ALIGN 4096
/* `bytes` of page-locked host memory (PLAIT_MEM_HOST_PINNED: host->alloc
 * routes it here), aligned to `align`: the open device's alloc_pinned
 * (cudaHostAlloc on cuda), which its copy() moves at full bus speed; plain
 * host memory where no device is open, the device has none or refuses.
 * Counted under `tag` either way. Host code may dereference it. NULL with
 * the error set when not even host memory is left. */
void *plait_device_alloc_pinned(size_t bytes, size_t align, const char *tag);
/* Free memory from plait_device_alloc, plait_device_alloc_pinned (or from
 * the device through host->alloc); NULL is ignored. Everything the device
 * handed out must be freed before plait_device_close. */
void plait_device_free(void *ptr);
/* 1 if `ptr` is a live allocation of the open device's own allocator
 * (device memory; not its page-locked host memory). */
int plait_device_owns(const void *ptr);
/* 1 if `ptr` is a live block of the open device's page-locked host memory
 * (plait_device_alloc_pinned got it from alloc_pinned, not plain host
 * memory in its place). Thread-safe. */
int plait_device_is_pinned(const void *ptr);

/* Copy through the open device (memcpy when none is open or its memory is
 * host memory). */
plait_status plait_device_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir);

/* A parallel or optim plugin `d` may run on the open device: plugins
 * declaring ABI minor < 3 predate device memory and are refused when the
 * device's memory is not host memory (PLAIT_ERR_ABI, naming the plugin,
 * its minor and the device). */
plait_status plait_device_check_plugin(const plait_plugin_desc *d);

#endif
