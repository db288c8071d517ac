/*
 * Test devices (built for tests only, never installed):
 *
 * sim: stands in for a GPU so that every device path of the core and the
 * plugins runs on a CPU. Its memory is real host memory handed out at an
 * address the host cannot dereference: the allocation plus 2^62, a
 * non-canonical x86-64 address, so any host load or store of device memory
 * faults at once instead of silently working. Its memory kind is
 * PLAIT_MEM_CUDA (so the comm layer stages it for host transports and
 * plugins declaring ABI < 1.3 are refused); its kernels and copies translate
 * the addresses back and call plait's CPU kernels, so its results are the
 * cpu device's, bit for bit. fp32 only. Its page-locked memory
 * (alloc_pinned) is plain host memory, counted (sim_pinned_counts, and a
 * line at close at level info) so tests can check what the core routes
 * there.
 *
 * It reports one device, or $PLAIT_SIM_DEVICES; they all share the host's
 * memory, each rank using the ordinal it was given.
 *
 * It is asynchronous the way a GPU is, only more so, so that ordering bugs
 * show on a CPU: kernels, fill_zero and copies to the device are QUEUED on
 * its compute stream and run only when something waits for them (a copy to
 * the host, synchronize(), a kernel that returns a value, an event, free,
 * or a queue grown past SIM_QUEUE_MAX) — by whichever thread waits, in
 * queue order, one at a time. A copy to the device takes its host bytes at
 * the call. The communication stream (ABI 1.4, plait/device.h) is the
 * calling thread itself: copy_on(PLAIT_STREAM_COMM) happens at once and
 * does NOT run the compute queue, so a staging copy that did not wait for
 * its ready event reads the gradients as they were before the backward
 * kernels ran: stale data, deterministically.
 *
 * Test switches (environment, read at open):
 *   PLAIT_SIM_BF16=1  precision = bf16 is taken, computed in float32 (no
 *       bf16 products: the model's activations stay float32), so that a
 *       bf16 run's messages between ranks travel in bf16 (to_bf16 and
 *       from_bf16 are in its table).
 *   PLAIT_SIM_DEBUG_SKIP_WAITS=1  event_synchronize and event_wait do not
 *       wait: the ordering they provide is gone, and tests show that runs
 *       then go wrong (the events are load-bearing).
 *   PLAIT_SIM_STATS=FILE  at close, append one line per process: the host
 *       synchronisations the model's thread (the one that opened the
 *       device) made: synchronize(), copies to the host and value-returning
 *       kernels on the compute stream, event_synchronize; what the
 *       other threads did (copies on each stream, event waits); the
 *       events created, and those still alive at close (a leak).
 *   PLAIT_SIM_SETENV_AT_COPY=N  its Nth copy to the host on the compute
 *       stream sets PLAIT_SIM_COPIED=N: a plugin whose call changes the
 *       process, which the core's commands must refuse (runtime/
 *       process_state.h).
 *   PLAIT_SIM_RING=1  the kernel table has ring attention's entries (the
 *       CPU's, queued as the others), so context parallelism runs on the
 *       sim; without it the sim is a device whose table lacks them.
 *   PLAIT_SIM_MOE=1  the kernel table has the mixture of experts' entries
 *       (the CPU's, queued as the others; the grouped products' offsets,
 *       host memory, taken at the call), so a model with experts runs on
 *       the sim; without it the sim is a device whose table lacks them.
 *
 * sim13 (built with SIM_ABI_1_3): the same device as a plugin built
 * against ABI 1.3: no streams or events, so the core stages with copy(),
 * which follows the compute stream.
 *
 * nodev (built with SIM_NO_DEVICE): count() finds none, with a reason,
 * as the cuda device does on a machine without a GPU: the clean-failure
 * path before any rank starts.
 */
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <plait/device.h>
#include <plait/host.h>
#include <plait/plugin.h>

#include "sim_device.h"

#define HEADER 256
/* queued operations before the enqueuing thread runs them itself */
#define SIM_QUEUE_MAX 65536

static const plait_host *g_host;
static _Atomic uint64_t g_in_use, g_peak;
static _Atomic uint64_t g_pinned_allocs, g_pinned_live; /* alloc_pinned calls; blocks not yet freed */


/* ---- the compute stream: a queue run by whoever waits ---------------------- */

static struct {
    pthread_mutex_t lock;   /* ops, n, head, base */
    pthread_mutex_t exec;   /* one runner at a time, in order */
    sim_op *ops;
    size_t cap, n, head;    /* ops[head..n) are queued */
    uint64_t base;          /* stream position of ops[0] */
} g_q = {.lock = PTHREAD_MUTEX_INITIALIZER, .exec = PTHREAD_MUTEX_INITIALIZER};

