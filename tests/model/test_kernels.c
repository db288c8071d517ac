/*
 * Every kernel's forward against a double-precision reference, and every
 * backward against central finite differences of that reference (exact to
 * ~1e-9, so the float kernels are held to tight tolerances). Also: sgemm
 * against a naive product, thread-count invariance, accumulate (+=)
 * semantics, and the vocabulary-parallel pieces against the whole. The
 * fused attention's kernels are test_kernels_attention.c's, the Llama
 * family's test_kernels_llama.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/kernel_check.h"

/* ---- sgemm --------------------------------------------------------------- */

static void naive_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       const float *C0, int64_t ldc, double *out) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            out[i * N + j] = alpha * s + beta * (double)C0[i * ldc + j];
        }
}

static void test_sgemm(void **state) {
    (void)state;
    /* small (one call), halved (330 x 200 x 150: 2 tiles, the second
     * ragged) and large shapes (1040 x 780 x 400: 4 tiles, ragged at both
     * edges), all transposes */
    const int64_t shapes[][3] = {{3, 5, 7},      {200, 130, 150}, {96, 330, 70},
                                 {257, 64, 129}, {330, 200, 150}, {1040, 780, 400}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                arr A = arr_rand((size_t)(ta ? K : M) * lda, 1, 0);
                arr B = arr_rand((size_t)(tb ? N : K) * ldb, 1, 0);
                arr C = arr_rand((size_t)M * ldc, 1, 0);
                double *want = dzeros((size_t)(M * N));
                naive_gemm(ta, tb, M, N, K, 0.5f, A.f, lda, B.f, ldb, 0.25f, C.f, ldc, want);
                float *c1 = fzeros((size_t)(M * ldc)), *c2 = fzeros((size_t)(M * ldc));
                memcpy(c1, C.f, (size_t)(M * ldc) * sizeof(float));
                memcpy(c2, C.f, (size_t)(M * ldc) * sizeof(float));
                plait_kernels_set_threads(1);
                plait_k_sgemm(ta, tb, M, N, K, 0.5f, A.f, lda, B.f, ldb, 0.25f, c1, ldc);
                for (int t = 2; t <= 8; t += t < 3 ? 1 : 5) { /* 2, 3, 8 threads */
                    memcpy(c2, C.f, (size_t)(M * ldc) * sizeof(float));
                    plait_kernels_set_threads(t);
                    plait_k_sgemm(ta, tb, M, N, K, 0.5f, A.f, lda, B.f, ldb, 0.25f, c2, ldc);
                    assert_memory_equal(c1, c2, (size_t)(M * ldc) * sizeof(float));
                }
                float *packed = fzeros((size_t)(M * N));
                for (int64_t i = 0; i < M; i++) {
                    memcpy(packed + i * N, c1 + i * ldc, (size_t)N * sizeof(float));
                    for (int64_t j = N; j < ldc; j++) /* padding columns untouched */
                        assert_true(c1[i * ldc + j] == C.f[i * ldc + j]);
                }
                expect_close2("sgemm", packed, want, (size_t)(M * N), 1e-5, 1e-5);
                free(packed);
                free(c1);
                free(c2);
                free(want);
                arr_free(&A);
                arr_free(&B);
                arr_free(&C);
            }
    plait_kernels_set_threads(1);
}

/* The tile partition: a function of the shape alone, enough tiles for 64
 * threads on a training-sized product, covering C exactly, none tiny. */
