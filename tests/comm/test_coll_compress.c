/*
 * Compressed collectives (coll/compress.h, plait/coll.h's plait_compression).
 *
 * The codec: sizes; bf16 exact on values it can hold; int8 within half a
 * scale step of every value; onebit decodes to the block's root mean square
 * with the value's sign, and with error feedback the running sum of what
 * it sends stays within one block's residual of the running sum of its
 * inputs; a non-finite block decodes as NaN and leaves no residual; the
 * round trip is decode(encode()).
 *
 * The collectives, on in-process ranks placed on one host, 2x2, 3x2 and
 * interleaved hosts (ordered within a host, hierarchical across, ordered
 * again in deterministic mode): every scheme and size gives every rank
 * the same allreduce bits, within the scheme's error of the exact sum; bf16
 * of small integers is exact; reduce_scatter and the bf16 allgather land
 * each block where it belongs; the bytes sent shrink by the scheme's
 * ratio; runs repeat bit for bit; the ordered algorithm's result does not
 * depend on the placement; onebit's error feedback makes the mean of many
 * steps converge to the exact sum; and what cannot be compressed is refused.
 */
#include <math.h>
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
#include "coll/compress.h"
#include "runtime/error.h"
#include "host/host_table.h"

#define MAXR 6

/* ---- the codec ------------------------------------------------------------ */

