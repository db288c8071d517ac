/*
 * The host API table given to plugins, and the core's tagged allocator
 * behind it (every allocation is counted per tag for the memory report).
 */
#ifndef PLAIT_CORE_HOST_H
#define PLAIT_CORE_HOST_H

#include <plait/host.h>

/* The process-wide table. Fields for modules not yet installed are NULL. */
const plait_host *plait_host_table(void);

/* Installed by the modules that implement them, at startup (runtime_init.c).
 * Not thread-safe: call before any plugin is loaded. */
void plait_host_set_coll(const plait_coll_api *coll);
void plait_host_set_kernels(const plait_kernels *kernels);
void plait_host_set_init_values(plait_status (*fn)(const plait_param *, size_t, size_t, float *));
void plait_host_set_math_threads(int threads);

/* Tagged allocator (also host->alloc/free). Thread-safe. */
void *plait_alloc(size_t bytes, plait_mem_kind kind, size_t align, const char *tag);
void plait_free(void *ptr);

/* Bytes currently held and the high-water mark under `tag` (NULL = all tags). */
typedef struct plait_mem_usage {
    char tag[48];
    uint64_t bytes;
    uint64_t peak;
} plait_mem_usage;
/* Copies up to `cap` tag rows into `out`; returns the number of tags. */
size_t plait_mem_usage_list(plait_mem_usage *out, size_t cap);
uint64_t plait_mem_usage_of(const char *tag);

/* Peak resident set size of this process in bytes (VmHWM, or more after a
 * rewind, below), 0 if unknown. */
uint64_t plait_peak_rss(void);
/* Forget the RSS peaks since `before` (an earlier plait_peak_rss()): the
 * peak becomes the larger of `before` and the current RSS. For scratch
 * memory freed right after use that belongs to no run (the SGEMM peak
 * measurement's 48 MB), so the run's reported peak is its own. Without
 * /proc/self/clear_refs (Linux < 4.0) nothing changes. Thread-safe. */
void plait_peak_rss_rewind(uint64_t before);
/* Current resident set size in bytes (VmRSS), 0 if unknown. */
uint64_t plait_current_rss(void);

#endif
