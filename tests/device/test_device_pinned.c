/*
 * Page-locked host memory goes to the open device: host->alloc of
 * PLAIT_MEM_HOST_PINNED reaches the device's alloc_pinned (the sim test
 * device counts its calls: sim_pinned_counts), host->free reaches its
 * free_pinned, the memory report counts it under its tag, and it is host
 * memory (writable here, not the device's own: plait_device_owns says no).
 * A device without alloc_pinned (cpu), no device at all, or an alignment
 * beyond a page get plain host memory, counted the same way. The comm
 * staging pool (a collective on device memory over the in-process
 * transport) takes its buffers from alloc_pinned too, and gives them back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "device/device.h"
#include "host/host_table.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"

typedef void (*counts_fn)(uint64_t *allocs, uint64_t *live);

static char *const g_noenv[] = {NULL};

static plait_config *config_for(const char *device) {
    plait_config *cfg = plait_config_new();
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    char text[128];
    snprintf(text, sizeof text, "[device]\nplugin = %s\n", device);
    assert_int_equal(plait_config_load_string(cfg, "test.ini", text), PLAIT_OK);
    if (plait_config_finalize(cfg, g_noenv) != PLAIT_OK) fail_msg("%s", plait_last_error());
    return cfg;
}

static void open_device(const char *name, plait_config **cfg) {
    *cfg = config_for(name);
    if (plait_device_open(plait_plugin_host(), *cfg, 0, 1) != PLAIT_OK) fail_msg("%s", plait_last_error());
    plait_host_attach_device();
}

static void close_device(plait_config *cfg) {
    plait_device_close();
    plait_host_attach_device();
    plait_config_free(cfg);
}

/* Open the sim device; its counter, from the copy the loader opened. */
static counts_fn open_sim(plait_config **cfg) {
    open_device("sim", cfg);
    void *h = dlopen(plait_plugin_path(plait_device_desc_open()), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    counts_fn f = (counts_fn)dlsym(h, "sim_pinned_counts");
    assert_non_null(f);
    dlclose(h); /* the loader's reference keeps it loaded */
    return f;
}

/* host->alloc(PINNED) gives host memory counted under its tag, freed by
 * host->free; returns the pointer's device ownership (must be 0). */
static void plain_or_pinned_roundtrip(const char *tag, size_t bytes, size_t align) {
    const plait_host *h = plait_host_table();
    uint64_t before = plait_mem_usage_of(tag);
    unsigned char *p = h->alloc(bytes, PLAIT_MEM_HOST_PINNED, align, tag);
    if (!p) fail_msg("%s", plait_last_error());
    assert_int_equal((uintptr_t)p % align, 0);
    memset(p, 0x5a, bytes); /* host memory: the host may touch it */
    assert_int_equal(p[bytes - 1], 0x5a);
    assert_int_equal(plait_mem_usage_of(tag), before + bytes);
    assert_int_equal(plait_device_owns(p), 0);
    if (align > 4096) assert_int_equal(plait_device_is_pinned(p), 0); /* beyond a page: plain */
    h->free(p);
    assert_int_equal(plait_mem_usage_of(tag), before);
}

static void test_routed_to_the_device(void **state) {
    (void)state;
    plait_config *cfg;
    counts_fn counts = open_sim(&cfg);
    uint64_t a0, l0, a, l;
    counts(&a0, &l0);
    const plait_host *h = plait_host_table();
    void *p = h->alloc(10000, PLAIT_MEM_HOST_PINNED, 64, "pinned test");
    if (!p) fail_msg("%s", plait_last_error());
    counts(&a, &l);
    assert_int_equal(a, a0 + 1); /* reached alloc_pinned */
    assert_int_equal(l, l0 + 1);
    assert_int_equal(plait_mem_usage_of("pinned test"), 10000);
    assert_int_equal(plait_device_owns(p), 0);
    assert_int_equal(plait_device_is_pinned(p), 1); /* what a ckpt_async snapshot reports */
    h->free(p);
    assert_int_equal(plait_device_is_pinned(p), 0);
    counts(&a, &l);
    assert_int_equal(l, l0); /* reached free_pinned */
    assert_int_equal(plait_mem_usage_of("pinned test"), 0);
    plain_or_pinned_roundtrip("pinned test", 4096, 4096);
    counts(&a, &l);
    assert_int_equal(a, a0 + 2);
    /* beyond a page: plain host memory, not the device's */
    plain_or_pinned_roundtrip("pinned test", 100, 8192);
    counts(&a, &l);
    assert_int_equal(a, a0 + 2);
    assert_int_equal(l, l0);
    /* the device's own memory is still told apart from it */
    void *d = h->alloc(256, PLAIT_MEM_CUDA, 256, "device test");
    assert_non_null(d);
    assert_int_equal(plait_device_owns(d), 1);
    assert_int_equal(plait_device_is_pinned(d), 0);
    h->free(d);
    close_device(cfg);
}

static void test_without_pinned_memory(void **state) {
    (void)state;
    plain_or_pinned_roundtrip("pinned, no device", 5000, 4096); /* no device open */
    plait_config *cfg;
    open_device("cpu", &cfg); /* no alloc_pinned */
    plain_or_pinned_roundtrip("pinned, cpu device", 5000, 64);
    close_device(cfg);
}

typedef struct ranks {
    plait_threads_world *w;
    float *dev[2];
    plait_status st[2];
    char msg[2][512];
} ranks;

static void rank_fn(int rank, void *arg) {
    ranks *r = arg;
    plait_comm_settings s;
    plait_comm_settings_default(&s);
    plait_comm *comm = NULL;
    r->st[rank] = plait_threads_comm_world(r->w, rank, &s, &comm);
    plait_coll_opts o = {.struct_size = sizeof o, .mem_kind = PLAIT_MEM_CUDA, .label = "pinned staging"};
    if (r->st[rank] == PLAIT_OK)
        r->st[rank] = plait_comm_allreduce(comm, r->dev[rank], r->dev[rank], 1000, PLAIT_F32, PLAIT_SUM, &o, NULL);
    snprintf(r->msg[rank], sizeof r->msg[rank], "%s", plait_last_error());
    plait_comm_free(comm);
}

static void test_staging_pool_is_pinned(void **state) {
    (void)state;
    plait_config *cfg;
    counts_fn counts = open_sim(&cfg);
    uint64_t a0, l0, a, l;
    counts(&a0, &l0);
    ranks r = {.w = plait_threads_world_new(2, 20.0)};
    float host[1000];
    for (int i = 0; i < 1000; i++) host[i] = (float)i;
    for (int k = 0; k < 2; k++) {
        r.dev[k] = plait_device_alloc(sizeof host, "pinned staging test");
        assert_int_equal(plait_device_copy(r.dev[k], host, sizeof host, PLAIT_COPY_TO_DEVICE), PLAIT_OK);
    }
    assert_int_equal(plait_threads_run(2, rank_fn, &r), PLAIT_OK);
    for (int k = 0; k < 2; k++)
        if (r.st[k] != PLAIT_OK) fail_msg("rank %d: %s", k, r.msg[k]);
    float back[1000];
    assert_int_equal(plait_device_copy(back, r.dev[1], sizeof back, PLAIT_COPY_TO_HOST), PLAIT_OK);
    for (int i = 0; i < 1000; i++) assert_true(back[i] == 2.0f * (float)i);
    counts(&a, &l);
    assert_true(a > a0);  /* the pool's buffers came from alloc_pinned */
    assert_int_equal(l, l0); /* and went back with the communicators */
    assert_int_equal(plait_mem_usage_of("comm staging"), 0);
    for (int k = 0; k < 2; k++) plait_device_free(r.dev[k]);
    plait_threads_world_free(r.w);
    close_device(cfg);
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routed_to_the_device),
        cmocka_unit_test(test_without_pinned_memory),
        cmocka_unit_test(test_staging_pool_is_pinned),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_host_uninstall();
    return rc;
}
