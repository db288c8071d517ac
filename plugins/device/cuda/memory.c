/*
 * Device memory and the stream's data movement: alloc/free (cudaMalloc,
 * counted per allocation so memory_stats can report the bytes in use and
 * the peak), copy (cudaMemcpyAsync on the device's stream; a copy to the
 * host then waits for the stream, and so does a copy to the device from
 * page-locked host memory), fill_zero (cudaMemsetAsync),
 * synchronize (the stream, CUDA's sticky errors, and any failure a kernel
 * recorded).
 *
 * alloc, free, copy and memory_stats may be called from any thread
 * (plait/device.h): each first makes the device current on the calling
 * thread (CUDA's current device is per thread), and the allocation table
 * is under a lock.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcuda.h"

#define TABLE_BUCKETS 4096

typedef struct block {
    void *ptr;
    size_t bytes;
    const char *tag; /* static string of the caller, for messages */
    struct block *next;
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_table[TABLE_BUCKETS];
static uint64_t g_in_use, g_peak;

static size_t bucket(const void *p) { return ((uintptr_t)p >> 8) % TABLE_BUCKETS; }

int pc_make_current(void) { return cudaSetDevice(pc.ordinal) == cudaSuccess; }

void pc_memory_reset(void) {
    pthread_mutex_lock(&g_lock);
    g_in_use = g_peak = 0;
    pthread_mutex_unlock(&g_lock);
}

size_t pc_memory_release_all(void) {
    size_t n = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t b = 0; b < TABLE_BUCKETS; b++) {
        while (g_table[b]) {
            block *k = g_table[b];
            g_table[b] = k->next;
            cudaFree(k->ptr);
            free(k);
            n++;
        }
    }
    g_in_use = 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}

void *pc_alloc(size_t bytes, const char *tag) {
    if (!pc.is_open) {
        pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: alloc of %zu bytes (%s) before the device was opened",
                           bytes, tag ? tag : "untagged");
        return NULL;
    }
    block *k = malloc(sizeof *k);
    if (!k) {
        pc.host->set_error(PLAIT_ERR_NO_MEMORY, "cuda: out of host memory for the allocation table");
        return NULL;
    }
    void *p = NULL;
    cudaError_t e = pc_make_current() ? cudaMalloc(&p, bytes ? bytes : 1) : cudaGetLastError();
    if (e != cudaSuccess) {
        free(k);
        (void)cudaGetLastError(); /* an out-of-memory is not sticky: clear it */
        uint64_t used, peak;
        pc_memory_stats(&used, &peak);
        pc.host->set_error(e == cudaErrorMemoryAllocation ? PLAIT_ERR_NO_MEMORY : PLAIT_ERR_SYSTEM,
                           "cuda: cudaMalloc of %zu bytes for %s on GPU %d failed: %s (plait holds %llu bytes "
                           "there, at most %llu so far)",
                           bytes, tag ? tag : "untagged", pc.ordinal, cudaGetErrorString(e),
                           (unsigned long long)used, (unsigned long long)peak);
        return NULL;
    }
    k->ptr = p;
    k->bytes = bytes;
    k->tag = tag;
    pthread_mutex_lock(&g_lock);
    size_t b = bucket(p);
    k->next = g_table[b];
    g_table[b] = k;
    g_in_use += bytes;
    if (g_in_use > g_peak) g_peak = g_in_use;
    pthread_mutex_unlock(&g_lock);
    return p;
}

