/*
 * How ZeRO cuts a layer into units (plugins/optim/common/zero.h,
 * "Partitioning"), read from the plugin's state while a layer runs: with
 * the default bucket_size (0), ZeRO-1 and 2 grow a unit to 1M floats a rank
 * of the DP group where that is more than 25 MiB, so that a wide group's
 * collectives do not pay a ring's latency on many small pieces; a
 * bucket_size set is taken as it is, ZeRO-3 keeps 25 MiB units, and a
 * narrow group keeps them too.
 *
 * The model: one layer of four 1024 x 2048 matrices (2M floats, 8 MiB
 * each). 25 MiB (6.55M floats) holds three; 8 ranks' floor (8M floats)
 * holds all four.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "plugin/loader.h"
#include "zero.h"
#include "zero/zero_harness.h"
#include "host/host_table.h"

static zh_model wide;

typedef struct probe {
    int32_t units[ZH_MAX_RANKS];  /* units of layer 0 */
    size_t largest[ZH_MAX_RANKS]; /* its largest unit's elements */
} probe;

static int on_hook(void *ctx, int rank, int backward, int32_t layer, int32_t mb, void *opt_state) {
    (void)backward, (void)mb;
    probe *p = ctx;
    const zero *z = opt_state;
    if (layer != 0) return 0;
    p->units[rank] = 0;
    p->largest[rank] = 0;
    for (int32_t u = 0; u < z->n_units; u++)
        if (z->units[u].layer == 0) {
            p->units[rank]++;
            if (z->units[u].numel > p->largest[rank]) p->largest[rank] = z->units[u].numel;
        }
    return 0;
}

/* Run `plugin` on n ranks with `ini`; the units of layer 0 every rank saw. */
static void units_of(const char *plugin, int n, const char *ini, int32_t want_units, size_t want_largest) {
    probe p;
    memset(&p, 0, sizeof p);
    zh_run r = {.plugin = plugin,
                .model = &wide,
                .n = n,
                .m = 1,
                .steps = 1,
                .grad_clip = 1.0,
                .extra_ini = ini,
                .on_hook = on_hook,
                .hook_ctx = &p};
    if (zh_run_exec(&r) != 0) fail_msg("%s on %d ranks: %s", plugin, n, zh_run_error(&r));
    zh_run_free(&r);
    for (int k = 0; k < n; k++)
        if (p.units[k] != want_units || p.largest[k] != want_largest)
            fail_msg("%s on %d ranks%s%s: rank %d cut the layer into %d unit(s), the largest %zu floats; expected %d, "
                     "the largest %zu",
                     plugin, n, ini ? " with " : "", ini ? ini : "", k, p.units[k], p.largest[k], want_units,
                     want_largest);
}

#define M2 ((size_t)2 << 20) /* a matrix's floats */

static void test_default_grows_with_dp(void **state) {
    (void)state;
    units_of("zero1", 8, NULL, 1, 4 * M2);
    units_of("zero2", 8, NULL, 1, 4 * M2);
}

static void test_narrow_group_keeps_25mib(void **state) {
    (void)state;
    units_of("zero1", 2, NULL, 2, 3 * M2);
}

static void test_set_bucket_is_taken(void **state) {
    (void)state;
    units_of("zero1", 8, "[optim.zero1]\nbucket_size = 25M\n", 2, 3 * M2);
    units_of("zero1", 8, "[optim.zero1]\nbucket_size = 8M\n", 4, M2);
}

static void test_zero3_keeps_25mib(void **state) {
    (void)state;
    units_of("zero3", 8, NULL, 2, 3 * M2);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_grows_with_dp),
        cmocka_unit_test(test_narrow_group_keeps_25mib),
        cmocka_unit_test(test_set_bucket_is_taken),
        cmocka_unit_test(test_zero3_keeps_25mib),
    };
    zh_setup_host();
    memset(&wide, 0, sizeof wide);
    wide.n_layers = 1;
    wide.n_params = 4;
    static const char *names[4] = {"w0", "w1", "w2", "w3"};
    for (int i = 0; i < 4; i++)
        wide.p[i] = (zh_pspec){.name = names[i], .layer = 0, .rows = 1024, .cols = 2048, .tied_to = -1, .amp = 1.0f};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
