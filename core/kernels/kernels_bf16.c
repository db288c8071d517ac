/*
 * bf16 matrix products ([run] precision = bf16): the operands of every
 * plait_k_sgemm are rounded to bfloat16 (round to nearest even, as
 * PyTorch's .to(torch.bfloat16)), multiplied with fp32 accumulation into the
 * fp32 output. Master weights, gradients and optimizer state stay fp32;
 * only the products' inputs lose precision, as in llm.c's and Megatron's
 * bf16 modes.
 *
 * Native: bf16 copies of the operands multiplied by oneDNN's matmul
 * (kernels_onednn_matmul.c: AMX tiles or AVX512_BF16 dot products, 3-6x
 * the fp32 rate on an AMX Xeon, docs/cpu.md) or, where oneDNN is missing
 * or PLAIT_CPU_GEMM=blas, by the BLAS's cblas_sbgemm when it has one.
 * Where the CPU's bf16 dot products are slower than its fp32 ones (an
 * Intel core without AMX runs vdpbf16ps at half its FMA rate), a native
 * run multiplies in fp32 on operands widened from bf16 instead: the same
 * bf16 storage, the fp32 rate (PLAIT_CPU_BF16_PRODUCTS chooses by hand).
 * Emulated (a testing mode for CPUs without them): the operands rounded to
 * bf16 but kept in fp32 storage, multiplied by the fp32 products' library
 * (PLAIT_CPU_GEMM). Products of two bf16 values are exact in fp32, so both
 * compute the same numbers up to the order of the fp32 sums.
 *
 * The copies live in per-thread scratch buffers that grow to the largest
 * product and are freed when the thread ends.
 *
 * Also what the entries on bf16 activations share (kernels_internal.h):
 * that scratch by slot, the widening and rounding loops, to_bf16 and
 * from_bf16, and one product on bf16 operands (plait_k_bf16_tile).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"
#include "kernels/simd_clones.h"

#ifdef PLAIT_K_NARROW16_TARGET
#define NARROW_X86 1
#endif

static int g_precision = PLAIT_KERNELS_FP32;
static plait_sbgemm_fn g_sbgemm; /* NULL: the native products run on oneDNN */

plait_sbgemm_fn plait_kernels_sbgemm(void) {
    plait_sbgemm_fn fn;
    void *sym = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    memcpy(&fn, &sym, sizeof fn);
    return fn;
}

/* Whether this CPU's bf16 dot products are slower than its fp32 FMAs:
 * an Intel core (cpuid leaf 0) with AVX512_BF16 and without usable AMX_BF16
 * (cpuid leaf 7 EDX bit 22, with the tile state in XCR0 bits 17-18). Such a
 * core issues vdpbf16ps at half the rate of its FMAs (docs/cpu.md), so its
 * bf16 products reach half the fp32 rate; AMD's cores with AVX512_BF16 run
 * them at twice it. A rule from cpuid, not a timing, so that the choice (and
 * the run's bits) stay the same from run to run. */
static int bf16_dots_slower(void) {
    return plait_k_cpu_intel() && plait_k_cpu_avx512_bf16() && !plait_k_cpu_amx_bf16();
}

/* PLAIT_CPU_BF16_PRODUCTS: "bf16" (the bf16 instructions), "fp32" (fp32 on
 * widened operands) or "auto"/unset (fp32 where bf16_dots_slower). 1 for
 * fp32, 0 for bf16, -1 with why for another value; how says which. */
static int pick_widened(char *how, size_t how_len, char *why, size_t why_len) {
    const char *v = getenv("PLAIT_CPU_BF16_PRODUCTS");
    if (v && strcmp(v, "fp32") == 0) {
        snprintf(how, how_len, "PLAIT_CPU_BF16_PRODUCTS=fp32");
        return 1;
    }
    if (v && strcmp(v, "bf16") == 0) return 0;
    if (v && *v && strcmp(v, "auto") != 0) {
        snprintf(why, why_len, "PLAIT_CPU_BF16_PRODUCTS=%s: unknown way to multiply bf16; allowed: auto, bf16, fp32",
                 v);
        return -1;
    }
    if (!bf16_dots_slower()) return 0;
    snprintf(how, how_len, "PLAIT_CPU_BF16_PRODUCTS%s: auto; bf16 dot products run at half the fp32 rate here",
             v && *v ? "=auto" : " unset");
    return 1;
}

