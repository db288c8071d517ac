/*
 * LayerNorm over the last dimension (eps 1e-5, as torch.nn.LayerNorm).
 *
 * Threading never changes results: the forward and the input gradient work
 * on blocks of whole rows; the weight and bias gradients are split by
 * columns, each column summed over the rows in row order, exactly as one
 * thread would.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_math.h"
#include "kernels/kernels_pool.h"

#define LN_EPS 1e-5f
#define LN_ROWS 32 /* rows per work item */
#define LN_COLS 64 /* columns per work item of the parameter gradients (a row's four cache lines) */

typedef struct ln_job {
    float *out, *mean, *rstd;          /* forward */
    float *dinp, *dweight, *dbias;     /* backward */
    const float *inp, *weight, *bias, *dout;
    const float *mean_in, *rstd_in;
    const float *dres; /* backward: dinp = dres + ..., dinp itself when it accumulates, NULL: 0 + ... */
    plait_bf16 *out_bf; /* the bf16 forward's output */
    int64_t BT, C;
} ln_job;

PLAIT_SIMD_CLONES static void ln_forward_rows(const ln_job *j, int64_t r0, int64_t r1) {
    /* locals: the build has -fno-strict-aliasing, so stores through `o`
     * would otherwise force reloads of the job's fields and block
     * vectorisation */
    const int64_t C = j->C;
    const float inv_c = 1.0f / (float)C;
    const float *restrict w = j->weight, *restrict b = j->bias;
    float *mean = j->mean, *rstd = j->rstd;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = j->inp + r * C;
        float *restrict o = j->out + r * C;
        float m = plait_sum(x, C) * inv_c;
        float v = plait_sumsq_centered(x, m, C) * inv_c;
        float s = 1.0f / sqrtf(v + LN_EPS);
        for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

/* dinp = dres + (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd, per
 * row (dres is dinp for layernorm_backward's +=; NULL adds to zeros) */
PLAIT_SIMD_CLONES static void ln_backward_rows(const ln_job *j, int64_t r0, int64_t r1) {
    const int64_t C = j->C;
    const float inv_c = 1.0f / (float)C;
    const float *w = j->weight;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->inp + r * C;
        const float *d = j->dout + r * C;
        float *dx = j->dinp + r * C;
        const float *base = j->dres ? j->dres + r * C : NULL;
        const float m = j->mean_in[r], s = j->rstd_in[r];
        float acc1[PLAIT_LANES] = {0}, acc2[PLAIT_LANES] = {0};
        int64_t c = 0;
        for (; c + PLAIT_LANES <= C; c += PLAIT_LANES)
            for (int l = 0; l < PLAIT_LANES; l++) {
                float n = (x[c + l] - m) * s;
                float dn = w[c + l] * d[c + l];
                acc1[l] += dn;
                acc2[l] += dn * n;
            }
        for (int l = 0; c < C; c++, l++) {
            float n = (x[c] - m) * s;
            float dn = w[c] * d[c];
            acc1[l] += dn;
            acc2[l] += dn * n;
        }
        float dn_mean = (((acc1[0] + acc1[1]) + (acc1[2] + acc1[3])) +
                         ((acc1[4] + acc1[5]) + (acc1[6] + acc1[7]))) * inv_c;
        float dnn_mean = (((acc2[0] + acc2[1]) + (acc2[2] + acc2[3])) +
                          ((acc2[4] + acc2[5]) + (acc2[6] + acc2[7]))) * inv_c;
        if (base)
            for (c = 0; c < C; c++) {
                float n = (x[c] - m) * s;
                dx[c] = base[c] + (w[c] * d[c] - dn_mean - n * dnn_mean) * s;
            }
        else
            for (c = 0; c < C; c++) {
                float n = (x[c] - m) * s;
                dx[c] = 0.0f + (w[c] * d[c] - dn_mean - n * dnn_mean) * s;
            }
    }
}

/* dweight[c] += Σ_r norm·dout, dbias[c] += Σ_r dout for c in [c0, c1),
 * each over the rows in row order; the running sums in local arrays (no
 * aliasing with the inputs, so the loop vectorises) */
PLAIT_SIMD_CLONES static void ln_param_grad_cols(const ln_job *j, int64_t c0, int64_t c1) {
    const int64_t C = j->C, n = c1 - c0;
    float *dw = j->dweight + c0, *db = j->dbias + c0;
    const float *inp = j->inp + c0, *dout = j->dout + c0, *mean = j->mean_in, *rstd = j->rstd_in;
    float aw[LN_COLS], ab[LN_COLS];
    for (int64_t c = 0; c < n; c++) aw[c] = dw[c], ab[c] = db[c];
    for (int64_t r = 0; r < j->BT; r++) {
        const float *x = inp + r * C;
        const float *d = dout + r * C;
        const float m = mean[r], s = rstd[r];
        for (int64_t c = 0; c < n; c++) {
            aw[c] += (x[c] - m) * s * d[c];
            ab[c] += d[c];
        }
    }
    for (int64_t c = 0; c < n; c++) dw[c] = aw[c], db[c] = ab[c];
}

