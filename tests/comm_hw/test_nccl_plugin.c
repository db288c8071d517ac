/*
 * The nccl plugin itself -- the .so the loader finds -- driven through the
 * core's communicator on threads-as-ranks, over mock_gpu.c standing in for
 * libcudart and libnccl (its definitions interpose theirs). Checks: device
 * choice and init agreement (duplicate GPUs, a bad [comm.nccl] device on one
 * rank, no driver), every native collective and dtype/operator family with
 * exact results, in-place forms NCCL lacks (staged), splits (fresh unique
 * id through the child bootstrap), grouped send/receive that would deadlock
 * one by one, nonblocking launches that stay in progress, blocking mode,
 * timeouts that keep the request, abort reaching the peer as a remote
 * error, NCCL's asynchronous errors, user streams, host control data (a
 * loss, a barrier) carried through device scratch when a device is open,
 * and that nothing leaks (communicators, temporaries) and no misuse is seen.
 * Device-side completion (wait_device) is test_nccl_wait_device.c's; the
 * harness both use is nccl_job.c.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <cuda_runtime.h>

#include "comm/comm.h"
#include "commstate/comm_device.h"
#include "comm/comm_threads.h"
#include "commstate/request.h"
#include "config/config.h"
#include "mock_gpu.h"
#include "nccl_job.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "host/host_table.h"

/* ---- bodies ------------------------------------------------------------------- */

