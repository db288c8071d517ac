/*
 * plait SDK — plugin descriptor and entry point (ABI v1).
 *
 * A plugin is a shared object named libplait-<kind>-<name>.so that exports
 * exactly one symbol, PLAIT_PLUGIN_ENTRY (`plait_plugin_v1` for ABI major 1):
 *
 *     static const plait_plugin_desc my_desc = {
 *         .struct_size = sizeof(plait_plugin_desc), .magic = PLAIT_PLUGIN_MAGIC,
 *         .abi_major = PLAIT_ABI_MAJOR, .abi_minor = PLAIT_ABI_MINOR,
 *         .kind = PLAIT_KIND_COMM, .name = "mynet", .version = "1.0.0", ...,
 *         .ops = &my_comm_ops };
 *     static const plait_plugin_desc *const my_list[] = { &my_desc };
 *     PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
 *                                                 const plait_plugin_desc *const **descs,
 *                                                 size_t *count) {
 *         *descs = my_list; *count = 1; return PLAIT_OK;
 *     }
 *
 * or, with this SDK's helpers below (1.11), the same in two statements:
 *
 *     static const plait_plugin_desc my_desc = {
 *         PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_COMM, "mynet", 3), .version = "1.0.0", ...,
 *         .ops = &my_comm_ops };
 *     PLAIT_PLUGIN_DEFINE_ENTRY("comm/mynet", 3, NULL, &my_desc)
 *
 * A later ABI major exports `plait_plugin_v2` and the core keeps a shim for
 * v1, so old plugins keep loading; a plugin built for a major the core does
 * not know is refused with both versions named, never called.
 *
 * Before calling anything in a descriptor the loader checks: magic, ABI major
 * and minor (a plugin needing a newer minor than the core is refused),
 * struct_size >= the v1.0 size, kind, and that the name matches the file.
 *
 * A plugin runs in the rank's process. No call into it, of any kind, nor
 * the loading of its file, may change the process's working directory, its
 * PLAIT_* environment variables or the few others plait reads once plugins
 * run (HOME, TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR, CUDA_VISIBLE_DEVICES):
 * the core finds the run's files and the rank's place in the job through
 * them. The core compares them around the
 * set-up calls (and refuses the call), after each step of a run and each
 * size of `plait bench comm` and token of `plait sample` (and stops there,
 * naming the change), and `plait plugin test` checks a comm plugin's and
 * an optimizer's calls (its row "process").
 */
#ifndef PLAIT_PLUGIN_H
#define PLAIT_PLUGIN_H

#include <plait/types.h>
#include <plait/config.h>
#include <plait/host.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Minor versions of ABI 1: sdk/README.md lists what each added. */
#define PLAIT_ABI_MAJOR 1
#define PLAIT_ABI_MINOR 37
#define PLAIT_ABI_VERSION ((uint32_t)((PLAIT_ABI_MAJOR << 16) | PLAIT_ABI_MINOR))
#define PLAIT_ABI_VERSION_MAJOR(v) ((uint32_t)(v) >> 16)
#define PLAIT_ABI_VERSION_MINOR(v) ((uint32_t)(v)&0xffffu)

/* "PLAT" */
#define PLAIT_PLUGIN_MAGIC 0x504c4154u

#define PLAIT_STRINGIFY_(x) #x
#define PLAIT_STRINGIFY(x) PLAIT_STRINGIFY_(x)
#define PLAIT_CONCAT_(a, b) a##b
#define PLAIT_CONCAT(a, b) PLAIT_CONCAT_(a, b)
/* The entry symbol for this SDK's ABI major: plait_plugin_v1. */
#define PLAIT_PLUGIN_ENTRY PLAIT_CONCAT(plait_plugin_v, PLAIT_ABI_MAJOR)
#define PLAIT_PLUGIN_ENTRY_NAME "plait_plugin_v" PLAIT_STRINGIFY(PLAIT_ABI_MAJOR)

typedef enum plait_plugin_kind {
    PLAIT_KIND_COMM = 1,     /* ops: plait_comm_ops (comm.h) */
    PLAIT_KIND_PARALLEL = 2, /* ops: plait_parallel_ops (parallel.h) */
    PLAIT_KIND_OPTIM = 3,    /* ops: plait_optim_ops (optim.h) */
    PLAIT_KIND_DEVICE = 4    /* ops: plait_device_ops (device.h); ABI 1.3 */
} plait_plugin_kind;

