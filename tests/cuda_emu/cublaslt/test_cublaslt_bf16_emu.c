/*
 * The cuBLASLt stand-in (cublaslt.c) with a bf16 output: A/B, C and D of
 * CUDA_R_16BF with 32F compute, the bias and GELU's auxiliary matrix of
 * D's type; and the refusals of the combinations NVIDIA's table lacks (C
 * and D of different types, a bf16 D from float32 operands, a bias or aux
 * type other than D's); and the bias gradients BGRADB and BGRADA of a
 * bf16 product accumulating into float32. test_cublaslt_emu.c covers the
 * float32 outputs.
 *
 * The operands are multiples of 1/64 in [-2, 2] (exact in bf16, and the
 * float sums of their products exact), so the float result equals the
 * double reference and a bf16 D must be that value rounded to nearest
 * even, bit for bit; the rounding is written here from its definition.
 * GELU's value differs between float and double in the last float bits,
 * so D after GELU is checked within one bf16 step.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cublasLt.h>

#define M 24 /* D is M x N column-major; a multiple of 8 (the aux LD) */
#define N 10
#define K 12

static uint64_t g_state = 0x2545f4914f6cdd1dull;

/* a multiple of 1/64 in [-2, 2] */
static double grid_value(void) {
    g_state ^= g_state << 13, g_state ^= g_state >> 7, g_state ^= g_state << 17;
    return (double)((int)(g_state % 257) - 128) / 64.0;
}

/* bf16 <-> double from the fields: sign, 8-bit exponent (bias 127), 7-bit
 * mantissa; finite values only (what these tests make) */
static double bf16_value(uint16_t h) {
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
    return h & 0x8000 ? -v : v;
}

/* v rounded to 8 significant bits, ties to even (rint in the default
 * rounding mode), encoded as bf16 */
static uint16_t bf16_round(double v) {
    if (v == 0) return signbit(v) ? 0x8000 : 0;
    int e;
    double m = frexp(fabs(v), &e); /* [0.5, 1) */
    double r = rint(m * 256.0);    /* 128..256 */
    if (r == 256.0) r = 128.0, e++;
    uint16_t bits = (uint16_t)(((e - 1 + 127) << 7) | ((int)r - 128));
    return v < 0 ? (uint16_t)(bits | 0x8000) : bits;
}

static uint16_t *grid_bf16(size_t n) {
    uint16_t *p = aligned_alloc(64, (n * 2 + 63) / 64 * 64);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = bf16_round(grid_value());
    return p;
}

/* One product D[M,N] = alpha·A[M,K]·B[K,N] + beta·C with the types given
 * and an epilogue; every matrix packed (ld = rows). */
typedef struct prod {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    uint16_t *A, *B, *C, *D, *bias, *aux;
    float alpha, beta;
} prod;

static void prod_init(prod *p, cudaDataType_t ab, cudaDataType_t c, cudaDataType_t d, cublasLtEpilogue_t epi) {
    memset(p, 0, sizeof *p);
    p->A = grid_bf16(M * K), p->B = grid_bf16(K * N), p->C = grid_bf16(M * N), p->bias = grid_bf16(M);
    p->aux = grid_bf16(M * N);
    p->D = grid_bf16(M * N);
    p->alpha = 1.25f, p->beta = epi == CUBLASLT_EPILOGUE_DEFAULT ? 0.5f : 0.0f;
    assert_int_equal(cublasLtCreate(&p->h), 0);
    assert_int_equal(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
    const void *bias = p->bias, *aux = p->aux;
    int64_t aux_ld = M;
    assert_int_equal(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof aux), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                    sizeof aux_ld), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&p->la, ab, M, K, M), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&p->lb, ab, K, N, K), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&p->lc, c, M, N, M), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&p->ld, d, M, N, M), 0);
    assert_int_equal(cublasLtMatmulPreferenceCreate(&p->pref), 0);
    uint32_t align = 16;
    for (int i = 0; i < 4; i++) {
        cublasLtMatmulPreferenceAttributes_t a = i == 0   ? CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES
                                                 : i == 1 ? CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES
                                                 : i == 2 ? CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES
                                                          : CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
        assert_int_equal(cublasLtMatmulPreferenceSetAttribute(p->pref, a, &align, sizeof align), 0);
    }
}