static void test_sgemm_tiles(void **state) {
    (void)state;
    int64_t tm, tn;
    /* the shape test_sgemm checks against the reference is really cut */
    assert_int_equal(plait_k_sgemm_tiles(1040, 780, 400, &tm, &tn), 4);
    assert_true(1040 % tm != 0 && 780 % tn != 0);
    /* GPT-2 124M's products at batch 16 x 1024: enough tiles for 64 threads */
    int64_t n = plait_k_sgemm_tiles(16384, 2304, 768, &tm, &tn);
    assert_true(n >= 64);
    assert_int_equal(n, ((16384 + tm - 1) / tm) * ((2304 + tn - 1) / tn));
    assert_true(tm * tn * 768 >= (1 << 26));
    assert_true(tm % 32 == 0 && tn % 32 == 0);
    /* the weight gradient's shape (OC x C over K = B*T) too */
    assert_true(plait_k_sgemm_tiles(2304, 768, 16384, NULL, NULL) >= 64);
    /* small products stay one call */
    assert_int_equal(plait_k_sgemm_tiles(3, 5, 7, NULL, NULL), 1);
    assert_int_equal(plait_k_sgemm_tiles(64, 64, 64, &tm, &tn), 1);
    assert_true(tm == 64 && tn == 64);
    assert_int_equal(plait_k_sgemm_tiles(256, 256, 127, NULL, NULL), 1); /* just under 2^23 */
    /* from 2^23 to 2^27 multiply-adds, two tiles of at least half of it
     * (llama-tiny's q and o products, its head, a ragged one) */
    const int64_t halved[][3] = {{1024, 128, 128}, {1024, 256, 128}, {330, 200, 150}, {256, 256, 128}};
    for (size_t s = 0; s < sizeof halved / sizeof halved[0]; s++) {
        const int64_t M = halved[s][0], N = halved[s][1], K = halved[s][2];
        assert_int_equal(plait_k_sgemm_tiles(M, N, K, &tm, &tn), 2);
        assert_true(2 * tm * tn * K >= M * N * K);
    }
    /* from 2^27 on, tiles of 2^26 as before: the shortest such product
     * (gpt-small's attention output) in two, one of 2^28 in four */
    assert_int_equal(plait_k_sgemm_tiles(2048, 256, 256, &tm, &tn), 2);
    assert_int_equal(plait_k_sgemm_tiles(2048, 512, 256, &tm, &tn), 4);
    assert_true(tm * tn * 256 >= (1 << 26));
    /* the thread count plays no part */
    int64_t tm2, tn2;
    plait_kernels_set_threads(3);
    assert_int_equal(plait_k_sgemm_tiles(16384, 2304, 768, &tm2, &tn2), n);
    plait_kernels_set_threads(1);
    plait_k_sgemm_tiles(16384, 2304, 768, &tm, &tn);
    assert_true(tm == tm2 && tn == tn2);
}

/* The exact accumulator's value is its exact sum rounded once to the
 * nearest double: one float's square exactly, ties to even, a bit below
 * the tie's position breaking it, carries across 64-bit words; and within
 * an ulp of a long double sum of random values over the whole range. */
static void test_sumsq_value_rounding(void **state) {
    (void)state;
    plait_sumsq_acc acc;
    const float xs[] = {1.0f, 3.0f, 0.1f, 1e-38f, 1e-45f, 3.4e38f, -7.25e-3f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        memset(&acc, 0, sizeof acc);
        plait_k_sumsq_exact(&acc, &xs[i], 1);
        assert_true(plait_k_sumsq_value(&acc) == (double)xs[i] * (double)xs[i]);
    }
    /* bin 150 counts in units of 2^0 */
    const double two53 = 9007199254740992.0;
    memset(&acc, 0, sizeof acc);
    acc.bin[150][0] = (1ull << 53) + 1; /* a tie: to the even 2^53 */
    assert_true(plait_k_sumsq_value(&acc) == two53);
    acc.bin[150][0] = (1ull << 53) + 3; /* a tie: to the even 2^53 + 4 */
    assert_true(plait_k_sumsq_value(&acc) == two53 + 4);
    acc.bin[150][0] = (1ull << 53) + 1;
    acc.bin[1][0] = 1; /* 2^-298 below the tie: up */
    assert_true(plait_k_sumsq_value(&acc) == two53 + 2);
    memset(&acc, 0, sizeof acc);
    acc.bin[160][0] = acc.bin[160][1] = ~0ull; /* 2^128 - 1 at 2^20, plus 2^20 - 2^20: a carry through */
    acc.bin[150][0] = 1ull << 20;
    assert_true(plait_k_sumsq_value(&acc) == ldexp(1.0, 148));
    acc.nonfinite = 1;
    assert_true(isinf(plait_k_sumsq_value(&acc)));
    /* random values of every exponent against a long double sum */
    uint64_t r = 88172645463325252ull;
    for (int trial = 0; trial < 20; trial++) {
        float v[257];
        for (int i = 0; i < 257; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            uint32_t bits = (uint32_t)(r & 0x807fffffu) | (uint32_t)((r >> 32) % 254 + 1) << 23;
            memcpy(&v[i], &bits, sizeof bits);
        }
        memset(&acc, 0, sizeof acc);
        plait_k_sumsq_exact(&acc, v, 257);
        long double want = 0;
        for (int e = 1; e < PLAIT_SUMSQ_BINS; e++)
            want += ldexpl((long double)acc.bin[e][1] * 18446744073709551616.0L + (long double)acc.bin[e][0],
                           2 * e - 300);
        double got = plait_k_sumsq_value(&acc);
        assert_true(fabsl((long double)got - want) <= ldexpl(fabsl(want), -52));
    }
}

