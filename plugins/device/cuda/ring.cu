/*
 * Ring attention's block kernels (plait/kernels.h, ABI 1.18), float32,
 * and their bf16-activation forms (ABI 1.25: the same kernels templated
 * on the element type E of q|k|v, the block's K|V, out and dout, each
 * value widened exactly as it is read, every sum and accumulator
 * float32, so the bits of the float32 kernels on the widened tensors),
 * one thread a query row in the forward and for dq, one thread a key row
 * for dK|dV, each summing in one fixed order (a dot product in eight lanes
 * summed pairwise; keys in sequence order, 128 scored at a time in the
 * forward; a key's gradient over its query heads in head order, then the
 * query rows in order). The CPU's kernels (core/kernels/kernels_ring.c)
 * take the same blocks and key tiles by tiled products, whose sums the
 * BLAS orders, so the two agree to rounding (tests/device's ring case:
 * within 1e-5), not bit for bit. No atomics: the same inputs give
 * the same bits. Written for correctness on every head size, not speed:
 * a row's accumulators live in device memory (out, dq, dkv), not in
 * registers; the fused attention (attention.cu) stays the cp = 1 path.
 */
#include "kcommon.cuh"

#define RING_TILE 128 /* keys scored at once, the CPU's key tile */

/* The keys of the block's chunk j that query row t sees (kernels_ring.c). */
__device__ static inline int64_t ring_visible(const plait_ring_block &blk, int64_t T, int64_t t, int j) {
    const int64_t c = T / 2, q = blk.q_chunk[t < c ? 0 : 1], k = blk.k_chunk[j];
    return k < q ? c : k == q ? t % c + 1 : 0;
}

/* a·b in a fixed order: eight running sums, lane j taking the elements
 * j mod 8, summed pairwise in a fixed order, the tail last */
template <typename A, typename B> __device__ static inline float ring_dot(const A *a, const B *b, int64_t n) {
    float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] = __fadd_rn(s[j], __fmul_rn(pc_get(a + i + j), pc_get(b + i + j)));
    float tail = 0.0f;
    for (; i < n; i++) tail = __fadd_rn(tail, __fmul_rn(pc_get(a + i), pc_get(b + i)));
    const float lo = __fadd_rn(__fadd_rn(s[0], s[4]), __fadd_rn(s[1], s[5]));
    const float hi = __fadd_rn(__fadd_rn(s[2], s[6]), __fadd_rn(s[3], s[7]));
    return __fadd_rn(__fadd_rn(lo, hi), tail);
}

/* one query row (b, h, t) a thread */
template <typename E>
PC_KERNEL_T(PC_THREADS)
ring_forward_kernel(float *out, float *mxs, float *ls, const E *qkv, const E *kv, int64_t kv_stride, int64_t B,
                    int64_t T, int64_t NH, int64_t NKV, int64_t HS, plait_ring_block blk) {
    const int64_t W = (NH + 2 * NKV) * HS, c = T / 2, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    PC_GRID_STRIDE(row, (size_t)(B * NH * T)) {
        const int64_t t = (int64_t)row % T, h = (int64_t)row / T % NH, b = (int64_t)row / (T * NH), kh = h / group;
        const E *q = qkv + (b * T + t) * W + h * HS;
        float *o = out + (b * T + t) * NH * HS + h * HS;
        float mx = blk.first ? -INFINITY : mxs[row], l = blk.first ? 0.0f : ls[row];
        if (blk.first)
            for (int64_t i = 0; i < HS; i++) o[i] = 0.0f;
        float sc[RING_TILE];
        for (int j = 0; j < 2; j++) {
            const int64_t n = ring_visible(blk, T, t, j);
            const E *kb = kv + (b * T + j * c) * kv_stride + kh * HS, *vb = kb + NKV * HS;
            for (int64_t u0 = 0; u0 < n; u0 += RING_TILE) {
                const int64_t w = n - u0 < RING_TILE ? n - u0 : RING_TILE;
                float tmax = -INFINITY;
                for (int64_t u = 0; u < w; u++) {
                    sc[u] = __fmul_rn(ring_dot(q, kb + (u0 + u) * kv_stride, HS), scale);
                    if (sc[u] > tmax) tmax = sc[u];
                }
                const float nmax = tmax > mx ? tmax : mx;
                const float keep = expf(mx - nmax); /* 0 while the row is empty (-inf) */
                for (int64_t i = 0; i < HS; i++) o[i] = __fmul_rn(o[i], keep);
                float sum = 0.0f;
                for (int64_t u = 0; u < w; u++) {
                    const float p = expf(sc[u] - nmax);
                    const E *v = vb + (u0 + u) * kv_stride;
                    sum += p;
                    for (int64_t i = 0; i < HS; i++) o[i] = __fadd_rn(o[i], __fmul_rn(p, pc_get(v + i)));
                }
                l = __fadd_rn(__fmul_rn(l, keep), sum);
                mx = nmax;
            }
        }
        mxs[row] = mx;
        ls[row] = l;
    }
}

