/*
 * Shared by the kernel files only.
 */
#ifndef PLAIT_CORE_KERNELS_INTERNAL_H
#define PLAIT_CORE_KERNELS_INTERNAL_H

#include <signal.h> /* sigset_t */
#include <stdint.h>
#include <string.h> /* memcpy */
#include <plait/types.h>

#include "kernels/simd_clones.h" /* PLAIT_SIMD_CLONES */

/* A bf16 value (its 16 bits) widened to the float32 it stands for: its
 * bits in the top half, exactly. */
static inline float plait_k_widen_bf16(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A float32 rounded to the nearest bf16, ties to even (its 16 bits), a NaN
 * kept quiet. An infinity needs no case of its own: adding at most 0x8000
 * to 0x7f800000 leaves the upper half alone. Without a branch, so that
 * the conversion loops vectorize. */
static inline uint16_t plait_k_narrow_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : rounded) >> 16);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PLAIT_K_NARROW16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/* The 16 floats of mask k at src (the others read as zero) rounded as
 * plait_k_narrow_bf16 rounds them, their bits in the lanes of the result,
 * for a CPU with AVX512_BF16 (plait_k_narrow_native): vcvtneps2bf16
 * rounds to nearest even in one instruction, but reads a subnormal as
 * zero and quiets a NaN by its own rule, so 16 values holding either
 * (two compares on their bits) take plait_k_narrow_bf16 one by one. */
PLAIT_K_NARROW16_TARGET static inline __attribute__((always_inline)) __m256i plait_k_narrow16(const float *src,
                                                                                              __mmask16 k) {
    const __m512i u = _mm512_maskz_loadu_epi32(k, src);
    const __m512i mag = _mm512_and_epi32(u, _mm512_set1_epi32(0x7fffffff));
    /* subnormal: 1 <= mag <= 0x007fffff, i.e. mag - 1 below 0x007fffff
     * unsigned (0 wraps above it); NaN: mag above 0x7f800000 */
    const __mmask16 odd = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(mag, _mm512_set1_epi32(1)),
                                                  _mm512_set1_epi32(0x007fffff)) |
                          _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
    __m256i bits;
    if (__builtin_expect((odd & k) != 0, 0)) {
        uint16_t h[16] = {0};
        for (int i = 0; i < 16; i++)
            if (k >> i & 1) h[i] = plait_k_narrow_bf16(src[i]);
        memcpy(&bits, h, sizeof bits);
        return bits;
    }
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(u));
    memcpy(&bits, &h, sizeof bits);
    return bits;
}
#endif

/* What this CPU can run (kernels_cpuid.c): AVX512_BF16 with AVX-512 F, BW
 * and VL; AVX-512 F, DQ, BW and VL (oneDNN's avx512_core); AMX_BF16, each
 * with its registers' state saved by the OS; an Intel CPU (cpuid's
 * vendor). 0 on other architectures. Thread-safe. */
int plait_k_cpu_avx512_bf16(void);
int plait_k_cpu_avx512_core(void);
int plait_k_cpu_amx_bf16(void);
int plait_k_cpu_intel(void);

/* A warning through the logger of plait_kernels_set_log (component
 * "kernels"). */
void plait_kernels_warn(const char *fmt, ...) PLAIT_PRINTF(1, 2);

/* One-time setup before the first BLAS call: OpenBLAS to one thread (plait
 * threads products itself, deterministically). Cheap after the first call;
 * thread-safe. */
void plait_kernels_ensure_init(void);

/* One cblas_sgemm call on the calling thread (row-major), no splitting. */
void plait_k_blas_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc);

/* One fp32 product on the calling thread through the library
 * plait_kernels_set_gemm chose (the BLAS or oneDNN): the tiles of
 * plait_k_sgemm and the attention kernels' products. */