/* The exact sum of squares on long tensors (its bins summed along four
 * chains, folded into 128 bits a block at a time) gives the bins of a
 * plain 128-bit sum element by element: runs of one exponent at the
 * largest mantissa (carries out of 64 bits), zeros, subnormals, NaNs and
 * infinities among random values, at 1 and 3 threads, and at lengths
 * that end inside a set of four. */
static void test_sumsq_long(void **state) {
    (void)state;
    const size_t n = 600003;
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    uint64_t r = 2463534242ull;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint32_t bits = (uint32_t)r;
        if (i % 5 != 0) bits = 0x3fffffffu | (uint32_t)(r & 0x80000000u); /* one exponent, mantissa all ones */
        if (i % 97 == 0) bits = (uint32_t)r & 0x807fffffu;                /* subnormal or zero */
        if (i % 101 == 0) bits = 0;
        if (i % 100003 == 0) bits = 0x7f800000u | (uint32_t)(r & 0x7fffffu); /* infinity or NaN */
        memcpy(&v[i], &bits, sizeof bits);
    }
    int carried = 0;
    for (size_t len = n - 3; len <= n; len++) {
        unsigned __int128 want[PLAIT_SUMSQ_BINS] = {0};
        uint64_t nonfinite = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t bits;
            memcpy(&bits, &v[i], sizeof bits);
            uint32_t e = bits >> 23 & 0xffu;
            uint64_t mant = bits & 0x7fffffu;
            if (e == 0xffu) {
                nonfinite++;
                continue;
            }
            if (e) mant |= 1u << 23;
            want[e ? e : 1] += (unsigned __int128)(mant * mant);
        }
        for (int e = 0; e < PLAIT_SUMSQ_BINS; e++) carried |= (want[e] >> 64) != 0;
        for (int t = 1; t <= 3; t += 2) {
            plait_kernels_set_threads(t);
            plait_sumsq_acc acc;
            memset(&acc, 0, sizeof acc);
            plait_k_sumsq_exact(&acc, v, len);
            assert_true(acc.nonfinite == nonfinite);
            for (int e = 0; e < PLAIT_SUMSQ_BINS; e++)
                if (acc.bin[e][0] != (uint64_t)want[e] || acc.bin[e][1] != (uint64_t)(want[e] >> 64))
                    fail_msg("length %zu, %d threads: bin %d differs", len, t, e);
        }
    }
    plait_kernels_set_threads(1);
    assert_true(carried); /* the test reached past 64 bits */
    /* a short tensor into an accumulator already near 2^64 in a bin (the
     * norm's accumulator runs over every tensor): the carry of the fold */
    const size_t short_n = 2000;
    plait_sumsq_acc acc;
    memset(&acc, 0, sizeof acc);
    const uint32_t e = 0x3fffffffu >> 23 & 0xffu;
    acc.bin[e][0] = ~0ull - 5;
    acc.bin[e][1] = 7;
    unsigned __int128 want = ((unsigned __int128)7 << 64) + (~0ull - 5);
    for (size_t i = 0; i < short_n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        if ((bits >> 23 & 0xffu) == e)
            want += (uint64_t)((bits & 0x7fffffu) | 1u << 23) * ((bits & 0x7fffffu) | 1u << 23);
    }
    plait_k_sumsq_exact(&acc, v, short_n);
    assert_true(acc.bin[e][0] == (uint64_t)want && acc.bin[e][1] == (uint64_t)(want >> 64));
    assert_true(acc.bin[e][1] == 8);
    free(v);
}

/* The optimizer's vector kernels: same bits with 1, 2, 3 and 8 threads over
 * several element blocks (with a ragged last one). */
