/*
 * plait SDK — the host API: everything a plugin may ask of the core.
 *
 * The core passes one `plait_host` table to a plugin's entry function and
 * to every create/init call. Plugins never link against the core; they call
 * through this table only (Redis modules and SQLite extensions work the same
 * way), so a plugin keeps working with later cores of the same ABI major.
 *
 * Growth rule: fields are only ever appended. A plugin that needs a field
 * added in ABI minor N checks `PLAIT_HOST_HAS(host, field)` first (or
 * declares abi_minor >= N in its descriptor, which makes older cores refuse
 * it at load time instead of letting it call a missing function).
 *
 * The table and everything it points to stay valid until the plugin is
 * unloaded. Every function is thread-safe unless stated otherwise.
 */
#ifndef PLAIT_HOST_H
#define PLAIT_HOST_H

#include <stdarg.h>
#include <plait/types.h>
#include <plait/config.h>
#include <plait/coll.h>
#include <plait/device.h>
#include <plait/kernels.h>
#include <plait/model.h>
#include <plait/parallel.h>
#include <plait/sum_tree.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plait_host {
    uint32_t struct_size;
    uint32_t abi_version;          /* PLAIT_ABI_VERSION of the core: major << 16 | minor */
    const char *core_version;      /* "0.1.0" */

    /* --- logging ------------------------------------------------------ */
    /* Log one line at `level` as `component` (the plugin's name). The core
     * adds the rank prefix and newline, filters by PLAIT_LOG_LEVEL /
     * [run] log_level, and writes to stderr and the rank's log file.
     * Usable from the entry call on, from any thread. */
    void (*log)(plait_log_level level, const char *component, const char *fmt, ...)
        PLAIT_PRINTF(3, 4);
    void (*vlog)(plait_log_level level, const char *component, const char *fmt, va_list ap);
    /* 1 if a line at `level` would be written (skip expensive formatting). */
    int (*log_enabled)(plait_log_level level);

    /* --- errors ------------------------------------------------------- */
    /* Record the calling thread's error message and return `status`, so a
     * plugin writes `return host->set_error(PLAIT_ERR_SYSTEM, "...", ...)`.
     * The core copies the text; it owns message memory. */
    plait_status (*set_error)(plait_status status, const char *fmt, ...) PLAIT_PRINTF(2, 3);
    /* The calling thread's last message ("" if none). Valid until the next
     * set_error on this thread. */
    const char *(*last_error)(void);
    /* Static name of a status ("timeout", "peer lost", ...). */
    const char *(*status_name)(plait_status status);

    /* --- memory ------------------------------------------------------- */
    /* Allocate `bytes` of `kind` aligned to `align` (power of two, >= 64 is
     * used when smaller). Returns NULL and sets the error on failure; counts
     * toward the rank's memory report under `tag` ("zero3 gather buffer").
     * Host memory is returned uninitialised. From ABI 1.3, the device's
     * kind (device_info->mem_kind) is the open device's memory (counted
     * under `tag` too); PLAIT_MEM_HOST_PINNED is page-locked host memory
     * when the device has it, else plain host memory. */
    void *(*alloc)(size_t bytes, plait_mem_kind kind, size_t align, const char *tag);
    /* Release memory from alloc(); NULL is ignored. */
    void (*free)(void *ptr);

    /* --- configuration ------------------------------------------------ */
    /* Read an effective, validated value. `section` is e.g. "optim" or
     * "comm.tcp". Fails with PLAIT_ERR_INVALID_ARG (and a message) only for
     * a key nobody declared — a programming error. */
    plait_status (*config_get)(const plait_config *cfg, const char *section, const char *key,
                               plait_value *out);

    /* --- time --------------------------------------------------------- */
    /* Monotonic seconds since an arbitrary origin (CLOCK_MONOTONIC). */
    double (*now)(void);

    /* --- the core's collectives and kernels --------------------------- */
    const plait_coll_api *coll;
    const plait_kernels *kernels;

    /* --- other plugins ------------------------------------------------ */
    /* The function table (plait_plugin_desc.ops) of the loaded or loadable
     * plugin `name` of `kind` (a plait_plugin_kind), loading it if needed;
     * NULL with the loader's message as error if it cannot be loaded. Used
     * by composing plugins (hybrid parallel). */
    const void *(*plugin_ops)(uint32_t kind, const char *name);

    /* --- run facts ---------------------------------------------------- */
    /* Number of math threads this rank should use (cores / local ranks). */
    int (*math_threads)(void);
    /* Initial value source for a parameter slice (layout-independent init):
     * the value of each element depends only on the seed, the parameter's
     * global name and the element's global index. Fills local elements
     * [offset, offset+count) of `param` (a plait_param from the run's set). */
    plait_status (*init_values)(const plait_param *param, size_t offset, size_t count,
                                float *dst);

    /* --- ABI 1.2 ------------------------------------------------------ */
    /* The core's deterministic summation tree (plait/sum_tree.h): sums that
     * must be bit-identical to the core's, whatever the layout. Check
     * PLAIT_HOST_HAS(host, sum_tree) (or declare abi_minor >= 1). */
    const plait_sum_tree_api *sum_tree;
    /* The order in which a step's gradients finish (plait_grad_finisher in
     * plait/parallel.h): stores a static array in *order (valid until the
     * core exits) and returns its length. */
    int32_t (*grad_finish_order)(const plait_grad_finisher **order);

    /* --- ABI 1.3 ------------------------------------------------------ */
    /* The rank's open device ([device] plugin, plait/device.h) and what it
     * is. Set before any parallel or optim plugin is created; `kernels`
     * above are then this device's kernels. Tensor memory is
     * host->alloc(bytes, device_info->mem_kind, ...); host code touches it
     * only through kernels, device->copy and the collectives. NULL in a core
     * older than 1.3 (everything is host memory there). Parallel and optim
     * plugins declaring abi_minor < 3 are refused when the device's memory
     * is not host memory: they were written before device memory existed. */
    const plait_device_ops *device;
    const plait_device_info *device_info;

    /* --- ABI 1.10 ----------------------------------------------------- */
    /* `count` floats of `kind` (PLAIT_MEM_HOST or device_info->mem_kind),
     * zeroed, for state this rank carries from one step to the next that
     * is neither a parameter nor per-parameter optimizer state, and that a
     * resumed run must find as it was: onebit's error feedback
     * (plait_coll_opts.residual). The core saves its contents with each
     * checkpoint (per rank, under `name` and the layout) and fills it again
     * before the first step of a resume with the same layout; otherwise it
     * stays zero. `name`: 1 to 95 printable characters without spaces, '/',
     * '"' or '\', unique among this rank's live kept buffers, the same on
     * every run (e.g. "dp.bucket.3"); counted in the memory report under
     * `tag`, as alloc's. Allocate it during set-up (create,
     * bind or materialize), not in a step. Free it with free(). NULL and
     * the error set on failure. Check PLAIT_HOST_HAS(host, alloc_kept): an
     * older core has none (plain alloc then, and a resume starts it at
     * zero). */
    float *(*alloc_kept)(size_t count, plait_mem_kind kind, const char *name, const char *tag);

    /* --- ABI 1.34 ----------------------------------------------------- */
    /* Where `cfg`'s value of [section] key came from, for an error that
     * names it as the core's do ("a.ini:12", "environment
     * PLAIT_OPTIM_LR", "command line", "default"). Never NULL: a key
     * nobody declared reads "default". The text lives as long as `cfg`.
     * Thread-safe as config_get is. Check PLAIT_HOST_HAS(host,
     * config_where): an older core has none (name the key alone then). */
    const char *(*config_where)(const plait_config *cfg, const char *section, const char *key);
} plait_host;

