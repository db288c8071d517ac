/*
 * The search's memo (core/cost/memo.h): a value is found by the very key it
 * was kept by and by no other, stays found (and unchanged) while thousands
 * more are kept and the table grows, and is forgotten by a clear, whose
 * memory the next keys reuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cost/memo.h"

/* keys alike but in their last settings: a table comparing less than the
 * whole key finds another one's value */
static plait_cost_layout key_of(int ep, int64_t micro_batch, const char *schedule) {
    plait_cost_layout k;
    memset(&k, 0, sizeof k);
    k.dp = 2, k.tp = 8, k.pp = 4, k.micro_batch = micro_batch, k.ep = ep;
    snprintf(k.schedule, sizeof k.schedule, "%s", schedule);
    return k;
}

static void test_memo_finds_its_own_key(void **state) {
    (void)state;
    plait_cost_memo *m = plait_cost_memo_new();
    assert_non_null(m);
    plait_cost_layout a = key_of(1, 1, "1f1b"), b = key_of(1, 1, "zb1"), c = key_of(1, 2, "1f1b");
    assert_null(plait_cost_memo_find(m, &a));
    double va[3] = {1, 2, 3}, vb = 7;
    double *kept = plait_cost_memo_keep(m, &a, va, sizeof va);
    assert_non_null(kept);
    assert_ptr_not_equal(kept, va); /* a copy */
    va[0] = -1;
    assert_non_null(plait_cost_memo_keep(m, &b, &vb, sizeof vb));
    const double *fa = plait_cost_memo_find(m, &a), *fb = plait_cost_memo_find(m, &b);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_true(fa[0] == 1 && fa[1] == 2 && fa[2] == 3);
    assert_true(*fb == 7);
    /* a key differing in one setting is another key */
    assert_null(plait_cost_memo_find(m, &c));
    c.micro_batch = 1;
    c.optim[0] = 'z';
    assert_null(plait_cost_memo_find(m, &c));
    plait_cost_memo_free(m);
}

static void test_memo_grows_and_clears(void **state) {
    (void)state;
    plait_cost_memo *m = plait_cost_memo_new();
    assert_non_null(m);
    enum { N = 5000 };
    const double *first = NULL;
    for (int i = 0; i < N; i++) {
        plait_cost_layout k = key_of(1 + i % 97, 1 + i / 97, "1f1b");
        double v[2] = {i, -i};
        const double *kept = plait_cost_memo_keep(m, &k, v, sizeof v);
        assert_non_null(kept);
        if (i == 0) first = kept;
    }
    for (int i = 0; i < N; i++) {
        plait_cost_layout k = key_of(1 + i % 97, 1 + i / 97, "1f1b");
        const double *v = plait_cost_memo_find(m, &k);
        assert_non_null(v);
        assert_true(v[0] == i && v[1] == -i);
        if (i == 0) assert_ptr_equal(v, first); /* a value stays where it is while others are kept */
    }
    plait_cost_memo_clear(m);
    for (int i = 0; i < N; i += 499) {
        plait_cost_layout k = key_of(1 + i % 97, 1 + i / 97, "1f1b");
        assert_null(plait_cost_memo_find(m, &k));
    }
    /* after a clear: kept again, a larger value than the entry held before */
    plait_cost_layout k = key_of(3, 3, "zb1");
    double big[64];
    for (int i = 0; i < 64; i++) big[i] = i;
    assert_non_null(plait_cost_memo_keep(m, &k, big, sizeof big));
    const double *v = plait_cost_memo_find(m, &k);
    assert_non_null(v);
    assert_memory_equal(v, big, sizeof big);
    plait_cost_memo_free(m);
    plait_cost_memo_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memo_finds_its_own_key),
        cmocka_unit_test(test_memo_grows_and_clears),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