PC_KERNEL(ring_finish_kernel, PC_THREADS)
(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    PC_GRID_STRIDE(row, (size_t)(B * NH * T)) {
        const int64_t t = (int64_t)row % T, h = (int64_t)row / T % NH, b = (int64_t)row / (T * NH);
        float *o = out + (b * T + t) * NH * HS + h * HS;
        const float inv = 1.0f / l[row];
        for (int64_t i = 0; i < HS; i++) o[i] = __fmul_rn(o[i], inv);
        mx[row] += logf(l[row]);
    }
}

/* dq of one query row (b, h, t) a thread: dq += Σ ds·k over the block's
 * visible keys, in sequence order */
template <typename E>
PC_KERNEL_T(PC_THREADS)
ring_dq_kernel(float *dqkv, const E *qkv, const E *kv, int64_t kv_stride, const E *dout, const E *out, const float *lse,
               int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, plait_ring_block blk) {
    const int64_t W = (NH + 2 * NKV) * HS, c = T / 2, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    PC_GRID_STRIDE(row, (size_t)(B * NH * T)) {
        const int64_t t = (int64_t)row % T, h = (int64_t)row / T % NH, b = (int64_t)row / (T * NH), kh = h / group;
        const E *q = qkv + (b * T + t) * W + h * HS;
        float *dq = dqkv + (b * T + t) * W + h * HS;
        const int64_t at = (b * T + t) * NH * HS + h * HS;
        const E *go = dout + at;
        const float dd = ring_dot(go, out + at, HS);
        for (int j = 0; j < 2; j++) {
            const int64_t n = ring_visible(blk, T, t, j);
            const E *kb = kv + (b * T + j * c) * kv_stride + kh * HS, *vb = kb + NKV * HS;
            for (int64_t u = 0; u < n; u++) {
                const float p = expf(__fmul_rn(ring_dot(q, kb + u * kv_stride, HS), scale) - lse[row]);
                const float ds = __fmul_rn(__fmul_rn(p, ring_dot(go, vb + u * kv_stride, HS) - dd), scale);
                for (int64_t i = 0; i < HS; i++)
                    dq[i] = __fadd_rn(dq[i], __fmul_rn(ds, pc_get(kb + u * kv_stride + i)));
            }
        }
    }
}

/* dK|dV of one key row (b, kh, key) of the block a thread: += over the
 * query heads of kh in order, then the query rows that see the key */
template <typename E>
PC_KERNEL_T(PC_THREADS)
ring_dkv_kernel(float *dkv, const E *qkv, const E *kv, int64_t kv_stride, const E *dout, const E *out, const float *lse,
                int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, plait_ring_block blk) {
    const int64_t W = (NH + 2 * NKV) * HS, c = T / 2, group = NH / NKV, KVW = 2 * NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    PC_GRID_STRIDE(key, (size_t)(B * NKV * T)) {
        const int64_t kt = (int64_t)key % T, kh = (int64_t)key / T % NKV, b = (int64_t)key / (T * NKV);
        const int j = kt < c ? 0 : 1;
        const int64_t u = kt % c;
        const E *k = kv + (b * T + kt) * kv_stride + kh * HS, *v = k + NKV * HS;
        float *dk = dkv + (b * T + kt) * KVW + kh * HS, *dv = dk + NKV * HS;
        for (int64_t h = kh * group; h < (kh + 1) * group; h++)
            for (int64_t t = 0; t < T; t++) {
                if (u >= ring_visible(blk, T, t, j)) continue;
                const int64_t row = (b * NH + h) * T + t, at = (b * T + t) * NH * HS + h * HS;
                const E *q = qkv + (b * T + t) * W + h * HS, *go = dout + at;
                const float dd = ring_dot(go, out + at, HS);
                const float p = expf(__fmul_rn(ring_dot(q, k, HS), scale) - lse[row]);
                const float ds = __fmul_rn(__fmul_rn(p, ring_dot(go, v, HS) - dd), scale);
                for (int64_t i = 0; i < HS; i++) {
                    dv[i] = __fadd_rn(dv[i], __fmul_rn(p, pc_get(go + i)));
                    dk[i] = __fadd_rn(dk[i], __fmul_rn(ds, pc_get(q + i)));
                }
            }
    }
}

