/* The device registration of comm_device.h: one process-wide record, set
 * while nothing runs, read by the threads that stage buffers. */
#include "comm/comm_device.h"

#include <stdatomic.h>

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

const plait_comm_device *plait_comm_device_get(void) { return atomic_load(&g_current); }

plait_comm_copy_fn plait_comm_device_copy(void) {
    const plait_comm_device *d = atomic_load(&g_current);
    return d ? d->copy : NULL;
}
