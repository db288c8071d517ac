#include "device/device.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/event_pool.h"
#include "kernels/kernels.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

static struct {
    const plait_plugin_desc *desc;
    const plait_device_ops *ops;
    plait_device_info info;
    const plait_kernels *kernels;
} g_dev;

/* ---- live device allocations: pointer -> (bytes, memory-report account) --
 * Open addressing keyed by address; a freed slot becomes a tombstone. The
 * table is what lets free() tell a device pointer from a host one without
 * touching it (device memory cannot be dereferenced on the host). */
typedef struct dev_block {
    uintptr_t ptr; /* 0 = empty, 1 = tombstone */
    size_t bytes;
    int account;
    int pinned; /* the device's page-locked host memory (alloc_pinned), not device memory */
} dev_block;

static struct {
    pthread_mutex_t lock;
    dev_block *slots;
    size_t cap, used; /* used counts live entries and tombstones */
} g_blocks = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static size_t slot_of(uintptr_t p, size_t cap) {
    uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* Caller holds the lock. */
static dev_block *find_block(uintptr_t p) {
    if (!g_blocks.cap) return NULL;
    for (size_t i = slot_of(p, g_blocks.cap), n = 0; n < g_blocks.cap; i = (i + 1) & (g_blocks.cap - 1), n++) {
        if (g_blocks.slots[i].ptr == p) return &g_blocks.slots[i];
        if (g_blocks.slots[i].ptr == 0) return NULL;
    }
    return NULL;
}

/* Caller holds the lock. Returns 0, or -1 out of memory. */
static int insert_block(uintptr_t p, size_t bytes, int account, int pinned) {
    if ((g_blocks.used + 1) * 2 > g_blocks.cap) {
        size_t cap = g_blocks.cap ? g_blocks.cap * 2 : 256;
        dev_block *old = g_blocks.slots, *fresh = calloc(cap, sizeof *fresh);
        if (!fresh) return -1;
        size_t old_cap = g_blocks.cap;
        g_blocks.slots = fresh;
        g_blocks.cap = cap;
        g_blocks.used = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].ptr > 1) {
                dev_block *b = &fresh[slot_of(old[i].ptr, cap)];
                while (b->ptr) b = &fresh[(size_t)(b - fresh + 1) & (cap - 1)];
                *b = old[i];
                g_blocks.used++;
            }
        free(old);
    }
    size_t i = slot_of(p, g_blocks.cap);
    while (g_blocks.slots[i].ptr > 1) i = (i + 1) & (g_blocks.cap - 1);
    if (g_blocks.slots[i].ptr == 0) g_blocks.used++;
    g_blocks.slots[i] = (dev_block){p, bytes, account, pinned};
    return 0;
}

/* ---- finding and opening ---------------------------------------------- */

static const char *key_where(const plait_config *cfg, const char *key) {
    const char *where = NULL;
    plait_config_origin(cfg, "device", key, &where);
    return where ? where : "[device]";
}

static const plait_plugin_desc *load_device(const plait_config *cfg) {
    const char *name = plait_config_str(cfg, "device", "plugin");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_DEVICE, name);
    if (!d)
        plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "%s: key 'plugin' in [device]: '%s' cannot be loaded (cpu, cuda, "
                                                   "or an installed device plugin; `plait plugins` lists them)",
                         key_where(cfg, "plugin"), name);
    return d;
}

/* How many devices of d's kind this process sees; 0 fails with the
 * plugin's reason. */
static plait_status count_devices(const plait_config *cfg, const plait_plugin_desc *d, int32_t *n) {
    const plait_host *host = plait_plugin_host();
    const plait_device_ops *ops = d->ops;
    plait_clear_error();
    plait_status st = plait_plugin_probe(d);
    *n = 0;
    if (st == PLAIT_OK) st = ops->count(host, n);
    if (st == PLAIT_OK && *n > 0) return PLAIT_OK;
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", plait_last_error()[0] ? plait_last_error() : "it reports 0 devices");
    return plait_set_error(st == PLAIT_OK ? PLAIT_ERR_UNSUPPORTED : st,
                           "%s: [device] plugin = %s: %s", key_where(cfg, "plugin"), d->name, reason);
}

plait_status plait_device_preflight_count(const plait_config *cfg, int32_t *count) {
    *count = 0;
    const plait_plugin_desc *d = load_device(cfg);
    if (!d) return PLAIT_ERR_INVALID_CONFIG;
    return count_devices(cfg, d, count);
}

plait_status plait_device_preflight(const plait_config *cfg) {
    int32_t n;
    return plait_device_preflight_count(cfg, &n);
}

plait_precision plait_device_precision(const plait_config *cfg) {
    plait_precision p = PLAIT_PRECISION_FP32;
    (void)plait_device_precision_parse(plait_config_str(cfg, "run", "precision"), &p);
    return p;
}

const char *plait_device_precision_name(plait_precision p) {
    return p == PLAIT_PRECISION_BF16 ? "bf16" : p == PLAIT_PRECISION_TF32 ? "tf32" : "fp32";
}