void plait_k_gemm_here(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* The same through oneDNN's dnnl_sgemm (kernels_onednn.c), its OpenMP
 * team held at the calling thread; only once plait_kernels_set_gemm chose
 * oneDNN. */
void plait_k_onednn_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* What the rest of the kernels reach oneDNN by, once it is loaded
 * (plait_kernels_onednn_load): a symbol of the library (NULL when not
 * loaded or absent), its version ("2.6.3") and the ISA it runs ("avx2"). */
void *plait_k_onednn_sym(const char *name);
const char *plait_k_onednn_version(void);
const char *plait_k_onednn_isa_name(void);
/* 1 where that ISA has bf16 instructions (0 before oneDNN is loaded). */
int plait_k_onednn_isa_bf16(void);
/* Around each call into oneDNN: enter holds the calling thread's OpenMP
 * team at itself (a per-thread setting in libgomp), so that the call runs
 * on it alone, and holds the asynchronous signals off the thread, saving
 * its mask in *saved (oneDNN's generated GEMM kernels run on a stack
 * pointer into the heap: kernels_onednn.c); leave restores the mask. */
void plait_k_onednn_enter(sigset_t *saved);
void plait_k_onednn_leave(const sigset_t *saved);
/* PLAIT_CPU_GEMM=blas: the products on the BLAS in every precision. */
int plait_k_gemm_blas_forced(void);

/* bf16 products through oneDNN's matmul (kernels_onednn_matmul.c). The
 * probe loads oneDNN and creates one bf16 product: 0 with the kernel oneDNN
 * picked in impl ("brg:avx512_core_amx_bf16"), or -1 with why in err (the
 * library missing with its package, or no bf16 matmul on this ISA). Safe
 * from any thread; the answer is made once. */
int plait_k_onednn_bf16_probe(char *impl, size_t impl_len, char *err, size_t errlen);
/* Row-major C[M,N] = alpha op(A) op(B) + beta C, bf16 A and B (row strides
 * lda, ldb as stored), fp32 C, on the calling thread alone; only after a
 * probe that returned 0. Returns 0, or -1 when oneDNN refused the shape or
 * memory ran out (C is then unchanged). */
int plait_k_onednn_bf16_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                             int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The same product (alpha 1, beta 0) with C bf16: oneDNN sums in fp32 and
 * rounds each element once, to nearest even, as it stores it, so that no
 * fp32 C is written and read again. The same contract otherwise. */
int plait_k_onednn_bf16_gemm_rounded(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                     int64_t lda, const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc);

/* bf16 copies of a product's operands (kernels_bf16.c), packed: A as
 * stored (trans_a: K x M) with row stride lda, B likewise. native: uint16
 * bf16 values for cblas_sbgemm; else fp32 values rounded to bf16. They live
 * in the calling thread's scratch until its next call. */
typedef struct plait_bf16_operands {
    const void *A, *B;
    int64_t lda, ldb;
    int native;
} plait_bf16_operands;
/* Returns 0, or -1 when the scratch cannot grow. */
int plait_k_bf16_operands(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, plait_bf16_operands *out);
/* The tile of C at rows r0.., columns c0.. (M x N of it) from the copies. */
void plait_k_bf16_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const plait_bf16_operands *op, int64_t r0, int64_t c0, float beta, float *C,
                       int64_t ldc);

/* ---- bf16 activations (plait/kernels.h, ABI 1.8 on) ------------------------
 * The entries on bf16 tensors widen what they read into float32 scratch a
 * tile or a block of rows at a time, run the float32 entry's arithmetic
 * on it, and round what they write once: the float32 entry's bits on the
 * widened inputs, rounded (the contract), for products up to the order of
 * the sums. */

/* Per-thread float32 scratch, by slot (each grows to the largest request
 * and lives until the thread ends); NULL when out of memory. Slots 0 and 1
 * hold plait_k_bf16_operands' copies; the rest, named here, the
 * bf16-activation entries'. A slot's contents last until that thread's
 * next request of the same slot. */
