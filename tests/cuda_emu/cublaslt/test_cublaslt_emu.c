/*
 * The cuBLASLt stand-in (cublaslt.c) against a double-precision reference
 * computed here from NVIDIA's definition, D = alpha·op(A)·op(B) + beta·C
 * (+ bias per row of D), column-major, and the GELU epilogues (GELU's
 * input kept in the auxiliary matrix, GELU's gradient); and each of its
 * refusals: the
 * status, the one stderr line saying why, and D left untouched.
 *
 * Most operands are multiples of 1/64 in [-2, 2] (exact in bf16, their
 * products and short sums exact in float), so those results must equal the
 * reference exactly, whatever order the emulator sums in; random floats
 * check the rest against a tolerance.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include <cublasLt.h>

/* ---- one matmul, set up like the plugin does ---------------------------- */

typedef struct spec {
    int ta, tb;                  /* 0: CUBLAS_OP_N, 1: CUBLAS_OP_T */
    int64_t m, n, k;             /* D is m x n */
    int64_t pad_a, pad_b, pad_c; /* ld = rows + pad */
    int64_t pad_d;               /* D's ld = m + pad_d (C's layout when pad_d == pad_c) */
    int batch;
    int64_t gap;                 /* batch stride = ld * cols + gap */
    int interleave;              /* instead: batch stride = rows, ld = rows * batch + pad (attention heads) */
    int bf16, tf32, bias, in_place;
    int64_t bias_stride;
    float alpha, beta;
    uint64_t workspace;          /* MAX_WORKSPACE_BYTES */
    uint32_t align;              /* every MIN_ALIGNMENT_*_BYTES */
} spec;

typedef struct fx {
    spec s;
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found;
    int64_t ar, ac, lda, br, bc, ldb, ldc, ldd, sa, sb, sc, sd;
    void *A, *B;
    float *C, *D, *bias, *ref;
    size_t nA, nB, nC, nD, nbias;
    void *ws;
} fx;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}

/* a multiple of 1/64 in [-2, 2] */
static float grid(void) { return (float)((int)(rnd() % 257) - 128) / 64.0f; }

static void *alloc64(size_t bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    assert_non_null(p);
    memset(p, 0, n ? n : 64);
    return p;
}

static uint16_t to_bf16_exact(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    assert_int_equal(u & 0xffffu, 0); /* grid values are exact in bf16 */
    return (uint16_t)(u >> 16);
}

/* bf16 decoded from its fields (finite values), independently of the
 * emulator's bit shift: sign, 8-bit exponent (bias 127), 7-bit mantissa */
static float from_bf16(uint16_t h) {
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e ? ldexp(128 + m, e - 127 - 7) : ldexp(m, 1 - 127 - 7);
    return (float)(h & 0x8000 ? -v : v);
}

static float a_at(const fx *f, size_t idx) {
    return f->s.bf16 ? from_bf16(((const uint16_t *)f->A)[idx]) : ((const float *)f->A)[idx];
}

static float b_at(const fx *f, size_t idx) {
    return f->s.bf16 ? from_bf16(((const uint16_t *)f->B)[idx]) : ((const float *)f->B)[idx];
}

static void fill_operand(void *m, size_t n, int bf16, int random_floats) {
    for (size_t i = 0; i < n; i++) {
        float v = random_floats ? (float)((double)rnd() / 2147483648.0 - 1.0) : grid();
        if (bf16)
            ((uint16_t *)m)[i] = to_bf16_exact(v);
        else
            ((float *)m)[i] = v;
    }
}

