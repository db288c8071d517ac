/*
 * Fused causal self-attention (flash-style): the scores never leave the
 * chip. The forward walks the key tiles of a 64-row query tile with an
 * online softmax (running row max and sum), writes the output and, per
 * row, only the log-sum-exp of the scaled scores; the backward recomputes
 * the probabilities from it, p = exp(s - lse).
 *
 * Deterministic, with no atomics: the backward is two kernels after a
 * small pass for D_i = dO_i·O_i. One block owns a 64-key tile and walks
 * the query tiles that see it, accumulating dK and dV in registers; a
 * second kernel owns a 64-row query tile and walks its key tiles for dQ.
 * Every sum has a fixed order, so the same inputs give the same bits. The
 * price is that dQ's kernel recomputes S and dP: 7 tile products a tile
 * pair instead of 5 (docs/gpu.md counts it).
 *
 * Two implementations of the same contract (plait/kernels.h):
 *   - tensor cores (bf16 runs, head size 32, 64 or 128): attention_tc.cu,
 *     bf16 operands, fp32 accumulators and softmax;
 *   - fp32 (fp32 and tf32 runs, and any other head size up to
 *     PLAIT_ATTENTION_FUSED_MAX_HS), here: one thread per query row (or
 *     key), tiles of keys (or queries) in shared memory, fp32 arithmetic.
 * This file also holds the pass for D and the entries, which choose
 * between the two (attention.cuh: what the two files share).
 *
 * Shapes: qkv[B,T,3·NH·HS] = [q | k | v], head h at columns h·HS; out and
 * dout [B,T,NH·HS]; lse and D [B,NH,T]. Grouped-query attention (the
 * Llama family's, attention_gqa_*) is the fp32 kernels with NKV key/value
 * heads: qkv[B,T,(NH+2·NKV)·HS] = [q | k of NKV | v of NKV], query head h
 * reading key/value head h / (NH/NKV) where it lies, never copied out; the
 * dK and dV kernel takes a key/value head's block and walks its query
 * heads in head order, so its sums keep a fixed order. With NKV = NH
 * every index is the multi-head one: the same kernels, the same bits.
 * Its bf16-activation form (ABI 1.22) is the fp32 kernels with E =
 * plait_bf16 where NKV < NH: the tensor-core kernels take multi-head
 * attention only.
 *
 * Every kernel is templated on the activations' element type E: float, or
 * plait_bf16 for the bf16-activation entries (qkv, out, dout, dqkv in
 * bf16; lse and D stay fp32). With bf16 the tensor-core kernels copy the
 * tiles into shared memory as they are, 8 values a 16-byte cp.async, and
 * the fp32 ones widen on load; outputs are rounded once to bf16.
 */
#include <stdint.h>

#include <type_traits>

#include "attention.cuh"

/* ---- fp32: one thread per row ------------------------------------------------ */

/* DC: the head size when known at compile time (registers), 0 for any
 * head size up to PLAIT_ATTENTION_FUSED_MAX_HS (arrays in local memory). */
template <int DC> struct at_f32 {
    static constexpr int MAXD = DC ? DC : PLAIT_ATTENTION_FUSED_MAX_HS;
    /* rows of the shared tiles: 16 KiB of fp32 a tile */
    static constexpr int ROWS = 4096 / MAXD < AT_TILE ? 4096 / MAXD : AT_TILE;
};

/* `rows` rows of D values from g (row stride `stride`) into s as floats, zeros past `valid`. */
template <typename E>
__device__ static void at_load_f32(float *s, const E *g, int64_t stride, int D, int rows, int64_t valid) {
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
        const int r = i / D, c = i % D;
        s[i] = r < valid ? pc_get(g + r * stride + c) : 0.0f;
    }
}

