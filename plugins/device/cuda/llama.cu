/*
 * The Llama family's row and element-wise kernels (plait/kernels.h, ABI
 * 1.10), float32, with the CPU kernels' formulas (core/kernels/
 * kernels_rmsnorm.c, kernels_rotary.c, kernels_swiglu.c): RMSNorm forward
 * and backward, the rotary rotation, SwiGLU's gate. Grouped-query
 * attention is the fused attention's (attention.cu).
 *
 * Their bf16-activation forms (ABI 1.22) are the same kernels templated
 * on the bf16 tensor's element type (RMSNorm's output or output
 * gradient, the rotated q and k): float32 arithmetic, bf16 widened on
 * load and rounded once on store. SwiGLU's bf16 form reads the gate and
 * up projections' outputs side by side in a row (the one product that
 * makes both) and writes their gradients so, the formulas the float32
 * kernels share.
 *
 * RMSNorm: one warp a row, sums lane-strided then a butterfly (a fixed
 * order); the weight gradient as column sums over row chunks (pcuda.h
 * pc_launch_col_finish), never an atomic: the same inputs give the same
 * bits, within rounding of the CPU's single running sum.
 *
 * The rotation takes its cosines and sines from the caller's table
 * (float32 whatever the precision), so a GPU rotates by the CPU's angles;
 * each product is rounded on its own (no multiply-add contraction), the
 * CPU's arithmetic element for element.
 */
#include "kcommon.cuh"

#define RMS_WARPS 8 /* rows per block */

/* out = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps): a warp a row; TO: out's
 * element type */
template <typename TO>
PC_KERNEL_T(RMS_WARPS *PC_WARP)
rms_forward_kernel(TO *out, float *rstd, const float *inp, const float *w, int64_t BT, int64_t C, float eps) {
    const int64_t r = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    const int lane = threadIdx.x % PC_WARP;
    const float *x = inp + r * C;
    float ss = 0.0f;
    for (int64_t c = lane; c < C; c += PC_WARP) ss += x[c] * x[c];
    const float s = 1.0f / sqrtf(pc_warp_sum(ss) * (1.0f / (float)C) + eps);
    TO *o = out + r * C;
    for (int64_t c = lane; c < C; c += PC_WARP) pc_put(o + c, __fmul_rn(__fmul_rn(x[c], s), w[c]));
    if (lane == 0 && rstd) rstd[r] = s;
}

/* dx = base + (w·dy − x·k)·s, k = mean(w·dy·x)·s²: a warp a row; base
 * NULL adds to zeros. dres may be dinp (each element read before its
 * write by the same thread). TD: dout's element type. */
template <typename TD>
PC_KERNEL_T(RMS_WARPS *PC_WARP)
rms_backward_rows_kernel(float *dinp, const float *dres, const TD *dout, const float *inp, const float *w,
                         const float *rstd, int64_t BT, int64_t C) {
    const int64_t r = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / PC_WARP;
    if (r >= BT) return;
    const int lane = threadIdx.x % PC_WARP;
    const float *x = inp + r * C, *base = dres ? dres + r * C : NULL;
    const TD *d = dout + r * C;
    float *dx = dinp + r * C;
    float acc = 0.0f;
    for (int64_t c = lane; c < C; c += PC_WARP) acc += w[c] * pc_get(d + c) * x[c];
    const float s = rstd[r], k = pc_warp_sum(acc) / (float)C * s * s;
    for (int64_t c = lane; c < C; c += PC_WARP) {
        const float b = base ? base[c] : 0.0f;
        dx[c] = __fadd_rn(b, __fmul_rn(__fmul_rn(w[c], pc_get(d + c)) - __fmul_rn(x[c], k), s));
    }
}

/* Pass 1 of the weight gradient: block b sums chunk b / colblocks of
 * PC_COL_ROWS rows for 256 columns, each thread its column over the
 * chunk's rows in order, into part[chunk][C]. */
template <typename TD>
PC_KERNEL_T(PC_THREADS)
rms_weight_partial_kernel(float *part, const TD *dout, const float *inp, const float *rstd, int64_t BT, int64_t C,
                          unsigned colblocks) {
    const int64_t chunk = blockIdx.x / colblocks;
    const int64_t c = (int64_t)(blockIdx.x % colblocks) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t r0 = chunk * PC_COL_ROWS, r1 = r0 + PC_COL_ROWS < BT ? r0 + PC_COL_ROWS : BT;
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++) s += __fmul_rn(__fmul_rn(inp[r * C + c], rstd[r]), pc_get(dout + r * C + c));
    part[chunk * C + c] = s;
}

