/*
 * The open device's own work in the step trace (plait/device.h, ABI 1.16):
 * its kernels and copies, timed by the device, as spans of the rank's
 * trace (runtime/trace.h) on a track per stream ("stream compute",
 * "stream comm"), beside the host's spans of the same step.
 *
 * Thread-safety: the rank's main thread, around one traced step.
 * Errors: plait_device_trace_end returns the device's (message set).
 * Without an open device that times its work, both do nothing.
 */
#ifndef PLAIT_CORE_DEVICE_TRACE_H
#define PLAIT_CORE_DEVICE_TRACE_H

#include <plait/types.h>

/* Before a traced step's first kernel: the device starts timing. */
plait_status plait_device_trace_begin(void);
/* After its last: the device's spans into the trace; timing stops. */
plait_status plait_device_trace_end(void);

#endif
