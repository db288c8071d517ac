/*
 * One source, many deliberately broken plugins: each build defines one
 * VARIANT_* macro to get exactly one defect the loader must refuse.
 * VARIANT_GOOD is a minimal valid optim plugin (functions are inert: the
 * tests only load it and read its schema).
 */
#include <plait/plait.h>

#if defined(VARIANT_CRASH_CTOR) || defined(VARIANT_EXIT_CTOR) || defined(VARIANT_HANG_PROBE) || \
    defined(VARIANT_CRASH_PROBE) || defined(VARIANT_HANG_ENTRY)
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#endif
#ifdef VARIANT_CRASH_CTOR
/* dies of SIGSEGV while dlopen runs its constructors */
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
#endif
#ifdef VARIANT_EXIT_CTOR
__attribute__((constructor)) static void exit_on_load(void) { exit(3); }
#endif

#ifndef PLUGIN_NAME
#error "PLUGIN_NAME must be defined"
#endif

static plait_status fake_create(const plait_optim_init *init, void **state) {
    (void)init;
    *state = NULL;
    return PLAIT_OK;
}
static plait_status fake_materialize(void *s, const plait_value_source *src) {
    (void)s;
    (void)src;
    return PLAIT_OK;
}
static plait_status fake_step(void *s, const plait_optim_step_in *in, plait_optim_step_out *out) {
    (void)s;
    (void)in;
    (void)out;
    return PLAIT_OK;
}
static plait_status fake_export(void *s, int32_t i, const char *w, float *d) {
    (void)s;
    (void)i;
    (void)w;
    (void)d;
    return PLAIT_OK;
}
static void fake_memory(void *s, plait_optim_memory *m) {
    (void)s;
    (void)m;
}
static void fake_destroy(void *s) { (void)s; }

static const plait_optim_ops ops = {
    .struct_size = sizeof(plait_optim_ops),
    .create = fake_create,
    .materialize = fake_materialize,
    .step = fake_step,
    .export_tensor = fake_export,
    .memory = fake_memory,
    .destroy = fake_destroy,
};

static const plait_key_decl keys[] = {
    {sizeof(plait_key_decl), 0, "knob", PLAIT_KEY_INT, "3", 1, 10, NULL, "a test knob"},
};

#ifdef VARIANT_SHORT_DESC
#define DESC_SIZE 16u
#else
#define DESC_SIZE ((uint32_t)sizeof(plait_plugin_desc))
#endif
#ifdef VARIANT_NEWER_MINOR
#define DESC_MINOR 99
#else
#define DESC_MINOR PLAIT_ABI_MINOR
#endif
#ifdef VARIANT_BAD_MAGIC
#define DESC_MAGIC 0xdeadbeefu
#else
#define DESC_MAGIC PLAIT_PLUGIN_MAGIC
#endif
#ifdef VARIANT_DESC_MAJOR2
#define DESC_MAJOR 2
#else
#define DESC_MAJOR PLAIT_ABI_MAJOR
#endif
#ifndef DESC_NAME
#define DESC_NAME PLUGIN_NAME
#endif
#ifdef VARIANT_BAD_KIND
#define DESC_KIND 7u
#elif defined(VARIANT_COMM_KIND)
#define DESC_KIND PLAIT_KIND_COMM /* a lie: the table below is an optim table */
#else
#define DESC_KIND PLAIT_KIND_OPTIM
#endif
#ifndef DESC_VERSION
#define DESC_VERSION "0.0.1"
#endif

#if defined(VARIANT_HANG_PROBE) || defined(VARIANT_CRASH_PROBE)
static plait_status bad_probe(const plait_host *host) {
    (void)host;
#ifdef VARIANT_HANG_PROBE
    for (;;) pause();
#else
    raise(SIGSEGV);
#endif
    return PLAIT_OK;
}
#define DESC_PROBE bad_probe
#else
#define DESC_PROBE NULL
#endif

static const plait_plugin_desc desc = {
    .struct_size = DESC_SIZE,
    .magic = DESC_MAGIC,
    .abi_major = DESC_MAJOR,
    .abi_minor = DESC_MINOR,
    .kind = DESC_KIND,
    .name = DESC_NAME,
    .version = DESC_VERSION,
    .description = "loader test plugin",
    .keys = keys,
    .n_keys = 1,
    .key_size = sizeof(plait_key_decl),
    .ops = &ops,
    .probe = DESC_PROBE,
};

#ifdef SECOND_NAME
static const plait_plugin_desc desc2 = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_OPTIM,
    .name = SECOND_NAME,
    .version = "0.0.1",
    .description = "second plugin in one file",
    .ops = &ops,
};
static const plait_plugin_desc *const list[] = {&desc, &desc2};
#else
static const plait_plugin_desc *const list[] = {&desc};
#endif

#if defined(VARIANT_NO_ENTRY)
/* Exports nothing plait recognises. */
const plait_plugin_desc *const *unused_list(void);
const plait_plugin_desc *const *unused_list(void) { return list; }
PLAIT_EXPORT int not_a_plait_plugin(void);
PLAIT_EXPORT int not_a_plait_plugin(void) { return 42; }
#else
#ifdef VARIANT_ABI2
#define ENTRY plait_plugin_v2 /* what a plugin built by a future SDK exports */
#else
#define ENTRY PLAIT_PLUGIN_ENTRY
#endif
PLAIT_EXPORT plait_status ENTRY(uint32_t host_abi, const plait_host *host,
                                const plait_plugin_desc *const **descs, size_t *count);
PLAIT_EXPORT plait_status ENTRY(uint32_t host_abi, const plait_host *host,
                                const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
#ifdef VARIANT_HANG_ENTRY
    for (;;) pause(); /* an entry that never hands over its descriptors */
#endif
#ifdef VARIANT_ENTRY_FAILS
    (void)descs;
    (void)count;
    (void)list;
    return host->set_error(PLAIT_ERR_ABI, "this test plugin always refuses");
#else
    (void)host;
    *descs = list;
#ifdef VARIANT_HUGE_COUNT
    *count = 1000000; /* far past its one-element array */
#else
    *count = sizeof list / sizeof list[0];
#endif
    return PLAIT_OK;
#endif
}
#endif