static uint16_t to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void collectives(int rank, plait_comm *w, job *j, const plait_coll_opts *opts) {
    const plait_coll_api *c = plait_coll_api_table();
    int n = w->size;
    enum { C = 37 };
    /* allreduce f32 sum, out of place */
    float fs[C], fr[C];
    for (int i = 0; i < C; i++) fs[i] = (float)(rank + i);
    CHECK_OK(j, c->allreduce(w, fs, fr, C, PLAIT_F32, PLAIT_SUM, opts, NULL));
    for (int i = 0; i < C; i++) CHECK(j, fr[i] == (float)(n * i + n * (n - 1) / 2), "f32 sum [%d] = %g", i, fr[i]);
    /* i32 max in place, asynchronously */
    int32_t im[C];
    for (int i = 0; i < C; i++) im[i] = rank * i;
    plait_request *req = NULL;
    CHECK_OK(j, c->allreduce(w, im, im, C, PLAIT_I32, PLAIT_MAX, opts, &req));
    if (req) CHECK_OK(j, c->wait(req));
    for (int i = 0; i < C; i++) CHECK(j, im[i] == (n - 1) * i, "i32 max [%d] = %d", i, im[i]);
    /* f64 avg, i64 avg (truncating), u8 prod, bf16 sum, f32 min */
    double d = rank;
    CHECK_OK(j, c->allreduce(w, &d, &d, 1, PLAIT_F64, PLAIT_AVG, opts, NULL));
    CHECK(j, d == (double)(n - 1) / 2, "f64 avg = %g", d);
    int64_t l = rank * 3 + 1;
    CHECK_OK(j, c->allreduce(w, &l, &l, 1, PLAIT_I64, PLAIT_AVG, opts, NULL));
    CHECK(j, l == (int64_t)(3 * n * (n - 1) / 2 + n) / n, "i64 avg = %lld", (long long)l);
    uint8_t u = rank == 0 ? 2 : 1;
    CHECK_OK(j, c->allreduce(w, &u, &u, 1, PLAIT_U8, PLAIT_PROD, opts, NULL));
    CHECK(j, u == 2, "u8 prod = %u", u);
    uint16_t h[4];
    for (int i = 0; i < 4; i++) h[i] = to_bf16((float)(rank + 1 + i));
    CHECK_OK(j, c->allreduce(w, h, h, 4, PLAIT_BF16, PLAIT_SUM, opts, NULL));
    for (int i = 0; i < 4; i++)
        CHECK(j, from_bf16(h[i]) == (float)(n * (n + 1) / 2 + n * i), "bf16 sum [%d] = %g", i, from_bf16(h[i]));
    float mn = (float)(10 - rank);
    CHECK_OK(j, c->allreduce(w, &mn, &mn, 1, PLAIT_F32, PLAIT_MIN, opts, NULL));
    CHECK(j, mn == (float)(10 - (n - 1)), "f32 min = %g", mn);

    /* reduce_scatter: out of place, then in place in plait's (MPI's) form */
    int32_t rs[MAXR * C], rr[C];
    for (int k = 0; k < n * C; k++) rs[k] = rank * 1000 + k;
    CHECK_OK(j, c->reduce_scatter(w, rs, rr, C, PLAIT_I32, PLAIT_SUM, opts, NULL));
    for (int i = 0; i < C; i++)
        CHECK(j, rr[i] == 1000 * n * (n - 1) / 2 + n * (rank * C + i), "reduce_scatter [%d] = %d", i, rr[i]);
    for (int k = 0; k < n * C; k++) rs[k] = rank * 1000 + k;
    CHECK_OK(j, c->reduce_scatter(w, rs, rs, C, PLAIT_I32, PLAIT_SUM, opts, NULL));
    for (int i = 0; i < C; i++)
        CHECK(j, rs[i] == 1000 * n * (n - 1) / 2 + n * (rank * C + i), "in-place reduce_scatter [%d] = %d", i, rs[i]);

    /* allgather out of place and in place */
    int32_t ag[MAXR * C], mine[C];
    for (int i = 0; i < C; i++) mine[i] = rank * 100 + i;
    CHECK_OK(j, c->allgather(w, mine, ag, C, PLAIT_I32, opts, NULL));
    for (int k = 0; k < n * C; k++) CHECK(j, ag[k] == (k / C) * 100 + k % C, "allgather [%d] = %d", k, ag[k]);
    memset(ag, 0, sizeof ag);
    for (int i = 0; i < C; i++) ag[rank * C + i] = rank * 100 + i;
    CHECK_OK(j, c->allgather(w, ag, ag, C, PLAIT_I32, opts, NULL));
    for (int k = 0; k < n * C; k++) CHECK(j, ag[k] == (k / C) * 100 + k % C, "in-place allgather [%d] = %d", k, ag[k]);

    /* broadcast from the last rank, reduce to rank 1 (others pass NULL) */
    double b[C];
    for (int i = 0; i < C; i++) b[i] = rank == n - 1 ? 0.5 * i : -1;
    CHECK_OK(j, c->broadcast(w, b, C, PLAIT_F64, n - 1, opts, NULL));
    for (int i = 0; i < C; i++) CHECK(j, b[i] == 0.5 * i, "broadcast [%d] = %g", i, b[i]);
    int64_t rd[C], out[C];
    for (int i = 0; i < C; i++) rd[i] = rank + i;
    int root = 1 % n;
    CHECK_OK(j, c->reduce(w, rd, rank == root ? out : NULL, C, PLAIT_I64, PLAIT_SUM, root, opts, NULL));
    if (rank == root)
        for (int i = 0; i < C; i++) CHECK(j, out[i] == n * i + n * (n - 1) / 2, "reduce [%d] = %lld", i, (long long)out[i]);

    /* alltoall out of place and in place */
    int32_t as[MAXR * C], ar[MAXR * C];
    for (int k = 0; k < n * C; k++) as[k] = rank * 10000 + k;
    CHECK_OK(j, c->alltoall(w, as, ar, C, PLAIT_I32, opts, NULL));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < C; i++)
            CHECK(j, ar[q * C + i] == q * 10000 + rank * C + i, "alltoall [%d] = %d", q * C + i, ar[q * C + i]);
    CHECK_OK(j, c->alltoall(w, as, as, C, PLAIT_I32, opts, NULL));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < C; i++)
            CHECK(j, as[q * C + i] == q * 10000 + rank * C + i, "in-place alltoall [%d] = %d", q * C + i, as[q * C + i]);
}

static void body_collectives(int rank, plait_comm *w, job *j) { collectives(rank, w, j, &dev_opts); }

