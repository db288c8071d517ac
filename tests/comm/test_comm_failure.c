/*
 * Failures end operations with messages instead of hangs: a rank that stops
 * participating makes the others fail within the timeout, naming the
 * operation, its sequence number and the peer; a receive nobody answers
 * times out naming the peer; mismatched collectives are reported by
 * check_collectives (and caught as a protocol error without it); a failed
 * communicator refuses later calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/comm_threads.h"
#include "runtime/error.h"
#include "host/host_table.h"

#define N 4
#define MAXMSG 2048
#define TIMEOUT 0.5

typedef struct shared {
    plait_threads_world *w;
    plait_comm_settings settings;
    plait_status st[N];
    double elapsed[N];
    char msg[N][MAXMSG];
    plait_status later[N];
    char later_msg[N][MAXMSG];
    int setup_failed;
} shared;

static const plait_coll_api *api;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static shared *run(void (*fn)(int, void *), int check) {
    shared *s = calloc(1, sizeof *s);
    s->w = plait_threads_world_new(N, 30.0);
    plait_comm_settings_default(&s->settings);
    s->settings.timeout_s = TIMEOUT;
    s->settings.check_collectives = check;
    assert_int_equal(plait_threads_run(N, fn, s), PLAIT_OK);
    assert_false(s->setup_failed);
    return s;
}

static void done(shared *s) {
    plait_threads_world_free(s->w);
    free(s);
}

static plait_comm *world_of(shared *s, int r) {
    plait_comm *w = NULL;
    if (plait_threads_comm_world(s->w, r, &s->settings, &w) != PLAIT_OK) s->setup_failed = 1;
    return w;
}

static void record(shared *s, int r, plait_status st, double t0) {
    s->st[r] = st;
    s->elapsed[r] = now() - t0;
    snprintf(s->msg[r], MAXMSG, "%s", plait_last_error());
}

/* Rank 2 skips the allreduce (it "hangs" in something else for a while). */
static void stall_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = world_of(s, r);
    if (!w) return;
    plait_status st = api->barrier(w, NULL, NULL); /* #1 works */
    if (st != PLAIT_OK) s->setup_failed = 1;
    float x[16] = {0}, y[16];
    plait_coll_opts o = {.struct_size = sizeof o, .label = "grad bucket 0"};
    if (r == 2) {
        usleep((useconds_t)(4 * TIMEOUT * 1e6));
        double t0 = now();
        st = api->allreduce(w, x, y, 16, PLAIT_F32, PLAIT_SUM, &o, NULL);
        record(s, r, st, t0);
    } else {
        double t0 = now();
        st = api->allreduce(w, x, y, 16, PLAIT_F32, PLAIT_SUM, &o, NULL); /* #2 */
        record(s, r, st, t0);
        s->later[r] = api->barrier(w, NULL, NULL);
        snprintf(s->later_msg[r], MAXMSG, "%s", plait_last_error());
    }
    plait_comm_free(w);
}

static void test_stalled_rank_fails_the_others(void **state) {
    (void)state;
    shared *s = run(stall_main, 0);
    int named_rank2 = 0;
    for (int r = 0; r < N; r++) {
        if (r == 2) continue;
        fprintf(stderr, "rank %d (%.2f s): %s\n", r, s->elapsed[r], s->msg[r]);
        assert_true(s->st[r] == PLAIT_ERR_TIMEOUT || s->st[r] == PLAIT_ERR_PEER_LOST);
        assert_true(s->elapsed[r] < TIMEOUT * 3 + 1.0);
        assert_non_null(strstr(s->msg[r], "allreduce #2"));
        assert_non_null(strstr(s->msg[r], "grad bucket 0"));
        assert_non_null(strstr(s->msg[r], "64 B"));
        assert_non_null(strstr(s->msg[r], "rank"));
        if (strstr(s->msg[r], "rank 2 (world rank 2)")) named_rank2++;
        /* the communicator is unusable afterwards, and says why */
        assert_int_not_equal(s->later[r], PLAIT_OK);
        assert_non_null(strstr(s->later_msg[r], "unusable"));
    }
    /* ranks 0 and 3 wait on rank 2 directly in recursive doubling */
    assert_true(named_rank2 >= 1);
    /* the late rank does not hang either: its peers are gone */
    fprintf(stderr, "rank 2 (%.2f s): %s\n", s->elapsed[2], s->msg[2]);
    assert_int_not_equal(s->st[2], PLAIT_OK);
    assert_true(s->elapsed[2] < TIMEOUT * 3 + 1.0);
    done(s);
}

