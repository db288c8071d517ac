/*
 * Every kernel of the cuda device against the core's CPU kernel, on fresh
 * random inputs each run (the seed is printed; PLAIT_TEST_SEED repeats a
 * run), outputs poisoned with NaN before each call, in the precision given
 * as argv[1] (fp32, tf32 or bf16; GEMM-based results within 1e-5, 1e-3 and
 * 2e-2 relative, element-wise kernels within 1e-5, the exact Σx²
 * accumulator and the embedding gradients bit for bit), each case run
 * twice on the device and required bit-identical. The cases live in
 * the cases_*.c files, one family of entries each (kcase.h lists them);
 * this file runs them, checks the device's memory functions, and checks
 * the harness itself on the CPU (selfcheck).
 *
 * Label `gpu`: where no CUDA device is found this exits 77, which ctest
 * reports as skipped (never as passed); docs/gpu.md says where these tests
 * have run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/kcase.h"
#include "device/kref_bf16.h"
#include "host/host_table.h"
#include "kernels/kernels.h"
#include "plugin/loader.h"
#include "runtime/error.h"

/* ---- the CPU reference table -------------------------------------------- */

static plait_kernels g_cpu;

/* the core's CPU kernels, with the references of the bf16-activation
 * entries the CPU device does not have */
static void cpu_table(void) {
    g_cpu = *plait_kernels_table();
    kref_bf16_fill(&g_cpu);
}

/* bf16 mode (and the self-check) also runs the bf16-activation cases */
static int g_bf16_cases;

/* ---- the device's memory functions ------------------------------------------ */

static int check_memory(const plait_device_ops *d) {
    int fails = 0;
#define EXPECT(cond)                                                                                                \
    do {                                                                                                            \
        if (!(cond)) {                                                                                              \
            printf("FAIL memory: %s (%s)\n", #cond, plait_last_error());                                             \
            fails++;                                                                                                \
        }                                                                                                           \
    } while (0)
    uint64_t used0, peak0, used, peak;
    d->memory_stats(&used0, &peak0);
    const size_t n = 1 << 20;
    float *a = d->alloc(n * sizeof(float), "test a"), *b = d->alloc(n * sizeof(float), "test b");
    EXPECT(a && b && ((uintptr_t)a % 256) == 0 && ((uintptr_t)b % 256) == 0);
    d->memory_stats(&used, &peak);
    EXPECT(used == used0 + 2 * n * sizeof(float) && peak >= used);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)i;
    EXPECT(d->copy(a, h, n * sizeof *h, PLAIT_COPY_TO_DEVICE) == PLAIT_OK);
    EXPECT(d->copy(b, a, n * sizeof *h, PLAIT_COPY_ON_DEVICE) == PLAIT_OK);
    EXPECT(d->fill_zero(b, 16 * sizeof *h) == PLAIT_OK);
    memset(h, 0xff, n * sizeof *h);
    EXPECT(d->copy(h, b, n * sizeof *h, PLAIT_COPY_TO_HOST) == PLAIT_OK);
    int right = 1;
    for (size_t i = 0; i < n; i++) right &= h[i] == (i < 16 ? 0.0f : (float)i);
    EXPECT(right);
    EXPECT(d->synchronize() == PLAIT_OK);
    d->free(a);
    d->free(b);
    d->free(NULL);
    d->memory_stats(&used, &peak);
    EXPECT(used == used0 && peak >= used0 + 2 * n * sizeof(float));
    /* far more than any GPU has: NULL, with the request named */
    plait_clear_error();
    EXPECT(d->alloc((size_t)1 << 52, "too big") == NULL);
    EXPECT(strstr(plait_last_error(), "too big") != NULL);
    EXPECT(d->synchronize() == PLAIT_OK); /* an out-of-memory is not sticky */
    free(h);
    return fails;
#undef EXPECT
}

/* ---- the harness checked on the CPU (runs everywhere) ------------------------ */


/* leaves the last element unwritten */
static void short_gelu(float *out, const float *inp, size_t n) { plait_k_gelu_forward(out, inp, n - 1); }

static uint64_t g_calls;
/* a different answer on every call */
static void drifting_scale(float *x, size_t n, float a) { plait_k_scale(x, n, a * (1.0f + 1e-6f * (float)++g_calls)); }

static int run_cases(const plait_kernels *k, const plait_device_ops *d, double tol, uint64_t seed);

/* The CPU kernels as the "device" must pass every case; a kernel that
 * leaves an element unwritten, or answers differently on a repeat, must
 * fail. */
