/*
 * How the cuda device picks cuBLASLt's algorithm for a product
 * (plugins/device/cuda/gemm.c), on the CUDA emulator: the cuBLASLt
 * stand-in (tests/cuda_emu/cublaslt) offers three candidates computing the
 * same product, and its test hooks make candidate 0, the heuristic's first,
 * slow and count each candidate's calls.
 *
 *  - not deterministic: the first calls of one shape try every candidate
 *    twice (a kernel's first launch is not its speed), and after a few
 *    calls the product runs on a fast one (not 0) for good;
 *  - deterministic: every call runs candidate 0, none is timed;
 *  - both: every call's result is the CPU's sgemm within float32's
 *    tolerance, and choosing makes no host wait (no device-wide, stream or
 *    event synchronisation, counted by the emulated runtime).
 *
 * Runs only on cuda_emu (needs the stand-in's hooks).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_runtime.h"
#include "host/host_table.h"
#include "kernels/kernels.h"
#include "plugin/loader.h"
#include "runtime/error.h"

#define CALLS 14 /* each of 3 candidates twice (warm-up, timed), then the pick */
#define ALGOS 3 /* the stand-in's candidates */

static int g_fails;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) g_fails++;
}

typedef struct hooks {
    void (*slow)(int, unsigned);
    uint64_t (*calls)(int);
} hooks;

/* The candidate a call used: the one whose count grew (-1: none or several). */
static int used(const hooks *hk, uint64_t before[ALGOS]) {
    int which = -1, grew = 0;
    for (int i = 0; i < ALGOS; i++) {
        uint64_t n = hk->calls(i);
        if (n != before[i]) which = i, grew++;
        before[i] = n;
    }
    return grew == 1 ? which : -1;
}

static int run_mode(const plait_device_ops *d, const hooks *hk, int deterministic) {
    const int64_t M = 48, N = 40, K = 56;
    plait_device_open_args args = {sizeof args, NULL, 0, 1, PLAIT_PRECISION_FP32, deterministic};
    plait_device_info info = {.struct_size = sizeof info};
    if (d->open(plait_host_table(), &args, &info) != PLAIT_OK) {
        fprintf(stderr, "FATAL: open: %s\n", plait_last_error());
        return 0;
    }
    printf("%s run\n", deterministic ? "deterministic" : "non-deterministic");
    const plait_kernels *k = d->kernels();
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
    float *a = malloc(na * 4), *b = malloc(nb * 4), *ref = malloc(nc * 4), *back = malloc(nc * 4);
    float *da = d->alloc(na * 4, "pick test"), *db = d->alloc(nb * 4, "pick test"), *dc[CALLS];
    int ok = a && b && ref && back && da && db;
    for (int i = 0; i < CALLS; i++) ok &= (dc[i] = d->alloc(nc * 4, "pick test")) != NULL;
    if (!ok) {
        check(0, "memory for the test");
        return 0;
    }
    for (size_t i = 0; i < na; i++) a[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)((i * 40503u + 7) % 2001) / 1000.0f - 1.0f;
    plait_kernels_table()->sgemm(0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, ref, N);
    ok = d->copy(da, a, na * 4, PLAIT_COPY_TO_DEVICE) == PLAIT_OK &&
         d->copy(db, b, nb * 4, PLAIT_COPY_TO_DEVICE) == PLAIT_OK && d->synchronize() == PLAIT_OK;
    check(ok, "operands on the device");

    hk->slow(0, 5); /* the heuristic's first takes 5 ms more a call */
    uint64_t count[ALGOS];
    used(hk, count);
    uint64_t dev0 = plait_cuda_emu_device_syncs(), str0 = plait_cuda_emu_stream_syncs();
    int algo[CALLS];
    for (int i = 0; i < CALLS; i++) {
        k->sgemm(0, 0, M, N, K, 1.0f, da, K, db, N, 0.0f, dc[i], N);
        algo[i] = used(hk, count);
    }
    uint64_t dev1 = plait_cuda_emu_device_syncs(), str1 = plait_cuda_emu_stream_syncs();
    printf("     candidates by call:");
    for (int i = 0; i < CALLS; i++) printf(" %d", algo[i]);
    printf("\n");
    check(dev1 == dev0 && str1 == str0, "choosing makes no device-wide, stream or event synchronisation");
    check(d->synchronize() == PLAIT_OK, "no failure recorded");
    hk->slow(-1, 0);

    double worst = 0.0;
    for (int i = 0; i < CALLS; i++) {
        if (d->copy(back, dc[i], nc * 4, PLAIT_COPY_TO_HOST) != PLAIT_OK) worst = INFINITY;
        for (size_t j = 0; j < nc; j++) {
            double e = fabs((double)back[j] - ref[j]) / (1.0 + fabs((double)ref[j]));
            if (!(e <= worst)) worst = e;
        }
    }
    printf("     largest error against the CPU's sgemm: %.3g\n", worst);
    check(worst <= 1e-5, "every call's result is the CPU's sgemm (1e-5)");

    int tried[ALGOS] = {0}, first_calls = 0, all_one = 1;
    for (int i = 0; i < CALLS; i++) {
        if (algo[i] >= 0 && i < 2 * ALGOS) tried[algo[i]]++;
        first_calls += algo[i] == 0;
        all_one &= algo[i] >= 0;
    }
    check(all_one, "each call ran one candidate");
    if (deterministic) {
        check(first_calls == CALLS, "deterministic: every call runs the heuristic's first");
    } else {
        check(tried[0] == 2 && tried[1] == 2 && tried[2] == 2,
              "every candidate is tried twice first (a warm-up, then the timed call)");
        int settled = 1;
        for (int i = CALLS - 4; i < CALLS; i++) settled &= algo[i] > 0 && algo[i] == algo[CALLS - 1];
        check(settled, "after a few calls the product runs on a fast candidate, the same each call");
    }
    for (int i = 0; i < CALLS; i++) d->free(dc[i]);
    d->free(da), d->free(db);
    free(a), free(b), free(ref), free(back);
    d->close();
    return 1;
}

int main(void) {
    plait_host_install();
    const plait_plugin_desc *desc = plait_plugin_load(PLAIT_KIND_DEVICE, "cuda_emu");
    void *lt = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL);
    hooks hk = {lt ? (void (*)(int, unsigned))dlsym(lt, "plait_cublaslt_emu_slow_algo") : NULL,
                lt ? (uint64_t (*)(int))dlsym(lt, "plait_cublaslt_emu_algo_calls") : NULL};
    if (!desc || !hk.slow || !hk.calls) {
        fprintf(stderr, "FATAL: %s\n", desc ? dlerror() : plait_last_error());
        return 1;
    }
    const plait_device_ops *d = desc->ops;
    int ran = run_mode(d, &hk, 0) && run_mode(d, &hk, 1);
    printf("%s: %d failure%s\n", g_fails || !ran ? "FAILED" : "passed", g_fails, g_fails == 1 ? "" : "s");
    return g_fails || !ran ? 1 : 0;
}