static uint64_t lcg_next(uint64_t s) { return s * 6364136223846793005ull + 1442695040888963407ull; }
static float lcg_unit(uint64_t s) { return (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static float frand(uint64_t *s) {
    *s = lcg_next(*s);
    return lcg_unit(*s);
}

static void test_codec(void **state) {
    (void)state;
    enum { N = 1000 };
    assert_int_equal(plait_compress_bytes(PLAIT_COMPRESS_BF16, N), 2 * N);
    assert_int_equal(plait_compress_bytes(PLAIT_COMPRESS_INT8, N), 4 * 4 + N);
    assert_int_equal(plait_compress_bytes(PLAIT_COMPRESS_ONEBIT, N), 4 * 16 + 125);
    assert_int_equal(plait_compress_parse("onebit"), PLAIT_COMPRESS_ONEBIT);
    assert_int_equal(plait_compress_parse("fp8"), -1);
    static float x[N], y[N], z[N], res[N];
    static unsigned char enc[4 * N];
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) x[i] = frand(&seed) * (i % 300 == 0 ? 100.0f : 1.0f);
    /* bf16 holds small integers and halves exactly */
    for (int i = 0; i < N; i++) y[i] = (float)(i % 255) - 127.5f;
    plait_compress_encode(PLAIT_COMPRESS_BF16, enc, y, N, NULL);
    plait_compress_decode(PLAIT_COMPRESS_BF16, z, enc, N);
    assert_memory_equal(y, z, sizeof y);
    /* int8: half a step of max|x| / 127 per block */
    plait_compress_encode(PLAIT_COMPRESS_INT8, enc, x, N, NULL);
    plait_compress_decode(PLAIT_COMPRESS_INT8, z, enc, N);
    for (int b = 0; b < N; b += PLAIT_COMPRESS_BLOCK) {
        int e = b + PLAIT_COMPRESS_BLOCK < N ? b + PLAIT_COMPRESS_BLOCK : N;
        float amax = 0;
        for (int i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        for (int i = b; i < e; i++) assert_true(fabsf(z[i] - x[i]) <= 0.5f * amax / 127.0f * 1.0001f);
    }
    /* the round trip is decode(encode()) (int8, onebit with a residual) */
    plait_compress_round_trip(PLAIT_COMPRESS_INT8, y, x, N, NULL);
    assert_memory_equal(y, z, sizeof y);
    memset(res, 0, sizeof res);
    float res2[N] = {0};
    plait_compress_encode(PLAIT_COMPRESS_ONEBIT, enc, x, N, res);
    plait_compress_decode(PLAIT_COMPRESS_ONEBIT, z, enc, N);
    plait_compress_round_trip(PLAIT_COMPRESS_ONEBIT, y, x, N, res2);
    assert_memory_equal(y, z, sizeof y);
    assert_memory_equal(res, res2, sizeof res);
    /* onebit: +-sqrt(mean x^2) of the block; the residual is what was lost */
    for (int b = 0; b < N; b += PLAIT_COMPRESS_BLOCK_ONEBIT) {
        int e = b + PLAIT_COMPRESS_BLOCK_ONEBIT < N ? b + PLAIT_COMPRESS_BLOCK_ONEBIT : N;
        double ms = 0;
        for (int i = b; i < e; i++) ms += (double)x[i] * x[i];
        double rms = sqrt(ms / (e - b));
        for (int i = b; i < e; i++) {
            assert_float_equal(fabsf(z[i]), rms, 1e-5 * rms);
            assert_true((z[i] < 0) == (x[i] < 0));
            assert_float_equal(res[i], x[i] - z[i], 1e-6 * (1 + fabs(x[i])));
        }
    }
    /* error feedback: over 200 encodings of the same input the sum of the
     * decoded values is the sum of the inputs less the residual, and their
     * mean approaches the input (without outliers: a value 100 times its
     * block's others takes its block's mean that many steps to come home) */
    for (int i = 0; i < N; i++) x[i] = frand(&seed);
    plait_compress_round_trip(PLAIT_COMPRESS_ONEBIT, y, x, N, NULL);
    memset(res, 0, sizeof res);
    static double sent[N];
    memset(sent, 0, sizeof sent);
    for (int k = 0; k < 200; k++) {
        plait_compress_encode(PLAIT_COMPRESS_ONEBIT, enc, x, N, res);
        plait_compress_decode(PLAIT_COMPRESS_ONEBIT, z, enc, N);
        for (int i = 0; i < N; i++) sent[i] += z[i];
    }
    double err = 0, err1 = 0;
    for (int i = 0; i < N; i++) {
        err += fabs(sent[i] / 200 - x[i]) / N;
        err1 += fabs(y[i] - x[i]) / N; /* y: one encoding's decoded values, above */
    }
    printf("onebit: mean error %.4f in one encoding, %.4f in the mean of 200 with error feedback\n", err1, err);
    for (int i = 0; i < N; i++) assert_float_equal(sent[i] + res[i], 200.0 * x[i], 1e-3 * 200 * (fabs(x[i]) + 1));
    assert_true(err < err1 / 5);
    /* every pattern of eight signs lands bit for bit (bit j % 8 of byte
     * j / 8, 1 = negative; -0 is not negative), in a block of 64 and in
     * the short last block of a message (whose unused bits are 0) */
    for (int pattern = 0; pattern < 256; pattern++) {
        float v[72];
        for (int i = 0; i < 72; i++) v[i] = (pattern >> (i % 8)) & 1 ? -1.0f - (float)i : (i == 3 ? -0.0f : 1.0f);
        if (!((pattern >> 3) & 1)) v[67] = -0.0f;
        plait_compress_encode(PLAIT_COMPRESS_ONEBIT, enc, v, 69, NULL);
        const unsigned char *bits = enc + 4 * 2; /* after the two blocks' scales */
        for (int b = 0; b < 8; b++) assert_int_equal(bits[b], pattern);
        assert_int_equal(bits[8], pattern & 0x1f);
        plait_compress_decode(PLAIT_COMPRESS_ONEBIT, z, enc, 69);
        for (int i = 0; i < 69; i++) assert_int_equal(z[i] < 0, (pattern >> (i % 8)) & 1);
    }
    /* a non-finite value: its block decodes as NaN, no residual stays */
    x[3] = INFINITY;
    x[300] = 1.0f;
    memset(res, 0, sizeof res);
    plait_compress_encode(PLAIT_COMPRESS_ONEBIT, enc, x, N, res);
    plait_compress_decode(PLAIT_COMPRESS_ONEBIT, z, enc, N);
    assert_true(isnan(z[0]) && isnan(z[63]) && !isnan(z[64]));
    assert_true(res[0] == 0 && res[63] == 0);
    plait_compress_encode(PLAIT_COMPRESS_INT8, enc, x, N, NULL);
    plait_compress_decode(PLAIT_COMPRESS_INT8, z, enc, N);
    assert_true(isnan(z[3]) && !isnan(z[300]));
}

/* ---- the collectives ---------------------------------------------------- */

typedef struct run {
    plait_threads_world *w;
    int n, check;
    const int *hosts;          /* member -> host; NULL = one host */
    plait_coll_kind kind;
    plait_coll_algo algo;
    plait_compression z;
    size_t count;
    int steps, integers;       /* integers: small integer inputs */
    int mismatch;              /* rank 1 asks for another scheme */
    int same;                  /* the same input every step */
    double *mean;              /* rank 0's result averaged over the steps (when set) */
    float *out[MAXR];          /* every rank's result after the last step */
    float *res[MAXR];
    uint64_t bytes[MAXR];
    plait_status st[MAXR];
    char err[MAXR][1024];
} run;

static float input(const run *x, int r, size_t i, int step) {
    if (x->integers) return (float)((int)(i % 13) + 3 * r - 7);
    /* frand's first value from this seed, with no state to point at: the
     * runs' millions of inputs take no stack object a sanitizer guards */
    uint64_t seed = (uint64_t)r * 1000003u + i * 7919u + (uint64_t)step * 104729u + 1;
    return lcg_unit(lcg_next(seed)) * (i % 97 == 0 ? 8.0f : 1.0f);
}

static size_t in_count(const run *x) { return x->kind == PLAIT_COLL_REDUCE_SCATTER ? x->count * (size_t)x->n : x->count; }
static size_t out_count(const run *x) { return x->kind == PLAIT_COLL_ALLGATHER ? x->count * (size_t)x->n : x->count; }

static void rank_main(int r, void *arg) {
    run *x = arg;
    const plait_coll_api *api = plait_coll_api_table();
    plait_comm *c = NULL;
    x->st[r] = plait_threads_comm_world(x->w, r, NULL, &c);
    if (x->st[r] == PLAIT_OK && x->hosts) x->st[r] = plait_comm_set_hosts(c, x->hosts);
    if (x->st[r] == PLAIT_OK && x->check) c->settings.check_collectives = 1;
    size_t ni = in_count(x), no = out_count(x), nr = 2 * x->count * (size_t)x->n;
    float *in = malloc((ni + 1) * sizeof *in);
    x->out[r] = calloc(no + 1, sizeof(float));
    x->res[r] = calloc(nr + 1, sizeof(float));
    for (int step = 0; x->st[r] == PLAIT_OK && step < x->steps; step++) {
        for (size_t i = 0; i < ni; i++) in[i] = input(x, r, i, x->same ? 0 : step);
        plait_coll_opts o = {.struct_size = sizeof o, .algo = x->algo,
                             .compression = x->mismatch && r == 1 ? PLAIT_COMPRESS_BF16 : x->z, .residual = x->res[r]};
        plait_comm_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
        api->stats(c, &before);
        if (x->kind == PLAIT_COLL_ALLREDUCE)
            x->st[r] = api->allreduce(c, in, x->out[r], x->count, PLAIT_F32, PLAIT_SUM, &o, NULL);
        else if (x->kind == PLAIT_COLL_REDUCE_SCATTER)
            x->st[r] = api->reduce_scatter(c, in, x->out[r], x->count, PLAIT_F32, PLAIT_SUM, &o, NULL);
        else
            x->st[r] = api->allgather(c, in, x->out[r], x->count, PLAIT_F32, &o, NULL);
        api->stats(c, &after);
        x->bytes[r] += after.bytes_sent - before.bytes_sent;
        for (size_t i = 0; r == 0 && x->mean && i < no; i++) x->mean[i] += x->out[r][i] / x->steps;
    }
    if (x->st[r] != PLAIT_OK) snprintf(x->err[r], sizeof x->err[r], "%s", plait_last_error());
    free(in);
    plait_comm_free(c);
}

static run *go(int n, const int *hosts, plait_coll_kind kind, plait_coll_algo algo, plait_compression z, size_t count,
               int steps) {
    run *x = calloc(1, sizeof *x);
    assert_non_null(x);
    *x = (run){.w = plait_threads_world_new(n, 60), .n = n, .hosts = hosts, .kind = kind, .algo = algo, .z = z,
               .count = count, .steps = steps};
    return x;
}

static void start(run *x) {
    assert_int_equal(plait_threads_run(x->n, rank_main, x), PLAIT_OK);
}

static void done(run *x) {
    for (int r = 0; r < x->n; r++) {
        free(x->out[r]);
        free(x->res[r]);
    }
    plait_threads_world_free(x->w);
    free(x);
}

static void expect_ok(const run *x) {
    for (int r = 0; r < x->n; r++)
        if (x->st[r] != PLAIT_OK) fail_msg("rank %d: %s", r, x->err[r]);
}

/* Largest error against the exact sum of the last step, over every rank's
 * result, relative to the largest magnitude of a contribution. */
static double worst_error(const run *x) {
    double worst = 0;
    for (int r = 0; r < x->n; r++)
        for (size_t i = 0; i < x->count; i++) {
            size_t g = x->kind == PLAIT_COLL_REDUCE_SCATTER ? (size_t)r * x->count + i : i;
            double want = 0;
            for (int q = 0; q < x->n; q++) want += input(x, q, g, x->steps - 1);
            worst = fmax(worst, fabs(x->out[r][i] - want) / 8.0);
        }
    return worst;
}

static const int one_host4[] = {0, 0, 0, 0};
static const int two_by_two[] = {0, 0, 1, 1};
static const int three_by_two[] = {0, 0, 1, 1, 2, 2};
static const int interleaved[] = {0, 1, 0, 1, 0, 1};

typedef struct layout {
    int n;
    const int *hosts;
} layout;
static const layout layouts[] = {{4, one_host4}, {4, two_by_two}, {6, three_by_two}, {6, interleaved}, {3, NULL}};

/* Every scheme, size and placement: the same allreduce bits on every
 * rank, within the scheme's error; bf16 of small integers exact. */
static void test_allreduce(void **state) {
    (void)state;
    static const size_t counts[] = {1, 7, 300, 5000, (3u << 20) / 4 + 5};
    /* per scheme, relative to the largest input (8): bf16 and int8 round
     * each value and sum a few times; onebit sends signs and block means
     * (what it loses comes back through the error feedback, tested below) */
    static const double tol[] = {0, 0.05, 0.1, 4.0};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int z = PLAIT_COMPRESS_BF16; z <= PLAIT_COMPRESS_ONEBIT; z++) {
                run *x = go(layouts[l].n, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, (plait_compression)z,
                            counts[k], 1);
                start(x);
                expect_ok(x);
                for (int r = 1; r < x->n; r++)
                    if (memcmp(x->out[r], x->out[0], x->count * sizeof(float)))
                        fail_msg("%s, %d ranks (placement %zu), %zu elements: ranks 0 and %d differ",
                                 plait_compress_name((plait_compression)z), x->n, l, x->count, r);
                double e = worst_error(x);
                if (e > tol[z])
                    fail_msg("%s, %d ranks (placement %zu), %zu elements: error %.3g", plait_compress_name((plait_compression)z),
                             x->n, l, x->count, e);
                done(x);
                if (z != PLAIT_COMPRESS_BF16) continue;
                x = go(layouts[l].n, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_BF16,
                       counts[k], 1);
                x->integers = 1;
                start(x);
                expect_ok(x);
                assert_true(worst_error(x) == 0);
                done(x);
            }
}

/* reduce_scatter: each block's owner gets its sum; the bf16 allgather
 * lands every block, its own too, as bf16; integers exact. */
static void test_reduce_scatter_and_allgather(void **state) {
    (void)state;
    static const size_t counts[] = {1, 300, 70000};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            for (int z = PLAIT_COMPRESS_BF16; z <= PLAIT_COMPRESS_ONEBIT; z++) {
                run *x = go(layouts[l].n, layouts[l].hosts, PLAIT_COLL_REDUCE_SCATTER, PLAIT_ALGO_AUTO,
                            (plait_compression)z, counts[k], 1);
                x->integers = z != PLAIT_COMPRESS_ONEBIT;
                start(x);
                expect_ok(x);
                double e = worst_error(x);
                if (z == PLAIT_COMPRESS_BF16 ? e != 0 : z == PLAIT_COMPRESS_INT8 ? e > 0.05 : e > 4.0)
                    fail_msg("reduce_scatter %s, %d ranks (placement %zu), %zu elements: error %.3g",
                             plait_compress_name((plait_compression)z), x->n, l, counts[k], e);
                done(x);
            }
            run *x = go(layouts[l].n, layouts[l].hosts, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_BF16,
                        counts[k], 1);
            start(x);
            expect_ok(x);
            for (int r = 0; r < x->n; r++)
                for (int q = 0; q < x->n; q++)
                    for (size_t i = 0; i < x->count; i++) {
                        float v = input(x, q, i, 0), got = x->out[r][(size_t)q * x->count + i];
                        if (got != plait_bf16_to_f32(plait_f32_to_bf16(v)))
                            fail_msg("allgather bf16 on %d ranks: rank %d has block %d element %zu = %g, not bf16(%g)",
                                     x->n, r, q, i, (double)got, (double)v);
                    }
            done(x);
        }
}

