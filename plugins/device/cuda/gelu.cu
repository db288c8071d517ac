/*
 * GELU, tanh approximation, as the CPU kernel writes it (x·σ(2u), one exp
 * per element; core/kernels/kernels_gelu.c). In place allowed (out == inp,
 * dinp == dout): each element is read before it is written by the same
 * thread.
 */
#include "kcommon.cuh"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

PC_KERNEL(gelu_forward_kernel, PC_THREADS)(float *out, const float *inp, size_t n) {
    PC_GRID_STRIDE(i, n) {
        float x = inp[i];
        float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x * x);
        out[i] = x / (1.0f + expf(u2));
    }
}

PC_KERNEL(gelu_backward_kernel, PC_THREADS)(float *dinp, const float *inp, const float *dout, size_t n) {
    PC_GRID_STRIDE(i, n) {
        float x = inp[i];
        float x2 = x * x;
        float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x2);
        float s = 1.0f / (1.0f + expf(u2));
        float du = 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
        dinp[i] = dout[i] * (s + x * s * (1.0f - s) * du);
    }
}

extern "C" {

void pc_launch_gelu_forward(float *out, const float *inp, size_t n) {
    if (!n) return;
    PC_LAUNCH(gelu_forward_kernel, pc_blocks(n), PC_THREADS)(out, inp, n);
    pc_check_launch("gelu_forward");
}

void pc_launch_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (!n) return;
    PC_LAUNCH(gelu_backward_kernel, pc_blocks(n), PC_THREADS)(dinp, inp, dout, n);
    pc_check_launch("gelu_backward");
}

} /* extern "C" */
