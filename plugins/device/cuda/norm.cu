/*
 * LayerNorm over C (eps 1e-5), forward and backward, with the CPU kernel's
 * formulas (core/kernels/kernels_norm.c). One warp per row for the row-wise
 * work (sums lane-strided, then a butterfly: a fixed order); the weight
 * and bias gradients as column sums over row chunks (pcuda.h), added into
 * the accumulated values. dinp accumulates (the residual
 * stream).
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

/* dinp += (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd */
PC_KERNEL(ln_backward_rows_kernel, LN_WARPS * PC_WARP)(float *dinp, const float *dout, const float *inp, const float *w,
                                               const float *mean, const float *rstd, int64_t BT, int64_t C) {
    int64_t r = (int64_t)blockIdx.x * LN_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    const int lane = threadIdx.x % PC_WARP;
    const float *x = inp + r * C, *d = dout + r * C;
    float *dx = dinp + r * C;
    const float m = mean[r], s = rstd[r], inv_c = 1.0f / (float)C;
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
        dx[c] += (w[c] * d[c] - dn_mean - n * dnn_mean) * s;
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
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = chunk * PC_COL_ROWS; r < r1; r++) {
        float d = dout[r * C + c];
        aw += (inp[r * C + c] - mean[r]) * rstd[r] * d;
        ab += d;
    }
    if (part_w) part_w[chunk * C + c] = aw;
    if (part_b) part_b[chunk * C + c] = ab;
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

} /* extern "C" */
