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

/* ---- on bf16 (swiglu_forward_bf16, swiglu_backward_bf16) --------------------
 * A row of gu[BT,2F] is gate_proj's F outputs then up_proj's: each row
 * widened into the thread's scratch, the spans above, rounded once. */
typedef struct swiglu_bf16_job {
    plait_bf16 *out; /* forward: out[BT,F]; backward: dgu[BT,2F] */
    const plait_bf16 *gu, *dout;
    int64_t F;
} swiglu_bf16_job;

static void swiglu_forward_bf16_rows(void *vj, int64_t lo, int64_t hi) {
    const swiglu_bf16_job *j = vj;
    const int64_t F = j->F;
    float *x = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(3 * F), "swiglu_forward_bf16");
    for (int64_t r = lo; r < hi; r++) {
        plait_k_widen(x, j->gu + r * 2 * F, 2 * F);
        swiglu_forward_span(x + 2 * F, x, x + F, F);
        plait_k_narrow(j->out + r * F, x + 2 * F, F);
    }
}

static void swiglu_backward_bf16_rows(void *vj, int64_t lo, int64_t hi) {
    const swiglu_bf16_job *j = vj;
    const int64_t F = j->F;
    float *x = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(5 * F), "swiglu_backward_bf16");
    for (int64_t r = lo; r < hi; r++) {
        plait_k_widen(x, j->gu + r * 2 * F, 2 * F);
        plait_k_widen(x + 2 * F, j->dout + r * F, F);
        swiglu_backward_span(x + 3 * F, x + 4 * F, x + 2 * F, x, x + F, F);
        plait_k_narrow(j->out + r * 2 * F, x + 3 * F, 2 * F);
    }
}

void plait_k_swiglu_forward_bf16(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F) {
    swiglu_bf16_job j = {.out = out, .gu = gu, .F = F};
    plait_pool_for(BT, 8, swiglu_forward_bf16_rows, &j);
}

void plait_k_swiglu_backward_bf16(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT,
                                  int64_t F) {
    swiglu_bf16_job j = {.out = dgu, .gu = gu, .dout = dout, .F = F};
    plait_pool_for(BT, 8, swiglu_backward_bf16_rows, &j);
}
