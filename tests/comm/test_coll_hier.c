/*
 * Hierarchical collectives (coll_hier.c) on in-process ranks that pretend to
 * live on several hosts (plait_comm_set_hosts): every element right for
 * allreduce (sum, avg, in place; pipelined in pieces when large),
 * reduce_scatter and allgather on 2x2, 3x2, 2x3 and interleaved placements; AUTO picks them only across hosts and from
 * 64 KiB on; irregular layouts fall back to the flat algorithms; a split
 * inherits its members' hosts.
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
#include "commstate/comm_topo.h"
#include "runtime/error.h"
#include "host/host_table.h"

#define MAXR 8

typedef struct run {
    plait_threads_world *w;
    int n;
    const int *hosts;          /* member -> host */
    plait_coll_kind kind;
    plait_coll_algo algo;
    plait_redop op;
    size_t count;
    int in_place;
    int ran[MAXR], wrong[MAXR];
    plait_status st[MAXR];
    char err[MAXR][256];
} run;

/* Contribution of rank r to element i: small integers, exact in f32 in any order. */
static float val(int r, size_t i) { return (float)((int)(i % 13) + 3 * r); }

static void rank_main(int r, void *arg) {
    run *x = arg;
    const plait_coll_api *api = plait_coll_api_table();
    plait_comm *c = NULL;
    int n = x->n;
    x->st[r] = plait_threads_comm_world(x->w, r, NULL, &c);
    if (x->st[r] == PLAIT_OK) x->st[r] = plait_comm_set_hosts(c, x->hosts);
    size_t total = x->kind == PLAIT_COLL_ALLREDUCE ? x->count : x->count * (size_t)n;
    float *in = calloc(total + 1, sizeof *in), *out = calloc(total + 1, sizeof *out);
    if (x->st[r] == PLAIT_OK && (!in || !out)) x->st[r] = PLAIT_ERR_NO_MEMORY;
    if (x->st[r] == PLAIT_OK) {
        plait_coll_opts o = {.struct_size = sizeof o, .algo = x->algo};
        if (x->kind == PLAIT_COLL_ALLREDUCE) {
            for (size_t i = 0; i < x->count; i++) in[i] = val(r, i);
            if (x->in_place) memcpy(out, in, x->count * sizeof *in);
            x->st[r] = api->allreduce(c, x->in_place ? out : in, out, x->count, PLAIT_F32, x->op, &o, NULL);
            for (size_t i = 0; i < x->count; i++) {
                float want = 0;
                for (int q = 0; q < n; q++) want += val(q, i);
                if (x->op == PLAIT_AVG) want /= (float)n;
                x->wrong[r] += out[i] != want;
            }
        } else if (x->kind == PLAIT_COLL_REDUCE_SCATTER) {
            for (size_t i = 0; i < total; i++) in[i] = val(r, i);
            x->st[r] = api->reduce_scatter(c, in, out, x->count, PLAIT_F32, x->op, &o, NULL);
            for (size_t i = 0; i < x->count; i++) {
                float want = 0;
                for (int q = 0; q < n; q++) want += val(q, (size_t)r * x->count + i);
                if (x->op == PLAIT_AVG) want /= (float)n;
                x->wrong[r] += out[i] != want;
            }
        } else {
            for (size_t i = 0; i < x->count; i++) in[i] = val(r, i);
            float *send = in;
            if (x->in_place) {
                memcpy(out + (size_t)r * x->count, in, x->count * sizeof *in);
                send = out;
            }
            x->st[r] = api->allgather(c, send, out, x->count, PLAIT_F32, &o, NULL);
            for (int q = 0; q < n; q++)
                for (size_t i = 0; i < x->count; i++) x->wrong[r] += out[(size_t)q * x->count + i] != val(q, i);
        }
        if (x->st[r] != PLAIT_OK) snprintf(x->err[r], sizeof x->err[r], "%s", plait_last_error());
        x->ran[r] = plait_comm_last_algorithm(c);
    }
    free(in);
    free(out);
    plait_comm_free(c);
}