template <int DC, typename E>
PC_KERNEL_T(AT_TILE)
attn_fwd_f32(E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int HS, float scale) {
    constexpr int MAXD = at_f32<DC>::MAXD, KR = at_f32<DC>::ROWS;
    const int D = DC ? DC : HS;
    __shared__ float sK[KR * MAXD], sV[KR * MAXD];
    const int64_t BH = B * NH, nQ = (T + AT_TILE - 1) / AT_TILE;
    const int64_t qt = nQ - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    const int64_t Cl = NH * D, C3 = (NH + 2 * NKV) * D, i = qt * AT_TILE + threadIdx.x, kvh = h / (NH / NKV);
    const E *q = qkv + b * T * C3 + h * D, *k = qkv + b * T * C3 + Cl + kvh * D, *v = k + NKV * D;
    const bool in = i < T;
    float qr[MAXD], acc[MAXD], m = -INFINITY, l = 0.0f;
    for (int d = 0; d < D; d++) {
        qr[d] = in ? pc_get(q + i * C3 + d) : 0.0f;
        acc[d] = 0.0f;
    }
    const int64_t keys = (qt + 1) * AT_TILE < T ? (qt + 1) * AT_TILE : T;
    for (int64_t k0 = 0; k0 < keys; k0 += KR) {
        __syncthreads();
        at_load_f32(sK, k + k0 * C3, C3, D, KR, T - k0);
        at_load_f32(sV, v + k0 * C3, C3, D, KR, T - k0);
        __syncthreads();
        if (!in || k0 > i) continue;
        const int n = i - k0 + 1 < KR ? (int)(i - k0 + 1) : KR; /* keys k0..k0+n-1 <= i */
        float sc[KR], mt = m;
        for (int j = 0; j < n; j++) {
            float dot = 0.0f;
            for (int d = 0; d < D; d++) dot += qr[d] * sK[j * D + d];
            sc[j] = dot * scale;
            mt = fmaxf(mt, sc[j]);
        }
        const float corr = expf(m - mt);
        l *= corr;
        for (int d = 0; d < D; d++) acc[d] *= corr;
        for (int j = 0; j < n; j++) {
            const float p = expf(sc[j] - mt);
            l += p;
            for (int d = 0; d < D; d++) acc[d] += p * sV[j * D + d];
        }
        m = mt;
    }
    if (!in) return;
    E *o = out + b * T * Cl + h * D + i * Cl;
    const float inv = 1.0f / l;
    for (int d = 0; d < D; d++) pc_put(o + d, acc[d] * inv);
    lse[bh * T + i] = m + logf(l);
}

/* dK and dV: one thread per key of a 64-key tile of key/value head kvh,
 * its query heads in head order, query rows in tiles. */
template <int DC, typename E>
PC_KERNEL_T(AT_TILE)
attn_bwd_dkdv_f32(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *Dv, int64_t B, int64_t T,
                  int64_t NH, int64_t NKV, int HS, float scale) {
    constexpr int MAXD = at_f32<DC>::MAXD, QR = at_f32<DC>::ROWS;
    const int D = DC ? DC : HS;
    __shared__ float sQ[QR * MAXD], sO[QR * MAXD], sL[QR], sD[QR];
    const int64_t BK = B * NKV, kt = blockIdx.x / BK, bk = blockIdx.x % BK, b = bk / NKV, kvh = bk % NKV;
    const int64_t Cl = NH * D, C3 = (NH + 2 * NKV) * D, j = kt * AT_TILE + threadIdx.x, G = NH / NKV;
    const E *k = qkv + b * T * C3 + Cl + kvh * D, *v = k + NKV * D;
    const bool in = j < T;
    float kr[MAXD], vr[MAXD], dk[MAXD], dv[MAXD];
    for (int d = 0; d < D; d++) {
        kr[d] = in ? pc_get(k + j * C3 + d) : 0.0f;
        vr[d] = in ? pc_get(v + j * C3 + d) : 0.0f;
        dk[d] = dv[d] = 0.0f;
    }
    for (int64_t h = kvh * G; h < (kvh + 1) * G; h++) {
        const int64_t bh = b * NH + h;
        const E *q = qkv + b * T * C3 + h * D, *dO = dout + b * T * Cl + h * D;
        for (int64_t q0 = kt * AT_TILE; q0 < T; q0 += QR) {
            __syncthreads();
            at_load_f32(sQ, q + q0 * C3, C3, D, QR, T - q0);
            at_load_f32(sO, dO + q0 * Cl, Cl, D, QR, T - q0);
            for (int r = threadIdx.x; r < QR; r += blockDim.x) {
                sL[r] = q0 + r < T ? lse[bh * T + q0 + r] : 0.0f;
                sD[r] = q0 + r < T ? Dv[bh * T + q0 + r] : 0.0f;
            }
            __syncthreads();
            if (!in) continue;
            for (int r = 0; r < QR; r++) {
                const int64_t i = q0 + r;
                if (i >= T) break;
                if (i < j) continue;
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < D; d++) {
                    s += sQ[r * D + d] * kr[d];
                    dp += sO[r * D + d] * vr[d];
                }
                const float p = expf(s * scale - sL[r]), ds = p * (dp - sD[r]);
                for (int d = 0; d < D; d++) {
                    dv[d] += p * sO[r * D + d];
                    dk[d] += ds * sQ[r * D + d];
                }
            }
        }
    }
    if (!in) return;
    E *dkr = dqkv + b * T * C3 + Cl + kvh * D + j * C3, *dvr = dkr + NKV * D;
    for (int d = 0; d < D; d++) {
        pc_put(dkr + d, dk[d] * scale);
        pc_put(dvr + d, dv[d]);
    }
}

