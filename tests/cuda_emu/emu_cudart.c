/*
 * The emulated CUDA runtime: the CUDA runtime functions the cuda device
 * plugin calls, declared by NVIDIA's own header, over host memory. One
 * emulated GPU (PLAIT_CUDA_EMU_DEVICES of them if set), compute
 * capability 9.0, 16 GiB, named "plait CUDA emulator (CPU)". This file:
 * errors, devices, the checks a launch passes, streams and events; the
 * memory it hands out, copies and memsets are emu_memory.c's, and what
 * the two share is emu_cudart.h.
 *
 * Streams are late, as a GPU's are (emu_queue.h): a kernel, product, copy,
 * memset or event record is queued on its stream and runs in stream order
 * when a host thread synchronises (stream, event, device, a free) or a
 * stream waiting on an event needs it.
 *
 * Where a GPU would fault or misbehave, this runtime refuses loudly
 * instead (emu_memory.c says how for memory): an unknown stream or event
 * is an error, a launch over its kernel's __launch_bounds__ or dynamic
 * shared memory allowance fails, and a launch failure is sticky, as
 * CUDA's is.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_cudart.h"
#include "emu_queue.h"
#include "emu_runtime.h"
#include "emu_sched.h"

/* Shared memory a block may have without opting in (more: up to
 * shared_optin()). */
#define EMU_SHARED_DEFAULT (48 << 10)

/* The most dynamic shared memory a block may opt in to: a GPU of compute
 * capability 9.0's 227 KiB (PC_EMU_SHARED_OPTIN), or less where
 * PLAIT_CUDA_EMU_SHARED_OPTIN_KIB says so, to play a smaller GPU (99 for
 * sm_86 and sm_89, 163 for sm_80). */
static unsigned shared_optin(void) {
    const char *e = getenv("PLAIT_CUDA_EMU_SHARED_OPTIN_KIB");
    const long kib = e && *e ? atol(e) : 0;
    return kib > 0 && ((unsigned long)kib << 10) < PC_EMU_SHARED_OPTIN ? (unsigned)kib << 10 : PC_EMU_SHARED_OPTIN;
}

/* ---- errors ---------------------------------------------------------------- */

_Thread_local cudaError_t tl_last;
static cudaError_t g_sticky; /* under g_lock */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

cudaError_t sticky(void) {
    pthread_mutex_lock(&g_lock);
    cudaError_t e = g_sticky;
    pthread_mutex_unlock(&g_lock);
    return e;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_emu: %s\n", msg);
    tl_last = e;
    return e;
}

cudaError_t ok_or_sticky(void) {
    cudaError_t e = sticky();
    if (e != cudaSuccess) tl_last = e;
    return e;
}

/* The reason for a failure found while queued work ran (not a kernel's:
 * those are emu_sched's), for cudaGetErrorString. */
static char g_async_why[512]; /* under g_lock, written once */

void fail_async(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_lock);
    if (!g_async_why[0]) vsnprintf(g_async_why, sizeof g_async_why, fmt, ap);
    g_sticky = cudaErrorLaunchFailure;
    fprintf(stderr, "cuda_emu: %s\n", g_async_why);
    pthread_mutex_unlock(&g_lock);
    va_end(ap);
}

void pc_emu_launched(int rc) {
    if (rc == 0) return;
    pthread_mutex_lock(&g_lock);
    g_sticky = cudaErrorLaunchFailure;
    pthread_mutex_unlock(&g_lock);
    tl_last = cudaErrorLaunchFailure;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = tl_last;
    tl_last = cudaSuccess;
    return e != cudaSuccess ? e : sticky();
}

cudaError_t cudaPeekAtLastError(void) { return tl_last != cudaSuccess ? tl_last : sticky(); }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: {
        pthread_mutex_lock(&g_lock);
        const char *why = g_async_why[0] ? g_async_why : pc_emu_failure();
        pthread_mutex_unlock(&g_lock);
        return why ? why : "unspecified launch failure";
    }
    default: return "unknown error";
    }
}

