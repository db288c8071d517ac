/* The stand-in's CUDA runtime functions; see mock_gpu.h. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_gpu_internal.h"

/* ---- CUDA -------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    LOCK();
    cudaError_t e = g.no_driver ? cudaErrorInsufficientDriver : cudaSuccess;
    *count = g.no_driver ? 0 : g.ndev;
    UNLOCK();
    if (e != cudaSuccess) tl_err = e;
    return e;
}

cudaError_t cudaSetDevice(int device) {
    LOCK();
    int ok = device >= 0 && device < g.ndev && !g.no_driver;
    UNLOCK();
    if (!ok) return tl_err = cudaErrorInvalidDevice;
    tl_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = tl_dev;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = tl_err;
    tl_err = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    default: return "cudaErrorInvalidValue";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version (mock)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "invalid argument";
    }
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device) {
    snprintf(buf, (size_t)len, "0000:%02x:00.0", device + 0x10);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    (void)device;
    *value = attr == cudaDevAttrMemoryPoolsSupported;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    struct CUstream_st *x = calloc(1, sizeof *x);
    LOCK();
    x->dev = tl_dev;
    x->all_next = g.streams;
    g.streams = x;
    UNLOCK();
    *s = x;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    LOCK();
    pump();
    if (s->head < s->n) misuse("stream destroyed with %zu operations pending", s->n - s->head);
    s->destroyed = 1;
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    (void)flags;
    struct CUevent_st *e = calloc(1, sizeof *e);
    LOCK();
    e->dev = tl_dev;
    e->all_next = g.events;
    g.events = e;
    UNLOCK();
    *ev = e;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    LOCK();
    ev->destroyed = 1;
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    LOCK();
    if (!s) misuse("event recorded on the legacy default stream");
    else {
        if (s->dev != ev->dev) misuse("event of device %d recorded on a stream of device %d", ev->dev, s->dev);
        for (struct ncclComm *c = g.comms; c; c = c->all_next)
            if (c->pending && c->pending->stream == s)
                misuse("event recorded while an NCCL launch for this stream was still in progress");
        ev->s = s;
        ev->upto = s->n;
        ev->recorded = 1;
    }
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
    (void)flags;
    LOCK();
    struct CUevent_st *known = g.events;
    while (known && known != ev) known = known->all_next;
    if (!s) misuse("cudaStreamWaitEvent on the legacy default stream");
    else if (!known || ev->destroyed) misuse("cudaStreamWaitEvent on an event the stand-in did not create (or destroyed)");
    else {
        mop *o = new_op(OP_WAIT); /* the record current now; an unrecorded event is complete */
        o->wait_s = ev->recorded ? ev->s : NULL;
        o->wait_upto = ev->recorded ? ev->upto : 0;
        place(s, o);
        pump();
    }
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    LOCK();
    pump();
    cudaError_t e = cudaSuccess;
    if (ev->recorded)
        for (size_t i = 0; i < ev->upto; i++)
            if (!ev->s->ops[i]->done) {
                e = cudaErrorNotReady;
                break;
            }
    UNLOCK();
    return e;
}

void track(void *p) {
    malloc_rec *r = malloc(sizeof *r);
    r->p = p;
    r->next = g.allocs;
    g.allocs = r;
    g.n_allocs++;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    LOCK();
    *p = malloc(n ? n : 1);
    track(*p);
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    LOCK();
    pump();
    mop fake = {.kind = OP_FREE, .dst = p};
    run_op(&fake);
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    (void)s;
    return cudaMalloc(p, n);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    LOCK();
    mop *o = new_op(OP_FREE);
    o->dst = p;
    place(s, o);
    pump();
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    LOCK();
    mop *o = new_op(OP_COPY);
    o->dst = mock_host_ptr(dst);
    o->src = mock_host_ptr(src);
    o->n = n;
    place(s, o);
    pump();
    UNLOCK();
    return cudaSuccess;
}