/* A large ring allreduce with one rank missing: also fails in time. */
static void stall_ring_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = world_of(s, r);
    if (!w) return;
    size_t count = 1u << 20;
    float *x = calloc(count, 4), *y = calloc(count, 4);
    plait_coll_opts o = {.struct_size = sizeof o, .algo = PLAIT_ALGO_RING};
    double t0 = now();
    plait_status st = r == 1 ? PLAIT_ERR_TIMEOUT : api->allreduce(w, x, y, count, PLAIT_F32, PLAIT_SUM, &o, NULL);
    if (r == 1) {
        usleep((useconds_t)(4 * TIMEOUT * 1e6));
        plait_set_error(st, "skipped");
    }
    record(s, r, st, t0);
    free(x), free(y);
    plait_comm_free(w);
}

static void test_stalled_rank_in_ring(void **state) {
    (void)state;
    shared *s = run(stall_ring_main, 0);
    for (int r = 0; r < N; r++) {
        if (r == 1) continue;
        fprintf(stderr, "rank %d (%.2f s): %s\n", r, s->elapsed[r], s->msg[r]);
        assert_true(s->st[r] == PLAIT_ERR_TIMEOUT || s->st[r] == PLAIT_ERR_PEER_LOST);
        assert_true(s->elapsed[r] < TIMEOUT * 3 + 1.0);
        assert_non_null(strstr(s->msg[r], "allreduce #1"));
        assert_non_null(strstr(s->msg[r], "ring"));
    }
    /* rank 2 receives from rank 1 in the ring */
    assert_non_null(strstr(s->msg[2], "rank 1 (world rank 1)"));
    done(s);
}

static void p2p_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = world_of(s, r);
    if (!w) return;
    if (r == 0) {
        double v = 0, t0 = now();
        plait_status st = api->recv(w, &v, 1, PLAIT_F64, 3, 42, NULL, NULL);
        record(s, r, st, t0);
    }
    plait_comm_free(w);
}

static void test_unanswered_receive_times_out(void **state) {
    (void)state;
    shared *s = run(p2p_main, 0);
    fprintf(stderr, "rank 0: %s\n", s->msg[0]);
    assert_int_equal(s->st[0], PLAIT_ERR_TIMEOUT);
    assert_true(s->elapsed[0] >= TIMEOUT * 0.9 && s->elapsed[0] < TIMEOUT + 1.0);
    assert_non_null(strstr(s->msg[0], "recv #1 from rank 3 (world rank 3), tag 42, 8 bytes"));
    assert_non_null(strstr(s->msg[0], "timed out"));
    done(s);
}

/* Rank 0 calls allreduce while the others call broadcast. */
static void mismatch_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = world_of(s, r);
    if (!w) return;
    float x[10] = {0};
    double t0 = now();
    plait_status st = r == 0 ? api->allreduce(w, x, x, 10, PLAIT_F32, PLAIT_SUM, NULL, NULL)
                             : api->broadcast(w, x, 10, PLAIT_F32, 0, NULL, NULL);
    record(s, r, st, t0);
    plait_comm_free(w);
}

static void test_check_collectives_reports_mismatch(void **state) {
    (void)state;
    shared *s = run(mismatch_main, 1);
    for (int r = 0; r < N; r++) {
        fprintf(stderr, "rank %d: %s\n", r, s->msg[r]);
        assert_int_equal(s->st[r], PLAIT_ERR_INVALID_ARG);
        assert_true(s->elapsed[r] < TIMEOUT);
        assert_non_null(strstr(s->msg[r], "rank 0 called allreduce(count 10, f32 sum, root 0)"));
        assert_non_null(strstr(s->msg[r], "called broadcast(count 10, f32, root 0)"));
    }
    done(s);
}

/* Without the check, a count mismatch is still an error, not a hang or an overrun. */
static void count_mismatch_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = world_of(s, r);
    if (!w) return;
    float x[64] = {0}, y[64];
    double t0 = now();
    plait_status st = api->allreduce(w, x, y, r == 1 ? 33 : 32, PLAIT_F32, PLAIT_SUM, NULL, NULL);
    record(s, r, st, t0);
    plait_comm_free(w);
}

static void test_count_mismatch_is_an_error(void **state) {
    (void)state;
    shared *s = run(count_mismatch_main, 0);
    int protocol = 0;
    for (int r = 0; r < N; r++) {
        fprintf(stderr, "rank %d: %s\n", r, s->msg[r]);
        assert_true(s->elapsed[r] < TIMEOUT * 3 + 1.0);
        if (s->st[r] == PLAIT_ERR_PROTOCOL) protocol++;
    }
    assert_true(protocol >= 1);
    done(s);
}

int main(void) {
    plait_host_install();
    api = plait_coll_api_table();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_rank_fails_the_others),
        cmocka_unit_test(test_stalled_rank_in_ring),
        cmocka_unit_test(test_unanswered_receive_times_out),
        cmocka_unit_test(test_check_collectives_reports_mismatch),
        cmocka_unit_test(test_count_mismatch_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
