/*
 * Asynchronous requests and point-to-point: collectives progress while the
 * caller computes (a request issued before a pause is complete after it
 * without any test/wait), test() never blocks, requests finish in any order,
 * a blocking call waits for earlier asynchronous ones; byte counters match
 * the ring formula 2(n-1)/n·S; user send/recv match by (peer, tag) in order.
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
#define MAXERR 512

typedef struct shared {
    plait_threads_world *w;
    char err[N][MAXERR];
} shared;

#define CHECK(rank, s, cond, ...)                                                        \
    do {                                                                                 \
        if (!(cond) && !(s)->err[rank][0]) snprintf((s)->err[rank], MAXERR, __VA_ARGS__); \
    } while (0)

static const plait_coll_api *api;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_ranks(void (*fn)(int, void *)) {
    shared *s = calloc(1, sizeof *s);
    s->w = plait_threads_world_new(N, 30.0);
    assert_int_equal(plait_threads_run(N, fn, s), PLAIT_OK);
    for (int r = 0; r < N; r++)
        if (s->err[r][0]) fail_msg("rank %d: %s", r, s->err[r]);
    plait_threads_world_free(s->w);
    free(s);
}

static void overlap_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(s->w, r, NULL, &w) != PLAIT_OK) {
        CHECK(r, s, 0, "world: %s", plait_last_error());
        return;
    }
    size_t count = 1u << 20; /* 4 MiB of f32: the ring */
    float *in = malloc(count * 4), *out = malloc(count * 4);
    for (size_t i = 0; i < count; i++) in[i] = (float)((i + (size_t)r) % 7);
    /* 1. progress while the caller "computes" (sleeps) */
    plait_request *req = NULL;
    plait_status st = api->allreduce(w, in, out, count, PLAIT_F32, PLAIT_SUM, NULL, &req);
    CHECK(r, s, st == PLAIT_OK, "issue: %s", plait_last_error());
    usleep(1500 * 1000);
    int done = 0;
    double t0 = now();
    st = api->test(req, &done);
    double dt = now() - t0;
    CHECK(r, s, st == PLAIT_OK && done, "allreduce did not progress during compute (done=%d): %s", done,
          plait_last_error());
    CHECK(r, s, dt < 0.05, "test() took %.3f s", dt);
    if (!done) api->wait(req);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int q = 0; q < N; q++) want += (float)((i + (size_t)q) % 7);
        bad += out[i] != want;
    }
    CHECK(r, s, bad == 0, "%zu wrong elements", bad);

    /* 2. test() never blocks while a peer is late; wait() then finishes */
    if (r == 3) usleep(300 * 1000);
    st = api->allreduce(w, in, out, count, PLAIT_F32, PLAIT_SUM, NULL, &req);
    CHECK(r, s, st == PLAIT_OK, "posting part 2: %s", plait_last_error());
    if (r == 0) {
        double worst = 0;
        int polls = 0;
        done = 0;
        while (!done && polls < 100000) {
            double a = now();
            st = api->test(req, &done);
            double b = now() - a;
            if (b > worst) worst = b;
            polls++;
            if (!done) usleep(1000);
        }
        CHECK(r, s, st == PLAIT_OK && done, "test loop: %s", plait_last_error());
        CHECK(r, s, polls > 10, "test() reported done after %d polls although rank 3 was 300 ms late", polls);
        CHECK(r, s, worst < 0.05, "one test() call blocked %.3f s", worst);
    } else {
        CHECK(r, s, api->wait(req) == PLAIT_OK, "wait 2: %s", plait_last_error());
    }

    /* 3. many in flight, finished in reverse, then a blocking call behind them */
    enum { K = 12 };
    plait_request *rs[K];
    int32_t vals[K][64], outs[K][64];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < 64; i++) vals[k][i] = r * 1000 + k * 64 + i;
        plait_coll_opts o = {.struct_size = sizeof o, .algo = k % 2 ? PLAIT_ALGO_RING : PLAIT_ALGO_RHD};
        st = api->allreduce(w, vals[k], outs[k], (size_t)(k + 1) * 5, PLAIT_I32, PLAIT_MAX, &o, &rs[k]);
        CHECK(r, s, st == PLAIT_OK, "issue %d: %s", k, plait_last_error());
    }
    int64_t one = 1, total = 0;
    st = api->allreduce(w, &one, &total, 1, PLAIT_I64, PLAIT_SUM, NULL, NULL); /* blocking, queued */
    CHECK(r, s, st == PLAIT_OK && total == N, "blocking behind async: %s", plait_last_error());
    for (int k = K - 1; k >= 0; k--) {
        CHECK(r, s, api->wait(rs[k]) == PLAIT_OK, "wait %d: %s", k, plait_last_error());
        for (int i = 0; i < (k + 1) * 5; i++)
            CHECK(r, s, outs[k][i] == (N - 1) * 1000 + k * 64 + i, "request %d element %d", k, i);
    }
    free(in), free(out);
    plait_comm_free(w);
}

