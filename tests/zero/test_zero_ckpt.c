/*
 * Checkpoint state across stages and DP sizes: what one layout exports with
 * export_tensor (full tensors: parameters and both moments, and the
 * optimizer's step count) is what another layout materializes from, bit for
 * bit — ZeRO-3 at dp 4 -> ZeRO-1 at dp 2 -> plain adam on one process, and
 * every other pair — and training continued from it in deterministic mode is
 * bit-identical whichever layout continues.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "plugin/loader.h"
#include "zero/zero_harness.h"
#include "host/host_table.h"

static zh_model uneven;

static int setup(void **state) {
    (void)state;
    zh_setup_host();
    zh_model_gpt(&uneven, 2, 24, 37, 13);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    plait_plugins_unload_all();
    return 0;
}

static void run_or_fail(zh_run *r) {
    if (zh_run_exec(r) != 0) fail_msg("%s n=%d m=%d: %s", r->plugin, r->n, r->m, zh_run_error(r));
}

typedef struct layout {
    const char *plugin;
    int n, m;
} layout;

static const layout layouts[] = {{"zero3", 4, 1}, {"zero1", 2, 2}, {"adam", 1, 4}, {"zero2", 4, 1},
                                 {"zero3", 2, 2}, {"zero2", 2, 2}, {"zero1", 4, 1}};
#define N_LAYOUTS (sizeof layouts / sizeof layouts[0])

static void test_round_trip_and_resume(void **state) {
    (void)state;
    /* A: three steps of ZeRO-3 at dp 4. */
    zh_run a = {.plugin = "zero3", .model = &uneven, .n = 4, .m = 1, .det = 1, .steps = 3, .grad_clip = 1.0};
    run_or_fail(&a);
    assert_int_equal(a.final.optim_step, 3);
    char why[256];
    zh_snapshot cont[N_LAYOUTS];
    for (size_t k = 0; k < N_LAYOUTS; k++) {
        /* Load A and export it again at once: the same tensors. */
        zh_run load = {.plugin = layouts[k].plugin, .model = &uneven, .n = layouts[k].n, .m = layouts[k].m, .det = 1,
                       .steps = 0, .grad_clip = 1.0, .from = &a.final};
        run_or_fail(&load);
        if (!zh_snapshot_equal(&uneven, &load.final, &a.final, 1, why, sizeof why))
            fail_msg("%s at dp %d does not give back ZeRO-3 dp 4's state: %s", layouts[k].plugin, layouts[k].n, why);
        /* Chain: what this layout exports, the next one loads. */
        zh_run_free(&load);
        /* Continue two steps from A. */
        zh_run c = {.plugin = layouts[k].plugin, .model = &uneven, .n = layouts[k].n, .m = layouts[k].m, .det = 1,
                    .steps = 2, .first_step = 3, .grad_clip = 1.0, .from = &a.final};
        run_or_fail(&c);
        assert_int_equal(c.final.optim_step, 5);
        zh_snapshot_alloc(&cont[k], &uneven);
        for (int w = 0; w < ZH_WHICH; w++)
            for (int32_t i = 0; i < uneven.n_params; i++)
                if (uneven.p[i].tied_to < 0) memcpy(cont[k].t[w][i], c.final.t[w][i], zh_numel(&uneven.p[i]) * sizeof(float));
        cont[k].optim_step = c.final.optim_step;
        cont[k].have_state = 1;
        zh_run_free(&c);
        if (k > 0 && !zh_snapshot_equal(&uneven, &cont[k], &cont[0], 1, why, sizeof why))
            fail_msg("resumed on %s dp %d differs from resumed on %s dp %d: %s", layouts[k].plugin, layouts[k].n,
                     layouts[0].plugin, layouts[0].n, why);
    }
    /* ... and equal to never stopping. */
    zh_run full = {.plugin = "zero3", .model = &uneven, .n = 4, .m = 1, .det = 1, .steps = 5, .grad_clip = 1.0};
    run_or_fail(&full);
    if (!zh_snapshot_equal(&uneven, &full.final, &cont[0], 1, why, sizeof why))
        fail_msg("resuming is not bit-exact: %s", why);
    zh_run_free(&full);
    /* A chain ZeRO-3 dp 4 -> ZeRO-1 dp 2 -> adam: each loads the previous one's export. */
    zh_snapshot prev = a.final;
    zh_run chain[3];
    for (int k = 0; k < 3; k++) {
        chain[k] = (zh_run){.plugin = layouts[k].plugin, .model = &uneven, .n = layouts[k].n, .m = layouts[k].m,
                            .det = 1, .steps = 0, .grad_clip = 1.0, .from = &prev};
        run_or_fail(&chain[k]);
        assert_true(zh_snapshot_equal(&uneven, &chain[k].final, &a.final, 1, why, sizeof why));
        prev = chain[k].final;
    }
    for (int k = 0; k < 3; k++) zh_run_free(&chain[k]);
    for (size_t k = 0; k < N_LAYOUTS; k++) zh_snapshot_free(&cont[k]);
    zh_run_free(&a);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_resume),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
