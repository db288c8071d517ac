/*
 * Reduction kernels and half-precision conversions: exhaustive f16 round
 * trips, round-to-nearest-even against a brute-force nearest search, every
 * dtype × operator against a scalar reference (with aliasing), integer
 * wrap-around, AVG's final division, and the ordered tree bit for bit
 * against the recursive definition.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "coll/coll.h"
#include "coll/sum_tree.h"
#include "coll/reduce.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float bits_to_float(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint32_t float_to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static void test_f16_round_trip_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = plait_f16_to_f32((uint16_t)h);
        uint16_t back = plait_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN stays NaN */
            assert_true(isnan(f));
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            continue;
        }
        if (back != h) fail_msg("f16 %04x -> %g -> %04x", h, (double)f, back);
    }
    /* known values */
    assert_true(plait_f16_to_f32(0x3c00) == 1.0f);
    assert_true(plait_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(plait_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(plait_f16_to_f32(0xc000) == -2.0f);
}

/* Nearest finite-or-infinite f16 to x by brute force, ties to even. */
static uint16_t nearest_f16(float x) {
    static double values[0x7c01];
    static int ready;
    if (!ready) {
        for (int h = 0; h <= 0x7c00; h++) values[h] = plait_f16_to_f32((uint16_t)h);
        ready = 1;
    }
    double ax = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    /* values[] is increasing in h for h <= 0x7c00; treat infinity as 65536 for rounding */
    int lo = 0, hi = 0x7c00;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (values[mid] <= ax) lo = mid; else hi = mid;
    }
    double vlo = values[lo], vhi = hi == 0x7c00 ? 65536.0 : values[hi];
    if (ax >= vhi) return (uint16_t)(sign | hi);
    double dlo = ax - vlo, dhi = vhi - ax;
    int pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return (uint16_t)(sign | pick);
}