static void test_vector_threads(void **state) {
    (void)state;
    const size_t n = 100003;
    arr p0 = arr_rand(n, 1, 0), g = arr_rand(n, 1, 0), m0 = arr_rand(n, 1, 0), v0 = arr_rand(n, 1, 0);
    for (size_t i = 0; i < n; i++) v0.f[i] = fabsf(v0.f[i]);
    plait_adamw_args args = {sizeof args, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f};
    float *ref = NULL;
    plait_sumsq_acc ref_acc;
    const int counts[] = {1, 2, 3, 8};
    for (size_t c = 0; c < 4; c++) {
        plait_kernels_set_threads(counts[c]);
        float *buf = fzeros(4 * n);
        float *p = buf, *m = buf + n, *v = buf + 2 * n, *y = buf + 3 * n;
        memcpy(p, p0.f, n * sizeof(float));
        memcpy(m, m0.f, n * sizeof(float));
        memcpy(v, v0.f, n * sizeof(float));
        memcpy(y, g.f, n * sizeof(float));
        plait_k_adamw(p, g.f, m, v, n, &args);
        plait_k_axpy(y, p, n, 0.3f);
        plait_k_scale(y, n, 1.7f);
        plait_sumsq_acc acc;
        memset(&acc, 0, sizeof acc);
        plait_k_sumsq_exact(&acc, y, n);
        if (c == 0) {
            ref = buf;
            ref_acc = acc;
            /* the update did something: most parameters moved */
            size_t moved = 0;
            for (size_t i = 0; i < n; i++) moved += p[i] != p0.f[i];
            assert_true(moved > n * 9 / 10);
            assert_true(plait_k_sumsq_value(&acc) > 0);
        } else {
            assert_memory_equal(ref, buf, 4 * n * sizeof(float));
            assert_memory_equal(&ref_acc, &acc, sizeof acc);
            free(buf);
        }
    }
    plait_kernels_set_threads(1);
    free(ref);
    arr_free(&p0);
    arr_free(&g);
    arr_free(&m0);
    arr_free(&v0);
}

/* ---- matmul -------------------------------------------------------------- */

typedef struct mm_ctx {
    double *inp, *w, *b, *r, *out;
    int64_t BT, C, OC;
} mm_ctx;

static void ref_matmul(double *out, const double *inp, const double *w, const double *b,
                       int64_t BT, int64_t C, int64_t OC) {
    for (int64_t i = 0; i < BT; i++)
        for (int64_t o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int64_t c = 0; c < C; c++) s += inp[i * C + c] * w[o * C + c];
            out[i * OC + o] = s;
        }
}

static double mm_loss(void *vc) {
    mm_ctx *c = vc;
    ref_matmul(c->out, c->inp, c->w, c->b, c->BT, c->C, c->OC);
    return dot_d(c->out, c->r, (size_t)(c->BT * c->OC));
}

static void test_matmul(void **state) {
    (void)state;
    const int64_t BT = 6, C = 9, OC = 5;
    arr inp = arr_rand((size_t)(BT * C), 1, 0), w = arr_rand((size_t)(OC * C), 1, 0);
    arr b = arr_rand((size_t)OC, 1, 0), r = arr_rand((size_t)(BT * OC), 1, 0);
    arr res = arr_rand((size_t)(BT * OC), 1, 0);
    mm_ctx c = {inp.d, w.d, b.d, r.d, dzeros((size_t)(BT * OC)), BT, C, OC};
    float *out = fzeros((size_t)(BT * OC));
    plait_k_matmul_forward(out, inp.f, w.f, b.f, BT, C, OC);
    mm_loss(&c);
    expect_close2("matmul out", out, c.out, (size_t)(BT * OC), 1e-6, 1e-6);
    /* fused residual form, in place */
    memcpy(out, res.f, (size_t)(BT * OC) * sizeof(float));
    plait_k_matmul_forward_residual(out, out, inp.f, w.f, b.f, BT, C, OC);
    for (int64_t i = 0; i < BT * OC; i++) c.out[i] += res.d[i];
    expect_close2("matmul+residual", out, c.out, (size_t)(BT * OC), 1e-6, 1e-6);

    /* backward: dweight and dbias accumulate onto what is there */
    float *dinp = fzeros((size_t)(BT * C));
    float *dw = fzeros((size_t)(OC * C)), *db = fzeros((size_t)OC);
    for (int64_t i = 0; i < OC * C; i++) dw[i] = 0.5f;
    for (int64_t i = 0; i < OC; i++) db[i] = -0.25f;
    plait_k_matmul_backward(dinp, dw, db, r.f, inp.f, w.f, BT, C, OC);
    double *g = dzeros((size_t)(BT * C > OC * C ? BT * C : OC * C));
    finite_diff(g, inp.d, (size_t)(BT * C), mm_loss, &c);
    expect_close("matmul dinp", dinp, g, (size_t)(BT * C), 1e-5);
    finite_diff(g, w.d, (size_t)(OC * C), mm_loss, &c);
    for (int64_t i = 0; i < OC * C; i++) g[i] += 0.5;
    expect_close("matmul dweight", dw, g, (size_t)(OC * C), 1e-5);
    finite_diff(g, b.d, (size_t)OC, mm_loss, &c);
    for (int64_t i = 0; i < OC; i++) g[i] -= 0.25;
    expect_close("matmul dbias", db, g, (size_t)OC, 1e-5);
    free(g);
    free(dinp);
    free(dw);
    free(db);
    free(out);
    free(c.out);
    arr_free(&inp);
    arr_free(&w);
    arr_free(&b);
    arr_free(&r);
    arr_free(&res);
}