/* The bytes on the wire against float32 through the same algorithm:
 * bf16 about half, int8 about a quarter, onebit about 1/21, flat
 * (ordered) and hierarchical (only the links between hosts compressed: a
 * quarter of the bytes of 2 hosts x 2 cross them both ways, the rest stay
 * float32). */
static void test_bytes(void **state) {
    (void)state;
    size_t count = 1u << 18;
    for (size_t l = 0; l < 2; l++) {
        run *ref = go(4, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, l ? PLAIT_ALGO_HIER : PLAIT_ALGO_ORDERED,
                      PLAIT_COMPRESS_NONE, count, 1);
        start(ref);
        expect_ok(ref);
        static const double lo[] = {0, 0.49, 0.25, 0.046}, hi[] = {0, 0.51, 0.27, 0.049};
        for (int z = PLAIT_COMPRESS_BF16; z <= PLAIT_COMPRESS_ONEBIT; z++) {
            run *x = go(4, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, (plait_compression)z, count, 1);
            start(x);
            expect_ok(x);
            double ratio = (double)x->bytes[0] / (double)ref->bytes[0];
            printf("allreduce of %zu floats on %s: %s sends %.4f of float32's bytes\n", count,
                   l ? "2 hosts x 2" : "one host", plait_compress_name((plait_compression)z), ratio);
            if (ratio < lo[z] || ratio > hi[z])
                fail_msg("%s sends %.4f of float32's bytes", plait_compress_name((plait_compression)z), ratio);
            done(x);
        }
        done(ref);
    }
}

