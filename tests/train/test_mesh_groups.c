/*
 * The mesh's groups over an in-process world of 16 ranks, dp 2 x cp 2 x
 * tp 2 x pp 2 with ep 2: each group's members are the ranks whose other
 * coordinates agree (checked by summing world ranks and counting members
 * over it), the ep groups are consecutive ranks of the dp x cp group and
 * the expert-DP groups the ranks of it with the same ep rank; with
 * cp = ep = 1 the dp x cp and expert-DP groups are the DP group itself and
 * cp, ep have none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "comm/comm_threads.h"
#include "config/config.h"
#include "layout/mesh.h"
#include "runtime/error.h"

#define N 16
#define GROUPS 7 /* dp tp pp cp dpcp ep edp */
#define MAXERR 256

typedef struct shared {
    plait_threads_world *w;
    const char *ini;
    char err[N][MAXERR];
    int64_t sums[N][GROUPS][2]; /* world-rank sum and members; -1 without the group */
    int aliases[N][2];          /* dpcp_comm == dp_comm, edp_comm == dpcp_comm */
    plait_mesh seen[N];         /* coordinates (communicators cleared) */
} shared;

static plait_config *make_config(const char *ini) {
    char *const no_env[] = {NULL};
    plait_config *cfg = plait_config_new();
    if (!cfg || plait_config_declare_core(cfg) != PLAIT_OK ||
        plait_config_load_string(cfg, "mesh.ini", ini) != PLAIT_OK || plait_config_finalize(cfg, no_env) != PLAIT_OK)
        return NULL;
    return cfg;
}

static void rank_main(int r, void *arg) {
    shared *s = arg;
    plait_config *cfg = make_config(s->ini);
    plait_comm *world = NULL;
    plait_mesh m;
    if (!cfg || plait_threads_comm_world(s->w, r, NULL, &world) != PLAIT_OK || plait_mesh_build(cfg, world, &m)) {
        snprintf(s->err[r], MAXERR, "%s", plait_last_error());
        if (world) plait_comm_free(world);
        plait_config_free(cfg);
        return;
    }
    plait_comm *groups[GROUPS] = {m.dp_comm, m.tp_comm, m.pp_comm, m.cp_comm, m.dpcp_comm, m.ep_comm, m.edp_comm};
    for (int g = 0; g < GROUPS; g++) {
        int64_t v[2] = {r, 1};
        s->sums[r][g][0] = s->sums[r][g][1] = -1;
        if (groups[g] && plait_comm_allreduce(groups[g], v, s->sums[r][g], 2, PLAIT_I64, PLAIT_SUM, NULL, NULL))
            snprintf(s->err[r], MAXERR, "group %d: %s", g, plait_last_error());
    }
    s->aliases[r][0] = m.dpcp_comm == m.dp_comm;
    s->aliases[r][1] = m.edp_comm == m.dpcp_comm;
    s->seen[r] = m;
    plait_mesh_release(&m);
    plait_comm_free(world);
    plait_config_free(cfg);
}

static void run_world(shared *s, const char *ini) {
    memset(s, 0, sizeof *s);
    s->ini = ini;
    s->w = plait_threads_world_new(N, 30.0);
    assert_non_null(s->w);
    assert_int_equal(plait_threads_run(N, rank_main, s), PLAIT_OK);
    plait_threads_world_free(s->w);
    for (int r = 0; r < N; r++)
        if (s->err[r][0]) fail_msg("rank %d: %s", r, s->err[r]);
}

/* Expected (sum, members) of rank r's group: the ranks q for which same(r, q). */
static void expect_group(const shared *s, int r, int g, int (*same)(const plait_mesh *, const plait_mesh *)) {
    int64_t sum = 0, n = 0;
    for (int q = 0; q < N; q++)
        if (same(&s->seen[r], &s->seen[q])) sum += q, n++;
    if (s->sums[r][g][0] != sum || s->sums[r][g][1] != n)
        fail_msg("rank %d group %d: members sum %lld count %lld, expected %lld %lld", r, g, (long long)s->sums[r][g][0],
                 (long long)s->sums[r][g][1], (long long)sum, (long long)n);
}

static int same_dp(const plait_mesh *a, const plait_mesh *b) {
    return a->tp_rank == b->tp_rank && a->pp_rank == b->pp_rank && a->cp_rank == b->cp_rank;
}
static int same_tp(const plait_mesh *a, const plait_mesh *b) {
    return a->dp_rank == b->dp_rank && a->pp_rank == b->pp_rank && a->cp_rank == b->cp_rank;
}
static int same_pp(const plait_mesh *a, const plait_mesh *b) {
    return a->dp_rank == b->dp_rank && a->tp_rank == b->tp_rank && a->cp_rank == b->cp_rank;
}
static int same_cp(const plait_mesh *a, const plait_mesh *b) {
    return a->dp_rank == b->dp_rank && a->tp_rank == b->tp_rank && a->pp_rank == b->pp_rank;
}
static int same_dpcp(const plait_mesh *a, const plait_mesh *b) {
    return a->tp_rank == b->tp_rank && a->pp_rank == b->pp_rank;
}
static int same_ep(const plait_mesh *a, const plait_mesh *b) {
    return same_dpcp(a, b) && a->dpcp_rank / a->ep == b->dpcp_rank / b->ep;
}
static int same_edp(const plait_mesh *a, const plait_mesh *b) { return same_dpcp(a, b) && a->ep_rank == b->ep_rank; }

static void test_four_axes_and_ep(void **state) {
    (void)state;
    static shared s;
    run_world(&s, "[parallel]\ndp = 2\ncp = 2\ntp = 2\npp = 2\nep = 2\n");
    int (*same[GROUPS])(const plait_mesh *, const plait_mesh *) = {same_dp,   same_tp, same_pp, same_cp,
                                                                   same_dpcp, same_ep, same_edp};
    for (int r = 0; r < N; r++) {
        const plait_mesh *m = &s.seen[r];
        /* default order tp,dp,pp: cp sits just outside tp */
        assert_int_equal(m->tp_rank, r % 2);
        assert_int_equal(m->cp_rank, r / 2 % 2);
        assert_int_equal(m->dp_rank, r / 4 % 2);
        assert_int_equal(m->pp_rank, r / 8);
        assert_int_equal(m->dpcp_rank, m->dp_rank * 2 + m->cp_rank);
        assert_int_equal(m->ep_rank, m->dpcp_rank % 2);
        for (int g = 0; g < GROUPS; g++) expect_group(&s, r, g, same[g]);
        assert_false(s.aliases[r][0]);
        assert_false(s.aliases[r][1]);
    }
}

static void test_cp1_is_three_axes(void **state) {
    (void)state;
    static shared s;
    run_world(&s, "[parallel]\ndp = 4\ntp = 2\npp = 2\n");
    for (int r = 0; r < N; r++) {
        assert_int_equal(s.seen[r].cp, 1);
        assert_int_equal(s.seen[r].dpcp_rank, s.seen[r].dp_rank);
        expect_group(&s, r, 0, same_dp);
        assert_int_equal(s.sums[r][3][1], -1); /* no cp group */
        assert_int_equal(s.sums[r][5][1], -1); /* no ep group */
        assert_true(s.aliases[r][0]);
        assert_true(s.aliases[r][1]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_axes_and_ep),
        cmocka_unit_test(test_cp1_is_three_axes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
