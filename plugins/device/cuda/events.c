/*
 * Streams and events (plait/device.h, ABI 1.4): a plait_device_event is a
 * cudaEvent_t (timing disabled: the cheapest kind, and all ordering needs);
 * PLAIT_STREAM_COMPUTE is pc.stream, PLAIT_STREAM_COMM pc.comm_stream.
 * event_wait is cudaStreamWaitEvent, so neither stream ever blocks the host
 * to order after the other. The native handle goes to the NCCL plugin
 * unchanged, into the same runtime: both plugins link the shared libcudart
 * (and a cudaEvent_t is the driver's CUevent in the device's primary
 * context, valid in any runtime copy of the process, NCCL's own included).
 *
 * Any thread may call these (CUDA's event calls are thread-safe); each
 * first makes the device current on the calling thread.
 */
#include "pcuda.h"

static cudaStream_t stream_of(plait_device_stream s) { return s == PLAIT_STREAM_COMM ? pc.comm_stream : pc.stream; }

static plait_status check(plait_device_event *ev, plait_device_stream s, int use_stream, const char *what) {
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: %s before the device was opened", what);
    if (!ev) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: %s of a NULL event", what);
    if (use_stream && (unsigned)s > PLAIT_STREAM_COMM)
        return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: %s on stream %d, not one of plait_device_stream",
                                  what, (int)s);
    if (!pc_make_current()) return pc_cuda_status(cudaGetLastError(), "cudaSetDevice");
    return PLAIT_OK;
}

plait_device_event *pc_event_create(void) {
    if (!pc.is_open) {
        pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: event_create before the device was opened");
        return NULL;
    }
    cudaEvent_t e = NULL;
    cudaError_t err = pc_make_current() ? cudaEventCreateWithFlags(&e, cudaEventDisableTiming) : cudaGetLastError();
    if (err != cudaSuccess) {
        (void)pc_cuda_status(err, "cudaEventCreateWithFlags");
        return NULL;
    }
    return (plait_device_event *)(void *)e;
}

void pc_event_destroy(plait_device_event *ev) {
    if (!ev || !pc.is_open || !pc_make_current()) return;
    cudaEventDestroy((cudaEvent_t)(void *)ev);
}

plait_status pc_event_record(plait_device_event *ev, plait_device_stream stream) {
    plait_status st = check(ev, stream, 1, "event_record");
    if (st != PLAIT_OK) return st;
    cudaError_t e = cudaEventRecord((cudaEvent_t)(void *)ev, stream_of(stream));
    return e == cudaSuccess ? PLAIT_OK : pc_cuda_status(e, "cudaEventRecord");
}

plait_status pc_event_wait(plait_device_event *ev, plait_device_stream stream) {
    plait_status st = check(ev, stream, 1, "event_wait");
    if (st != PLAIT_OK) return st;
    cudaError_t e = cudaStreamWaitEvent(stream_of(stream), (cudaEvent_t)(void *)ev, 0);
    return e == cudaSuccess ? PLAIT_OK : pc_cuda_status(e, "cudaStreamWaitEvent");
}

/* Reports CUDA's answer for this wait only. A failure a kernel entry
 * recorded (pc_fail: a product without an algorithm, no memory for an
 * operand copy) belongs to the model's thread and its step: the
 * communicator's thread waits here for a collective's ready event, and
 * taking the record here would report the failure against that collective
 * and hide it from the step. It stays for synchronize() or the next copy
 * to the host on the compute stream. An error CUDA returns here is sticky
 * (the device is unusable from then on), so it names no operation. */
plait_status pc_event_synchronize(plait_device_event *ev) {
    plait_status st = check(ev, PLAIT_STREAM_COMPUTE, 0, "event_synchronize");
    if (st != PLAIT_OK) return st;
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)(void *)ev);
    return e == cudaSuccess ? PLAIT_OK
                            : pc_cuda_status(e, "waiting for an event (a sticky error: any kernel or copy queued "
                                                "before it may have caused it)");
}

void *pc_event_native(plait_device_event *ev) { return ev; }