static void test_f16_rounding(void **state) {
    (void)state;
    float edge[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 70000.0f, 0x1p-24f, 0x1p-25f,
                    0x1.8p-25f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-11f,
                    1.0f + 0x1p-12f, 2049.0f, 2051.0f, 1e-10f, -3.14159f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        if (plait_f32_to_f16(edge[i]) != nearest_f16(edge[i]))
            fail_msg("f32 %a -> f16 %04x, nearest is %04x", (double)edge[i], plait_f32_to_f16(edge[i]),
                     nearest_f16(edge[i]));
    for (int i = 0; i < 200000; i++) {
        /* exponents around the f16 range, random mantissas */
        uint32_t b = (next_u32() & 0x807fffffu) | ((uint32_t)(100 + next_u32() % 50) << 23);
        float x = bits_to_float(b);
        if (plait_f32_to_f16(x) != nearest_f16(x))
            fail_msg("f32 %a -> f16 %04x, nearest is %04x", (double)x, plait_f32_to_f16(x), nearest_f16(x));
    }
    assert_true(isnan(plait_f16_to_f32(plait_f32_to_f16(NAN))));
}

static void test_bf16_rounding(void **state) {
    (void)state;
    for (int i = 0; i < 500000; i++) {
        uint32_t b = next_u32() ^ (next_u32() << 16);
        float x = bits_to_float(b);
        if (isnan(x)) {
            assert_true(isnan(plait_bf16_to_f32(plait_f32_to_bf16(x))));
            continue;
        }
        uint32_t down = b & 0xffff0000u, up = down + 0x10000u;
        double dx = x, ddown = bits_to_float(down);
        double dup = (up & 0x7f800000u) == 0x7f800000u && (down & 0x7fffffffu) == 0x7f7f0000u
                         ? copysign(0x1p128, dx) /* rounds up into infinity */
                         : (double)bits_to_float(up);
        if (isinf(x)) {
            assert_int_equal(plait_f32_to_bf16(x), b >> 16);
            continue;
        }
        double e_down = fabs(dx - ddown), e_up = fabs(dup - dx);
        uint32_t want = e_down < e_up ? down : e_up < e_down ? up : ((down >> 16) & 1 ? up : down);
        if (plait_f32_to_bf16(x) != (uint16_t)(want >> 16))
            fail_msg("f32 %a (%08x) -> bf16 %04x, want %04x", dx, b, plait_f32_to_bf16(x), want >> 16);
    }
    assert_int_equal(plait_f32_to_bf16(1.0f), 0x3f80);
    assert_true(plait_bf16_to_f32(0x4049) == bits_to_float(0x40490000u));
    (void)float_to_bits;
}

/* Reference of one element: the contract, written out per type. */
static void ref_elem(void *dst, const void *a, const void *b, size_t i, plait_dtype dt, plait_redop op) {
#define REF(T, CAST)                                                                             \
    do {                                                                                         \
        T x = ((const T *)a)[i], y = ((const T *)b)[i], r;                                       \
        switch (op) {                                                                            \
        case PLAIT_PROD: r = (T)CAST(x) * CAST(y); break;                                        \
        case PLAIT_MIN: r = y < x ? y : x; break;                                                \
        case PLAIT_MAX: r = y > x ? y : x; break;                                                \
        default: r = (T)(CAST(x) + CAST(y)); break;                                              \
        }                                                                                        \
        ((T *)dst)[i] = r;                                                                       \
    } while (0)
    switch (dt) {
    case PLAIT_F32: REF(float, (float)); break;
    case PLAIT_F64: REF(double, (double)); break;
    case PLAIT_I32: REF(int32_t, (uint32_t)); break;
    case PLAIT_I64: REF(int64_t, (uint64_t)); break;
    case PLAIT_U8: REF(uint8_t, (unsigned)); break;
    case PLAIT_F16:
    case PLAIT_BF16: {
        int h = dt == PLAIT_F16;
        float x = h ? plait_f16_to_f32(((const uint16_t *)a)[i]) : plait_bf16_to_f32(((const uint16_t *)a)[i]);
        float y = h ? plait_f16_to_f32(((const uint16_t *)b)[i]) : plait_bf16_to_f32(((const uint16_t *)b)[i]);
        float r = op == PLAIT_PROD ? x * y : op == PLAIT_MIN ? (y < x ? y : x) : op == PLAIT_MAX ? (y > x ? y : x) : x + y;
        ((uint16_t *)dst)[i] = h ? plait_f32_to_f16(r) : plait_f32_to_bf16(r);
        break;
    }
    default: break;
    }
#undef REF
}

static void random_fill(void *buf, size_t n, plait_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        float f = (float)((int)(next_u32() % 2001) - 1000) / 37.0f;
        switch (dt) {
        case PLAIT_F32: ((float *)buf)[i] = f; break;
        case PLAIT_F64: ((double *)buf)[i] = (double)f * 1.0000001; break;
        case PLAIT_F16: ((uint16_t *)buf)[i] = plait_f32_to_f16(f); break;
        case PLAIT_BF16: ((uint16_t *)buf)[i] = plait_f32_to_bf16(f); break;
        case PLAIT_I32: ((int32_t *)buf)[i] = (int32_t)next_u32(); break;
        case PLAIT_I64: ((int64_t *)buf)[i] = (int64_t)(((uint64_t)next_u32() << 32) | next_u32()); break;
        case PLAIT_U8: ((uint8_t *)buf)[i] = (uint8_t)next_u32(); break;
        default: break;
        }
    }
}

static void test_kernels_every_dtype_and_op(void **state) {
    (void)state;
    const size_t n = 1031; /* not a multiple of any block or vector width */
    for (int dt = 0; dt < PLAIT_DTYPE_COUNT_V1; dt++) {
        size_t esz = plait_dtype_size((plait_dtype)dt);
        unsigned char *a = malloc(n * esz), *b = malloc(n * esz), *d = malloc(n * esz),
                      *want = malloc(n * esz), *alias = malloc(n * esz);
        for (int op = 0; op < PLAIT_REDOP_COUNT_V1; op++) {
            random_fill(a, n, (plait_dtype)dt);
            random_fill(b, n, (plait_dtype)dt);
            for (size_t i = 0; i < n; i++) ref_elem(want, a, b, i, (plait_dtype)dt, (plait_redop)op);
            plait_reduce(d, a, b, n, (plait_dtype)dt, (plait_redop)op);
            if (memcmp(d, want, n * esz)) fail_msg("%s %s differs", plait_dtype_name(dt), plait_redop_name(op));
            memcpy(alias, a, n * esz); /* dst == a */
            plait_reduce(alias, alias, b, n, (plait_dtype)dt, (plait_redop)op);
            if (memcmp(alias, want, n * esz)) fail_msg("%s %s dst==a differs", plait_dtype_name(dt), plait_redop_name(op));
            memcpy(alias, b, n * esz); /* dst == b */
            plait_reduce(alias, a, alias, n, (plait_dtype)dt, (plait_redop)op);
            if (memcmp(alias, want, n * esz)) fail_msg("%s %s dst==b differs", plait_dtype_name(dt), plait_redop_name(op));
        }
        free(a), free(b), free(d), free(want), free(alias);
    }
}