/* The row-parallel projection's epilogue, x += res + bias, and the bias
 * gradient on its own (rows summed in order), against finite differences. */
typedef struct bias_ctx {
    double *x, *res, *bias, *r;
    int64_t BT, C;
} bias_ctx;

static double bias_loss(void *vc) {
    bias_ctx *c = vc;
    double l = 0;
    for (int64_t i = 0; i < c->BT; i++)
        for (int64_t k = 0; k < c->C; k++)
            l += c->r[i * c->C + k] * (c->x[i * c->C + k] + c->res[i * c->C + k] + c->bias[k]);
    return l;
}

static void test_bias_residual(void **state) {
    (void)state;
    const int64_t BT = 7, C = 5;
    arr x = arr_rand((size_t)(BT * C), 1, 0), res = arr_rand((size_t)(BT * C), 1, 0);
    arr bias = arr_rand((size_t)C, 1, 0), r = arr_rand((size_t)(BT * C), 1, 0);
    float *y = fzeros((size_t)(BT * C));
    double *want = dzeros((size_t)(BT * C));
    memcpy(y, x.f, (size_t)(BT * C) * sizeof(float));
    plait_k_add_bias_residual(y, res.f, bias.f, BT, C);
    for (int64_t i = 0; i < BT * C; i++) want[i] = x.d[i] + res.d[i] + bias.d[i % C];
    expect_close2("x + res + bias", y, want, (size_t)(BT * C), 1e-6, 1e-7);
    memcpy(y, x.f, (size_t)(BT * C) * sizeof(float));
    plait_k_add_bias_residual(y, res.f, NULL, BT, C);
    for (int64_t i = 0; i < BT * C; i++) want[i] = x.d[i] + res.d[i];
    expect_close2("x + res", y, want, (size_t)(BT * C), 1e-6, 1e-7);
    /* dbias accumulates onto what is there */
    float *db = fzeros((size_t)C);
    for (int64_t k = 0; k < C; k++) db[k] = 0.125f;
    plait_k_bias_backward(db, r.f, BT, C);
    bias_ctx bc = {x.d, res.d, bias.d, r.d, BT, C};
    double *g = dzeros((size_t)C);
    finite_diff(g, bias.d, (size_t)C, bias_loss, &bc);
    for (int64_t k = 0; k < C; k++) g[k] += 0.125;
    expect_close("dbias", db, g, (size_t)C, 1e-5);
    free(g);
    free(db);
    free(want);
    free(y);
    arr_free(&x);
    arr_free(&res);
    arr_free(&bias);
    arr_free(&r);
}

/* ---- LayerNorm ----------------------------------------------------------- */

typedef struct ln_ctx {
    double *inp, *w, *b, *r, *out;
    int64_t BT, C;
} ln_ctx;

