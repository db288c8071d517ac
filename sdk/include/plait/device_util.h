/*
 * plait SDK — helpers for device-agnostic parallel and optimizer plugins
 * (ABI 1.3, plait/device.h).
 *
 * The rule: a plugin's tensors (parameters, gradients, optimizer state,
 * gathered or reduced buffers) live in the rank's device memory and the
 * plugin never dereferences them on the host. It allocates them with
 * plait_tensor_alloc (the device's memory kind), computes on them only with
 * host->kernels, moves them with the collectives (plait_tensor_coll_opts
 * names their memory kind) and crosses to host memory only with
 * plait_tensor_to_host / plait_tensor_from_host (host->device->copy). Then
 * the same plugin runs unchanged on the cpu device (host memory) and on a
 * GPU, and its results on the cpu device are the bits it computed before
 * devices existed.
 *
 * Header-only. Every helper also works with a core older than 1.3 (no
 * host->device): tensors are host memory there and the copies are memcpy.
 * Functions returning plait_status set the message with host->set_error
 * (or pass on the one set by the call that failed). Reentrant; the copies
 * follow device.h's thread rules (any thread).
 */
#ifndef PLAIT_DEVICE_UTIL_H
#define PLAIT_DEVICE_UTIL_H

#include <string.h>

#include <plait/host.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the rank has an open device (ABI 1.3 core with host->device). */
static inline int plait_has_device(const plait_host *host) {
    return PLAIT_HOST_HAS(host, device) && PLAIT_HOST_HAS(host, device_info);
}

/* The memory kind of the rank's tensors: the device's, or host memory. */
static inline plait_mem_kind plait_tensor_kind(const plait_host *host) {
    return plait_has_device(host) ? host->device_info->mem_kind : PLAIT_MEM_HOST;
}

/* `numel` floats of tensor memory (uninitialised; at least one element, so
 * an empty tensor still has a distinct pointer), counted under `tag`. NULL
 * with the message set on failure. Free with host->free. */
static inline float *plait_tensor_alloc(const plait_host *host, size_t numel, const char *tag) {
    return (float *)host->alloc((numel ? numel : 1) * sizeof(float), plait_tensor_kind(host), 64, tag);
}

/* `numel` zeroed floats of tensor memory that the core keeps with each
 * checkpoint of this rank under `name` and fills again on a resume of the
 * same layout (host->alloc_kept, ABI 1.10); with an older core, plain
 * zeroed tensor memory, which a resume starts at zero. Free with host->free. */
static inline float *plait_tensor_alloc_kept(const plait_host *host, size_t numel, const char *name,
                                             const char *tag) {
    if (PLAIT_HOST_HAS(host, alloc_kept)) return host->alloc_kept(numel, plait_tensor_kind(host), name, tag);
    float *p = plait_tensor_alloc(host, numel, tag);
    if (p) host->kernels->zero(p, numel ? numel : 1);
    return p;
}

/* Copy `bytes` between tensor memory and host memory (`dir`:
 * PLAIT_COPY_TO_HOST, PLAIT_COPY_TO_DEVICE or PLAIT_COPY_ON_DEVICE). A copy
 * to the host returns when the bytes are there (it orders after every
 * kernel queued before it). */
static inline plait_status plait_tensor_copy(const plait_host *host, void *dst, const void *src, size_t bytes,
                                             plait_copy_dir dir) {
    if (bytes == 0) return PLAIT_OK;
    if (plait_has_device(host)) return host->device->copy(dst, src, bytes, dir);
    memcpy(dst, src, bytes);
    return PLAIT_OK;
}
static inline plait_status plait_tensor_to_host(const plait_host *host, float *dst, const float *src, size_t n) {
    return plait_tensor_copy(host, dst, src, n * sizeof(float), PLAIT_COPY_TO_HOST);
}
static inline plait_status plait_tensor_from_host(const plait_host *host, float *dst, const float *src, size_t n) {
    return plait_tensor_copy(host, dst, src, n * sizeof(float), PLAIT_COPY_TO_DEVICE);
}

/* Collective options for buffers in tensor memory. */
static inline plait_coll_opts plait_tensor_coll_opts(const plait_host *host, plait_coll_algo algo,
                                                     const char *label) {
    plait_coll_opts o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.algo = algo;
    o.mem_kind = plait_tensor_kind(host);
    o.label = label;
    return o;
}

/* Floats a staged transfer moves at once (4 MiB of host memory). */
#define PLAIT_TENSOR_STAGING_FLOATS ((size_t)1 << 20)
/* Its SDK 1.3 name ("stage" alone names a pipeline stage); hidden with the
 * SDK 1.0 names by PLAIT_NO_SDK_1_0_NAMES. */
#ifndef PLAIT_NO_SDK_1_0_NAMES
#define PLAIT_TENSOR_STAGE_FLOATS PLAIT_TENSOR_STAGING_FLOATS
#endif

/* Read elements [offset, offset+count) of tensor `which` of parameter
 * `index` from a value source (which writes host memory: initial values,
 * a checkpoint) into tensor memory `dst`. On a device whose memory is not
 * host memory the values pass through a host buffer of at most
 * PLAIT_TENSOR_STAGING_FLOATS; on host memory the source writes `dst`
 * directly. Returns the source's status: PLAIT_ERR_UNSUPPORTED means the
 * source lacks the tensor (dst may then be partly written: fill it). */
static inline plait_status plait_tensor_read(const plait_host *host, const plait_value_source *src, int32_t index,
                                             const char *which, size_t offset, size_t count, float *dst) {
    if (!src || !src->read) return PLAIT_ERR_UNSUPPORTED;
    if (plait_tensor_kind(host) == PLAIT_MEM_HOST) return src->read(src->ctx, index, which, offset, count, dst);
    size_t chunk = count < PLAIT_TENSOR_STAGING_FLOATS ? count : PLAIT_TENSOR_STAGING_FLOATS;
    float *staging = (float *)host->alloc((chunk ? chunk : 1) * sizeof(float), PLAIT_MEM_HOST_PINNED, 64,
                                        "device staging");
    if (!staging) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (size_t done = 0; done < count && st == PLAIT_OK; done += chunk) {
        size_t n = count - done < chunk ? count - done : chunk;
        st = src->read(src->ctx, index, which, offset + done, n, staging);
        if (st == PLAIT_OK) st = plait_tensor_from_host(host, dst + done, staging, n);
    }
    host->free(staging);
    return st;
}

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_DEVICE_UTIL_H */
