/*
 * The products on bf16 pairs (core/kernels/kernels_dpbf16.c) and the
 * fused attention a bf16 run computes on them (kernels_attention_pairs.c):
 *
 * - plait_k_dpbf16_gemm against a double-precision sum of the same bf16
 *   terms, within 2^-20 of the sum of their magnitudes: M and N with
 *   partial register blocks, an odd K (the packers' zero pad), A read by
 *   rows and by packed columns, alpha, and beta 1 adding to C; the
 *   portable loop always, AVX512_BF16's vdpbf16ps where this CPU has it;
 * - its causal forms against the full product, bit for bit, on the
 *   entries they keep; the rounding packer against the rounding rule on
 *   every special value;
 * - the bf16-activation attention entries, forward and backward, plain and
 *   grouped-query, against the float32 entries of an fp32 run on the
 *   widened inputs: out, lse and dqkv within bf16's 2e-2 normwise (the
 *   probabilities and d(scores) are rounded to bf16 for their products, as
 *   the cuda device's tensor-core kernels round them), and the same bits at
 *   1 and 3 threads.
 *
 * The native half says why it did not run where the CPU lacks
 * AVX512_BF16 or no bf16 product library loads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_check.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

static float widen(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void rand_bf16(uint16_t *x, int64_t n, uint32_t seed) {
    float *f = malloc(sizeof *f * (size_t)n);
    fill(f, n, seed);
    plait_k_narrow(x, f, n);
    free(f);
}

/* ---- the products ---------------------------------------------------------- */
/* C = alpha·A·B (+ C0 when beta) over K terms, A[M×K] and B[K×N] row-major
 * bf16, against a double sum; A given to the product by rows (a_rs = K
 * padded to even) or, with by_cols, as the pair-packed rows of its
 * transpose (a_rs = 2, a_ps = the packed stride) */
static void check_gemm(const char *mode, int64_t M, int64_t N, int64_t K, float alpha, int beta, int by_cols) {
    const int64_t K2 = (K + 1) / 2, Kp = 2 * K2;
    uint16_t *A = calloc((size_t)(M * Kp), sizeof *A), *B = malloc(sizeof *B * (size_t)(K * N));
    uint16_t *At = malloc(sizeof *At * (size_t)(K * M));
    uint16_t *Bp = malloc(sizeof *Bp * (size_t)(K2 * 2 * N)), *Ap = malloc(sizeof *Ap * (size_t)(K2 * 2 * M));
    float *C = malloc(sizeof *C * (size_t)(M * N)), *C0 = malloc(sizeof *C0 * (size_t)(M * N));
    uint16_t *a = malloc(sizeof *a * (size_t)(M * K));
    rand_bf16(a, M * K, (uint32_t)(M * 131 + K));
    rand_bf16(B, K * N, (uint32_t)(N * 17 + K));
    fill(C0, M * N, 99);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            A[m * Kp + k] = a[m * K + k];
            At[k * M + m] = a[m * K + k];
        }
    /* the pad must be read as zero even where the memory holds garbage */
    if (K & 1)
        for (int64_t m = 0; m < M; m++) A[m * Kp + K] = 0;
    plait_k_dpbf16_pack_rows(Bp, 2 * N, B, N, K, N);
    plait_k_dpbf16_pack_rows(Ap, 2 * M, At, M, K, M);
    memcpy(C, C0, sizeof *C * (size_t)(M * N));
    if (by_cols) plait_k_dpbf16_gemm(M, N, K2, alpha, Ap, 2, 2 * M, Bp, 2 * N, beta ? 1.0f : 0.0f, C, N);
    else plait_k_dpbf16_gemm(M, N, K2, alpha, A, Kp, 2, Bp, 2 * N, beta ? 1.0f : 0.0f, C, N);
    double worst = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double t = (double)widen(a[m * K + k]) * widen(B[k * N + n]);
                s += t;
                mag += fabs(t);
            }
            double want = alpha * s + (beta ? C0[m * N + n] : 0.0);
            double err = fabs(C[m * N + n] - want) / (fabs(alpha) * mag + (beta ? fabs(C0[m * N + n]) : 0.0) + 1e-30);
            if (err > worst) worst = err;
        }
    CHECK(worst <= 0x1p-20, "%s: %lldx%lldx%lld alpha %g beta %d A %s: error %.3g of the terms' magnitude", mode,
          (long long)M, (long long)N, (long long)K, alpha, beta, by_cols ? "packed" : "by rows", worst);
    free(A), free(B), free(At), free(Bp), free(Ap), free(C), free(C0), free(a);
}

