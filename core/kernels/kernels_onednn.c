/*
 * The library under the fp32 matrix products: OpenBLAS (linked) or oneDNN
 * (Debian's libdnnl2, found at run time with dlopen so that one binary runs
 * with or without it and plait needs nothing of it to build).
 *
 * PLAIT_CPU_GEMM=auto|blas|onednn chooses, like OPENBLAS_CORETYPE chooses
 * the BLAS's kernels: an environment variable, so that the ranks a launcher
 * starts inherit it. auto takes oneDNN only on the ISAs where it was
 * measured faster than OpenBLAS on plait's products (docs/cpu.md), else the
 * BLAS. oneDNN's dnnl_sgemm runs on each tile of plait_k_sgemm's partition
 * from plait's own threads, as cblas_sgemm does, so results stay the same
 * bits for any thread count; oneDNN's OpenMP pool is therefore held at one
 * thread in each caller, with the passive wait, so that it never spins
 * beside plait's workers.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#define ONEDNN_LIB "libdnnl.so.2"

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);
typedef struct {
    int major, minor, patch;
    const char *hash;
    unsigned cpu_runtime, gpu_runtime;
} dnnl_version_t;

static struct {
    void *lib;
    dnnl_sgemm_fn sgemm;
    void (*omp_set_num_threads)(int);
    int isa;
    char version[32];
} g_dnnl;
static int g_gemm = PLAIT_GEMM_BLAS;
static char g_how[64] = "PLAIT_CPU_GEMM unset: auto";

/* the values of oneDNN 2.6's enum dnnl_cpu_isa_t */
static const char *isa_name(int isa) {
    switch (isa) {
        case 0x1:
            return "sse41";
        case 0x3:
            return "avx";
        case 0x7:
            return "avx2";
        case 0x407:
            return "avx2_vnni";
        case 0x27:
            return "avx512_core";
        case 0x67:
            return "avx512_core_vnni";
        case 0xe7:
            return "avx512_core_bf16";
        case 0x3e7:
            return "avx512_core_amx";
        default:
            return "unknown";
    }
}

/* Loads oneDNN once; 0, or -1 with why in err. */
static int load(char *err, size_t errlen) {
    if (g_dnnl.sgemm) return 0;
    /* Testing switch: another file name, to see the refusal of a missing
     * library on a machine that has it. */
    const char *name = getenv("PLAIT_ONEDNN_LIB");
    if (!name || !*name) name = ONEDNN_LIB;
    /* libgomp reads its wait policy when it loads: oneDNN's threads sleep
     * rather than spin between products (a setting made by hand stays). */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(err, errlen,
                 "oneDNN (%s) cannot be loaded: %s; it comes with Debian's package libdnnl2 "
                 "(apt-get install libdnnl2), or use PLAIT_CPU_GEMM=blas",
                 name, why ? why : "not found");
        return -1;
    }
    void *s = dlsym(lib, "dnnl_sgemm"), *omp = dlsym(lib, "omp_set_num_threads");
    void *isa = dlsym(lib, "dnnl_get_effective_cpu_isa"), *ver = dlsym(lib, "dnnl_version");
    if (!s || !omp || !isa || !ver) {
        snprintf(err, errlen, "%s has no %s: plait needs oneDNN 2.x built with OpenMP (Debian's libdnnl2)", name,
                 !s     ? "dnnl_sgemm"
                 : !omp ? "omp_set_num_threads"
                 : !isa ? "dnnl_get_effective_cpu_isa"
                        : "dnnl_version");
        dlclose(lib);
        return -1;
    }
    int (*isa_fn)(void);
    const dnnl_version_t *(*ver_fn)(void);
    memcpy(&isa_fn, &isa, sizeof isa_fn);
    memcpy(&ver_fn, &ver, sizeof ver_fn);
    memcpy(&g_dnnl.omp_set_num_threads, &omp, sizeof omp);
    const dnnl_version_t *v = ver_fn();
    snprintf(g_dnnl.version, sizeof g_dnnl.version, "%d.%d.%d", v->major, v->minor, v->patch);
    g_dnnl.isa = isa_fn();
    g_dnnl.lib = lib;
    memcpy(&g_dnnl.sgemm, &s, sizeof s);
    return 0;
}

/* auto: oneDNN on the ISAs (dnnl_cpu_isa_t values) where it was measured
 * faster than OpenBLAS on plait's products (docs/cpu.md, "oneDNN or
 * OpenBLAS"): avx512_core_amx (a Xeon with AMX: gpt-small's and
 * llama-small's whole steps 11-14% faster at 2 threads, 14% at 1),
 * avx512_core_bf16 (an AMD EPYC with AVX512_BF16 against OpenBLAS's
 * Cooperlake kernels: 12-21% at 2 threads, 3% at 1; an Intel Xeon against
 * its SkylakeX kernels: 4-13%), and avx512_core and avx512_core_vnni:
 * oneDNN's float32 products are the same code there as at avx512_core_bf16
 * (the same bits), OpenBLAS runs its SkylakeX kernels on those CPUs, and
 * the two held at those ISAs on the EPYC put oneDNN 3-11% ahead. On AVX2
 * (AMD EPYC, Zen kernels) OpenBLAS was faster. */
static const int g_onednn_faster[] = {0x3e7 /* avx512_core_amx */, 0xe7 /* avx512_core_bf16 */,
                                      0x67 /* avx512_core_vnni */, 0x27 /* avx512_core */};

