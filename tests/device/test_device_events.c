/*
 * Streams and events of the device API (plait/device.h, ABI 1.4), on the
 * device named by argv[1]:
 *   cpu    everything completes when called: every read is fresh.
 *   sim    the test device runs its compute stream late (tests/device/
 *          sim_device.c): a read on the communication stream that did not
 *          wait for the event sees the data as it was — so these tests
 *          also prove the sim can catch a missing wait.
 *   skip   sim with PLAIT_SIM_DEBUG_SKIP_WAITS=1: the waits order nothing
 *          and the reads that needed them come out stale (what the
 *          layouts test relies on to show a dropped wait fails).
 *   sim13  sim built as an ABI 1.3 plugin: it loads, has no events, and its
 *          copy() from another thread still follows the compute stream.
 * Plus the loader's rule that a device's events come all or none.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host/host_table.h"
#include "plugin/loader.h"
#include "plugin/plugin_check.h"
#include "runtime/error.h"

#define N 1000

static const char *g_mode;
static const plait_device_ops *g_dev;
static const plait_kernels *g_k;
static int g_async;    /* the compute stream runs late (sim) */
static int g_skipping; /* waits do nothing (skip) */

/* x[i] = i on the device, and every queued operation done. */
static float *fresh_buffer(void) {
    float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)i;
    float *x = g_dev->alloc(N * sizeof(float), "test");
    assert_non_null(x);
    assert_int_equal(g_dev->copy(x, host, sizeof host, PLAIT_COPY_TO_DEVICE), PLAIT_OK);
    assert_int_equal(g_dev->synchronize(), PLAIT_OK);
    return x;
}

/* The buffer read on the communication stream: its first element and
 * whether all of it is a * i. */
static int comm_read_is(const float *x, float a) {
    float host[N];
    assert_int_equal(g_dev->copy_on(PLAIT_STREAM_COMM, host, x, sizeof host, PLAIT_COPY_TO_HOST), PLAIT_OK);
    for (int i = 0; i < N; i++)
        if (host[i] != a * (float)i) return 0;
    return 1;
}

static void comm_read_waits_for_event(void **state) {
    (void)state;
    float *x = fresh_buffer();
    plait_device_event *ev = g_dev->event_create();
    assert_non_null(ev);
    g_k->scale(x, N, 2.0f);
    assert_int_equal(g_dev->event_record(ev, PLAIT_STREAM_COMPUTE), PLAIT_OK);
    /* no wait: the communication stream does not follow the compute stream */
    assert_int_equal(comm_read_is(x, 1.0f), g_async);
    assert_int_equal(comm_read_is(x, 2.0f), !g_async);
    assert_int_equal(g_dev->event_synchronize(ev), PLAIT_OK);
    assert_int_equal(comm_read_is(x, 2.0f), !g_skipping);
    g_dev->event_destroy(ev);
    assert_int_equal(g_dev->synchronize(), PLAIT_OK);
    assert_true(comm_read_is(x, 2.0f));
    g_dev->free(x);
}

static void stream_wait_orders_comm(void **state) {
    (void)state;
    float *x = fresh_buffer();
    plait_device_event *ev = g_dev->event_create();
    assert_non_null(ev);
    g_k->scale(x, N, 3.0f);
    assert_int_equal(g_dev->event_record(ev, PLAIT_STREAM_COMPUTE), PLAIT_OK);
    g_k->scale(x, N, 5.0f); /* after the mark: not waited for */
    assert_int_equal(g_dev->event_wait(ev, PLAIT_STREAM_COMM), PLAIT_OK);
    /* cpu: all done; sim: exactly up to the mark; skip: nothing */
    float seen = !g_async ? 15.0f : g_skipping ? 1.0f : 3.0f;
    assert_true(comm_read_is(x, seen));
    g_dev->event_destroy(ev);
    assert_int_equal(g_dev->synchronize(), PLAIT_OK);
    assert_true(comm_read_is(x, 15.0f));
    g_dev->free(x);
}

static void record_again_moves_the_mark(void **state) {
    (void)state;
    float *x = fresh_buffer();
    plait_device_event *ev = g_dev->event_create();
    assert_non_null(ev);
    /* never recorded: complete, and waiting runs nothing */
    assert_int_equal(g_dev->event_synchronize(ev), PLAIT_OK);
    g_k->scale(x, N, 2.0f);
    assert_int_equal(g_dev->event_synchronize(ev), PLAIT_OK);
    assert_int_equal(comm_read_is(x, 1.0f), g_async);
    assert_int_equal(g_dev->event_record(ev, PLAIT_STREAM_COMPUTE), PLAIT_OK);
    g_k->scale(x, N, 2.0f);
    assert_int_equal(g_dev->event_record(ev, PLAIT_STREAM_COMPUTE), PLAIT_OK);
    assert_int_equal(g_dev->event_synchronize(ev), PLAIT_OK);
    assert_int_equal(comm_read_is(x, 4.0f), !g_skipping);
    g_dev->event_destroy(ev);
    assert_int_equal(g_dev->synchronize(), PLAIT_OK);
    g_dev->free(x);
}

/* The other direction: what the communication stream wrote, the compute
 * stream reads after an event recorded there. */
