/*
 * SwiGLU's gate (Llama's MLP): out = silu(gate) · up, with silu(g) =
 * g · sigmoid(g). Elementwise: any cut gives the same bits.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

#define SWIGLU_CHUNK 4096 /* elements per work item */

typedef struct swiglu_job {
    float *out, *dgate, *dup;
    const float *gate, *up, *dout;
} swiglu_job;

static inline float sigmoid(float g) { return 1.0f / (1.0f + plait_expf(-g)); }

PLAIT_SIMD_CLONES static void swiglu_forward_range(void *vj, int64_t lo, int64_t hi) {
    const swiglu_job *j = vj;
    for (int64_t i = lo; i < hi; i++) {
        const float g = j->gate[i];
        j->out[i] = g * sigmoid(g) * j->up[i];
    }
}

/* d/dg [g·σ(g)] = σ(g)·(1 + g·(1 − σ(g))) */
PLAIT_SIMD_CLONES static void swiglu_backward_range(void *vj, int64_t lo, int64_t hi) {
    const swiglu_job *j = vj;
    for (int64_t i = lo; i < hi; i++) {
        const float g = j->gate[i], u = j->up[i], d = j->dout[i];
        const float sg = sigmoid(g);
        j->dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        j->dup[i] = d * g * sg;
    }
}

void plait_k_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    swiglu_job j = {.out = out, .gate = gate, .up = up};
    plait_pool_for((int64_t)n, SWIGLU_CHUNK, swiglu_forward_range, &j);
}

void plait_k_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                             size_t n) {
    swiglu_job j = {.dgate = dgate, .dup = dup, .gate = gate, .up = up, .dout = dout};
    plait_pool_for((int64_t)n, SWIGLU_CHUNK, swiglu_backward_range, &j);
}
