/*
 * LayerNorm over C (eps 1e-5), forward and backward, with the CPU kernel's
 * formulas (core/kernels/kernels_norm.c). One warp per row for the row-wise
 * work (sums lane-strided, then a butterfly: a fixed order); the weight
 * and bias gradients as column sums over row chunks (pcuda.h), added into
 * the accumulated values. dinp accumulates (the residual
 * stream); layernorm_backward_fused adds the residual's gradient itself
 * and computes the parameters' partial sums in the same block.
 */
#include "kcommon.cuh"

#define LN_EPS 1e-5f
#define LN_WARPS 8 /* rows per block */

PC_KERNEL(ln_forward_kernel, LN_WARPS * PC_WARP)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, int64_t BT, int64_t C) {
    int64_t r = (int64_t)blockIdx.x * LN_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    const int lane = threadIdx.x % PC_WARP;
    const float *x = inp + r * C;
    float *o = out + r * C;
    const float inv_c = 1.0f / (float)C;
    float s = 0;
    for (int64_t c = lane; c < C; c += PC_WARP) s += x[c];
    float m = pc_warp_sum(s) * inv_c;
    float v = 0;
    for (int64_t c = lane; c < C; c += PC_WARP) {
        float d = x[c] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(pc_warp_sum(v) * inv_c + LN_EPS);
    for (int64_t c = lane; c < C; c += PC_WARP) o[c] = (x[c] - m) * rs * w[c] + b[c];
    if (lane == 0) {
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = rs;
    }
}

/* One row on one warp: dx = base + (w·dout − mean(w·dout) −
 * norm·mean(w·dout·norm))·rstd, base NULL adding to zeros (dx itself: +=). */
__device__ static void ln_backward_row(float *dx, const float *base, const float *x, const float *d, const float *w,
                                       float m, float s, int64_t C) {
    const int lane = threadIdx.x % PC_WARP;
    const float inv_c = 1.0f / (float)C;
    float a1 = 0, a2 = 0;
    for (int64_t c = lane; c < C; c += PC_WARP) {
        float n = (x[c] - m) * s;
        float dn = w[c] * d[c];
        a1 += dn;
        a2 += dn * n;
    }
    float dn_mean = pc_warp_sum(a1) * inv_c, dnn_mean = pc_warp_sum(a2) * inv_c;
    for (int64_t c = lane; c < C; c += PC_WARP) {
        float n = (x[c] - m) * s;
        dx[c] = (base ? base[c] : 0.0f) + (w[c] * d[c] - dn_mean - n * dnn_mean) * s;
    }
}

/* dinp += the input gradient, a warp a row */
PC_KERNEL(ln_backward_rows_kernel, LN_WARPS * PC_WARP)(float *dinp, const float *dout, const float *inp, const float *w,
                                               const float *mean, const float *rstd, int64_t BT, int64_t C) {
    int64_t r = (int64_t)blockIdx.x * LN_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    ln_backward_row(dinp + r * C, dinp + r * C, inp + r * C, dout + r * C, w, mean[r], rstd[r], C);
}

/* Column c's terms of the weight and bias gradients over rows [r0, r1), in
 * row order. */
__device__ static void ln_col_sums(float *aw, float *ab, const float *dout, const float *inp, const float *mean,
                                   const float *rstd, int64_t r0, int64_t r1, int64_t C, int64_t c) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        float d = dout[r * C + c];
        sw += (inp[r * C + c] - mean[r]) * rstd[r] * d;
        sb += d;
    }
    *aw = sw;
    *ab = sb;
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
    float aw, ab;
    ln_col_sums(&aw, &ab, dout, inp, mean, rstd, chunk * PC_COL_ROWS, r1, C, c);
    if (part_w) part_w[chunk * C + c] = aw;
    if (part_b) part_b[chunk * C + c] = ab;
}

/* The whole backward of PC_COL_ROWS rows a block (layernorm_backward_fused):
 * each warp a row at a time, dinp = dres + ln_backward_rows_kernel's
 * term (dres NULL: zeros); then, from the same rows (the block's reads,
 * now in cache), the chunk's column sums of ln_params_partial_kernel in
 * its order, so the partials are its bits. */
PC_KERNEL(ln_backward_fused_kernel, LN_WARPS * PC_WARP)(float *dinp, const float *dres, float *part_w, float *part_b,
                                                        const float *dout, const float *inp, const float *w,
                                                        const float *mean, const float *rstd, int64_t BT, int64_t C) {
    const int64_t chunk = blockIdx.x, r0 = chunk * PC_COL_ROWS;
    const int64_t r1 = r0 + PC_COL_ROWS < BT ? r0 + PC_COL_ROWS : BT;
    for (int64_t r = r0 + threadIdx.x / PC_WARP; r < r1; r += LN_WARPS)
        ln_backward_row(dinp + r * C, dres ? dres + r * C : NULL, inp + r * C, dout + r * C, w, mean[r], rstd[r], C);
    if (!part_w) return;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        ln_col_sums(part_w + chunk * C + c, part_b + chunk * C + c, dout, inp, mean, rstd, r0, r1, C, c);
}

static unsigned row_blocks(int64_t BT) { return (unsigned)((BT + LN_WARPS - 1) / LN_WARPS); }

extern "C" {

void pc_launch_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                 const float *bias, int64_t BT, int64_t C) {
    if (BT <= 0) return;
    PC_LAUNCH(ln_forward_kernel, row_blocks(BT), LN_WARPS * PC_WARP)(out, mean, rstd, inp, weight, bias, BT, C);
    pc_check_launch("layernorm_forward");
}

void pc_launch_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const float *mean, const float *rstd, int64_t BT,
                                  int64_t C) {
    if (BT <= 0 || C <= 0) return;
    if (dinp)
        PC_LAUNCH(ln_backward_rows_kernel, row_blocks(BT), LN_WARPS * PC_WARP)(
            dinp, dout, inp, weight, mean, rstd, BT, C);
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
    if (BT <= 0 || C <= 0) return;
    const int64_t chunks = pc_col_chunks(BT);
    float *part_w = NULL, *part_b = NULL;
    if (dweight) {
        part_w = (float *)pc_scratch((size_t)(2 * chunks * C) * sizeof(float));
        if (!part_w) return;
        part_b = part_w + chunks * C;
    }
    PC_LAUNCH(ln_backward_fused_kernel, (unsigned)chunks, LN_WARPS * PC_WARP)(dinp, dres, part_w, part_b, dout, inp,
                                                                             weight, mean, rstd, BT, C);
    if (dweight) {
        pc_launch_col_finish(dweight, part_w, chunks, C);
        pc_launch_col_finish(dbias, part_b, chunks, C);
    }
    pc_check_launch("layernorm_backward_fused");
}

} /* extern "C" */