static void body_split_and_p2p(int rank, plait_comm *w, job *j) {
    const plait_coll_api *c = plait_coll_api_table();
    plait_comm *half = NULL;
    CHECK_OK(j, c->split(w, rank % 2, rank, "half", &half));
    if (!half) return;
    int32_t x = rank;
    CHECK_OK(j, c->allreduce(half, &x, &x, 1, PLAIT_I32, PLAIT_SUM, &dev_opts, NULL));
    int want = 0;
    for (int r = rank % 2; r < w->size; r += 2) want += r;
    CHECK(j, x == want, "allreduce on the split = %d, expected %d", x, want);
    collectives(half->rank, half, j, &dev_opts);

    /* pairwise exchange through the plugin's own send/receive: both sides
     * post "send, then receive" before waiting */
    const plait_comm_ops *ops = w->ops;
    int peer = w->rank ^ 1;
    if (peer < w->size) {
        char out[300], in[300] = {0};
        for (int i = 0; i < 300; i++) out[i] = (char)(rank * 7 + i);
        plait_buffer sb = {out, sizeof out, PLAIT_MEM_CUDA, -1}, rb = {in, sizeof in, PLAIT_MEM_CUDA, -1};
        plait_buffer z = {NULL, 0, PLAIT_MEM_CUDA, -1};
        void *s1 = NULL, *r1 = NULL, *s0 = NULL, *r0 = NULL;
        CHECK_OK(j, ops->isend(w->pp2p, &sb, peer, 5, NULL, &s1));
        CHECK_OK(j, ops->isend(w->pp2p, &z, peer, 6, NULL, &s0)); /* zero bytes still match */
        CHECK_OK(j, ops->irecv(w->pp2p, &rb, peer, 5, NULL, &r1));
        CHECK_OK(j, ops->irecv(w->pp2p, &z, peer, 6, NULL, &r0));
        size_t got = 0;
        CHECK_OK(j, ops->wait(w->pp2p, r1, 10.0, &got));
        CHECK(j, got == sizeof in, "received %zu bytes", got);
        CHECK_OK(j, ops->wait(w->pp2p, s1, 10.0, NULL));
        int done = 0;
        for (int tries = 0; tries < 10000 && !done; tries++) {
            plait_status st = ops->test(w->pp2p, r0, &done, &got);
            CHECK(j, st == PLAIT_OK, "test: %s", plait_last_error());
            if (st != PLAIT_OK) break;
            if (!done) nap();
        }
        CHECK(j, done && got == 0, "zero-byte receive done %d, %zu bytes", done, got);
        CHECK_OK(j, ops->wait(w->pp2p, s0, 10.0, NULL));
        for (int i = 0; i < 300; i++) CHECK(j, in[i] == (char)(peer * 7 + i), "p2p byte %d", i);
        /* host memory is refused without side effects */
        char host[8];
        plait_buffer hb = {host, 8, PLAIT_MEM_HOST, -1};
        void *hr = NULL;
        CHECK(j, ops->isend(w->pp2p, &hb, peer, 1, NULL, &hr) == PLAIT_ERR_UNSUPPORTED, "host memory accepted");
        CHECK(j, strstr(plait_last_error(), "moves CUDA device memory only") != NULL, "message: %s",
              plait_last_error());
        /* so is a send to itself */
        CHECK(j, ops->isend(w->pp2p, &sb, w->rank, 1, NULL, &hr) == PLAIT_ERR_INVALID_ARG, "send to self accepted");
    }
    c->comm_free(half);
}