static void ln_forward_item(void *vj, int64_t item) {
    const ln_job *j = vj;
    int64_t r0 = item * LN_ROWS, r1 = r0 + LN_ROWS < j->BT ? r0 + LN_ROWS : j->BT;
    ln_forward_rows(j, r0, r1);
}

static void ln_backward_item(void *vj, int64_t item) {
    const ln_job *j = vj;
    int64_t r0 = item * LN_ROWS, r1 = r0 + LN_ROWS < j->BT ? r0 + LN_ROWS : j->BT;
    ln_backward_rows(j, r0, r1);
}

static void ln_param_item(void *vj, int64_t item) {
    const ln_job *j = vj;
    int64_t c0 = item * LN_COLS, c1 = c0 + LN_COLS < j->C ? c0 + LN_COLS : j->C;
    ln_param_grad_cols(j, c0, c1);
}

void plait_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int64_t BT, int64_t C) {
    ln_job j = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .weight = weight,
                .bias = bias, .BT = BT, .C = C};
    plait_pool_run((BT + LN_ROWS - 1) / LN_ROWS, ln_forward_item, &j);
}

void plait_k_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int64_t BT, int64_t C) {
    ln_job j = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .inp = inp, .weight = weight,
                .dout = dout, .mean_in = mean, .rstd_in = rstd, .dres = dinp, .BT = BT, .C = C};
    /* the two parts are independent (a split backward runs them apart) */
    if (dinp) plait_pool_run((BT + LN_ROWS - 1) / LN_ROWS, ln_backward_item, &j);
    if (dweight) plait_pool_run((C + LN_COLS - 1) / LN_COLS, ln_param_item, &j);
}

void plait_k_layernorm_backward_fused(float *dinp, const float *dres, float *dweight, float *dbias,
                                      const float *dout, const float *inp, const float *weight, const float *mean,
                                      const float *rstd, int64_t BT, int64_t C) {
    /* the CPU gains nothing from one pass: layernorm_backward's two parts,
     * the residual added where it adds into dinp (the same bits); either
     * half alone where the other's output is NULL (a split backward's) */
    ln_job j = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .inp = inp, .weight = weight,
                .dout = dout, .mean_in = mean, .rstd_in = rstd, .dres = dres, .BT = BT, .C = C};
    if (dinp) plait_pool_run((BT + LN_ROWS - 1) / LN_ROWS, ln_backward_item, &j);
    if (dweight) plait_pool_run((C + LN_COLS - 1) / LN_COLS, ln_param_item, &j);
}

/* ---- on bf16 activations (plait/kernels.h, ABI 1.8 and 1.9) ------------------ */

/* The forward's rows in float32 in the thread's scratch, rounded once */
static void ln_forward_bf16_item(void *vj, int64_t item) {
    const ln_job *j = vj;
    const int64_t r0 = item * LN_ROWS, rows = (r0 + LN_ROWS < j->BT ? r0 + LN_ROWS : j->BT) - r0, C = j->C;
    float *o = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(rows * C), "layernorm_forward_bf16");
    ln_job part = {.out = o,
                   .mean = j->mean ? j->mean + r0 : NULL,
                   .rstd = j->rstd ? j->rstd + r0 : NULL,
                   .inp = j->inp + r0 * C,
                   .weight = j->weight,
                   .bias = j->bias,
                   .BT = rows,
                   .C = C};
    ln_forward_rows(&part, 0, rows);
    plait_k_narrow(j->out_bf + r0 * C, o, rows * C);
}

void plait_k_layernorm_forward_bf16(plait_bf16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                                    const float *bias, int64_t BT, int64_t C) {
    ln_job j = {
        .mean = mean, .rstd = rstd, .inp = inp, .weight = weight, .bias = bias, .out_bf = out, .BT = BT, .C = C};
    plait_pool_run((BT + LN_ROWS - 1) / LN_ROWS, ln_forward_bf16_item, &j);
}

/* The backward reads dout by rows and, for the parameters' gradients, by
 * columns: it is widened whole into the caller's scratch (exact), and the
 * float32 entry runs on it. */
void plait_k_layernorm_backward_fused_bf16(float *dinp, const float *dres, float *dweight, float *dbias,
                                           const plait_bf16 *dout, const float *inp, const float *weight,
                                           const float *mean, const float *rstd, int64_t BT, int64_t C) {
    float *d = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS3, (size_t)(BT * C), "layernorm_backward_fused_bf16");
    plait_k_from_bf16(d, dout, (size_t)(BT * C));
    plait_k_layernorm_backward_fused(dinp, dres, dweight, dbias, d, inp, weight, mean, rstd, BT, C);
}

void plait_k_layernorm_backward_fused_bf16_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres, float *dweight,
                                                float *dbias, const plait_bf16 *dout, const float *inp,
                                                const float *weight, const float *mean, const float *rstd, int64_t BT,
                                                int64_t C) {
    plait_k_layernorm_backward_fused_bf16(dinp, dres, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
    plait_k_to_bf16(dinp_bf, dinp, (size_t)(BT * C));
}