/* Deterministic: a run repeats bit for bit, residuals included; the
 * ordered algorithm gives the same bits wherever the ranks sit. */
static void test_deterministic(void **state) {
    (void)state;
    for (int z = PLAIT_COMPRESS_BF16; z <= PLAIT_COMPRESS_ONEBIT; z++) {
        run *a = go(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, (plait_compression)z, 70001, 3);
        run *b = go(4, two_by_two, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, (plait_compression)z, 70001, 3);
        run *o1 = go(4, one_host4, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_ORDERED, (plait_compression)z, 70001, 3);
        run *o2 = go(4, interleaved, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_ORDERED, (plait_compression)z, 70001, 3);
        start(a), start(b), start(o1), start(o2);
        expect_ok(a), expect_ok(b), expect_ok(o1), expect_ok(o2);
        for (int r = 0; r < 4; r++) {
            assert_memory_equal(a->out[r], b->out[r], a->count * sizeof(float));
            assert_memory_equal(a->res[r], b->res[r], 2 * a->count * sizeof(float));
            assert_memory_equal(o1->out[r], o2->out[r], a->count * sizeof(float));
            assert_memory_equal(o1->res[r], o2->res[r], 2 * a->count * sizeof(float));
        }
        done(a), done(b), done(o1), done(o2);
    }
}

