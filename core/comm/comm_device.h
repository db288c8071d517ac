/*
 * The open device as the communicators see it: its memory kind and its
 * copy function, which the staging of device buffers for host-memory
 * transports needs (comm_stage.h). The device layer registers them once the
 * device is open and clears them before it closes; core/comm never calls
 * upward to find them. With nothing registered, device-kind buffers are
 * refused with a message instead of being dereferenced.
 *
 * Thread-safety: set/clear from the thread that opens and closes the
 * device, while no collective is running; the getters from any thread.
 */
#ifndef PLAIT_CORE_COMM_DEVICE_H
#define PLAIT_CORE_COMM_DEVICE_H

#include <plait/device.h>

/* Copy `bytes` in the device's stream order (plait_device_ops.copy). */
typedef plait_status (*plait_comm_copy_fn)(void *dst, const void *src, size_t bytes, plait_copy_dir dir);

/* Register the open device: `kind` is its memory (plait_device_info.mem_kind),
 * `copy` its copy function. kind PLAIT_MEM_HOST (the cpu device) or copy
 * NULL clears the registration. */
void plait_comm_set_device(plait_mem_kind kind, plait_comm_copy_fn copy);

/* The registered copy function, or NULL. */
plait_comm_copy_fn plait_comm_device_copy(void);

/* The registered device's memory kind; PLAIT_MEM_HOST when none is. */
plait_mem_kind plait_comm_device_kind(void);

/* Memory the host can dereference (host, pinned host). */
static inline int plait_mem_is_host(plait_mem_kind kind) {
    return kind == PLAIT_MEM_HOST || kind == PLAIT_MEM_HOST_PINNED;
}

#endif