/* dQ: one thread per query row, key rows in tiles up to the diagonal. */
template <int DC, typename E>
PC_KERNEL_T(AT_TILE)
attn_bwd_dq_f32(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *Dv, int64_t B, int64_t T,
                int64_t NH, int64_t NKV, int HS, float scale) {
    constexpr int MAXD = at_f32<DC>::MAXD, KR = at_f32<DC>::ROWS;
    const int D = DC ? DC : HS;
    __shared__ float sK[KR * MAXD], sV[KR * MAXD];
    const int64_t BH = B * NH, nQ = (T + AT_TILE - 1) / AT_TILE;
    const int64_t qt = nQ - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    const int64_t Cl = NH * D, C3 = (NH + 2 * NKV) * D, i = qt * AT_TILE + threadIdx.x, kvh = h / (NH / NKV);
    const E *q = qkv + b * T * C3 + h * D, *k = qkv + b * T * C3 + Cl + kvh * D, *v = k + NKV * D;
    const E *dO = dout + b * T * Cl + h * D;
    const bool in = i < T;
    float qr[MAXD], orow[MAXD], dq[MAXD];
    for (int d = 0; d < D; d++) {
        qr[d] = in ? pc_get(q + i * C3 + d) : 0.0f;
        orow[d] = in ? pc_get(dO + i * Cl + d) : 0.0f;
        dq[d] = 0.0f;
    }
    const float li = in ? lse[bh * T + i] : 0.0f, di = in ? Dv[bh * T + i] : 0.0f;
    const int64_t keys = (qt + 1) * AT_TILE < T ? (qt + 1) * AT_TILE : T;
    for (int64_t k0 = 0; k0 < keys; k0 += KR) {
        __syncthreads();
        at_load_f32(sK, k + k0 * C3, C3, D, KR, T - k0);
        at_load_f32(sV, v + k0 * C3, C3, D, KR, T - k0);
        __syncthreads();
        if (!in || k0 > i) continue;
        const int n = i - k0 + 1 < KR ? (int)(i - k0 + 1) : KR;
        for (int j = 0; j < n; j++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < D; d++) {
                s += qr[d] * sK[j * D + d];
                dp += orow[d] * sV[j * D + d];
            }
            const float ds = expf(s * scale - li) * (dp - di);
            for (int d = 0; d < D; d++) dq[d] += ds * sK[j * D + d];
        }
    }
    if (!in) return;
    E *dqr = dqkv + b * T * C3 + h * D + i * C3;
    for (int d = 0; d < D; d++) pc_put(dqr + d, dq[d] * scale);
}