static void body_timeout_then_abort(int rank, plait_comm *w, job *j) {
    const plait_comm_ops *ops = w->ops;
    char buf[64];
    plait_buffer b = {buf, sizeof buf, PLAIT_MEM_CUDA, -1};
    void *r = NULL;
    if (rank == 1) {
        /* waits for a message rank 0 never sends; learns that rank 0 aborted */
        CHECK_OK(j, ops->irecv(w->pp2p, &b, 0, 3, NULL, &r));
        pthread_barrier_wait(&j->bar);
        plait_status st = ops->wait(w->pp2p, r, 15.0, NULL);
        CHECK(j, st == PLAIT_ERR_PEER_LOST, "rank 1 got %s: %s", plait_status_name(st), plait_last_error());
        CHECK(j, strstr(plait_last_error(), "remote process exited or there was a network error") != NULL,
              "rank 1 message: %s", plait_last_error());
        CHECK(j, strstr(plait_last_error(), "receive of 64 bytes (tag 3) from rank 0") != NULL, "rank 1 message: %s",
              plait_last_error());
    } else if (rank == 0) {
        CHECK_OK(j, ops->irecv(w->pp2p, &b, 1, 3, NULL, &r));
        pthread_barrier_wait(&j->bar);
        double t0 = plait_host_table()->now();
        plait_status st = ops->wait(w->pp2p, r, 0.2, NULL);
        double dt = plait_host_table()->now() - t0;
        CHECK(j, st == PLAIT_ERR_TIMEOUT, "rank 0 got %s: %s", plait_status_name(st), plait_last_error());
        CHECK(j, dt >= 0.19 && dt < 5, "the wait took %g s", dt);
        CHECK(j, strstr(plait_last_error(), "receive of 64 bytes (tag 3) from rank 1 of communicator") != NULL &&
                     strstr(plait_last_error(), "did not complete within 0.2 s (running on the GPU") != NULL,
              "rank 0 message: %s", plait_last_error());
        ops->abort(w->pp2p, "job going down");
        st = ops->wait(w->pp2p, r, 5.0, NULL);
        CHECK(j, st == PLAIT_ERR_PEER_LOST, "after abort: %s", plait_status_name(st));
        CHECK(j, strstr(plait_last_error(), "aborted: job going down") != NULL, "message: %s", plait_last_error());
        void *r2 = NULL;
        CHECK(j, ops->irecv(w->pp2p, &b, 1, 3, NULL, &r2) == PLAIT_ERR_PEER_LOST, "post after abort accepted");
    } else {
        pthread_barrier_wait(&j->bar);
    }
}

static void body_async_error(int rank, plait_comm *w, job *j) {
    const plait_coll_api *c = plait_coll_api_table();
    float x[16] = {0};
    pthread_barrier_wait(&j->bar); /* both worlds are complete before rank 0's fails */
    if (rank == 0) {
        /* rank 1 never joins this allreduce; NCCL then reports a broken socket */
        plait_request *req = NULL;
        CHECK_OK(j, c->allreduce(w, x, x, 16, PLAIT_F32, PLAIT_SUM, &dev_opts, &req));
        mock_gpu_inject_error(0, ncclSystemError, "mock: socket to rank 1 closed");
        plait_status st = req ? c->wait(req) : PLAIT_ERR_INTERNAL;
        CHECK(j, st == PLAIT_ERR_SYSTEM, "got %s: %s", plait_status_name(st), plait_last_error());
        CHECK(j, strstr(plait_last_error(), "unhandled system error") != NULL, "message: %s", plait_last_error());
        CHECK(j, strstr(plait_last_error(), "socket to rank 1 closed") != NULL, "message: %s", plait_last_error());
        CHECK(j, strstr(plait_last_error(), "allreduce of 16 f32 elements sum") != NULL, "message: %s", plait_last_error());
    }
    pthread_barrier_wait(&j->bar);
}

