/*
 * GELU, tanh approximation, as the CPU kernel writes it (x·σ(2u), one exp
 * per element; core/kernels/kernels_gelu.c). In place allowed (out == inp,
 * dinp == dout): each element is read before it is written by the same
 * thread. 16-byte loads where the pointers allow (kcommon.cuh pc_map).
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

} /* extern "C" */
