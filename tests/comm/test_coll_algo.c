/*
 * Which algorithm a collective runs: AUTO's crossovers as coll_exec.c
 * documents them (the latency algorithms below, ring or rhd above), the
 * algorithm really executed on both sides of a crossover, and [comm]
 * algorithm from a configuration file reaching the collectives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coll/coll.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "runtime/error.h"
#include "host/host_table.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void test_auto_crossovers(void **state) {
    (void)state;
    static const struct {
        plait_coll_kind kind;
        int n;
        size_t bytes;
        plait_coll_algo want;
    } cases[] = {
        /* allreduce: the tree below 16 MiB up to 4 ranks, then rhd; never the ring */
        {PLAIT_COLL_ALLREDUCE, 2, 4 * KiB, PLAIT_ALGO_TREE},
        {PLAIT_COLL_ALLREDUCE, 4, 16 * MiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_ALLREDUCE, 4, 16 * MiB, PLAIT_ALGO_RHD},
        {PLAIT_COLL_ALLREDUCE, 4, 1024 * MiB, PLAIT_ALGO_RHD},
        /* more than 4 ranks: the tree below 4 MiB, rhd to 32 MiB, then the ring */
        {PLAIT_COLL_ALLREDUCE, 5, 4 * MiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_ALLREDUCE, 5, 4 * MiB, PLAIT_ALGO_RHD},
        {PLAIT_COLL_ALLREDUCE, 8, 32 * MiB - 1, PLAIT_ALGO_RHD},
        {PLAIT_COLL_ALLREDUCE, 8, 32 * MiB, PLAIT_ALGO_RING},
        /* reduce_scatter: rhd, the ring from 32 MiB; allgather too, beyond 4 ranks */
        {PLAIT_COLL_REDUCE_SCATTER, 4, 32 * MiB - 1, PLAIT_ALGO_RHD},
        {PLAIT_COLL_REDUCE_SCATTER, 4, 32 * MiB, PLAIT_ALGO_RING},
        {PLAIT_COLL_ALLGATHER, 4, 32 * MiB, PLAIT_ALGO_RHD},
        {PLAIT_COLL_ALLGATHER, 5, 32 * MiB - 1, PLAIT_ALGO_RHD},
        {PLAIT_COLL_ALLGATHER, 5, 32 * MiB, PLAIT_ALGO_RING},
        /* broadcast: the tree, then direct sends (up to 4 ranks) or the chain */
        {PLAIT_COLL_BROADCAST, 4, 64 * KiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_BROADCAST, 4, 64 * KiB, PLAIT_ALGO_DIRECT},
        {PLAIT_COLL_BROADCAST, 5, 1 * MiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_BROADCAST, 5, 1 * MiB, PLAIT_ALGO_RING},
        {PLAIT_COLL_REDUCE, 3, 1 * MiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_REDUCE, 3, 1 * MiB, PLAIT_ALGO_RING},
        {PLAIT_COLL_GATHER, 3, 64 * KiB - 1, PLAIT_ALGO_TREE},
        {PLAIT_COLL_GATHER, 3, 64 * KiB, PLAIT_ALGO_DIRECT},
        {PLAIT_COLL_SCATTER, 6, 64 * KiB, PLAIT_ALGO_DIRECT},
        {PLAIT_COLL_ALLTOALL, 3, 64 * KiB - 1, PLAIT_ALGO_DIRECT},
        {PLAIT_COLL_ALLTOALL, 3, 64 * KiB, PLAIT_ALGO_RING},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plait_coll_algo got = plait_coll_auto_algo(cases[i].kind, cases[i].bytes, cases[i].n);
        if (got != cases[i].want)
            fail_msg("%s of %zu B on %d ranks: AUTO picks %s, the documented crossover says %s",
                     plait_coll_kind_name(cases[i].kind), cases[i].bytes, cases[i].n, plait_coll_algo_name(got),
                     plait_coll_algo_name(cases[i].want));
    }
}

/* One collective on every rank of an in-process world; each rank records
 * the algorithm it ran and whether the result was right. */
typedef struct run {
    plait_threads_world *w;
    plait_comm_settings settings;
    plait_coll_kind kind;
    size_t count; /* f32 elements */
    int ran[8];
    int right[8];
    plait_status st[8];
} run;

