/*
 * NVTX ranges for the trace's spans (trace_nvtx.h): libnvToolsExt's
 * nvtxRangePushA and nvtxRangePop, found with dlopen so that plait needs
 * no CUDA to build or run.
 */
#include "runtime/trace_nvtx.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"

atomic_int plait_trace_nvtx_flag;

static int (*push_fn)(const char *);
static int (*pop_fn)(void);
static int looked;

int plait_trace_nvtx_load(void) {
    if (!looked) {
        looked = 1;
        const char *want = getenv("PLAIT_NVTX");
        void *h = want && strcmp(want, "0") == 0 ? NULL : dlopen("libnvToolsExt.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            /* dlsym's void * to a function pointer, as POSIX allows */
            *(void **)&push_fn = dlsym(h, "nvtxRangePushA");
            *(void **)&pop_fn = dlsym(h, "nvtxRangePop");
        }
        if (push_fn && pop_fn) {
            atomic_store(&plait_trace_nvtx_flag, 1);
            PLAIT_INFO("trace", "libnvToolsExt found: the traced spans are also NVTX ranges (Nsight Systems)");
        }
    }
    return atomic_load(&plait_trace_nvtx_flag);
}

void plait_trace_nvtx_push(const char *name) { (void)push_fn(name); }

void plait_trace_nvtx_pop(void) { (void)pop_fn(); }