/* Layouts, descriptor and preference for `s`, operands filled. */
static void fx_init(fx *f, const spec *s, int random_floats) {
    memset(f, 0, sizeof *f);
    f->s = *s;
    if (!f->s.batch) f->s.batch = 1;
    if (!f->s.align) f->s.align = 16;
    const spec *p = &f->s;
    f->ar = p->ta ? p->k : p->m, f->ac = p->ta ? p->m : p->k;
    f->br = p->tb ? p->n : p->k, f->bc = p->tb ? p->k : p->n;
    f->lda = f->ar + p->pad_a, f->ldb = f->br + p->pad_b, f->ldc = p->m + p->pad_c, f->ldd = p->m + p->pad_d;
    if (p->in_place) f->ldd = f->ldc;
    int64_t bt = p->batch;
    if (p->interleave) {
        f->lda += f->ar * (bt - 1), f->ldb += f->br * (bt - 1), f->ldc += p->m * (bt - 1), f->ldd += p->m * (bt - 1);
        f->sa = f->ar, f->sb = f->br, f->sc = f->sd = p->m;
    } else {
        f->sa = bt > 1 ? f->lda * f->ac + p->gap : 0;
        f->sb = bt > 1 ? f->ldb * f->bc + p->gap : 0;
        f->sc = bt > 1 ? f->ldc * p->n + p->gap : 0;
        f->sd = bt > 1 ? f->ldd * p->n + p->gap : 0;
    }
    if (p->in_place) f->sd = f->sc;
    f->nA = (size_t)((bt - 1) * f->sa + f->lda * f->ac);
    f->nB = (size_t)((bt - 1) * f->sb + f->ldb * f->bc);
    f->nC = (size_t)((bt - 1) * f->sc + f->ldc * p->n);
    f->nD = (size_t)((bt - 1) * f->sd + f->ldd * p->n);
    size_t esz = p->bf16 ? 2 : 4;
    f->A = alloc64(f->nA * esz);
    f->B = alloc64(f->nB * esz);
    f->C = alloc64(f->nC * 4);
    f->D = p->in_place ? f->C : alloc64(f->nD * 4);
    f->ref = alloc64(f->nD * 4);
    fill_operand(f->A, f->nA, p->bf16, random_floats);
    fill_operand(f->B, f->nB, p->bf16, random_floats);
    fill_operand(f->C, f->nC, 0, random_floats);
    if (!p->in_place)
        for (size_t i = 0; i < f->nD; i++) f->D[i] = 12345.0f; /* untouched outside D's matrices */
    if (p->bias) {
        f->nbias = (size_t)((bt - 1) * p->bias_stride + p->m);
        f->bias = alloc64(f->nbias * 4);
        fill_operand(f->bias, f->nbias, 0, random_floats);
    }
    f->ws = p->workspace ? alloc64((size_t)p->workspace) : NULL;

    assert_int_equal(cublasLtCreate(&f->h), CUBLAS_STATUS_SUCCESS);
    cublasComputeType_t ct = p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    assert_int_equal(cublasLtMatmulDescCreate(&f->desc, ct, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), 0);
    if (p->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt32 = CUDA_R_32F;
        assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
        assert_int_equal(
            cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt32, sizeof bt32), 0);
        assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                        &p->bias_stride, sizeof p->bias_stride),
                         0);
    }
    cudaDataType_t ot = p->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    struct {
        cublasLtMatrixLayout_t *l;
        cudaDataType_t t;
        int64_t r, c, ld, stride;
    } ls[4] = {{&f->la, ot, f->ar, f->ac, f->lda, f->sa},
               {&f->lb, ot, f->br, f->bc, f->ldb, f->sb},
               {&f->lc, CUDA_R_32F, p->m, p->n, f->ldc, f->sc},
               {&f->ld, CUDA_R_32F, p->m, p->n, f->ldd, f->sd}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(cublasLtMatrixLayoutCreate(ls[i].l, ls[i].t, (uint64_t)ls[i].r, (uint64_t)ls[i].c, ls[i].ld),
                         0);
        if (p->batch > 1) {
            int32_t count = p->batch;
            assert_int_equal(cublasLtMatrixLayoutSetAttribute(*ls[i].l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                              sizeof count),
                             0);
            assert_int_equal(cublasLtMatrixLayoutSetAttribute(*ls[i].l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &ls[i].stride, sizeof ls[i].stride),
                             0);
        }
    }
    assert_int_equal(cublasLtMatmulPreferenceCreate(&f->pref), 0);
    assert_int_equal(cublasLtMatmulPreferenceSetAttribute(f->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &p->workspace, sizeof p->workspace),
                     0);
    cublasLtMatmulPreferenceAttributes_t al[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        assert_int_equal(cublasLtMatmulPreferenceSetAttribute(f->pref, al[i], &p->align, sizeof p->align), 0);
}

static void fx_free(fx *f) {
    cublasLtMatrixLayoutDestroy(f->la);
    cublasLtMatrixLayoutDestroy(f->lb);
    cublasLtMatrixLayoutDestroy(f->lc);
    cublasLtMatrixLayoutDestroy(f->ld);
    cublasLtMatmulDescDestroy(f->desc);
    cublasLtMatmulPreferenceDestroy(f->pref);
    cublasLtDestroy(f->h);
    free(f->A);
    free(f->B);
    if (f->D != f->C) free(f->D);
    free(f->C);
    free(f->ref);
    free(f->bias);
    free(f->ws);
}

static cublasStatus_t fx_heuristic(fx *f) {
    f->found = -1;
    return cublasLtMatmulAlgoGetHeuristic(f->h, f->desc, f->la, f->lb, f->lc, f->ld, f->pref, 1, &f->res, &f->found);
}

/* The matmul with explicit pointers (the refusal tests shift them). */
static cublasStatus_t fx_matmul_with(fx *f, const void *A, const void *B, const void *C, void *D, const float *bias,
                                     size_t ws_bytes) {
    if (f->s.bias)
        assert_int_equal(
            cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), 0);
    return cublasLtMatmul(f->h, f->desc, &f->s.alpha, A, f->la, B, f->lb, &f->s.beta, C, f->lc, D, f->ld,
                          &f->res.algo, f->ws, ws_bytes, NULL);
}