static void check_gemms(const char *mode) {
    static const int64_t Ms[] = {1, 7, 8, 13, 64}, Ns[] = {1, 15, 16, 17, 32, 33, 70}, Ks[] = {1, 2, 7, 32, 67};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
            for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                check_gemm(mode, Ms[i], Ns[j], Ks[k], (i + j + k) % 2 ? 0.125f : 1.0f, (int)((i + k) % 2),
                           (int)(j % 2));
}

/* The rounding packer against the rule value by value: every special
 * value (subnormals, NaNs, infinities, ties) among normal ones, an odd
 * last row padded with zeros, partial groups of 16 columns, and nothing
 * written past a pair-row's 2N values */
static uint16_t narrow_rule(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)(((u & 0x7fffffu) ? u | 0x00400000u : u) >> 16);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void check_pack_rounded(const char *mode) {
    static const uint32_t odd[] = {0x00000001u, 0x807fffffu, 0x7fc00000u, 0xff800001u, 0x7f800000u,
                                   0x7f7fffffu, 0x3f808000u, 0x00008000u, 0x80000000u};
    static const int64_t Ks[] = {1, 2, 5, 8}, Ns[] = {1, 15, 16, 17, 40};
    for (size_t a = 0; a < sizeof Ks / sizeof *Ks; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++) {
            const int64_t K = Ks[a], N = Ns[b], ldb = N + 3, ldp = 2 * N + 5, K2 = (K + 1) / 2;
            float *B = malloc(sizeof *B * (size_t)(K * ldb));
            uint16_t *Bp = malloc(sizeof *Bp * (size_t)(K2 * ldp));
            fill(B, K * ldb, (uint32_t)(K * 31 + N));
            for (int64_t i = 0; i < K * ldb; i += 5) memcpy(&B[i], &odd[(size_t)(i / 5) % 9], sizeof B[i]);
            for (int64_t i = 0; i < K2 * ldp; i++) Bp[i] = 0xabcd;
            plait_k_dpbf16_pack_rows_rounded(Bp, ldp, B, ldb, K, N);
            int64_t bad = 0;
            for (int64_t kk = 0; kk < K2; kk++)
                for (int64_t j = 0; j < ldp; j++) {
                    const int64_t n = j / 2, k = 2 * kk + j % 2;
                    const uint16_t want = j >= 2 * N ? 0xabcd : k < K ? narrow_rule(B[k * ldb + n]) : 0;
                    bad += Bp[kk * ldp + j] != want;
                }
            CHECK(bad == 0, "%s: pack_rows_rounded %lldx%lld: %lld values differ from the rule", mode, (long long)K,
                  (long long)N, (long long)bad);
            free(B), free(Bp);
        }
}

/* The causal forms against the full product on the same operands, bit for
 * bit: COLS_TO_ROW on the entries it keeps (the native loop leaves a
 * panel past the diagonal unwritten), K_TO_ROW and K_FROM_ROW everywhere
 * with A's terms past (before) the diagonal zero, A by rows and packed,
 * rows in partial register blocks, odd K, the diagonal moved by off. */