/* The fp32 products on widened operands where pick_widened says so (no
 * library needed), or where oneDNN is held below its bf16 ISA unless
 * PLAIT_CPU_BF16_PRODUCTS=bf16 asks for its emulated products; else
 * oneDNN unless PLAIT_CPU_GEMM=blas forbids it or it
 * cannot run bf16 here; else the BLAS's cblas_sbgemm. 0 with what in
 * `what`, or -1 with why none can in `why` (-2: PLAIT_CPU_BF16_PRODUCTS is
 * unknown). */
static int pick_native(plait_sbgemm_fn *sbgemm, int *widened, char *what, size_t what_len, char *why, size_t why_len) {
    char impl[96], err[512] = "oneDNN is not used: PLAIT_CPU_GEMM=blas", how[160];
    *sbgemm = plait_kernels_sbgemm();
    *widened = pick_widened(how, sizeof how, why, why_len);
    if (*widened < 0) return -2;
    if (*widened) {
        snprintf(what, what_len, "bf16 products in fp32 on widened operands (%s)", how);
        return 0;
    }
    if (!plait_k_gemm_blas_forced() && plait_k_onednn_bf16_probe(impl, sizeof impl, err, sizeof err) == 0) {
        const char *v = getenv("PLAIT_CPU_BF16_PRODUCTS");
        /* oneDNN held below its bf16 ISA on a CPU that has one (by
         * ONEDNN_MAX_CPU_ISA): its bf16 matmul is emulated there, at a
         * third of its fp32 rate (docs/cpu.md) */
        if (!plait_k_onednn_isa_bf16() && !(v && strcmp(v, "bf16") == 0)) {
            *widened = 1;
            snprintf(what, what_len, "bf16 products in fp32 on widened operands (oneDNN at %s%s emulates bf16)",
                     plait_k_onednn_isa_name(), getenv("ONEDNN_MAX_CPU_ISA") ? " by ONEDNN_MAX_CPU_ISA" : "");
            return 0;
        }
        *sbgemm = NULL;
        snprintf(what, what_len, "bf16 products on oneDNN %s (%s)", plait_k_onednn_version(), impl);
        return 0;
    }
    if (*sbgemm) {
        snprintf(what, what_len, "bf16 products on the BLAS's cblas_sbgemm");
        return 0;
    }
    /* the fp32 products' way out of a missing oneDNN is none for bf16 */
    char *blas_hint = strstr(err, ", or use PLAIT_CPU_GEMM=blas");
    if (blas_hint) *blas_hint = '\0';
    snprintf(why, why_len,
             "neither oneDNN nor the BLAS has a bf16 matrix product here: %s; and the BLAS has no "
             "cblas_sbgemm (an OpenBLAS built without BUILD_BFLOAT16, as Debian's 0.3.21 is)",
             err);
    return -1;
}

static char g_native_what[224];
static int g_widened; /* a BF16 run's products in fp32 on widened operands */

int plait_k_bf16_widened(void) { return g_widened && g_precision == PLAIT_KERNELS_BF16; }

int plait_kernels_bf16_native(char *what, size_t what_len, char *why, size_t why_len) {
    plait_sbgemm_fn fn;
    int widened;
    char w[224], y[768];
    int rc = pick_native(&fn, &widened, w, sizeof w, y, sizeof y);
    if (rc == 0 && what) snprintf(what, what_len, "%s", w);
    if (rc != 0 && why) snprintf(why, why_len, "%s", y);
    return rc;
}

void plait_kernels_bf16_describe(char *buf, size_t len) {
    if (g_precision == PLAIT_KERNELS_BF16) snprintf(buf, len, "%s", g_native_what);
    else if (g_precision == PLAIT_KERNELS_BF16_EMULATED)
        snprintf(buf, len, "bf16 products emulated (operands rounded to bf16, multiplied in fp32)");
    else snprintf(buf, len, "fp32 products");
}

