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

/* The spans take their buffers as arguments, not through the job: plait
 * builds with -fno-strict-aliasing, under which a store to out[i] could
 * change the job's pointers, and GCC would reload them each element and
 * leave the loop scalar. */
PLAIT_SIMD_CLONES static void swiglu_forward_span(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g * sigmoid(g) * up[i];
    }
}

/* d/dg [g·σ(g)] = σ(g)·(1 + g·(1 − σ(g))) */
PLAIT_SIMD_CLONES static void swiglu_backward_span(float *dgate, float *dup, const float *dout, const float *gate,
                                                   const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], u = up[i], d = dout[i];
        const float sg = sigmoid(g);
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

static void swiglu_forward_range(void *vj, int64_t lo, int64_t hi) {
    const swiglu_job *j = vj;
    swiglu_forward_span(j->out + lo, j->gate + lo, j->up + lo, hi - lo);
}

static void swiglu_backward_range(void *vj, int64_t lo, int64_t hi) {
    const swiglu_job *j = vj;
    swiglu_backward_span(j->dgate + lo, j->dup + lo, j->dout + lo, j->gate + lo, j->up + lo, hi - lo);
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