static pthread_t g_model_thread;
static int g_skip_waits;
static long long g_setenv_at;            /* PLAIT_SIM_SETENV_AT_COPY; 0: never */
static _Atomic long long g_host_copies;  /* compute-stream copies to the host */
static struct {
    _Atomic uint64_t model_syncs, model_event_syncs, other_event_syncs, other_compute_copies, comm_copies, ops,
        event_creates, events_live;
} g_stats;

static int on_model_thread(void) { return pthread_equal(pthread_self(), g_model_thread); }

/* Stream position after everything queued so far. */
static uint64_t sim_queued(void) {
    pthread_mutex_lock(&g_q.lock);
    uint64_t pos = g_q.base + g_q.n;
    pthread_mutex_unlock(&g_q.lock);
    return pos;
}

/* Run the queue up to stream position `pos` on this thread. */
static void sim_run_to(uint64_t pos) {
    pthread_mutex_lock(&g_q.exec);
    for (;;) {
        pthread_mutex_lock(&g_q.lock);
        if (g_q.head == g_q.n) { /* all done: start the array over */
            g_q.base += g_q.n;
            g_q.head = g_q.n = 0;
        }
        if (g_q.head == g_q.n || g_q.base + g_q.head >= pos) {
            pthread_mutex_unlock(&g_q.lock);
            break;
        }
        sim_op o = g_q.ops[g_q.head]; /* a copy: the array may move while it runs */
        pthread_mutex_unlock(&g_q.lock);
        o.run(&o);
        free(o.extra);
        pthread_mutex_lock(&g_q.lock);
        g_q.head++;
        pthread_mutex_unlock(&g_q.lock);
    }
    pthread_mutex_unlock(&g_q.exec);
}

void sim_run_all(void) { sim_run_to(sim_queued()); }

/* A host synchronisation of the compute stream (counted for the model's thread). */
void sim_host_sync(void) {
    if (on_model_thread()) atomic_fetch_add(&g_stats.model_syncs, 1);
    sim_run_all();
}

void sim_enqueue(const sim_op *o) {
    atomic_fetch_add(&g_stats.ops, 1);
    pthread_mutex_lock(&g_q.lock);
    if (g_q.n == g_q.cap) {
        size_t cap = g_q.cap ? 2 * g_q.cap : 1024;
        sim_op *bigger = realloc(g_q.ops, cap * sizeof *bigger);
        if (!bigger) { /* run it now instead: still in order, once the queue is done */
            pthread_mutex_unlock(&g_q.lock);
            sim_run_all();
            o->run(o);
            free(o->extra);
            return;
        }
        g_q.ops = bigger;
        g_q.cap = cap;
    }
    g_q.ops[g_q.n++] = *o;
    size_t pending = g_q.n - g_q.head;
    pthread_mutex_unlock(&g_q.lock);
    if (pending > SIM_QUEUE_MAX) sim_run_all();
}


static plait_status sim_count(const plait_host *host, int32_t *out) {
#ifdef SIM_NO_DEVICE
    *out = 0;
    /* none is not an error of count() itself: OK, 0, and the reason */
    return host->set_error(PLAIT_OK, "no NODEV device found (the nodev test device never has one)");
#else
    (void)host;
    /* PLAIT_SIM_DEVICES: how many devices this host seems to have (default
     * 1), so tests can start one rank per "GPU" under [comm] plugin = nccl */
    const char *e = getenv("PLAIT_SIM_DEVICES");
    *out = e && atoi(e) > 0 ? atoi(e) : 1;
    return PLAIT_OK;
#endif
}