static void body_streams(int rank, plait_comm *w, job *j) {
    const plait_comm_ops *ops = w->ops;
    plait_stream *s = NULL;
    CHECK_OK(j, ops->stream_create(w->pcoll, &s));
    plait_coll_opts o = dev_opts;
    o.stream = s;
    int64_t v[8];
    for (int i = 0; i < 8; i++) v[i] = rank + i;
    /* ABI 1.4: the stream waits for a device event (cudaStreamWaitEvent) */
    cudaEvent_t ev = NULL;
    CHECK(j, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");
    CHECK(j, cudaEventRecord(ev, (cudaStream_t)(void *)s) == cudaSuccess, "cudaEventRecord");
    CHECK_OK(j, ops->wait_event(w->pcoll, s, ev));
    CHECK_OK(j, plait_coll_api_table()->allreduce(w, v, v, 8, PLAIT_I64, PLAIT_SUM, &o, NULL));
    cudaEventDestroy(ev);
    CHECK_OK(j, ops->stream_sync(w->pcoll, s, 5.0));
    CHECK_OK(j, ops->stream_sync(w->pcoll, NULL, 5.0));
    for (int i = 0; i < 8; i++) CHECK(j, v[i] == w->size * i + w->size * (w->size - 1) / 2, "stream allreduce [%d]", i);
    ops->stream_destroy(w->pcoll, s);
}

static void body_host_memory(int rank, plait_comm *w, job *j) {
    (void)rank;
    /* the native collective refuses host buffers; the core's own algorithm
     * then asks the plugin for host sends, which it refuses too */
    float x = 1;
    plait_status st = plait_coll_api_table()->allreduce(w, &x, &x, 1, PLAIT_F32, PLAIT_SUM, NULL, NULL);
    CHECK(j, st == PLAIT_ERR_UNSUPPORTED, "host allreduce gave %s", plait_status_name(st));
    CHECK(j, strstr(plait_last_error(), "moves CUDA device memory only") != NULL, "message: %s", plait_last_error());
    int launches = mock_gpu_launches();
    const plait_native_coll_ops *co = w->ops->native_coll;
    plait_buffer hb = {&x, 4, PLAIT_MEM_HOST, -1};
    void *req = NULL;
    CHECK(j, co->allreduce(w->pcoll, &hb, &hb, 1, PLAIT_F32, PLAIT_SUM, NULL, &req) == PLAIT_ERR_UNSUPPORTED,
          "native allreduce took host memory");
    CHECK(j, req == NULL && mock_gpu_launches() == launches, "refusal had side effects");
}

/* Host control data with a device open: the loss allreduce, a broadcast of
 * a config hash, an allgather of counters and a barrier all work through
 * the device scratch, with exact results. */
static void body_host_control(int rank, plait_comm *w, job *j) {
    const plait_coll_api *api = plait_coll_api_table();
    int n = j->n;
    float loss[3] = {(float)rank + 0.5f, 2.0f, (float)(rank * rank)}, sum[3] = {0};
    plait_status st = api->allreduce(w, loss, sum, 3, PLAIT_F32, PLAIT_SUM, NULL, NULL);
    CHECK(j, st == PLAIT_OK, "host allreduce: %s", plait_last_error());
    float want0 = 0, want2 = 0;
    for (int q = 0; q < n; q++) want0 += (float)q + 0.5f, want2 += (float)(q * q);
    CHECK(j, sum[0] == want0 && sum[1] == 2.0f * (float)n && sum[2] == want2, "allreduce gave %g %g %g", sum[0],
          sum[1], sum[2]);
    uint64_t hash = rank == 1 ? 0x1234567890abcdefull : 0;
    st = api->broadcast(w, &hash, 1, PLAIT_I64, 1, NULL, NULL);
    CHECK(j, st == PLAIT_OK && hash == 0x1234567890abcdefull, "broadcast: %s", plait_last_error());
    int32_t mine = 10 + rank, all[MAXR] = {0};
    st = api->allgather(w, &mine, all, 1, PLAIT_I32, NULL, NULL);
    for (int q = 0; q < n && st == PLAIT_OK; q++) CHECK(j, all[q] == 10 + q, "allgather[%d] = %d", q, all[q]);
    /* gather and scatter: NCCL has neither; an allgather / a broadcast on
     * device scratch stands in */
    int32_t got[MAXR] = {0}, part = -1, parts[MAXR];
    st = api->gather(w, &mine, got, 1, PLAIT_I32, 2, NULL, NULL);
    CHECK(j, st == PLAIT_OK, "gather: %s", plait_last_error());
    for (int q = 0; q < n && st == PLAIT_OK; q++)
        CHECK(j, got[q] == (rank == 2 ? 10 + q : 0), "gather[%d] on rank %d = %d", q, rank, got[q]);
    for (int q = 0; q < n; q++) parts[q] = rank == 1 ? 100 + q : -7;
    st = api->scatter(w, parts, &part, 1, PLAIT_I32, 1, NULL, NULL);
    CHECK(j, st == PLAIT_OK && part == 100 + rank, "scatter gave %d: %s", part, plait_last_error());
    /* host sends and receives go through device scratch too */
    int64_t token = 1000 + rank, from = 0;
    if (rank < 2) {
        plait_request *rr = NULL, *sr = NULL;
        CHECK_OK(j, api->recv(w, &from, 1, PLAIT_I64, 1 - rank, 5, NULL, &rr));
        CHECK_OK(j, api->send(w, &token, 1, PLAIT_I64, 1 - rank, 5, NULL, &sr));
        if (rr) CHECK_OK(j, api->wait(rr));
        if (sr) CHECK_OK(j, api->wait(sr));
        CHECK(j, from == 1000 + (1 - rank), "host receive on rank %d gave %lld", rank, (long long)from);
    }
    st = api->barrier(w, NULL, NULL);
    CHECK(j, st == PLAIT_OK, "barrier: %s", plait_last_error());
}

/* [comm] check_collectives on, under nccl: the fingerprints travel as host
 * control data too; the host and device collectives above pass, and a
 * gather on one rank against an allgather elsewhere is caught, naming both
 * calls, before anything moves. */
static void body_checked(int rank, plait_comm *w, job *j) {
    body_host_control(rank, w, j);
    collectives(rank, w, j, &dev_opts);
    const plait_coll_api *api = plait_coll_api_table();
    int32_t mine = rank, all[MAXR] = {0};
    plait_status st = rank == 0 ? api->gather(w, &mine, all, 1, PLAIT_I32, 0, NULL, NULL)
                                : api->allgather(w, &mine, all, 1, PLAIT_I32, NULL, NULL);
    CHECK(j, st == PLAIT_ERR_INVALID_ARG, "mismatched collectives gave %s", plait_status_name(st));
    CHECK(j, strstr(plait_last_error(), "the ranks called different collectives") &&
                 strstr(plait_last_error(), "rank 0 called gather(count 1, i32, root 0)") &&
                 strstr(plait_last_error(), "allgather(count 1, i32"),
          "message: %s", plait_last_error());
    /* a rank whose exchange ended first frees its communicator only when
     * every rank has its verdict: freed earlier, its abort reaches a rank
     * still exchanging as a lost peer (seen under load) */
    pthread_barrier_wait(&j->bar);
}

/* ---- tests ------------------------------------------------------------------------- */

/* A pretend NVIDIA driver tree (PLAIT_CUDA_SYSFS_ROOT) under `root` with
 * `gpus` GPUs listed in procfs. */
static void pretend_driver(const char *root, int gpus) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/proc/driver/nvidia/gpus' '%s/dev'", root, root, root);
    assert_int_equal(system(cmd), 0);
    for (int g = 0; g < gpus; g++) {
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/proc/driver/nvidia/gpus/0000:%02x:00.0'", root, 0x10 + g);
        assert_int_equal(system(cmd), 0);
    }
}

