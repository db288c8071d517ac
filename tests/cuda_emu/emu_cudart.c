/*
 * The emulated CUDA runtime: the CUDA runtime functions the cuda device
 * plugin calls, declared by NVIDIA's own header, over host memory. One
 * emulated GPU (PLAIT_CUDA_EMU_DEVICES of them if set), compute
 * capability 9.0, 16 GiB, named "plait CUDA emulator (CPU)".
 *
 * Streams are late, as a GPU's are (emu_queue.h): a kernel, product, copy,
 * memset or event record is queued on its stream and runs in stream order
 * when a host thread synchronises (stream, event, device, a free) or a
 * stream waiting on an event needs it. Copies follow CUDA's rules for host
 * memory: from pageable memory the bytes are taken at the call; to
 * pageable memory the call returns once the copy ran; page-locked memory
 * is read or written when the copy runs, so the destination of a copy to
 * page-locked memory holds NaN until then, and a page-locked source the
 * host writes before its copy ran is reported as a sticky failure.
 *
 * Where a GPU would fault or misbehave, this runtime refuses loudly
 * instead: memory handed out by cudaMalloc is filled with 0xff bytes (NaN
 * as floats), so a kernel that reads what nobody wrote shows it; a copy
 * whose direction does not match where its pointers live, a memset or
 * kernel pointer outside device memory, a free of an unknown pointer, an
 * unknown stream or event are errors; a launch failure is sticky, as
 * CUDA's is. Device memory is capped at the advertised size, so
 * out-of-memory paths run too.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_queue.h"
#include "emu_runtime.h"
#include "emu_sched.h"

#define EMU_MEMORY ((size_t)16 << 30)
#define EMU_ALIGN 256

/* ---- errors ---------------------------------------------------------------- */

static _Thread_local cudaError_t tl_last;
static cudaError_t g_sticky; /* under g_lock */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t sticky(void) {
    pthread_mutex_lock(&g_lock);
    cudaError_t e = g_sticky;
    pthread_mutex_unlock(&g_lock);
    return e;
}

__attribute__((format(printf, 2, 3))) static cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_emu: %s\n", msg);
    tl_last = e;
    return e;
}

static cudaError_t ok_or_sticky(void) {
    cudaError_t e = sticky();
    if (e != cudaSuccess) tl_last = e;
    return e;
}

/* The reason for a failure found while queued work ran (not a kernel's:
 * those are emu_sched's), for cudaGetErrorString. */
static char g_async_why[512]; /* under g_lock, written once */

__attribute__((format(printf, 1, 2))) static void fail_async(const char *fmt, ...) {
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
    prop->sharedMemPerBlock = 48 << 10;
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
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess; /* cudaMallocAsync below */
    case cudaDevAttrMultiProcessorCount: *value = 8; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute(%d): not emulated", (int)attr);
    }
}

/* ---- memory: a table of what was handed out ------------------------------------- */

typedef struct region {
    char *p;
    size_t n;
    int pinned;
} region;

static region *g_regions; /* under g_lock */
static size_t g_nregions, g_capregions, g_device_bytes;

static int add_region(void *p, size_t n, int pinned) {
    pthread_mutex_lock(&g_lock);
    if (g_nregions == g_capregions) {
        size_t cap = g_capregions ? 2 * g_capregions : 64;
        region *r = realloc(g_regions, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&g_lock);
            return -1;
        }
        g_regions = r;
        g_capregions = cap;
    }
    g_regions[g_nregions++] = (region){p, n, pinned};
    if (!pinned) g_device_bytes += n;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

/* The region holding [p, p+n), or -1: its kind in *pinned. */
static int find_region(const void *p, size_t n, int *pinned) {
    const char *c = p;
    int found = -1;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nregions; i++)
        if (c >= g_regions[i].p && c < g_regions[i].p + g_regions[i].n) {
            if ((size_t)(g_regions[i].p + g_regions[i].n - c) >= n) {
                found = (int)i;
                *pinned = g_regions[i].pinned;
            }
            break;
        }
    pthread_mutex_unlock(&g_lock);
    return found;
}

static int is_device(const void *p, size_t n) {
    int pinned = 0;
    return find_region(p, n ? n : 1, &pinned) >= 0 && !pinned;
}