static cublasStatus_t fx_matmul(fx *f) {
    return fx_matmul_with(f, f->A, f->B, f->C, f->D, f->bias, (size_t)f->s.workspace);
}

/* float -> TF32 by round to nearest, ties away from zero (cvt.rna.tf32.f32),
 * written here independently of the emulator */
static double tf32_ref(float x) {
    double m;
    int e;
    m = frexp((double)x, &e); /* |m| in [0.5, 1): 11 significant bits = m * 2^11 */
    double scaled = m * 2048.0;
    double r = scaled < 0 ? -floor(-scaled + 0.5) : floor(scaled + 0.5);
    return ldexp(r / 2048.0, e);
}

/* D's reference from the definition, in double, into f->ref (same layout
 * as D; C read before D is written, so in-place works too). */
static void fx_reference(fx *f) {
    const spec *p = &f->s;
    memcpy(f->ref, f->D, f->nD * 4);
    for (int64_t bi = 0; bi < p->batch; bi++)
        for (int64_t j = 0; j < p->n; j++)
            for (int64_t i = 0; i < p->m; i++) {
                double acc = 0;
                for (int64_t l = 0; l < p->k; l++) {
                    size_t ai = (size_t)(bi * f->sa + (p->ta ? l + i * f->lda : i + l * f->lda));
                    size_t bj = (size_t)(bi * f->sb + (p->tb ? j + l * f->ldb : l + j * f->ldb));
                    double a = a_at(f, ai), b = b_at(f, bj);
                    if (p->tf32) a = tf32_ref((float)a), b = tf32_ref((float)b);
                    acc += a * b;
                }
                double v = (double)p->alpha * acc;
                if (p->beta != 0.0f) v += (double)p->beta * f->C[bi * f->sc + i + j * f->ldc];
                if (p->bias) v += f->bias[bi * p->bias_stride + i];
                f->ref[bi * f->sd + i + j * f->ldd] = (float)v;
            }
}

/* Heuristic + matmul succeed and D equals the reference: exactly for grid
 * operands, within tol * (sum of |terms|) otherwise. */
static void check_case(const spec *s, int random_floats, double tol) {
    fx f;
    fx_init(&f, s, random_floats);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(f.found, 1);
    assert_int_equal(f.res.state, CUBLAS_STATUS_SUCCESS);
    fx_reference(&f);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (size_t i = 0; i < f.nD; i++) {
        double want = f.ref[i], got = f.D[i];
        if (tol == 0 ? got != want : fabs(got - want) > tol * (1 + fabs(want)) * (double)s->k) {
            print_error("element %zu: got %.9g, want %.9g (m %lld n %lld k %lld ta %d tb %d batch %d)\n", i, got,
                        want, (long long)s->m, (long long)s->n, (long long)s->k, s->ta, s->tb, f.s.batch);
            fail();
        }
    }
    fx_free(&f);
}

/* ---- results --------------------------------------------------------------- */

static void test_exports(void **state) {
    (void)state;
    void *lib = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(lib);
    static const char *const names[] = {
        "cublasLtCreate", "cublasLtDestroy", "cublasLtGetStatusString", "cublasLtMatmul",
        "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
        "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy", "cublasLtMatrixLayoutSetAttribute",
        "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
        "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!dlsym(lib, names[i])) fail_msg("%s lacks %s", PLAIT_CUDA_EMU_LT, names[i]);
    /* the internals stay local (exports.map) */
    assert_null(dlsym(lib, "check_problem"));
    assert_null(dlsym(lib, "tf32_round"));
    assert_string_equal(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE),
                        "an invalid numeric value was used as an argument");
    dlclose(lib);
}

/* Asked for more, the heuristic offers three distinct candidates, each
 * computing the same bits; the test hooks count each one's calls. */
static void test_candidates(void **state) {
    (void)state;
    spec s = {.m = 9, .n = 7, .k = 5, .alpha = 1.0f, .beta = 0.5f, .bias = 1};
    fx f;
    fx_init(&f, &s, 1);
    cublasLtMatmulHeuristicResult_t res[4];
    int found = -1;
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(f.h, f.desc, f.la, f.lb, f.lc, f.ld, f.pref, 4, res, &found),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(found, 3);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(f.found, 1);
    assert_memory_equal(&f.res.algo, &res[0].algo, sizeof res[0].algo); /* the first is the single answer */
    void *lib = dlopen(PLAIT_CUDA_EMU_LT, RTLD_NOW | RTLD_LOCAL);
    uint64_t (*calls)(int) = lib ? (uint64_t (*)(int))dlsym(lib, "plait_cublaslt_emu_algo_calls") : NULL;
    assert_non_null(calls);
    fx_reference(&f);
    float *first = malloc(f.nD * sizeof *first);
    assert_non_null(first);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].state, CUBLAS_STATUS_SUCCESS);
        for (int j = 0; j < i; j++) assert_memory_not_equal(&res[i].algo, &res[j].algo, sizeof res[i].algo);
        uint64_t before[3] = {calls(0), calls(1), calls(2)};
        f.res = res[i];
        assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
        for (int j = 0; j < 3; j++) assert_int_equal(calls(j) - before[j], j == i);
        if (i == 0) memcpy(first, f.D, f.nD * sizeof *first);
        else assert_memory_equal(f.D, first, f.nD * sizeof *first);
    }
    for (size_t i = 0; i < f.nD; i++)
        if (fabs((double)first[i] - f.ref[i]) > 1e-5 * (1 + fabs(f.ref[i])) * (double)s.k) fail();
    free(first);
    dlclose(lib);
    fx_free(&f);
}