static int selfcheck(void) {
    const plait_device_ops *host = kc_host_device();
    cpu_table();
    int fails = run_cases(&g_cpu, host, 1e-5, 42);
    printf("self-check, CPU against CPU: %d failures (want 0)\n", fails);
    plait_kernels broken = g_cpu;
    broken.gelu_forward = short_gelu;
    broken.scale = drifting_scale;
    int caught = run_cases(&broken, host, 1e-5, 42);
    printf("self-check, broken kernels: %d failures (want at least 2)\n", caught);
    return fails == 0 && caught >= 2 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fp32";
    kc_fp32 = strcmp(mode, "fp32") == 0;
    if (strcmp(mode, "selfcheck") == 0) return g_bf16_cases = 1, selfcheck();
    plait_precision prec = PLAIT_PRECISION_FP32;
    double tol = 1e-5;
    if (strcmp(mode, "tf32") == 0) prec = PLAIT_PRECISION_TF32, tol = 1e-3;
    else if (strcmp(mode, "bf16") == 0) prec = PLAIT_PRECISION_BF16, tol = 2e-2, g_bf16_cases = 1;
    else if (strcmp(mode, "fp32") != 0) {
        fprintf(stderr, "usage: %s fp32|tf32|bf16\n", argv[0]);
        return 2;
    }
    plait_host_install();
    /* PLAIT_TEST_CUDA_PLUGIN=cuda_emu: the same checks on the CPU emulator
     * (tests/cuda_emu), which runs the plugin's own kernel source */
    const char *plugin = getenv("PLAIT_TEST_CUDA_PLUGIN") ? getenv("PLAIT_TEST_CUDA_PLUGIN") : "cuda";
    const plait_plugin_desc *desc = plait_plugin_load(PLAIT_KIND_DEVICE, plugin);
    if (!desc) {
        fprintf(stderr, "FATAL: %s\n", plait_last_error());
        return 1;
    }
    const plait_device_ops *d = desc->ops;
    int32_t count = 0;
    if (d->count(plait_host_table(), &count) != PLAIT_OK || count < 1) {
        printf("SKIP: %s\n", plait_last_error());
        return 77;
    }
    plait_device_open_args args = {sizeof args, NULL, 0, 1, prec, 1};
    plait_device_info info = {.struct_size = sizeof info};
    if (d->open(plait_host_table(), &args, &info) != PLAIT_OK) {
        fprintf(stderr, "FATAL: open: %s\n", plait_last_error());
        return 1;
    }
    printf("device: %s, %.1f GiB, precision %s\n", info.name, (double)info.memory_bytes / (1 << 30), mode);
    cpu_table();
    const plait_kernels *k = d->kernels();
    uint64_t seed = getenv("PLAIT_TEST_SEED") ? strtoull(getenv("PLAIT_TEST_SEED"), NULL, 0)
                                              : (uint64_t)time(NULL) * 2654435761u;
    printf("seed: %llu (PLAIT_TEST_SEED repeats it)\n", (unsigned long long)seed);
    int fails = check_memory(d) + run_cases(k, d, tol, seed);
    d->close();
    printf("%s: %d failure%s\n", fails ? "FAILED" : "passed", fails, fails == 1 ? "" : "s");
    return fails ? 1 : 0;
}

/* `name` is one of the comma-separated names in `list` */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

static int run_list(const kc_named *cases, size_t n, const plait_kernels *k, const plait_device_ops *d, double tol,
                    uint64_t seed) {
    /* PLAIT_TEST_CASES=name,name,...: only those (when chasing one kernel) */
    const char *only = getenv("PLAIT_TEST_CASES");
    int fails = 0;
    for (size_t i = 0; i < n; i++)
        if (!only || listed(only, cases[i].name))
            fails += kc_run(cases[i].name, cases[i].fn, &g_cpu, k, d, tol, seed + i);
    return fails;
}

static int run_cases(const plait_kernels *k, const plait_device_ops *d, double tol, uint64_t seed) {
    /* the float32 entries every device has: the GPT layer's, the model's
     * ends', the element-wise and optimizer ones (seeds in one run) */
    int fails = run_list(kc_gpt_cases, kc_gpt_count, k, d, tol, seed);
    fails += run_list(kc_loss_cases, kc_loss_count, k, d, tol, seed + kc_gpt_count);
    fails += run_list(kc_vector_cases, kc_vector_count, k, d, tol, seed + kc_gpt_count + kc_loss_count);
    const size_t n = kc_gpt_count + kc_loss_count + kc_vector_count;
    /* the Llama family's (ABI 1.10): a device offering none runs the
     * cases anyway, which then fail naming the missing entry */
    fails += run_list(kc_llama_cases, kc_llama_count, k, d, tol, seed + 1000);
    /* the mixture of experts' (ABI 1.21), likewise */
    fails += run_list(kc_moe_cases, kc_moe_count, k, d, tol, seed + 2000);
    /* optional as a whole (ABI 1.8): a device offering any of them must
     * offer and pass every one */
    const int offered = k->struct_size >= offsetof(plait_kernels, to_bf16) + sizeof k->to_bf16 && k->to_bf16;
    if (g_bf16_cases && !offered) printf("bf16-activation entries: not offered by this device\n");
    if (g_bf16_cases && offered) {
        fails += run_list(kc_bf16_product_cases, kc_bf16_product_count, k, d, tol, seed + n);
        fails += run_list(kc_bf16_row_cases, kc_bf16_row_count, k, d, tol, seed + n + kc_bf16_product_count);
    }
    /* the Llama family's bf16 forms (ABI 1.22), optional as a whole too */
    const int llama_bf16 = k->struct_size >=
                               offsetof(plait_kernels, rmsnorm_forward_bf16) + sizeof k->rmsnorm_forward_bf16 &&
                           k->rmsnorm_forward_bf16;
    if (g_bf16_cases && !llama_bf16) printf("the Llama family's bf16-activation entries: not offered by this device\n");
    if (g_bf16_cases && llama_bf16) fails += run_list(kc_llama_bf16_cases, kc_llama_bf16_count, k, d, tol, seed + 2000);
    /* the mixture of experts' bf16 forms (ABI 1.29), optional as a whole too */
    const int moe_bf16 = k->struct_size >= offsetof(plait_kernels, moe_permute_bf16) + sizeof k->moe_permute_bf16 &&
                         k->moe_permute_bf16;
    if (g_bf16_cases && !moe_bf16)
        printf("the mixture of experts' bf16-activation entries: not offered by this device\n");
    if (g_bf16_cases && moe_bf16) fails += run_list(kc_moe_bf16_cases, kc_moe_bf16_count, k, d, tol, seed + 3000);
    return fails;
}