static cudaError_t remove_region(void *p, int pinned) {
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nregions; i++)
        if (g_regions[i].p == p && g_regions[i].pinned == pinned) {
            if (!pinned) g_device_bytes -= g_regions[i].n;
            g_regions[i] = g_regions[--g_nregions];
            pthread_mutex_unlock(&g_lock);
            free(p);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&g_lock);
    return fail(cudaErrorInvalidValue, "%s(%p): not a pointer this runtime allocated", pinned ? "cudaFreeHost" : "cudaFree",
                p);
}

int pc_emu_check_kernel_pointer(const char *kernel, int index, const void *p) {
    int pinned = 0;
    if (!p || find_region(p, 1, &pinned) >= 0) return 1;
    fprintf(stderr, "cuda_emu: kernel %s, argument %d: %p is not device or pinned memory (a GPU would fault)\n",
            kernel, index, p);
    return 0;
}

int pc_emu_is_device_memory(const void *p) { return is_device(p, 1); }

int pc_emu_is_global_memory(const void *p, size_t n) {
    int pinned = 0;
    return find_region(p, n ? n : 1, &pinned) >= 0;
}

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

/* CUDA 11 and later: device memory, page-locked host memory, or plain
 * (pageable) host memory, which is not an error. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    int pinned = 0;
    if (find_region(p, 1, &pinned) < 0) {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        return cudaSuccess;
    }
    a->type = pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    a->device = 0;
    a->devicePointer = (void *)p;
    a->hostPointer = pinned ? (void *)p : NULL;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    *p = NULL;
    if (sticky()) return ok_or_sticky();
    pthread_mutex_lock(&g_lock);
    int over = n > EMU_MEMORY - g_device_bytes;
    pthread_mutex_unlock(&g_lock);
    if (over) return tl_last = cudaErrorMemoryAllocation;
    void *m = NULL;
    if (posix_memalign(&m, EMU_ALIGN, n ? n : 1)) return tl_last = cudaErrorMemoryAllocation;
    memset(m, 0xff, n);
    if (add_region(m, n ? n : 1, 0)) {
        free(m);
        return tl_last = cudaErrorMemoryAllocation;
    }
    *p = m;
    return cudaSuccess;
}

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

static void device_sync(void) {
    counter_add(&g_device_syncs);
    pc_emu_queue_run_all();
}

/* CUDA's frees wait for the whole device first */
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    device_sync();
    return remove_region(p, 0);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    *p = NULL;
    void *m = NULL;
    if (posix_memalign(&m, 4096, n ? n : 1)) return tl_last = cudaErrorMemoryAllocation;
    if (add_region(m, n ? n : 1, 1)) {
        free(m);
        return tl_last = cudaErrorMemoryAllocation;
    }
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    device_sync();
    return remove_region(p, 1);
}

/* ---- streams and events ------------------------------------------------------------ */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U

typedef struct emu_stream {
    unsigned magic;
    emu_queue *q;
} emu_stream;

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
static emu_stream g_default = {STREAM_MAGIC, NULL};
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void default_stream_init(void) { g_default.q = pc_emu_queue_new(); }

/* The stream behind a handle, or NULL (an error set) */
static emu_stream *stream_of(cudaStream_t s) {
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
    *st = (emu_stream){STREAM_MAGIC, q};
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
    if (!pc_emu_queue_push(st->q, wait_run, wait_drop, w)) return tl_last = cudaErrorMemoryAllocation;
    return ok_or_sticky();
}

/* The stream-ordered allocator: memory usable by work queued on the stream
 * from now on (allocated at once here: host memory has no stream order). */
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    if (!stream_of(s)) return tl_last;
    return cudaMalloc(p, n);
}

static void free_run(void *ctx) { (void)remove_region(ctx, 0); }

/* Freed when the stream reaches it: work queued before still reads it, and
 * nothing waits (no device-wide synchronisation). */
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    emu_stream *st = stream_of(s);
    if (!st) return tl_last;
    if (!p) return cudaSuccess;
    if (!is_device(p, 1))
        return fail(cudaErrorInvalidValue, "cudaFreeAsync(%p): not device memory this runtime allocated", p);
    if (!pc_emu_queue_push(st->q, free_run, NULL, p)) return tl_last = cudaErrorMemoryAllocation;
    return ok_or_sticky();
}

/* ---- copies and memsets ------------------------------------------------------------- */

/* A queued copy. `snap` holds the source's bytes as they were at the call:
 * the copy itself for pageable memory (CUDA stages it before returning),
 * a witness for page-locked memory (the DMA reads the source when the copy
 * runs; if the host wrote it in between, the copy would move the later
 * bytes, which is a bug in the caller, reported here). */
