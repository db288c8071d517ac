#include "runtime/runtime.h"

#include "comm/comm.h"
#include "model/kernels.h"
#include "model/model.h"
#include "plugin/loader.h"
#include "runtime/host.h"

static int g_initialized;

void plait_runtime_init(void) {
    if (g_initialized) return;
    g_initialized = 1;
    /* The modules behind the host API: collectives (comm/), kernels and
     * layout-independent parameter init (model/). */
    plait_host_set_coll(plait_coll_api_table());
    plait_host_set_kernels(plait_kernels_table());
    plait_host_set_init_values(plait_model_init_values);
}

void plait_runtime_shutdown(void) {
    if (!g_initialized) return;
    plait_plugins_unload_all();
    g_initialized = 0;
}