/* How a plugin tells `plait doctor` what it found (ABI 1.6): one fact per
 * call ("driver 550.54.15, CUDA 12.4"); for a problem, `fix` says what to do
 * about it ("update the driver to 550 or later"), NULL for a plain fact.
 * Both strings are copied before the call returns. */
typedef void (*plait_report_fn)(void *ctx, const char *fact, const char *fix);

typedef struct plait_plugin_desc {
    uint32_t struct_size;          /* sizeof(plait_plugin_desc) as compiled by the plugin */
    uint32_t magic;                /* PLAIT_PLUGIN_MAGIC */
    uint16_t abi_major;            /* PLAIT_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;            /* lowest core ABI minor it needs (usually PLAIT_ABI_MINOR) */
    uint32_t kind;                 /* plait_plugin_kind */
    const char *name;              /* [a-z0-9_]+; the file is libplait-<kind>-<name>.so */
    const char *version;           /* the plugin's own version, e.g. "1.2.0" */
    const char *description;       /* one line for `plait plugins` */

    /* Keys of the plugin's own section "[<kind>.<name>]". `key_size` is
     * sizeof(plait_key_decl) as compiled by the plugin. (SDK 1.0 called
     * these fields params, n_params and param_size, which stay as aliases
     * of the same fields unless PLAIT_NO_SDK_1_0_NAMES is defined: "param"
     * is a model tensor.) */
#ifdef PLAIT_NO_SDK_1_0_NAMES
    const plait_key_decl *keys;
    uint32_t n_keys;
    uint32_t key_size;
#else
    union {
        const plait_key_decl *keys;
        const plait_key_decl *params;
    };
    union {
        uint32_t n_keys;
        uint32_t n_params;
    };
    union {
        uint32_t key_size;
        uint32_t param_size;
    };
#endif

    /* Is the plugin usable on this machine? Called by `plait plugins` and
     * before selection. Returns PLAIT_OK, or PLAIT_ERR_UNSUPPORTED with the
     * reason set through host->set_error ("no CUDA device found"). Must not
     * print, must not hang, must not leave threads or state behind.
     * NULL = always available. */
    plait_status (*probe)(const plait_host *host);

    /* The kind's function table: const plait_comm_ops*, ... Its first field
     * is its struct_size. */
    const void *ops;

    /* Names of other plugins of the same kind this one composes
     * (hybrid uses "dp", "tp", "pp"), NULL-terminated, or NULL. The core
     * declares their config sections too and loads them on demand. A
     * name that does not load is no error of a run until the plugin asks
     * for it (host->plugin_ops returns NULL: the plugin says what it
     * lacks); `plait plugin test` refuses it, naming the chain. */
    const char *const *uses;

    /* ABI 1.6, optional (NULL, or a descriptor from an older SDK without
     * it: check PLAIT_PLUGIN_HAS(desc, report)). What `plait doctor` shows
     * of the plugin on this machine beyond its probe: versions, what it
     * would use and why (the devices, the network interface), and each
     * problem with its fix, one `line` call each. `cfg` is the
     * configuration doctor was given when it holds the plugin's section,
     * else NULL (then the keys' defaults apply). Same rules as probe: must
     * not print, hang, or leave threads, state or a driver context in the
     * caller behind (read files, or ask a child process). The doctor calls
     * it in a child process of its own: one that crashes, exits or takes
     * longer than PLAIT_PLUGIN_SCAN_TIMEOUT (30 s) is shown as the plugin's
     * problem, after the lines it gave first. */
    void (*report)(const plait_host *host, const plait_config *cfg, plait_report_fn line, void *ctx);
} plait_plugin_desc;

/* True if descriptor `d` (from a plugin built against a possibly older SDK)
 * has member `field` set. */
#define PLAIT_PLUGIN_HAS(d, field)                                                     \
    ((d)->struct_size >= offsetof(plait_plugin_desc, field) + sizeof((d)->field) &&   \
     (d)->field != NULL)

/* Signature of the entry symbol. Called once per process after dlopen, with
 * the core's ABI version and host table (which outlive the plugin). Fills
 * *descs with an array of *count descriptors the plugin owns (static data;
 * at most 64 in one file: a larger count is refused, never read).
 * May refuse (PLAIT_ERR_ABI, message via host->set_error) if `host_abi` is too
 * old. Must not start threads or touch devices: do that in create/init. */
