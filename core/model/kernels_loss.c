/*
 * Softmax cross-entropy over the vocabulary, whole or split across TP ranks
 * (Megatron's vocab-parallel form: per-row max, Σexp and target logit are
 * combined across ranks by the caller; logits are never gathered). Rows are
 * independent, so the exp-heavy passes run on blocks of rows in parallel.
 */
#include <math.h>
#include <string.h>

#include "model/kernels.h"
#include "model/kernels_internal.h"
#include "model/kernels_math.h"
#include "model/kernels_pool.h"

#define CE_ROWS 32

typedef struct ce_job {
    float *out;                 /* sumexp[BT] or dlogits[BT,Vl] */
    const float *logits, *rows; /* rows: rowmax or lse [BT] */
    const int32_t *targets;
    int64_t BT, Vl, n_valid, vocab_start;
    float scale;
} ce_job;

PLAIT_SIMD_CLONES static void sumexp_rows(const ce_job *j, int64_t r0, int64_t r1) {
    const int64_t n = j->n_valid, Vl = j->Vl;
    const float *logits = j->logits, *rows = j->rows;
    float *out = j->out;
    for (int64_t r = r0; r < r1; r++) {
        const float *l = logits + r * Vl;
        const float m = rows[r];
        float acc[PLAIT_LANES] = {0};
        int64_t c = 0;
        for (; c + PLAIT_LANES <= n; c += PLAIT_LANES)
            for (int k = 0; k < PLAIT_LANES; k++) acc[k] += plait_expf(l[c + k] - m);
        for (int k = 0; c < n; c++, k++) acc[k] += plait_expf(l[c] - m);
        out[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
}

PLAIT_SIMD_CLONES static void ce_backward_rows(const ce_job *j, int64_t r0, int64_t r1) {
    const int64_t Vl = j->Vl, n = j->n_valid, start = j->vocab_start;
    const float scale = j->scale;
    const float *logits = j->logits, *rows = j->rows;
    const int32_t *targets = j->targets;
    float *out = j->out;
    for (int64_t r = r0; r < r1; r++) {
        const float *l = logits + r * Vl;
        float *d = out + r * Vl; /* may be l itself: same index read then written */
        if (targets[r] < 0) {
            memset(d, 0, (size_t)Vl * sizeof *d);
            continue;
        }
        const float z = rows[r];
        for (int64_t c = 0; c < n; c++) d[c] = plait_expf(l[c] - z) * scale;
        for (int64_t c = n; c < Vl; c++) d[c] = 0.0f;
        int64_t t = (int64_t)targets[r] - start;
        if (t >= 0 && t < n) d[t] -= scale;
    }
}

static void sumexp_item(void *vj, int64_t item) {
    const ce_job *j = vj;
    int64_t r0 = item * CE_ROWS;
    sumexp_rows(j, r0, r0 + CE_ROWS < j->BT ? r0 + CE_ROWS : j->BT);
}

static void ce_backward_item(void *vj, int64_t item) {
    const ce_job *j = vj;
    int64_t r0 = item * CE_ROWS;
    ce_backward_rows(j, r0, r0 + CE_ROWS < j->BT ? r0 + CE_ROWS : j->BT);
}

void plait_k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                           int64_t n_valid) {
    for (int64_t r = 0; r < BT; r++)
        rowmax[r] = n_valid > 0 ? plait_max(logits + r * Vl, n_valid) : -INFINITY;
}

void plait_k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                           int64_t Vl, int64_t n_valid) {
    ce_job j = {sumexp, logits, rowmax, NULL, BT, Vl, n_valid, 0, 0.0f};
    plait_pool_run((BT + CE_ROWS - 1) / CE_ROWS, sumexp_item, &j);
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
    ce_job j = {dlogits, logits, lse, targets, BT, Vl, n_valid, vocab_start, scale};
    plait_pool_run((BT + CE_ROWS - 1) / CE_ROWS, ce_backward_item, &j);
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