static void test_transposes_and_shapes(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 4, 9}, {8, 33, 2}, {40, 24, 31}};
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 0.25f}};
    for (int t = 0; t < 4; t++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (size_t ai = 0; ai < sizeof ab / sizeof ab[0]; ai++) {
                spec s = {.ta = t & 1, .tb = t >> 1, .m = shapes[si][0], .n = shapes[si][1], .k = shapes[si][2],
                          .alpha = ab[ai][0], .beta = ab[ai][1]};
                check_case(&s, 0, 0);
                /* ld > rows on every matrix, and ldd != ldc out of place */
                s.pad_a = 3, s.pad_b = 1, s.pad_c = 5, s.pad_d = 2;
                check_case(&s, 0, 0);
            }
}

static void test_batched_strided(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        /* C's and D's batch strides differ (ldc 8, ldd 11) */
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 6, .n = 5, .k = 7, .pad_a = 1, .pad_c = 2, .pad_d = 5,
                  .batch = 3, .gap = 11, .alpha = 0.75f, .beta = 0.5f};
        check_case(&s, 0, 0);
        s.bias = 1; /* one bias for every batch (BIAS_BATCH_STRIDE 0) */
        check_case(&s, 0, 0);
        s.bias_stride = 8; /* a bias per batch */
        check_case(&s, 0, 0);
        /* interleaved batches (the plugin's attention heads): stride =
         * rows, ld = rows x batch */
        spec h = {.ta = t & 1, .tb = t >> 1, .m = 8, .n = 6, .k = 8, .batch = 4, .interleave = 1, .pad_d = 3,
                  .alpha = 0.125f, .beta = 0.0f};
        check_case(&h, 0, 0);
    }
}

static void test_beta_zero_ignores_c(void **state) {
    (void)state;
    spec s = {.ta = 1, .m = 5, .n = 4, .k = 3, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    for (size_t i = 0; i < f.nC; i++) f.C[i] = NAN; /* BLAS: with beta 0, C need not hold numbers */
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    fx_reference(&f);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (size_t i = 0; i < f.nD; i++) {
        assert_false(isnan(f.D[i]));
        assert_true(f.D[i] == f.ref[i]);
    }
    /* and C may be NULL then */
    for (size_t i = 0; i < f.nD; i++) f.D[i] = -7.0f;
    assert_int_equal(fx_matmul_with(&f, f.A, f.B, NULL, f.D, NULL, 0), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(f.D, f.ref, f.nD * 4);
    /* beta != 0 does read C: NaN comes through */
    f.s.beta = 1.0f;
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_true(isnan(f.D[0]));
    fx_free(&f);
}

static void test_bias_epilogue(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 9, .n = 6, .k = 5, .bias = 1, .alpha = 1.0f, .beta = 0.0f};
        check_case(&s, 0, 0);
        s.beta = -1.0f, s.pad_c = 3, s.pad_d = 3;
        check_case(&s, 0, 0);
        s.in_place = 1; /* the plugin's call: C == D, one layout */
        check_case(&s, 0, 0);
    }
    /* the bias runs along D's rows: D[i][j] = bias[i] when the product is 0 */
    spec s = {.m = 3, .n = 2, .k = 1, .bias = 1, .alpha = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    memset(f.A, 0, f.nA * 4);
    f.bias[0] = 1, f.bias[1] = 2, f.bias[2] = 3;
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    const float want[6] = {1, 2, 3, 1, 2, 3}; /* column-major 3 x 2 */
    assert_memory_equal(f.D, want, sizeof want);
    fx_free(&f);
}

static void test_bf16_operands(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 13, .n = 7, .k = 19, .pad_a = 2, .pad_b = 1, .bf16 = 1,
                  .alpha = 1.0f, .beta = 0.5f};
        check_case(&s, 0, 0);
        s.batch = 2, s.gap = 3, s.bias = 1;
        check_case(&s, 0, 0);
    }
}

