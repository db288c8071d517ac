/*
 * ZeRO-3 prefetch has its effect (zero.h: the gathers of the next
 * prefetch_layers hooks' layers start early) and no other:
 *   - while the forward of layer l runs with prefetch_layers = k, every unit
 *     of layers l+1 .. l+k has its all-gather issued (a buffer, gathered or
 *     in flight), and no unit of layer l+k+1 that layers l .. l+k do not
 *     need has one: k = 0 gathers layer l+1 only at its own hook;
 *   - with k = 0 every hook gathers each unit it needs once (the count of
 *     gathers is exactly one per unit per hook); with k > 0 there are fewer,
 *     units a predicted hook needs being kept rather than gathered again;
 *   - every depth is bit-identical to k = 0: the values every hook sees,
 *     the parameters after every step, gradient norms and optimizer state.
 * White box: the harness's hook reads the plugin's state (zero.h).
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

static zh_model uneven; /* C = 24, V = 37, T = 13: 5 layers, uneven shards */

#define RANKS 2
#define MICRO 2
#define STEPS 3

typedef struct probe {
    int k;
    uint64_t checked[ZH_MAX_RANKS];  /* forward hooks followed by k layers checked */
    uint64_t gathers[ZH_MAX_RANKS];  /* gathers_issued at the rank's last hook */
    uint64_t per_pass[ZH_MAX_RANKS]; /* Σ over layers of the units each layer's hook needs */
    char why[ZH_MAX_RANKS][256];
} probe;

static int layer_needs(const zero *z, int32_t layer, int32_t ui) {
    for (int32_t k = z->gather_first[layer]; k < z->gather_first[layer + 1]; k++)
        if (z->gather_units[k] == ui) return 1;
    return 0;
}

static int on_hook(void *ctx, int rank, int backward, int32_t layer, int32_t mb, void *opt_state) {
    probe *p = ctx;
    const zero *z = opt_state;
    char *why = p->why[rank];
    p->gathers[rank] = z->gathers_issued;
    p->per_pass[rank] = (uint64_t)z->gather_first[z->n_layer_slots];
    if (z->prefetch != p->k) {
        snprintf(why, sizeof p->why[rank], "prefetch_layers is %d, the test set %d", z->prefetch, p->k);
        return 1;
    }
    if (backward) return 0;
    int32_t n_layers = z->n_layer_slots;
    for (int32_t j = layer + 1; j <= layer + p->k && j < n_layers; j++)
        for (int32_t g = z->gather_first[j]; g < z->gather_first[j + 1]; g++)
            if (!z->units[z->gather_units[g]].pbuf) {
                snprintf(why, sizeof p->why[rank],
                         "forward of layer %d (mb %d): unit %d of layer %d has no gather issued with "
                         "prefetch_layers = %d", layer, mb, z->gather_units[g], j, p->k);
                return 1;
            }
    int32_t beyond = layer + p->k + 1;
    if (beyond < n_layers)
        for (int32_t g = z->gather_first[beyond]; g < z->gather_first[beyond + 1]; g++) {
            int32_t ui = z->gather_units[g];
            int wanted = 0;
            for (int32_t j = layer; j < beyond && !wanted; j++) wanted = layer_needs(z, j, ui);
            if (!wanted && z->units[ui].pbuf) {
                snprintf(why, sizeof p->why[rank],
                         "forward of layer %d (mb %d): unit %d of layer %d is gathered already with "
                         "prefetch_layers = %d", layer, mb, ui, beyond, p->k);
                return 1;
            }
        }
    if (layer + 1 < n_layers) p->checked[rank]++;
    return 0;
}

/* Run zero3 with prefetch depth k (and `bucket` bytes per unit, 0 = the
 * default), hooks checked by a probe; expect = values every hook must see. */
static void run_depth(zh_run *z, probe *p, int k, int bucket, const zh_run *expect) {
    char text[128]; /* read by zh_run_exec only */
    int n = snprintf(text, sizeof text, "[optim.zero3]\nprefetch_layers = %d\n", k);
    if (bucket) snprintf(text + n, sizeof text - (size_t)n, "bucket_size = %d\n", bucket);
    memset(p, 0, sizeof *p);
    p->k = k;
    *z = (zh_run){.plugin = "zero3", .model = &uneven, .n = RANKS, .m = MICRO, .det = 1, .steps = STEPS,
                  .grad_clip = 1.0, .extra_ini = text, .on_hook = on_hook, .hook_ctx = p,
                  .expect = expect ? expect->traj : NULL};
    int failed = zh_run_exec(z) != 0;
    z->extra_ini = NULL;
    if (failed) {
        const char *why = "";
        for (int r = 0; r < RANKS && !*why; r++) why = p->why[r];
        fail_msg("zero3 prefetch_layers = %d, bucket %d: %s %s", k, bucket, zh_run_error(z), why);
    }
    /* every forward hook with a layer after it was checked, on every rank */
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(p->checked[r], (uint64_t)STEPS * MICRO * (uint64_t)(uneven.n_layers - 1));
}

static void assert_same_results(const zh_run *a, const zh_run *b, int k) {
    char why[256];
    for (int s = 0; s < STEPS; s++) {
        if (!zh_snapshot_equal(&uneven, &a->traj[s], &b->traj[s], 0, why, sizeof why))
            fail_msg("prefetch_layers = %d: step %d differs from prefetch 0: %s", k, s, why);
        if (memcmp(&a->norm[s], &b->norm[s], sizeof(double)) != 0)
            fail_msg("prefetch_layers = %d: step %d gradient norm %.17g, with prefetch 0 %.17g", k, s, a->norm[s],
                     b->norm[s]);
    }
    if (!zh_snapshot_equal(&uneven, &a->final, &b->final, 1, why, sizeof why))
        fail_msg("prefetch_layers = %d: final optimizer state differs from prefetch 0: %s", k, why);
}

static void check_depths(int bucket) {
    zh_run base;
    probe p0;
    run_depth(&base, &p0, 0, bucket, NULL);
    for (int r = 0; r < RANKS; r++) {
        /* one gather per unit and hook: nothing kept between hooks */
        uint64_t want = (uint64_t)STEPS * MICRO * 2 * p0.per_pass[r];
        if (p0.gathers[r] != want)
            fail_msg("bucket %d, prefetch 0: rank %d issued %llu gathers, one per unit and hook is %llu", bucket, r,
                     (unsigned long long)p0.gathers[r], (unsigned long long)want);
    }
    for (int k = 1; k <= 3; k++) {
        zh_run z;
        probe p;
        run_depth(&z, &p, k, bucket, &base);
        assert_same_results(&z, &base, k);
        for (int r = 0; r < RANKS; r++)
            if (!(p.gathers[r] < p0.gathers[r]))
                fail_msg("bucket %d, prefetch %d: rank %d issued %llu gathers, prefetch 0 %llu: none kept", bucket, k,
                         r, (unsigned long long)p.gathers[r], (unsigned long long)p0.gathers[r]);
        zh_run_free(&z);
    }
    zh_run_free(&base);
}

static void test_prefetch_one_unit_per_layer(void **state) {
    (void)state;
    check_depths(0);
}

/* Several units per layer (3 KB buckets). */
static void test_prefetch_small_units(void **state) {
    (void)state;
    check_depths(3 * 1024);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_one_unit_per_layer),
        cmocka_unit_test(test_prefetch_small_units),
    };
    zh_setup_host();
    zh_model_gpt(&uneven, 3, 24, 37, 13);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    plait_plugins_unload_all();
    return failed;
}