int plait_kernels_set_precision(int precision) {
    if (precision == PLAIT_KERNELS_BF16) {
        plait_sbgemm_fn fn;
        int widened;
        char why[768];
        if (pick_native(&fn, &widened, g_native_what, sizeof g_native_what, why, sizeof why) != 0) return -1;
        g_sbgemm = fn;
        g_widened = widened;
    } else if (precision != PLAIT_KERNELS_FP32 && precision != PLAIT_KERNELS_BF16_EMULATED) {
        return -1;
    }
    g_precision = precision;
    return 0;
}

int plait_kernels_precision(void) { return g_precision; }

static inline float bf16_round(float x) { return plait_k_widen_bf16(plait_k_narrow_bf16(x)); }

float plait_bf16_round(float x) { return bf16_round(x); }

/* ---- per-thread scratch ------------------------------------------------- */
typedef struct scratch {
    void *buf[PLAIT_K_SCRATCH_SLOTS];
    size_t cap[PLAIT_K_SCRATCH_SLOTS];
} scratch;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
    scratch *s = p;
    for (int i = 0; i < PLAIT_K_SCRATCH_SLOTS; i++) free(s->buf[i]);
    free(s);
}

static void make_key(void) { (void)pthread_key_create(&g_key, scratch_free); }

static void *scratch_get(int which, size_t bytes) {
    pthread_once(&g_key_once, make_key);
    scratch *s = pthread_getspecific(g_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->cap[which] < bytes) {
        void *p = realloc(s->buf[which], bytes);
        if (!p) return NULL;
        s->buf[which] = p;
        s->cap[which] = bytes;
    }
    return s->buf[which];
}

float *plait_k_scratch(int slot, size_t n) { return scratch_get(slot, (n ? n : 1) * sizeof(float)); }

float *plait_k_scratch_or_die(int slot, size_t n, const char *kernel) {
    float *p = plait_k_scratch(slot, n);
    if (p) return p;
    fprintf(stderr, "FATAL: kernels: %s: out of memory for %zu bytes of per-thread scratch\n", kernel,
            n * sizeof(float));
    fflush(stderr);
    abort();
}

/* ---- conversion --------------------------------------------------------- */
typedef struct convert_job {
    const float *src;
    void *dst;
    int64_t cols, ld;
    int native;
} convert_job;

PLAIT_SIMD_CLONES
static void convert_rows(void *vj, int64_t r0, int64_t r1) {
    const convert_job *j = vj;
    const int64_t cols = j->cols; /* read once: a store through d could alias the job */
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict s = j->src + r * j->ld;
        if (j->native) {
            plait_k_narrow((uint16_t *)j->dst + r * cols, s, cols);
        } else {
            float *restrict d = (float *)j->dst + r * cols;
            for (int64_t c = 0; c < cols; c++) d[c] = bf16_round(s[c]);
        }
    }
}

/* A stored matrix of rows x cols (row stride ld) as a packed bf16 copy in
 * scratch `which`; NULL when out of memory. */
static void *convert(int which, const float *src, int64_t rows, int64_t cols, int64_t ld, int native) {
    void *dst = scratch_get(which, (size_t)(rows * cols) * (native ? sizeof(uint16_t) : sizeof(float)));
    if (!dst) return NULL;
    convert_job j = {src, dst, cols, ld, native};
    plait_pool_for(rows, 64, convert_rows, &j);
    return dst;
}

int plait_k_bf16_operands(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, plait_bf16_operands *out) {
    int native = g_precision == PLAIT_KERNELS_BF16 && !g_widened;
    int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    out->native = native;
    out->A = convert(0, A, a_rows, a_cols, lda, native);
    out->B = convert(1, B, b_rows, b_cols, ldb, native);
    out->lda = a_cols;
    out->ldb = b_cols;
    return out->A && out->B ? 0 : -1;
}

PLAIT_SIMD_CLONES static void widen_span(float *restrict dst, const uint16_t *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = plait_k_widen_bf16(src[i]);
}

PLAIT_SIMD_CLONES static void narrow_portable(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = plait_k_narrow_bf16(src[i]);
}

#ifdef NARROW_X86
PLAIT_K_NARROW16_TARGET static void narrow_native(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(void *)(dst + i), plait_k_narrow16(src + i, 0xffff));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, k, plait_k_narrow16(src + i, k));
    }
}
#endif

/* Whether vcvtneps2bf16 is here: asked of cpuid once (a trap to the
 * hypervisor in a virtual machine), every thread computing the same
 * answer. */