static void test_tf32_rounding(void **state) {
    (void)state;
    /* D (4 x 1) = A (4 x 1) · B (1 x 1 = 1): D holds op(A) as the product saw it */
    const float a[4] = {1.0f + 0x1p-11f, 1.0f + 0x1p-12f, 1.0f + 0x1p-11f + 0x1p-12f, -(1.0f + 0x1p-11f)};
    /* TF32 keeps 10 mantissa bits: 1 + 2^-11 is a tie and rounds away from
     * zero to 1 + 2^-10 (round-to-even or truncation would give 1) */
    const float tf32_want[4] = {1.0f + 0x1p-10f, 1.0f, 1.0f + 0x1p-10f, -(1.0f + 0x1p-10f)};
    for (int tf32 = 0; tf32 < 2; tf32++) {
        spec s = {.m = 4, .n = 1, .k = 1, .tf32 = tf32, .alpha = 1.0f};
        fx f;
        fx_init(&f, &s, 0);
        memcpy(f.A, a, sizeof a);
        ((float *)f.B)[0] = 1.0f;
        assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
        assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
        assert_memory_equal(f.D, tf32 ? tf32_want : a, sizeof a);
        fx_free(&f);
    }
    /* random floats: FAST_TF32 matches the TF32-rounded reference and is far
     * from the fp32 one */
    spec s = {.ta = 1, .m = 24, .n = 16, .k = 64, .tf32 = 1, .alpha = 1.0f};
    check_case(&s, 1, 1e-6);
    fx f;
    fx_init(&f, &s, 1);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    f.s.tf32 = 0; /* the fp32 reference */
    fx_reference(&f);
    double worst = 0;
    for (size_t i = 0; i < f.nD; i++) worst = fmax(worst, fabs((double)f.D[i] - f.ref[i]));
    if (worst < 1e-4) fail_msg("FAST_TF32 result within %g of fp32: operands were not rounded", worst);
    fx_free(&f);
}

static void test_random_deterministic(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        spec s = {.ta = t & 1, .tb = t >> 1, .m = 37, .n = 29, .k = 53, .pad_a = 3, .pad_b = 5, .pad_c = 1,
                  .pad_d = 1, .batch = 2, .gap = 7, .bias = 1, .alpha = 0.3f, .beta = 1.7f};
        check_case(&s, 1, 1e-6);
    }
    /* the same call gives the same bits */
    spec s = {.m = 64, .n = 48, .k = 96, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 1);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    float *first = malloc(f.nD * 4);
    assert_non_null(first);
    memcpy(first, f.D, f.nD * 4);
    memset(f.D, 0, f.nD * 4);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(first, f.D, f.nD * 4);
    free(first);
    fx_free(&f);
}

/* ---- refusals ---------------------------------------------------------------- */

static FILE *g_err;
static int g_saved_fd = -1;

static void capture_begin(void) {
    fflush(stderr);
    g_err = tmpfile();
    assert_non_null(g_err);
    g_saved_fd = dup(2);
    assert_true(g_saved_fd >= 0);
    assert_true(dup2(fileno(g_err), 2) >= 0);
}

/* What the emulator wrote meanwhile; it must be one "cublasLt-emu: " line
 * containing `why`. */
static void capture_end(const char *why) {
    fflush(stderr);
    assert_true(dup2(g_saved_fd, 2) >= 0);
    close(g_saved_fd);
    char buf[1024] = "";
    rewind(g_err);
    size_t n = fread(buf, 1, sizeof buf - 1, g_err);
    buf[n] = 0;
    fclose(g_err);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    if (lines != 1 || strncmp(buf, "cublasLt-emu: ", 14) != 0 || !strstr(buf, why))
        fail_msg("stderr was \"%s\", want one line with \"%s\"", buf, why);
}

/* `call` returns `st` and prints the one line naming `why` */
#define REFUSED(call, st, why)                                                                                   \
    do {                                                                                                         \
        capture_begin();                                                                                         \
        assert_int_equal((call), (st));                                                                          \
        capture_end(why);                                                                                        \
    } while (0)

static void assert_d_untouched(const fx *f, const float *before) {
    assert_memory_equal(f->D, before, f->nD * 4);
}

static float *snapshot(const fx *f) {
    float *s = malloc(f->nD * 4);
    assert_non_null(s);
    memcpy(s, f->D, f->nD * 4);
    return s;
}

/* GELU, tanh form, and its derivative, in double, from their definitions */
static double gelu_ref(double x) {
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static double dgelu_ref(double x) {
    const double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static void set_epilogue(fx *f, cublasLtEpilogue_t epi, void *aux, int64_t aux_ld) {
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof aux),
                     0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                    sizeof aux_ld),
                     0);
}

/* GELU_AUX_BIAS: aux = x = alpha·A·B + beta·C + bias (GELU's input), D =
 * GELU(x); GELU_BIAS the same D without aux; DGELU: D = GELU'(aux) ·
 * (alpha·A·B + beta·C). Grid operands: x is exact, so aux equals the
 * reference bit for bit and D is within float rounding of GELU(x). */
