/*
 * Attention's causal softmax over materialised scores [B·NH, T, T] and its
 * backward, one warp per row: row i keeps columns 0..i, and everything
 * above the diagonal is written with zeros (the probabilities, as the CPU
 * kernel leaves them, and the score gradients, so the full-square products
 * after them add nothing there).
 */
#include "kcommon.cuh"

#define SM_WARPS 8

/* scores (already scaled) -> probabilities, in place */
PC_KERNEL(softmax_causal_kernel, SM_WARPS * PC_WARP)(float *att, int64_t rows, int64_t T) {
    int64_t r = (int64_t)blockIdx.x * SM_WARPS + threadIdx.x / PC_WARP;
    if (r >= rows) return;
    const int lane = threadIdx.x % PC_WARP;
    const int64_t i = r % T, n = i + 1;
    float *row = att + r * T;
    float mx = -INFINITY;
    for (int64_t j = lane; j < n; j += PC_WARP) mx = fmaxf(mx, row[j]);
    mx = pc_warp_max(mx);
    float s = 0;
    for (int64_t j = lane; j < n; j += PC_WARP) {
        float e = expf(row[j] - mx);
        row[j] = e;
        s += e;
    }
    float inv = 1.0f / pc_warp_sum(s);
    for (int64_t j = lane; j < T; j += PC_WARP) row[j] = j < n ? row[j] * inv : 0.0f;
}

/* g (d probabilities) -> d scores in place: p_j·(g_j − Σ_k p_k g_k) for j ≤ i, 0 after */
PC_KERNEL(softmax_causal_backward_kernel, SM_WARPS * PC_WARP)(float *g, const float *p, int64_t rows, int64_t T) {
    int64_t r = (int64_t)blockIdx.x * SM_WARPS + threadIdx.x / PC_WARP;
    if (r >= rows) return;
    const int lane = threadIdx.x % PC_WARP;
    const int64_t i = r % T, n = i + 1;
    float *gr = g + r * T;
    const float *pr = p + r * T;
    float dot = 0;
    for (int64_t j = lane; j < n; j += PC_WARP) dot += pr[j] * gr[j];
    dot = pc_warp_sum(dot);
    for (int64_t j = lane; j < T; j += PC_WARP) gr[j] = j < n ? pr[j] * (gr[j] - dot) : 0.0f;
}

static unsigned blocks_for(int64_t rows) { return (unsigned)((rows + SM_WARPS - 1) / SM_WARPS); }

extern "C" {

void pc_launch_softmax_causal(float *att, int64_t BNH, int64_t T) {
    if (BNH * T <= 0) return;
    PC_LAUNCH(softmax_causal_kernel, blocks_for(BNH * T), SM_WARPS * PC_WARP)(att, BNH * T, T);
    pc_check_launch("attention softmax");
}

void pc_launch_softmax_causal_backward(float *datt, const float *att, int64_t BNH, int64_t T) {
    if (BNH * T <= 0) return;
    PC_LAUNCH(softmax_causal_backward_kernel, blocks_for(BNH * T), SM_WARPS * PC_WARP)(datt, att, BNH * T, T);
    pc_check_launch("attention softmax backward");
}

} /* extern "C" */