static void check_causal_one(const char *mode, int cm, int64_t M, int64_t N, int64_t K, int64_t off, int beta) {
    const int64_t K2 = (K + 1) / 2, Kp = 2 * K2;
    uint16_t *a = malloc(sizeof *a * (size_t)(M * K)), *B = malloc(sizeof *B * (size_t)(K * N));
    uint16_t *A = calloc((size_t)(M * Kp), sizeof *A), *At = malloc(sizeof *At * (size_t)(K * M));
    uint16_t *Bp = malloc(sizeof *Bp * (size_t)(K2 * 2 * N)), *Ap = malloc(sizeof *Ap * (size_t)(K2 * 2 * M));
    float *full = malloc(sizeof *full * (size_t)(M * N)), *part = malloc(sizeof *part * (size_t)(M * N));
    rand_bf16(a, M * K, (uint32_t)(M * 7 + K + off));
    rand_bf16(B, K * N, (uint32_t)(N * 5 + K));
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            int zero = (cm == PLAIT_K_DP_K_TO_ROW && k > off + m) || (cm == PLAIT_K_DP_K_FROM_ROW && k < m - off);
            A[m * Kp + k] = At[k * M + m] = zero ? 0 : a[m * K + k];
        }
    plait_k_dpbf16_pack_rows(Bp, 2 * N, B, N, K, N);
    plait_k_dpbf16_pack_rows(Ap, 2 * M, At, M, K, M);
    const int packed = cm == PLAIT_K_DP_K_FROM_ROW; /* as the backward's dk and dv read it */
    const uint16_t *Aa = packed ? Ap : A;
    const int64_t a_rs = packed ? 2 : Kp, a_ps = packed ? 2 * M : 2;
    fill(full, M * N, 7);
    memcpy(part, full, sizeof *part * (size_t)(M * N));
    const float sentinel = part[N - 1];
    plait_k_dpbf16_gemm(M, N, K2, 0.5f, Aa, a_rs, a_ps, Bp, 2 * N, beta ? 1.0f : 0.0f, full, N);
    plait_k_dpbf16_gemm_causal(M, N, K2, 0.5f, Aa, a_rs, a_ps, Bp, 2 * N, beta ? 1.0f : 0.0f, part, N,
                               (plait_k_dp_causal){cm, off});
    int64_t bad = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            if ((cm != PLAIT_K_DP_COLS_TO_ROW || n <= off + m) && memcmp(&full[m * N + n], &part[m * N + n], 4)) bad++;
    CHECK(bad == 0, "%s: causal mode %d %lldx%lldx%lld off %lld beta %d: %lld entries differ from the full product",
          mode, cm, (long long)M, (long long)N, (long long)K, (long long)off, beta, (long long)bad);
    if (plait_k_dpbf16_native() && cm == PLAIT_K_DP_COLS_TO_ROW && off + 7 < N - 32)
        CHECK(memcmp(&part[N - 1], &sentinel, 4) == 0, "%s: a panel past the diagonal was written", mode);
    free(a), free(B), free(A), free(At), free(Bp), free(Ap), free(full), free(part);
}

static void check_causal(const char *mode) {
    static const int64_t Ms[] = {5, 8, 13, 64}, Ns[] = {33, 70}, Ks[] = {7, 64}, offs[] = {0, 3, 64};
    for (int cm = PLAIT_K_DP_COLS_TO_ROW; cm <= PLAIT_K_DP_K_FROM_ROW; cm++)
        for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
            for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
                for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
                    for (size_t o = 0; o < sizeof offs / sizeof *offs; o++)
                        check_causal_one(mode, cm, Ms[i], Ns[j], Ks[k], offs[o], (int)((i + o) % 2));
}

