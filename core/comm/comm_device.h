/*
 * The device as the communicators see it: its memory kind, its copy
 * function, and its memory allocator. The staging of device buffers for
 * host-memory transports needs the copy (coll_stage.c, comm_stage.h); host
 * control data (a loss, a norm, a barrier) on a transport that moves device
 * memory only (nccl) needs device scratch memory as well.
 *
 * A registered device (plait_comm_set_device: the run registers its open
 * device, tests a stand-in) takes precedence until cleared; with none
 * registered, it is the rank's open device (core/device, a lower layer)
 * when its memory is not host memory (so `plait bench comm --mem device`
 * needs no registration). With neither, device-kind buffers are refused
 * with a message instead of being dereferenced.
 *
 * Thread-safety: set/clear while no collective is running; the getters
 * from any thread.
 */
#ifndef PLAIT_CORE_COMM_DEVICE_H
#define PLAIT_CORE_COMM_DEVICE_H

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

/* Register a device (copied). NULL, a host kind or a NULL copy clears the
 * registration. */
void plait_comm_set_device(const plait_comm_device *dev);

/* The registered device, else the open device when its memory is not
 * host memory, else NULL. The pointer stays valid until the next
 * plait_comm_set_device or the device's close. */
const plait_comm_device *plait_comm_device_get(void);

/* plait_comm_device_get()'s copy function, or NULL. */
plait_comm_copy_fn plait_comm_device_copy(void);

/* plait_comm_device_get()'s streams and events, or NULL (see above). */
const plait_device_ops *plait_comm_device_events(void);

/* The ready event of a collective or send/receive of device memory
 * (plait_coll_opts.ready, plait/device.h): the caller's, or, where it named
 * none, a new one recorded now on the compute stream (*owned = 1: release
 * it with plait_comm_ready_release once the operation is over). NULL when
 * the memory is host memory, the device has no events, or the event could
 * not be made (logged): the operation's copies then follow the compute
 * stream as on a 1.3 device. Call on the issuing thread, at the call. */
plait_device_event *plait_comm_ready_take(plait_mem_kind kind, plait_device_event *given, int *owned);
void plait_comm_ready_release(plait_device_event *ev, int owned);

/* Before an operation with ready event `ev` (non-NULL) touches its device
 * buffers from this thread: block this thread (only) until ev's point of
 * the compute stream completed. */
plait_status plait_comm_ready_wait(plait_device_event *ev);

/* Make the compute stream wait on the device for `ev` (a completion mark
 * recorded by the comm plugin: plait_comm_done_mark); no host thread
 * blocks. An error is set and returned when the device refuses. */
plait_status plait_comm_done_wait(plait_device_event *ev);

/* Copy staged bytes between device and host memory: on the communication
 * stream when `on_comm` (the operation had a ready event and has waited
 * for it), else with the device's copy, which follows the compute stream. */
plait_status plait_comm_stage_copy(int on_comm, void *dst, const void *src, size_t bytes, plait_copy_dir dir);

/* Memory the host can dereference (host, pinned host). */
static inline int plait_mem_is_host(plait_mem_kind kind) {
    return kind == PLAIT_MEM_HOST || kind == PLAIT_MEM_HOST_PINNED;
}

#endif
