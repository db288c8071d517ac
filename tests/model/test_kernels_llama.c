/*
 * The Llama family's kernels (ABI 1.10) against double-precision
 * references and finite differences: grouped-query attention against the
 * fused attention with K and V expanded, RMSNorm, the rotary rotation and
 * its inverse, SwiGLU; thread-count invariance where work is split.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "model/kernel_check.h"

/* ---- grouped-query attention -------------------------------------------- */

/* GQA (NKV key/value heads) against the fused attention on the same q with
 * K and V expanded to NH heads: the same output and lse, dq the same, each
 * key/value head's gradient the sum of its query heads'; 2 threads give
 * the same bits. */
static void check_attention_gqa(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    const int64_t W = (NH + 2 * NKV) * HS, C3 = 3 * NH * HS, G = NH / NKV;
    const size_t nqkv = (size_t)(B * T * W), nexp = (size_t)(B * T * C3), nout = (size_t)(B * T * NH * HS);
    const size_t nlse = (size_t)(B * NH * T), nscr = plait_k_attention_fused_scratch(B, T, NH, HS);
    arr qkv = arr_rand(nqkv, 1, 0), r = arr_rand(nout, 1, 0);
    float *xqkv = fzeros(nexp);
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < HS; i++) {
                const float *row = qkv.f + bt * W;
                float *xr = xqkv + bt * C3;
                xr[h * HS + i] = row[h * HS + i];
                xr[(NH + h) * HS + i] = row[(NH + h / G) * HS + i];
                xr[(2 * NH + h) * HS + i] = row[(NH + NKV + h / G) * HS + i];
            }
    float *out = fzeros(nout), *lse = fzeros(nlse), *scr = fzeros(nscr), *dqkv = fzeros(nqkv);
    float *xout = fzeros(nout), *xlse = fzeros(nlse), *xdqkv = fzeros(nexp);
    plait_k_attention_gqa_forward(out, lse, scr, qkv.f, B, T, NH, NKV, HS);
    plait_k_attention_fused_forward(xout, xlse, scr, xqkv, B, T, NH, HS);
    for (size_t i = 0; i < nout; i++)
        if (fabsf(out[i] - xout[i]) > 1e-6f * (1.0f + fabsf(xout[i])))
            fail_msg("gqa out[%zu] = %.9g, expanded %.9g", i, (double)out[i], (double)xout[i]);
    for (size_t i = 0; i < nlse; i++)
        if (fabsf(lse[i] - xlse[i]) > 1e-6f * (1.0f + fabsf(xlse[i])))
            fail_msg("gqa lse[%zu] = %.9g, expanded %.9g", i, (double)lse[i], (double)xlse[i]);
    plait_k_attention_gqa_backward(dqkv, scr, r.f, qkv.f, out, lse, B, T, NH, NKV, HS);
    plait_k_attention_fused_backward(xdqkv, scr, r.f, xqkv, xout, xlse, B, T, NH, HS);
    for (int64_t bt = 0; bt < B * T; bt++) {
        const float *d = dqkv + bt * W, *x = xdqkv + bt * C3;
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < HS; i++)
                if (fabsf(d[h * HS + i] - x[h * HS + i]) > 1e-5f * (1.0f + fabsf(x[h * HS + i])))
                    fail_msg("gqa dq row %lld head %lld [%lld] = %.9g, expanded %.9g", (long long)bt, (long long)h,
                             (long long)i, (double)d[h * HS + i], (double)x[h * HS + i]);
        for (int64_t kv = 0; kv < NKV; kv++)
            for (int64_t i = 0; i < HS; i++) {
                double sk = 0, sv = 0;
                for (int64_t h = kv * G; h < (kv + 1) * G; h++) {
                    sk += x[(NH + h) * HS + i];
                    sv += x[(2 * NH + h) * HS + i];
                }
                const float gk = d[(NH + kv) * HS + i], gv = d[(NH + NKV + kv) * HS + i];
                if (fabs(gk - sk) > 1e-5 * (1.0 + fabs(sk)) || fabs(gv - sv) > 1e-5 * (1.0 + fabs(sv)))
                    fail_msg("gqa dk/dv row %lld kv head %lld [%lld] = %.9g / %.9g, the group's sum %.9g / %.9g",
                             (long long)bt, (long long)kv, (long long)i, (double)gk, (double)gv, sk, sv);
            }
    }
    float *out2 = fzeros(nout), *lse2 = fzeros(nlse), *dqkv2 = fzeros(nqkv);
    plait_kernels_set_threads(2);
    plait_k_attention_gqa_forward(out2, lse2, scr, qkv.f, B, T, NH, NKV, HS);
    plait_k_attention_gqa_backward(dqkv2, scr, r.f, qkv.f, out2, lse2, B, T, NH, NKV, HS);
    plait_kernels_set_threads(1);
    assert_memory_equal(out, out2, nout * sizeof(float));
    assert_memory_equal(lse, lse2, nlse * sizeof(float));
    assert_memory_equal(dqkv, dqkv2, nqkv * sizeof(float));
    float *bufs[] = {xqkv, out, lse, scr, dqkv, xout, xlse, xdqkv, out2, lse2, dqkv2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    arr_free(&qkv);
    arr_free(&r);
}

