/*
 * LayerNorm over C (eps 1e-5), forward and backward, with the CPU kernel's
 * formulas (core/kernels/kernels_norm.c). One warp per row for the row-wise
 * work (sums lane-strided, 4 columns a 16-byte load where C and the
 * pointers allow, then a butterfly: a fixed order); the weight
 * and bias gradients as column sums over row chunks (pcuda.h), added into
 * the accumulated values. dinp accumulates (the residual
 * stream); layernorm_backward_fused adds the residual's gradient itself
 * and computes the parameters' partial sums in the same block, following
 * its rows a round of warps at a time so the column sums read them from
 * cache. A backward row up to LN_HELD_C columns is held in registers,
 * all its loads in flight at once: the backward is memory-bound, and
 * one load group at a time per warp left it latency-bound instead.
 *
 * The bf16-activation forms (layernorm_forward_bf16's output,
 * layernorm_backward_fused_bf16's dout) are the same kernels templated on
 * that tensor's element type: fp32 arithmetic, bf16 widened on load and
 * rounded once on store, 8 columns a load where C % 8 == 0 (16 bytes of
 * bf16, two of the float rows' float4). layernorm_backward_fused_bf16_copy
 * is that backward storing each dinp value a second time, rounded to bf16
 * (to_bf16's rounding), as it is written.
 */
#include "kcommon.cuh"

#define LN_EPS 1e-5f
#define LN_WARPS 8 /* rows per block */
/* ln_backward_fused_kernel's bound: LN_WARPS warps a block and two blocks
 * a multiprocessor (at most 128 registers a thread), so that one block's
 * column sums (from L2) overlap another's rows (from DRAM). */
#define LN_FUSED_BOUNDS LN_WARPS * PC_WARP, 2

/* One row on one warp, V (1, 4 or 8) columns a load: lane l takes columns
 * [V·l, V·l + V), then 32·V further on, and so on (V = 1: lane-strided). */
template <int V, typename TO>
__device__ static void ln_forward_row(TO *o, float *mean_r, float *rstd_r, const float *x, const float *w,
                                      const float *b, int64_t C) {
    const int lane = threadIdx.x % PC_WARP;
    const float inv_c = 1.0f / (float)C;
    float s = 0;
    for (int64_t c = lane * V; c < C; c += PC_WARP * V) {
        float xv[V];
        pc_ld(xv, x + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) s += xv[k];
    }
    float m = pc_warp_sum(s) * inv_c;
    float v = 0;
    for (int64_t c = lane * V; c < C; c += PC_WARP * V) {
        float xv[V];
        pc_ld(xv, x + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) {
            float d = xv[k] - m;
            v += d * d;
        }
    }
    float rs = 1.0f / sqrtf(pc_warp_sum(v) * inv_c + LN_EPS);
    for (int64_t c = lane * V; c < C; c += PC_WARP * V) {
        float xv[V], wv[V], bv[V], ov[V];
        pc_ld(xv, x + c);
        pc_ld(wv, w + c);
        pc_ld(bv, b + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) ov[k] = (xv[k] - m) * rs * wv[k] + bv[k];
        pc_st(o + c, ov);
    }
    if (lane == 0) {
        if (mean_r) *mean_r = m;
        if (rstd_r) *rstd_r = rs;
    }
}

/* Columns up to which a row's forward and backward hold the row in
 * registers (ln_forward_row_held, ln_backward_row_held): GPT-2's widths,
 * 32 floats of each held tensor a lane. */
#define LN_HELD_C 1024

/* ln_forward_row with the row loaded once, all at once, into registers
 * (C <= PC_WARP * V * K): every load of the row in flight together
 * instead of one V-column group a step (the mean's pass waited on DRAM a
 * group at a time), and the variance and the output read no memory but w
 * and b. The same columns a lane in the same order, the same expressions:
 * ln_forward_row's bits. */