typedef plait_status (*plait_plugin_entry_v1_fn)(uint32_t host_abi, const plait_host *host,
                                                 const plait_plugin_desc *const **descs,
                                                 size_t *count);

/* The entry symbol's prototype, so a plugin only writes the definition:
 *     PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, ...) { ... } */
PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                            const plait_plugin_desc *const **descs, size_t *count);

/* The fields every descriptor starts with (ABI 1.11, header-only): a
 * plugin of `kind_` named `name_` (its file's name) needing ABI minor
 * `min_minor_`, the lowest minor whose features it uses (sdk/README.md,
 * "Versions and compatibility"; PLAIT_ABI_MINOR: this SDK's).
 *     static const plait_plugin_desc my_desc = {
 *         PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_COMM, "mynet", 3),
 *         .version = "1.0.0", .description = "...", .ops = &my_comm_ops };
 */
#define PLAIT_PLUGIN_DESC_HEAD(kind_, name_, min_minor_)                                                               \
    .struct_size = sizeof(plait_plugin_desc), .magic = PLAIT_PLUGIN_MAGIC, .abi_major = PLAIT_ABI_MAJOR,               \
    .abi_minor = (min_minor_), .kind = (kind_), .name = (name_)

/* The entry's check of the core (ABI 1.11, header-only): PLAIT_OK when
 * `host_abi` has this SDK's major and a minor of at least `min_minor`;
 * else PLAIT_ERR_ABI, with a message naming `who`, both versions and the
 * fix set through host->set_error when host is not NULL. */
static inline plait_status plait_plugin_check_abi(uint32_t host_abi, const plait_host *host, const char *who,
                                                  uint32_t min_minor) {
    if (PLAIT_ABI_VERSION_MAJOR(host_abi) == PLAIT_ABI_MAJOR && PLAIT_ABI_VERSION_MINOR(host_abi) >= min_minor)
        return PLAIT_OK;
    if (!host) return PLAIT_ERR_ABI;
    return host->set_error(PLAIT_ERR_ABI, "%s needs plait ABI %d.%u or later; this plait is %u.%u: upgrade plait", who,
                           PLAIT_ABI_MAJOR, min_minor, PLAIT_ABI_VERSION_MAJOR(host_abi),
                           PLAIT_ABI_VERSION_MINOR(host_abi));
}

static inline void plait_plugin_keep_host_(const plait_host **keep, const plait_host *host) {
    if (keep) *keep = host;
}

/* Defines the file's entry symbol (ABI 1.11, header-only), the one
 * definition a plugin file needs: checks the core with
 * plait_plugin_check_abi(who_, min_minor_), stores the host table in
 * *keep_ unless keep_ is NULL (a `const plait_host *` of the plugin's: the
 * table outlives the plugin, so any thread may read it later), and hands
 * the core the descriptors listed after it (static data, at most 64).
 *     PLAIT_PLUGIN_DEFINE_ENTRY("comm/mynet", 3, &g_host, &my_desc)
 */
#define PLAIT_PLUGIN_DEFINE_ENTRY(who_, min_minor_, keep_, ...)                                                        \
    static const plait_plugin_desc *const plait_plugin_descs_[] = {__VA_ARGS__};                                       \
    PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,                            \
                                                 const plait_plugin_desc *const **descs, size_t *count) {              \
        plait_status st_ = plait_plugin_check_abi(host_abi, host, (who_), (min_minor_));                               \
        if (st_ != PLAIT_OK) return st_;                                                                               \
        plait_plugin_keep_host_((keep_), host);                                                                        \
        *descs = plait_plugin_descs_;                                                                                  \
        *count = sizeof plait_plugin_descs_ / sizeof plait_plugin_descs_[0];                                           \
        return PLAIT_OK;                                                                                               \
    }

/* Name of a kind as used in file names and sections: "comm", "parallel", "optim", "device". */
static inline const char *plait_kind_name(uint32_t kind) {
    switch (kind) {
    case PLAIT_KIND_COMM: return "comm";
    case PLAIT_KIND_PARALLEL: return "parallel";
    case PLAIT_KIND_OPTIM: return "optim";
    case PLAIT_KIND_DEVICE: return "device";
    default: return "unknown";
    }
}

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_PLUGIN_H */
