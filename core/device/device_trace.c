/*
 * The device's spans into the rank's trace (device_trace.h): the device
 * hands them over on CLOCK_MONOTONIC, the trace's clock, so they go in as
 * they are; the merge moves them onto rank 0's clock with the host's.
 */
#include "device/device_trace.h"

#include "device/device.h"
#include "runtime/trace.h"

/* Whether trace_begin was called and trace_end is due. */
static int timing;

static const plait_device_ops *tracing_device(void) {
    const plait_device_ops *ops = plait_device_ops_open();
    return PLAIT_DEVICE_HAS_TRACE(ops) ? ops : NULL;
}

plait_status plait_device_trace_begin(void) {
    const plait_device_ops *ops = tracing_device();
    if (!ops) return PLAIT_OK;
    /* called again without trace_end (the step before failed, and the run
     * went on): the device discards what it timed then */
    plait_status st = ops->trace_begin();
    timing = st == PLAIT_OK;
    return st;
}

static void take_span(void *ctx, const plait_device_span *s) {
    (void)ctx;
    if (s->struct_size < sizeof *s) return;
    plait_trace_args a = PLAIT_TRACE_ARGS;
    if (s->is_copy) a.bytes = (int64_t)s->bytes;
    plait_trace_span_on(s->stream == PLAIT_STREAM_COMM ? "stream comm" : "stream compute",
                        s->is_copy ? PLAIT_TRACE_COPY : PLAIT_TRACE_KERNEL, s->name, s->start_ns, s->end_ns, &a);
}

plait_status plait_device_trace_end(void) {
    const plait_device_ops *ops = tracing_device();
    if (!ops || !timing) return PLAIT_OK;
    timing = 0;
    uint64_t dropped = 0;
    plait_status st = ops->trace_end(take_span, NULL, &dropped);
    plait_trace_add_dropped(dropped);
    return st;
}