template <int V, int K, typename TO>
__device__ static void ln_forward_row_held(TO *o, float *mean_r, float *rstd_r, const float *x, const float *w,
                                           const float *b, int64_t C) {
    const int lane = threadIdx.x % PC_WARP;
    const float inv_c = 1.0f / (float)C;
    float xv[K][V];
    PC_UNROLL
    for (int j = 0; j < K; j++) {
        const int64_t c = (int64_t)j * PC_WARP * V + lane * V;
        if (c < C) pc_ld(xv[j], x + c);
    }
    float s = 0;
    PC_UNROLL
    for (int j = 0; j < K; j++)
        if ((int64_t)j * PC_WARP * V + lane * V < C) {
            PC_UNROLL
            for (int k = 0; k < V; k++) s += xv[j][k];
        }
    float m = pc_warp_sum(s) * inv_c;
    float v = 0;
    PC_UNROLL
    for (int j = 0; j < K; j++)
        if ((int64_t)j * PC_WARP * V + lane * V < C) {
            PC_UNROLL
            for (int k = 0; k < V; k++) {
                float d = xv[j][k] - m;
                v += d * d;
            }
        }
    float rs = 1.0f / sqrtf(pc_warp_sum(v) * inv_c + LN_EPS);
    PC_UNROLL
    for (int j = 0; j < K; j++) {
        const int64_t c = (int64_t)j * PC_WARP * V + lane * V;
        if (c >= C) continue;
        float wv[V], bv[V], ov[V];
        pc_ld(wv, w + c);
        pc_ld(bv, b + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) ov[k] = (xv[j][k] - m) * rs * wv[k] + bv[k];
        pc_st(o + c, ov);
    }
    if (lane == 0) {
        if (mean_r) *mean_r = m;
        if (rstd_r) *rstd_r = rs;
    }
}

/* vec: every row and w, b 16-byte aligned (C a multiple of a 16-byte
 * access of TO): that many columns a load */
template <typename TO>
PC_KERNEL_T(LN_WARPS * PC_WARP)
ln_forward_kernel(TO *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int64_t BT,
                  int64_t C, int vec) {
    int64_t r = (int64_t)blockIdx.x * LN_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    float *mr = mean ? mean + r : NULL, *rr = rstd ? rstd + r : NULL;
    constexpr int V = pc_vec<TO>::V;
    if (vec && C <= LN_HELD_C)
        ln_forward_row_held<V, LN_HELD_C / (PC_WARP * V)>(out + r * C, mr, rr, inp + r * C, w, b, C);
    else if (vec)
        ln_forward_row<V>(out + r * C, mr, rr, inp + r * C, w, b, C);
    else
        ln_forward_row<1>(out + r * C, mr, rr, inp + r * C, w, b, C);
}

/* One row on one warp, V columns a load (as ln_forward_row): dx = base +
 * (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd, base NULL adding
 * to zeros (dx itself: +=); dxb, where not NULL, dx rounded to bf16. */
template <int V, typename TD>
__device__ static void ln_backward_row(float *dx, plait_bf16 *dxb, const float *base, const float *x, const TD *d,
                                       const float *w, float m, float s, int64_t C) {
    const int lane = threadIdx.x % PC_WARP;
    const float inv_c = 1.0f / (float)C;
    float a1 = 0, a2 = 0;
    for (int64_t c = lane * V; c < C; c += PC_WARP * V) {
        float xv[V], dv[V], wv[V];
        pc_ld(xv, x + c);
        pc_ld(dv, d + c);
        pc_ld(wv, w + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) {
            float n = (xv[k] - m) * s;
            float dn = wv[k] * dv[k];
            a1 += dn;
            a2 += dn * n;
        }
    }
    float dn_mean = pc_warp_sum(a1) * inv_c, dnn_mean = pc_warp_sum(a2) * inv_c;
    for (int64_t c = lane * V; c < C; c += PC_WARP * V) {
        float xv[V], dv[V], wv[V], bv[V] = {}, ov[V];
        pc_ld(xv, x + c);
        pc_ld(dv, d + c);
        pc_ld(wv, w + c);
        if (base) pc_ld(bv, base + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) {
            float n = (xv[k] - m) * s;
            ov[k] = bv[k] + (wv[k] * dv[k] - dn_mean - n * dnn_mean) * s;
        }
        pc_st(dx + c, ov);
        if (dxb) pc_st(dxb + c, ov);
    }
}