int plait_k_narrow_native(void) {
#ifdef NARROW_X86
    static atomic_int has = -1;
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h < 0) {
        h = plait_k_cpu_avx512_bf16();
        atomic_store_explicit(&has, h, memory_order_relaxed);
    }
    return h;
#else
    return 0;
#endif
}

static void narrow_span(uint16_t *dst, const float *src, int64_t n) {
#ifdef NARROW_X86
    if (plait_k_narrow_native()) {
        narrow_native(dst, src, n);
        return;
    }
#endif
    narrow_portable(dst, src, n);
}

/* the loops inside one call: an attention head's rows are a head size
 * wide, and a call per row cost more than its conversion */
PLAIT_SIMD_CLONES static void widen_block(float *dst, int64_t dld, const uint16_t *src, int64_t ld, int64_t rows,
                                          int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        float *restrict d = dst + r * dld;
        const uint16_t *restrict x = src + r * ld;
        for (int64_t c = 0; c < cols; c++) d[c] = plait_k_widen_bf16(x[c]);
    }
}

PLAIT_SIMD_CLONES static void narrow_block_portable(uint16_t *dst, int64_t ld, const float *src, int64_t sld,
                                                    int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *restrict d = dst + r * ld;
        const float *restrict x = src + r * sld;
        for (int64_t c = 0; c < cols; c++) d[c] = plait_k_narrow_bf16(x[c]);
    }
}

static void narrow_block(uint16_t *dst, int64_t ld, const float *src, int64_t sld, int64_t rows, int64_t cols) {
#ifdef NARROW_X86
    if (plait_k_narrow_native()) {
        for (int64_t r = 0; r < rows; r++) narrow_native(dst + r * ld, src + r * sld, cols);
        return;
    }
#endif
    narrow_block_portable(dst, ld, src, sld, rows, cols);
}

/* The exported forms call the clones: clang gives a non-static
 * target_clones function no symbol under its own name for other files to
 * link against, so the clones stay static here. */
void plait_k_widen(float *dst, const uint16_t *src, int64_t n) { widen_span(dst, src, n); }

void plait_k_narrow(uint16_t *dst, const float *src, int64_t n) { narrow_span(dst, src, n); }

void plait_k_widen_rows(float *dst, int64_t dld, const uint16_t *src, int64_t ld, int64_t rows, int64_t cols) {
    widen_block(dst, dld, src, ld, rows, cols);
}

void plait_k_narrow_rows(uint16_t *dst, int64_t ld, const float *src, int64_t sld, int64_t rows, int64_t cols) {
    narrow_block(dst, ld, src, sld, rows, cols);
}

/* ---- the whole-tensor entries (to_bf16, from_bf16) ---------------------- */
typedef struct span_job {
    uint16_t *h;
    float *f;
    const uint16_t *hin;
    const float *fin;
} span_job;

static void to_bf16_range(void *vj, int64_t lo, int64_t hi) {
    const span_job *j = vj;
    plait_k_narrow(j->h + lo, j->fin + lo, hi - lo);
}

static void from_bf16_range(void *vj, int64_t lo, int64_t hi) {
    const span_job *j = vj;
    plait_k_widen(j->f + lo, j->hin + lo, hi - lo);
}

void plait_k_to_bf16(plait_bf16 *dst, const float *src, size_t n) {
    span_job j = {.h = dst, .fin = src};
    plait_pool_for((int64_t)n, PLAIT_ELEMWISE_CHUNK, to_bf16_range, &j);
}

void plait_k_from_bf16(float *dst, const plait_bf16 *src, size_t n) {
    span_job j = {.f = dst, .hin = src};
    plait_pool_for((int64_t)n, PLAIT_ELEMWISE_CHUNK, from_bf16_range, &j);
}

/* A product oneDNN refused (out of memory for its primitive): the same
 * numbers up to the order of the sums (products of two bf16 values are
 * exact in fp32), by the fp32 BLAS on widened copies, or element by element
 * where even those do not fit; with a warning. */
