#include "runtime/runtime.h"

#include "comm/comm.h"
#include "plugin/loader.h"
#include "runtime/host.h"

static int g_initialized;

void plait_runtime_init(void) {
    if (g_initialized) return;
    g_initialized = 1;
    /* Modules register their host-table entries here as they land:
     * collectives (comm/), kernels and parameter init (model/). */
    plait_host_set_coll(plait_coll_api_table());
}

void plait_runtime_shutdown(void) {
    if (!g_initialized) return;
    plait_plugins_unload_all();
    g_initialized = 0;
}