static double ln_loss(void *vc) {
    ln_ctx *c = vc;
    for (int64_t i = 0; i < c->BT; i++) {
        const double *x = c->inp + i * c->C;
        double m = 0, v = 0;
        for (int64_t k = 0; k < c->C; k++) m += x[k];
        m /= (double)c->C;
        for (int64_t k = 0; k < c->C; k++) v += (x[k] - m) * (x[k] - m);
        v /= (double)c->C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int64_t k = 0; k < c->C; k++)
            c->out[i * c->C + k] = (x[k] - m) * s * c->w[k] + c->b[k];
    }
    return dot_d(c->out, c->r, (size_t)(c->BT * c->C));
}

static void test_layernorm(void **state) {
    (void)state;
    const int64_t BT = 5, C = 13; /* C not a multiple of the 8 lanes */
    arr inp = arr_rand((size_t)(BT * C), 2, 0.5), w = arr_rand((size_t)C, 0.3, 1.0);
    arr b = arr_rand((size_t)C, 0.3, 0), r = arr_rand((size_t)(BT * C), 1, 0);
    ln_ctx c = {inp.d, w.d, b.d, r.d, dzeros((size_t)(BT * C)), BT, C};
    float *out = fzeros((size_t)(BT * C)), *mean = fzeros((size_t)BT), *rstd = fzeros((size_t)BT);
    plait_k_layernorm_forward(out, mean, rstd, inp.f, w.f, b.f, BT, C);
    ln_loss(&c);
    expect_close("layernorm out", out, c.out, (size_t)(BT * C), 1e-5);
    float *dinp = fzeros((size_t)(BT * C)), *dw = fzeros((size_t)C), *db = fzeros((size_t)C);
    for (int64_t i = 0; i < BT * C; i++) dinp[i] = 1.0f; /* the residual stream accumulates */
    plait_k_layernorm_backward(dinp, dw, db, r.f, inp.f, w.f, mean, rstd, BT, C);
    double *g = dzeros((size_t)(BT * C));
    finite_diff(g, inp.d, (size_t)(BT * C), ln_loss, &c);
    for (int64_t i = 0; i < BT * C; i++) g[i] += 1.0;
    expect_close("layernorm dinp", dinp, g, (size_t)(BT * C), 1e-4);
    finite_diff(g, w.d, (size_t)C, ln_loss, &c);
    expect_close("layernorm dweight", dw, g, (size_t)C, 1e-5);
    finite_diff(g, b.d, (size_t)C, ln_loss, &c);
    expect_close("layernorm dbias", db, g, (size_t)C, 1e-5);
    free(g);
    free(out);
    free(mean);
    free(rstd);
    free(dinp);
    free(dw);
    free(db);
    free(c.out);
    arr_free(&inp);
    arr_free(&w);
    arr_free(&b);
    arr_free(&r);
}

/* ---- GELU ---------------------------------------------------------------- */

typedef struct gelu_ctx {
    double *inp, *r;
    size_t n;
} gelu_ctx;

static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_loss(void *vc) {
    gelu_ctx *c = vc;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += ref_gelu(c->inp[i]) * c->r[i];
    return s;
}

static void test_gelu(void **state) {
    (void)state;
    const size_t n = 1001;
    arr inp = arr_rand(n, 8, 0), r = arr_rand(n, 1, 0);
    inp.f[0] = 0.0f, inp.f[1] = -30.0f, inp.f[2] = 30.0f, inp.f[3] = -1e-3f; /* edges */
    for (int i = 0; i < 4; i++) inp.d[i] = inp.f[i];
    gelu_ctx c = {inp.d, r.d, n};
    float *out = fzeros(n), *din = fzeros(n);
    double *want = dzeros(n);
    plait_k_gelu_forward(out, inp.f, n);
    for (size_t i = 0; i < n; i++) want[i] = ref_gelu(inp.d[i]);
    expect_close("gelu out", out, want, n, 1e-5);
    for (size_t i = 0; i < n; i++) assert_true(isfinite(out[i]));
    plait_k_gelu_backward(din, inp.f, r.f, n);
    finite_diff(want, inp.d, n, gelu_loss, &c);
    expect_close("gelu dinp", din, want, n, 1e-4);
    /* in place (dinp == dout), as the model uses it */
    memcpy(out, r.f, n * sizeof(float));
    plait_k_gelu_backward(out, inp.f, out, n);
    assert_memory_equal(out, din, n * sizeof(float));
    free(out);
    free(din);
    free(want);
    arr_free(&inp);
    arr_free(&r);
}

/* ---- embedding ----------------------------------------------------------- */