/* ln_backward_row with the row's x, dout and base loaded once, all at once,
 * into registers (C <= PC_WARP * V * K): every load of the row in flight
 * together instead of one V-column group a step, and no second read of x
 * and dout. The same columns a lane in the same order, the same
 * expressions: ln_backward_row's bits. */
template <int V, int K, typename TD>
__device__ static void ln_backward_row_held(float *dx, plait_bf16 *dxb, const float *base, const float *x,
                                            const TD *d, const float *w, float m, float s, int64_t C) {
    const int lane = threadIdx.x % PC_WARP;
    const float inv_c = 1.0f / (float)C;
    float xv[K][V], dv[K][V];
    PC_UNROLL
    for (int j = 0; j < K; j++) {
        const int64_t c = (int64_t)j * PC_WARP * V + lane * V;
        if (c >= C) continue;
        pc_ld(xv[j], x + c);
        pc_ld(dv[j], d + c);
    }
    float a1 = 0, a2 = 0;
    PC_UNROLL
    for (int j = 0; j < K; j++) {
        const int64_t c = (int64_t)j * PC_WARP * V + lane * V;
        if (c >= C) continue;
        float wv[V];
        pc_ld(wv, w + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) {
            float n = (xv[j][k] - m) * s;
            float dn = wv[k] * dv[j][k];
            a1 += dn;
            a2 += dn * n;
        }
    }
    float dn_mean = pc_warp_sum(a1) * inv_c, dnn_mean = pc_warp_sum(a2) * inv_c;
    PC_UNROLL
    for (int j = 0; j < K; j++) {
        const int64_t c = (int64_t)j * PC_WARP * V + lane * V;
        if (c >= C) continue;
        float wv[V], bv[V] = {}, ov[V];
        pc_ld(wv, w + c);
        if (base) pc_ld(bv, base + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) {
            float n = (xv[j][k] - m) * s;
            ov[k] = bv[k] + (wv[k] * dv[j][k] - dn_mean - n * dnn_mean) * s;
        }
        pc_st(dx + c, ov);
        if (dxb) pc_st(dxb + c, ov);
    }
}

/* One row's backward at the width vec says (ln_forward_kernel's terms,
 * for dout's element type TD): held in registers up to LN_HELD_C
 * columns. */
template <typename TD>
__device__ static void ln_backward_row_at(int vec, float *dx, plait_bf16 *dxb, const float *base, const float *x,
                                          const TD *d, const float *w, float m, float s, int64_t C) {
    constexpr int V = pc_vec<TD>::V;
    if (vec && C <= LN_HELD_C)
        ln_backward_row_held<V, LN_HELD_C / (PC_WARP * V)>(dx, dxb, base, x, d, w, m, s, C);
    else if (vec)
        ln_backward_row<V>(dx, dxb, base, x, d, w, m, s, C);
    else
        ln_backward_row<1>(dx, dxb, base, x, d, w, m, s, C);
}

/* dinp += the input gradient, a warp a row */
PC_KERNEL(ln_backward_rows_kernel, LN_WARPS * PC_WARP)(float *dinp, const float *dout, const float *inp, const float *w,
                                               const float *mean, const float *rstd, int64_t BT, int64_t C, int vec) {
    int64_t r = (int64_t)blockIdx.x * LN_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    ln_backward_row_at(vec, dinp + r * C, (plait_bf16 *)NULL, dinp + r * C, inp + r * C, dout + r * C, w, mean[r],
                       rstd[r], C);
}

/* Rows a column sum loads before it adds any: that many loads of each
 * column in flight per thread (the rows come from L2 or DRAM). */
#define LN_COL_BATCH 8

