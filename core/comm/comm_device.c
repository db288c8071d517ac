/* The device of comm_device.h: a stand-in registered by tests, else the
 * rank's open device (core/device). */
#include "comm/comm_device.h"

#include <stdatomic.h>

#include "device/device.h"

static plait_comm_device g_dev;
static _Atomic(const plait_comm_device *) g_current;

void plait_comm_set_device(const plait_comm_device *dev) {
    if (!dev || plait_mem_is_host(dev->kind) || !dev->copy) {
        atomic_store(&g_current, NULL);
        return;
    }
    g_dev = *dev;
    atomic_store(&g_current, &g_dev);
}

/* The open device's record per memory kind: the device layer's own
 * functions, constant, so nothing is written while collectives read it. */
static const plait_comm_device g_open[] = {
    [PLAIT_MEM_CUDA] = {PLAIT_MEM_CUDA, plait_device_copy, plait_device_alloc, plait_device_free},
};

const plait_comm_device *plait_comm_device_get(void) {
    const plait_comm_device *d = atomic_load(&g_current);
    if (d) return d;
    plait_mem_kind kind = plait_device_mem_kind();
    if (plait_mem_is_host(kind) || !plait_device_ops_open()) return NULL;
    if ((size_t)kind >= sizeof g_open / sizeof g_open[0] || !g_open[kind].copy) return NULL;
    return &g_open[kind];
}

plait_comm_copy_fn plait_comm_device_copy(void) {
    const plait_comm_device *d = plait_comm_device_get();
    return d ? d->copy : NULL;
}
