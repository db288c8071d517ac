/* The device of comm_device.h: a stand-in registered by tests, else the
 * rank's open device (core/device). */
#include "comm/comm_device.h"

#include <stddef.h>

#include "comm/comm.h"

#include <stdatomic.h>

#include "device/device.h"
#include "device/event_pool.h"
#include "runtime/error.h"
#include "runtime/log.h"

static plait_comm_device g_dev;
static _Atomic(const plait_comm_device *) g_current;

void plait_comm_set_device(const plait_comm_device *dev) {
    plait_event_pool_drain(); /* the pooled events may be the old device's */
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
    [PLAIT_MEM_CUDA] = {PLAIT_MEM_CUDA, plait_device_copy, plait_device_alloc, plait_device_free, NULL},
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

/* A registered stand-in brings its own (or none); the open device's come
 * from the device layer. */
const plait_device_ops *plait_comm_device_events(void) {
    const plait_comm_device *d = atomic_load(&g_current);
    if (d) return d->events;
    return plait_comm_device_get() ? plait_device_events_open() : NULL;
}

plait_device_event *plait_comm_ready_take(plait_mem_kind kind, plait_device_event *given, int *owned) {
    *owned = 0;
    const plait_device_ops *ev = plait_mem_is_host(kind) ? NULL : plait_comm_device_events();
    if (!ev) return NULL;
    if (given) return given;
    /* The point of the call: everything queued on the compute stream so far
     * (which includes the last kernel touching the buffers, as the caller
     * must not touch them after the call). */
    plait_device_event *e = plait_event_pool_get(ev);
    if (e && ev->event_record(e, PLAIT_STREAM_COMPUTE) != PLAIT_OK) {
        plait_event_pool_put(ev, e);
        e = NULL;
    }
    if (!e) {
        static _Atomic int warned;
        if (!atomic_exchange(&warned, 1))
            plait_log(PLAIT_LOG_WARN, "comm", "cannot record a device event (%s); device buffers are staged in "
                                              "compute-stream order instead", plait_last_error());
        return NULL;
    }
    *owned = 1;
    return e;
}

void plait_comm_ready_release(plait_device_event *e, int owned) {
    const plait_device_ops *ev = plait_comm_device_events();
    if (e && owned && ev) plait_event_pool_put(ev, e);
}

plait_status plait_comm_ready_wait(plait_device_event *e) {
    const plait_device_ops *ev = plait_comm_device_events();
    if (!e || !ev) return PLAIT_OK;
    plait_status st = ev->event_synchronize(e);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "waiting for the compute stream to reach a buffer's ready event");
}

plait_status plait_comm_done_wait(plait_device_event *e) {
    const plait_device_ops *ev = plait_comm_device_events();
    if (!e || !ev) return plait_set_error(PLAIT_ERR_INVALID_ARG, "no device event to wait for");
    plait_status st = ev->event_wait(e, PLAIT_STREAM_COMPUTE);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "making the compute stream wait for a collective's end");
}

plait_status plait_comm_stage_copy(int on_comm, void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    const plait_device_ops *ev = on_comm ? plait_comm_device_events() : NULL;
    if (ev) return ev->copy_on(PLAIT_STREAM_COMM, dst, src, bytes, dir);
    plait_comm_copy_fn copy = plait_comm_device_copy();
    if (!copy)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "device memory to stage, but no device is open to copy it");
    return copy(dst, src, bytes, dir);
}

plait_status plait_comm_ready_native(const plait_comm_ops *ops, void *pcomm, plait_mem_kind kind,
                                     plait_device_event *ready, plait_stream *stream) {
    const plait_device_ops *ev = plait_comm_device_events();
    if (!ready || plait_mem_is_host(kind) || !ev) return PLAIT_OK;
    void *native = ev->event_native(ready);
    if (native && ops->struct_size >= offsetof(plait_comm_ops, wait_event) + sizeof ops->wait_event &&
        ops->wait_event) {
        plait_status st = ops->wait_event(pcomm, stream, native);
        return st == PLAIT_OK ? st : plait_wrap_error(st, "ordering the comm plugin's stream after a ready event");
    }
    return plait_comm_ready_wait(ready);
}

plait_device_event *plait_comm_done_mark(const plait_comm_ops *ops, void *pcomm, plait_mem_kind kind,
                                         plait_stream *stream) {
    const plait_device_ops *ev = plait_mem_is_host(kind) ? NULL : plait_comm_device_events();
    if (!ev || ops->struct_size < offsetof(plait_comm_ops, record_event) + sizeof ops->record_event ||
        !ops->record_event)
        return NULL;
    plait_device_event *e = plait_event_pool_get(ev);
    void *native = e ? ev->event_native(e) : NULL;
    plait_status st = native ? ops->record_event(pcomm, stream, native) : PLAIT_ERR_UNSUPPORTED;
    if (st == PLAIT_OK) return e;
    if (e) plait_event_pool_put(ev, e);
    if (native) {
        static _Atomic int warned;
        if (!atomic_exchange(&warned, 1))
            plait_log(PLAIT_LOG_WARN, "comm", "the comm plugin cannot record a completion event (%s); results of "
                                              "device collectives are waited for on the host instead", plait_last_error());
    }
    return NULL;
}