/* Adds rows [r0, r1)'s terms of the weight and bias gradients for columns
 * [c, c + W) to sw[0..W) and sb[0..W), each column's in row order (W = 4:
 * inp and dout rows 16- and 8-byte aligned). Rows are loaded
 * LN_COL_BATCH at a time, then added in order: the order, and so the
 * bits, of adding one row at a time. */
template <int W, typename TD>
__device__ static void ln_col_add(float (&sw)[W], float (&sb)[W], const TD *dout, const float *inp,
                                  const float *mean, const float *rstd, int64_t r0, int64_t r1, int64_t C,
                                  int64_t c) {
    int64_t r = r0;
    for (; r + LN_COL_BATCH <= r1; r += LN_COL_BATCH) {
        float xv[LN_COL_BATCH][W], dv[LN_COL_BATCH][W], mv[LN_COL_BATCH], sv[LN_COL_BATCH];
        PC_UNROLL
        for (int u = 0; u < LN_COL_BATCH; u++) {
            pc_ld(xv[u], inp + (r + u) * C + c);
            pc_ld(dv[u], dout + (r + u) * C + c);
            mv[u] = mean[r + u];
            sv[u] = rstd[r + u];
        }
        PC_UNROLL
        for (int u = 0; u < LN_COL_BATCH; u++) {
            PC_UNROLL
            for (int k = 0; k < W; k++) {
                sw[k] += (xv[u][k] - mv[u]) * sv[u] * dv[u][k];
                sb[k] += dv[u][k];
            }
        }
    }
    for (; r < r1; r++) {
        float xv[W], dv[W];
        pc_ld(xv, inp + r * C + c);
        pc_ld(dv, dout + r * C + c);
        PC_UNROLL
        for (int k = 0; k < W; k++) {
            sw[k] += (xv[k] - mean[r]) * rstd[r] * dv[k];
            sb[k] += dv[k];
        }
    }
}

/* Columns [c, c + W)'s terms over rows [r0, r1) (ln_col_add) into aw[0..W)
 * and ab[0..W), where those are not NULL. */
template <int W, typename TD>
__device__ static void ln_col_sums(float *aw, float *ab, const TD *dout, const float *inp, const float *mean,
                                   const float *rstd, int64_t r0, int64_t r1, int64_t C, int64_t c) {
    float sw[W], sb[W];
    PC_UNROLL
    for (int k = 0; k < W; k++) sw[k] = 0.0f, sb[k] = 0.0f;
    ln_col_add(sw, sb, dout, inp, mean, rstd, r0, r1, C, c);
    PC_UNROLL
    for (int k = 0; k < W; k++) {
        if (aw) aw[k] = sw[k];
        if (ab) ab[k] = sb[k];
    }
}

/* Pass 1 of the weight and bias gradients (pcuda.h, column sums): block b
 * handles chunk b / colblocks and 256 columns; each thread sums its
 * column's terms over the chunk's rows in order. */
PC_KERNEL(ln_params_partial_kernel, PC_THREADS)(float *part_w, float *part_b, const float *dout, const float *inp,
                                                const float *mean, const float *rstd, int64_t BT, int64_t C,
                                                unsigned colblocks) {
    const int64_t chunk = blockIdx.x / colblocks;
    const int64_t c = (int64_t)(blockIdx.x % colblocks) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t r1 = (chunk + 1) * PC_COL_ROWS < BT ? (chunk + 1) * PC_COL_ROWS : BT;
    ln_col_sums<1>(part_w ? part_w + chunk * C + c : NULL, part_b ? part_b + chunk * C + c : NULL, dout, inp, mean,
                   rstd, chunk * PC_COL_ROWS, r1, C, c);
}

/* The whole backward of PC_COL_ROWS rows a block (layernorm_backward_fused):
 * each warp a row at a time, dinp = dres + ln_backward_rows_kernel's
 * term (dres NULL: zeros), and its bf16 copy into dinp_bf where that is
 * not NULL; and from the same rows the chunk's column sums of
 * ln_params_partial_kernel in its order, so the partials are its bits.
 * Where a thread's 4 columns cover C (vec, C <= 4 x the block), the column
 * sums follow the rows LN_WARPS at a time, the rows the block's warps have
 * just read and so still in cache (the rows' order is the round's: warp w
 * takes row w of each); else they run after all the chunk's rows, a
 * second read of inp and dout, from L2 or DRAM. TD: dout's element type. */