int plait_device_precision_parse(const char *name, plait_precision *p) {
    if (!name) return -1;
    if (strcmp(name, "bf16") == 0) *p = PLAIT_PRECISION_BF16;
    else if (strcmp(name, "tf32") == 0) *p = PLAIT_PRECISION_TF32;
    else if (strcmp(name, "fp32") == 0) *p = PLAIT_PRECISION_FP32;
    else return -1;
    return 0;
}

plait_status plait_device_open(const plait_host *host, const plait_config *cfg, int local_rank, int math_threads) {
    if (g_dev.ops)
        return plait_set_error(PLAIT_ERR_INTERNAL, "a device (%s) is already open in this process", g_dev.desc->name);
    const plait_plugin_desc *d = load_device(cfg);
    if (!d) return PLAIT_ERR_INVALID_CONFIG;
    int32_t n = 0;
    plait_status st = count_devices(cfg, d, &n);
    if (st != PLAIT_OK) return st;
    int64_t ordinal = plait_config_int(cfg, "device", "ordinal");
    if (ordinal >= n)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'ordinal' in [device]: %lld, but this process sees %d %s device%s (0..%d); "
                               "use -1 for the local rank modulo the devices",
                               key_where(cfg, "ordinal"), (long long)ordinal, n, d->name, n == 1 ? "" : "s", n - 1);
    if (ordinal < 0) ordinal = local_rank % n;
    const plait_device_ops *ops = d->ops;
    plait_device_open_args args = {.struct_size = sizeof args,
                                   .cfg = cfg,
                                   .ordinal = (int32_t)ordinal,
                                   .math_threads = math_threads,
                                   .precision = plait_device_precision(cfg),
                                   .deterministic = plait_config_bool(cfg, "run", "deterministic")};
    plait_device_info info = {.struct_size = sizeof info, .ordinal = -1};
    plait_clear_error();
    plait_plugin_call call;
    plait_plugin_call_enter(&call, PLAIT_KIND_DEVICE, ops, "open");
    plait_status opened = ops->open(host, &args, &info);
    st = plait_plugin_call_leave(&call, opened);
    if (opened == PLAIT_OK && st != PLAIT_OK) ops->close(); /* opened, then refused */
    if (st != PLAIT_OK) return plait_wrap_error(st, "[device] plugin = %s: open (ordinal %lld)", d->name, (long long)ordinal);
    const plait_kernels *k = ops->kernels ? ops->kernels() : NULL;
    if (!k || k->struct_size < offsetof(plait_kernels, zero_f64) + sizeof k->zero_f64) {
        ops->close();
        return plait_set_error(PLAIT_ERR_ABI, "device plugin %s: its kernel table lacks the kernels of ABI 1.3 (%u bytes)",
                               d->name, k ? k->struct_size : 0);
    }
    g_dev.desc = d;
    g_dev.ops = ops;
    g_dev.info = info;
    g_dev.kernels = k;
    plait_log(PLAIT_LOG_DEBUG, "device", "opened %s device %d: %s (%s memory)", d->name, info.ordinal, info.name,
              info.mem_kind == PLAIT_MEM_HOST ? "host" : "device");
    return PLAIT_OK;
}

void plait_device_close(void) {
    if (!g_dev.ops) return;
    plait_event_pool_drain(); /* its events are the device's */
    g_dev.ops->close();
    memset(&g_dev, 0, sizeof g_dev);
    pthread_mutex_lock(&g_blocks.lock);
    free(g_blocks.slots);
    g_blocks.slots = NULL;
    g_blocks.cap = g_blocks.used = 0;
    pthread_mutex_unlock(&g_blocks.lock);
}

const plait_device_ops *plait_device_ops_open(void) { return g_dev.ops; }
const plait_device_info *plait_device_info_open(void) { return g_dev.ops ? &g_dev.info : NULL; }
const plait_plugin_desc *plait_device_desc_open(void) { return g_dev.desc; }
const plait_kernels *plait_device_kernels_open(void) { return g_dev.kernels; }
const plait_device_ops *plait_device_events_open(void) {
    if (!g_dev.ops || g_dev.info.mem_kind == PLAIT_MEM_HOST) return NULL;
    return PLAIT_DEVICE_HAS_EVENTS(g_dev.ops) ? g_dev.ops : NULL;
}
const plait_kernels *plait_device_kernels(void) { return g_dev.kernels ? g_dev.kernels : plait_kernels_table(); }

plait_mem_kind plait_device_mem_kind(void) { return g_dev.ops ? g_dev.info.mem_kind : PLAIT_MEM_HOST; }

/* ---- memory ------------------------------------------------------------ */

/* Count `p` (from the device's alloc or alloc_pinned) under `tag` and
 * record it for free; on failure it is handed back and NULL returned. */
