/*
 * Reading a memory-mapped file safely. When another process truncates a
 * file that is mapped here, touching a page past its new end raises SIGBUS,
 * which kills the process with no message. A guard turns that fault, inside
 * the guarded mapping and on the guarded thread, into a jump back to the
 * guard's start, where the caller reports the file that changed. Faults
 * elsewhere keep their previous disposition (the default, or a sanitizer's
 * handler).
 *
 * Use (sigsetjmp must be called in the frame that reads, as the controlling
 * expression of an `if`):
 *
 *     plait_map_guard g;
 *     plait_map_guard_enter(&g, covers, ctx);   // covers(ctx, addr): is addr in a guarded mapping?
 *     if (sigsetjmp(g.jump, 1) != 0) {
 *         plait_map_guard_leave(&g);
 *         return <error naming the file>;   // locals changed since sigsetjmp are indeterminate
 *     }
 *     ... read the mapping ...
 *     plait_map_guard_leave(&g);
 *
 * Guards nest per thread (the innermost that covers the address takes the
 * fault; one that covers none goes to the previous disposition). Thread-safe: each thread has its own guards; the SIGBUS
 * handler is installed once per process.
 */
#ifndef PLAIT_CORE_RUNTIME_MAP_GUARD_H
#define PLAIT_CORE_RUNTIME_MAP_GUARD_H

#include <setjmp.h>
#include <stddef.h>

/* Whether `addr` lies in one of the guarded mappings; called from the
 * signal handler, so it may only read memory (no locks, no allocation). */
typedef int (*plait_map_guard_covers)(const void *ctx, const void *addr);

typedef struct plait_map_guard {
    sigjmp_buf jump;
    plait_map_guard_covers covers;
    const void *ctx;
    struct plait_map_guard *outer;
} plait_map_guard;

void plait_map_guard_enter(plait_map_guard *g, plait_map_guard_covers covers, const void *ctx);
void plait_map_guard_leave(plait_map_guard *g);

#endif