enum {
    PLAIT_K_SLOT_TILE_A = 2, /* a product tile's operands widened (no native bf16 product) */
    PLAIT_K_SLOT_TILE_B = 3,
    PLAIT_K_SLOT_TILE_C = 4, /* a product tile's float32 result before its epilogue */
    PLAIT_K_SLOT_ROWS0 = 5,  /* a row kernel's or an attention item's widened operands */
    PLAIT_K_SLOT_ROWS1 = 6,
    PLAIT_K_SLOT_ROWS2 = 7,
    PLAIT_K_SLOT_ROWS3 = 8,
    PLAIT_K_SCRATCH_SLOTS = 9
};
float *plait_k_scratch(int slot, size_t n);
/* The same, or the process ended with the kernel and the size named where
 * memory ran out: a kernel has no error to return, and a result left
 * unwritten would be worse. */
float *plait_k_scratch_or_die(int slot, size_t n, const char *kernel);
/* Floats an elementwise bf16 kernel widens at a time on its stack (no
 * scratch, so nothing to run out of). */
#define PLAIT_K_STACK_FLOATS 1024
/* dst[i] = src[i] widened (exact) / rounded to nearest even (a NaN kept
 * quiet); on the calling thread. */
void plait_k_widen(float *dst, const uint16_t *src, int64_t n);
void plait_k_narrow(uint16_t *dst, const float *src, int64_t n);
/* Whether plait_k_narrow rounds on the CPU's instruction (AVX512_BF16's
 * vcvtneps2bf16, 16 values at once) rather than a loop of integer
 * operations: a kernel then leaves its float32 results for it to round
 * instead of rounding them in its own loop. The same bits either way. */
int plait_k_narrow_native(void);
/* rows x cols of a bf16 matrix (row stride ld) widened into a float one
 * (row stride dld), and the reverse (float rows sld apart) */
void plait_k_widen_rows(float *dst, int64_t dld, const uint16_t *src, int64_t ld, int64_t rows, int64_t cols);
void plait_k_narrow_rows(uint16_t *dst, int64_t ld, const float *src, int64_t sld, int64_t rows, int64_t cols);
/* Whether a BF16 run multiplies in fp32 on widened operands (its products
 * and attention taking the float32 paths on the widened values), chosen
 * where the CPU's bf16 dot products are slower than its fp32 ones
 * (kernels_bf16.c) */
int plait_k_bf16_widened(void);

/* One product on bf16 operands on the calling thread, C float32
 * (row-major, strides as stored): the native bf16 product of a bf16 run
 * (oneDNN or cblas_sbgemm), else the float32 product of the operands
 * widened (exact) in this thread's tile slots. `product` names the larger
 * product the tile is part of (plait_k_bf16_product; 0: none): while it is
 * the same, A and B must not change, and a thread reuses an operand it
 * widened for an earlier tile instead of widening it again. */
void plait_k_bf16_tile(uint64_t product, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C,
                       int64_t ldc);
/* The same product (alpha 1, beta 0) rounded to bf16 as it is stored, by
 * the library, where the bf16 run's products are oneDNN's: 0 when C holds
 * it, -1 when the caller makes it as a float32 tile and rounds that (the
 * emulated or widened mode, cblas_sbgemm, a shape oneDNN refused). */
int plait_k_bf16_tile_rounded(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                              const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc);
/* A name for a product not yet named in this process (never 0) */
uint64_t plait_k_bf16_product(void);

/* matmul_forward_bf16 and matmul_backward_bf16 (kernels_matmul_bf16.c)
 * with out's rows, or dout's, ldo elements apart (the grouped products of
 * the mixture of experts, kernels_moe.c); the backward's pre non-NULL
 * applies GELU's derivative to dinp as matmul_backward_gelu_bf16. */
void plait_k_matmul_forward_bf16_ld(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                    const plait_bf16 *bias, int64_t BT, int64_t C, int64_t OC);
void plait_k_matmul_backward_bf16_ld(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                     int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                     const plait_bf16 *pre, int64_t BT, int64_t C, int64_t OC);