void pc_free(void *ptr) {
    if (!ptr) return;
    block *found = NULL;
    pthread_mutex_lock(&g_lock);
    for (block **pp = &g_table[bucket(ptr)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == ptr) {
            found = *pp;
            *pp = found->next;
            g_in_use -= found->bytes;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!found) {
        /* not ours: a caller bug; freeing it would corrupt CUDA's heap */
        pc.host->log(PLAIT_LOG_ERROR, "cuda", "free(%p): not a pointer this device allocated; ignored", ptr);
        return;
    }
    if (pc_make_current()) cudaFree(ptr);
    free(found);
}

/* Page-locked host memory (cudaHostAlloc, portable to every context):
 * copies to and from it run at full bus speed and asynchronously. The core
 * counts it under its tag and frees it through free_pinned; it is host
 * memory, not counted in memory_stats.
 *
 * plait/device.h promises a page-aligned pointer; cudaHostAlloc promises
 * none beyond what any type needs (on an H100 with CUDA 13 it was seen to
 * return pointers 512 bytes past a page, for 8 bytes and for 128 KiB). So
 * the allocation is a page longer than asked, the pointer handed out is the
 * first page boundary at least a word past its start, and the word before
 * that pointer holds the start for free_pinned. */
#define PC_PINNED_ALIGN ((uintptr_t)4096)

void *pc_alloc_pinned(size_t bytes, const char *tag) {
    if (!pc.is_open) {
        pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: alloc_pinned of %zu bytes (%s) before the device was opened",
                           bytes, tag ? tag : "untagged");
        return NULL;
    }
    if (bytes > SIZE_MAX - PC_PINNED_ALIGN) {
        pc.host->set_error(PLAIT_ERR_NO_MEMORY, "cuda: alloc_pinned of %zu bytes for %s: too large", bytes,
                           tag ? tag : "untagged");
        return NULL;
    }
    void *base = NULL;
    size_t n = (bytes ? bytes : 1) + PC_PINNED_ALIGN;
    cudaError_t e = pc_make_current() ? cudaHostAlloc(&base, n, cudaHostAllocPortable) : cudaGetLastError();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pc.host->set_error(e == cudaErrorMemoryAllocation ? PLAIT_ERR_NO_MEMORY : PLAIT_ERR_SYSTEM,
                           "cuda: cudaHostAlloc of %zu bytes for %s failed: %s", bytes, tag ? tag : "untagged",
                           cudaGetErrorString(e));
        return NULL;
    }
    uintptr_t p = ((uintptr_t)base + sizeof(void *) + PC_PINNED_ALIGN - 1) & ~(PC_PINNED_ALIGN - 1);
    memcpy((char *)p - sizeof(void *), &base, sizeof base);
    return (void *)p;
}

void pc_free_pinned(void *ptr) {
    if (!ptr) return;
    void *base;
    memcpy(&base, (char *)ptr - sizeof base, sizeof base);
    if (pc_make_current()) cudaFreeHost(base);
}

void pc_memory_stats(uint64_t *in_use, uint64_t *peak) {
    pthread_mutex_lock(&g_lock);
    if (in_use) *in_use = g_in_use;
    if (peak) *peak = g_peak;
    pthread_mutex_unlock(&g_lock);
}

plait_status pc_cuda_status(cudaError_t e, const char *what) {
    return pc.host->set_error(PLAIT_ERR_SYSTEM, "cuda: %s on GPU %d failed: %s (%s)", what, pc.ordinal,
                              cudaGetErrorString(e), cudaGetErrorName(e));
}

/* 1 if `p` is page-locked host memory (cudaHostAlloc'ed or registered):
 * a queued copy reads or writes it when the copy runs, not when it is
 * queued. Pageable memory is staged by cudaMemcpyAsync before it returns
 * (to the device) or copied before it returns (to the host), so the caller
 * may reuse it at once. Unknown memory counts as page-locked: waiting is
 * always correct. */
static int page_locked(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeHost;
}

plait_status pc_copy_on(plait_device_stream stream, void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: copy before the device was opened");
    if (bytes == 0) return PLAIT_OK;
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice};
    if ((unsigned)dir > PLAIT_COPY_ON_DEVICE)
        return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: copy direction %d is not one of plait_copy_dir",
                                  (int)dir);
    if ((unsigned)stream > PLAIT_STREAM_COMM)
        return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: stream %d is not one of plait_device_stream",
                                  (int)stream);
    if (!pc_make_current()) return pc_cuda_status(cudaGetLastError(), "cudaSetDevice");
    cudaStream_t s = stream == PLAIT_STREAM_COMM ? pc.comm_stream : pc.stream;
    static const char *const names[] = {"copy to device", "copy to host", "copy on device"};
    int span = pc_trace_span_begin(stream, names[dir], 1, bytes);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[dir], s);
    pc_trace_span_end(span);
    if (e != cudaSuccess) return pc_cuda_status(e, "cudaMemcpyAsync");
    if (dir == PLAIT_COPY_ON_DEVICE) return PLAIT_OK;
    if (dir == PLAIT_COPY_TO_HOST) {
        e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return pc_cuda_status(e, stream == PLAIT_STREAM_COMPUTE ? "a kernel or copy before this copy to the host"
                                                                    : "a copy on the communication stream");
        /* the compute stream's host synchronisation point: report what the
         * step raised */
        return stream == PLAIT_STREAM_COMPUTE ? pc_take_failure() : PLAIT_OK;
    }
    /* To the device: the caller may reuse the source as soon as this returns
     * (plait/device.h). From page-locked memory the copy reads it only when
     * it runs, so wait for it (plait_tensor_read refills its page-locked
     * staging buffer with the next chunk right after this returns). */
    if (!page_locked(src)) return PLAIT_OK;
    e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? PLAIT_OK : pc_cuda_status(e, "a copy from page-locked host memory");
}

