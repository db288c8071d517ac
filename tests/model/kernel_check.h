/*
 * What the kernel tests share: random inputs held in float and double,
 * zeroed buffers, closeness to a double-precision reference, and central
 * finite differences of a loss (test_kernels.c, test_kernels_llama.c).
 * Header-only for the tests; each includer gets its own random stream.
 */
#ifndef PLAIT_TESTS_MODEL_KERNEL_CHECK_H
#define PLAIT_TESTS_MODEL_KERNEL_CHECK_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t g_rng = 12345;     /* each test file its own stream */
static inline double urand(void) { /* [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

typedef struct arr {
    float *f;
    double *d;
    size_t n;
} arr;

static inline arr arr_rand(size_t n, double scale, double offset) {
    arr a = {malloc(n * sizeof(float)), malloc(n * sizeof(double)), n};
    assert_non_null(a.f);
    assert_non_null(a.d);
    for (size_t i = 0; i < n; i++) {
        a.f[i] = (float)(offset + scale * urand());
        a.d[i] = a.f[i];
    }
    return a;
}

static inline void arr_free(arr *a) {
    free(a->f);
    free(a->d);
}

static inline float *fzeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static inline double *dzeros(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    assert_non_null(p);
    return p;
}

/* |got - want| <= rtol·|want| + arel·max|want| elementwise (arel covers
 * cancellation in sums whose terms are much larger than the result). */
static inline void expect_close2(const char *what, const float *got, const double *want, size_t n, double rtol,
                                 double arel) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double tol = rtol * fabs(want[i]) + arel * scale + 1e-12;
        if (fabs((double)got[i] - want[i]) > tol)
            fail_msg("%s[%zu] = %.9g, reference %.9g (tolerance %.3g)", what, i, (double)got[i], want[i], tol);
    }
}

static inline void expect_close(const char *what, const float *got, const double *want, size_t n, double rtol) {
    expect_close2(what, got, want, n, rtol, 0.01 * rtol);
}

/* Central differences of loss() with respect to every element of x. */
typedef double (*loss_fn)(void *ctx);
static inline void finite_diff(double *grad, double *x, size_t n, loss_fn loss, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double keep = x[i], h = 1e-5 * fmax(1.0, fabs(keep));
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        grad[i] = (lp - lm) / (2 * h);
    }
}

static inline double dot_d(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

#endif
