/*
 * LayerNorm over the last dimension (eps 1e-5, as torch.nn.LayerNorm).
 * Forward rows are independent; the backward's weight and bias gradients
 * sum over rows in row order, so results never depend on threading.
 */
#include <math.h>

#include "model/kernels.h"
#include "model/kernels_math.h"

#define LN_EPS 1e-5f

void plait_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int64_t BT, int64_t C) {
    const float inv_c = 1.0f / (float)C;
    for (int64_t r = 0; r < BT; r++) {
        const float *x = inp + r * C;
        float *o = out + r * C;
        float m = plait_sum(x, C) * inv_c;
        float v = plait_sumsq_centered(x, m, C) * inv_c;
        float s = 1.0f / sqrtf(v + LN_EPS);
        for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

void plait_k_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean,
                                const float *rstd, int64_t BT, int64_t C) {
    const float inv_c = 1.0f / (float)C;
    for (int64_t r = 0; r < BT; r++) {
        const float *x = inp + r * C;
        const float *d = dout + r * C;
        float *dx = dinp + r * C;
        const float m = mean[r], s = rstd[r];
        /* Σ w·dout and Σ w·dout·norm over the row, fixed order */
        float acc1[PLAIT_LANES] = {0}, acc2[PLAIT_LANES] = {0};
        int64_t c = 0;
        for (; c + PLAIT_LANES <= C; c += PLAIT_LANES)
            for (int l = 0; l < PLAIT_LANES; l++) {
                float n = (x[c + l] - m) * s;
                float dn = weight[c + l] * d[c + l];
                acc1[l] += dn;
                acc2[l] += dn * n;
            }
        for (int l = 0; c < C; c++, l++) {
            float n = (x[c] - m) * s;
            float dn = weight[c] * d[c];
            acc1[l] += dn;
            acc2[l] += dn * n;
        }
        float dn_mean = (((acc1[0] + acc1[1]) + (acc1[2] + acc1[3])) +
                         ((acc1[4] + acc1[5]) + (acc1[6] + acc1[7]))) * inv_c;
        float dnn_mean = (((acc2[0] + acc2[1]) + (acc2[2] + acc2[3])) +
                          ((acc2[4] + acc2[5]) + (acc2[6] + acc2[7]))) * inv_c;
        for (c = 0; c < C; c++) {
            float n = (x[c] - m) * s;
            float dn = weight[c] * d[c];
            dx[c] += (dn - dn_mean - n * dnn_mean) * s;
            dweight[c] += n * d[c];
            dbias[c] += d[c];
        }
    }
}