/* ---- the attention --------------------------------------------------------- */
static double normwise(const float *x, const float *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static float *widened(const uint16_t *x, size_t n) {
    float *f = malloc(sizeof *f * n);
    plait_k_widen(f, x, (int64_t)n);
    return f;
}

/* the bf16 entries under `precision` against the float32 entries of an
 * fp32 run; and their bits at 1 and 3 threads */
static void check_attention(const char *mode, int precision, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS) {
    const plait_kernels *k = plait_kernels_table();
    const int64_t W = (NH + 2 * NKV) * HS, Cl = NH * HS;
    const size_t nq = (size_t)(B * T * W), no = (size_t)(B * T * Cl), nl = (size_t)(B * NH * T);
    const size_t ns = k->attention_fused_scratch(B, T, NH, HS);
    uint16_t *qkv = malloc(sizeof *qkv * nq), *dout = malloc(sizeof *dout * no);
    rand_bf16(qkv, (int64_t)nq, (uint32_t)(T + NH));
    rand_bf16(dout, (int64_t)no, (uint32_t)(T * 3 + HS));
    float *qf = widened(qkv, nq), *df = widened(dout, no);
    float *scr = malloc(sizeof *scr * ns), *lse_ref = malloc(sizeof *lse_ref * nl);
    float *out_ref = malloc(sizeof *out_ref * no), *dq_ref = malloc(sizeof *dq_ref * nq);

    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    k->attention_gqa_forward(out_ref, lse_ref, scr, qf, B, T, NH, NKV, HS);
    k->attention_gqa_backward(dq_ref, scr, df, qf, out_ref, lse_ref, B, T, NH, NKV, HS);

    CHECK(plait_kernels_set_precision(precision) == 0, "%s: precision", mode);
    uint16_t *out[2], *dq[2];
    float *lse[2];
    for (int run = 0; run < 2; run++) {
        plait_kernels_set_threads(run ? 3 : 1);
        out[run] = malloc(sizeof *out[run] * no), dq[run] = malloc(sizeof *dq[run] * nq);
        lse[run] = malloc(sizeof *lse[run] * nl);
        k->attention_gqa_forward_bf16(out[run], lse[run], scr, qkv, B, T, NH, NKV, HS);
        k->attention_gqa_backward_bf16(dq[run], scr, dout, qkv, out[run], lse[run], B, T, NH, NKV, HS);
    }
    float *of = widened(out[0], no), *dqf = widened(dq[0], nq);
    double e_out = normwise(of, out_ref, no), e_lse = normwise(lse[0], lse_ref, nl), e_dq = normwise(dqf, dq_ref, nq);
    char what[96];
    snprintf(what, sizeof what, "%s: B%lld T%lld NH%lld NKV%lld HS%lld", mode, (long long)B, (long long)T,
             (long long)NH, (long long)NKV, (long long)HS);
    CHECK(e_out <= 2e-2 && e_lse <= 2e-2 && e_dq <= 2e-2, "%s: normwise out %.3g, lse %.3g, dqkv %.3g (bound 2e-2)",
          what, e_out, e_lse, e_dq);
    CHECK(memcmp(out[0], out[1], sizeof *out[0] * no) == 0 && memcmp(dq[0], dq[1], sizeof *dq[0] * nq) == 0 &&
              memcmp(lse[0], lse[1], sizeof *lse[0] * nl) == 0,
          "%s: 1 and 3 threads differ", what);
    printf("%s: normwise out %.2e, lse %.2e, dqkv %.2e\n", what, e_out, e_lse, e_dq);
    plait_kernels_set_threads(1);
    for (int run = 0; run < 2; run++) free(out[run]), free(dq[run]), free(lse[run]);
    free(qkv), free(dout), free(qf), free(df), free(scr), free(lse_ref), free(out_ref), free(dq_ref), free(of),
        free(dqf);
}

static void check_attentions(const char *mode, int precision) {
    check_attention(mode, precision, 2, 67, 3, 3, 32);  /* a partial last tile of 3 rows, T odd */
    check_attention(mode, precision, 1, 130, 4, 2, 64); /* grouped-query, 2 rows in the last tile */
    check_attention(mode, precision, 1, 70, 2, 1, 128); /* multi-query */
    check_attention(mode, precision, 1, 64, 2, 2, 6);   /* a head size under a register block */
}

int main(void) {
    setenv("PLAIT_CPU_BF16_PRODUCTS", "bf16", 1); /* the instructions even where auto widens */
    plait_kernels_set_threads(1);
    CHECK(plait_kernels_set_precision(PLAIT_KERNELS_BF16_EMULATED) == 0, "emulated precision");
    CHECK(!plait_k_dpbf16_native(), "an emulated run must not take the instructions");
    check_gemms("portable");
    check_causal("portable");
    check_pack_rounded("portable");
    check_attentions("emulated", PLAIT_KERNELS_BF16_EMULATED);
    char what[160], why[768];
    if (plait_kernels_bf16_native(what, sizeof what, why, sizeof why) != 0) {
        printf("native half not run: %s\n", why);
    } else if (plait_kernels_set_precision(PLAIT_KERNELS_BF16) == 0 && !plait_k_dpbf16_native()) {
        printf("native half not run: this CPU has no AVX512_BF16 (its bf16 products: %s)\n", what);
    } else {
        check_gemms("AVX512_BF16");
        check_causal("AVX512_BF16");
        check_pack_rounded("AVX512_BF16");
        check_attentions("native", PLAIT_KERNELS_BF16);
    }
    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    if (failures) {
        fprintf(stderr, "FAILED: %d\n", failures);
        return 1;
    }
    printf("passed\n");
    return 0;
}