static void prod_free(prod *p) {
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatrixLayoutDestroy(p->ld);
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatmulPreferenceDestroy(p->pref);
    cublasLtDestroy(p->h);
    free(p->A), free(p->B), free(p->C), free(p->D), free(p->bias), free(p->aux);
}

static cublasStatus_t prod_heuristic(prod *p) {
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(p->h, p->desc, p->la, p->lb, p->lc, p->ld, p->pref, 1, &p->res, &found);
    if (s == CUBLAS_STATUS_SUCCESS) assert_int_equal(found, 1);
    return s;
}

static cublasStatus_t prod_run(prod *p) {
    return cublasLtMatmul(p->h, p->desc, &p->alpha, p->A, p->la, p->B, p->lb, &p->beta, p->C, p->lc, p->D, p->ld,
                          &p->res.algo, NULL, 0, NULL);
}

/* alpha·A·B + beta·C (+ bias) at (i, j), in double (exact here) */
static double ref_at(const prod *p, int i, int j, int bias) {
    double acc = 0;
    for (int l = 0; l < K; l++) acc += bf16_value(p->A[i + l * M]) * bf16_value(p->B[l + j * K]);
    double v = (double)p->alpha * acc;
    if (p->beta != 0.0f) v += (double)p->beta * bf16_value(p->C[i + j * M]);
    return bias ? v + bf16_value(p->bias[i]) : v;
}

static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double dgelu(double x) {
    const double k = sqrt(2.0 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* got within one bf16 step (2^-7 relative, or 2^-20 near zero) of want */
static void near_bf16(uint16_t got, double want, const char *what, int i, int j) {
    double g = bf16_value(got);
    if (fabs(g - want) > ldexp(fabs(want), -7) + 0x1p-20) fail_msg("%s (%d, %d): got %.9g, want %.9g", what, i, j, g, want);
}

/* bf16 A, B, C and D: D = the float result rounded once, bit for bit */
static void test_bf16_output(void **state) {
    (void)state;
    prod p;
    prod_init(&p, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT);
    assert_int_equal(prod_heuristic(&p), 0);
    assert_int_equal(prod_run(&p), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) assert_int_equal(p.D[i + j * M], bf16_round(ref_at(&p, i, j, 0)));
    /* ties: D = 1 + (2i + 1)·2^-8 lies half-way between two bf16 values
     * (their step is 2^-7 in [1, 2)) and goes to the even one */
    memset(p.A, 0, M * K * 2);
    for (int i = 0; i < M; i++) p.A[i] = bf16_round((2 * i + 1) * 0x1p-8);
    for (int j = 0; j < N; j++) p.B[j * K] = bf16_round(1.0);
    for (int n = 0; n < M * N; n++) p.C[n] = bf16_round(1.0);
    p.alpha = 1.0f, p.beta = 1.0f;
    assert_int_equal(prod_run(&p), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) assert_int_equal(p.D[i + j * M], bf16_round(1.0 + (2 * i + 1) * 0x1p-8));
    assert_int_equal(p.D[0], 0x3f80); /* 1 + 2^-8: down to 1 */
    assert_int_equal(p.D[1], 0x3f82); /* 1 + 3·2^-8: up to 1 + 2^-6 */
    prod_free(&p);
}

/* The bias of D's type, unset (D's by default) and set to CUDA_R_16BF */
static void test_bf16_bias(void **state) {
    (void)state;
    for (int set = 0; set < 2; set++) {
        prod p;
        prod_init(&p, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS);
        int32_t bt = CUDA_R_16BF;
        if (set)
            assert_int_equal(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                            sizeof bt), 0);
        assert_int_equal(prod_heuristic(&p), 0);
        assert_int_equal(prod_run(&p), 0);
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) assert_int_equal(p.D[i + j * M], bf16_round(ref_at(&p, i, j, 1)));
        prod_free(&p);
    }
}

/* GELU_AUX_BIAS: aux = x rounded, D = GELU(x) rounded (x before its
 * rounding); DGELU: D = GELU'(aux)·x rounded, aux read as bf16 */
