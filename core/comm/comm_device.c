/* The device registration of comm_device.h: two process-wide values set
 * while nothing runs, read by the threads that stage device buffers. */
#include "comm/comm_device.h"

#include <stdatomic.h>

static _Atomic(plait_comm_copy_fn) g_copy;
static _Atomic int g_kind; /* plait_mem_kind */

void plait_comm_set_device(plait_mem_kind kind, plait_comm_copy_fn copy) {
    if (plait_mem_is_host(kind) || !copy) kind = PLAIT_MEM_HOST, copy = NULL;
    atomic_store(&g_copy, copy);
    atomic_store(&g_kind, (int)kind);
}

plait_comm_copy_fn plait_comm_device_copy(void) { return atomic_load(&g_copy); }

plait_mem_kind plait_comm_device_kind(void) { return (plait_mem_kind)atomic_load(&g_kind); }
