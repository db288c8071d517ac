/*
 * oneDNN under the fp32 products: plait_k_sgemm through oneDNN against the
 * same product through OpenBLAS, on the shapes of gpt-small's forward and
 * backward products (all three transposes), within fp32 tolerance; the
 * refusal of an unknown PLAIT_CPU_GEMM and of a oneDNN that cannot be
 * loaded (everywhere). The products skip (77) where libdnnl.so.2 is
 * absent.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_check.h"
#include "kernels/kernels.h"

/* C = op(A) op(B) + C0 through one library, then the other; the largest
 * difference relative to the sum of |terms| of its element. */
static double compare(int ta, int tb, int64_t M, int64_t N, int64_t K) {
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
    float *C1 = malloc(sizeof(float) * (size_t)(M * N)), *C2 = malloc(sizeof(float) * (size_t)(M * N));
    fill(A, M * K, 1);
    fill(B, K * N, 2);
    fill(C1, M * N, 3);
    memcpy(C2, C1, sizeof(float) * (size_t)(M * N));
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    char err[512];
    plait_kernels_set_gemm("blas", err, sizeof err);
    plait_k_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C1, N);
    plait_kernels_set_gemm("onednn", err, sizeof err);
    plait_k_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C2, N);
    double worst = 0;
    /* every element's terms are below 1 in magnitude: K + 1 bounds their sum */
    for (int64_t i = 0; i < M * N; i++) {
        double d = fabs((double)C1[i] - (double)C2[i]) / (double)(K + 1);
        if (!(d <= worst)) worst = d; /* NaN too */
    }
    free(A);
    free(B);
    free(C1);
    free(C2);
    return worst;
}

int main(void) {
    char err[512];
    /* a oneDNN that cannot be loaded is named with its package (runs
     * everywhere: before the real library is loaded) */
    setenv("PLAIT_ONEDNN_LIB", "libdnnl-absent.so.9", 1);
    CHECK(plait_kernels_set_gemm("onednn", err, sizeof err) == -1, "a missing oneDNN was accepted");
    CHECK(strstr(err, "libdnnl-absent.so.9") && strstr(err, "libdnnl2") && strstr(err, "PLAIT_CPU_GEMM=blas"),
          "missing library: %s", err);
    CHECK(plait_kernels_set_gemm("auto", err, sizeof err) == 0 && plait_kernels_gemm() == PLAIT_GEMM_BLAS,
          "auto without oneDNN is not the BLAS");
    unsetenv("PLAIT_ONEDNN_LIB");
    if (failures) return 1;
    if (plait_kernels_set_gemm("onednn", err, sizeof err) != 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    CHECK(plait_kernels_gemm() == PLAIT_GEMM_ONEDNN, "onednn was not chosen");
    char what[256];
    plait_kernels_gemm_describe(what, sizeof what);
    CHECK(strstr(what, "products on oneDNN 2.") && strstr(what, " ISA ("), "description: %s", what);
    printf("%s\n", what);

    /* gpt-small: 2048 tokens, C = 256; the qkv (3C), attention projection
     * (C), MLP (4C and back) and lm head (vocab 256) products, forward
     * (A op(B)^T), input gradient (NN) and weight gradient (A^T B) */
    plait_kernels_set_threads(2);
    const int64_t BT = 2048, C = 256, shapes[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t in = shapes[s][0], out = shapes[s][1];
        double fwd = compare(0, 1, BT, out, in), dinp = compare(0, 0, BT, in, out), dw = compare(1, 0, out, in, BT);
        /* fp32 sums in different orders differ by a few ulps of the sum's
         * magnitude; 2^-20 is ~8 ulps, far below any wrong element */
        const double tol = 1.0 / (1 << 20);
        CHECK(fwd < tol, "forward %lldx%lldx%lld: %.3g", (long long)BT, (long long)out, (long long)in, fwd);
        CHECK(dinp < tol, "input gradient %lldx%lldx%lld: %.3g", (long long)BT, (long long)in, (long long)out, dinp);
        CHECK(dw < tol, "weight gradient %lldx%lldx%lld: %.3g", (long long)out, (long long)in, (long long)BT, dw);
    }
    plait_kernels_set_threads(1);

    CHECK(plait_kernels_set_gemm("mkl", err, sizeof err) == -1, "mkl accepted");
    CHECK(strstr(err, "mkl") && strstr(err, "allowed: auto, blas, onednn"), "unknown library: %s", err);
    CHECK(plait_kernels_gemm() == PLAIT_GEMM_ONEDNN, "a refused setting changed the choice");
    setenv("PLAIT_CPU_GEMM", "blas", 1);
    CHECK(plait_kernels_set_gemm(NULL, err, sizeof err) == 0 && plait_kernels_gemm() == PLAIT_GEMM_BLAS,
          "PLAIT_CPU_GEMM=blas not taken");
    plait_kernels_gemm_describe(what, sizeof what);
    CHECK(strstr(what, "PLAIT_CPU_GEMM=blas"), "description: %s", what);
    return failures ? 1 : 0;
}
