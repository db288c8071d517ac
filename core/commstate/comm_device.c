/* The device of comm_device.h: what a communicator was handed at creation
 * (the rank's open device, core/device, or a test's stand-in). */
#include "commstate/comm_device.h"

#include <stddef.h>

#include <stdatomic.h>

#include "device/device.h"
#include "device/event_pool.h"
#include "runtime/error.h"
#include "runtime/log.h"

int plait_comm_device_open(plait_comm_device *out) {
    plait_mem_kind kind = plait_device_mem_kind();
    if (plait_mem_is_host(kind) || !plait_device_ops_open()) return 0;
    /* the device layer's own functions; its streams and events where it has them */
    *out = (plait_comm_device){kind, plait_device_copy, plait_device_alloc, plait_device_free,
                               plait_device_events_open()};
    return 1;
}

static const plait_device_ops *events_of(const plait_comm_device *dev) { return dev ? dev->events : NULL; }

plait_device_event *plait_comm_ready_take(const plait_comm_device *dev, plait_mem_kind kind, plait_device_event *given,
                                          int *owned) {
    *owned = 0;
    const plait_device_ops *ev = plait_mem_is_host(kind) ? NULL : events_of(dev);
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

void plait_comm_ready_release(const plait_comm_device *dev, plait_device_event *e, int owned) {
    const plait_device_ops *ev = events_of(dev);
    if (e && owned && ev) plait_event_pool_put(ev, e);
}

plait_status plait_comm_ready_wait(const plait_comm_device *dev, plait_device_event *e) {
    const plait_device_ops *ev = events_of(dev);
    if (!e || !ev) return PLAIT_OK;
    plait_status st = ev->event_synchronize(e);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "waiting for the compute stream to reach a buffer's ready event");
}

plait_status plait_comm_done_wait(const plait_comm_device *dev, plait_device_event *e) {
    const plait_device_ops *ev = events_of(dev);
    if (!e || !ev) return plait_set_error(PLAIT_ERR_INVALID_ARG, "no device event to wait for");
    plait_status st = ev->event_wait(e, PLAIT_STREAM_COMPUTE);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "making the compute stream wait for a collective's end");
}

plait_status plait_comm_staging_copy(const plait_comm_device *dev, int on_comm, void *dst, const void *src,
                                   size_t bytes, plait_copy_dir dir) {
    const plait_device_ops *ev = on_comm ? events_of(dev) : NULL;
    if (ev) return ev->copy_on(PLAIT_STREAM_COMM, dst, src, bytes, dir);
    plait_comm_copy_fn copy = dev ? dev->copy : NULL;
    if (!copy)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "device memory to stage, but no device is open to copy it");
    return copy(dst, src, bytes, dir);
}

plait_status plait_comm_ready_native(const plait_comm_device *dev, const plait_comm_ops *ops, void *pcomm,
                                     plait_mem_kind kind, plait_device_event *ready, plait_stream *stream) {
    const plait_device_ops *ev = events_of(dev);
    if (!ready || plait_mem_is_host(kind) || !ev) return PLAIT_OK;
    void *native = ev->event_native(ready);
    if (native && ops->struct_size >= offsetof(plait_comm_ops, wait_event) + sizeof ops->wait_event &&
        ops->wait_event) {
        plait_status st = ops->wait_event(pcomm, stream, native);
        return st == PLAIT_OK ? st : plait_wrap_error(st, "ordering the comm plugin's stream after a ready event");
    }
    return plait_comm_ready_wait(dev, ready);
}

plait_device_event *plait_comm_done_mark(const plait_comm_device *dev, const plait_comm_ops *ops, void *pcomm,
                                         plait_mem_kind kind, plait_stream *stream) {
    const plait_device_ops *ev = plait_mem_is_host(kind) ? NULL : events_of(dev);
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