/* onebit with error feedback: the mean over many steps of the same input
 * approaches the exact sum, where one step alone is off by the block's
 * root mean square. */
static void test_onebit_feedback(void **state) {
    (void)state;
    for (size_t l = 0; l < 2; l++) {
        run *one = go(4, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_ONEBIT, 100000, 1);
        run *x = go(4, layouts[l].hosts, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_ONEBIT, 100000, 200);
        x->same = 1;
        x->mean = calloc(x->count, sizeof *x->mean);
        assert_non_null(x->mean);
        start(one), start(x);
        expect_ok(one), expect_ok(x);
        double e1 = 0, em = 0;
        for (size_t i = 0; i < x->count; i++) {
            double want = 0;
            for (int q = 0; q < 4; q++) want += input(x, q, i, 0);
            e1 += fabs(one->out[0][i] - want) / (double)x->count;
            em += fabs(x->mean[i] - want) / (double)x->count;
        }
        printf("onebit on %s: mean error %.4f after one step, %.4f averaged over 200\n", l ? "2 hosts x 2" : "one host",
               e1, em);
        assert_true(em < e1 / 10);
        free(x->mean);
        done(one), done(x);
    }
}

/* Refusals: onebit without its state, int8 in an allgather, f64; ranks
 * asking for different schemes are caught by [comm] check_collectives. */
