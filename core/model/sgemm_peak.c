#include "model/sgemm_peak.h"

#include <stdint.h>

#include "kernels/kernels.h"
#include "runtime/clock.h"
#include "runtime/memory.h"

/* The best rate rather than the mean: on a shared machine a measurement
 * that catches a slow moment would understate the peak and inflate MFU. */
double plait_sgemm_peak(int threads, double seconds) {
    const plait_kernels *k = plait_kernels_table();
    const int64_t sizes[2] = {1024, 2048};
    const int64_t nmax = 2048;
    uint64_t rss_before = plait_peak_rss();
    float *a = plait_alloc((size_t)(3 * nmax * nmax) * sizeof(float), PLAIT_MEM_HOST, 64, "benchmark");
    if (!a) return 0;
    for (int64_t i = 0; i < 3 * nmax * nmax; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f;
    int before = plait_kernels_threads();
    plait_kernels_set_threads(threads);
    double best = 0;
    for (int s = 0; s < 2; s++) {
        int64_t n = sizes[s];
        k->sgemm(0, 1, n, n, n, 1.0f, a, n, a + n * n, n, 0.0f, a + 2 * n * n, n); /* warm-up */
        double start = plait_clock_now();
        do {
            double t0 = plait_clock_now();
            k->sgemm(0, 1, n, n, n, 1.0f, a, n, a + n * n, n, 0.0f, a + 2 * n * n, n);
            double flops = 2.0 * (double)n * n * n / (plait_clock_now() - t0);
            if (flops > best) best = flops;
        } while (plait_clock_now() - start < seconds);
    }
    plait_kernels_set_threads(before);
    plait_free(a);
    plait_peak_rss_rewind(rss_before);
    return best;
}

/* A linear layer's three products at `rows` rows, width c -> 4c: the
 * forward y = x w^T, the input gradient dx = dy w, the weight gradient
 * dw += dy^T x. */
static void layer_products(const plait_kernels *k, float *a, int64_t rows, int64_t c) {
    float *x = a, *w = x + rows * c, *y = w + 4 * c * c, *dx = y + rows * 4 * c, *dw = dx + rows * c;
    k->sgemm(0, 1, rows, 4 * c, c, 1.0f, x, c, w, c, 0.0f, y, 4 * c);
    k->sgemm(0, 0, rows, c, 4 * c, 1.0f, y, 4 * c, w, c, 0.0f, dx, c);
    k->sgemm(1, 0, 4 * c, c, rows, 1.0f, y, 4 * c, x, c, 1.0f, dw, c);
}

/* Their best rate (FLOP/s) over at least `seconds`, after a warm-up. */
static double layer_rate(const plait_kernels *k, float *a, int64_t rows, int64_t c, double seconds) {
    double best = 0, flops = 3 * 2.0 * (double)rows * c * 4 * c;
    layer_products(k, a, rows, c);
    double start = plait_clock_now();
    do {
        double t0 = plait_clock_now();
        layer_products(k, a, rows, c);
        double r = flops / (plait_clock_now() - t0);
        if (r > best) best = r;
    } while (plait_clock_now() - start < seconds);
    return best;
}

double plait_sgemm_half_rows(int threads, int64_t width, double seconds) {
    const plait_kernels *k = plait_kernels_table();
    /* at most width 1024 (24 MiB of operands): the curve is flat by then */
    const int64_t small = 16, large = 256, c = width < 1 ? 1 : width > 1024 ? 1024 : width;
    size_t n = (size_t)(large * 6 * c + 8 * c * c); /* x, y, dx of 256 rows; w, dw */
    uint64_t rss_before = plait_peak_rss();
    float *a = plait_alloc(n * sizeof(float), PLAIT_MEM_HOST, 64, "benchmark");
    if (!a) return 0;
    for (size_t i = 0; i < n; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f;
    int before = plait_kernels_threads();
    plait_kernels_set_threads(threads);
    double q = layer_rate(k, a, small, c, seconds) / layer_rate(k, a, large, c, seconds);
    plait_kernels_set_threads(before);
    plait_free(a);
    plait_peak_rss_rewind(rss_before);
    if (!(q > (double)small / large) || q >= 1) return 0;
    return (double)(small * large) * (1 - q) / (large * q - small);
}