/* One pair (i, i + HS/2) of one head of one token a thread: rotated by
 * the angle of cs at the token (sign -1: by minus it); E: x's element
 * type (bf16 widened, rotated in float32, rounded once) */
template <typename E>
PC_KERNEL_T(PC_THREADS)
rope_kernel(E *x, const float *cs, int64_t BT, int64_t T, int64_t stride, int64_t n_heads, int64_t HS, float sign) {
    const int64_t hh = HS / 2;
    const size_t n = (size_t)(BT * n_heads * hh);
    PC_GRID_STRIDE(p, n) {
        const int64_t i = (int64_t)(p % (size_t)hh), h = (int64_t)(p / (size_t)hh) % n_heads;
        const int64_t r = (int64_t)(p / (size_t)(hh * n_heads)), t = r % T;
        E *a = x + r * stride + h * HS + i, *b = a + hh;
        const float c = cs[t * hh + i], s = sign * cs[T * hh + t * hh + i];
        const float x0 = pc_get(a), x1 = pc_get(b);
        pc_put(a, __fmul_rn(x0, c) - __fmul_rn(x1, s));
        pc_put(b, __fmul_rn(x1, c) + __fmul_rn(x0, s));
    }
}

__device__ static inline float silu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__device__ static inline float swiglu_of(float g, float u) { return __fmul_rn(__fmul_rn(g, silu_sigmoid(g)), u); }

/* d/dg [g·σ(g)] = σ(g)·(1 + g·(1 − σ(g))): the gate's gradient into *dg, up's into *du */
__device__ static inline void swiglu_grads(float g, float u, float d, float *dg, float *du) {
    const float sg = silu_sigmoid(g);
    *dg = __fmul_rn(__fmul_rn(__fmul_rn(d, u), sg), 1.0f + __fmul_rn(g, 1.0f - sg));
    *du = __fmul_rn(__fmul_rn(d, g), sg);
}

/* out may be up: each element read before its write by the same thread */
PC_KERNEL(swiglu_forward_kernel, PC_THREADS)(float *out, const float *gate, const float *up, size_t n) {
    PC_GRID_STRIDE(i, n) out[i] = swiglu_of(gate[i], up[i]);
}

/* dup may be dout */
PC_KERNEL(swiglu_backward_kernel, PC_THREADS)
(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    PC_GRID_STRIDE(i, n) {
        float dg, du;
        swiglu_grads(gate[i], up[i], dout[i], &dg, &du);
        dgate[i] = dg;
        dup[i] = du;
    }
}

/* The bf16 forms on gu[BT,2F] (a row's gate outputs, then up's): element
 * i of out[BT,F] a thread */
PC_KERNEL(swiglu_gu_forward_kernel, PC_THREADS)(plait_bf16 *out, const plait_bf16 *gu, int64_t F, size_t n) {
    PC_GRID_STRIDE(i, n) {
        const plait_bf16 *g = gu + (int64_t)(i / (size_t)F) * 2 * F + (int64_t)(i % (size_t)F);
        pc_put(out + i, swiglu_of(pc_get(g), pc_get(g + F)));
    }
}

PC_KERNEL(swiglu_gu_backward_kernel, PC_THREADS)
(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t F, size_t n) {
    PC_GRID_STRIDE(i, n) {
        const int64_t at = (int64_t)(i / (size_t)F) * 2 * F + (int64_t)(i % (size_t)F);
        float dg, du;
        swiglu_grads(pc_get(gu + at), pc_get(gu + at + F), pc_get(dout + i), &dg, &du);
        pc_put(dgu + at, dg);
        pc_put(dgu + at + F, du);
    }
}

static unsigned rms_blocks(int64_t BT) { return (unsigned)((BT + RMS_WARPS - 1) / RMS_WARPS); }