/* GELU's float32 spans (kernels_gelu.c; out may be inp): what the fused
 * products on bf16 apply to a tile */
void plait_k_gelu_forward_span(float *out, const float *inp, size_t n);
void plait_k_gelu_backward_span(float *dinp, const float *inp, const float *dout, size_t n);

/* One query head of the fused attention (kernels_attention.c), what an
 * item of the float32 and the bf16 entries runs: q, k and v (and in the
 * backward dq, dk and dv) with row stride W, out and dout with theirs;
 * lse[T]; s or p the item's scratch, plait_k_attention_item_floats(T)
 * floats. The backward adds into dk and dv (the caller zeroes them before
 * a group's first head) and overwrites dq. */
size_t plait_k_attention_item_floats(int64_t T);
/* The fused attention's heads on bf16 pairs (kernels_attention_pairs.c),
 * what a bf16 run computes at an even head size: q, k and v (and dout)
 * bf16 with row strides qld, kvld (ldd); lse[T]; s or p the item's
 * scratch. A result goes to bf16 rows (b, rounded once) or float32 rows
 * (f), ld apart. The backward runs a key/value head's group: begin packs
 * k and v and zeroes the float32 sums of dk and dv (in the calling
 * thread's scratch, so begin, head and end run on one thread), head
 * writes one query head's dq and adds into the sums, end writes them.
 * The _rounded forms are the float32 entries' heads on a bf16 run (as
 * plait_k_attention_head_forward, and _backward over a group of G query
 * heads HS columns apart): their inputs rounded to bf16 first. */
typedef struct plait_k_rows_out {
    plait_bf16 *b;
    float *f;
    int64_t ld;
} plait_k_rows_out;
typedef struct plait_k_attention_pairs {
    uint16_t *kt, *vt, *kp, *dsb, *pp, *dsp, *dop, *qp;
    float *dk, *dv, *dqt;
    int64_t T, HS;
} plait_k_attention_pairs;
void plait_k_attention_pairs_forward(plait_k_rows_out out, float *lse, float *s, const uint16_t *q, int64_t qld,
                                     const uint16_t *k, const uint16_t *v, int64_t kvld, int64_t T, int64_t HS);
plait_k_attention_pairs plait_k_attention_pairs_begin(const uint16_t *k, const uint16_t *v, int64_t kvld, int64_t T,
                                                      int64_t HS);
void plait_k_attention_pairs_head(const plait_k_attention_pairs *u, plait_k_rows_out dq, const uint16_t *q, int64_t qld,
                                  const uint16_t *dout, int64_t ldd, const float *lse, float *p);
void plait_k_attention_pairs_end(const plait_k_attention_pairs *u, plait_k_rows_out dk, plait_k_rows_out dv);
void plait_k_attention_head_forward_rounded(float *out, int64_t ldo, float *lse, float *s, const float *q,
                                            const float *k, const float *v, int64_t W, int64_t T, int64_t HS);
void plait_k_attention_group_backward_rounded(float *dq, float *dk, float *dv, float *p, const float *dout, int64_t ldd,
                                              const float *lse, const float *q, const float *k, const float *v,
                                              int64_t W, int64_t G, int64_t T, int64_t HS);
/* Whether the fused attention runs on bf16 pairs: a bf16 run (native or
 * emulated) whose products take bf16 operands, and an even head size */
int plait_k_attention_on_pairs(int64_t HS);

/* The rows of a tile of the fused attention (an item's scratch holds two
 * tiles' scores, PLAIT_K_ATT_TILE x T floats each) */
#define PLAIT_K_ATT_TILE 64
void plait_k_attention_head_forward(float *out, int64_t ldo, float *lse, float *s, const float *q, const float *k,
                                    const float *v, int64_t W, int64_t T, int64_t HS);
