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
    const float *cs;
    int64_t B, T, stride, n_heads, HS;
    float sign; /* +1 forward, -1 inverse */
} rope_job;

static void rope_rows(void *vj, int64_t lo, int64_t hi) {
    const rope_job *j = vj;
    const int64_t half = j->HS / 2, T = j->T;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t t = r % T;
        const float *cosv = j->cs + t * half, *sinv = j->cs + T * half + t * half;
        for (int64_t h = 0; h < j->n_heads; h++) {
            float *a = j->x + r * j->stride + h * j->HS, *b = a + half;
            for (int64_t i = 0; i < half; i++) {
                const float c = cosv[i], s = j->sign * sinv[i];
                const float x0 = a[i], x1 = b[i];
                a[i] = x0 * c - x1 * s;
                b[i] = x1 * c + x0 * s;
            }
        }
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
