/*
 * The emulated CUDA runtime: the CUDA runtime functions the cuda device
 * plugin calls, declared by NVIDIA's own header, over host memory. One
 * emulated GPU (PLAIT_CUDA_EMU_DEVICES of them if set), compute
 * capability 9.0, 16 GiB, named "plait CUDA emulator (CPU)".
 *
 * Streams run everything at once, in call order, on the calling thread: a
 * kernel at its launch, a copy or memset at its call, so every event is
 * complete when recorded. (The sim test device models late streams for
 * the device-agnostic layers; here the point is the plugin's own code.)
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
    case cudaErrorLaunchFailure: {
        const char *why = pc_emu_failure();
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

cudaError_t cudaDeviceSynchronize(void) { return ok_or_sticky(); }

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

cudaError_t cudaFree(void *p) { return p ? remove_region(p, 0) : cudaSuccess; }

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

cudaError_t cudaFreeHost(void *p) { return p ? remove_region(p, 1) : cudaSuccess; }

/* ---- streams and events ------------------------------------------------------------ */

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U

typedef struct emu_handle {
    unsigned magic;
} emu_handle;

static int valid(const void *h, unsigned magic) { return !h || ((const emu_handle *)h)->magic == magic; }

static cudaError_t new_handle(void **out, unsigned magic) {
    emu_handle *h = malloc(sizeof *h);
    if (!h) return tl_last = cudaErrorMemoryAllocation;
    h->magic = magic;
    *out = h;
    return cudaSuccess;
}

static cudaError_t free_handle(void *h, unsigned magic) {
    if (!h || !valid(h, magic)) return tl_last = cudaErrorInvalidResourceHandle;
    ((emu_handle *)h)->magic = 0;
    free(h);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    return new_handle((void **)s, STREAM_MAGIC);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) { return free_handle(s, STREAM_MAGIC); }

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    return ok_or_sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    return new_handle((void **)e, EVENT_MAGIC);
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) { return free_handle(e, EVENT_MAGIC); }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e || !valid(e, EVENT_MAGIC) || !valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    return ok_or_sticky();
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e || !valid(e, EVENT_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    return ok_or_sticky();
}

cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    if (!e || !valid(e, EVENT_MAGIC) || !valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    return ok_or_sticky();
}

/* ---- copies and memsets ------------------------------------------------------------- */

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    if (sticky()) return ok_or_sticky();
    if (!n) return cudaSuccess;
    int dd = is_device(dst, n), sd = is_device(src, n);
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
    memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    if (sticky()) return ok_or_sticky();
    if (!n) return cudaSuccess;
    if (!is_device(p, n))
        return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %zu bytes): not device memory", p, n);
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s) {
    if (!valid(s, STREAM_MAGIC)) return tl_last = cudaErrorInvalidResourceHandle;
    if (sticky()) return ok_or_sticky();
    if (!width || !height) return cudaSuccess;
    if (width > pitch || !is_device(p, pitch * (height - 1) + width))
        return fail(cudaErrorInvalidValue, "cudaMemset2DAsync(%p, %zu bytes): bad pitch or not device memory", p,
                    pitch * height);
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}