static void test_attention_gqa(void **state) {
    (void)state;
    check_attention_gqa(2, 7, 4, 2, 3);
    check_attention_gqa(1, 70, 4, 1, 4); /* multi-query, across the 64-row tile */
    check_attention_gqa(1, 9, 2, 2, 2);  /* as many key/value heads as query heads */
}

/* ---- RMSNorm --------------------------------------------------------------- */

typedef struct rms_ctx {
    double *inp, *w, *r, *out;
    int64_t BT, C;
    double eps;
} rms_ctx;

static double rms_loss(void *vc) {
    rms_ctx *c = vc;
    double l = 0;
    for (int64_t i = 0; i < c->BT; i++) {
        const double *x = c->inp + i * c->C;
        double ss = 0;
        for (int64_t k = 0; k < c->C; k++) ss += x[k] * x[k];
        const double s = 1.0 / sqrt(ss / (double)c->C + c->eps);
        for (int64_t k = 0; k < c->C; k++) {
            c->out[i * c->C + k] = x[k] * s * c->w[k];
            l += c->out[i * c->C + k] * c->r[i * c->C + k];
        }
    }
    return l;
}

static void test_rmsnorm(void **state) {
    (void)state;
    const int64_t BT = 5, C = 13; /* C not a multiple of the 8 lanes */
    const size_t n = (size_t)(BT * C);
    arr inp = arr_rand(n, 2, 0.3), w = arr_rand((size_t)C, 0.3, 1.0), r = arr_rand(n, 1, 0);
    rms_ctx c = {inp.d, w.d, r.d, dzeros(n), BT, C, 1e-5};
    float *out = fzeros(n), *rstd = fzeros((size_t)BT);
    plait_k_rmsnorm_forward(out, rstd, inp.f, w.f, BT, C, 1e-5f);
    rms_loss(&c);
    expect_close("rmsnorm out", out, c.out, n, 1e-5);
    /* the residual stream accumulates: dinp = dres + ... */
    float *dinp = fzeros(n), *dres = fzeros(n), *dw = fzeros((size_t)C);
    for (size_t i = 0; i < n; i++) dres[i] = 1.0f;
    plait_k_rmsnorm_backward(dinp, dres, dw, r.f, inp.f, w.f, rstd, BT, C);
    double *g = dzeros(n);
    finite_diff(g, inp.d, n, rms_loss, &c);
    for (size_t i = 0; i < n; i++) g[i] += 1.0;
    expect_close("rmsnorm dinp", dinp, g, n, 1e-4);
    finite_diff(g, w.d, (size_t)C, rms_loss, &c);
    expect_close("rmsnorm dweight", dw, g, (size_t)C, 1e-5);
    /* in two halves, the input's then the weight's (dres NULL: overwritten
     * from zeros; in place: dinp accumulates), the bits of one call */
    float *dinp2 = fzeros(n), *dw2 = fzeros((size_t)C);
    for (size_t i = 0; i < n; i++) dinp2[i] = 1.0f;
    plait_k_rmsnorm_backward(dinp2, dinp2, NULL, r.f, inp.f, w.f, rstd, BT, C);
    plait_k_rmsnorm_backward(NULL, NULL, dw2, r.f, inp.f, NULL, rstd, BT, C);
    assert_memory_equal(dinp, dinp2, n * sizeof(float));
    assert_memory_equal(dw, dw2, (size_t)C * sizeof(float));
    plait_k_rmsnorm_backward(dinp2, NULL, NULL, r.f, inp.f, w.f, rstd, BT, C);
    for (size_t i = 0; i < n; i++) assert_true(fabsf(dinp2[i] - (dinp[i] - 1.0f)) <= 1e-6f);
    float *bufs[] = {out, rstd, dinp, dres, dw, dinp2, dw2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(g);
    free(c.out);
    arr_free(&inp);
    arr_free(&w);
    arr_free(&r);
}

/* ---- rotary positions ------------------------------------------------------ */

/* The rotation of each pair (i, i + HS/2) of the first n_heads heads of
 * every row against a double reference, columns past them untouched, the
 * inverse undoing it, and the inverse as the backward (the rotation's
 * transpose, against finite differences of Σ r·rope(x)). */
static void test_rope(void **state) {
    (void)state;
    const int64_t B = 2, T = 5, NHR = 3, HS = 6, half = HS / 2, stride = NHR * HS + 4;
    const size_t n = (size_t)(B * T * stride);
    const int32_t pos[5] = {0, 1, 2, 7, 100}; /* positions need not be contiguous */
    float *cs = fzeros((size_t)(2 * T * half));
    double *ang = dzeros((size_t)(T * half));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            const float inv = 1.0f / powf(10000.0f, (float)(2 * i) / (float)HS);
            const float a = (float)pos[t] * inv;
            cs[t * half + i] = cosf(a);
            cs[T * half + t * half + i] = sinf(a);
            ang[t * half + i] = a;
        }
    arr x = arr_rand(n, 1, 0);
    float *y = fzeros(n);
    memcpy(y, x.f, n * sizeof(float));
    plait_k_rope(y, cs, B, T, stride, NHR, HS, 0);
    double *want = dzeros(n);
    for (size_t i = 0; i < n; i++) want[i] = x.d[i];
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t h = 0; h < NHR; h++)
            for (int64_t i = 0; i < half; i++) {
                const double a = ang[(r % T) * half + i];
                const size_t p0 = (size_t)(r * stride + h * HS + i), p1 = p0 + (size_t)half;
                want[p0] = x.d[p0] * cos(a) - x.d[p1] * sin(a);
                want[p1] = x.d[p1] * cos(a) + x.d[p0] * sin(a);
            }
    expect_close2("rope", y, want, n, 1e-5, 1e-6);
    for (int64_t r = 0; r < B * T; r++)
        assert_memory_equal(y + r * stride + NHR * HS, x.f + r * stride + NHR * HS, 4 * sizeof(float));
    plait_k_rope(y, cs, B, T, stride, NHR, HS, 1);
    expect_close2("rope then its inverse", y, x.d, n, 1e-5, 1e-6);
    /* the backward: d(Σ r·rope(x))/dx = rope⁻¹(r) */
    arr r = arr_rand(n, 1, 0);
    float *gr = fzeros(n);
    memcpy(gr, r.f, n * sizeof(float));
    plait_k_rope(gr, cs, B, T, stride, NHR, HS, 1);
    double *fd = dzeros(n);
    for (size_t i = 0; i < n; i++) {
        double s = 0; /* Σ_j r_j ∂rope(x)_j/∂x_i: the column of the rotation */
        const int64_t row = (int64_t)i / stride, col = (int64_t)i % stride, t = row % T;
        if (col >= NHR * HS) s = r.d[i];
        else {
            const int64_t k = col % HS, pair = k < half ? k : k - half;
            const double a = ang[t * half + pair];
            const size_t other = k < half ? i + (size_t)half : i - (size_t)half;
            s = k < half ? r.d[i] * cos(a) + r.d[other] * sin(a) : r.d[i] * cos(a) - r.d[other] * sin(a);
        }
        fd[i] = s;
    }
    expect_close2("rope backward", gr, fd, n, 1e-5, 1e-6);
    free(cs);
    free(ang);
    free(y);
    free(want);
    free(gr);
    free(fd);
    arr_free(&x);
    arr_free(&r);
}