/* Run one collective on n ranks placed by `hosts`; returns the algorithm all
 * ranks ran, after asserting success, agreement and no wrong element. */
static plait_coll_algo ran(int n, const int *hosts, plait_coll_kind kind, plait_coll_algo algo, plait_redop op,
                           size_t count, int in_place) {
    run *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->w = plait_threads_world_new(n, 60);
    *x = (run){.w = x->w, .n = n, .hosts = hosts, .kind = kind, .algo = algo, .op = op, .count = count,
               .in_place = in_place};
    assert_int_equal(plait_threads_run(n, rank_main, x), PLAIT_OK);
    for (int r = 0; r < n; r++) {
        if (x->st[r] != PLAIT_OK) fail_msg("rank %d: %s", r, x->err[r]);
        if (x->wrong[r])
            fail_msg("%s of %zu on %d ranks (%s%s): rank %d has %d wrong elements", plait_coll_kind_name(kind),
                     count, n, plait_coll_algo_name(algo), in_place ? ", in place" : "", r, x->wrong[r]);
        assert_int_equal(x->ran[r], x->ran[0]);
    }
    plait_coll_algo got = (plait_coll_algo)x->ran[0];
    plait_threads_world_free(x->w);
    free(x);
    return got;
}

static const int two_by_two[] = {0, 0, 1, 1};
static const int three_by_two[] = {0, 0, 1, 1, 2, 2};
static const int two_by_three[] = {0, 0, 0, 1, 1, 1};
static const int interleaved[] = {0, 1, 0, 1, 0, 1}; /* 2 hosts x 3, ranks alternate */

static void test_forced_hier_is_right(void **state) {
    (void)state;
    static const struct {
        int n;
        const int *hosts;
    } layouts[] = {{4, two_by_two}, {6, three_by_two}, {6, two_by_three}, {6, interleaved}};
    static const size_t counts[] = {1, 2, 5, 7, 1000, 4099};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            int n = layouts[l].n;
            const int *h = layouts[l].hosts;
            assert_int_equal(ran(n, h, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 0), PLAIT_ALGO_HIER);
            assert_int_equal(ran(n, h, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 1), PLAIT_ALGO_HIER);
            assert_int_equal(ran(n, h, PLAIT_COLL_REDUCE_SCATTER, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 0),
                             PLAIT_ALGO_HIER);
            assert_int_equal(ran(n, h, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 0), PLAIT_ALGO_HIER);
            assert_int_equal(ran(n, h, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 1), PLAIT_ALGO_HIER);
        }
    /* avg divides once, at the end: element 0 sums to 18 on 4 ranks (4.5 exact) */
    assert_int_equal(ran(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_AVG, 1, 0), PLAIT_ALGO_HIER);
    assert_int_equal(ran(4, two_by_two, PLAIT_COLL_REDUCE_SCATTER, PLAIT_ALGO_HIER, PLAIT_AVG, 1, 0), PLAIT_ALGO_HIER);
}

/* Large allreduces run as a pipeline of up to 8 pieces of at least 1 MiB
 * (3 and 8 pieces here, sizes not divisible by anything), in and out of place. */
static void test_pipelined_allreduce(void **state) {
    (void)state;
    static const size_t counts[] = {(3u << 20) / 4 + 5, (9u << 20) / 4 + 3};
    for (size_t k = 0; k < 2; k++) {
        assert_int_equal(ran(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 0), PLAIT_ALGO_HIER);
        assert_int_equal(ran(6, interleaved, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, counts[k], 1),
                         PLAIT_ALGO_HIER);
        assert_int_equal(ran(6, three_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_SUM, counts[k], 0),
                         PLAIT_ALGO_HIER);
    }
}

/* AUTO: hierarchical across hosts from 64 KiB, flat below it and on one host;
 * irregular layouts (3 ranks on 2 hosts, one rank per host) never. */