void plait_k_attention_head_backward(float *dq, float *dk, float *dv, float *p, const float *dout, int64_t ldd,
                                     const float *lse, const float *q, const float *k, const float *v, int64_t W,
                                     int64_t T, int64_t HS);

/* The fused attention's softmax over a row tile (kernels_attention.c):
 * rows [i0, i1) of scores s (tile row r = row i0 + r, stride T) become
 * probabilities over keys 0..i, zeros after up to i1, with lse[i] =
 * max + log Σ; the backward's form makes p = exp(s − lse) and turns g =
 * d(probabilities) into d(scores), both zero after key i up to i1. */
void plait_k_softmax_tile_lse(float *s, float *lse, int64_t i0, int64_t i1, int64_t T);
void plait_k_softmax_tile_grad(float *p, float *g, const float *lse, int64_t i0, int64_t i1, int64_t T);

/* Products on bf16 pairs with float32 sums (kernels_dpbf16.c), on the
 * calling thread: C[M×N] = alpha·A·B (+ C when beta is 1) with K2 pairs,
 * pair kk of A's row m at A + m·a_rs + kk·a_ps, pair-row kk of B packed
 * at Bp + kk·ldp (column n's two values at + 2n). AVX512_BF16's vdpbf16ps
 * on a bf16 run where the CPU has it (plait_k_dpbf16_native), else a
 * portable loop of the same sums. The packers write B's layout from a
 * row-major K×N matrix (pack_rows; _rounded from float32), or from its
 * N×K transpose (pack_cols), a last odd row or column of pairs padded with
 * zeros; round_rows rounds a float32 A, its odd last column padded. */
int plait_k_dpbf16_native(void);
void plait_k_dpbf16_gemm(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs, int64_t a_ps,
                         const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc);
/* The same product where a causal tile leaves terms or entries out: the
 * native loop skips them, the portable one computes them. Row r of C is
 * row r of A; `off` places it in the sequence. COLS_TO_ROW: entries (r, n)
 * with n > off + r are not wanted (left unwritten, whole 32-column panels
 * past a register block's last row; the scores before the softmax masks
 * them). K_TO_ROW: A's terms k > off + r are zero (probabilities or
 * d(scores) past the diagonal, whole pairs past a block's last row).
 * K_FROM_ROW: A's terms k < r − off are zero (their transposes: key r
 * gets nothing from queries before it, whole pairs before a block's first
 * row). Terms left out are exact zeros times finite values, and a float32
 * sum started at +0 is the same with or without them: the same bits. */
typedef struct plait_k_dp_causal {
    enum { PLAIT_K_DP_ALL, PLAIT_K_DP_COLS_TO_ROW, PLAIT_K_DP_K_TO_ROW, PLAIT_K_DP_K_FROM_ROW } mode;
    int64_t off;
} plait_k_dp_causal;
void plait_k_dpbf16_gemm_causal(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t *A, int64_t a_rs,
                                int64_t a_ps, const uint16_t *Bp, int64_t ldp, float beta, float *C, int64_t ldc,
                                plait_k_dp_causal causal);
void plait_k_dpbf16_pack_rows(uint16_t *Bp, int64_t ldp, const uint16_t *B, int64_t ldb, int64_t K, int64_t N);
void plait_k_dpbf16_pack_rows_rounded(uint16_t *Bp, int64_t ldp, const float *B, int64_t ldb, int64_t K, int64_t N);
void plait_k_dpbf16_pack_cols(uint16_t *Bp, int64_t ldp, const uint16_t *Bt, int64_t ldbt, int64_t K, int64_t N);
void plait_k_dpbf16_round_rows(uint16_t *A, int64_t lda, const float *X, int64_t ldx, int64_t rows, int64_t cols);

/* Elements per work item of threaded elementwise kernels (fixed, so the
 * split never depends on the thread count). */
#define PLAIT_ELEMWISE_CHUNK 16384

#endif