typedef struct emb_ctx {
    double *wte, *wpe, *dout;
    const int32_t *tokens;
    int64_t B, T, C;
} emb_ctx;

static double emb_loss(void *vc) {
    emb_ctx *c = vc;
    double l = 0;
    for (int64_t bt = 0; bt < c->B * c->T; bt++)
        for (int64_t k = 0; k < c->C; k++)
            l += c->dout[bt * c->C + k] * (c->wte[c->tokens[bt] * c->C + k] + c->wpe[(bt % c->T) * c->C + k]);
    return l;
}

static void test_embedding(void **state) {
    (void)state;
    const int64_t B = 2, T = 5, C = 6, V = 7;
    int32_t tokens[10] = {1, 3, 3, 0, 6, 6, 2, 1, 1, 5};
    arr wte = arr_rand((size_t)(V * C), 1, 0), wpe = arr_rand((size_t)(T * C), 1, 0);
    arr dout = arr_rand((size_t)(B * T * C), 1, 0);
    float *out = fzeros((size_t)(B * T * C));
    plait_k_embedding_forward(out, tokens, wte.f, wpe.f, B, T, C);
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t c = 0; c < C; c++)
            assert_true(out[bt * C + c] == wte.f[tokens[bt] * C + c] + wpe.f[(bt % T) * C + c]);
    /* backward against finite differences of Σ dout·embedding(wte, wpe) */
    float *dwte = fzeros((size_t)(V * C)), *dwpe = fzeros((size_t)(T * C));
    plait_k_embedding_backward(dwte, dwpe, dout.f, tokens, B, T, C);
    double *gwte = dzeros((size_t)(V * C)), *gwpe = dzeros((size_t)(T * C));
    emb_ctx ec = {wte.d, wpe.d, dout.d, tokens, B, T, C};
    finite_diff(gwte, wte.d, (size_t)(V * C), emb_loss, &ec);
    finite_diff(gwpe, wpe.d, (size_t)(T * C), emb_loss, &ec);
    expect_close("embedding dwte", dwte, gwte, (size_t)(V * C), 1e-6);
    expect_close("embedding dwpe", dwpe, gwpe, (size_t)(T * C), 1e-6);

    /* vocabulary-parallel: 3 slices of 3 rows (V padded to 9); the slices'
     * outputs sum to the whole exactly, and their gradients are its rows */
    float *sum = fzeros((size_t)(B * T * C)), *part = fzeros((size_t)(B * T * C));
    float *slice = fzeros((size_t)(3 * C)), *dslice = fzeros((size_t)(3 * C));
    for (int r = 0; r < 3; r++) {
        memset(slice, 0, (size_t)(3 * C) * sizeof(float));
        for (int64_t i = 0; i < 3 && r * 3 + i < V; i++)
            memcpy(slice + i * C, wte.f + (r * 3 + i) * C, (size_t)C * sizeof(float));
        plait_k_embedding_forward_vocab(part, tokens, slice, r * 3, 3, NULL, B, T, C);
        for (int64_t i = 0; i < B * T * C; i++) sum[i] += part[i];
        memset(dslice, 0, (size_t)(3 * C) * sizeof(float));
        plait_k_embedding_backward_vocab(dslice, NULL, dout.f, tokens, r * 3, 3, B, T, C);
        for (int64_t i = 0; i < 3 * C; i++) {
            int64_t gi = r * 3 * C + i;
            assert_true(dslice[i] == (gi < V * C ? dwte[gi] : 0.0f));
        }
    }
    plait_k_add_positions(sum, wpe.f, B, T, C);
    assert_memory_equal(sum, out, (size_t)(B * T * C) * sizeof(float));
    free(sum);
    free(part);
    free(slice);
    free(dslice);
    free(out);
    free(dwte);
    free(dwpe);
    free(gwte);
    free(gwpe);
    arr_free(&wte);
    arr_free(&wpe);
    arr_free(&dout);
}

/* ---- cross-entropy ------------------------------------------------------- */

typedef struct ce_ctx {
    double *logits;
    const int32_t *targets;
    int64_t BT, V;
    double scale;
} ce_ctx;