/* D[b,h,t] = Σ_d dout·out over the head's columns: one warp per row. */
template <typename E>
PC_KERNEL_T(PC_THREADS)
attn_bwd_dot(float *Dv, const E *dout, const E *out, int64_t B, int64_t T, int64_t NH, int HS) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / PC_WARP) + threadIdx.x / PC_WARP;
    if (r >= B * T * NH) return;
    const int lane = threadIdx.x % PC_WARP;
    const int64_t h = r % NH, bt = r / NH, b = bt / T, t = bt % T;
    const E *d = dout + bt * NH * HS + h * HS, *o = out + bt * NH * HS + h * HS;
    float s = 0.0f;
    for (int c = lane; c < HS; c += PC_WARP) s += pc_get(d + c) * pc_get(o + c);
    s = pc_warp_sum(s);
    if (lane == 0) Dv[(b * NH + h) * T + t] = s;
}

/* ---- launches --------------------------------------------------------------- */

/* A launch of an fp32 kernel of the templates above (a thread per row of
 * a tile) for head size d and the element type E in scope (parenthesised:
 * the template's comma). */
#define AT_F32(kernel, d) AT_F32_GRID(kernel, d, blocks)
#define AT_F32_GRID(kernel, d, grid) PC_LAUNCH_T((kernel<d, E>), grid, AT_TILE, AT_TILE)
/* X(d) for the fp32 kernels' head sizes known at compile time (others:
 * <0>), for the element type E in scope: bf16 activations reach those
 * kernels only at the sizes the tensor cores do not take */
#define AT_F32_SIZES(X)                                                                                                \
    if constexpr (std::is_same<E, float>::value) {                                                                    \
        X(16) X(32) X(64) X(128)                                                                                       \
    } else {                                                                                                           \
        X(16)                                                                                                          \
    }

/* NKV key/value heads (NH: multi-head); the tensor cores take
 * multi-head attention only */
template <typename E>
static void at_forward(E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                       int tensor_cores) {
    if (B * T * NH <= 0) return;
    if (tensor_cores && at_tc_size(HS) && NKV == NH) {
        at_forward_tc(out, lse, qkv, B, T, NH, HS);
        return;
    }
    const unsigned blocks = at_blocks(B, T, NH);
    const float scale = 1.0f / sqrtf((float)HS);
    const int h = (int)HS;
#define AT_CASE(d)                                                                                                     \
    if (HS == d) {                                                                                                     \
        AT_F32(attn_fwd_f32, d)(out, lse, qkv, B, T, NH, NKV, h, scale);                                               \
        return;                                                                                                        \
    }
    AT_F32_SIZES(AT_CASE)
#undef AT_CASE
    AT_F32(attn_fwd_f32, 0)(out, lse, qkv, B, T, NH, NKV, h, scale);
}

template <typename E>
static void at_backward(E *dqkv, float *Dv, const E *dout, const E *qkv, const E *out, const float *lse, int64_t B,
                        int64_t T, int64_t NH, int64_t NKV, int64_t HS, int tensor_cores) {
    if (B * T * NH <= 0) return;
    const unsigned rows_per_block = PC_THREADS / PC_WARP;
    const int h = (int)HS;
    PC_LAUNCH_T(attn_bwd_dot<E>, (unsigned)((B * T * NH + rows_per_block - 1) / rows_per_block), PC_THREADS,
                PC_THREADS)(Dv, dout, out, B, T, NH, h);
    if (tensor_cores && at_tc_size(HS) && NKV == NH) {
        at_backward_tc(dqkv, Dv, dout, qkv, lse, B, T, NH, HS);
        return;
    }
    /* dK and dV: a block per key tile and key/value head; dQ: per query
     * tile and query head */
    const unsigned kv_blocks = at_blocks(B, T, NKV), blocks = at_blocks(B, T, NH);
    const float scale = 1.0f / sqrtf((float)HS);
#define AT_CASE(d)                                                                                                     \
    if (HS == d) {                                                                                                     \
        AT_F32_GRID(attn_bwd_dkdv_f32, d, kv_blocks)(dqkv, dout, qkv, lse, Dv, B, T, NH, NKV, h, scale);               \
        AT_F32(attn_bwd_dq_f32, d)(dqkv, dout, qkv, lse, Dv, B, T, NH, NKV, h, scale);                                 \
        return;                                                                                                        \
    }
    AT_F32_SIZES(AT_CASE)
#undef AT_CASE
    AT_F32_GRID(attn_bwd_dkdv_f32, 0, kv_blocks)(dqkv, dout, qkv, lse, Dv, B, T, NH, NKV, h, scale);
    AT_F32(attn_bwd_dq_f32, 0)(dqkv, dout, qkv, lse, Dv, B, T, NH, NKV, h, scale);
}

