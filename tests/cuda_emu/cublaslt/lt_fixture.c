/*
 * The tests' matmul fixture (lt_fixture.h). Grid operands are multiples of
 * 1/64 in [-2, 2]: exact in bf16, their products and short sums exact in
 * float, so results on them must equal the reference exactly.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <cmocka.h>

#include "lt_fixture.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}

/* a multiple of 1/64 in [-2, 2] */
float grid(void) { return (float)((int)(rnd() % 257) - 128) / 64.0f; }

void *alloc64(size_t bytes) {
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
void fx_init(fx *f, const spec *s, int random_floats) {
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

void fx_free(fx *f) {
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

cublasStatus_t fx_heuristic(fx *f) {
    f->found = -1;
    return cublasLtMatmulAlgoGetHeuristic(f->h, f->desc, f->la, f->lb, f->lc, f->ld, f->pref, 1, &f->res, &f->found);
}

/* The matmul with explicit pointers (the refusal tests shift them). */
cublasStatus_t fx_matmul_with(fx *f, const void *A, const void *B, const void *C, void *D, const float *bias,
                                     size_t ws_bytes) {
    if (f->s.bias)
        assert_int_equal(
            cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), 0);
    return cublasLtMatmul(f->h, f->desc, &f->s.alpha, A, f->la, B, f->lb, &f->s.beta, C, f->lc, D, f->ld,
                          &f->res.algo, f->ws, ws_bytes, NULL);
}

cublasStatus_t fx_matmul(fx *f) {
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
void fx_reference(fx *f) {
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
void check_case(const spec *s, int random_floats, double tol) {
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


float *snapshot(const fx *f) {
    float *s = malloc(f->nD * 4);
    assert_non_null(s);
    memcpy(s, f->D, f->nD * 4);
    return s;
}

void set_epilogue(fx *f, cublasLtEpilogue_t epi, void *aux, int64_t aux_ld) {
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), 0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                    sizeof aux),
                     0);
    assert_int_equal(cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                    sizeof aux_ld),
                     0);
}