/* The probe counts GPUs from the driver's files and makes no CUDA call:
 * with the stand-in runtime answering "no driver" it still finds the
 * pretend driver's GPUs, and the reasons it gives are the driver files'. */
static void test_probe(void **state) {
    (void)state;
    char root[64];
    snprintf(root, sizeof root, "/tmp/plait-nccl-probe-%d", (int)getpid());
    pretend_driver(root, 2);
    setenv("PLAIT_CUDA_SYSFS_ROOT", root, 1);
    mock_gpu_no_driver(); /* any CUDA runtime call would now say so */
    assert_int_equal(g_desc->probe(plait_host_table()), PLAIT_OK);
    setenv("CUDA_VISIBLE_DEVICES", "7", 1);
    assert_int_equal(g_desc->probe(plait_host_table()), PLAIT_ERR_UNSUPPORTED);
    if (!strstr(plait_last_error(), "no CUDA device found (CUDA_VISIBLE_DEVICES=\"7\" leaves none of the 2 GPUs visible)"))
        fail_msg("%s", plait_last_error());
    unsetenv("CUDA_VISIBLE_DEVICES");
    pretend_driver(root, 0);
    assert_int_equal(g_desc->probe(plait_host_table()), PLAIT_ERR_UNSUPPORTED);
    if (!strstr(plait_last_error(), "no CUDA device found (the NVIDIA driver lists no GPU in "))
        fail_msg("%s", plait_last_error());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(g_desc->probe(plait_host_table()), PLAIT_ERR_UNSUPPORTED);
    if (!strstr(plait_last_error(), "no CUDA device found (no NVIDIA driver: "))
        fail_msg("%s", plait_last_error());
    unsetenv("PLAIT_CUDA_SYSFS_ROOT");
}