static void test_async_progress_and_order(void **state) {
    (void)state;
    run_ranks(overlap_main);
}

static void bytes_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(s->w, r, NULL, &w) != PLAIT_OK) {
        CHECK(r, s, 0, "world: %s", plait_last_error());
        return;
    }
    size_t count = (size_t)N * 100000; /* divisible by n */
    float *in = calloc(count, 4), *out = calloc(count, 4);
    plait_comm_stats a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    api->stats(w, &a);
    plait_coll_opts o = {.struct_size = sizeof o, .algo = PLAIT_ALGO_RING};
    plait_status st = api->allreduce(w, in, out, count, PLAIT_F32, PLAIT_SUM, &o, NULL);
    CHECK(r, s, st == PLAIT_OK, "ring: %s", plait_last_error());
    api->stats(w, &b);
    uint64_t S = count * 4, want = 2 * (N - 1) * S / N;
    CHECK(r, s, b.bytes_sent - a.bytes_sent == want, "ring allreduce sent %llu bytes, formula 2(n-1)/n*S = %llu",
          (unsigned long long)(b.bytes_sent - a.bytes_sent), (unsigned long long)want);
    CHECK(r, s, b.bytes_received - a.bytes_received == want, "ring allreduce received %llu bytes",
          (unsigned long long)(b.bytes_received - a.bytes_received));
    CHECK(r, s, b.collectives == a.collectives + 1, "collective count");
    CHECK(r, s, b.wait_seconds > a.wait_seconds, "wait time not counted");
    /* reduce_scatter and allgather: (n-1)/n of the full buffer */
    api->stats(w, &a);
    st = api->reduce_scatter(w, in, out, count / N, PLAIT_F32, PLAIT_SUM, &o, NULL);
    api->stats(w, &b);
    CHECK(r, s, st == PLAIT_OK && b.bytes_sent - a.bytes_sent == (N - 1) * S / N, "reduce_scatter sent %llu",
          (unsigned long long)(b.bytes_sent - a.bytes_sent));
    free(in), free(out);
    plait_comm_free(w);
}

static void test_byte_counters_match_formulas(void **state) {
    (void)state;
    run_ranks(bytes_main);
}

