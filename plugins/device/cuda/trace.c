/*
 * The device's work in the step trace (plait/device.h trace_begin and
 * trace_end, ABI 1.16): while the core traces a step, each kernel-table
 * entry (kernels.c: its kernels and products, named by the entry) and
 * each copy and fill (memory.c) is bracketed by two timing events on its
 * stream; trace_end reads them and hands the spans to the core.
 *
 * The host's clock: trace_begin waits for the compute stream, records an
 * anchor event and waits for it, reading the host's clock before and
 * after; the anchor ran between the two readings (taken at their middle,
 * within half their distance: microseconds on an idle stream), and every
 * other event is the anchor's host time plus cudaEventElapsedTime from it
 * (events of both streams of one device compare).
 *
 * One span at a time a stream: a span's start and end are recorded under
 * its stream's lock, so work another thread queues on the same stream
 * (a copy from the communication thread) cannot fall between them, and
 * the spans of one stream never overlap. Outside traced steps a span costs
 * a call and one relaxed load.
 *
 * Events are recycled from step to step; a step keeps at most
 * PC_TRACE_SPANS spans, later ones counted as dropped.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "pcuda.h"

#define PC_TRACE_SPANS 32768

typedef struct pc_trace_rec {
    cudaEvent_t start, end;
    const char *name;
    plait_device_stream stream;
    int is_copy;
    uint64_t bytes;
} pc_trace_rec;

/* Whether a step is being timed: read by any thread without a lock. */
static int g_on;
static pthread_mutex_t g_stream_lock[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* the records and the free events */
static pc_trace_rec *g_recs;
static size_t g_n, g_cap;
static uint64_t g_dropped;
static cudaEvent_t *g_free;
static size_t g_n_free, g_free_cap;
static cudaEvent_t g_anchor;
static uint64_t g_anchor_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A timing event (under g_lock): a recycled one, else a new one. */
static cudaEvent_t take_event(void) {
    if (g_n_free) return g_free[--g_n_free];
    cudaEvent_t e = NULL;
    if (cudaEventCreate(&e) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return e;
}

/* Back into the free list (under g_lock); destroyed when it cannot grow. */
static void give_event(cudaEvent_t e) {
    if (!e) return;
    if (g_n_free == g_free_cap) {
        size_t cap = g_free_cap ? 2 * g_free_cap : 256;
        cudaEvent_t *f = realloc(g_free, cap * sizeof *f);
        if (!f) {
            cudaEventDestroy(e);
            return;
        }
        g_free = f, g_free_cap = cap;
    }
    g_free[g_n_free++] = e;
}

static cudaStream_t stream_of(plait_device_stream s) { return s == PLAIT_STREAM_COMM ? pc.comm_stream : pc.stream; }

int pc_trace_span_begin(plait_device_stream stream, const char *name, int is_copy, uint64_t bytes) {
    if (!__atomic_load_n(&g_on, __ATOMIC_RELAXED)) return -1;
    int s = stream == PLAIT_STREAM_COMM ? 1 : 0;
    pthread_mutex_lock(&g_stream_lock[s]);
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    cudaEvent_t start = NULL;
    if (!__atomic_load_n(&g_on, __ATOMIC_ACQUIRE)) {
        /* trace_end came first */
    } else if (g_n == PC_TRACE_SPANS) {
        g_dropped++;
    } else {
        if (g_n == g_cap) {
            size_t cap = g_cap ? 2 * g_cap : 1024;
            pc_trace_rec *r = realloc(g_recs, cap * sizeof *r);
            if (r) g_recs = r, g_cap = cap;
        }
        cudaEvent_t a = g_n < g_cap ? take_event() : NULL, b = a ? take_event() : NULL;
        if (a && b) {
            g_recs[g_n] = (pc_trace_rec){a, b, name, stream, is_copy, bytes};
            start = a;
            slot = (int)g_n++;
        } else {
            give_event(a);
            g_dropped++;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (slot < 0) {
        pthread_mutex_unlock(&g_stream_lock[s]);
        return -1;
    }
    /* g_recs may move (another stream's span): its events are read under g_lock */
    if (cudaEventRecord(start, stream_of(stream)) != cudaSuccess) (void)cudaGetLastError();
    return slot * 2 + s;
}

void pc_trace_span_end(int span) {
    if (span < 0) return;
    int s = span % 2, slot = span / 2;
    pthread_mutex_lock(&g_lock);
    cudaEvent_t end = g_recs[slot].end;
    pthread_mutex_unlock(&g_lock);
    if (cudaEventRecord(end, s ? pc.comm_stream : pc.stream) != cudaSuccess) (void)cudaGetLastError();
    pthread_mutex_unlock(&g_stream_lock[s]);
}

/* No span starts from here; one under way ends before its stream's lock
 * is free. */
static void stop_spans(void) {
    __atomic_store_n(&g_on, 0, __ATOMIC_RELEASE);
    for (int s = 0; s < 2; s++) {
        pthread_mutex_lock(&g_stream_lock[s]);
        pthread_mutex_unlock(&g_stream_lock[s]);
    }
}

plait_status pc_trace_begin(void) {
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: trace_begin before the device was opened");
    if (!pc_make_current()) return pc_cuda_status(cudaGetLastError(), "cudaSetDevice");
    /* the spans of a step that never reached trace_end (it failed, and the
     * run went on) are discarded, their events kept for this one */
    stop_spans();
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_n; i++) {
        give_event(g_recs[i].start);
        give_event(g_recs[i].end);
    }
    g_n = 0;
    g_dropped = 0;
    if (!g_anchor) g_anchor = take_event();
    pthread_mutex_unlock(&g_lock);
    if (!g_anchor) return pc_cuda_status(cudaGetLastError(), "cudaEventCreate for the step trace");
    cudaError_t e = cudaStreamSynchronize(pc.stream);
    uint64_t before = now_ns();
    if (e == cudaSuccess) e = cudaEventRecord(g_anchor, pc.stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(g_anchor);
    uint64_t after = now_ns();
    if (e != cudaSuccess) return pc_cuda_status(e, "the step trace's anchor event (or work queued before it)");
    g_anchor_ns = before + (after - before) / 2;
    __atomic_store_n(&g_on, 1, __ATOMIC_RELEASE);
    return PLAIT_OK;
}

/* A span's event on the host's clock; 0 where its time cannot be read. */
static uint64_t host_ns(cudaEvent_t e) {
    float ms = 0.0f;
    if (cudaEventSynchronize(e) != cudaSuccess || cudaEventElapsedTime(&ms, g_anchor, e) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    /* recorded after the anchor completed: never before it */
    return g_anchor_ns + (ms > 0.0f ? (uint64_t)((double)ms * 1e6 + 0.5) : 0);
}

plait_status pc_trace_end(plait_device_span_fn fn, void *ctx, uint64_t *dropped) {
    stop_spans();
    if (dropped) *dropped = g_dropped;
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: trace_end before the device was opened");
    if (!pc_make_current()) return pc_cuda_status(cudaGetLastError(), "cudaSetDevice");
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_n; i++) {
        pc_trace_rec *r = &g_recs[i];
        uint64_t t0 = host_ns(r->start), t1 = host_ns(r->end);
        if (t0 && t1 >= t0 && fn) {
            plait_device_span sp = {.struct_size = sizeof sp,
                                    .name = r->name,
                                    .is_copy = r->is_copy,
                                    .stream = r->stream,
                                    .start_ns = t0,
                                    .end_ns = t1,
                                    .bytes = r->bytes};
            fn(ctx, &sp);
        }
        give_event(r->start);
        give_event(r->end);
    }
    g_n = 0;
    pthread_mutex_unlock(&g_lock);
    return PLAIT_OK;
}

void pc_trace_release(void) {
    __atomic_store_n(&g_on, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_n; i++) {
        cudaEventDestroy(g_recs[i].start);
        cudaEventDestroy(g_recs[i].end);
    }
    for (size_t i = 0; i < g_n_free; i++) cudaEventDestroy(g_free[i]);
    if (g_anchor) cudaEventDestroy(g_anchor);
    g_anchor = NULL;
    free(g_recs);
    free(g_free);
    g_recs = NULL;
    g_free = NULL;
    g_n = g_cap = g_n_free = g_free_cap = 0;
    (void)cudaGetLastError();
    pthread_mutex_unlock(&g_lock);
}