/* AVX-512 (oneDNN's avx512_core and the ISAs above it) or AMX_BF16
 * (kernels_cpuid.c): what those ISAs need and AVX2 lacks, checked before
 * loading the library (oneDNN then checks the rest, the tile state's
 * permission included) */
static int cpu_may_have_faster_isa(void) { return plait_k_cpu_amx_bf16() || plait_k_cpu_avx512_core(); }

static int auto_picks_onednn(int isa) {
    for (size_t i = 0; i < sizeof g_onednn_faster / sizeof g_onednn_faster[0]; i++)
        if (g_onednn_faster[i] == isa) return 1;
    return 0;
}

/* auto's choice on this machine: oneDNN, loaded only on a CPU with one of
 * those ISAs' features (elsewhere its OpenMP runtime would cost the run
 * memory for nothing), where it runs one of them */
static int auto_takes_onednn(void) {
    char why[512];
    return cpu_may_have_faster_isa() && load(why, sizeof why) == 0 && auto_picks_onednn(g_dnnl.isa);
}

int plait_kernels_onednn_load(char *err, size_t errlen) { return load(err, errlen); }

int plait_kernels_set_gemm(const char *name, char *err, size_t errlen) {
    const char *from = "";
    if (!name) {
        name = getenv("PLAIT_CPU_GEMM");
        from = "PLAIT_CPU_GEMM=";
        if (!name || !*name) name = "auto", from = "PLAIT_CPU_GEMM unset: ";
    }
    char why[512];
    if (strcmp(name, "blas") == 0) {
        g_gemm = PLAIT_GEMM_BLAS;
    } else if (strcmp(name, "onednn") == 0) {
        if (load(why, sizeof why) != 0) {
            snprintf(err, errlen, "%sonednn: %s", from, why);
            return -1;
        }
        g_gemm = PLAIT_GEMM_ONEDNN;
    } else if (strcmp(name, "auto") == 0) {
        g_gemm = auto_takes_onednn() ? PLAIT_GEMM_ONEDNN : PLAIT_GEMM_BLAS;
    } else {
        snprintf(err, errlen, "%s%s: unknown matrix-product library; allowed: auto, blas, onednn", from, name);
        return -1;
    }
    snprintf(g_how, sizeof g_how, "%s%s", from, name);
    return 0;
}

int plait_kernels_gemm(void) { return g_gemm; }

int plait_kernels_onednn_expected(void) {
    const char *env = getenv("PLAIT_CPU_GEMM");
    if (env && strcmp(env, "onednn") == 0) return 1;
    if (env && *env && strcmp(env, "auto") != 0) return 0;
    return auto_takes_onednn();
}

int plait_k_gemm_blas_forced(void) {
    const char *env = getenv("PLAIT_CPU_GEMM");
    return env && strcmp(env, "blas") == 0;
}

void plait_kernels_gemm_describe(char *buf, size_t len) {
    if (g_gemm == PLAIT_GEMM_ONEDNN)
        snprintf(buf, len, "products on oneDNN %s, %s ISA (%s)", g_dnnl.version, isa_name(g_dnnl.isa), g_how);
    else if (g_dnnl.lib)
        snprintf(buf, len, "products on the BLAS (%s; oneDNN %s would run its %s ISA)", g_how, g_dnnl.version,
                 isa_name(g_dnnl.isa));
    else snprintf(buf, len, "products on the BLAS (%s; oneDNN not loaded)", g_how);
}

void *plait_k_onednn_sym(const char *name) { return g_dnnl.lib ? dlsym(g_dnnl.lib, name) : NULL; }

const char *plait_k_onednn_version(void) { return g_dnnl.version; }

const char *plait_k_onednn_isa_name(void) { return isa_name(g_dnnl.isa); }

/* dnnl_cpu_isa_t values are cumulative bit sets: every ISA with bf16
 * instructions (avx512_core_bf16, _amx and those oneDNN adds above them)
 * holds avx512_core_bf16's bits */
int plait_k_onednn_isa_bf16(void) { return g_dnnl.sgemm && (g_dnnl.isa & 0xe7) == 0xe7; }

/* oneDNN 2.x's generated f32 GEMM kernels (AVX2 and AVX-512) point the
 * stack pointer into a heap buffer while they run, so a signal handled on
 * that thread meanwhile writes its frame into the heap: glibc's "corrupted
 * size vs. prev_size" some frees later (fixed upstream after Debian's
 * 2.6.3). A run's own handlers ([run] exit_signal) and any
 * a host process installs would do it, so the asynchronous signals are held
 * for the call's length and reach the thread just after it, or another
 * thread at once. The signals a fault raises stay open: held, they would
 * kill the process without their handler. */
void plait_k_onednn_enter(sigset_t *saved) {
    sigset_t held;
    sigfillset(&held);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&held, faults[i]);
    pthread_sigmask(SIG_BLOCK, &held, saved);
    g_dnnl.omp_set_num_threads(1);
}

void plait_k_onednn_leave(const sigset_t *saved) { pthread_sigmask(SIG_SETMASK, saved, NULL); }

void plait_k_onednn_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    sigset_t saved;
    plait_k_onednn_enter(&saved);
    int rc = g_dnnl.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    plait_k_onednn_leave(&saved);
    if (rc != 0) {
        /* dnnl_sgemm refuses only bad arguments, which plait_k_sgemm's
         * callers never pass; the BLAS computes the same product */
        plait_k_blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}
