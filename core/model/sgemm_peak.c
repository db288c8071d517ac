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
