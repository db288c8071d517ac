#include "runtime/memory.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/log.h"

#define MAX_TAGS 64
#define HEADER 64 /* bytes before each block: size, tag index, alignment */

struct block_header {
    size_t bytes;
    size_t offset; /* from the malloc'd base to the user pointer */
    int tag;
};

static struct {
    pthread_mutex_t lock;
    plait_mem_usage tags[MAX_TAGS];
    size_t n_tags;
} g_mem = {PTHREAD_MUTEX_INITIALIZER, {{{0}, 0, 0}}, 0};

static int tag_index(const char *tag) {
    if (!tag || !*tag) tag = "untagged";
    for (size_t i = 0; i < g_mem.n_tags; i++)
        if (strcmp(g_mem.tags[i].tag, tag) == 0) return (int)i;
    if (g_mem.n_tags == MAX_TAGS) return MAX_TAGS - 1; /* lump the rest together */
    snprintf(g_mem.tags[g_mem.n_tags].tag, sizeof g_mem.tags[0].tag, "%s", tag);
    return (int)g_mem.n_tags++;
}

void *plait_alloc(size_t bytes, plait_mem_kind kind, size_t align, const char *tag) {
    if (kind == PLAIT_MEM_CUDA) {
        plait_set_error(PLAIT_ERR_UNSUPPORTED, "this allocator holds host memory only; device memory "
                                               "comes from the open device (core/device)");
        return NULL;
    }
    if (align < HEADER) align = HEADER;
    if (align & (align - 1)) {
        plait_set_error(PLAIT_ERR_INVALID_ARG, "alignment %zu is not a power of two", align);
        return NULL;
    }
    void *base = NULL;
    if (bytes > SIZE_MAX - align || posix_memalign(&base, align, bytes + align) != 0) {
        char want[32], held[32];
        plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory: cannot allocate %s (%zu bytes) for %s; this process "
                        "holds %s", plait_bytes_text((double)bytes, want, sizeof want), bytes, tag ? tag : "?",
                        plait_bytes_text((double)plait_current_rss(), held, sizeof held));
        return NULL;
    }
    char *user = (char *)base + align;
    struct block_header *h = (struct block_header *)(user - sizeof(struct block_header));
    h->bytes = bytes;
    h->offset = align;
    h->tag = plait_mem_account_add(tag, bytes);
    return user;
}

int plait_mem_account_add(const char *tag, uint64_t bytes) {
    pthread_mutex_lock(&g_mem.lock);
    int i = tag_index(tag);
    plait_mem_usage *u = &g_mem.tags[i];
    u->bytes += bytes;
    if (u->bytes > u->peak) u->peak = u->bytes;
    pthread_mutex_unlock(&g_mem.lock);
    return i;
}

void plait_mem_account_sub(int account, uint64_t bytes) {
    if (account < 0 || account >= MAX_TAGS) return;
    pthread_mutex_lock(&g_mem.lock);
    g_mem.tags[account].bytes -= bytes;
    pthread_mutex_unlock(&g_mem.lock);
}

void plait_free(void *ptr) {
    if (!ptr) return;
    struct block_header *h = (struct block_header *)((char *)ptr - sizeof(struct block_header));
    plait_mem_account_sub(h->tag, h->bytes);
    free((char *)ptr - h->offset);
}

size_t plait_mem_usage_list(plait_mem_usage *out, size_t cap) {
    pthread_mutex_lock(&g_mem.lock);
    size_t n = g_mem.n_tags;
    memcpy(out, g_mem.tags, (n < cap ? n : cap) * sizeof *out);
    pthread_mutex_unlock(&g_mem.lock);
    return n;
}

uint64_t plait_mem_usage_of(const char *tag) {
    uint64_t total = 0;
    pthread_mutex_lock(&g_mem.lock);
    for (size_t i = 0; i < g_mem.n_tags; i++)
        if (!tag || strcmp(g_mem.tags[i].tag, tag) == 0) total += g_mem.tags[i].bytes;
    pthread_mutex_unlock(&g_mem.lock);
    return total;
}

/* The peak before the last rewind: the kernel's high-water mark restarts
 * from the current RSS, so earlier peaks are kept here. */
static _Atomic uint64_t g_rss_floor;

uint64_t plait_peak_rss(void) {
    uint64_t hwm = plait_proc_kb("/proc/self/status", "VmHWM:"), floor = atomic_load(&g_rss_floor);
    return hwm > floor ? hwm : floor;
}

void plait_peak_rss_rewind(uint64_t before) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    int ok = fputs("5", f) >= 0; /* 5: reset the peak RSS to the current RSS */
    if (fclose(f) != 0 || !ok) return;
    uint64_t floor = atomic_load(&g_rss_floor);
    while (before > floor && !atomic_compare_exchange_weak(&g_rss_floor, &floor, before)) {
    }
}
uint64_t plait_current_rss(void) { return plait_proc_kb("/proc/self/status", "VmRSS:"); }
