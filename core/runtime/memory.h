/*
 * Memory accounting: the core's tagged allocator (every allocation is
 * counted per tag for the memory report; plugins reach it as
 * host->alloc/free) and the process's resident set size.
 */
#ifndef PLAIT_CORE_MEMORY_H
#define PLAIT_CORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* Tagged allocator. plait_alloc returns memory of `bytes` aligned to
 * max(align, 64) (a power of two) owned by the caller until plait_free;
 * NULL with the error set when out of memory or for device memory (the core
 * allocates host memory only). `tag` (copied; NULL = "untagged") names the
 * account in the memory report. Thread-safe. */
void *plait_alloc(size_t bytes, plait_mem_kind kind, size_t align, const char *tag);
void plait_free(void *ptr);

/* Count memory some other allocator holds (a device's, core/device) in the
 * report: plait_mem_account_add adds `bytes` under `tag` and returns the
 * account's index for plait_mem_account_sub, which takes them off.
 * Thread-safe. */
int plait_mem_account_add(const char *tag, uint64_t bytes);
void plait_mem_account_sub(int account, uint64_t bytes);

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