static void rank_main(int r, void *arg) {
    run *x = arg;
    const plait_coll_api *api = plait_coll_api_table();
    plait_comm *c = NULL;
    x->st[r] = plait_threads_comm_world(x->w, r, &x->settings, &c);
    float *in = malloc(x->count * sizeof *in), *out = malloc(x->count * sizeof *out);
    for (size_t i = 0; in && i < x->count; i++) in[i] = out[i] = (float)(i % 7);
    if (x->st[r] == PLAIT_OK && (!in || !out)) x->st[r] = PLAIT_ERR_NO_MEMORY;
    if (x->st[r] == PLAIT_OK) {
        int n = api->size(c);
        if (x->kind == PLAIT_COLL_ALLREDUCE)
            x->st[r] = api->allreduce(c, in, out, x->count, PLAIT_F32, PLAIT_SUM, NULL, NULL);
        else
            x->st[r] = api->broadcast(c, out, x->count, PLAIT_F32, 0, NULL, NULL);
        x->ran[r] = plait_comm_last_algorithm(c);
        x->right[r] = 1;
        for (size_t i = 0; i < x->count; i++)
            if (out[i] != (float)(i % 7) * (x->kind == PLAIT_COLL_ALLREDUCE ? (float)n : 1.0f)) x->right[r] = 0;
    }
    free(in);
    free(out);
    plait_comm_free(c);
}

/* Run `kind` of `count` f32 on n ranks with `settings`; the algorithm every
 * rank ran (asserted equal and the results right). */
static plait_coll_algo ran(int n, const plait_comm_settings *settings, plait_coll_kind kind, size_t count) {
    run *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->w = plait_threads_world_new(n, 60);
    x->settings = *settings;
    x->kind = kind;
    x->count = count;
    assert_int_equal(plait_threads_run(n, rank_main, x), PLAIT_OK);
    for (int r = 0; r < n; r++) {
        if (x->st[r] != PLAIT_OK) fail_msg("rank %d: %s", r, plait_last_error());
        assert_true(x->right[r]);
        assert_int_equal(x->ran[r], x->ran[0]);
    }
    plait_coll_algo algo = (plait_coll_algo)x->ran[0];
    plait_threads_world_free(x->w);
    free(x);
    return algo;
}

/* AUTO runs the latency algorithm just below a crossover and the bandwidth
 * one at it (5 ranks: allreduce at 4 MiB, broadcast at 1 MiB). */
static void test_auto_runs_each_side_of_the_crossover(void **state) {
    (void)state;
    plait_comm_settings s;
    plait_comm_settings_default(&s);
    assert_int_equal(ran(5, &s, PLAIT_COLL_ALLREDUCE, 4 * MiB / 4 - 1), PLAIT_ALGO_TREE);
    assert_int_equal(ran(5, &s, PLAIT_COLL_ALLREDUCE, 4 * MiB / 4), PLAIT_ALGO_RHD);
    assert_int_equal(ran(5, &s, PLAIT_COLL_BROADCAST, 1 * MiB / 4 - 1), PLAIT_ALGO_TREE);
    assert_int_equal(ran(5, &s, PLAIT_COLL_BROADCAST, 1 * MiB / 4), PLAIT_ALGO_RING);
}

/* `[comm] algorithm = X` in a file is what a small allreduce runs (AUTO
 * would pick the tree); the environment and the command line likewise. */
static void test_config_algorithm_reaches_collectives(void **state) {
    (void)state;
    static const char *const names[] = {"ring", "rhd", "tree", "direct", "ordered", "auto"};
    static const plait_coll_algo want[] = {PLAIT_ALGO_RING,   PLAIT_ALGO_RHD,     PLAIT_ALGO_TREE,
                                           PLAIT_ALGO_DIRECT, PLAIT_ALGO_ORDERED, PLAIT_ALGO_TREE};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        for (int source = 0; source < 3; source++) { /* file, environment, command line */
            plait_config *cfg = plait_config_new();
            assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
            char text[64], var[64], assignment[64];
            snprintf(text, sizeof text, "[comm]\nalgorithm = %s\n", names[i]);
            snprintf(var, sizeof var, "PLAIT_COMM_ALGORITHM=%s", names[i]);
            snprintf(assignment, sizeof assignment, "comm.algorithm=%s", names[i]);
            assert_int_equal(plait_config_load_string(cfg, "a.ini", source == 0 ? text : "[run]\nseed = 1\n"),
                             PLAIT_OK);
            if (source == 2) assert_int_equal(plait_config_add_override(cfg, assignment), PLAIT_OK);
            char *env[] = {source == 1 ? var : NULL, NULL};
            assert_int_equal(plait_config_finalize(cfg, env), PLAIT_OK);
            plait_comm_settings s;
            assert_int_equal(plait_comm_settings_from_config(cfg, &s), PLAIT_OK);
            plait_config_free(cfg);
            plait_coll_algo got = ran(4, &s, PLAIT_COLL_ALLREDUCE, 1000);
            if (got != want[i])
                fail_msg("[comm] algorithm = %s (from the %s): the allreduce ran %s", names[i],
                         source == 0 ? "file" : source == 1 ? "environment" : "command line",
                         plait_coll_algo_name(got));
        }
    }
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_crossovers),
        cmocka_unit_test(test_auto_runs_each_side_of_the_crossover),
        cmocka_unit_test(test_config_algorithm_reaches_collectives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