static void compute_reads_comm_writes(void **state) {
    (void)state;
    float *x = fresh_buffer();
    float host[N];
    for (int i = 0; i < N; i++) host[i] = 7.0f * (float)i;
    plait_device_event *ev = g_dev->event_create();
    assert_non_null(ev);
    assert_int_equal(g_dev->copy_on(PLAIT_STREAM_COMM, x, host, sizeof host, PLAIT_COPY_TO_DEVICE), PLAIT_OK);
    memset(host, 0, sizeof host); /* the copy took the bytes when it returned */
    assert_int_equal(g_dev->event_record(ev, PLAIT_STREAM_COMM), PLAIT_OK);
    assert_int_equal(g_dev->event_wait(ev, PLAIT_STREAM_COMPUTE), PLAIT_OK);
    g_k->scale(x, N, 2.0f);
    assert_int_equal(g_dev->copy(host, x, sizeof host, PLAIT_COPY_TO_HOST), PLAIT_OK);
    for (int i = 0; i < N; i++) assert_true(host[i] == 14.0f * (float)i);
    g_dev->event_destroy(ev);
    g_dev->free(x);
}

/* ---- sim13: a 1.3 device ------------------------------------------------- */

typedef struct reader {
    const float *x;
    float host[N];
    plait_status st;
} reader;

static void *read_on_other_thread(void *arg) {
    reader *r = arg;
    r->st = g_dev->copy(r->host, r->x, sizeof r->host, PLAIT_COPY_TO_HOST);
    return NULL;
}

static void old_device_copy_follows_compute(void **state) {
    (void)state;
    assert_false(PLAIT_DEVICE_HAS_EVENTS(g_dev));
    float *x = fresh_buffer();
    g_k->scale(x, N, 2.0f);
    reader r = {.x = x};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_on_other_thread, &r), 0);
    pthread_join(t, NULL);
    assert_int_equal(r.st, PLAIT_OK);
    for (int i = 0; i < N; i++) assert_true(r.host[i] == 2.0f * (float)i);
    g_dev->free(x);
}

/* ---- the loader: events all or none ------------------------------------ */

static plait_status nop_count(const plait_host *h, int32_t *n) {
    (void)h;
    *n = 1;
    return PLAIT_OK;
}

static void loader_wants_all_events_or_none(void **state) {
    (void)state;
    plait_device_ops ops = *g_dev;
    plait_plugin_desc d = {.struct_size = sizeof d, .magic = PLAIT_PLUGIN_MAGIC, .abi_major = PLAIT_ABI_MAJOR,
                           .abi_minor = 4, .kind = PLAIT_KIND_DEVICE, .name = "fake", .version = "1",
                           .ops = &ops};
    ops.count = nop_count;
    ops.struct_size = sizeof ops;
    ops.event_create = NULL; /* some but not all */
    if (ops.event_wait) {
        assert_int_equal(plait_check_descriptor("fake.so", &d), PLAIT_ERR_ABI);
        assert_non_null(strstr(plait_last_error(), "only some of its event functions"));
    }
    ops.event_destroy = NULL, ops.event_record = NULL, ops.event_wait = NULL, ops.event_synchronize = NULL;
    ops.copy_on = NULL, ops.event_native = NULL;
    assert_int_equal(plait_check_descriptor("fake.so", &d), PLAIT_ERR_ABI); /* 1.4 without them */
    assert_non_null(strstr(plait_last_error(), "no event functions"));
    d.abi_minor = 3; /* a 1.3 plugin has none: fine */
    assert_int_equal(plait_check_descriptor("fake.so", &d), PLAIT_OK);
    ops.struct_size = offsetof(plait_device_ops, event_create);
    assert_int_equal(plait_check_descriptor("fake.so", &d), PLAIT_OK);
    d.abi_minor = 4; /* a table that ends before them cannot claim 1.4 */
    assert_int_equal(plait_check_descriptor("fake.so", &d), PLAIT_ERR_ABI);
    assert_non_null(strstr(plait_last_error(), "ends before the event functions"));
}

int main(int argc, char **argv) {
    g_mode = argc > 1 ? argv[1] : "cpu";
    const char *plugin = g_mode;
    if (strcmp(g_mode, "skip") == 0) {
        plugin = "sim";
        setenv("PLAIT_SIM_DEBUG_SKIP_WAITS", "1", 1);
        g_skipping = 1;
    }
    g_async = strcmp(plugin, "sim") == 0 || strcmp(plugin, "sim13") == 0;
    plait_host_install();
    const plait_plugin_desc *desc = plait_plugin_load(PLAIT_KIND_DEVICE, plugin);
    if (!desc) {
        fprintf(stderr, "FATAL: %s\n", plait_last_error());
        return 1;
    }
    g_dev = desc->ops;
    plait_device_open_args args = {sizeof args, NULL, 0, 1, PLAIT_PRECISION_FP32, 1};
    plait_device_info info = {.struct_size = sizeof info};
    if (g_dev->open(plait_host_table(), &args, &info) != PLAIT_OK) {
        fprintf(stderr, "FATAL: open %s: %s\n", plugin, plait_last_error());
        return 1;
    }
    g_k = g_dev->kernels();
    int failed;
    if (strcmp(plugin, "sim13") == 0) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(old_device_copy_follows_compute)};
        failed = cmocka_run_group_tests_name("sim13", tests, NULL, NULL);
    } else {
        assert_true(PLAIT_DEVICE_HAS_EVENTS(g_dev));
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(comm_read_waits_for_event),    cmocka_unit_test(stream_wait_orders_comm),
            cmocka_unit_test(record_again_moves_the_mark),  cmocka_unit_test(compute_reads_comm_writes),
            cmocka_unit_test(loader_wants_all_events_or_none),
        };
        failed = cmocka_run_group_tests_name(g_mode, tests, NULL, NULL);
    }
    g_dev->close();
    return failed;
}