template <typename TD>
PC_KERNEL_T(LN_FUSED_BOUNDS)
ln_backward_fused_kernel(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *part_w, float *part_b,
                         const TD *dout, const float *inp, const float *w, const float *mean, const float *rstd,
                         int64_t BT, int64_t C, int vec) {
    const int64_t chunk = blockIdx.x, r0 = chunk * PC_COL_ROWS;
    const int64_t r1 = r0 + PC_COL_ROWS < BT ? r0 + PC_COL_ROWS : BT;
    const int warp = threadIdx.x / PC_WARP;
    if (part_w && vec && C <= 4 * (int64_t)blockDim.x) {
        const int64_t c = threadIdx.x * 4;
        float sw[4] = {}, sb[4] = {};
        for (int64_t q = r0; q < r1; q += LN_WARPS) {
            const int64_t r = q + warp, q1 = q + LN_WARPS < r1 ? q + LN_WARPS : r1;
            if (r < r1)
                ln_backward_row_at(vec, dinp + r * C, dinp_bf ? dinp_bf + r * C : NULL, dres ? dres + r * C : NULL,
                                   inp + r * C, dout + r * C, w, mean[r], rstd[r], C);
            if (c < C) ln_col_add(sw, sb, dout, inp, mean, rstd, q, q1, C, c);
        }
        if (c < C) {
            PC_UNROLL
            for (int k = 0; k < 4; k++) part_w[chunk * C + c + k] = sw[k], part_b[chunk * C + c + k] = sb[k];
        }
        return;
    }
    for (int64_t r = r0 + warp; r < r1; r += LN_WARPS)
        ln_backward_row_at(vec, dinp + r * C, dinp_bf ? dinp_bf + r * C : NULL, dres ? dres + r * C : NULL,
                           inp + r * C, dout + r * C, w, mean[r], rstd[r], C);
    if (!part_w) return;
    if (vec)
        for (int64_t c = threadIdx.x * 4; c < C; c += blockDim.x * 4)
            ln_col_sums<4>(part_w + chunk * C + c, part_b + chunk * C + c, dout, inp, mean, rstd, r0, r1, C, c);
    else
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            ln_col_sums<1>(part_w + chunk * C + c, part_b + chunk * C + c, dout, inp, mean, rstd, r0, r1, C, c);
}

static unsigned row_blocks(int64_t BT) { return (unsigned)((BT + LN_WARPS - 1) / LN_WARPS); }

/* 1 if C is a multiple of `width` (a 16-byte access: 4 floats, 8 bf16) and
 * the rows at every non-NULL pointer given start 16-byte aligned: the row
 * kernels' `width`-column loads. */
static int rows_vec(int64_t C, int width, const void *p0, const void *p1, const void *p2, const void *p3,
                    const void *p4, const void *p5 = NULL) {
    const void *p[6] = {p0, p1, p2, p3, p4, p5};
    if (C % width) return 0;
    for (int i = 0; i < 6; i++)
        if (p[i] && !pc_aligned16(p[i])) return 0;
    return 1;
}

/* layernorm_forward with an output of element type TO */
template <typename TO>
static void ln_forward(TO *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias,
                       int64_t BT, int64_t C, const char *what) {
    if (BT <= 0) return;
    const int vec = rows_vec(C, pc_vec<TO>::V, out, inp, weight, bias, NULL);
    PC_LAUNCH_T(ln_forward_kernel<TO>, row_blocks(BT), LN_WARPS * PC_WARP, LN_WARPS * PC_WARP)(out, mean, rstd, inp,
                                                                                             weight, bias, BT, C, vec);
    pc_check_launch(what);
}

/* layernorm_backward_fused for dout of element type TD, dinp's bf16 copy
 * into dinp_bf where that is not NULL */