static void test_auto_choice(void **state) {
    (void)state;
    static const int one_host[] = {0, 0, 0, 0};
    static const int uneven[] = {0, 0, 1};
    static const int one_each[] = {0, 1, 2};
    size_t big = (64u << 10) / 4, small = big - 1;
    assert_int_equal(ran(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_SUM, big, 0), PLAIT_ALGO_HIER);
    assert_int_not_equal(ran(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_SUM, small, 0),
                         PLAIT_ALGO_HIER);
    assert_int_not_equal(ran(4, one_host, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_SUM, big, 0), PLAIT_ALGO_HIER);
    /* allgather/reduce_scatter count the whole buffer (n blocks) */
    assert_int_equal(ran(4, two_by_two, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_AUTO, PLAIT_SUM, big / 4, 0), PLAIT_ALGO_HIER);
    assert_int_equal(ran(4, two_by_two, PLAIT_COLL_REDUCE_SCATTER, PLAIT_ALGO_AUTO, PLAIT_SUM, big / 4, 0),
                     PLAIT_ALGO_HIER);
    /* forced where it cannot apply: the flat AUTO choice, still right */
    assert_int_not_equal(ran(3, uneven, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, big, 0), PLAIT_ALGO_HIER);
    assert_int_not_equal(ran(3, one_each, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_HIER, PLAIT_SUM, big, 0), PLAIT_ALGO_HIER);
    assert_int_not_equal(ran(4, one_host, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_HIER, PLAIT_SUM, 100, 0), PLAIT_ALGO_HIER);
}

/* A split keeps its members' hosts: on 2 hosts x 2, the split by local index
 * has one member per host (2 hosts), the split by host one host. */
typedef struct split_run {
    plait_threads_world *w;
    int hosts_by_column[4], hosts_by_host[4], host_of_second[4];
    plait_status st[4];
} split_run;

static void split_main(int r, void *arg) {
    split_run *x = arg;
    plait_comm *c = NULL, *col = NULL, *host = NULL;
    x->st[r] = plait_threads_comm_world(x->w, r, NULL, &c);
    if (x->st[r] == PLAIT_OK) x->st[r] = plait_comm_set_hosts(c, two_by_two);
    if (x->st[r] == PLAIT_OK) x->st[r] = plait_comm_split(c, r % 2, r, "column", &col);
    if (x->st[r] == PLAIT_OK) x->st[r] = plait_comm_split(c, r / 2, r, "host", &host);
    if (x->st[r] == PLAIT_OK) {
        x->hosts_by_column[r] = plait_comm_n_hosts(col);
        x->hosts_by_host[r] = plait_comm_n_hosts(host);
        x->host_of_second[r] = plait_comm_host_of(col, 1);
    }
    plait_comm_free(host);
    plait_comm_free(col);
    plait_comm_free(c);
}

static void test_split_inherits_hosts(void **state) {
    (void)state;
    split_run x = {0};
    x.w = plait_threads_world_new(4, 60);
    assert_int_equal(plait_threads_run(4, split_main, &x), PLAIT_OK);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(x.st[r], PLAIT_OK);
        assert_int_equal(x.hosts_by_column[r], 2);
        assert_int_equal(x.hosts_by_host[r], 1);
        assert_int_equal(x.host_of_second[r], 1);
    }
    plait_threads_world_free(x.w);
}

/* In-process ranks share this process's host identity: one host. */
typedef struct one_run {
    plait_threads_world *w;
    int hosts[3];
} one_run;

static void one_main(int r, void *arg) {
    one_run *x = arg;
    plait_comm *c = NULL;
    if (plait_threads_comm_world(x->w, r, NULL, &c) == PLAIT_OK) x->hosts[r] = plait_comm_n_hosts(c);
    plait_comm_free(c);
}

static void test_threads_world_is_one_host(void **state) {
    (void)state;
    one_run x = {0};
    x.w = plait_threads_world_new(3, 60);
    assert_int_equal(plait_threads_run(3, one_main, &x), PLAIT_OK);
    for (int r = 0; r < 3; r++) assert_int_equal(x.hosts[r], 1);
    plait_threads_world_free(x.w);
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_hier_is_right),
        cmocka_unit_test(test_pipelined_allreduce),
        cmocka_unit_test(test_auto_choice),
        cmocka_unit_test(test_split_inherits_hosts),
        cmocka_unit_test(test_threads_world_is_one_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
