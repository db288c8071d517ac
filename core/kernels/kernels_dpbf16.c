/*
 * Small products on bf16 pairs with float32 sums: the fused attention's
 * tile products on a bf16 run (kernels_attention_bf16.c), whose shapes
 * (a head size of 32 to 128 on one side) are too small for a library
 * call each: oneDNN's matmul primitive cost more a call than such a tile's
 * arithmetic.
 *
 * C = alpha·A·B (+ C when beta is 1), with K counted in pairs: element
 * (m, kk) of A is the two bf16 values at A + m·a_rs + kk·a_ps, and B is
 * packed in pair-rows, column n of pair-row kk the two values at
 * Bp + kk·ldp + 2n (a layout the packers below make from row-major
 * matrices and their transposes). Each pair adds a·b of its second
 * values, then of its first, to the float32 sum: what AVX512_BF16's
 * vdpbf16ps computes (it treats subnormal inputs as zero and rounds each
 * addition), and what the portable loop computes where the instruction is
 * missing or not to be used (an fp32 or emulated bf16 run): the same
 * numbers but for subnormals and, where the hardware fuses a pair's two
 * products, the order of its additions.
 */
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DP_X86 1
#endif

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

/* ---- the portable loop ---------------------------------------------------- */
static void gemm_portable(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs, int64_t a_ps,
                          const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc) {
    for (int64_t m = 0; m < M; m++) {
        float *c = C + m * ldc;
        for (int64_t n0 = 0; n0 < N; n0 += 64) {
            const int64_t nb = N - n0 < 64 ? N - n0 : 64;
            float acc[64] = {0};
            for (int64_t kk = 0; kk < K2; kk++) {
                const uint16_t *a = A + m * a_rs + kk * a_ps, *b = Bp + kk * ldp + 2 * n0;
                const float a0 = plait_k_widen_bf16(a[0]), a1 = plait_k_widen_bf16(a[1]);
                for (int64_t n = 0; n < nb; n++) {
                    float s = acc[n] + a1 * plait_k_widen_bf16(b[2 * n + 1]);
                    acc[n] = s + a0 * plait_k_widen_bf16(b[2 * n]);
                }
            }
            for (int64_t n = 0; n < nb; n++) c[n0 + n] = beta != 0.0f ? alpha * acc[n] + c[n0 + n] : alpha * acc[n];
        }
    }
}

/* ---- AVX512_BF16 ---------------------------------------------------------- */
#ifdef DP_X86
#define DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* R rows (8, 4, 2 or 1) by up to 32 columns: 2·R accumulators in
 * registers */
