/*
 * The emulated CUDA runtime's memory (emu_cudart.c: the rest of it): the
 * device memory and page-locked host memory it hands out, in one table
 * that launches, copies and memsets check their pointers against, and
 * the copies and memsets, queued on their streams.
 *
 * Copies follow CUDA's rules for host memory: from pageable memory the
 * bytes are taken at the call; to pageable memory the call returns once
 * the copy ran; page-locked memory is read or written when the copy runs,
 * so the destination of a copy to page-locked memory holds NaN until
 * then, and a page-locked source the host writes before its copy ran is
 * reported as a sticky failure.
 *
 * Where a GPU would fault or misbehave, it refuses loudly instead: memory
 * handed out by cudaMalloc is filled with 0xff bytes (NaN as floats), so a
 * kernel that reads what nobody wrote shows it; a copy whose direction
 * does not match where its pointers live, a memset or kernel pointer
 * outside device memory, a free of an unknown pointer are errors. Device
 * memory is capped at the advertised size, so out-of-memory paths run too.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_cudart.h"
#include "emu_queue.h"
#include "emu_runtime.h"

#define EMU_ALIGN 256
/* cudaHostAlloc hands out memory 512 bytes past a page, as the runtime was
 * seen to on an H100 (CUDA 13, driver 580): CUDA promises page-locked host
 * memory no alignment beyond what any type needs, so code that wants pages
 * must align it itself. */
#define EMU_PINNED_OFFSET 512

/* ---- memory: a table of what was handed out ------------------------------------- */

/* The table's lock (the runtime's other state is under emu_cudart.c's). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

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
            free(pinned ? (char *)p - EMU_PINNED_OFFSET : p);
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

/* ---- allocations ---------------------------------------------------------------- */

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
    if (posix_memalign(&m, 4096, EMU_PINNED_OFFSET + (n ? n : 1))) return tl_last = cudaErrorMemoryAllocation;
    if (add_region((char *)m + EMU_PINNED_OFFSET, n ? n : 1, 1)) {
        free(m);
        return tl_last = cudaErrorMemoryAllocation;
    }
    *p = (char *)m + EMU_PINNED_OFFSET;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    device_sync();
    return remove_region(p, 1);
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

static long g_h2d_delay_us;
static pthread_once_t g_h2d_delay_once = PTHREAD_ONCE_INIT;

static void read_h2d_delay(void) {
    const char *e = getenv("PLAIT_CUDA_EMU_PINNED_H2D_DELAY_US");
    g_h2d_delay_us = e && *e ? strtol(e, NULL, 10) : 0;
}

static void pinned_h2d_delay(void) {
    pthread_once(&g_h2d_delay_once, read_h2d_delay);
    long us = g_h2d_delay_us;
    if (us > 0) nanosleep(&(struct timespec){us / 1000000, (us % 1000000) * 1000}, NULL);
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
    /* PLAIT_CUDA_EMU_PINNED_H2D_DELAY_US: a copy from page-locked memory to
     * the device holds the thread queueing it that long first, a slow link
     * that makes a copy thread fall behind the thread launching kernels
     * (what a missing wait for its copies then reads shows) */
    if (dd && !sd && spinned) pinned_h2d_delay();
    note_queued(st, dd && sd ? "copy_d2d" : dd ? "copy_h2d" : sd ? "copy_d2h" : "copy_h2h");
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
    note_queued(st, "memset");
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