static void test_bf16_gelu(void **state) {
    (void)state;
    prod p;
    prod_init(&p, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    assert_int_equal(prod_heuristic(&p), 0);
    assert_int_equal(prod_run(&p), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            const double x = ref_at(&p, i, j, 1);
            assert_int_equal(p.aux[i + j * M], bf16_round(x));
            near_bf16(p.D[i + j * M], gelu(x), "GELU", i, j);
        }
    prod_free(&p);
    prod_init(&p, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_DGELU);
    assert_int_equal(prod_heuristic(&p), 0);
    assert_int_equal(prod_run(&p), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++)
            near_bf16(p.D[i + j * M], dgelu(bf16_value(p.aux[i + j * M])) * ref_at(&p, i, j, 0), "DGELU", i, j);
    prod_free(&p);
}

/* ---- refusals: the status, one "cublasLt-emu: " line naming why, D as it was */

static FILE *g_log;   /* where stderr goes while a refusal is made */
static long g_logged; /* what had been read of it */
static int g_stderr = -1;

static void log_begin(void) {
    fflush(stderr);
    g_stderr = dup(2);
    assert_true(g_stderr >= 0 && dup2(fileno(g_log), 2) >= 0);
}
static void log_end(void) {
    fflush(stderr);
    assert_true(dup2(g_stderr, 2) >= 0);
    close(g_stderr);
}

/* The lines stderr received since the last call: exactly one, the
 * stand-in's, containing `why`. */
static void expect_logged(const char *why) {
    fflush(stderr);
    char buf[1024] = "";
    assert_int_equal(fseek(g_log, g_logged, SEEK_SET), 0);
    size_t n = fread(buf, 1, sizeof buf - 1, g_log);
    g_logged += (long)n;
    buf[n] = 0;
    const char *nl = strchr(buf, '\n');
    if (!nl || nl[1] || strncmp(buf, "cublasLt-emu: ", 14) || !strstr(buf, why))
        fail_msg("stderr got \"%s\", want one line with \"%s\"", buf, why);
}

static void refused(cudaDataType_t ab, cudaDataType_t c, cudaDataType_t d, cublasLtEpilogue_t epi,
                    cublasLtMatmulDescAttributes_t attr, int32_t type, const char *why) {
    prod p;
    prod_init(&p, ab, c, d, epi);
    if (attr) assert_int_equal(cublasLtMatmulDescSetAttribute(p.desc, attr, &type, sizeof type), 0);
    uint16_t before[M * N];
    memcpy(before, p.D, sizeof before);
    log_begin();
    cublasStatus_t s = prod_heuristic(&p);
    log_end();
    assert_int_equal(s, CUBLAS_STATUS_NOT_SUPPORTED);
    expect_logged(why);
    log_begin();
    s = cublasLtMatmul(p.h, p.desc, &p.alpha, p.A, p.la, p.B, p.lb, &p.beta, p.C, p.lc, p.D, p.ld, NULL, NULL, 0, NULL);
    log_end();
    assert_int_equal(s, CUBLAS_STATUS_NOT_SUPPORTED);
    expect_logged(why);
    assert_memory_equal(p.D, before, sizeof before);
    prod_free(&p);
}

/* BGRADB and BGRADA on a weight gradient's product: bf16 A and B, C = D
 * float32 accumulating (beta 1, in place); the bias gradient, of C's type,
 * the sums over k of op(B)'s columns (N values) or op(A)'s rows (M),
 * written whatever the vector held (NaN here). B is also given stored
 * transposed (TRANSB T), as the plugin hands it. Every sum is exact on the
 * grid, so D and the gradient equal the double reference bit for bit. */
static void bgrad_case(cublasLtEpilogue_t epi, int trans_b) {
    uint16_t *A = grid_bf16(M * K), *B = grid_bf16(K * N);
    float *D = aligned_alloc(64, M * N * 4), *bg = aligned_alloc(64, 64 * 4);
    assert_true(D && bg);
    for (int n = 0; n < M * N; n++) D[n] = (float)grid_value();
    for (int n = 0; n < 64; n++) bg[n] = NAN;
    float C0[M * N];
    memcpy(C0, D, sizeof C0);
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    assert_int_equal(cublasLtCreate(&h), 0);
    assert_int_equal(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
    cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const void *bias = bg;
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), 0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M), 0);
    /* op(B)[l][j] = B[l + j*K] untransposed, B[j + l*N] transposed */
    assert_int_equal(trans_b ? cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, N, K, N)
                             : cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K),
                     0);
    assert_int_equal(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M), 0);
    cublasLtMatmulPreference_t pref;
    assert_int_equal(cublasLtMatmulPreferenceCreate(&pref), 0);
    const uint32_t align = 16;
    for (int i = 0; i < 4; i++)
        assert_int_equal(cublasLtMatmulPreferenceSetAttribute(
                             pref, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i),
                             &align, sizeof align),
                         0);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &res, &found), 0);
    assert_int_equal(found, 1);
    const float one = 1.0f, beta = 1.0f, other = 1.25f;
    assert_int_equal(cublasLtMatmul(h, desc, &one, A, la, B, lb, &beta, D, lc, D, lc, &res.algo, NULL, 0, NULL), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double acc = C0[i + j * M];
            for (int l = 0; l < K; l++)
                acc += bf16_value(A[i + l * M]) * bf16_value(trans_b ? B[j + l * N] : B[l + j * K]);
            assert_true((double)D[i + j * M] == acc);
        }
    const int len = epi == CUBLASLT_EPILOGUE_BGRADB ? N : M;
    for (int x = 0; x < len; x++) {
        double sum = 0;
        for (int l = 0; l < K; l++)
            sum += epi == CUBLASLT_EPILOGUE_BGRADB ? bf16_value(trans_b ? B[x + l * N] : B[l + x * K])
                                                   : bf16_value(A[x + l * M]);
        if ((double)bg[x] != sum) fail_msg("bias gradient %d: got %.9g, want %.9g", x, (double)bg[x], sum);
    }
    assert_true(isnan(bg[len])); /* nothing past it */
    /* alpha other than 1: not emulated, refused, nothing written */
    memcpy(C0, D, sizeof C0);
    log_begin();
    cublasStatus_t s =
        cublasLtMatmul(h, desc, &other, A, la, B, lb, &beta, D, lc, D, lc, &res.algo, NULL, 0, NULL);
    log_end();
    assert_int_equal(s, CUBLAS_STATUS_NOT_SUPPORTED);
    expect_logged("gradient with alpha 1 only");
    assert_memory_equal(D, C0, sizeof C0);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    free(A), free(B), free(D), free(bg);
}

