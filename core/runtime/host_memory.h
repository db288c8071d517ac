/*
 * How much memory this host gives a job: the kernel's MemTotal and
 * MemAvailable, a cgroup (v2) limit on the processes' group and what the
 * group uses already, and the address-space limit of one process (ulimit
 * -v). Read from /proc and /sys/fs/cgroup; for deciding before any rank
 * starts whether a layout fits (cli/memory_check.c) and for plait doctor.
 *
 * Reentrant; never fails (what cannot be read is 0 or UINT64_MAX, as the
 * fields say).
 */
#ifndef PLAIT_CORE_RUNTIME_HOST_MEMORY_H
#define PLAIT_CORE_RUNTIME_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef struct plait_host_memory {
    uint64_t total;         /* MemTotal, 0 if unknown */
    uint64_t available;     /* MemAvailable, 0 if unknown */
    uint64_t cgroup_limit;  /* the group's memory.max, UINT64_MAX = none */
    uint64_t cgroup_used;   /* its memory.current */
    char cgroup[256];       /* the group's path ("" = none found) */
    uint64_t process_limit; /* RLIMIT_AS, UINT64_MAX = none */
    uint64_t usable;        /* what the host's processes can still take together:
                             * min(available, cgroup_limit - cgroup_used) */
} plait_host_memory;

void plait_host_memory_read(plait_host_memory *out);

/* The number after `field` ("MemAvailable:", "VmHWM:") at the start of a
 * line of `path` (a /proc file counting kB), in bytes; 0 if absent. */
uint64_t plait_proc_kb(const char *path, const char *field);

/* "this host can still give X (MemAvailable Y; cgroup G: limit L, U in
 * use)" for messages: m->usable and where it comes from. Returns buf. */
const char *plait_host_memory_room_text(const plait_host_memory *m, char *buf, size_t cap);

/* "1,234 MiB" / "21.3 GiB" for messages. Returns buf. */
const char *plait_bytes_text(double bytes, char *buf, size_t cap);

#endif
