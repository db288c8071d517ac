/*
 * GELU, tanh approximation, as the CPU kernel writes it (x·σ(2u), one exp
 * per element; core/kernels/kernels_gelu.c). In place allowed (out == inp,
 * dinp == dout): each element is read before it is written by the same
 * thread. 16-byte loads where the pointers allow (kcommon.cuh pc_map).
 *
 * Beside them, the epilogue of a bf16 product that cuBLASLt's could not
 * do (gemm.c): bias and GELU on the float32 result, each bf16 output
 * rounded once.
 */
#include "kcommon.cuh"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

/* x·σ(2u) */
__device__ static inline float gelu_of(float x) {
    float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x * x);
    return x / (1.0f + expf(u2));
}

/* dout·gelu'(x) */
__device__ static inline float gelu_grad(float x, float dout) {
    float x2 = x * x;
    float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x2);
    float s = 1.0f / (1.0f + expf(u2));
    float du = 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
    return dout * (s + x * s * (1.0f - s) * du);
}

PC_KERNEL(gelu_forward_kernel, PC_THREADS)(float *out, const float *inp, size_t n, int vec) {
    pc_map(out, inp, (const float *)NULL, n, vec, [](float x, float) { return gelu_of(x); });
}

PC_KERNEL(gelu_backward_kernel, PC_THREADS)(float *dinp, const float *inp, const float *dout, size_t n, int vec) {
    pc_map(dinp, inp, dout, n, vec, [](float x, float d) { return gelu_grad(x, d); });
}

/* One element of the bf16 epilogue (pcuda.h pc_launch_epilogue_bf16): x
 * the float32 product, b the bias (0 without), a aux's value (DGELU's
 * input); *pre gets GELU's input in the forward. */
__device__ static inline float epilogue_elem(float x, float b, float a, int gelu, float *pre) {
    if (gelu == PC_GELU_BACKWARD) return gelu_grad(a, x);
    const float v = x + b;
    *pre = v;
    return gelu == PC_GELU_FORWARD ? gelu_of(v) : v;
}

/* vec (N % 8 == 0, every pointer 16-byte aligned): 8 elements a thread a
 * step, two 16-byte loads of x and one of the bias (and aux) and one
 * 16-byte store of out (and aux); else one element at a time. The same
 * arithmetic either way. */
PC_KERNEL(epilogue_bf16_kernel, PC_THREADS)(plait_bf16 *out, plait_bf16 *aux, const float *x, const plait_bf16 *bias,
                                            size_t rows, size_t N, int gelu, int vec) {
    const size_t n = rows * N, groups = vec ? n / 8 : 0;
    PC_GRID_STRIDE(g, groups) {
        const size_t i0 = g * 8;
        float v[8], b[8] = {}, a[8] = {}, r[8], pre[8];
        pc_ld(v, x + i0);
        if (bias && gelu != PC_GELU_BACKWARD) pc_ld(b, bias + i0 % N);
        if (gelu == PC_GELU_BACKWARD) pc_ld(a, aux + i0);
        PC_UNROLL
        for (int k = 0; k < 8; k++) r[k] = epilogue_elem(v[k], b[k], a[k], gelu, &pre[k]);
        if (gelu == PC_GELU_FORWARD) pc_st(aux + i0, pre);
        pc_st(out + i0, r);
    }
    for (size_t i = groups * 8 + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float b = bias && gelu != PC_GELU_BACKWARD ? pc_get(bias + i % N) : 0.0f;
        const float a = gelu == PC_GELU_BACKWARD ? pc_get(aux + i) : 0.0f;
        float pre = 0.0f;
        const float r = epilogue_elem(x[i], b, a, gelu, &pre);
        if (gelu == PC_GELU_FORWARD) pc_put(aux + i, pre);
        pc_put(out + i, r);
    }
}

/* GELU over bf16 (gelu_forward_bf16): each element widened, gelu_of,
 * rounded once. vec (both pointers 16-byte aligned): 8 elements a 16-byte
 * load and store, then the last n % 8 one by one; in place allowed (a
 * thread reads its elements before it writes them). */
PC_KERNEL(gelu_forward_bf16_kernel, PC_THREADS)(plait_bf16 *out, const plait_bf16 *inp, size_t n, int vec) {
    const size_t groups = vec ? n / 8 : 0;
    PC_GRID_STRIDE(g, groups) {
        float v[8];
        pc_ld(v, inp + g * 8);
        PC_UNROLL
        for (int k = 0; k < 8; k++) v[k] = gelu_of(v[k]);
        pc_st(out + g * 8, v);
    }
    for (size_t i = groups * 8 + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        pc_put(out + i, gelu_of(pc_get(inp + i)));
}

extern "C" {

void pc_launch_gelu_forward(float *out, const float *inp, size_t n) {
    if (!n) return;
    const int vec = pc_aligned16(out) && pc_aligned16(inp);
    PC_LAUNCH(gelu_forward_kernel, pc_map_blocks(n, vec), PC_THREADS)(out, inp, n, vec);
    pc_check_launch("gelu_forward");
}

void pc_launch_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (!n) return;
    const int vec = pc_aligned16(dinp) && pc_aligned16(inp) && pc_aligned16(dout);
    PC_LAUNCH(gelu_backward_kernel, pc_map_blocks(n, vec), PC_THREADS)(dinp, inp, dout, n, vec);
    pc_check_launch("gelu_backward");
}

void pc_launch_epilogue_bf16(plait_bf16 *out, plait_bf16 *aux, const float *x, const plait_bf16 *bias, int64_t rows,
                             int64_t N, int gelu) {
    const size_t n = (size_t)rows * (size_t)N;
    if (!n) return;
    const int vec = N % 8 == 0 && pc_aligned16(out) && pc_aligned16(x) && (!bias || pc_aligned16(bias)) &&
                    (gelu == PC_GELU_NONE || pc_aligned16(aux));
    PC_LAUNCH(epilogue_bf16_kernel, pc_blocks(vec ? n / 8 : n), PC_THREADS)(
        out, aux, x, bias, (size_t)rows, (size_t)N, gelu, vec);
    pc_check_launch("bf16 epilogue");
}

void pc_launch_gelu_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, size_t n) {
    if (!n) return;
    const int vec = pc_aligned16(out) && pc_aligned16(inp);
    PC_LAUNCH(gelu_forward_bf16_kernel, pc_blocks(vec ? (n + 7) / 8 : n), PC_THREADS)(
        out, inp, n, vec);
    pc_check_launch("gelu_forward_bf16");
}

} /* extern "C" */