static void *record(void *p, size_t bytes, const char *tag, int pinned) {
    int account = plait_mem_account_add(tag, bytes);
    pthread_mutex_lock(&g_blocks.lock);
    int bad = insert_block((uintptr_t)p, bytes, account, pinned);
    pthread_mutex_unlock(&g_blocks.lock);
    if (bad) {
        plait_mem_account_sub(account, bytes);
        if (pinned) g_dev.ops->free_pinned(p);
        else g_dev.ops->free(p);
        plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory recording a device allocation");
        return NULL;
    }
    return p;
}

void *plait_device_alloc(size_t bytes, const char *tag) {
    if (!g_dev.ops || g_dev.info.mem_kind == PLAIT_MEM_HOST) return plait_alloc(bytes, PLAIT_MEM_HOST, 256, tag);
    void *p = g_dev.ops->alloc(bytes ? bytes : 1, tag);
    if (!p) {
        if (!plait_last_error()[0])
            plait_set_error(PLAIT_ERR_NO_MEMORY, "out of %s device memory: cannot allocate %zu bytes for %s",
                            g_dev.desc->name, bytes, tag ? tag : "?");
        return NULL;
    }
    return record(p, bytes, tag, 0);
}

/* alloc_pinned and free_pinned arrived with ABI 1.3's table: a shorter
 * table, or NULL members, mean the device has none. */
static int has_pinned(void) {
    const plait_device_ops *o = g_dev.ops;
    return o && o->struct_size >= offsetof(plait_device_ops, free_pinned) + sizeof o->free_pinned &&
           o->alloc_pinned && o->free_pinned;
}

void *plait_device_alloc_pinned(size_t bytes, size_t align, const char *tag) {
    if (!has_pinned() || align > PLAIT_DEVICE_PINNED_ALIGN)
        return plait_alloc(bytes, PLAIT_MEM_HOST, align, tag);
    plait_clear_error();
    void *p = g_dev.ops->alloc_pinned(bytes ? bytes : 1, tag);
    if (!p) {
        /* "none" (plait/device.h): plain host memory serves, only slower */
        plait_log(PLAIT_LOG_DEBUG, "device", "%s device: no page-locked memory for %zu bytes of %s (%s); using "
                                             "plain host memory", g_dev.desc->name, bytes, tag ? tag : "?",
                  plait_last_error()[0] ? plait_last_error() : "none offered");
        return plait_alloc(bytes, PLAIT_MEM_HOST, align, tag);
    }
    if (align > 1 && (uintptr_t)p % align) {
        g_dev.ops->free_pinned(p);
        plait_set_error(PLAIT_ERR_ABI, "%s device: alloc_pinned returned %p, not aligned to %zu bytes",
                        g_dev.desc->name, p, align);
        return NULL;
    }
    return record(p, bytes, tag, 1);
}

int plait_device_owns(const void *ptr) {
    if (!ptr) return 0;
    pthread_mutex_lock(&g_blocks.lock);
    const dev_block *b = find_block((uintptr_t)ptr);
    int owns = b && !b->pinned;
    pthread_mutex_unlock(&g_blocks.lock);
    return owns;
}

int plait_device_is_pinned(const void *ptr) {
    if (!ptr) return 0;
    pthread_mutex_lock(&g_blocks.lock);
    const dev_block *b = find_block((uintptr_t)ptr);
    int pinned = b && b->pinned;
    pthread_mutex_unlock(&g_blocks.lock);
    return pinned;
}

void plait_device_free(void *ptr) {
    if (!ptr) return;
    pthread_mutex_lock(&g_blocks.lock);
    dev_block *b = find_block((uintptr_t)ptr);
    dev_block seen = b ? *b : (dev_block){0, 0, -1, 0};
    if (b) b->ptr = 1;
    pthread_mutex_unlock(&g_blocks.lock);
    if (!seen.ptr) {
        plait_free(ptr);
        return;
    }
    plait_mem_account_sub(seen.account, seen.bytes);
    if (seen.pinned) g_dev.ops->free_pinned(ptr);
    else g_dev.ops->free(ptr);
}

plait_status plait_device_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    if (!bytes) return PLAIT_OK;
    if (!g_dev.ops || g_dev.info.mem_kind == PLAIT_MEM_HOST) {
        memmove(dst, src, bytes);
        return PLAIT_OK;
    }
    return g_dev.ops->copy(dst, src, bytes, dir);
}

plait_status plait_device_check_plugin(const plait_plugin_desc *d) {
    if (!g_dev.ops || g_dev.info.mem_kind == PLAIT_MEM_HOST || d->abi_minor >= 3) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "%s plugin '%s' declares ABI 1.%u, older than 1.3, the first with device memory: it "
                           "may read tensors on the host, and device '%s' (%s) keeps them in device memory; "
                           "rebuild it against SDK 1.3 and touch tensors only through host->kernels, "
                           "host->device->copy and the collectives, or use [device] plugin = cpu",
                           plait_kind_name(d->kind), d->name, (unsigned)d->abi_minor, g_dev.desc->name,
                           g_dev.info.name);
}
