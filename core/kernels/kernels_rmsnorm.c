/*
 * RMSNorm over the last dimension (Llama's norm: no mean, no bias; eps is
 * the model's norm_eps).
 *
 * Threading never changes results, as for LayerNorm (kernels_norm.c): the
 * forward and the input gradient work on blocks of whole rows; the weight
 * gradient is split by columns, each column summed over the rows in row
 * order, exactly as one thread would.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

#define RMS_ROWS 32 /* rows per work item */
#define RMS_COLS 64 /* columns per work item of the weight gradient (a row's four cache lines) */

typedef struct rms_job {
    float *out, *rstd;     /* forward */
    float *dinp, *dweight; /* backward */
    const float *inp, *weight, *dout, *rstd_in;
    const float *dres; /* backward: dinp = dres + ..., NULL: 0 + ... */
    plait_bf16 *out_bf; /* the bf16 forward's output */
    int64_t BT, C;
    float eps;
} rms_job;

PLAIT_SIMD_CLONES static void rms_forward_rows(const rms_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->C;
    const float inv_c = 1.0f / (float)C;
    const float *restrict w = j->weight;
    float *rstd = j->rstd;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = j->inp + r * C;
        float *restrict o = j->out + r * C;
        const float s = 1.0f / sqrtf(plait_sumsq_centered(x, 0.0f, C) * inv_c + j->eps);
        for (int64_t c = 0; c < C; c++) o[c] = x[c] * s * w[c];
        if (rstd) rstd[r] = s;
    }
}

/* y = x·s·w with s = (mean(x²) + eps)^-1/2: dx = s·(w·dy) − x·s³·mean(w·dy·x) */
PLAIT_SIMD_CLONES static void rms_backward_rows(const rms_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->C;
    const float *w = j->weight;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->inp + r * C, *d = j->dout + r * C;
        const float *base = j->dres ? j->dres + r * C : NULL;
        float *dx = j->dinp + r * C;
        const float s = j->rstd_in[r], k = plait_dot3(w, d, x, C) / (float)C * s * s;
        for (int64_t c = 0; c < C; c++) dx[c] = (base ? base[c] : 0.0f) + (w[c] * d[c] - x[c] * k) * s;
    }
}

/* dweight[c] += Σ_r dout·x·rstd for c in [c0, c1) */
PLAIT_SIMD_CLONES static void rms_weight_grad_cols(const rms_job *j, int64_t c0, int64_t c1) {
    const int64_t C = j->C, n = c1 - c0;
    float *dw = j->dweight + c0;
    const float *inp = j->inp + c0, *dout = j->dout + c0, *rstd = j->rstd_in;
    float acc[RMS_COLS]; /* the running sums apart from the inputs: the loop vectorises */
    for (int64_t c = 0; c < n; c++) acc[c] = dw[c];
    for (int64_t r = 0; r < j->BT; r++) {
        const float *x = inp + r * C;
        const float *d = dout + r * C;
        const float s = rstd[r];
        for (int64_t c = 0; c < n; c++) acc[c] += x[c] * s * d[c];
    }
    for (int64_t c = 0; c < n; c++) dw[c] = acc[c];
}

static void rms_forward_item(void *vj, int64_t item) {
    const rms_job *j = vj;
    const int64_t r0 = item * RMS_ROWS, r1 = r0 + RMS_ROWS < j->BT ? r0 + RMS_ROWS : j->BT;
    rms_forward_rows(j, r0, r1);
}

static void rms_backward_item(void *vj, int64_t item) {
    const rms_job *j = vj;
    const int64_t r0 = item * RMS_ROWS, r1 = r0 + RMS_ROWS < j->BT ? r0 + RMS_ROWS : j->BT;
    rms_backward_rows(j, r0, r1);
}

static void rms_weight_item(void *vj, int64_t item) {
    const rms_job *j = vj;
    const int64_t c0 = item * RMS_COLS, c1 = c0 + RMS_COLS < j->C ? c0 + RMS_COLS : j->C;
    rms_weight_grad_cols(j, c0, c1);
}

void plait_k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C,
                             float eps) {
    rms_job j = {.out = out, .rstd = rstd, .inp = inp, .weight = weight, .BT = BT, .C = C, .eps = eps};
    plait_pool_run((BT + RMS_ROWS - 1) / RMS_ROWS, rms_forward_item, &j);
}

void plait_k_rmsnorm_backward(float *dinp, const float *dres, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int64_t BT, int64_t C) {
    rms_job j = {.dinp = dinp,
                 .dweight = dweight,
                 .inp = inp,
                 .weight = weight,
                 .dout = dout,
                 .rstd_in = rstd,
                 .dres = dres,
                 .BT = BT,
                 .C = C};
    /* the two parts are independent (a split backward runs them apart) */
    if (dinp) plait_pool_run((BT + RMS_ROWS - 1) / RMS_ROWS, rms_backward_item, &j);
    if (dweight) plait_pool_run((C + RMS_COLS - 1) / RMS_COLS, rms_weight_item, &j);
}

/* ---- on bf16 (rmsnorm_forward_bf16, rmsnorm_backward_bf16) ------------------ */

/* The forward's rows in float32 in the thread's scratch, rounded once */
static void rms_forward_bf16_item(void *vj, int64_t item) {
    const rms_job *j = vj;
    const int64_t r0 = item * RMS_ROWS, rows = (r0 + RMS_ROWS < j->BT ? r0 + RMS_ROWS : j->BT) - r0, C = j->C;
    float *o = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(rows * C), "rmsnorm_forward_bf16");
    rms_job part = {.out = o,
                    .rstd = j->rstd ? j->rstd + r0 : NULL,
                    .inp = j->inp + r0 * C,
                    .weight = j->weight,
                    .BT = rows,
                    .C = C,
                    .eps = j->eps};
    rms_forward_rows(&part, 0, rows);
    plait_k_narrow(j->out_bf + r0 * C, o, rows * C);
}

void plait_k_rmsnorm_forward_bf16(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                                  int64_t C, float eps) {
    rms_job j = {.out_bf = out, .rstd = rstd, .inp = inp, .weight = weight, .BT = BT, .C = C, .eps = eps};
    plait_pool_run((BT + RMS_ROWS - 1) / RMS_ROWS, rms_forward_bf16_item, &j);
}

/* dout read by rows and by columns: widened whole into the caller's
 * scratch (exact), then the float32 entry */
void plait_k_rmsnorm_backward_bf16(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout,
                                   const float *inp, const float *weight, const float *rstd, int64_t BT, int64_t C) {
    float *d = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS3, (size_t)(BT * C), "rmsnorm_backward_bf16");
    plait_k_from_bf16(d, dout, (size_t)(BT * C));
    plait_k_rmsnorm_backward(dinp, dres, dweight, d, inp, weight, rstd, BT, C);
}