/* ---- devices ------------------------------------------------------------------ */

static _Thread_local int tl_device;

static int device_count(void) {
    const char *e = getenv("PLAIT_CUDA_EMU_DEVICES");
    return e && *e ? atoi(e) : 1;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) return tl_last = cudaErrorInvalidDevice;
    tl_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = tl_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= device_count()) return tl_last = cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "plait CUDA emulator (CPU)");
    prop->totalGlobalMem = EMU_MEMORY;
    prop->multiProcessorCount = 8;
    prop->major = 9;
    prop->minor = 0;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = EMU_SHARED_DEFAULT;
    prop->sharedMemPerBlockOptin = shared_optin();
    return cudaSuccess;
}


/* What the nccl plugin asks before it creates a communicator. */
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device) {
    if (device < 0 || device >= device_count()) return tl_last = cudaErrorInvalidDevice;
    snprintf(buf, (size_t)len, "0000:%02x:00.0", 0x40 + device);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= device_count()) return tl_last = cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess; /* cudaMallocAsync: emu_memory.c */
    case cudaDevAttrMultiProcessorCount: *value = 8; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute(%d): not emulated", (int)attr);
    }
}

/* ---- launch bounds ------------------------------------------------------------ */

int pc_emu_check_bound(const char *kernel, unsigned threads, unsigned max_threads) {
    if (max_threads ? threads <= max_threads : threads <= PC_EMU_UNBOUNDED_THREADS) return 1;
    if (max_threads)
        fprintf(stderr, "cuda_emu: kernel %s launched with %u threads a block, over its __launch_bounds__ %u (a GPU "
                        "refuses the launch)\n",
                kernel, threads, max_threads);
    else
        fprintf(stderr, "cuda_emu: kernel %s launched with %u threads a block and no __launch_bounds__ (PC_KERNEL): "
                        "over %u, the registers the compiler may give a thread can exceed the multiprocessor's, "
                        "and a GPU refuses the launch (under -G sooner)\n",
                kernel, threads, PC_EMU_UNBOUNDED_THREADS);
    return 0;
}

/* ---- dynamic shared memory ------------------------------------------------------ */

/* cudaFuncAttributeMaxDynamicSharedMemorySize per (device, kernel) */
typedef struct func_shared {
    int device;
    const void *func;
    int max_dynamic;
} func_shared;
#define EMU_FUNCS 256
static func_shared g_func_shared[EMU_FUNCS]; /* under g_lock */
static int g_nfunc_shared;

/* The kernel's entry on the calling thread's device, or NULL. Under g_lock. */
static func_shared *func_entry(const void *func) {
    for (int i = 0; i < g_nfunc_shared; i++)
        if (g_func_shared[i].func == func && g_func_shared[i].device == tl_device) return &g_func_shared[i];
    return NULL;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(%d): not emulated", (int)attr);
    if (!func || value < 0 || (unsigned)value > shared_optin())
        return fail(cudaErrorInvalidValue,
                    "cudaFuncSetAttribute(%p, MaxDynamicSharedMemorySize, %d): over the %u bytes a block may opt in to",
                    func, value, shared_optin());
    pthread_mutex_lock(&g_lock);
    func_shared *e = func_entry(func);
    if (!e && g_nfunc_shared < EMU_FUNCS) {
        e = &g_func_shared[g_nfunc_shared++];
        *e = (func_shared){tl_device, func, 0};
    }
    if (e) e->max_dynamic = value;
    pthread_mutex_unlock(&g_lock);
    return e ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaFuncSetAttribute: over %d kernels", EMU_FUNCS);
}

int pc_emu_check_shared(const char *kernel, const void *func, size_t bytes) {
    if (bytes <= EMU_SHARED_DEFAULT) return 1;
    pthread_mutex_lock(&g_lock);
    const func_shared *e = func_entry(func);
    const size_t max = e ? (size_t)e->max_dynamic : 0;
    pthread_mutex_unlock(&g_lock);
    if (bytes <= max) return 1;
    fprintf(stderr, "cuda_emu: kernel %s launched with %zu bytes of dynamic shared memory, over the %d a block gets "
                    "without opting in and the %zu its cudaFuncAttributeMaxDynamicSharedMemorySize allows (a GPU "
                    "refuses the launch)\n",
            kernel, bytes, EMU_SHARED_DEFAULT, max);
    return 0;
}