static void test_refused(void **state) {
    (void)state;
    run *x = go(2, NULL, PLAIT_COLL_ALLGATHER, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_INT8, 10, 1);
    start(x);
    assert_int_equal(x->st[0], PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(x->err[0], "an allgather takes bf16 only"));
    done(x);
    x = go(4, NULL, PLAIT_COLL_ALLREDUCE, PLAIT_ALGO_AUTO, PLAIT_COMPRESS_INT8, 1000, 1);
    x->check = 1;
    x->mismatch = 1;
    start(x);
    assert_int_equal(x->st[0], PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(x->err[0], "compressed int8"));
    assert_non_null(strstr(x->err[0], "compressed bf16"));
    done(x);
    const plait_coll_api *api = plait_coll_api_table();
    plait_threads_world *w = plait_threads_world_new(1, 10);
    plait_comm *c = NULL;
    assert_int_equal(plait_threads_comm_world(w, 0, NULL, &c), PLAIT_OK);
    double d[4] = {0};
    float f[4] = {0};
    plait_coll_opts o = {.struct_size = sizeof o, .compression = PLAIT_COMPRESS_BF16};
    assert_int_equal(api->allreduce(c, d, d, 4, PLAIT_F64, PLAIT_SUM, &o, NULL), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "not f64 sum"));
    o.compression = PLAIT_COMPRESS_ONEBIT;
    assert_int_equal(api->allreduce(c, f, f, 4, PLAIT_F32, PLAIT_SUM, &o, NULL), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "needs its error-feedback state"));
    o.compression = 9;
    assert_int_equal(api->allreduce(c, f, f, 4, PLAIT_F32, PLAIT_SUM, &o, NULL), PLAIT_ERR_INVALID_ARG);
    plait_comm_free(c);
    plait_threads_world_free(w);
}

int main(void) {
    plait_host_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_reduce_scatter_and_allgather),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_onebit_feedback),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
