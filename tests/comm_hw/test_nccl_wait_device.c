/*
 * Device-side completion over the nccl plugin (SDK 1.5: comm_ops.record_event,
 * coll_api.wait_device), driven through the core's communicator on
 * threads-as-ranks over the CUDA/NCCL stand-in (mock_gpu.c), with a fake
 * device per rank whose events are the stand-in's cudaEvent_t: wait_device
 * on an all-gather returns before the peer has posted its part, with no host
 * synchronisation and exactly one compute-stream wait, and a copy queued
 * after it reads the gathered values; no event is left alive.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "commstate/comm_device.h"
#include "device/event_pool.h"
#include "host/host_table.h"
#include "mock_gpu.h"
#include "nccl_job.h"
#include "runtime/error.h"

/* A device event of the fake devices below: a stand-in event of one GPU,
 * as a CUDA event belongs to the device current when it was created. Each
 * rank's communicator gets its own fake device (g_device_of), since a
 * process drives one GPU: the core's event pool, which keeps the idle
 * events of one device's table only, then never hands one rank's event to
 * another (recording it on another GPU's stream would be misuse). */
struct plait_device_event {
    cudaEvent_t e;
    int gpu;
};

/* each GPU's compute stream: a rank's, also when its communicator's thread
 * records there (host data carried through device scratch) */
static cudaStream_t g_compute[MAXR];
static _Atomic int g_ev_live, g_host_syncs, g_compute_waits; /* rank 0 counts while rank 1 waits */

static int current_gpu(void) {
    int d = 0;
    cudaGetDevice(&d);
    return d;
}

/* created on `gpu` from whichever thread asks (a rank's or its
 * communicator's), the caller's current GPU left as it was */
static plait_device_event *fe_create_on(int gpu) {
    plait_device_event *ev = calloc(1, sizeof *ev);
    int was = current_gpu();
    cudaSetDevice(gpu);
    cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
    cudaSetDevice(was);
    ev->gpu = gpu;
    g_ev_live++;
    return ev;
}
static plait_device_event *fe_create0(void) { return fe_create_on(0); }
static plait_device_event *fe_create1(void) { return fe_create_on(1); }
static void fe_destroy(plait_device_event *ev) {
    cudaEventDestroy(ev->e);
    free(ev);
    g_ev_live--;
}
static plait_status fe_record(plait_device_event *ev, plait_device_stream s) {
    if (s != PLAIT_STREAM_COMPUTE) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "fake device: comm-stream record");
    return cudaEventRecord(ev->e, g_compute[ev->gpu]) == cudaSuccess ? PLAIT_OK : PLAIT_ERR_SYSTEM;
}
static plait_status fe_wait(plait_device_event *ev, plait_device_stream s) {
    if (s != PLAIT_STREAM_COMPUTE) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "fake device: comm-stream wait");
    g_compute_waits++;
    return cudaStreamWaitEvent(g_compute[ev->gpu], ev->e, 0) == cudaSuccess ? PLAIT_OK : PLAIT_ERR_SYSTEM;
}
static plait_status fe_synchronize(plait_device_event *ev) {
    g_host_syncs++;
    while (cudaEventQuery(ev->e) == cudaErrorNotReady) nap();
    return PLAIT_OK;
}
static void *fe_native(plait_device_event *ev) { return ev->e; }
static plait_status fe_copy_on(plait_device_stream s, void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    (void)s;
    return mock_copy(dst, src, bytes, dir);
}

#define FAKE_EVENTS(create)                                                                                            \
    {                                                                                                                  \
        .struct_size = sizeof(plait_device_ops), .copy_on = fe_copy_on, .event_create = create,                        \
        .event_destroy = fe_destroy, .event_record = fe_record, .event_wait = fe_wait,                                 \
        .event_synchronize = fe_synchronize, .event_native = fe_native,                                                \
    }
static const plait_device_ops fake_events[2] = {FAKE_EVENTS(fe_create0), FAKE_EVENTS(fe_create1)};

/* Wait on the host for everything queued on this rank's compute stream. */
static void compute_drain(void) {
    cudaEvent_t e = NULL;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventRecord(e, g_compute[current_gpu()]);
    while (cudaEventQuery(e) == cudaErrorNotReady) nap();
    cudaEventDestroy(e);
}