/* ---- synchronisations ----------------------------------------------------------- */

/* Device-wide synchronisations so far (cudaFree, cudaFreeHost,
 * cudaDeviceSynchronize): each waits for every stream, the communication
 * stream's collectives in flight included. Exported (the plugin is
 * otherwise hidden) so a test can see that a code path makes none: a test
 * finds it with dlsym in the loaded plugin. */
static uint64_t g_device_syncs; /* under g_lock */
/* Host waits for one stream or event so far (cudaStreamSynchronize,
 * cudaEventSynchronize), exported likewise. */
static uint64_t g_stream_syncs; /* under g_lock */

static uint64_t counter_read(const uint64_t *c) {
    pthread_mutex_lock(&g_lock);
    uint64_t n = *c;
    pthread_mutex_unlock(&g_lock);
    return n;
}

static void counter_add(uint64_t *c) {
    pthread_mutex_lock(&g_lock);
    (*c)++;
    pthread_mutex_unlock(&g_lock);
}

__attribute__((visibility("default"))) uint64_t plait_cuda_emu_device_syncs(void) {
    return counter_read(&g_device_syncs);
}

__attribute__((visibility("default"))) uint64_t plait_cuda_emu_stream_syncs(void) {
    return counter_read(&g_stream_syncs);
}

void device_sync(void) {
    counter_add(&g_device_syncs);
    pc_emu_queue_run_all();
}

/* ---- streams and events ------------------------------------------------------------ */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U

/* When the stream reached an event's record: the host's clock read as the
 * record ran in stream order (shared by the event and its queued mark, each
 * holding a reference, so either may go first). */
typedef struct emu_stamp {
    int refs;  /* under g_lock */
    double ms; /* under g_lock; < 0 until the record ran */
} emu_stamp;

/* An event is the position of its last record in a stream's queue
 * (q NULL: never recorded, complete), and the time the stream reached it
 * (stamp NULL without timing: cudaEventDisableTiming). */
typedef struct emu_event {
    unsigned magic;
    unsigned flags;
    emu_queue *q;
    uint64_t pos;
    emu_stamp *stamp;
} emu_event;

static void stamp_unref(void *ctx) {
    emu_stamp *t = ctx;
    pthread_mutex_lock(&g_lock);
    int last = --t->refs == 0;
    pthread_mutex_unlock(&g_lock);
    if (last) free(t);
}

static void stamp_run(void *ctx) {
    emu_stamp *t = ctx;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&g_lock);
    t->ms = (double)now.tv_sec * 1e3 + (double)now.tv_nsec / 1e6;
    pthread_mutex_unlock(&g_lock);
}

/* The legacy default stream (cudaStream_t 0): cudaMemcpy, cudaMemset and
 * launches without a stream. The plugin's streams are non-blocking, so it
 * does not order with them. */
static emu_stream g_default = {STREAM_MAGIC, NULL, 0};
static unsigned g_streams; /* under g_lock: streams created so far */

static FILE *g_log;
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_open(void) {
    const char *p = getenv("PLAIT_CUDA_EMU_LOG");
    if (p && *p && !(g_log = fopen(p, "a"))) fprintf(stderr, "cuda_emu: cannot open PLAIT_CUDA_EMU_LOG=%s\n", p);
}

void note_queued(const emu_stream *st, const char *what) {
    pthread_once(&g_log_once, log_open);
    if (!g_log) return;
    pthread_mutex_lock(&g_log_lock);
    fprintf(g_log, "%u %s\n", st->id, what);
    fflush(g_log); /* a rank that ends in _exit still leaves its lines */
    pthread_mutex_unlock(&g_log_lock);
}
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void default_stream_init(void) { g_default.q = pc_emu_queue_new(); }