template <typename TO>
static void rms_forward(TO *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C, float eps,
                        const char *what) {
    if (BT <= 0 || C <= 0) return;
    PC_LAUNCH_T(rms_forward_kernel<TO>, rms_blocks(BT), RMS_WARPS * PC_WARP, RMS_WARPS * PC_WARP)
    (out, rstd, inp, weight, BT, C, eps);
    pc_check_launch(what);
}

template <typename TD>
static void rms_backward(float *dinp, const float *dres, float *dweight, const TD *dout, const float *inp,
                         const float *weight, const float *rstd, int64_t BT, int64_t C, const char *what) {
    if (BT <= 0 || C <= 0) return;
    if (dinp) {
        const unsigned blocks = rms_blocks(BT);
        PC_LAUNCH_T(rms_backward_rows_kernel<TD>, blocks, RMS_WARPS * PC_WARP, RMS_WARPS * PC_WARP)
        (dinp, dres, dout, inp, weight, rstd, BT, C);
    }
    if (dweight) {
        const int64_t chunks = pc_col_chunks(BT);
        const unsigned colblocks = (unsigned)((C + PC_THREADS - 1) / PC_THREADS);
        float *part = (float *)pc_scratch((size_t)(chunks * C) * sizeof(float));
        if (!part) return;
        PC_LAUNCH_T(rms_weight_partial_kernel<TD>, (unsigned)(colblocks * chunks), PC_THREADS, PC_THREADS)
        (part, dout, inp, rstd, BT, C, colblocks);
        pc_launch_col_finish(dweight, part, chunks, C);
    }
    pc_check_launch(what);
}

template <typename E>
static void rope(E *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                 int inverse, const char *what) {
    const size_t n = (size_t)(B * T * n_heads * (HS / 2));
    if (!n) return;
    PC_LAUNCH_T(rope_kernel<E>, pc_blocks(n), PC_THREADS, PC_THREADS)
    (x, cs, B * T, T, row_stride, n_heads, HS, inverse ? -1.0f : 1.0f);
    pc_check_launch(what);
}

extern "C" {

void pc_launch_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C,
                               float eps) {
    rms_forward(out, rstd, inp, weight, BT, C, eps, "rmsnorm_forward");
}

void pc_launch_rmsnorm_backward(float *dinp, const float *dres, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t BT, int64_t C) {
    rms_backward(dinp, dres, dweight, dout, inp, weight, rstd, BT, C, "rmsnorm_backward");
}

void pc_launch_rope(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                    int inverse) {
    rope(x, cs, B, T, row_stride, n_heads, HS, inverse, "rope");
}

void pc_launch_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    if (!n) return;
    PC_LAUNCH(swiglu_forward_kernel, pc_blocks(n), PC_THREADS)(out, gate, up, n);
    pc_check_launch("swiglu_forward");
}

void pc_launch_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n) {
    if (!n) return;
    PC_LAUNCH(swiglu_backward_kernel, pc_blocks(n), PC_THREADS)(dgate, dup, dout, gate, up, n);
    pc_check_launch("swiglu_backward");
}

void pc_launch_rmsnorm_forward_bf16(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                                    int64_t C, float eps) {
    rms_forward(out, rstd, inp, weight, BT, C, eps, "rmsnorm_forward_bf16");
}

void pc_launch_rmsnorm_backward_bf16(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout,
                                     const float *inp, const float *weight, const float *rstd, int64_t BT, int64_t C) {
    rms_backward(dinp, dres, dweight, dout, inp, weight, rstd, BT, C, "rmsnorm_backward_bf16");
}

void pc_launch_rope_bf16(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                         int64_t HS, int inverse) {
    rope(x, cs, B, T, row_stride, n_heads, HS, inverse, "rope_bf16");
}

void pc_launch_swiglu_forward_bf16(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F) {
    const size_t n = (size_t)(BT * F);
    if (!n) return;
    PC_LAUNCH(swiglu_gu_forward_kernel, pc_blocks(n), PC_THREADS)(out, gu, F, n);
    pc_check_launch("swiglu_forward_bf16");
}

void pc_launch_swiglu_backward_bf16(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT,
                                    int64_t F) {
    const size_t n = (size_t)(BT * F);
    if (!n) return;
    PC_LAUNCH(swiglu_gu_backward_kernel, pc_blocks(n), PC_THREADS)(dgu, dout, gu, F, n);
    pc_check_launch("swiglu_backward_bf16");
}

} /* extern "C" */