static void widened_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                         int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    float *wa = malloc(sizeof(float) * (size_t)(a_rows * a_cols));
    float *wb = malloc(sizeof(float) * (size_t)(b_rows * b_cols));
    plait_kernels_warn("oneDNN refused a bf16 %lldx%lldx%lld product; it runs on the fp32 %s", (long long)M,
                       (long long)N, (long long)K, wa && wb ? "BLAS" : "scalar loop");
    if (wa && wb) {
        plait_k_widen_rows(wa, a_cols, A, lda, a_rows, a_cols);
        plait_k_widen_rows(wb, b_cols, B, ldb, b_rows, b_cols);
        plait_k_blas_gemm(trans_a, trans_b, M, N, K, alpha, wa, a_cols, wb, b_cols, beta, C, ldc);
    } else {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += plait_k_widen_bf16(trans_a ? A[k * lda + i] : A[i * lda + k]) *
                           plait_k_widen_bf16(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
                float *c = &C[i * ldc + j];
                *c = alpha * acc + (beta != 0.0f ? beta * *c : 0.0f);
            }
    }
    free(wa);
    free(wb);
}

/* The native product of two bf16 operands on this thread (a bf16 run's
 * library: cblas_sbgemm, or oneDNN with the widened product where it
 * refuses the shape). */
static void native_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                        int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (!g_sbgemm) {
        if (plait_k_onednn_bf16_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) != 0)
            widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    g_sbgemm(101 /* CblasRowMajor */, trans_a ? 112 : 111, trans_b ? 112 : 111, (int)M, (int)N, (int)K, alpha, A,
             (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* What a thread's tile slot last widened, so that the next tile of the same
 * product on that thread reuses it: tiles that share their rows of A (or
 * columns of B) widen them once a thread, not once a tile. */
typedef struct widened_memo {
    uint64_t product;
    const uint16_t *src;
    int64_t ld, rows, cols;
    const float *dst;
} widened_memo;

static _Thread_local widened_memo g_memo[2];
static _Atomic uint64_t g_products;

uint64_t plait_k_bf16_product(void) { return ++g_products; }

/* src (rows x cols, row stride ld) widened into dst (row stride cols),
 * unless this thread's memo says dst already holds it for this product */
static void widen_operand(widened_memo *m, uint64_t product, float *dst, const uint16_t *src, int64_t ld, int64_t rows,
                          int64_t cols) {
    if (product && m->product == product && m->src == src && m->ld == ld && m->rows == rows && m->cols == cols &&
        m->dst == dst)
        return;
    plait_k_widen_rows(dst, cols, src, ld, rows, cols);
    *m = (widened_memo){product, src, ld, rows, cols, dst};
}

void plait_k_bf16_tile(uint64_t product, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (g_precision == PLAIT_KERNELS_BF16 && !g_widened) {
        native_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K,
                  b_cols = trans_b ? K : N;
    float *wa = plait_k_scratch(PLAIT_K_SLOT_TILE_A, (size_t)(a_rows * a_cols));
    float *wb = plait_k_scratch(PLAIT_K_SLOT_TILE_B, (size_t)(b_rows * b_cols));
    if (!wa || !wb) {
        widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    widen_operand(&g_memo[0], product, wa, A, lda, a_rows, a_cols);
    widen_operand(&g_memo[1], product, wb, B, ldb, b_rows, b_cols);
    plait_k_gemm_here(trans_a, trans_b, M, N, K, alpha, wa, a_cols, wb, b_cols, beta, C, ldc);
}

int plait_k_bf16_tile_rounded(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                              const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc) {
    if (g_precision != PLAIT_KERNELS_BF16 || g_widened || g_sbgemm) return -1;
    return plait_k_onednn_bf16_gemm_rounded(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

void plait_k_bf16_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const plait_bf16_operands *op, int64_t r0, int64_t c0, float beta, float *C,
                       int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (op->native) {
        const uint16_t *A = op->A, *B = op->B;
        A += trans_a ? r0 : r0 * op->lda;
        B += trans_b ? c0 * op->ldb : c0;
        native_gemm(trans_a, trans_b, M, N, K, alpha, A, op->lda, B, op->ldb, beta, C, ldc);
    } else {
        const float *A = op->A, *B = op->B;
        A += trans_a ? r0 : r0 * op->lda;
        B += trans_b ? c0 * op->ldb : c0;
        plait_k_gemm_here(trans_a, trans_b, M, N, K, alpha, A, op->lda, B, op->ldb, beta, C, ldc);
    }
}