/* The stream behind a handle, or NULL (an error set) */
emu_stream *stream_of(cudaStream_t s) {
    if (!s) {
        pthread_once(&g_default_once, default_stream_init);
        if (g_default.q) return &g_default;
        tl_last = cudaErrorMemoryAllocation;
        return NULL;
    }
    emu_stream *st = (emu_stream *)(void *)s;
    if (st->magic != STREAM_MAGIC) {
        tl_last = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return st;
}

static emu_event *event_of(cudaEvent_t e) {
    emu_event *ev = (emu_event *)(void *)e;
    if (!ev || ev->magic != EVENT_MAGIC) {
        tl_last = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return ev;
}

/* The cuBLASLt stand-in queues its products on the stream it is given
 * (plait_cublaslt_emu_set_queue in cublaslt/cublaslt.c): it is loaded by
 * path, so it learns the queue function from here, once, the first time a
 * stream is created (before the plugin can load it). */
#ifdef PLAIT_CUDA_EMU_LT
#include <dlfcn.h>
static void lt_hook(void) {
    void *lib = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL); /* kept open: the plugin's dlopen shares it */
    void (*set)(int (*)(void *, void (*)(void *), void (*)(void *), void *)) =
        lib ? (void (*)(int (*)(void *, void (*)(void *), void (*)(void *), void *)))dlsym(
                  lib, "plait_cublaslt_emu_set_queue")
            : NULL;
    if (set) set(pc_emu_enqueue);
    else fprintf(stderr, "cuda_emu: the cuBLASLt stand-in %s cannot queue on streams: %s\n", PLAIT_CUDA_EMU_LT,
                 dlerror());
}
#else
static void lt_hook(void) {}
#endif
static pthread_once_t g_lt_once = PTHREAD_ONCE_INIT;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    pthread_once(&g_lt_once, lt_hook);
    emu_stream *st = malloc(sizeof *st);
    emu_queue *q = st ? pc_emu_queue_new() : NULL;
    if (!q) {
        free(st);
        return tl_last = cudaErrorMemoryAllocation;
    }
    pthread_mutex_lock(&g_lock);
    unsigned id = ++g_streams;
    pthread_mutex_unlock(&g_lock);
    *st = (emu_stream){STREAM_MAGIC, q, id};
    *s = (cudaStream_t)(void *)st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    emu_stream *st = s ? stream_of(s) : NULL;
    if (!st) return tl_last = cudaErrorInvalidResourceHandle;
    st->magic = 0;
    pc_emu_queue_unref(st->q); /* what is queued still runs */
    free(st);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu_stream *st = stream_of(s);
    if (!st) return tl_last;
    counter_add(&g_stream_syncs);
    pc_emu_queue_run(st->q, UINT64_MAX);
    return ok_or_sticky();
}

cudaError_t cudaDeviceSynchronize(void) {
    device_sync();
    return ok_or_sticky();
}

int pc_emu_enqueue(void *stream, void (*run)(void *), void (*drop)(void *), void *ctx) {
    emu_stream *st = stream_of((cudaStream_t)stream);
    if (!st) {
        if (drop) drop(ctx);
        return -1;
    }
    note_queued(st, "kernel");
    return pc_emu_queue_push(st->q, run, drop, ctx) ? 0 : -1;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    emu_event *ev = calloc(1, sizeof *ev);
    if (!ev) return tl_last = cudaErrorMemoryAllocation;
    ev->magic = EVENT_MAGIC;
    ev->flags = flags;
    *e = (cudaEvent_t)(void *)ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    emu_event *ev = event_of(e);
    if (!ev) return tl_last;
    ev->magic = 0;
    if (ev->q) pc_emu_queue_unref(ev->q);
    if (ev->stamp) stamp_unref(ev->stamp);
    free(ev);
    return cudaSuccess;
}

static void nothing(void *ctx) { (void)ctx; }

