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
 * A row of gu[BT,2F] is gate_proj's F outputs then up_proj's. The spans
 * above's arithmetic on the widened values (widening is exact), each
 * output rounded once as it is stored: the same bits as widening the rows
 * into scratch, running those spans and rounding, without the passes. */
typedef struct swiglu_bf16_job {
    plait_bf16 *out; /* forward: out[BT,F]; backward: dgu[BT,2F] */
    const plait_bf16 *gu, *dout;
    int64_t F;
} swiglu_bf16_job;

PLAIT_SIMD_CLONES static void swiglu_forward_bf16_span(uint16_t *out, const uint16_t *gate, const uint16_t *up,
                                                       int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = plait_k_widen_bf16(gate[i]);
        out[i] = plait_k_narrow_bf16(g * sigmoid(g) * plait_k_widen_bf16(up[i]));
    }
}

PLAIT_SIMD_CLONES static void swiglu_backward_bf16_span(uint16_t *dgate, uint16_t *dup, const uint16_t *dout,
                                                        const uint16_t *gate, const uint16_t *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = plait_k_widen_bf16(gate[i]), u = plait_k_widen_bf16(up[i]), d = plait_k_widen_bf16(dout[i]);
        const float sg = sigmoid(g);
        dgate[i] = plait_k_narrow_bf16(d * u * sg * (1.0f + g * (1.0f - sg)));
        dup[i] = plait_k_narrow_bf16(d * g * sg);
    }
}

/* The same sums with their float32 results left on the stack, for
 * plait_k_narrow to round where the CPU rounds 16 values an instruction:
 * a store and a load of each result cost less than the rounding written
 * out in the loop above. */
PLAIT_SIMD_CLONES static void swiglu_forward_bf16_floats(float *restrict out, const uint16_t *gate, const uint16_t *up,
                                                         int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = plait_k_widen_bf16(gate[i]);
        out[i] = g * sigmoid(g) * plait_k_widen_bf16(up[i]);
    }
}

PLAIT_SIMD_CLONES static void swiglu_backward_bf16_floats(float *restrict dgate, float *restrict dup,
                                                          const uint16_t *dout, const uint16_t *gate,
                                                          const uint16_t *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = plait_k_widen_bf16(gate[i]), u = plait_k_widen_bf16(up[i]), d = plait_k_widen_bf16(dout[i]);
        const float sg = sigmoid(g);
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

static void swiglu_forward_bf16_row(uint16_t *out, const uint16_t *gate, const uint16_t *up, int64_t n) {
    if (!plait_k_narrow_native()) {
        swiglu_forward_bf16_span(out, gate, up, n);
        return;
    }
    float o[PLAIT_K_STACK_FLOATS];
    for (int64_t i = 0; i < n; i += PLAIT_K_STACK_FLOATS) {
        const int64_t m = n - i < PLAIT_K_STACK_FLOATS ? n - i : PLAIT_K_STACK_FLOATS;
        swiglu_forward_bf16_floats(o, gate + i, up + i, m);
        plait_k_narrow(out + i, o, m);
    }
}

static void swiglu_backward_bf16_row(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                                     const uint16_t *up, int64_t n) {
    if (!plait_k_narrow_native()) {
        swiglu_backward_bf16_span(dgate, dup, dout, gate, up, n);
        return;
    }
    float dg[PLAIT_K_STACK_FLOATS / 2], du[PLAIT_K_STACK_FLOATS / 2];
    for (int64_t i = 0; i < n; i += PLAIT_K_STACK_FLOATS / 2) {
        const int64_t m = n - i < PLAIT_K_STACK_FLOATS / 2 ? n - i : PLAIT_K_STACK_FLOATS / 2;
        swiglu_backward_bf16_floats(dg, du, dout + i, gate + i, up + i, m);
        plait_k_narrow(dgate + i, dg, m);
        plait_k_narrow(dup + i, du, m);
    }
}

static void swiglu_forward_bf16_rows(void *vj, int64_t lo, int64_t hi) {
    const swiglu_bf16_job *j = vj;
    const int64_t F = j->F;
    for (int64_t r = lo; r < hi; r++) {
        const uint16_t *gu = j->gu + r * 2 * F;
        swiglu_forward_bf16_row(j->out + r * F, gu, gu + F, F);
    }
}

static void swiglu_backward_bf16_rows(void *vj, int64_t lo, int64_t hi) {
    const swiglu_bf16_job *j = vj;
    const int64_t F = j->F;
    for (int64_t r = lo; r < hi; r++) {
        const uint16_t *gu = j->gu + r * 2 * F;
        uint16_t *d = j->out + r * 2 * F;
        swiglu_backward_bf16_row(d, d + F, j->dout + r * F, gu, gu + F, F);
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
