/*
 * The hybrid (3-D) plugin finishes its axes' gradients in the order the
 * core defines (host->grad_finish_order, layout/grad_order.h), not in one
 * of its own: with the core's order it calls dp, pp, tp; with another
 * order handed through a test host it follows that one; on a host without
 * the entry (an ABI 1.0 core) create() is refused with both versions named.
 * The axes' plugins are recording fakes handed out by the test host's
 * plugin_ops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <plait/parallel.h>
#include <plait/plugin.h>

#include "host/host_table.h"
#include "layout/grad_order.h"
#include "plugin/loader.h"
#include "runtime/error.h"

static char g_calls[32]; /* the axes' finish_grads, in call order: "d", "t", "p" */
static char g_axis_tag[3] = {'d', 't', 'p'};

static plait_status fake_finish(void *state) {
    size_t l = strlen(g_calls);
    if (l + 1 < sizeof g_calls) g_calls[l] = *(const char *)state;
    return PLAIT_OK;
}
static void fake_destroy(void *state) { (void)state; }

#define FAKE_OPS(var, tag)                                                                                 \
    static plait_status var##_create(const plait_parallel_init *init, void **state) {                       \
        (void)init;                                                                                        \
        *state = &g_axis_tag[tag];                                                                         \
        return PLAIT_OK;                                                                                   \
    }                                                                                                      \
    static const plait_parallel_ops var = {.struct_size = sizeof(plait_parallel_ops),                      \
                                           .create = var##_create,                                         \
                                           .finish_grads = fake_finish,                                    \
                                           .destroy = fake_destroy}
FAKE_OPS(fake_dp, 0);
FAKE_OPS(fake_tp, 1);
FAKE_OPS(fake_pp, 2);

static const void *fake_plugin_ops(uint32_t kind, const char *name) {
    if (kind != PLAIT_KIND_PARALLEL) return NULL;
    if (!strcmp(name, "dp")) return &fake_dp;
    if (!strcmp(name, "tp")) return &fake_tp;
    if (!strcmp(name, "pp")) return &fake_pp;
    return NULL;
}

static const plait_grad_finisher g_reversed[] = {PLAIT_GRAD_FINISH_TIED, PLAIT_GRAD_FINISH_TP, PLAIT_GRAD_FINISH_OPTIM,
                                                 PLAIT_GRAD_FINISH_PP, PLAIT_GRAD_FINISH_DP};
static int32_t reversed_order(const plait_grad_finisher **order) {
    *order = g_reversed;
    return 5;
}

static const plait_parallel_ops *hybrid(void) {
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_PARALLEL, "hybrid");
    if (!d) fail_msg("cannot load the hybrid plugin: %s", plait_last_error());
    return d->ops;
}

/* Create the hybrid on a 2x2x2 mesh with `host`, finish once, return the call order. */
static plait_status finish_with(const plait_host *host, const char **calls) {
    plait_mesh mesh = {.struct_size = sizeof mesh, .dp = 2, .tp = 2, .pp = 2, .world_size = 8};
    plait_parallel_init init = {.struct_size = sizeof init, .host = host, .mesh = &mesh};
    const plait_parallel_ops *ops = hybrid();
    void *state = NULL;
    memset(g_calls, 0, sizeof g_calls);
    plait_status st = ops->create(&init, &state);
    if (st != PLAIT_OK) return st;
    assert_int_equal(ops->finish_grads(state), PLAIT_OK);
    ops->destroy(state);
    *calls = g_calls;
    return PLAIT_OK;
}

static void test_core_order(void **unused) {
    (void)unused;
    plait_host h = *plait_host_table();
    h.plugin_ops = fake_plugin_ops;
    const char *calls = NULL;
    assert_int_equal(finish_with(&h, &calls), PLAIT_OK);
    /* the core's definition, axis by axis */
    const plait_grad_finisher *order;
    int32_t n = plait_grad_finish_order(&order);
    char want[8] = "";
    for (int32_t i = 0; i < n; i++) {
        size_t l = strlen(want);
        if (order[i] == PLAIT_GRAD_FINISH_DP) want[l] = 'd';
        if (order[i] == PLAIT_GRAD_FINISH_TP) want[l] = 't';
        if (order[i] == PLAIT_GRAD_FINISH_PP) want[l] = 'p';
    }
    assert_string_equal(want, "dpt");
    assert_string_equal(calls, want);
}

static void test_host_order_followed(void **unused) {
    (void)unused;
    plait_host h = *plait_host_table();
    h.plugin_ops = fake_plugin_ops;
    h.grad_finish_order = reversed_order;
    const char *calls = NULL;
    assert_int_equal(finish_with(&h, &calls), PLAIT_OK);
    assert_string_equal(calls, "tpd");
}

static void test_old_core_refused(void **unused) {
    (void)unused;
    plait_host h = *plait_host_table();
    h.plugin_ops = fake_plugin_ops;
    h.struct_size = (uint32_t)offsetof(plait_host, sum_tree); /* an ABI 1.0 table */
    h.abi_version = 1u << 16;
    const char *calls = NULL;
    assert_int_equal(finish_with(&h, &calls), PLAIT_ERR_UNSUPPORTED);
    assert_non_null(strstr(plait_last_error(), "grad_finish_order"));
    assert_non_null(strstr(plait_last_error(), "1.0"));
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_order),
        cmocka_unit_test(test_host_order_followed),
        cmocka_unit_test(test_old_core_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_host_uninstall();
    return rc;
}