/* The event completes when the stream's work queued so far has run (a mark
 * in the queue, so that position exists even for an empty stream); with
 * timing, the mark reads the clock when it runs. */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    emu_event *ev = event_of(e);
    emu_stream *st = ev ? stream_of(s) : NULL;
    if (!st) return tl_last = cudaErrorInvalidResourceHandle;
    emu_stamp *t = NULL;
    if (!(ev->flags & cudaEventDisableTiming)) {
        t = malloc(sizeof *t);
        if (!t) return tl_last = cudaErrorMemoryAllocation;
        *t = (emu_stamp){2, -1.0};
    }
    note_queued(st, "record");
    uint64_t pos = t ? pc_emu_queue_push(st->q, stamp_run, stamp_unref, t) : pc_emu_queue_push(st->q, nothing, NULL, NULL);
    if (!pos) {
        free(t);
        return tl_last = cudaErrorMemoryAllocation;
    }
    pc_emu_queue_ref(st->q);
    if (ev->q) pc_emu_queue_unref(ev->q);
    if (ev->stamp) stamp_unref(ev->stamp);
    ev->q = st->q;
    ev->pos = pos;
    ev->stamp = t;
    return ok_or_sticky();
}

/* CUDA's answers: either event without timing or never recorded, an
 * invalid handle; either not reached yet, not ready (without running
 * anything: a caller polls with cudaEventQuery). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    emu_event *a = event_of(start), *b = a ? event_of(end) : NULL;
    if (!b) return tl_last = cudaErrorInvalidResourceHandle;
    if (!ms) return tl_last = cudaErrorInvalidValue;
    if (!a->stamp || !b->stamp) return tl_last = cudaErrorInvalidResourceHandle;
    if (!pc_emu_queue_done(a->q, a->pos) || !pc_emu_queue_done(b->q, b->pos)) return tl_last = cudaErrorNotReady;
    pthread_mutex_lock(&g_lock);
    double t0 = a->stamp->ms, t1 = b->stamp->ms;
    pthread_mutex_unlock(&g_lock);
    if (t0 < 0.0 || t1 < 0.0) return tl_last = cudaErrorNotReady; /* dropped unrun: never reached */
    *ms = (float)(t1 - t0);
    return ok_or_sticky();
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu_event *ev = event_of(e);
    if (!ev) return tl_last;
    counter_add(&g_stream_syncs);
    if (ev->q) pc_emu_queue_run(ev->q, ev->pos);
    return ok_or_sticky();
}

/* Not complete yet: cudaErrorNotReady, and the work then runs, so a caller
 * polling it sees it complete on its next query. */
cudaError_t cudaEventQuery(cudaEvent_t e) {
    emu_event *ev = event_of(e);
    if (!ev) return tl_last;
    if (ev->q && !pc_emu_queue_done(ev->q, ev->pos)) {
        pc_emu_queue_run(ev->q, ev->pos);
        return cudaErrorNotReady;
    }
    return ok_or_sticky();
}

/* A wait queued in one stream runs the recorded stream up to the event's
 * position as it was when the wait was queued (CUDA's semantics: a later
 * record does not move a queued wait). */
typedef struct wait_item {
    emu_queue *q;
    uint64_t pos;
} wait_item;

static void wait_run(void *ctx) {
    wait_item *w = ctx;
    pc_emu_queue_run(w->q, w->pos);
}

static void wait_drop(void *ctx) {
    wait_item *w = ctx;
    pc_emu_queue_unref(w->q);
    free(w);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    emu_event *ev = event_of(e);
    emu_stream *st = ev ? stream_of(s) : NULL;
    if (!st) return tl_last = cudaErrorInvalidResourceHandle;
    if (!ev->q || ev->q == st->q) return ok_or_sticky(); /* nothing to wait for, or in order already */
    wait_item *w = malloc(sizeof *w);
    if (!w) return tl_last = cudaErrorMemoryAllocation;
    *w = (wait_item){ev->q, ev->pos};
    pc_emu_queue_ref(w->q);
    note_queued(st, "wait");
    if (!pc_emu_queue_push(st->q, wait_run, wait_drop, w)) return tl_last = cudaErrorMemoryAllocation;
    return ok_or_sticky();
}