/* 0 (a failure recorded) unless the bf16 tensors start 16-byte aligned,
 * as plait/kernels.h promises: the tiles' 16-byte loads and the outputs'
 * 4-byte pairs rely on it. */
static int at_aligned_bf16(const char *what, const void *a, const void *b, const void *c, const void *d) {
    const void *p[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        if (p[i] && !pc_aligned16(p[i])) {
            pc_fail("cuda: %s: a bf16 tensor at %p is not 16-byte aligned (plait/kernels.h)", what, p[i]);
            return 0;
        }
    return 1;
}

extern "C" {

void pc_launch_attention_fused_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                       int64_t HS, int tensor_cores) {
    at_forward(out, lse, qkv, B, T, NH, NH, HS, tensor_cores);
    pc_check_launch("fused attention forward");
}

void pc_launch_attention_fused_backward(float *dqkv, float *Dv, const float *dout, const float *qkv, const float *out,
                                        const float *lse, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                        int tensor_cores) {
    at_backward(dqkv, Dv, dout, qkv, out, lse, B, T, NH, NH, HS, tensor_cores);
    pc_check_launch("fused attention backward");
}

void pc_launch_attention_fused_forward_bf16(plait_bf16 *out, float *lse, const plait_bf16 *qkv, int64_t B, int64_t T,
                                            int64_t NH, int64_t HS) {
    if (!at_aligned_bf16("attention_fused_forward_bf16", out, qkv, NULL, NULL)) return;
    at_forward(out, lse, qkv, B, T, NH, NH, HS, 1);
    pc_check_launch("fused attention forward (bf16)");
}

void pc_launch_attention_fused_backward_bf16(plait_bf16 *dqkv, float *Dv, const plait_bf16 *dout,
                                             const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                             int64_t T, int64_t NH, int64_t HS) {
    if (!at_aligned_bf16("attention_fused_backward_bf16", dqkv, dout, qkv, out)) return;
    at_backward(dqkv, Dv, dout, qkv, out, lse, B, T, NH, NH, HS, 1);
    pc_check_launch("fused attention backward (bf16)");
}

void pc_launch_attention_gqa_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                     int64_t NKV, int64_t HS, int tensor_cores) {
    at_forward(out, lse, qkv, B, T, NH, NKV, HS, tensor_cores);
    pc_check_launch("grouped-query attention forward");
}

void pc_launch_attention_gqa_backward(float *dqkv, float *Dv, const float *dout, const float *qkv, const float *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      int tensor_cores) {
    at_backward(dqkv, Dv, dout, qkv, out, lse, B, T, NH, NKV, HS, tensor_cores);
    pc_check_launch("grouped-query attention backward");
}

void pc_launch_attention_gqa_forward_bf16(plait_bf16 *out, float *lse, const plait_bf16 *qkv, int64_t B, int64_t T,
                                          int64_t NH, int64_t NKV, int64_t HS) {
    if (!at_aligned_bf16("attention_gqa_forward_bf16", out, qkv, NULL, NULL)) return;
    at_forward(out, lse, qkv, B, T, NH, NKV, HS, 1);
    pc_check_launch("grouped-query attention forward (bf16)");
}

void pc_launch_attention_gqa_backward_bf16(plait_bf16 *dqkv, float *Dv, const plait_bf16 *dout, const plait_bf16 *qkv,
                                           const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t HS) {
    if (!at_aligned_bf16("attention_gqa_backward_bf16", dqkv, dout, qkv, out)) return;
    at_backward(dqkv, Dv, dout, qkv, out, lse, B, T, NH, NKV, HS, 1);
    pc_check_launch("grouped-query attention backward (bf16)");
}

} /* extern "C" */
