/*
 * plait_request: an issued collective (queued for, or finished by, the
 * communicator's executor) or a user point-to-point operation (a plugin
 * request on the p2p plugin communicator). Internal to communication:
 * the executor (comm_exec.c) and point-to-point (comm_p2p.c) make and
 * finish them; a collective running for one marks it posted (below).
 */
#ifndef PLAIT_CORE_COMM_REQUEST_H
#define PLAIT_CORE_COMM_REQUEST_H

#include "commstate/comm_state.h"

enum { PLAIT_REQ_COLL = 1, PLAIT_REQ_P2P = 2 };

struct plait_request {
    int kind;
    plait_comm *comm;

    /* collectives: guarded by comm->lock */
    plait_coll_args args;
    struct plait_request *next;
    int done;
    plait_status status;
    char *message;            /* error text from the executing thread (malloc) */
    /* device-side completion (plait_request_mark_posted): the collective
     * was posted and `done_ev` marks its end on the device; `detached`: its
     * waiter left after making the compute stream wait for it, and the
     * executing thread releases the request when it finishes */
    struct plait_device_event *done_ev;
    int posted, detached;

    /* p2p: owned by the thread that waits on it */
    void *preq;
    int peer;
    int is_send;
    size_t bytes;
    uint32_t tag;
    uint64_t p2p_seq;
    uint64_t posted_ns;       /* when it was posted, while tracing (runtime/trace.h); else 0 */
    void *staged;             /* pinned copy of a device buffer (staging.h), or NULL */
    void *dev;                /* the device buffer it stands for */
    struct plait_device_event *ready; /* device memory: touched only after it (comm_device.h) */
    int own_ready;                    /* recorded by the core: released with the request */
    void *scratch;            /* device copy of a host buffer for a device-only transport, or NULL */
    void *host;               /* the host buffer it stands for */
    const plait_comm_device *scratch_dev; /* whose memory `scratch` is */
    /* float32 values travelling in bf16 (plait_comm_p2p_bf16): `bytes` are
     * the wire's (2 a value); `wire` their bf16 form, in host memory (the
     * staged buffer's tail for device memory, else malloc'd), `floats` the
     * float32 values it stands for (the caller's host buffer, or `staged`) */
    void *wire;
    float *floats;
    int wire_owned; /* `wire` was malloc'd: freed with the request */
};

/* A collective running for request `req` (plait_coll_args.req, not NULL)
 * was posted, and `done` (from plait_comm_done_mark) marks its completion
 * on the device: wait_device may return now (plait_request_wait_device).
 * Called by the thread running it; `done` becomes the request's. */
void plait_request_mark_posted(plait_request *req, plait_device_event *done);

#endif