static plait_status sim_open(const plait_host *host, const plait_device_open_args *args, plait_device_info *info) {
    g_host = host;
    plait_kernels_set_log(host->log);
    /* PLAIT_SIM_BF16=1: a bf16 run is taken and computed in float32 (its
     * kernel table has to_bf16 and from_bf16 but no bf16 products, so the
     * model keeps float32 activations), for the tests of what a bf16 run
     * sends between ranks through the NCCL stand-in */
    const char *bf = getenv("PLAIT_SIM_BF16");
    const int bf16_ok = args->precision == PLAIT_PRECISION_BF16 && bf && bf[0] == '1';
    if (args->precision != PLAIT_PRECISION_FP32 && !bf16_ok)
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "the sim test device computes in fp32 only");
    plait_kernels_set_threads(args->math_threads);
    /* the cpu device's products' library (PLAIT_CPU_GEMM, auto: oneDNN on
     * AMX), so that the sim device's results are the cpu device's bits */
    char why[768];
    if (plait_kernels_set_gemm(NULL, why, sizeof why) != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG, "the sim device's matrix products: %s", why);
    g_model_thread = pthread_self();
    const char *skip = getenv("PLAIT_SIM_DEBUG_SKIP_WAITS");
    g_skip_waits = skip && skip[0] == '1';
    if (g_skip_waits) host->log(PLAIT_LOG_WARN, "sim", "PLAIT_SIM_DEBUG_SKIP_WAITS: events order nothing (a test)");
    const char *at = getenv("PLAIT_SIM_SETENV_AT_COPY");
    g_setenv_at = at ? atoll(at) : 0;
    atomic_store(&g_host_copies, 0);
    plait_device_info mine = {.struct_size = sizeof mine, .mem_kind = PLAIT_MEM_CUDA, .ordinal = args->ordinal};
    snprintf(mine.name, sizeof mine.name, "sim (host memory at non-canonical addresses)");
    /* PLAIT_SIM_MEMORY_MB: the memory it says it has (default 0: unknown),
     * for tests of what is checked against a device's memory */
    const char *mb = getenv("PLAIT_SIM_MEMORY_MB");
    if (mb && atoll(mb) > 0) mine.memory_bytes = (uint64_t)atoll(mb) << 20;
    plait_fill_versioned(info, &mine, sizeof mine);
    return PLAIT_OK;
}

static void write_stats(void) {
    const char *path = getenv("PLAIT_SIM_STATS");
    if (!path || !path[0]) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "pid=%ld model_syncs=%llu model_event_syncs=%llu other_event_syncs=%llu other_compute_copies=%llu "
               "comm_copies=%llu ops=%llu event_creates=%llu events_live=%llu\n",
            (long)getpid(), (unsigned long long)g_stats.model_syncs, (unsigned long long)g_stats.model_event_syncs,
            (unsigned long long)g_stats.other_event_syncs, (unsigned long long)g_stats.other_compute_copies,
            (unsigned long long)g_stats.comm_copies, (unsigned long long)g_stats.ops,
            (unsigned long long)g_stats.event_creates, (unsigned long long)g_stats.events_live);
    fclose(f);
}

static void sim_close(void) {
    sim_run_all();
    write_stats();
    /* the queue's array: the plugin may be unloaded after close, and then
     * nothing would point at it (LeakSanitizer reports it) */
    pthread_mutex_lock(&g_q.lock);
    free(g_q.ops);
    g_q.ops = NULL;
    g_q.base += g_q.n;
    g_q.cap = g_q.n = g_q.head = 0;
    pthread_mutex_unlock(&g_q.lock);
    plait_kernels_set_threads(1);
    /* what the core routed to alloc_pinned, for tests that check it */
    if (g_host)
        g_host->log(PLAIT_LOG_INFO, SIM_NAME, "closed: %llu page-locked allocations (alloc_pinned), %llu still live",
                    (unsigned long long)atomic_load(&g_pinned_allocs), (unsigned long long)atomic_load(&g_pinned_live));
}

/* "Page-locked" memory: plain host memory (the host may use it), page
 * aligned as cudaHostAlloc's, counted so tests see what the core routed
 * here (host->alloc of PLAIT_MEM_HOST_PINNED, the comm staging pool). */
static void *sim_alloc_pinned(size_t bytes, const char *tag) {
    (void)tag;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
        g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: cannot allocate %zu page-locked bytes", bytes);
        return NULL;
    }
    atomic_fetch_add(&g_pinned_allocs, 1);
    atomic_fetch_add(&g_pinned_live, 1);
    return p;
}

static void sim_free_pinned(void *ptr) {
    if (!ptr) return;
    atomic_fetch_sub(&g_pinned_live, 1);
    free(ptr);
}

/* For tests (found with dlsym): alloc_pinned calls so far, blocks live. */
PLAIT_EXPORT void sim_pinned_counts(uint64_t *allocs, uint64_t *live);
PLAIT_EXPORT void sim_pinned_counts(uint64_t *allocs, uint64_t *live) {
    *allocs = atomic_load(&g_pinned_allocs);
    *live = atomic_load(&g_pinned_live);
}

static void *sim_alloc(size_t bytes, const char *tag) {
    (void)tag;
    void *base = NULL;
    if (posix_memalign(&base, HEADER, bytes + HEADER) != 0) {
        g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    memcpy(base, &bytes, sizeof bytes);
    uint64_t now = atomic_fetch_add(&g_in_use, bytes) + bytes, peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
    }
    return (void *)((uintptr_t)base + HEADER + SIM_OFFSET);
}

