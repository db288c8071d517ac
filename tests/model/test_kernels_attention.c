/*
 * The fused attention's kernels (causal, per head, with the rows'
 * log-sum-exp kept for the backward) against a double-precision
 * reference, the backward against central finite differences of it: a
 * small shape and one larger than a tile of rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/kernel_check.h"

/* ---- attention ----------------------------------------------------------- */

typedef struct att_ctx {
    double *qkv, *r, *out, *row, *lse; /* lse[B,NH,T] */
    int64_t B, T, NH, HS;
} att_ctx;

static void ref_attention(att_ctx *c) {
    const int64_t T = c->T, HS = c->HS, NH = c->NH, Cl = NH * HS, C3 = 3 * Cl;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < T; i++) {
                const double *q = c->qkv + (b * T + i) * C3 + h * HS;
                double mx = -INFINITY;
                for (int64_t j = 0; j <= i; j++) {
                    const double *k = c->qkv + (b * T + j) * C3 + Cl + h * HS;
                    double s = 0;
                    for (int64_t d = 0; d < HS; d++) s += q[d] * k[d];
                    c->row[j] = s / sqrt((double)HS);
                    mx = fmax(mx, c->row[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j <= i; j++) sum += (c->row[j] = exp(c->row[j] - mx));
                c->lse[(b * NH + h) * T + i] = mx + log(sum);
                double *o = c->out + (b * T + i) * Cl + h * HS;
                for (int64_t d = 0; d < HS; d++) o[d] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *v = c->qkv + (b * T + j) * C3 + 2 * Cl + h * HS;
                    for (int64_t d = 0; d < HS; d++) o[d] += c->row[j] / sum * v[d];
                }
            }
}

static double att_loss(void *vc) {
    att_ctx *c = vc;
    ref_attention(c);
    return dot_d(c->out, c->r, (size_t)(c->B * c->T * c->NH * c->HS));
}

static void check_attention(int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const int64_t Cl = NH * HS;
    const size_t nqkv = (size_t)(B * T * 3 * Cl), nout = (size_t)(B * T * Cl);
    const size_t natt = (size_t)(B * NH * T * T);
    arr qkv = arr_rand(nqkv, 1.5, 0), r = arr_rand(nout, 1, 0);
    att_ctx c = {qkv.d, r.d, dzeros(nout), dzeros((size_t)T), dzeros((size_t)(B * NH * T)), B, T, NH, HS};
    float *out = fzeros(nout), *att = fzeros(natt), *scratch = fzeros(natt);
    float *dqkv = fzeros(nqkv);
    plait_k_attention_forward(out, att, qkv.f, B, T, NH, HS);
    att_loss(&c);
    expect_close("attention out", out, c.out, nout, 1e-5);
    for (int64_t bh = 0; bh < B * NH; bh++)
        for (int64_t i = 0; i < T; i++) {
            double s = 0;
            for (int64_t j = 0; j < T; j++) {
                float p = att[(bh * T + i) * T + j];
                if (j > i) assert_true(p == 0.0f);
                s += p;
            }
            assert_true(fabs(s - 1.0) < 1e-5);
        }
    plait_k_attention_backward(dqkv, scratch, r.f, qkv.f, att, B, T, NH, HS);
    double *g = dzeros(nqkv);
    finite_diff(g, qkv.d, nqkv, att_loss, &c);
    expect_close("attention dqkv", dqkv, g, nqkv, 1e-4);

    /* bit-identical with 2 threads */
    float *out2 = fzeros(nout), *att2 = fzeros(natt), *dqkv2 = fzeros(nqkv);
    plait_kernels_set_threads(2);
    plait_k_attention_forward(out2, att2, qkv.f, B, T, NH, HS);
    plait_k_attention_backward(dqkv2, scratch, r.f, qkv.f, att2, B, T, NH, HS);
    plait_kernels_set_threads(1);
    assert_memory_equal(out, out2, nout * sizeof(float));
    assert_memory_equal(att, att2, natt * sizeof(float));
    assert_memory_equal(dqkv, dqkv2, nqkv * sizeof(float));

    /* fused: the unfused output bit for bit, lse, the gradient against
     * finite differences, and the same bits with 2 threads */
    const size_t nlse = (size_t)(B * NH * T), nscr = plait_k_attention_fused_scratch(B, T, NH, HS);
    float *fout = fzeros(nout), *lse = fzeros(nlse), *fscr = fzeros(nscr), *fdqkv = fzeros(nqkv);
    plait_k_attention_fused_forward(fout, lse, fscr, qkv.f, B, T, NH, HS);
    assert_memory_equal(fout, out, nout * sizeof(float));
    att_loss(&c);
    expect_close("fused attention lse", lse, c.lse, nlse, 1e-5);
    plait_k_attention_fused_backward(fdqkv, fscr, r.f, qkv.f, fout, lse, B, T, NH, HS);
    expect_close("fused attention dqkv", fdqkv, g, nqkv, 1e-4);
    float *fout2 = fzeros(nout), *lse2 = fzeros(nlse), *fdqkv2 = fzeros(nqkv);
    plait_kernels_set_threads(2);
    plait_k_attention_fused_forward(fout2, lse2, fscr, qkv.f, B, T, NH, HS);
    plait_k_attention_fused_backward(fdqkv2, fscr, r.f, qkv.f, fout2, lse2, B, T, NH, HS);
    plait_kernels_set_threads(1);
    assert_memory_equal(lse, lse2, nlse * sizeof(float));
    assert_memory_equal(fdqkv, fdqkv2, nqkv * sizeof(float));
    free(fout);
    free(lse);
    free(fscr);
    free(fdqkv);
    free(fout2);
    free(lse2);
    free(fdqkv2);
    free(c.lse);
    free(out2);
    free(att2);
    free(dqkv2);
    free(g);
    free(out);
    free(att);
    free(scratch);
    free(dqkv);
    free(c.out);
    free(c.row);
    arr_free(&qkv);
    arr_free(&r);
}

static void test_attention_small(void **state) {
    (void)state;
    check_attention(2, 7, 2, 3);
}

static void test_attention_tiled(void **state) {
    (void)state;
    check_attention(1, 70, 2, 4); /* crosses the 64-row tile boundary */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_small),
        cmocka_unit_test(test_attention_tiled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
