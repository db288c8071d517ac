/*
 * Softmax cross-entropy over the vocabulary, whole or split across TP ranks
 * (Megatron's vocab-parallel form: per-row max, Σexp and target logit are
 * combined across ranks by the caller; logits are never gathered). Rows are
 * independent, so the exp-heavy passes run on blocks of rows in parallel.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

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

static void rowmax_rows(void *vj, int64_t r0, int64_t r1) {
    const ce_job *j = vj;
    for (int64_t r = r0; r < r1; r++)
        j->out[r] = j->n_valid > 0 ? plait_max(j->logits + r * j->Vl, j->n_valid) : -INFINITY;
}

void plait_k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                           int64_t n_valid) {
    ce_job j = {.out = rowmax, .logits = logits, .BT = BT, .Vl = Vl, .n_valid = n_valid};
    plait_pool_for(BT, CE_ROWS, rowmax_rows, &j);
}

void plait_k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                           int64_t Vl, int64_t n_valid) {
    ce_job j = {.out = sumexp, .logits = logits, .rows = rowmax, .BT = BT, .Vl = Vl, .n_valid = n_valid};
    plait_pool_run((BT + CE_ROWS - 1) / CE_ROWS, sumexp_item, &j);
}

void plait_k_logits_target(float *tlogit, const float *logits, const int32_t *targets,
                           int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid) {
    for (int64_t r = 0; r < BT; r++) {
        int64_t c = (int64_t)targets[r] - vocab_start;
        tlogit[r] = targets[r] >= 0 && c >= 0 && c < n_valid ? logits[r * Vl + c] : 0.0f;
    }
}

void plait_k_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp,
                       const float *tlogit, const int32_t *targets, int64_t BT, double *loss_sum) {
    /* serial: BT values, and the double sum must run in row order */
    double sum = 0.0;
    for (int64_t r = 0; r < BT; r++) {
        lse[r] = rowmax[r] + logf(sumexp[r]);
        losses[r] = targets[r] >= 0 ? lse[r] - tlogit[r] : 0.0f;
        sum += losses[r];
    }
    *loss_sum += sum;
}

void plait_k_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, int64_t vocab_start, int64_t BT,
                                   int64_t Vl, int64_t n_valid, float scale) {
    ce_job j = {.out = dlogits, .logits = logits, .rows = lse, .targets = targets, .BT = BT, .Vl = Vl,
                .n_valid = n_valid, .vocab_start = vocab_start, .scale = scale};
    plait_pool_run((BT + CE_ROWS - 1) / CE_ROWS, ce_backward_item, &j);
}

typedef struct ce_full_job {
    float *losses, *lse, *dlogits; /* lse, dlogits may be NULL */
    const float *logits;
    const int32_t *targets;
    int64_t Vl, n_valid;
    float scale;
} ce_full_job;

/* The loss (and gradient) of rows [r0, r1) with every class on this rank:
 * the vocabulary-parallel pieces' arithmetic, one row at a time (rowmax,
 * sumexp, target, loss_rows' lse and loss, crossentropy_backward), so the
 * same bits. */
static void ce_full_rows(void *vj, int64_t r0, int64_t r1) {
    const ce_full_job *j = vj;
    const int64_t Vl = j->Vl, n = j->n_valid;
    for (int64_t r = r0; r < r1; r++) {
        const float *l = j->logits + r * Vl;
        const int32_t *tg = j->targets + r;
        float m = n > 0 ? plait_max(l, n) : -INFINITY, s, t;
        ce_job row = {.out = &s, .logits = l, .rows = &m, .targets = tg, .BT = 1, .Vl = Vl, .n_valid = n,
                      .scale = j->scale};
        sumexp_rows(&row, 0, 1);
        int64_t c = *tg;
        t = *tg >= 0 && c < n ? l[c] : 0.0f;
        float lse = m + logf(s);
        if (j->lse) j->lse[r] = lse;
        j->losses[r] = *tg >= 0 ? lse - t : 0.0f;
        if (j->dlogits) {
            ce_job back = {.out = j->dlogits + r * Vl, .logits = l, .rows = &lse, .targets = tg, .BT = 1, .Vl = Vl,
                           .n_valid = n, .scale = j->scale};
            ce_backward_rows(&back, 0, 1);
        }
    }
}

void plait_k_crossentropy(float *losses, float *dlogits, const float *logits,
                          const int32_t *targets, int64_t BT, int64_t V, float dloss_scale) {
    ce_full_job j = {losses, NULL, dlogits, logits, targets, V, V, dloss_scale};
    plait_pool_for(BT, CE_ROWS, ce_full_rows, &j);
}

void plait_k_crossentropy_fused(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                                const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale) {
    ce_full_job j = {losses, lse, dlogits, logits, targets, Vl, n_valid, scale};
    plait_pool_for(BT, CE_ROWS, ce_full_rows, &j);
    double sum = 0.0; /* in row order, as loss_rows */
    for (int64_t r = 0; r < BT; r++) sum += losses[r];
    *loss_sum += sum;
}

/* ---- on bf16 logits (plait/kernels.h crossentropy_fused_bf16) ------------------ */

typedef struct ce_bf16_job {
    float *losses, *lse;
    plait_bf16 *dlogits;
    const plait_bf16 *logits;
    const int32_t *targets;
    int64_t Vl, n_valid;
    float scale;
} ce_bf16_job;

/* Each row widened into the thread's scratch, the float32 row's arithmetic
 * (ce_full_rows), its gradient rounded once into dlogits (which may be the
 * logits: the row was read first). */
static void ce_bf16_rows(void *vj, int64_t r0, int64_t r1) {
    const ce_bf16_job *j = vj;
    const int64_t Vl = j->Vl;
    float *l = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)Vl, "crossentropy_fused_bf16");
    float *d = j->dlogits ? plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS1, (size_t)Vl, "crossentropy_fused_bf16") : NULL;
    for (int64_t r = r0; r < r1; r++) {
        plait_k_widen(l, j->logits + r * Vl, Vl);
        ce_full_job row = {j->losses + r, j->lse ? j->lse + r : NULL, d, l, j->targets + r, Vl, j->n_valid, j->scale};
        ce_full_rows(&row, 0, 1);
        if (d) plait_k_narrow(j->dlogits + r * Vl, d, Vl);
    }
}

void plait_k_crossentropy_fused_bf16(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                     const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                     int64_t n_valid, float scale) {
    ce_bf16_job j = {losses, lse, dlogits, logits, targets, Vl, n_valid, scale};
    plait_pool_for(BT, CE_ROWS, ce_bf16_rows, &j);
    double sum = 0.0; /* in row order, as the float32 entry */
    for (int64_t r = 0; r < BT; r++) sum += losses[r];
    *loss_sum += sum;
}