template <typename TD>
static void ln_backward_fused(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight, float *dbias,
                              const TD *dout, const float *inp, const float *weight, const float *mean,
                              const float *rstd, int64_t BT, int64_t C, const char *what) {
    if (BT <= 0 || C <= 0) return;
    const int64_t chunks = pc_col_chunks(BT);
    float *part_w = NULL, *part_b = NULL;
    if (dweight) {
        part_w = (float *)pc_scratch((size_t)(2 * chunks * C) * sizeof(float));
        if (!part_w) return;
        part_b = part_w + chunks * C;
    }
    const int vec = rows_vec(C, pc_vec<TD>::V, dinp, dres, dout, inp, weight, dinp_bf);
    PC_LAUNCH_T(ln_backward_fused_kernel<TD>, (unsigned)chunks, LN_WARPS * PC_WARP, LN_WARPS * PC_WARP)(
        dinp, dinp_bf, dres, part_w, part_b, dout, inp, weight, mean, rstd, BT, C, vec);
    if (dweight) {
        pc_launch_col_finish(dweight, part_w, chunks, C);
        pc_launch_col_finish(dbias, part_b, chunks, C);
    }
    pc_check_launch(what);
}

extern "C" {

void pc_launch_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                 const float *bias, int64_t BT, int64_t C) {
    ln_forward(out, mean, rstd, inp, weight, bias, BT, C, "layernorm_forward");
}

void pc_launch_layernorm_forward_bf16(plait_bf16 *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t BT, int64_t C) {
    ln_forward(out, mean, rstd, inp, weight, bias, BT, C, "layernorm_forward_bf16");
}

void pc_launch_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const float *mean, const float *rstd, int64_t BT,
                                  int64_t C) {
    if (BT <= 0 || C <= 0) return;
    if (dinp)
        PC_LAUNCH(ln_backward_rows_kernel, row_blocks(BT), LN_WARPS * PC_WARP)(
            dinp, dout, inp, weight, mean, rstd, BT, C, rows_vec(C, 4, dinp, dout, inp, weight, NULL));
    if (dweight || dbias) {
        const int64_t chunks = pc_col_chunks(BT);
        const unsigned colblocks = (unsigned)((C + PC_THREADS - 1) / PC_THREADS);
        float *part = (float *)pc_scratch((size_t)(2 * chunks * C) * sizeof(float));
        if (!part) return;
        float *part_w = dweight ? part : NULL, *part_b = dbias ? part + chunks * C : NULL;
        PC_LAUNCH(ln_params_partial_kernel, (unsigned)(colblocks * chunks), PC_THREADS)(
            part_w, part_b, dout, inp, mean, rstd, BT, C, colblocks);
        if (dweight) pc_launch_col_finish(dweight, part_w, chunks, C);
        if (dbias) pc_launch_col_finish(dbias, part_b, chunks, C);
    }
    pc_check_launch("layernorm_backward");
}

void pc_launch_layernorm_backward_fused(float *dinp, const float *dres, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight, const float *mean,
                                        const float *rstd, int64_t BT, int64_t C) {
    ln_backward_fused(dinp, (plait_bf16 *)NULL, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C,
                      "layernorm_backward_fused");
}

void pc_launch_layernorm_backward_fused_bf16(float *dinp, const float *dres, float *dweight, float *dbias,
                                             const plait_bf16 *dout, const float *inp, const float *weight,
                                             const float *mean, const float *rstd, int64_t BT, int64_t C) {
    ln_backward_fused(dinp, (plait_bf16 *)NULL, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C,
                      "layernorm_backward_fused_bf16");
}

void pc_launch_layernorm_backward_fused_bf16_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres,
                                                  float *dweight, float *dbias, const plait_bf16 *dout,
                                                  const float *inp, const float *weight, const float *mean,
                                                  const float *rstd, int64_t BT, int64_t C) {
    ln_backward_fused(dinp, dinp_bf, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C,
                      "layernorm_backward_fused_bf16_copy");
}

} /* extern "C" */
