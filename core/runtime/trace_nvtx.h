/*
 * The trace's spans also as NVTX ranges ([run] trace, docs/trace.md), for
 * Nsight Systems: while a trace records, a span that has a range is pushed
 * on its thread when it begins and popped when it ends. NVTX is NVIDIA's
 * libnvToolsExt.so.1, loaded at run time (dlopen) when a trace opens; where
 * it is absent, or PLAIT_NVTX=0, there are no ranges and each range point
 * costs what a disabled trace costs (one relaxed load and a branch).
 *
 * Thread-safety: push and pop from any thread, each on its own thread's
 * stack (NVTX's); plait_trace_nvtx_load on the rank's main thread before
 * recording starts. Errors: none (a library without the two functions is
 * as no library).
 */
#ifndef PLAIT_CORE_RUNTIME_TRACE_NVTX_H
#define PLAIT_CORE_RUNTIME_TRACE_NVTX_H

#include <stdatomic.h>

#include "runtime/trace.h"

extern atomic_int plait_trace_nvtx_flag;

/* Look for libnvToolsExt (once per process); 1 when ranges will be made. */
int plait_trace_nvtx_load(void);

void plait_trace_nvtx_push(const char *name);
void plait_trace_nvtx_pop(void);

/* Does a span begun now get a range? (recording, and NVTX loaded) */
static inline int plait_trace_range_on(void) {
    return plait_trace_on() && __builtin_expect(atomic_load_explicit(&plait_trace_nvtx_flag, memory_order_relaxed), 0);
}

/* A range named `name` opened when plait_trace_range_on(); returns whether
 * it was (the matching plait_trace_range_pop's argument). */
static inline int plait_trace_range_push(const char *name) {
    if (!plait_trace_range_on()) return 0;
    plait_trace_nvtx_push(name);
    return 1;
}

static inline void plait_trace_range_pop(int pushed) {
    if (pushed) plait_trace_nvtx_pop();
}

#endif
