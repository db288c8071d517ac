/*
 * The device as the communicators see it: its memory kind, its copy
 * function, its memory allocator, and its streams and events. The staging
 * of device buffers for host-memory transports needs the copy (coll_staging.c,
 * staging.h); host control data (a loss, a norm, a barrier) on a
 * transport that moves device memory only (nccl) needs device scratch
 * memory as well.
 *
 * A communicator is handed its device when it is created
 * (plait_comm_settings.device; by default the rank's open device when its
 * memory is not host memory: plait_comm_device_open) and keeps it; its
 * splits inherit it. Tests hand a stand-in. Without one, device-kind
 * buffers are refused with a message instead of being dereferenced. Every
 * function below takes the communicator's device (plait_comm_device_of;
 * NULL: none).
 *
 * Thread-safety: a record is read-only once handed over; the functions may
 * be called from any thread.
 */
#ifndef PLAIT_CORE_COMM_DEVICE_H
#define PLAIT_CORE_COMM_DEVICE_H

#include <plait/comm.h>
#include <plait/device.h>

/* Copy `bytes` in the device's stream order (plait_device_ops.copy). */
typedef plait_status (*plait_comm_copy_fn)(void *dst, const void *src, size_t bytes, plait_copy_dir dir);

typedef struct plait_comm_device {
    plait_mem_kind kind;      /* plait_device_info.mem_kind */
    plait_comm_copy_fn copy;  /* plait_device_ops.copy */
    /* device memory (plait_device_ops.alloc/free); may be NULL, and then
     * host buffers cannot cross a transport that moves device memory only */
    void *(*alloc)(size_t bytes, const char *tag);
    void (*free)(void *ptr);
    /* the device's table when it has streams and events (plait/device.h,
     * ABI 1.4), else NULL: then every copy follows the compute stream */
    const plait_device_ops *events;
} plait_comm_device;

/* The rank's open device (core/device) as a communicator takes it: 1 and
 * *out filled, or 0 when none is open or its memory is host memory. */
int plait_comm_device_open(plait_comm_device *out);

/* The ready event of a collective or send/receive of device memory
 * (plait_coll_opts.ready, plait/device.h): the caller's, or, where it named
 * none, a new one recorded now on the compute stream (*owned = 1: release
 * it with plait_comm_ready_release once the operation is over). NULL when
 * the memory is host memory, the device has no events, or the event could
 * not be made (logged): the operation's copies then follow the compute
 * stream as on a 1.3 device. Call on the issuing thread, at the call. */
plait_device_event *plait_comm_ready_take(const plait_comm_device *dev, plait_mem_kind kind,
                                          plait_device_event *given, int *owned);
void plait_comm_ready_release(const plait_comm_device *dev, plait_device_event *ev, int owned);

/* Before an operation with ready event `ev` (non-NULL) touches its device
 * buffers from this thread: block this thread (only) until ev's point of
 * the compute stream completed. */
plait_status plait_comm_ready_wait(const plait_comm_device *dev, plait_device_event *ev);

/* Make the compute stream wait on the device for `ev` (a completion mark
 * recorded by the comm plugin: plait_comm_done_mark); no host thread
 * blocks. An error is set and returned when the device refuses. */
plait_status plait_comm_done_wait(const plait_comm_device *dev, plait_device_event *ev);

/* Copy staged bytes between device and host memory: on the communication
 * stream when `on_comm` (the operation had a ready event and has waited
 * for it), else with the device's copy, which follows the compute stream. */
plait_status plait_comm_staging_copy(const plait_comm_device *dev, int on_comm, void *dst, const void *src,
                                   size_t bytes, plait_copy_dir dir);

/* Before the comm plugin (`ops`, its communicator `pcomm`) gets device
 * buffers of `kind` directly (a native collective, or a send/receive of
 * memory it declares) whose ready event is `ready` (NULL: none): its stream
 * (`stream`, NULL = its own) waits for the event on the device where the
 * plugin can (plait_comm_ops.wait_event with the event's native handle),
 * else this thread waits for it. Host memory needs nothing. */
plait_status plait_comm_ready_native(const plait_comm_device *dev, const plait_comm_ops *ops, void *pcomm,
                                     plait_mem_kind kind, plait_device_event *ready, plait_stream *stream);

/* Right after the comm plugin (`ops`, `pcomm`) posted an operation on device
 * buffers of `kind` on `stream` (NULL = its own): a device event (from the
 * core's pool) that the plugin recorded there after it
 * (plait_comm_ops.record_event), so the compute stream can wait for the
 * result on the device; NULL where the memory is host memory, the device
 * has no events with native handles, or the plugin cannot record one (a
 * failure is logged once). Release it with plait_comm_ready_release(dev,
 * ev, 1) once the operation completed. */
plait_device_event *plait_comm_done_mark(const plait_comm_device *dev, const plait_comm_ops *ops, void *pcomm,
                                         plait_mem_kind kind, plait_stream *stream);

/* Memory the host can dereference (host, pinned host). */
static inline int plait_mem_is_host(plait_mem_kind kind) {
    return kind == PLAIT_MEM_HOST || kind == PLAIT_MEM_HOST_PINNED;
}

#endif