typedef struct copy_item {
    void *dst;
    const void *src;
    size_t n;
    char *snap;
    int pinned_src;
} copy_item;

static void copy_run(void *ctx) {
    copy_item *c = ctx;
    if (c->pinned_src && memcmp(c->snap, c->src, c->n) != 0) {
        fail_async("a copy from page-locked host memory (%p, %zu bytes) found its source written by the host "
                   "after cudaMemcpyAsync returned and before the copy ran: on a GPU the device may receive "
                   "either bytes (the caller must wait for the copy before reusing its source)",
                   c->src, c->n);
        return;
    }
    if (sticky()) return; /* after a fault CUDA runs nothing more */
    memcpy(c->dst, c->pinned_src || !c->snap ? c->src : c->snap, c->n);
}

static void copy_drop(void *ctx) {
    copy_item *c = ctx;
    free(c->snap);
    free(c);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    emu_stream *st = stream_of(s);
    if (!st) return tl_last;
    if (sticky()) return ok_or_sticky();
    if (!n) return cudaSuccess;
    int dpinned = 0, spinned = 0;
    int dfound = find_region(dst, n, &dpinned) >= 0, sfound = find_region(src, n, &spinned) >= 0;
    int dd = dfound && !dpinned, sd = sfound && !spinned;
    int want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && (dd != want_dd || sd != want_sd))
        return fail(cudaErrorInvalidValue,
                    "cudaMemcpyAsync(%p <- %p, %zu bytes): the direction given does not match where the pointers "
                    "live (or a range runs past its allocation)",
                    dst, src, n);
    const char *d = dst, *c = src;
    if ((d < c + n && c < d + n))
        return fail(cudaErrorInvalidValue, "cudaMemcpyAsync(%p <- %p, %zu bytes): overlapping ranges", dst, src, n);
    copy_item *it = calloc(1, sizeof *it);
    if (!it) return tl_last = cudaErrorMemoryAllocation;
    *it = (copy_item){dst, src, n, NULL, !sd && spinned};
    if (!sd) { /* from the host: the bytes as they are now */
        it->snap = malloc(n);
        if (!it->snap) {
            free(it);
            return tl_last = cudaErrorMemoryAllocation;
        }
        memcpy(it->snap, src, n);
    }
    /* to page-locked memory the copy writes when it runs: until then the
     * destination holds NaN, so a host read before waiting shows it */
    if (!dd && dpinned) memset(dst, 0xff, n);
    uint64_t pos = pc_emu_queue_push(st->q, copy_run, copy_drop, it);
    if (!pos) return tl_last = cudaErrorMemoryAllocation;
    /* to pageable memory CUDA returns once the copy is done */
    if (!dd && !dpinned) pc_emu_queue_run(st->q, pos);
    return ok_or_sticky();
}

/* synchronous: returns once the copy is done, whatever memory it touches */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, NULL);
    if (e != cudaSuccess) return e;
    return cudaStreamSynchronize(NULL);
}

/* A queued memset of `height` rows of `width` bytes, `pitch` apart. */
typedef struct set_item {
    char *p;
    size_t pitch, width, height;
    int v;
} set_item;

static void set_run(void *ctx) {
    set_item *m = ctx;
    if (sticky()) return;
    for (size_t r = 0; r < m->height; r++) memset(m->p + r * m->pitch, m->v, m->width);
}

static cudaError_t queue_memset(emu_stream *st, void *p, size_t pitch, int v, size_t width, size_t height) {
    set_item *m = malloc(sizeof *m);
    if (!m) return tl_last = cudaErrorMemoryAllocation;
    *m = (set_item){p, pitch, width, height, v};
    if (!pc_emu_queue_push(st->q, set_run, free, m)) return tl_last = cudaErrorMemoryAllocation;
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    emu_stream *st = stream_of(s);
    if (!st) return tl_last;
    if (sticky()) return ok_or_sticky();
    if (!n) return cudaSuccess;
    if (!is_device(p, n))
        return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %zu bytes): not device memory", p, n);
    return queue_memset(st, p, n, v, n, 1);
}

cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
    emu_stream *st = stream_of(s);
    if (!st) return tl_last;
    if (sticky()) return ok_or_sticky();
    if (!width || !height) return cudaSuccess;
    if (width > pitch || !is_device(p, pitch * (height - 1) + width))
        return fail(cudaErrorInvalidValue, "cudaMemset2DAsync(%p, %zu bytes): bad pitch or not device memory", p,
                    pitch * height);
    return queue_memset(st, p, pitch, v, width, height);
}