static void p2p_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(s->w, r, NULL, &w) != PLAIT_OK) {
        CHECK(r, s, 0, "world: %s", plait_last_error());
        return;
    }
    int right = (r + 1) % N, left = (r + N - 1) % N;
    /* three messages on tag 5 and one on tag 7; the receiver asks for 7 first */
    int32_t msg[4][8], got[4][8];
    plait_request *sr[4], *rr[4];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 8; i++) msg[k][i] = r * 100 + k * 10 + i;
    CHECK(r, s, api->recv(w, got[3], 8, PLAIT_I32, left, 7, NULL, &rr[3]) == PLAIT_OK, "recv 7");
    for (int k = 0; k < 3; k++)
        CHECK(r, s, api->recv(w, got[k], 8, PLAIT_I32, left, 5, NULL, &rr[k]) == PLAIT_OK, "recv 5");
    for (int k = 0; k < 4; k++)
        CHECK(r, s, api->send(w, msg[k], 8, PLAIT_I32, right, k == 3 ? 7 : 5, NULL, &sr[k]) == PLAIT_OK, "send");
    for (int k = 0; k < 4; k++) {
        CHECK(r, s, api->wait(rr[k]) == PLAIT_OK, "wait recv %d: %s", k, plait_last_error());
        CHECK(r, s, api->wait(sr[k]) == PLAIT_OK, "wait send %d: %s", k, plait_last_error());
    }
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 8; i++)
            CHECK(r, s, got[k][i] == left * 100 + k * 10 + i, "message %d element %d: %d", k, i, got[k][i]);
    /* blocking pairs: even ranks send first, odd receive first */
    double x = r + 0.5, y = 0;
    if (r % 2 == 0) {
        CHECK(r, s, api->send(w, &x, 1, PLAIT_F64, right, 1, NULL, NULL) == PLAIT_OK, "bsend");
        CHECK(r, s, api->recv(w, &y, 1, PLAIT_F64, left, 1, NULL, NULL) == PLAIT_OK, "brecv");
    } else {
        CHECK(r, s, api->recv(w, &y, 1, PLAIT_F64, left, 1, NULL, NULL) == PLAIT_OK, "brecv");
        CHECK(r, s, api->send(w, &x, 1, PLAIT_F64, right, 1, NULL, NULL) == PLAIT_OK, "bsend");
    }
    CHECK(r, s, y == left + 0.5, "blocking p2p got %g", y);
    /* p2p traffic does not disturb a collective running at the same time */
    plait_request *cr = NULL, *p2 = NULL, *p3 = NULL;
    int64_t v = r, sum = 0;
    CHECK(r, s, api->allreduce(w, &v, &sum, 1, PLAIT_I64, PLAIT_SUM, NULL, &cr) == PLAIT_OK, "async coll");
    CHECK(r, s, api->recv(w, &y, 1, PLAIT_F64, left, 2, NULL, &p2) == PLAIT_OK, "recv");
    CHECK(r, s, api->send(w, &x, 1, PLAIT_F64, right, 2, NULL, &p3) == PLAIT_OK, "send");
    CHECK(r, s, api->wait(p2) == PLAIT_OK && api->wait(p3) == PLAIT_OK, "p2p during coll: %s", plait_last_error());
    CHECK(r, s, api->wait(cr) == PLAIT_OK && sum == N * (N - 1) / 2, "coll during p2p");
    /* argument errors */
    CHECK(r, s, api->send(w, &x, 1, PLAIT_F64, r, 1, NULL, NULL) == PLAIT_ERR_INVALID_ARG, "send to self");
    CHECK(r, s, api->send(w, &x, 1, PLAIT_F64, right, 0x80000000u, NULL, NULL) == PLAIT_ERR_INVALID_ARG,
          "reserved tag");
    CHECK(r, s, strstr(plait_last_error(), "reserved") != NULL, "message: %s", plait_last_error());
    CHECK(r, s, api->recv(w, &y, 1, PLAIT_F64, N, 1, NULL, NULL) == PLAIT_ERR_INVALID_ARG, "bad peer");
    CHECK(r, s, api->allreduce(w, &v, &sum, 1, (plait_dtype)99, PLAIT_SUM, NULL, NULL) == PLAIT_ERR_INVALID_ARG,
          "bad dtype");
    CHECK(r, s, api->broadcast(w, &v, 1, PLAIT_I64, N, NULL, NULL) == PLAIT_ERR_INVALID_ARG, "bad root");
    /* argument errors leave the communicator usable */
    CHECK(r, s, api->barrier(w, NULL, NULL) == PLAIT_OK, "barrier after argument errors: %s", plait_last_error());
    plait_comm_free(w);
}

static void test_point_to_point(void **state) {
    (void)state;
    run_ranks(p2p_main);
}

int main(void) {
    plait_host_install();
    api = plait_coll_api_table();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_progress_and_order),
        cmocka_unit_test(test_byte_counters_match_formulas),
        cmocka_unit_test(test_point_to_point),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
