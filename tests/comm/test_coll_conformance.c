/*
 * The conformance matrix over the in-process threads transport, on 1, 2, 3,
 * 4, 5 and 8 ranks: every collective × dtype × operator × size (0, 1, 7,
 * n-1, n+1, 1 MiB + 3 elements) × algorithm × in-place form, results
 * compared exactly. At 1 MiB + 3 elements `make test` runs one dtype per
 * collective and operator, rotating from a start the commit chooses
 * (conformance_sample); `make test-all` (PLAIT_TEST_ALL) runs every dtype.
 * One test per rank count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "comm/comm_threads.h"
#include "comm/conformance.h"
#include "runtime/error.h"
#include "host/host_table.h"

typedef struct shared {
    plait_threads_world *w;
    conformance_opts opts;
    conformance_result res[8];
    plait_status create[8];
    char create_msg[8][512];
} shared;

static void rank_main(int rank, void *arg) {
    shared *s = arg;
    plait_comm *world = NULL;
    s->create[rank] = plait_threads_comm_world(s->w, rank, NULL, &world);
    if (s->create[rank] != PLAIT_OK) {
        snprintf(s->create_msg[rank], sizeof s->create_msg[rank], "%s", plait_last_error());
        return;
    }
    conformance_run(world, &s->opts, &s->res[rank]);
    plait_comm_free(world);
}

static void run_on(int n) {
    shared *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->w = plait_threads_world_new(n, 60.0);
    assert_non_null(s->w);
    s->opts.big = 1;
    s->opts.only_kind = -1;
    s->opts.full_big = getenv("PLAIT_CONFORMANCE_FULL") != NULL;
    /* make test's sample of the big size; make test-all runs it complete */
    s->opts.big_subset = !conformance_complete();
    s->opts.sample = conformance_sample();
    if (s->opts.big_subset) fprintf(stderr, "the big size's subset from PLAIT_TEST_SAMPLE=%u\n", s->opts.sample);
    assert_int_equal(plait_threads_run(n, rank_main, s), PLAIT_OK);
    uint64_t cases = 0, wrong = 0, failed = 0;
    for (int r = 0; r < n; r++) {
        if (s->create[r] != PLAIT_OK) fail_msg("rank %d: creating the world: %s", r, s->create_msg[r]);
        cases += s->res[r].cases;
        wrong += s->res[r].wrong;
        failed += s->res[r].failed;
        if (s->res[r].first[0]) fprintf(stderr, "rank %d: first problem: %s\n", r, s->res[r].first);
    }
    fprintf(stderr, "%d ranks: %llu collectives checked, %llu wrong elements, %llu failed calls (%s)\n", n,
            (unsigned long long)cases, (unsigned long long)wrong, (unsigned long long)failed,
            s->opts.big_subset ? "1 MiB + 3 for a subset" : "complete");
    assert_true(cases > 0);
    assert_int_equal(s->res[0].cases, cases / (uint64_t)n);
    assert_int_equal(wrong, 0);
    assert_int_equal(failed, 0);
    plait_threads_world_free(s->w);
    free(s);
}

static void test_1_rank(void **state) { (void)state; run_on(1); }
static void test_2_ranks(void **state) { (void)state; run_on(2); }
static void test_3_ranks(void **state) { (void)state; run_on(3); }
static void test_4_ranks(void **state) { (void)state; run_on(4); }
static void test_5_ranks(void **state) { (void)state; run_on(5); }
static void test_8_ranks(void **state) { (void)state; run_on(8); }

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1_rank),  cmocka_unit_test(test_2_ranks), cmocka_unit_test(test_3_ranks),
        cmocka_unit_test(test_4_ranks), cmocka_unit_test(test_5_ranks), cmocka_unit_test(test_8_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