static void test_gelu_epilogues(void **state) {
    (void)state;
    spec s = {.ta = 1, .m = 16, .n = 5, .k = 4, .pad_d = 8, .bias = 1, .alpha = 1.0f, .beta = 0.5f};
    fx f;
    fx_init(&f, &s, 0);
    const int64_t aux_ld = 24;
    float *aux = alloc64((size_t)(aux_ld * s.n) * 4);
    for (int64_t i = 0; i < aux_ld * s.n; i++) aux[i] = 777.0f;
    fx_reference(&f); /* x */
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, aux, aux_ld);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < s.n; j++)
        for (int64_t i = 0; i < aux_ld; i++) {
            float x = f.ref[i + j * f.ldd], a = aux[i + j * aux_ld];
            if (i >= s.m) { /* rows past D's: untouched */
                assert_true(a == 777.0f);
                continue;
            }
            assert_true(a == x);
            double want = gelu_ref(x), got = f.D[i + j * f.ldd];
            if (fabs(got - want) > 2e-6 * (1 + fabs(want))) fail_msg("GELU(%g): got %.9g, want %.9g", x, got, want);
        }
    /* GELU_BIAS: the same D, no aux needed */
    float *d_aux = snapshot(&f);
    for (size_t i = 0; i < f.nD; i++) f.D[i] = 12345.0f;
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_BIAS, NULL, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    assert_memory_equal(f.D, d_aux, f.nD * 4);
    free(d_aux);
    fx_free(&f);

    /* DGELU reads GELU's input from aux (no bias) */
    spec g = {.m = 16, .n = 5, .k = 4, .alpha = 1.0f, .beta = 1.0f};
    fx_init(&f, &g, 0);
    for (int64_t i = 0; i < aux_ld * g.n; i++) aux[i] = grid();
    fx_reference(&f); /* the product, beta·C included */
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU, aux, aux_ld);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul(&f), CUBLAS_STATUS_SUCCESS);
    for (int64_t j = 0; j < g.n; j++)
        for (int64_t i = 0; i < g.m; i++) {
            double want = dgelu_ref(aux[i + j * aux_ld]) * f.ref[i + j * f.ldd], got = f.D[i + j * f.ldd];
            if (fabs(got - want) > 2e-6 * (1 + fabs(want)))
                fail_msg("GELU'(%g)·%g: got %.9g, want %.9g", aux[i + j * aux_ld], f.ref[i + j * f.ldd], got, want);
        }
    fx_free(&f);
    free(aux);
}

/* What NVIDIA documents for GELU's input matrix, refused: an LD not
 * divisible by 8 or below D's rows, a NULL pointer at the product, an aux
 * type other than D's; DGELU_BGRAD is not emulated. D stays untouched. */
static void test_refuse_gelu_epilogues(void **state) {
    (void)state;
    spec s = {.m = 16, .n = 3, .k = 2, .alpha = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    float *aux = alloc64(64 * 3 * 4), *before = snapshot(&f);
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, aux, 20);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD 20: must be divisible by 8");
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU, aux, 8);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "no less than D's 16 rows");
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, NULL, 16);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "NULL EPILOGUE_AUX_POINTER");
    set_epilogue(&f, CUBLASLT_EPILOGUE_GELU_AUX, aux + 1, 16);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "only 4-byte aligned");
    int32_t bf = CUDA_R_16BF;
    assert_int_equal(
        cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &bf, sizeof bf), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "aux data type CUDA_R_16BF");
    set_epilogue(&f, CUBLASLT_EPILOGUE_DGELU_BGRAD, aux, 16);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "epilogue 208");
    assert_d_untouched(&f, before);
    free(before);
    free(aux);
    fx_free(&f);
}

/* A layout replaced by one of (type, rows, cols, ld): the heuristic and a
 * matmul without an algorithm both refuse with `st`, naming `why`. */
static void refuse_layout(int which, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, cublasStatus_t st,
                          const char *why) {
    spec s = {.m = 6, .n = 5, .k = 4, .alpha = 1.0f, .beta = 1.0f};
    fx f;
    fx_init(&f, &s, 0);
    cublasLtMatrixLayout_t *l[4] = {&f.la, &f.lb, &f.lc, &f.ld};
    cublasLtMatrixLayoutDestroy(*l[which]);
    assert_int_equal(cublasLtMatrixLayoutCreate(l[which], type, (uint64_t)rows, (uint64_t)cols, ld), 0);
    float *before = snapshot(&f);
    REFUSED(fx_heuristic(&f), st, why);
    assert_int_equal(f.found, 0);
    REFUSED(cublasLtMatmul(
                f.h, f.desc, &s.alpha, f.A, f.la, f.B, f.lb, &s.beta, f.C, f.lc, f.D, f.ld, NULL, NULL, 0, NULL),
            st, why);
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
}

