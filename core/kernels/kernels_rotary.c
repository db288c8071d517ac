/*
 * Rotary position embeddings (RoPE) as Hugging Face's Llama applies them:
 * a head's element i and element i + HS/2 form a pair rotated by the
 * angle of frequency i at the token's position. The angles' cosines and
 * sines come from the caller ([2,T,HS/2], float32), so positions may be
 * anything (a context-parallel rank's share of a sequence is not
 * contiguous). The rotation is orthogonal: its backward is the rotation
 * by minus the angle, the same call with `inverse` set.
 *
 * Elementwise per pair: any cut of the rows gives the same bits.
 */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_pool.h"

#define ROPE_ROWS 16 /* token rows per work item */

typedef struct rope_job {
    float *x;
    plait_bf16 *xh; /* rope_bf16's */
    const float *cs;
    int64_t B, T, stride, n_heads, HS;
    float sign; /* +1 forward, -1 inverse */
} rope_job;

/* one row's n_heads heads at x rotated by the angles of its position */
static void rope_row(float *x, const float *cosv, const float *sinv, int64_t n_heads, int64_t HS, float sign) {
    const int64_t half = HS / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *a = x + h * HS, *b = a + half;
        for (int64_t i = 0; i < half; i++) {
            const float c = cosv[i], s = sign * sinv[i];
            const float x0 = a[i], x1 = b[i];
            a[i] = x0 * c - x1 * s;
            b[i] = x1 * c + x0 * s;
        }
    }
}

static void rope_rows(void *vj, int64_t lo, int64_t hi) {
    const rope_job *j = vj;
    const int64_t half = j->HS / 2, T = j->T;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t t = r % T;
        rope_row(j->x + r * j->stride, j->cs + t * half, j->cs + T * half + t * half, j->n_heads, j->HS, j->sign);
    }
}

void plait_k_rope(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                  int inverse) {
    rope_job j = {.x = x,
                  .cs = cs,
                  .B = B,
                  .T = T,
                  .stride = row_stride,
                  .n_heads = n_heads,
                  .HS = HS,
                  .sign = inverse ? -1.0f : 1.0f};
    plait_pool_for(B * T, ROPE_ROWS, rope_rows, &j);
}

/* On bf16 (rope_bf16): a row's heads widened into the thread's scratch,
 * rotated as above, rounded back */
static void rope_bf16_rows(void *vj, int64_t lo, int64_t hi) {
    const rope_job *j = vj;
    const int64_t half = j->HS / 2, T = j->T, n = j->n_heads * j->HS;
    float *x = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)n, "rope_bf16");
    for (int64_t r = lo; r < hi; r++) {
        const int64_t t = r % T;
        plait_bf16 *row = j->xh + r * j->stride;
        plait_k_widen(x, row, n);
        rope_row(x, j->cs + t * half, j->cs + T * half + t * half, j->n_heads, j->HS, j->sign);
        plait_k_narrow(row, x, n);
    }
}

void plait_k_rope_bf16(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                       int64_t HS, int inverse) {
    rope_job j = {.xh = x,
                  .cs = cs,
                  .B = B,
                  .T = T,
                  .stride = row_stride,
                  .n_heads = n_heads,
                  .HS = HS,
                  .sign = inverse ? -1.0f : 1.0f};
    plait_pool_for(B * T, ROPE_ROWS, rope_bf16_rows, &j);
}