PC_KERNEL(copy_rows_kernel, PC_THREADS)
(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows, int64_t width) {
    PC_GRID_STRIDE(e, (size_t)(rows * width)) {
        const int64_t r = (int64_t)e / width, i = (int64_t)e % width;
        dst[r * dst_stride + i] = src[r * src_stride + i];
    }
}

template <typename E>
static void ring_forward(float *out, float *mx, float *l, const E *qkv, const E *kv, int64_t kv_stride, int64_t B,
                         int64_t T, int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk,
                         const char *what) {
    const size_t n = (size_t)(B * NH * T);
    if (!n) return;
    PC_LAUNCH_T(ring_forward_kernel<E>, pc_blocks(n), PC_THREADS, PC_THREADS)
    (out, mx, l, qkv, kv, kv_stride, B, T, NH, NKV, HS, *blk);
    pc_check_launch(what);
}

template <typename E>
static void ring_backward(float *dqkv, float *dkv, const E *qkv, const E *kv, int64_t kv_stride, const E *dout,
                          const E *out, const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                          const plait_ring_block *blk, const char *what_dq, const char *what_dkv) {
    const size_t nq = (size_t)(B * NH * T), nk = (size_t)(B * NKV * T);
    if (!nq) return;
    PC_LAUNCH_T(ring_dq_kernel<E>, pc_blocks(nq), PC_THREADS, PC_THREADS)
    (dqkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, *blk);
    pc_check_launch(what_dq);
    PC_LAUNCH_T(ring_dkv_kernel<E>, pc_blocks(nk), PC_THREADS, PC_THREADS)
    (dkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, *blk);
    pc_check_launch(what_dkv);
}

extern "C" {

void pc_launch_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                      int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      const plait_ring_block *blk) {
    ring_forward(out, mx, l, qkv, kv, kv_stride, B, T, NH, NKV, HS, blk, "ring_attention_forward");
}

void pc_launch_ring_attention_forward_bf16(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                           int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                           const plait_ring_block *blk) {
    ring_forward(out, mx, l, qkv, kv, kv_stride, B, T, NH, NKV, HS, blk, "ring_attention_forward_bf16");
}

void pc_launch_ring_attention_finish(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS) {
    const size_t n = (size_t)(B * NH * T);
    if (!n) return;
    PC_LAUNCH(ring_finish_kernel, pc_blocks(n), PC_THREADS)(out, mx, l, B, T, NH, HS);
    pc_check_launch("ring_attention_finish");
}

void pc_launch_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                       const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                       int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk) {
    ring_backward(dqkv, dkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, blk, "ring_attention_backward (dq)",
                  "ring_attention_backward (dK, dV)");
}

void pc_launch_ring_attention_backward_bf16(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                            int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                            const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                            const plait_ring_block *blk) {
    ring_backward(dqkv, dkv, qkv, kv, kv_stride, dout, out, lse, B, T, NH, NKV, HS, blk,
                  "ring_attention_backward_bf16 (dq)", "ring_attention_backward_bf16 (dK, dV)");
}

void pc_launch_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                         int64_t width) {
    const size_t n = (size_t)(rows * width);
    if (!n) return;
    PC_LAUNCH(copy_rows_kernel, pc_blocks(n), PC_THREADS)(dst, dst_stride, src, src_stride, rows, width);
    pc_check_launch("copy_rows");
}

} /* extern "C" */
