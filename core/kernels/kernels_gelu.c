/*
 * GELU with the tanh approximation (GPT-2, nn.GELU(approximate="tanh")):
 *   gelu(x) = 0.5·x·(1 + tanh(u)),  u = sqrt(2/π)·(x + 0.044715·x³).
 * Written as x·σ(2u) (since 1 + tanh(u) = 2σ(2u)): one exp per element,
 * no cancellation for large |x|, vectorisable. Threaded over fixed chunks.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

PLAIT_SIMD_CLONES static void gelu_forward_span(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x * x);
        out[i] = x / (1.0f + plait_expf(u2));
    }
}

PLAIT_SIMD_CLONES static void gelu_backward_span(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float x2 = x * x;
        float u2 = -2.0f * GELU_K0 * x * (1.0f + GELU_K1 * x2);
        float s = 1.0f / (1.0f + plait_expf(u2));
        float du = 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
        dinp[i] = dout[i] * (s + x * s * (1.0f - s) * du);
    }
}

/* exported through plain functions (clang links no non-static clones) */
void plait_k_gelu_forward_span(float *out, const float *inp, size_t n) { gelu_forward_span(out, inp, n); }

void plait_k_gelu_backward_span(float *dinp, const float *inp, const float *dout, size_t n) {
    gelu_backward_span(dinp, inp, dout, n);
}

typedef struct gelu_job {
    float *out;
    const float *inp, *dout;
    size_t n;
} gelu_job;

static void gelu_forward_item(void *vj, int64_t item) {
    const gelu_job *j = vj;
    size_t lo = (size_t)item * PLAIT_ELEMWISE_CHUNK;
    size_t len = j->n - lo < PLAIT_ELEMWISE_CHUNK ? j->n - lo : PLAIT_ELEMWISE_CHUNK;
    gelu_forward_span(j->out + lo, j->inp + lo, len);
}

static void gelu_backward_item(void *vj, int64_t item) {
    const gelu_job *j = vj;
    size_t lo = (size_t)item * PLAIT_ELEMWISE_CHUNK;
    size_t len = j->n - lo < PLAIT_ELEMWISE_CHUNK ? j->n - lo : PLAIT_ELEMWISE_CHUNK;
    gelu_backward_span(j->out + lo, j->inp + lo, j->dout + lo, len);
}

void plait_k_gelu_forward(float *out, const float *inp, size_t n) {
    gelu_job j = {out, inp, NULL, n};
    plait_pool_run((int64_t)((n + PLAIT_ELEMWISE_CHUNK - 1) / PLAIT_ELEMWISE_CHUNK),
                   gelu_forward_item, &j);
}

/* dinp may be the same buffer as dout. */
void plait_k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    gelu_job j = {dinp, inp, dout, n};
    plait_pool_run((int64_t)((n + PLAIT_ELEMWISE_CHUNK - 1) / PLAIT_ELEMWISE_CHUNK),
                   gelu_backward_item, &j);
}

/* The linear layer and GELU together (plait/kernels.h matmul_forward_gelu,
 * matmul_backward_gelu): the CPU gains nothing from fusing them, so the
 * product and the elementwise kernel, whose bits a device's parts give. */
void plait_k_matmul_forward_gelu(float *out, float *pre, const float *inp, const float *weight, const float *bias,
                                 int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_forward(pre, inp, weight, bias, BT, C, OC);
    plait_k_gelu_forward(out, pre, (size_t)(BT * OC));
}

void plait_k_matmul_backward_gelu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const float *pre, int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC);
    if (dinp) plait_k_gelu_backward(dinp, pre, dinp, (size_t)(BT * C));
}

/* gelu_forward on bf16 (plait/kernels.h gelu_forward_bf16): a piece widened
 * on the stack, the float32 span, rounded back (out may be inp: each piece
 * is read before it is written) */
typedef struct gelu_bf16_job {
    plait_bf16 *out;
    const plait_bf16 *inp;
} gelu_bf16_job;

static void gelu_bf16_range(void *vj, int64_t lo, int64_t hi) {
    const gelu_bf16_job *j = vj;
    float x[PLAIT_K_STACK_FLOATS];
    for (int64_t a = lo; a < hi; a += PLAIT_K_STACK_FLOATS) {
        const int64_t n = hi - a < PLAIT_K_STACK_FLOATS ? hi - a : PLAIT_K_STACK_FLOATS;
        plait_k_widen(x, j->inp + a, n);
        gelu_forward_span(x, x, (size_t)n);
        plait_k_narrow(j->out + a, x, n);
    }
}

void plait_k_gelu_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, size_t n) {
    gelu_bf16_job j = {out, inp};
    plait_pool_for((int64_t)n, PLAIT_ELEMWISE_CHUNK, gelu_bf16_range, &j);
}