static void test_refuse_layouts(void **state) {
    (void)state;
    /* A is 6 x 4, B 4 x 5, C and D 6 x 5 */
    refuse_layout(0, CUDA_R_32F, 6, 4, 5, CUBLAS_STATUS_INVALID_VALUE, "Adesc: ld 5 < rows 6");
    refuse_layout(3, CUDA_R_32F, 6, 5, 4, CUBLAS_STATUS_INVALID_VALUE, "Ddesc: ld 4 < rows 6");
    refuse_layout(1, CUDA_R_32F, 3, 5, 3, CUBLAS_STATUS_INVALID_VALUE, "inner dimensions differ");
    refuse_layout(0, CUDA_R_32F, 7, 4, 7, CUBLAS_STATUS_INVALID_VALUE, "D is 6 x 5 but op(A)·op(B) is 7 x 5");
    refuse_layout(2, CUDA_R_32F, 6, 4, 6, CUBLAS_STATUS_INVALID_VALUE, "C is 6 x 4 but D is 6 x 5");
    refuse_layout(3, CUDA_R_32F, 6, 4, 6, CUBLAS_STATUS_INVALID_VALUE, "D is 6 x 4 but op(A)·op(B) is 6 x 5");
    refuse_layout(0, CUDA_R_16F, 6, 4, 6, CUBLAS_STATUS_NOT_SUPPORTED, "A CUDA_R_16F with B CUDA_R_32F");
    refuse_layout(1, CUDA_R_16BF, 4, 5, 4, CUBLAS_STATUS_NOT_SUPPORTED, "A CUDA_R_32F with B CUDA_R_16BF");
    refuse_layout(3, CUDA_R_16BF, 6, 5, 6, CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_32F, D CUDA_R_16BF");
    refuse_layout(2, CUDA_R_64F, 6, 5, 6, CUBLAS_STATUS_NOT_SUPPORTED, "C CUDA_R_64F");
}

/* D's batch stride set to `stride` after the heuristic: cublasLtMatmul
 * refuses naming `why`, D untouched. */
static void refuse_d_stride(fx *f, int64_t stride, const char *why) {
    assert_int_equal(
        cublasLtMatrixLayoutSetAttribute(f->ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
        0);
    float *before = snapshot(f);
    REFUSED(fx_matmul(f), CUBLAS_STATUS_INVALID_VALUE, why);
    assert_d_untouched(f, before);
    free(before);
}

static void test_refuse_batches(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .batch = 2, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    int32_t three = 3;
    assert_int_equal(
        cublasLtMatrixLayoutSetAttribute(f.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &three, sizeof three), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_INVALID_VALUE, "batch counts differ: A 2, B 3, C 2, D 2");
    int32_t two = 2;
    assert_int_equal(cublasLtMatrixLayoutSetAttribute(f.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two), 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    /* D's batches on top of each other */
    refuse_d_stride(&f, 5, "D's batches overlap: batch 0 and batch 1 share an element (stride 5, ld 4, 4 x 3)");
    fx_free(&f);
    /* interleaved batches (stride 4, ld 12) one row too close: batch 1
     * starts inside batch 0 */
    spec h = {.m = 4, .n = 3, .k = 2, .batch = 3, .interleave = 1, .alpha = 1.0f, .beta = 0.0f};
    fx_init(&f, &h, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    refuse_d_stride(&f, 3, "batch 0 and batch 1 share an element (stride 3, ld 12");
    /* or too far: batch 1's second column reaches back into batch 0's */
    refuse_d_stride(&f, 9, "batch 0 and batch 1 share an element (stride 9, ld 12");
    fx_free(&f);
}

static void test_refuse_descriptor(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .alpha = 1.0f, .beta = 0.0f};
    fx f;
    fx_init(&f, &s, 0);
    /* FAST_TF32 with bf16 operands: not in NVIDIA's table */
    cublasLtMatrixLayoutDestroy(f.la);
    cublasLtMatrixLayoutDestroy(f.lb);
    assert_int_equal(cublasLtMatrixLayoutCreate(&f.la, CUDA_R_16BF, 4, 2, 4), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&f.lb, CUDA_R_16BF, 2, 3, 2), 0);
    int32_t ct = CUBLAS_COMPUTE_32F_FAST_TF32;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_COMPUTE_32F_FAST_TF32 with CUDA_R_16BF operands");
    ct = CUBLAS_COMPUTE_16F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "compute type 64");
    ct = CUBLAS_COMPUTE_32F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct), 0);
    int32_t scale = CUDA_R_64F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale),
                     0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "scale type CUDA_R_64F");
    /* a wrong attribute size */
    int64_t wide = CUBLAS_OP_T;
    REFUSED(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE, "TRANSA: sizeInBytes 8, the attribute is 4 bytes");
    cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU; /* not emulated */
    scale = CUDA_R_32F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale),
                     0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu), 0);
    REFUSED(fx_heuristic(&f), CUBLAS_STATUS_NOT_SUPPORTED, "epilogue 2;");
    /* requestedAlgoCount < 1 */
    int found = -1;
    REFUSED(cublasLtMatmulAlgoGetHeuristic(f.h, f.desc, f.la, f.lb, f.lc, f.ld, f.pref, 0, &f.res, &found),
            CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount 0 < 1");
    assert_int_equal(found, 0);
    fx_free(&f);
}