static void test_integer_wrap_and_avg(void **state) {
    (void)state;
    int32_t a32[2] = {INT32_MAX, -7}, b32[2] = {1, 0}, d32[2];
    plait_reduce(d32, a32, b32, 2, PLAIT_I32, PLAIT_SUM);
    assert_int_equal(d32[0], INT32_MIN);
    int64_t a64 = INT64_MAX, b64 = 2, d64;
    plait_reduce(&d64, &a64, &b64, 1, PLAIT_I64, PLAIT_PROD);
    assert_int_equal(d64, -2);
    uint8_t au = 200, bu = 100, du;
    plait_reduce(&du, &au, &bu, 1, PLAIT_U8, PLAIT_SUM);
    assert_int_equal(du, 44);
    /* AVG truncates toward zero for integers and divides once for floats */
    int32_t v[3] = {-7, 7, 8};
    plait_reduce_finish_avg(v, 3, PLAIT_I32, 2);
    assert_int_equal(v[0], -3);
    assert_int_equal(v[1], 3);
    assert_int_equal(v[2], 4);
    float f = 1.0f;
    plait_reduce_finish_avg(&f, 1, PLAIT_F32, 3);
    assert_true(f == 1.0f / 3.0f);
    uint16_t h = plait_f32_to_f16(1.0f);
    plait_reduce_finish_avg(&h, 1, PLAIT_F16, 3);
    assert_int_equal(h, plait_f32_to_f16(1.0f / 3.0f));
    /* AVG reduces like SUM */
    float x = 1.5f, y = 2.25f, z;
    plait_reduce(&z, &x, &y, 1, PLAIT_F32, PLAIT_AVG);
    assert_true(z == 3.75f);
}

/* The recursive definition, element by element. */
static float tree_ref(float *const *leaves, int lo, int hi, size_t e) {
    if (hi - lo == 1) return leaves[lo][e];
    int p = 1;
    while (p * 2 < hi - lo) p *= 2;
    float x = tree_ref(leaves, lo, lo + p, e), y = tree_ref(leaves, lo + p, hi, e);
    return x + y;
}

static void test_ordered_tree_matches_definition(void **state) {
    (void)state;
    const size_t count = 37;
    for (int n = 1; n <= 20; n++) {
        float *leaf[20], *work[20], dst[37];
        for (int i = 0; i < n; i++) {
            leaf[i] = malloc(count * sizeof(float));
            work[i] = malloc(count * sizeof(float));
            for (size_t e = 0; e < count; e++) /* wildly different magnitudes: order matters */
                leaf[i][e] = bits_to_float((next_u32() & 0x80ffffffu) | ((uint32_t)(110 + next_u32() % 30) << 23));
        }
        float want[37];
        for (size_t e = 0; e < count; e++) want[e] = tree_ref(leaf, 0, n, e);
        plait_sum_tree_fold(dst, (const void *const *)leaf, (void *const *)work, n, count, PLAIT_F32, PLAIT_SUM);
        if (memcmp(dst, want, sizeof want)) fail_msg("n=%d: ordered tree differs from the definition", n);
        /* a left-to-right sum differs for some n, so the test can tell orders apart */
        for (int i = 0; i < n; i++) free(leaf[i]), free(work[i]);
    }
    /* dst aliasing a work buffer, leaves being the work buffers */
    float a[3][4] = {{1e8f, 1, 2, 3}, {-1e8f, 4, 5, 6}, {1, 7, 8, 9}};
    float *leaves[3] = {a[0], a[1], a[2]};
    float want0 = (1e8f + -1e8f) + 1.0f;
    plait_sum_tree_fold(a[0], (const void *const *)leaves, (void *const *)leaves, 3, 4, PLAIT_F32, PLAIT_SUM);
    assert_true(a[0][0] == want0);
    assert_true(a[0][3] == 18.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_round_trip_exhaustive),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_kernels_every_dtype_and_op),
        cmocka_unit_test(test_integer_wrap_and_avg),
        cmocka_unit_test(test_ordered_tree_matches_definition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