/* Open file descriptors of this process (the stand-in's shared segments
 * must not outlive their communicators). */
static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static void test_collectives(void **state) {
    (void)state;
    job j;
    int fds = open_fds();
    run_job(&j, 4, NULL, NULL, body_collectives);
    expect_clean(&j);
    assert_true(mock_gpu_launches() > 20);
    assert_int_equal(mock_gpu_aborts(), 0);
    assert_int_equal(open_fds(), fds);
    /* every completed operation was counted, with its bytes */
    assert_true(mock_gpu_op_calls(MOCK_OP_ALLREDUCE) >= 4 && mock_gpu_op_bytes(MOCK_OP_ALLREDUCE) > 0);
    assert_true(mock_gpu_op_calls(MOCK_OP_SEND) == mock_gpu_op_calls(MOCK_OP_RECV));
}

static void test_collectives_three_ranks(void **state) {
    (void)state;
    job j;
    run_job(&j, 3, NULL, NULL, body_collectives);
    expect_clean(&j);
}

static void test_launches_in_progress(void **state) {
    (void)state;
    mock_gpu_set_inprogress_polls(3);
    job j;
    run_job(&j, 2, NULL, NULL, body_collectives);
    expect_clean(&j);
}

static void test_blocking_mode(void **state) {
    (void)state;
    job j;
    run_job(&j, 2, "[comm.nccl]\nnonblocking = false\n", NULL, body_split_and_p2p);
    expect_clean(&j);
}

static void test_split_and_p2p(void **state) {
    (void)state;
    mock_gpu_set_inprogress_polls(1);
    job j;
    run_job(&j, 4, NULL, NULL, body_split_and_p2p);
    expect_clean(&j);
}

static void test_timeout_then_abort(void **state) {
    (void)state;
    job j;
    run_job(&j, 2, NULL, NULL, body_timeout_then_abort);
    if (j.failures) fail_msg("%s", j.failure);
    assert_int_equal(mock_gpu_misuse(), 0);
    assert_int_equal(mock_gpu_aborts(), 2); /* rank 0's by request, rank 1's on the remote error */
    assert_int_equal(mock_gpu_live_comms(), 0);
}

static void test_async_error(void **state) {
    (void)state;
    job j;
    run_job(&j, 2, NULL, NULL, body_async_error);
    if (j.failures) fail_msg("%s", j.failure);
    assert_int_equal(mock_gpu_misuse(), 0);
    assert_true(mock_gpu_aborts() >= 1);
    assert_int_equal(mock_gpu_live_comms(), 0);
    assert_int_equal(mock_gpu_live_allocations(), 0);
}

static void test_streams(void **state) {
    (void)state;
    job j;
    run_job(&j, 2, NULL, NULL, body_streams);
    expect_clean(&j);
}

static void test_host_memory_refused(void **state) {
    (void)state;
    job j;
    run_job(&j, 2, NULL, NULL, body_host_memory);
    if (j.failures) fail_msg("%s", j.failure);
    assert_int_equal(mock_gpu_misuse(), 0);
}

static void test_host_control_data(void **state) {
    (void)state;
    plait_comm_device dev = {PLAIT_MEM_CUDA, mock_copy, mock_alloc, mock_free};
    g_device = &dev;
    job j;
    run_job(&j, 3, NULL, NULL, body_host_control);
    g_device = NULL;
    expect_clean(&j); /* the device scratch went with the communicators */
}

static void test_checked_collectives(void **state) {
    (void)state;
    plait_comm_device dev = {PLAIT_MEM_CUDA, mock_copy, mock_alloc, mock_free};
    g_device = &dev;
    job j;
    g_check_collectives = 1;
    run_job(&j, 3, NULL, NULL, body_checked);
    g_check_collectives = 0;
    g_device = NULL;
    expect_clean(&j);
}

