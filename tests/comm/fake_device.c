/* The stand-in device of fake_device.h. */
#include "fake_device.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "commstate/comm_device.h"
#include "runtime/error.h"

#define MAX_ALLOCS 4096

static struct {
    pthread_mutex_t lock;
    char *base, *shadow;
    size_t size;
    struct { size_t off, bytes; int live; } allocs[MAX_ALLOCS];
    int n_allocs;
    _Atomic uint64_t copies, on_stager;
    const char *fault_lo;
    size_t fault_len;
    uint64_t fault_skip;
    double stall_s;
    int fault_armed;
    _Atomic unsigned delay_us;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int in_dev(const void *p, size_t bytes) {
    const char *c = p;
    return c >= g.base && c + bytes <= g.base + g.size;
}

static int fault_hit(const void *dev) {
    pthread_mutex_lock(&g.lock);
    int hit = 0;
    const char *c = dev;
    if (g.fault_armed && c >= g.fault_lo && c < g.fault_lo + g.fault_len) {
        if (g.fault_skip == 0) {
            hit = 1;
            g.fault_armed = 0;
        } else {
            g.fault_skip--;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return hit;
}

static plait_status fake_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    atomic_fetch_add(&g.copies, 1);
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (!strncmp(name, "plait-stg-", 10)) atomic_fetch_add(&g.on_stager, 1);
    const void *dev = dir == PLAIT_COPY_TO_HOST ? src : dst;
    if (!in_dev(dev, bytes) || (dir == PLAIT_COPY_ON_DEVICE && !in_dev(src, bytes)))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "fake device: %p (%zu B) is not device memory", dev, bytes);
    if (dir != PLAIT_COPY_ON_DEVICE && in_dev(dir == PLAIT_COPY_TO_HOST ? dst : src, bytes))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "fake device: host side of a copy is device memory");
    if (fault_hit(dev)) {
        if (g.stall_s <= 0) return plait_set_error(PLAIT_ERR_SYSTEM, "fake device: injected copy failure");
        struct timespec ts = {(time_t)g.stall_s, (long)((g.stall_s - (double)(time_t)g.stall_s) * 1e9)};
        nanosleep(&ts, NULL);
    }
    unsigned us = atomic_load(&g.delay_us);
    if (us) {
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
    }
    char *d = in_dev(dst, bytes) ? g.shadow + ((char *)dst - g.base) : dst;
    const char *s = in_dev(src, bytes) ? g.shadow + ((const char *)src - g.base) : src;
    memmove(d, s, bytes);
    return PLAIT_OK;
}

static void *fake_alloc_tagged(size_t bytes, const char *tag) {
    (void)tag;
    return fake_device_alloc(bytes);
}

void fake_device_open(size_t bytes) {
    g.size = bytes;
    g.base = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g.shadow = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g.base == MAP_FAILED || g.shadow == MAP_FAILED) abort();
    g.n_allocs = 0;
}

const plait_comm_device *fake_device_comm(void) {
    static const plait_comm_device d = {PLAIT_MEM_CUDA, fake_copy, fake_alloc_tagged, fake_device_free, NULL};
    return &d;
}

void fake_device_close(void) {
    if (fake_device_in_use() != 0) {
        fprintf(stderr, "fake device: %zu B still allocated at close\n", fake_device_in_use());
        abort();
    }
    munmap(g.base, g.size);
    munmap(g.shadow, g.size);
}

/* First fit over the live allocations, kept sorted by offset. */
void *fake_device_alloc(size_t bytes) {
    pthread_mutex_lock(&g.lock);
    size_t at = 0;
    int i = 0;
    for (; i < g.n_allocs; i++) {
        if (g.allocs[i].off >= at + bytes) break;
        at = (g.allocs[i].off + g.allocs[i].bytes + 255) & ~(size_t)255;
    }
    if (at + bytes > g.size || g.n_allocs == MAX_ALLOCS) {
        pthread_mutex_unlock(&g.lock);
        return NULL;
    }
    memmove(&g.allocs[i + 1], &g.allocs[i], (size_t)(g.n_allocs - i) * sizeof g.allocs[0]);
    g.allocs[i].off = at;
    g.allocs[i].bytes = bytes ? bytes : 1;
    g.allocs[i].live = 1;
    g.n_allocs++;
    pthread_mutex_unlock(&g.lock);
    return g.base + at;
}

void fake_device_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g.lock);
    size_t off = (size_t)((char *)p - g.base);
    for (int i = 0; i < g.n_allocs; i++)
        if (g.allocs[i].off == off) {
            memmove(&g.allocs[i], &g.allocs[i + 1], (size_t)(g.n_allocs - i - 1) * sizeof g.allocs[0]);
            g.n_allocs--;
            break;
        }
    pthread_mutex_unlock(&g.lock);
}

size_t fake_device_in_use(void) {
    pthread_mutex_lock(&g.lock);
    size_t n = 0;
    for (int i = 0; i < g.n_allocs; i++)
        if (g.allocs[i].live) n += g.allocs[i].bytes;
    pthread_mutex_unlock(&g.lock);
    return n;
}

void fake_device_upload(void *dev, const void *host, size_t bytes) {
    if (fake_copy(dev, host, bytes, PLAIT_COPY_TO_DEVICE) != PLAIT_OK) abort();
}

void fake_device_download(void *host, const void *dev, size_t bytes) {
    if (fake_copy(host, dev, bytes, PLAIT_COPY_TO_HOST) != PLAIT_OK) abort();
}

uint64_t fake_device_copies(void) { return atomic_load(&g.copies); }
uint64_t fake_device_copies_on_stager(void) { return atomic_load(&g.on_stager); }

void fake_device_fault(const void *lo, size_t len, uint64_t skip, double stall_s) {
    pthread_mutex_lock(&g.lock);
    g.fault_lo = lo;
    g.fault_len = len;
    g.fault_skip = skip;
    g.stall_s = stall_s;
    g.fault_armed = 1;
    pthread_mutex_unlock(&g.lock);
}

void fake_device_fault_clear(void) {
    pthread_mutex_lock(&g.lock);
    g.fault_armed = 0;
    pthread_mutex_unlock(&g.lock);
}

void fake_device_set_delay(unsigned us) { atomic_store(&g.delay_us, us); }