/* True if `host` (a table from a possibly older core) has member `field`. */
#define PLAIT_HOST_HAS(host, field)                                                  \
    ((host)->struct_size >= offsetof(plait_host, field) + sizeof((host)->field) &&   \
     (host)->field != NULL)

/* Convenience readers for declared keys. Reading a key the plugin did not
 * declare is a bug in the plugin: the reader logs it as an error naming the
 * section and key (with config_get's message) and returns the type's zero
 * value, so the mistake is visible at once instead of silently becoming 0. */
static inline void plait_cfg_report_(const plait_host *h, const char *sec, const char *key) {
    h->log(PLAIT_LOG_ERROR, "config", "[%s] %s could not be read (%s); using 0: declare the key in the plugin's "
           "key table", sec, key, h->last_error());
}
static inline int64_t plait_cfg_int(const plait_host *h, const plait_config *c, const char *sec,
                                    const char *key) {
    plait_value v;
    if (h->config_get(c, sec, key, &v) == PLAIT_OK) return v.i;
    plait_cfg_report_(h, sec, key);
    return 0;
}
static inline double plait_cfg_float(const plait_host *h, const plait_config *c, const char *sec,
                                     const char *key) {
    plait_value v;
    if (h->config_get(c, sec, key, &v) == PLAIT_OK) return v.f;
    plait_cfg_report_(h, sec, key);
    return 0.0;
}
static inline const char *plait_cfg_str(const plait_host *h, const plait_config *c,
                                        const char *sec, const char *key) {
    plait_value v;
    if (h->config_get(c, sec, key, &v) != PLAIT_OK) {
        plait_cfg_report_(h, sec, key);
        return "";
    }
    return v.s ? v.s : "";
}

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_HOST_H */