static void sim_free(void *ptr) {
    if (!ptr) return;
    sim_run_all(); /* queued work may still use it (cudaFree waits too) */
    char *base = (char *)HN(ptr) - HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&g_in_use, bytes);
    free(base);
}

static void r_copy_to_device(const sim_op *o) { memcpy(HN(o->a[0].p), o->extra, (size_t)o->a[1].i); }
static void r_copy_on_device(const sim_op *o) { memmove(HN(o->a[0].p), HN(o->a[1].p), (size_t)o->a[2].i); }
static void r_fill_zero(const sim_op *o) { memset(HN(o->a[0].p), 0, (size_t)o->a[1].i); }

/* Copy at once on the calling thread (the communication stream). */
static plait_status copy_now(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    switch (dir) {
    case PLAIT_COPY_TO_DEVICE: memcpy(HN(dst), src, bytes); break;
    case PLAIT_COPY_TO_HOST: memcpy(dst, HN(src), bytes); break;
    case PLAIT_COPY_ON_DEVICE: memmove(HN(dst), HN(src), bytes); break;
    default: return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: copy direction %d", (int)dir);
    }
    return PLAIT_OK;
}

/* On the compute stream: to the host waits for the queue; the others queue. */
static plait_status sim_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    if (!bytes) return PLAIT_OK;
    if (!on_model_thread()) atomic_fetch_add(&g_stats.other_compute_copies, 1);
    switch (dir) {
    case PLAIT_COPY_TO_HOST: {
        sim_host_sync();
        if (g_setenv_at > 0 && atomic_fetch_add(&g_host_copies, 1) + 1 == g_setenv_at) {
            char n[24];
            snprintf(n, sizeof n, "%lld", g_setenv_at);
            setenv("PLAIT_SIM_COPIED", n, 1);
        }
        return copy_now(dst, src, bytes, dir);
    }
    case PLAIT_COPY_ON_DEVICE: Q(r_copy_on_device, P(dst), P(src), I(bytes)); return PLAIT_OK;
    case PLAIT_COPY_TO_DEVICE: {
        void *taken = malloc(bytes); /* the caller may reuse its buffer at once */
        if (!taken) return g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: cannot queue a %zu-byte copy", bytes);
        memcpy(taken, src, bytes);
        sim_enqueue(&(sim_op){.run = r_copy_to_device, .a = {P(dst), I(bytes)}, .extra = taken});
        return PLAIT_OK;
    }
    default: return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: copy direction %d", (int)dir);
    }
}

static plait_status sim_fill_zero(void *dst, size_t bytes) {
    if (bytes) Q(r_fill_zero, P(dst), I(bytes));
    return PLAIT_OK;
}

static plait_status sim_synchronize(void) {
    sim_host_sync();
    return PLAIT_OK;
}

#ifndef SIM_ABI_1_3 /* a 1.3 plugin has none of this */
/* ---- streams and events (ABI 1.4) -------------------------------------- */

/* A mark in the compute stream; 0 = complete (never recorded, or recorded
 * on the communication stream, which is always done when its call returns). */
struct plait_device_event {
    _Atomic uint64_t pos;
};

static plait_device_event *sim_event_create(void) {
    plait_device_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: out of memory for an event");
        return NULL;
    }
    atomic_fetch_add(&g_stats.event_creates, 1);
    atomic_fetch_add(&g_stats.events_live, 1);
    return ev;
}

static void sim_event_destroy(plait_device_event *ev) {
    if (ev) atomic_fetch_sub(&g_stats.events_live, 1);
    free(ev);
}

static plait_status sim_event_record(plait_device_event *ev, plait_device_stream stream) {
    if (!ev) return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: event_record of a NULL event");
    atomic_store(&ev->pos, stream == PLAIT_STREAM_COMPUTE ? sim_queued() : 0);
    return PLAIT_OK;
}

/* Run the compute stream up to the event's mark (unless the test switch
 * says not to). */
static void reach(const plait_device_event *ev) {
    if (!g_skip_waits) sim_run_to(atomic_load(&ev->pos));
}

static plait_status sim_event_wait(plait_device_event *ev, plait_device_stream stream) {
    if (!ev) return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: event_wait of a NULL event");
    /* The compute stream already follows its own marks and the
     * communication stream's are complete; the communication stream runs
     * on its callers, so waiting there is running the queue now. */
    if (stream == PLAIT_STREAM_COMM) reach(ev);
    return PLAIT_OK;
}