static double ce_loss(void *vc) {
    ce_ctx *c = vc;
    double total = 0;
    for (int64_t r = 0; r < c->BT; r++) {
        const double *l = c->logits + r * c->V;
        if (c->targets[r] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < c->V; v++) mx = fmax(mx, l[v]);
        for (int64_t v = 0; v < c->V; v++) s += exp(l[v] - mx);
        total += mx + log(s) - l[c->targets[r]];
    }
    return total * c->scale;
}

static void test_crossentropy(void **state) {
    (void)state;
    const int64_t BT = 7, V = 11;
    const int32_t targets[7] = {0, 10, 5, 5, -1, 3, 7}; /* -1: no loss there */
    arr logits = arr_rand((size_t)(BT * V), 4, 0);
    ce_ctx c = {logits.d, targets, BT, V, 0.125};
    float losses[7], *dl = fzeros((size_t)(BT * V));
    plait_k_crossentropy(losses, dl, logits.f, targets, BT, V, 0.125f);
    double total = 0;
    for (int64_t r = 0; r < BT; r++) total += losses[r];
    assert_true(losses[4] == 0.0f);
    assert_true(fabs(total * 0.125 - ce_loss(&c)) < 1e-6 * fabs(total));
    double *g = dzeros((size_t)(BT * V));
    finite_diff(g, logits.d, (size_t)(BT * V), ce_loss, &c);
    expect_close("crossentropy dlogits", dl, g, (size_t)(BT * V), 1e-5);
    /* in place */
    float *inplace = fzeros((size_t)(BT * V));
    memcpy(inplace, logits.f, (size_t)(BT * V) * sizeof(float));
    plait_k_crossentropy(losses, inplace, inplace, targets, BT, V, 0.125f);
    assert_memory_equal(inplace, dl, (size_t)(BT * V) * sizeof(float));

    /* vocabulary-parallel: 3 ranks × 4 columns (V padded to 12); combining
     * max, Σexp and target logit gives the whole loss and gradient */
    const int64_t Vl = 4, P = 3;
    float part[3][7 * 4], rmax[3][7], sexp[3][7], tl[3][7];
    float gmax[7], gsum[7], gt[7], lse[7];
    for (int64_t p = 0; p < P; p++) {
        int64_t valid = V - p * Vl < Vl ? V - p * Vl : Vl;
        for (int64_t r = 0; r < BT; r++)
            for (int64_t j = 0; j < Vl; j++)
                part[p][r * Vl + j] = j < valid ? logits.f[r * V + p * Vl + j] : 0.0f;
        plait_k_logits_rowmax(rmax[p], part[p], BT, Vl, valid);
    }
    for (int64_t r = 0; r < BT; r++)
        gmax[r] = fmaxf(rmax[0][r], fmaxf(rmax[1][r], rmax[2][r]));
    for (int64_t p = 0; p < P; p++) {
        int64_t valid = V - p * Vl < Vl ? V - p * Vl : Vl;
        plait_k_logits_sumexp(sexp[p], part[p], gmax, BT, Vl, valid);
        plait_k_logits_target(tl[p], part[p], targets, p * Vl, BT, Vl, valid);
    }
    for (int64_t r = 0; r < BT; r++) {
        gsum[r] = sexp[0][r] + sexp[1][r] + sexp[2][r];
        gt[r] = tl[0][r] + tl[1][r] + tl[2][r];
        lse[r] = gmax[r] + logf(gsum[r]);
        if (targets[r] >= 0) assert_true(fabsf(lse[r] - gt[r] - losses[r]) < 1e-5f);
    }
    for (int64_t p = 0; p < P; p++) {
        int64_t valid = V - p * Vl < Vl ? V - p * Vl : Vl;
        plait_k_crossentropy_backward(part[p], part[p], lse, targets, p * Vl, BT, Vl, valid,
                                      0.125f);
        for (int64_t r = 0; r < BT; r++)
            for (int64_t j = 0; j < Vl; j++) {
                float want = j < valid ? dl[r * V + p * Vl + j] : 0.0f;
                assert_true(fabsf(part[p][r * Vl + j] - want) < 1e-6f);
            }
    }
    free(g);
    free(dl);
    free(inplace);
    arr_free(&logits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgemm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_sgemm_tiles),
        cmocka_unit_test(test_vector_threads),
        cmocka_unit_test(test_sumsq_value_rounding),
        cmocka_unit_test(test_sumsq_long),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_bias_residual),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_crossentropy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