/* Pointers less aligned than the preference promised, per matrix. */
static void test_refuse_alignment(void **state) {
    (void)state;
    spec s = {.m = 8, .n = 4, .k = 4, .pad_a = 4, .pad_b = 4, .pad_c = 4, .pad_d = 4, .bias = 1, .alpha = 1.0f,
              .beta = 1.0f, .align = 16};
    fx f;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    float *before = snapshot(&f);
    const float *A = f.A, *B = f.B;
    /* each pointer moved by one float: 4-byte aligned, 16 promised */
    struct {
        const void *a, *b, *c;
        void *d;
        const float *bias;
        const char *why;
    } cases[] = {
        {A + 1, B, f.C, f.D, f.bias, "A at"},
        {A, B + 1, f.C, f.D, f.bias, "B at"},
        {A, B, f.C + 1, f.D, f.bias, "C at"},
        {A, B, f.C, f.D + 1, f.bias, "D at"},
        {A, B, f.C, f.D, f.bias + 1, "bias at"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REFUSED(fx_matmul_with(&f, cases[i].a, cases[i].b, cases[i].c, cases[i].d, cases[i].bias, 0),
                CUBLAS_STATUS_INVALID_VALUE, cases[i].why);
        assert_d_untouched(&f, before);
    }
    /* the promise is what counts: with 4 promised, the same pointers pass */
    fx_free(&f);
    free(before);
    s.align = 4;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(fx_matmul_with(&f, (const float *)f.A + 1, f.B, f.C, f.D, f.bias, 0), CUBLAS_STATUS_SUCCESS);
    fx_free(&f);
}

static void test_refuse_matmul_arguments(void **state) {
    (void)state;
    spec s = {.m = 4, .n = 3, .k = 2, .bias = 1, .alpha = 1.0f, .beta = 0.0f, .workspace = 256};
    fx f;
    fx_init(&f, &s, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    float *before = snapshot(&f);
    /* BIAS with a NULL bias pointer */
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, NULL, 0),
            CUBLAS_STATUS_INVALID_VALUE, "epilogue BIAS with a NULL BIAS_POINTER");
    assert_d_untouched(&f, before);
    /* a workspace above the preference's maximum */
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, f.bias, 512),
            CUBLAS_STATUS_INVALID_VALUE, "workspaceSizeInBytes 512 exceeds the 256 bytes");
    assert_d_untouched(&f, before);
    /* the descriptor changed after the heuristic chose for it */
    cublasLtEpilogue_t def = CUBLASLT_EPILOGUE_DEFAULT;
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &def, sizeof def), 0);
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.C, f.D, f.bias, 256),
            CUBLAS_STATUS_INVALID_VALUE, "the descriptor no longer matches the algorithm");
    assert_d_untouched(&f, before);
    /* an algorithm the heuristic never wrote */
    memset(&f.res.algo, 0, sizeof f.res.algo);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &(cublasLtEpilogue_t){
                                                        CUBLASLT_EPILOGUE_BIAS}, sizeof(cublasLtEpilogue_t)),
                     0);
    REFUSED(fx_matmul(&f), CUBLAS_STATUS_INVALID_VALUE, "algo was not written by cublasLtMatmulAlgoGetHeuristic");
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
    /* in place (C == D) with C's layout not D's */
    spec t = {.m = 4, .n = 3, .k = 2, .alpha = 1.0f, .beta = 1.0f, .pad_c = 2, .pad_d = 0};
    fx_init(&f, &t, 0);
    assert_int_equal(fx_heuristic(&f), CUBLAS_STATUS_SUCCESS);
    memcpy(f.D, f.C, f.nD * 4); /* nD <= nC */
    before = snapshot(&f);
    REFUSED(fx_matmul_with(&f, f.A, f.B, f.D, f.D, NULL, 0),
            CUBLAS_STATUS_INVALID_VALUE, "in place (C == D) with C's ld 6");
    assert_d_untouched(&f, before);
    free(before);
    fx_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exports),
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_transposes_and_shapes),
        cmocka_unit_test(test_batched_strided),
        cmocka_unit_test(test_beta_zero_ignores_c),
        cmocka_unit_test(test_bias_epilogue),
        cmocka_unit_test(test_gelu_epilogues),
        cmocka_unit_test(test_refuse_gelu_epilogues),
        cmocka_unit_test(test_bf16_operands),
        cmocka_unit_test(test_tf32_rounding),
        cmocka_unit_test(test_random_deterministic),
        cmocka_unit_test(test_refuse_layouts),
        cmocka_unit_test(test_refuse_batches),
        cmocka_unit_test(test_refuse_descriptor),
        cmocka_unit_test(test_refuse_alignment),
        cmocka_unit_test(test_refuse_matmul_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