static void test_two_ranks_one_gpu(void **state) {
    (void)state;
    mock_gpu_reset(1);
    job j;
    run_job(&j, 2, NULL, NULL, NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(j.init_st[r], PLAIT_ERR_INVALID_CONFIG);
        if (!strstr(j.init_err[r], "world ranks 0 and 1 would both drive GPU 0 (0000:10:00.0)") ||
            !strstr(j.init_err[r], "NCCL does not support two ranks on one GPU and may hang"))
            fail_msg("rank %d: %s", r, j.init_err[r]);
    }
    assert_int_equal(mock_gpu_live_comms(), 0);
    assert_int_equal(mock_gpu_misuse(), 0);
}

/* With a CUDA device open, NCCL drives that device's GPU: both ranks'
 * devices at ordinal 1 (as [device] ordinal = 1 would give) are refused as
 * two ranks on GPU 1, though two GPUs are visible and local ranks 0 and 1
 * would otherwise pick GPUs 0 and 1. */
static void test_follows_open_device(void **state) {
    (void)state;
    mock_gpu_reset(2);
    static plait_host host;
    static plait_device_info info;
    host = *plait_plugin_host();
    info = (plait_device_info){.struct_size = sizeof info, .mem_kind = PLAIT_MEM_CUDA, .ordinal = 1};
    host.device_info = &info;
    const plait_host *keep = plait_plugin_host();
    plait_loader_set_host(&host);
    job j;
    run_job(&j, 2, NULL, NULL, NULL);
    plait_loader_set_host(keep);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(j.init_st[r], PLAIT_ERR_INVALID_CONFIG);
        if (!strstr(j.init_err[r], "world ranks 0 and 1 would both drive GPU 1"))
            fail_msg("rank %d: %s", r, j.init_err[r]);
    }
    assert_int_equal(mock_gpu_live_comms(), 0);
    /* and without the device, the same job runs: local rank -> GPU */
    run_job(&j, 2, NULL, NULL, NULL);
    expect_clean(&j);
}

static void test_bad_device_on_one_rank(void **state) {
    (void)state;
    mock_gpu_reset(2);
    const char *cfgs[2] = {"[comm.nccl]\ndevice = 1\n", "[comm.nccl]\ndevice = 5\n"};
    job j;
    run_job(&j, 2, NULL, cfgs, NULL);
    assert_int_equal(j.init_st[1], PLAIT_ERR_INVALID_CONFIG);
    if (!strstr(j.init_err[1], "[comm.nccl] device = 5, but rank 1 sees only 2 CUDA devices (0..1)"))
        fail_msg("rank 1: %s", j.init_err[1]);
    /* rank 0 fails at once too, naming rank 1 and why */
    assert_int_equal(j.init_st[0], PLAIT_ERR_UNSUPPORTED);
    if (!strstr(j.init_err[0], "world rank 1") || !strstr(j.init_err[0], "device = 5"))
        fail_msg("rank 0: %s", j.init_err[0]);
    assert_int_equal(mock_gpu_live_comms(), 0);
}

/* What the probe cannot see from the driver's files, init() (in the rank,
 * where CUDA is used anyway) reports from the CUDA runtime. */
static void test_no_driver(void **state) {
    (void)state;
    mock_gpu_no_driver();
    job j;
    run_job(&j, 2, NULL, NULL, NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(j.init_st[r], PLAIT_ERR_UNSUPPORTED);
        if (!strstr(j.init_err[r], "no CUDA device found (cudaGetDeviceCount: cudaErrorInsufficientDriver") ||
            !strstr(j.init_err[r], "no NVIDIA driver is loaded"))
            fail_msg("rank %d: %s", r, j.init_err[r]);
    }
    assert_int_equal(mock_gpu_live_comms(), 0);
    mock_gpu_reset(0);
    run_job(&j, 2, NULL, NULL, NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(j.init_st[r], PLAIT_ERR_UNSUPPORTED);
        if (!strstr(j.init_err[r], "no CUDA device found (the CUDA runtime sees none"))
            fail_msg("rank %d: %s", r, j.init_err[r]);
    }
    assert_int_equal(mock_gpu_live_comms(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collectives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collectives_three_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launches_in_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blocking_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_and_p2p, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_then_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_memory_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_control_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checked_collectives, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follows_open_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_ranks_one_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_device_on_one_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_driver, setup, teardown),
    };
    return nccl_job_main("test_nccl_plugin", tests, sizeof tests / sizeof tests[0]);
}
