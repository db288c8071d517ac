/*
 * Sub-communicators: split(color, key) membership and ordering, color < 0,
 * two splits used at once (interleaved asynchronous collectives, and from
 * two threads per rank concurrently), a split of a split, and the ordered
 * allreduce bit for bit against a local evaluation of the canonical tree in
 * the child's rank order.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "comm/comm_threads.h"
#include "runtime/error.h"
#include "host/host_table.h"

#define N 6
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

/* Deterministic float with a wide exponent range, so summation order shows. */
static float contribution(int world_rank, size_t i) {
    uint64_t x = (uint64_t)world_rank * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 32;
    uint32_t bits = ((uint32_t)x & 0x80ffffffu) | ((uint32_t)(115 + (x >> 40) % 20) << 23);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float tree_value(const int *world_of, int lo, int hi, size_t i) {
    if (hi - lo == 1) return contribution(world_of[lo], i);
    int p = 1;
    while (p * 2 < hi - lo) p *= 2;
    return tree_value(world_of, lo, lo + p, i) + tree_value(world_of, lo + p, hi, i);
}

typedef struct driver {
    plait_comm *comm;
    int world_rank, iters;
    int ok;
    char err[MAXERR];
} driver;

/* Many allreduces on one communicator; values identify rank and iteration. */
static void *drive(void *p) {
    driver *d = p;
    int n = api->size(d->comm);
    d->ok = 1;
    for (int it = 0; it < d->iters && d->ok; it++) {
        int64_t v[3] = {d->world_rank, it, 1}, out[3];
        if (api->allreduce(d->comm, v, out, 3, PLAIT_I64, PLAIT_SUM, NULL, NULL) != PLAIT_OK) {
            snprintf(d->err, MAXERR, "%s", plait_last_error());
            d->ok = 0;
            break;
        }
        int64_t want0 = 0;
        for (int q = 0; q < n; q++) want0 += api->world_rank(d->comm, q);
        if (out[0] != want0 || out[1] != (int64_t)it * n || out[2] != n) {
            snprintf(d->err, MAXERR, "'%s' iteration %d: got %lld %lld %lld", api->name(d->comm), it,
                     (long long)out[0], (long long)out[1], (long long)out[2]);
            d->ok = 0;
        }
    }
    return NULL;
}

static void rank_main(int r, void *arg) {
    shared *s = arg;
    plait_comm *world = NULL, *a = NULL, *b = NULL, *c = NULL, *aa = NULL;
    plait_status st = plait_threads_comm_world(s->w, r, NULL, &world);
    CHECK(r, s, st == PLAIT_OK, "world: %s", plait_last_error());
    if (st != PLAIT_OK) return;
    /* A: even/odd ranks, reversed order; B: halves in order; C: rank 5 out */
    st = api->split(world, r % 2, -r, "parity", &a);
    CHECK(r, s, st == PLAIT_OK && a, "split A: %s", plait_last_error());
    st = api->split(world, r / 3, r, "half", &b);
    CHECK(r, s, st == PLAIT_OK && b, "split B: %s", plait_last_error());
    st = api->split(world, r == 5 ? -1 : 0, 0, "most", &c);
    CHECK(r, s, st == PLAIT_OK, "split C: %s", plait_last_error());
    if (!a || !b) goto out;
    CHECK(r, s, (r == 5) == (c == NULL), "color -1 must give no communicator");
    if (c) CHECK(r, s, api->size(c) == 5 && api->rank(c) == r, "C has size %d rank %d", api->size(c), api->rank(c));
    /* A = {4,2,0} or {5,3,1} in that order */
    CHECK(r, s, api->size(a) == 3, "A size %d", api->size(a));
    CHECK(r, s, api->rank(a) == 2 - r / 2, "A rank %d, want %d", api->rank(a), 2 - r / 2);
    for (int q = 0; q < 3; q++) {
        int want = (r % 2) + 2 * (2 - q);
        CHECK(r, s, api->world_rank(a, q) == want, "A member %d is world %d, want %d", q, api->world_rank(a, q), want);
        CHECK(r, s, api->world_rank(b, q) == (r / 3) * 3 + q, "B member %d", q);
    }
    CHECK(r, s, strcmp(api->name(a), "parity") == 0, "name");

    /* interleaved asynchronous collectives on A, B and the world */
    {
        enum { K = 8 };
        plait_request *ra[K], *rb[K], *rw[K];
        int64_t va[K], vb[K], vw[K], oa[K], ob[K], ow[K];
        for (int k = 0; k < K; k++) {
            va[k] = r * 10 + k, vb[k] = r * 100 + k, vw[k] = r + k;
            st = api->allreduce(a, &va[k], &oa[k], 1, PLAIT_I64, PLAIT_SUM, NULL, &ra[k]);
            CHECK(r, s, st == PLAIT_OK, "async A: %s", plait_last_error());
            st = api->allreduce(b, &vb[k], &ob[k], 1, PLAIT_I64, PLAIT_MAX, NULL, &rb[k]);
            CHECK(r, s, st == PLAIT_OK, "async B: %s", plait_last_error());
            st = api->allreduce(world, &vw[k], &ow[k], 1, PLAIT_I64, PLAIT_MIN, NULL, &rw[k]);
            CHECK(r, s, st == PLAIT_OK, "async world: %s", plait_last_error());
        }
        for (int k = K - 1; k >= 0; k--) { /* finish in any order */
            CHECK(r, s, api->wait(rw[k]) == PLAIT_OK, "wait world: %s", plait_last_error());
            CHECK(r, s, api->wait(rb[k]) == PLAIT_OK, "wait B: %s", plait_last_error());
            CHECK(r, s, api->wait(ra[k]) == PLAIT_OK, "wait A: %s", plait_last_error());
        }
        for (int k = 0; k < K; k++) {
            int64_t sa = 0;
            for (int q = r % 2; q < N; q += 2) sa += q * 10 + k;
            CHECK(r, s, oa[k] == sa, "A sum %d: %lld want %lld", k, (long long)oa[k], (long long)sa);
            CHECK(r, s, ob[k] == ((r / 3) * 3 + 2) * 100 + k, "B max %d: %lld", k, (long long)ob[k]);
            CHECK(r, s, ow[k] == k, "world min %d", k);
        }
    }

    /* A and B driven from two threads of this rank at the same time */
    {
        driver da = {a, r, 60, 0, ""}, db = {b, r, 60, 0, ""};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, drive, &da);
        pthread_create(&tb, NULL, drive, &db);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(r, s, da.ok, "thread on A: %s", da.err);
        CHECK(r, s, db.ok, "thread on B: %s", db.err);
    }

    /* ordered allreduce on A: bit-identical to the tree in A's rank order,
     * across several chunks per segment (ORDERED_CHUNK is 64K floats) */
    {
        size_t count = 3 * 70001;
        float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
        for (size_t i = 0; i < count; i++) in[i] = contribution(r, i);
        plait_coll_opts o = {.struct_size = sizeof o, .algo = PLAIT_ALGO_ORDERED};
        st = api->allreduce(a, in, out, count, PLAIT_F32, PLAIT_SUM, &o, NULL);
        CHECK(r, s, st == PLAIT_OK, "ordered: %s", plait_last_error());
        int world_of[3];
        for (int q = 0; q < 3; q++) world_of[q] = api->world_rank(a, q);
        size_t bad = 0, differs_from_rank_sum = 0;
        for (size_t i = 0; i < count; i++) {
            float want = tree_value(world_of, 0, 3, i);
            bad += memcmp(&want, &out[i], 4) != 0;
            float plain = contribution(world_of[0], i) + (contribution(world_of[1], i) + contribution(world_of[2], i));
            differs_from_rank_sum += memcmp(&plain, &want, 4) != 0;
        }
        CHECK(r, s, bad == 0, "ordered allreduce: %zu elements differ from the canonical tree", bad);
        CHECK(r, s, differs_from_rank_sum > 0, "test data cannot tell summation orders apart");
        /* the same on the 5-member C (non-power-of-two tree), reduce_scatter form */
        if (c) {
            size_t per = 70001;
            float *in5 = malloc(5 * per * sizeof(float)), *out5 = malloc(per * sizeof(float));
            for (size_t i = 0; i < 5 * per; i++) in5[i] = contribution(r, i);
            st = api->reduce_scatter(c, in5, out5, per, PLAIT_F32, PLAIT_SUM, &o, NULL);
            CHECK(r, s, st == PLAIT_OK, "ordered reduce_scatter: %s", plait_last_error());
            int w5[5] = {0, 1, 2, 3, 4};
            size_t bad5 = 0;
            for (size_t i = 0; i < per; i++) {
                float want = tree_value(w5, 0, 5, (size_t)r * per + i);
                bad5 += memcmp(&want, &out5[i], 4) != 0;
            }
            CHECK(r, s, bad5 == 0, "ordered reduce_scatter: %zu elements differ", bad5);
            free(in5), free(out5);
        }
        free(in), free(out);
    }

    /* a split of a split */
    st = api->split(a, api->rank(a) == 0 ? 0 : 1, 0, "sub", &aa);
    CHECK(r, s, st == PLAIT_OK && aa, "split of A: %s", plait_last_error());
    if (aa) {
        int64_t one = 1, total = 0;
        st = api->allreduce(aa, &one, &total, 1, PLAIT_I64, PLAIT_SUM, NULL, NULL);
        CHECK(r, s, st == PLAIT_OK && total == (api->rank(a) == 0 ? 1 : 2), "allreduce on A's split: %lld",
              (long long)total);
        api->comm_free(aa);
    }
out:
    api->comm_free(c);
    api->comm_free(b);
    api->comm_free(a);
    plait_comm_stats stats = {.struct_size = sizeof stats};
    api->stats(world, &stats);
    CHECK(r, s, stats.collectives == 3 + 8, "world counted %llu collectives", (unsigned long long)stats.collectives);
    plait_comm_free(world);
}

static void test_two_splits_at_once(void **state) {
    (void)state;
    shared *s = calloc(1, sizeof *s);
    s->w = plait_threads_world_new(N, 30.0);
    assert_int_equal(plait_threads_run(N, rank_main, s), PLAIT_OK);
    for (int r = 0; r < N; r++)
        if (s->err[r][0]) fail_msg("rank %d: %s", r, s->err[r]);
    plait_threads_world_free(s->w);
    free(s);
}

int main(void) {
    plait_host_install();
    api = plait_coll_api_table();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_splits_at_once)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