plait_status pc_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    return pc_copy_on(PLAIT_STREAM_COMPUTE, dst, src, bytes, dir);
}

plait_status pc_fill_zero(void *dst, size_t bytes) {
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: fill_zero before the device was opened");
    if (bytes == 0) return PLAIT_OK;
    int span = pc_trace_span_begin(PLAIT_STREAM_COMPUTE, "fill_zero", 1, bytes);
    cudaError_t e = cudaMemsetAsync(dst, 0, bytes, pc.stream);
    pc_trace_span_end(span);
    return e == cudaSuccess ? PLAIT_OK : pc_cuda_status(e, "cudaMemsetAsync");
}

plait_status pc_synchronize(void) {
    if (!pc.is_open) return pc.host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: synchronize before the device was opened");
    cudaError_t e = cudaStreamSynchronize(pc.stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return pc_cuda_status(e, "a queued kernel or copy");
    return pc_take_failure();
}

/* ---- scratch: grown in stream order, counted --------------------------------
 *
 * The kernels' scratch (column sums, bf16 operand copies) grows when a call
 * needs more than it has, which happens in the first step. cudaFree would
 * synchronise the whole device there, the communication stream with its
 * collectives in flight included (a stall, or a hang when a collective
 * waits for a peer that waits for this rank), and waiting for the compute
 * stream first would be a host synchronisation inside the step. So the old
 * buffer is freed and the new one allocated in the compute stream's order
 * (cudaFreeAsync, cudaMallocAsync: the stream-ordered allocator): kernels
 * queued before still read the old one, later ones get the new one, and no
 * thread waits. Scratch counts in memory_stats with the allocations. */

static uint64_t g_scratch_total; /* under g_lock */

static void count_scratch(int64_t delta) {
    pthread_mutex_lock(&g_lock);
    g_scratch_total += (uint64_t)delta;
    g_in_use += (uint64_t)delta;
    if (g_in_use > g_peak) g_peak = g_in_use;
    pthread_mutex_unlock(&g_lock);
}

void *pc_grow(pc_buffer *b, size_t bytes, const char *what) {
    if (bytes <= b->bytes) return b->ptr;
    if (b->ptr) {
        cudaError_t e = cudaFreeAsync(b->ptr, pc.stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            pc_fail("cuda: cudaFreeAsync of %zu bytes of %s scratch: %s", b->bytes, what, cudaGetErrorString(e));
            return NULL;
        }
        count_scratch(-(int64_t)b->bytes);
        b->ptr = NULL;
        b->bytes = 0;
    }
    cudaError_t e = cudaMallocAsync(&b->ptr, bytes, pc.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        b->ptr = NULL;
        pc_fail("cuda: no device memory for %zu bytes of %s scratch: %s", bytes, what, cudaGetErrorString(e));
        return NULL;
    }
    b->bytes = bytes;
    count_scratch((int64_t)bytes);
    return b->ptr;
}

void pc_grow_release(pc_buffer *b) {
    if (b->ptr) {
        cudaFreeAsync(b->ptr, pc.stream);
        count_scratch(-(int64_t)b->bytes);
    }
    b->ptr = NULL;
    b->bytes = 0;
}

static pc_buffer g_scratch;

void *pc_scratch(size_t bytes) { return pc_grow(&g_scratch, bytes, "column-sum"); }

void pc_scratch_release(void) { pc_grow_release(&g_scratch); }