DP_TARGET static inline __attribute__((always_inline)) void
block_native(const int R, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs, int64_t a_ps, const uint16_t *Bp,
             int64_t ldp, __mmask16 k0, __mmask16 k1, float beta, float *C, int64_t ldc) {
    __m512 acc[8][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < K2; kk++) {
        const uint16_t *b = Bp + kk * ldp;
        const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(k0, b);
        const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi32(k1, b + 32);
        for (int r = 0; r < R; r++) {
            int32_t pair;
            memcpy(&pair, A + r * a_rs + kk * a_ps, sizeof pair);
            const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
    for (int r = 0; r < R; r++) {
        float *c = C + r * ldc;
        __m512 c0 = _mm512_mul_ps(va, acc[r][0]), c1 = _mm512_mul_ps(va, acc[r][1]);
        if (beta != 0.0f) {
            c0 = _mm512_add_ps(c0, _mm512_maskz_loadu_ps(k0, c));
            c1 = _mm512_add_ps(c1, _mm512_maskz_loadu_ps(k1, c + 16));
        }
        _mm512_mask_storeu_ps(c, k0, c0);
        _mm512_mask_storeu_ps(c + 16, k1, c1);
    }
}

/* The pairs [kk0, kk1) a block of R rows from row m needs, and whether it
 * needs its columns from n0 (the causal bounds of plait_k_dpbf16_gemm_causal:
 * the rows' last is row m + R - 1, their first row m) */
static inline int causal_block(plait_k_dp_causal c, int64_t m, int R, int64_t n0, int64_t K2, int64_t *kk0,
                               int64_t *kk1) {
    *kk0 = 0;
    *kk1 = K2;
    switch (c.mode) {
        case PLAIT_K_DP_COLS_TO_ROW:
            return n0 <= c.off + m + R - 1;
        case PLAIT_K_DP_K_TO_ROW: {
            const int64_t last = (c.off + m + R - 1) / 2 + 1;
            if (last < *kk1) *kk1 = last;
            return 1;
        }
        case PLAIT_K_DP_K_FROM_ROW:
            if (m - c.off > 0) *kk0 = (m - c.off) / 2 < K2 ? (m - c.off) / 2 : K2;
            return 1;
        default:
            return 1;
    }
}

DP_TARGET static void gemm_native(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs,
                                  int64_t a_ps, const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc,
                                  plait_k_dp_causal cz) {
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
        const int64_t nb = N - n0 < 32 ? N - n0 : 32;
        const __mmask16 k0 = nb >= 16 ? 0xffff : (__mmask16)((1u << nb) - 1);
        const __mmask16 k1 = nb >= 32 ? 0xffff : nb > 16 ? (__mmask16)((1u << (nb - 16)) - 1) : 0;
        const uint16_t *b = Bp + 2 * n0;
        int64_t m = 0, kk0, kk1;
        for (; m + 8 <= M; m += 8)
            if (causal_block(cz, m, 8, n0, K2, &kk0, &kk1))
                block_native(8, kk1 - kk0, alpha, A + m * a_rs + kk0 * a_ps, a_rs, a_ps, b + kk0 * ldp, ldp, k0, k1,
                             beta, C + m * ldc + n0, ldc);
        /* the rows left, in blocks of 4, 2 and 1 */
        for (int R = 4; R >= 1; R /= 2) {
            if (M - m < R) continue;
            if (causal_block(cz, m, R, n0, K2, &kk0, &kk1)) {
                const uint16_t *a = A + m * a_rs + kk0 * a_ps, *bk = b + kk0 * ldp;
                float *c = C + m * ldc + n0;
                const int64_t kn = kk1 - kk0;
                if (R == 4) block_native(4, kn, alpha, a, a_rs, a_ps, bk, ldp, k0, k1, beta, c, ldc);
                else if (R == 2) block_native(2, kn, alpha, a, a_rs, a_ps, bk, ldp, k0, k1, beta, c, ldc);
                else block_native(1, kn, alpha, a, a_rs, a_ps, bk, ldp, k0, k1, beta, c, ldc);
            }
            m += R;
        }
    }
}

#endif

int plait_k_dpbf16_native(void) {
#ifdef DP_X86
    static int has = -1;
    if (has < 0) has = plait_k_cpu_avx512_bf16();
    return has && plait_kernels_precision() == PLAIT_KERNELS_BF16 && !plait_k_bf16_widened();
#else
    return 0;
#endif
}

void plait_k_dpbf16_gemm_causal(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs,
                                int64_t a_ps, const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc,
                                plait_k_dp_causal causal) {
    if (M <= 0 || N <= 0) return;
#ifdef DP_X86
    if (plait_k_dpbf16_native()) {
        gemm_native(M, N, K2, alpha, A, a_rs, a_ps, Bp, ldp, beta, C, ldc, causal);
        return;
    }
#endif
    gemm_portable(M, N, K2, alpha, A, a_rs, a_ps, Bp, ldp, beta, C, ldc);
}

void plait_k_dpbf16_gemm(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs, int64_t a_ps,
                         const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc) {
    plait_k_dpbf16_gemm_causal(M, N, K2, alpha, A, a_rs, a_ps, Bp, ldp, beta, C, ldc,
                               (plait_k_dp_causal){PLAIT_K_DP_ALL, 0});
}

/* ---- packing -------------------------------------------------------------- */
void plait_k_dpbf16_pack_rows(uint16_t *Bp, int64_t ldp, const uint16_t *B, int64_t ldb, int64_t K, int64_t N) {
    for (int64_t k = 0; k + 1 < K; k += 2) {
        uint16_t *restrict d = Bp + (k / 2) * ldp;
        const uint16_t *restrict r0 = B + k * ldb, *restrict r1 = r0 + ldb;
        for (int64_t n = 0; n < N; n++) {
            d[2 * n] = r0[n];
            d[2 * n + 1] = r1[n];
        }
    }
    if (K & 1) {
        uint16_t *restrict d = Bp + (K / 2) * ldp;
        const uint16_t *restrict r0 = B + (K - 1) * ldb;
        for (int64_t n = 0; n < N; n++) {
            d[2 * n] = r0[n];
            d[2 * n + 1] = 0;
        }
    }
}

#ifdef DP_X86
/* Two rows rounded in registers and interleaved as they are stored: a
 * value of row k in a pair's low half, of row k+1 in its high half */
PLAIT_K_NARROW16_TARGET static void pack_rows_rounded_native(uint16_t *Bp, int64_t ldp, const float *B, int64_t ldb,
                                                             int64_t K, int64_t N) {
    for (int64_t k = 0; k < K; k += 2) {
        const float *r0 = B + k * ldb, *r1 = k + 1 < K ? r0 + ldb : NULL;
        uint16_t *d = Bp + (k / 2) * ldp;
        for (int64_t n = 0; n < N; n += 16) {
            const __mmask16 m = N - n >= 16 ? 0xffff : (__mmask16)((1u << (N - n)) - 1);
            const __m512i lo = _mm512_cvtepu16_epi32(plait_k_narrow16(r0 + n, m));
            const __m512i hi = r1 ? _mm512_cvtepu16_epi32(plait_k_narrow16(r1 + n, m)) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(d + 2 * n, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}
#endif

void plait_k_dpbf16_pack_rows_rounded(uint16_t *Bp, int64_t ldp, const float *B, int64_t ldb, int64_t K, int64_t N) {
#ifdef DP_X86
    if (plait_k_narrow_native()) {
        pack_rows_rounded_native(Bp, ldp, B, ldb, K, N);
        return;
    }
#endif
    uint16_t r0[PLAIT_K_STACK_FLOATS], r1[PLAIT_K_STACK_FLOATS];
    for (int64_t n0 = 0; n0 < N; n0 += PLAIT_K_STACK_FLOATS) {
        const int64_t nb = N - n0 < PLAIT_K_STACK_FLOATS ? N - n0 : PLAIT_K_STACK_FLOATS;
        for (int64_t k = 0; k < K; k += 2) {
            plait_k_narrow(r0, B + k * ldb + n0, nb);
            if (k + 1 < K) plait_k_narrow(r1, B + (k + 1) * ldb + n0, nb);
            else memset(r1, 0, (size_t)nb * sizeof *r1);
            uint16_t *restrict d = Bp + (k / 2) * ldp + 2 * n0;
            for (int64_t n = 0; n < nb; n++) {
                d[2 * n] = r0[n];
                d[2 * n + 1] = r1[n];
            }
        }
    }
}

/* a transpose of 32-bit pairs: 16 columns at a time, so that the 16 rows
 * read stay in cache while each pair-row of 16 is written whole */
void plait_k_dpbf16_pack_cols(uint16_t *Bp, int64_t ldp, const uint16_t *Bt, int64_t ldbt, int64_t K, int64_t N) {
    const int64_t K2 = K / 2;
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
        const int64_t nb = N - n0 < 16 ? N - n0 : 16;
        const uint16_t *s = Bt + n0 * ldbt;
        for (int64_t kk = 0; kk < K2; kk++) {
            uint32_t pairs[16];
            for (int64_t n = 0; n < nb; n++) memcpy(&pairs[n], s + n * ldbt + 2 * kk, sizeof pairs[n]);
            memcpy(Bp + kk * ldp + 2 * n0, pairs, (size_t)nb * sizeof pairs[0]);
        }
        if (K & 1) {
            uint16_t *d = Bp + K2 * ldp + 2 * n0;
            for (int64_t n = 0; n < nb; n++) {
                d[2 * n] = s[n * ldbt + K - 1];
                d[2 * n + 1] = 0;
            }
        }
    }
}

void plait_k_dpbf16_round_rows(uint16_t *A, int64_t lda, const float *X, int64_t ldx, int64_t rows, int64_t cols) {
    plait_k_narrow_rows(A, lda, X, ldx, rows, cols);
    if (cols & 1)
        for (int64_t r = 0; r < rows; r++) A[r * lda + cols] = 0;
}
