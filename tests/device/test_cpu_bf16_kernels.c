/*
 * The CPU's entries on bf16 activations (core/kernels, plait/kernels.h ABI
 * 1.8, 1.9, 1.22, 1.23, 1.25, 1.29) against their references (kref_bf16.h: the
 * float32 entry on the widened inputs, outputs rounded), on the same kernel
 * cases the cuda device runs (cases_bf16_*.c, cases_llama_bf16.c, the bf16
 * ones of cases_moe.c): each
 * result within bf16's 2e-2 (products: sums in another order; the rest is
 * the reference's arithmetic on the same values, so mostly the same bits),
 * each case run twice and required bit-identical, at 1 and at 3 threads;
 * and one product of many tiles compared bit for bit across 1 and 3
 * threads (the bits must not depend on the thread count).
 *
 * Three times: with the products emulated (float32 on the widened
 * operands, the attention on bf16 pairs in a portable loop), which runs on
 * every CPU; with a native run's products in fp32 on widened operands
 * (PLAIT_CPU_BF16_PRODUCTS=fp32, what auto takes where bf16 dot products
 * are slow: no library needed, so on every CPU too); and with the native
 * bf16 products (oneDNN, or the BLAS's cblas_sbgemm) where this CPU and its
 * libraries have them; elsewhere that part says why it did not run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/kcase.h"
#include "device/kref_bf16.h"
#include "kernels/kernels.h"

static plait_kernels g_ref;

/* every case of a list against the reference, each run twice (kc_run) */
static int run_list(const kc_named *cases, size_t n, uint64_t seed) {
    int fails = 0;
    for (size_t i = 0; i < n; i++) {
        fails += kc_run(cases[i].name, cases[i].fn, &g_ref, plait_kernels_table(), kc_host_device(), 2e-2, seed + i);
    }
    return fails;
}

static int run_all(const char *mode, uint64_t seed) {
    int fails = 0;
    for (int threads = 1; threads <= 3; threads += 2) {
        plait_kernels_set_threads(threads);
        int f = run_list(kc_bf16_product_cases, kc_bf16_product_count, seed);
        f += run_list(kc_bf16_row_cases, kc_bf16_row_count, seed + 100);
        f += run_list(kc_llama_bf16_cases, kc_llama_bf16_count, seed + 200);
        f += run_list(kc_moe_bf16_cases, kc_moe_bf16_count, seed + 300);
        printf("%s, %d thread%s: %d failure%s\n", mode, threads, threads == 1 ? "" : "s", f, f == 1 ? "" : "s");
        fails += f;
    }
    return fails;
}

/* A product's bits at 1 and at 3 threads (kc_run compares two runs at one
 * count): out of matmul_forward_bf16 on a shape of several tiles. */
static int threads_agree(void) {
    const int64_t BT = 1000, C = 768, OC = 2304;
    plait_bf16 *in = malloc(sizeof *in * (size_t)(BT * C)), *w = malloc(sizeof *w * (size_t)(OC * C));
    plait_bf16 *o1 = malloc(sizeof *o1 * (size_t)(BT * OC)), *o3 = malloc(sizeof *o3 * (size_t)(BT * OC));
    uint64_t s = 7;
    for (int64_t i = 0; i < BT * C; i++) in[i] = (plait_bf16)(0x3c00u + ((s = s * 6364136223846793005ull + 1) >> 56));
    for (int64_t i = 0; i < OC * C; i++) w[i] = (plait_bf16)(0xbc00u + ((s = s * 6364136223846793005ull + 1) >> 56));
    plait_kernels_set_threads(1);
    plait_k_matmul_forward_bf16(o1, in, w, NULL, BT, C, OC);
    plait_kernels_set_threads(3);
    plait_k_matmul_forward_bf16(o3, in, w, NULL, BT, C, OC);
    int same = memcmp(o1, o3, sizeof *o1 * (size_t)(BT * OC)) == 0;
    printf("matmul_forward_bf16 %lldx%lldx%lld at 1 and 3 threads: %s\n", (long long)BT, (long long)C, (long long)OC,
           same ? "the same bits" : "FAIL: the bits differ");
    free(in), free(w), free(o1), free(o3);
    return !same;
}

int main(void) {
    g_ref = *plait_kernels_table();
    kref_bf16_fill(&g_ref);
    kc_fp32 = 0;
    uint64_t seed = getenv("PLAIT_TEST_SEED") ? strtoull(getenv("PLAIT_TEST_SEED"), NULL, 0)
                                              : (uint64_t)time(NULL) * 2654435761u;
    printf("seed: %llu (PLAIT_TEST_SEED repeats it)\n", (unsigned long long)seed);
    int fails = 0;
    if (plait_kernels_set_precision(PLAIT_KERNELS_BF16_EMULATED) != 0) {
        printf("FAIL: the emulated bf16 products were refused\n");
        return 1;
    }
    fails += run_all("emulated bf16 products", seed) + threads_agree();
    char what[160], why[768];
    setenv("PLAIT_CPU_BF16_PRODUCTS", "fp32", 1);
    if (plait_kernels_set_precision(PLAIT_KERNELS_BF16) != 0) {
        printf("FAIL: a native run's products in fp32 were refused\n");
        return 1;
    }
    plait_kernels_bf16_describe(what, sizeof what);
    if (!strstr(what, "in fp32 on widened operands")) {
        printf("FAIL: PLAIT_CPU_BF16_PRODUCTS=fp32 is described as '%s'\n", what);
        fails++;
    }
    fails += run_all("bf16 products in fp32", seed) + threads_agree();
    setenv("PLAIT_CPU_BF16_PRODUCTS", "bf16", 1);
    if (plait_kernels_bf16_native(what, sizeof what, why, sizeof why) == 0 &&
        plait_kernels_set_precision(PLAIT_KERNELS_BF16) == 0) {
        printf("native: %s\n", what);
        fails += run_all("native bf16 products", seed) + threads_agree();
    } else {
        printf("native bf16 products not run here: %s\n", why);
    }
    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    kref_bf16_release();
    printf("%s: %d failure%s\n", fails ? "FAILED" : "passed", fails, fails == 1 ? "" : "s");
    return fails ? 1 : 0;
}