static _Atomic int g_rank0_back; /* rank 0's wait_device returned */

/* wait_device on an NCCL all-gather returns before the collective can have
 * run (rank 1 issues its part only after rank 0's call returned), with no
 * host synchronisation, and a copy queued on the compute stream after it
 * still reads the gathered result: the compute stream waits for the
 * plugin's completion mark on the device. */
static void body_wait_device(int rank, plait_comm *w, job *j) {
    const plait_coll_api *api = plait_coll_api_table();
    cudaSetDevice(rank);
    cudaStreamCreateWithFlags(&g_compute[rank], cudaStreamNonBlocking);
    int32_t *send = mock_alloc(4 * sizeof *send, "test"), *recv = mock_alloc(4 * MAXR * sizeof *recv, "test");
    int32_t out[4 * MAXR];
    for (int i = 0; i < 4; i++) send[i] = 100 * rank + i + 1;
    memset(recv, 0xff, 4 * (size_t)w->size * sizeof *recv);
    memset(out, 0, sizeof out);
    if (rank == 1) { /* rank 0's wait must not need this rank's part */
        for (int tries = 0; tries < 50000 && !g_rank0_back; tries++) nap(); /* 5 s */
        CHECK(j, g_rank0_back, "rank 0's wait_device waited on the host for the all-gather to finish");
    }
    plait_request *req = NULL;
    CHECK_OK(j, api->allgather(w, send, recv, 4, PLAIT_I32, &dev_opts, &req));
    int syncs = g_host_syncs, waits = g_compute_waits;
    CHECK(j, PLAIT_COLL_HAS(api, wait_device), "no wait_device in the core's table");
    CHECK_OK(j, api->wait_device(req));
    CHECK(j, g_host_syncs == syncs, "wait_device synchronised the host with the device");
    /* rank 1 alone runs now; its gather may be over before it waits (then
     * the host has seen it end and no device wait is needed) */
    if (rank == 0) CHECK(j, g_compute_waits == waits + 1, "%d compute-stream waits", g_compute_waits - waits);
    /* queued after wait_device: runs only once the all-gather did */
    cudaMemcpyAsync(out, recv, 4 * (size_t)w->size * sizeof *recv, cudaMemcpyDeviceToHost, g_compute[rank]);
    if (rank == 0) {
        CHECK(j, out[0] == 0, "the compute stream's copy ran before the all-gather");
        g_rank0_back = 1;
    }
    compute_drain();
    for (int q = 0; q < w->size; q++)
        for (int i = 0; i < 4; i++)
            CHECK(j, out[4 * q + i] == 100 * q + i + 1, "rank %d: gathered [%d][%d] = %d", rank, q, i, out[4 * q + i]);
    /* the communicator stays usable; a later host wait sees the ring in order */
    int32_t x = 1;
    CHECK_OK(j, api->allreduce(w, &x, &x, 1, PLAIT_I32, PLAIT_SUM, NULL, NULL));
    CHECK(j, x == w->size, "allreduce after wait_device: %d", x);
    mock_free(send);
    mock_free(recv);
    pthread_barrier_wait(&j->bar); /* no thread records on it any more */
    cudaStreamDestroy(g_compute[rank]);
}

static void test_wait_device(void **state) {
    (void)state;
    plait_comm_device dev[2];
    for (int r = 0; r < 2; r++) {
        dev[r] = (plait_comm_device){PLAIT_MEM_CUDA, mock_copy, mock_alloc, mock_free, &fake_events[r]};
        g_device_of[r] = &dev[r];
    }
    g_rank0_back = 0;
    g_host_syncs = g_compute_waits = 0;
    job j;
    run_job(&j, 2, NULL, NULL, body_wait_device);
    g_device_of[0] = g_device_of[1] = NULL;
    plait_event_pool_drain(); /* the core's pooled events are the stand-in's */
    expect_clean(&j);
    assert_int_equal(g_ev_live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wait_device, setup, teardown),
    };
    return nccl_job_main("test_nccl_wait_device", tests, sizeof tests / sizeof tests[0]);
}
