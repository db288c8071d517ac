#include "host/host_table.h"

#include <pthread.h>
#include <stdarg.h>

#include "comm/comm.h"
#include "coll/sum_tree.h"
#include "config/config.h"
#include "device/device.h"
#include "host/kept_buffers.h"
#include "layout/grad_order.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "plugin/loader.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

/* Variadic entries cannot point at the core's va_list functions directly. */
static void host_log(plait_log_level level, const char *component, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static void host_log(plait_log_level level, const char *component, const char *fmt, ...) {
    /* a plugin's text, printable before it reaches a terminal or a log */
    char text[4096], shown[4096], comp[64];
    text[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
    }
    plait_printable_copy(shown, sizeof shown, text);
    plait_printable_copy(comp, sizeof comp, component ? component : "plugin");
    plait_log(level, comp, "%s", shown);
}

static plait_status host_set_error(plait_status status, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static plait_status host_set_error(plait_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plait_vset_error(status, fmt, ap);
    va_end(ap);
    return status;
}

static const void *host_plugin_ops(uint32_t kind, const char *name) {
    if (!name) {
        plait_set_error(PLAIT_ERR_INVALID_ARG, "a plugin asked host->plugin_ops for a plugin without a name (NULL)");
        return NULL;
    }
    const plait_plugin_desc *d = plait_plugin_load(kind, name);
    return d ? d->ops : NULL;
}

/* host->config_get: a plugin's NULL arguments are its error, said, never
 * dereferenced. */
static plait_status host_config_get(const plait_config *cfg, const char *section, const char *key,
                                    plait_value *out) {
    if (!cfg || !section || !key || !out)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "a plugin called host->config_get with a NULL %s",
                               !cfg ? "configuration (pass the one its init arguments hold)"
                               : !section ? "section" : !key ? "key" : "value pointer");
    return plait_config_get(cfg, section, key, out);
}

static const char *host_config_where(const plait_config *cfg, const char *section, const char *key) {
    const char *where = "default";
    if (cfg && section && key) plait_config_origin(cfg, section, key, &where);
    return where;
}

/* host->alloc: the open device's memory kind goes to the device, and so
 * does page-locked host memory (its alloc_pinned, where it has one);
 * host->free (plait_device_free) tells them apart. */
static void *host_alloc(size_t bytes, plait_mem_kind kind, size_t align, const char *tag) {
    if (kind != PLAIT_MEM_HOST && kind == plait_device_mem_kind()) {
        if (align > 256) {
            plait_set_error(PLAIT_ERR_INVALID_ARG, "device memory is aligned to 256 bytes, not %zu", align);
            return NULL;
        }
        return plait_device_alloc(bytes, tag);
    }
    if (kind == PLAIT_MEM_HOST_PINNED) return plait_device_alloc_pinned(bytes, align, tag);
    return plait_alloc(bytes, kind, align, tag);
}

static plait_host g_host;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* host->init_values has no argument for the run's seed and model: the run
 * attaches them (plait_host_attach_init_rule), as it attaches its device. */
static plait_init_rule g_init_rule = {.seed = 1337, .n_layer = 1, .std = 0.02};

static plait_status host_init_values(const plait_param *param, size_t offset, size_t count, float *dst) {
    return plait_model_init_values(&g_init_rule, param, offset, count, dst);
}

static void build(void) {
    g_host = (plait_host){
        .struct_size = sizeof(plait_host),
        .abi_version = PLAIT_ABI_VERSION,
        .core_version = PLAIT_VERSION,
        .log = host_log,
        .vlog = plait_vlog,
        .log_enabled = plait_log_enabled,
        .set_error = host_set_error,
        .last_error = plait_last_error,
        .status_name = plait_status_name,
        .alloc = host_alloc,
        .free = plait_kept_free, /* plait_device_free, forgetting a kept buffer */
        .config_get = host_config_get,
        .now = plait_clock_now,
        .coll = plait_coll_api_table(),
        .kernels = plait_kernels_table(),
        .plugin_ops = host_plugin_ops,
        .math_threads = plait_kernels_threads,
        .init_values = host_init_values,
        .sum_tree = plait_sum_tree_api_table(),
        .grad_finish_order = plait_grad_finish_order,
        .alloc_kept = plait_kept_alloc,
        .config_where = host_config_where,
    };
}

const plait_host *plait_host_table(void) {
    pthread_once(&g_once, build);
    return &g_host;
}

void plait_host_attach_device(void) {
    pthread_once(&g_once, build);
    const plait_kernels *k = plait_device_kernels_open();
    g_host.kernels = k ? k : plait_kernels_table();
    g_host.device = plait_device_ops_open();
    g_host.device_info = plait_device_info_open();
}

void plait_host_attach_init_rule(const plait_init_rule *rule) { g_init_rule = *rule; }

void plait_host_install(void) {
    plait_kernels_set_log(plait_log);
    plait_loader_set_host(plait_host_table());
}

void plait_host_uninstall(void) { plait_plugins_unload_all(); }