static void test_bgrad(void **state) {
    (void)state;
    bgrad_case(CUBLASLT_EPILOGUE_BGRADB, 0);
    bgrad_case(CUBLASLT_EPILOGUE_BGRADB, 1);
    bgrad_case(CUBLASLT_EPILOGUE_BGRADA, 1);
}

static void test_refusals(void **state) {
    (void)state;
    const cublasLtEpilogue_t none = CUBLASLT_EPILOGUE_DEFAULT;
    refused(CUDA_R_16BF, CUDA_R_32F, CUDA_R_16BF, none, 0, 0, "C CUDA_R_32F, D CUDA_R_16BF; C and D must be of one");
    refused(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, none, 0, 0, "C CUDA_R_16BF, D CUDA_R_32F; C and D must be of one");
    refused(CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, none, 0, 0, "D CUDA_R_16BF with A/B CUDA_R_32F");
    refused(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            CUDA_R_32F, "bias data type CUDA_R_32F; with D of CUDA_R_16BF");
    refused(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
            CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, CUDA_R_32F, "aux data type CUDA_R_32F; with D of CUDA_R_16BF");
    refused(CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            CUDA_R_32F, "a bias gradient is of C's type (CUDA_R_16BF)");
}

int main(void) {
    g_log = tmpfile(); /* the refusals' lines, read back */
    if (!g_log) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_output),
        cmocka_unit_test(test_bf16_bias),
        cmocka_unit_test(test_bf16_gelu),
        cmocka_unit_test(test_bgrad),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
