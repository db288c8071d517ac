/*
 * Softmax cross-entropy over the vocabulary, whole or split across TP ranks
 * (Megatron's vocab-parallel form: per-row max, Σexp and target logit are
 * combined across ranks by the caller; logits are never gathered).
 */
#include <math.h>
#include <string.h>

#include "model/kernels.h"
#include "model/kernels_math.h"

void plait_k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                           int64_t n_valid) {
    for (int64_t r = 0; r < BT; r++)
        rowmax[r] = n_valid > 0 ? plait_max(logits + r * Vl, n_valid) : -INFINITY;
}

void plait_k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                           int64_t Vl, int64_t n_valid) {
    for (int64_t r = 0; r < BT; r++) {
        const float *l = logits + r * Vl;
        const float m = rowmax[r];
        float acc[PLAIT_LANES] = {0};
        int64_t c = 0;
        for (; c + PLAIT_LANES <= n_valid; c += PLAIT_LANES)
            for (int k = 0; k < PLAIT_LANES; k++) acc[k] += plait_expf(l[c + k] - m);
        for (int k = 0; c < n_valid; c++, k++) acc[k] += plait_expf(l[c] - m);
        sumexp[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
}

void plait_k_logits_target(float *tlogit, const float *logits, const int32_t *targets,
                           int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid) {
    for (int64_t r = 0; r < BT; r++) {
        int64_t c = (int64_t)targets[r] - vocab_start;
        tlogit[r] = targets[r] >= 0 && c >= 0 && c < n_valid ? logits[r * Vl + c] : 0.0f;
    }
}

void plait_k_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, int64_t vocab_start, int64_t BT,
                                   int64_t Vl, int64_t n_valid, float scale) {
    for (int64_t r = 0; r < BT; r++) {
        const float *l = logits + r * Vl;
        float *d = dlogits + r * Vl;
        if (targets[r] < 0) {
            memset(d, 0, (size_t)Vl * sizeof *d);
            continue;
        }
        const float z = lse[r];
        for (int64_t c = 0; c < n_valid; c++) d[c] = plait_expf(l[c] - z) * scale;
        for (int64_t c = n_valid; c < Vl; c++) d[c] = 0.0f;
        int64_t t = (int64_t)targets[r] - vocab_start;
        if (t >= 0 && t < n_valid) d[t] -= scale;
    }
}

void plait_k_crossentropy(float *losses, float *dlogits, const float *logits,
                          const int32_t *targets, int64_t BT, int64_t V, float dloss_scale) {
    for (int64_t r = 0; r < BT; r++) {
        const float *l = logits + r * V;
        float m, s, t;
        plait_k_logits_rowmax(&m, l, 1, V, V);
        plait_k_logits_sumexp(&s, l, &m, 1, V, V);
        plait_k_logits_target(&t, l, targets + r, 0, 1, V, V);
        float lse = m + logf(s);
        losses[r] = targets[r] >= 0 ? lse - t : 0.0f;
        if (dlogits) plait_k_crossentropy_backward(dlogits + r * V, l, &lse, targets + r, 0, 1, V, V,
                                                   dloss_scale);
    }
}