/* ---- SwiGLU ---------------------------------------------------------------- */

typedef struct swiglu_ctx {
    double *gate, *up, *r;
    size_t n;
} swiglu_ctx;

static double swiglu_loss(void *vc) {
    swiglu_ctx *c = vc;
    double l = 0;
    for (size_t i = 0; i < c->n; i++) l += c->gate[i] / (1.0 + exp(-c->gate[i])) * c->up[i] * c->r[i];
    return l;
}

static void test_swiglu(void **state) {
    (void)state;
    const size_t n = 4096 + 37; /* more than one work item */
    arr gate = arr_rand(n, 4, 0), up = arr_rand(n, 2, 0), r = arr_rand(n, 1, 0);
    swiglu_ctx c = {gate.d, up.d, r.d, n};
    float *out = fzeros(n);
    double *want = dzeros(n);
    plait_k_swiglu_forward(out, gate.f, up.f, n);
    for (size_t i = 0; i < n; i++) want[i] = gate.d[i] / (1.0 + exp(-gate.d[i])) * up.d[i];
    expect_close("swiglu", out, want, n, 1e-5);
    float *dg = fzeros(n), *du = fzeros(n);
    plait_k_swiglu_backward(dg, du, r.f, gate.f, up.f, n);
    double *g = dzeros(n);
    finite_diff(g, gate.d, n, swiglu_loss, &c);
    expect_close("swiglu dgate", dg, g, n, 1e-4);
    finite_diff(g, up.d, n, swiglu_loss, &c);
    expect_close("swiglu dup", du, g, n, 1e-4);
    /* dup may be dout */
    float *d2 = fzeros(n), *dg2 = fzeros(n);
    memcpy(d2, r.f, n * sizeof(float));
    plait_k_swiglu_backward(dg2, d2, d2, gate.f, up.f, n);
    assert_memory_equal(dg2, dg, n * sizeof(float));
    assert_memory_equal(d2, du, n * sizeof(float));
    float *bufs[] = {out, dg, du, d2, dg2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(want);
    free(g);
    arr_free(&gate);
    arr_free(&up);
    arr_free(&r);
}

int main(void) {
    plait_kernels_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