static plait_status sim_event_synchronize(plait_device_event *ev) {
    if (!ev) return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: event_synchronize of a NULL event");
    atomic_fetch_add(on_model_thread() ? &g_stats.model_event_syncs : &g_stats.other_event_syncs, 1);
    reach(ev);
    return PLAIT_OK;
}

static plait_status sim_copy_on(plait_device_stream stream, void *dst, const void *src, size_t bytes,
                                plait_copy_dir dir) {
    if (stream == PLAIT_STREAM_COMPUTE) return sim_copy(dst, src, bytes, dir);
    if (!bytes) return PLAIT_OK;
    atomic_fetch_add(&g_stats.comm_copies, 1);
    return copy_now(dst, src, bytes, dir);
}

static void *sim_event_native(plait_device_event *ev) {
    (void)ev;
    return NULL; /* no driver to share */
}
#endif

static void sim_memory_stats(uint64_t *in_use, uint64_t *peak) {
    *in_use = atomic_load(&g_in_use);
    *peak = atomic_load(&g_peak);
}


static const plait_device_ops sim_ops = {
#ifdef SIM_ABI_1_3 /* the table of a plugin built against 1.3 ends here */
    .struct_size = offsetof(plait_device_ops, event_create),
#else
    .struct_size = sizeof(plait_device_ops),
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_wait = sim_event_wait,
    .event_synchronize = sim_event_synchronize,
    .copy_on = sim_copy_on,
    .event_native = sim_event_native,
#endif
    .count = sim_count,
    .open = sim_open,
    .close = sim_close,
    .alloc = sim_alloc,
    .free = sim_free,
    .copy = sim_copy,
    .fill_zero = sim_fill_zero,
    .synchronize = sim_synchronize,
    .memory_stats = sim_memory_stats,
    .kernels = sim_kernel_table,
    .alloc_pinned = sim_alloc_pinned,
    .free_pinned = sim_free_pinned,
};

#ifndef SIM_ABI_1_3
/* What plait doctor shows of it: its devices, as a GPU's report would, and
 * a problem with its fix when PLAIT_SIM_PROBLEM names one (tests of
 * doctor's device lines); PLAIT_SIM_REPORT=crash, exit, exit0 or hang makes it
 * break after those lines. */
static void sim_report(const plait_host *host, const plait_config *cfg, plait_report_fn line, void *ctx) {
    (void)cfg;
    int32_t n = 0;
    char text[256];
    if (sim_count(host, &n) == PLAIT_OK && n > 0) {
        const char *mb = getenv("PLAIT_SIM_MEMORY_MB");
        snprintf(text, sizeof text, "%d simulated device%s (PLAIT_SIM_DEVICES), %s MiB each (PLAIT_SIM_MEMORY_MB)",
                 (int)n, n == 1 ? "" : "s", mb && *mb ? mb : "unknown");
        line(ctx, text, NULL);
    }
    const char *problem = getenv("PLAIT_SIM_PROBLEM");
    if (problem && *problem) line(ctx, problem, "the fix PLAIT_SIM_PROBLEM asks for");
    /* a report that breaks after its first lines (doctor's tests) */
    const char *breaks = getenv("PLAIT_SIM_REPORT");
    if (breaks && !strcmp(breaks, "crash")) raise(SIGSEGV);
    if (breaks && !strcmp(breaks, "exit")) exit(3);
    if (breaks && !strcmp(breaks, "exit0")) exit(0);
    if (breaks && !strcmp(breaks, "hang"))
        for (;;) pause();
}
#endif

/* Usable always; PLAIT_SIM_PROBE=hang makes the probe never return (the
 * bound every command puts on a probe: test_plugin_entry_hang). */
static plait_status sim_probe(const plait_host *host) {
    (void)host;
    const char *probe = getenv("PLAIT_SIM_PROBE");
    if (probe && !strcmp(probe, "hang"))
        for (;;) pause();
    return PLAIT_OK;
}

static const plait_plugin_desc sim_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
#ifdef SIM_ABI_1_3
    .abi_minor = 3,
#else
    .abi_minor = PLAIT_ABI_MINOR,
#endif
    .kind = PLAIT_KIND_DEVICE,
    .name = SIM_NAME,
    .version = "0.0.1",
    .description = "test device: host memory at non-canonical addresses, the CPU kernels queued and run late (tests only)",
    .ops = &sim_ops,
    .probe = sim_probe,
#ifndef SIM_ABI_1_3
    .report = sim_report,
#endif
};

static const plait_plugin_desc *const sim_list[] = {&sim_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    (void)host;
    *descs = sim_list;
    *count = 1;
    return PLAIT_OK;
}
