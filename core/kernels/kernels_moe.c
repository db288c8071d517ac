/*
 * The mixture of experts' kernels on the CPU (plait/kernels.h, ABI 1.21):
 * the router's top k and its backward, the rows permuted by expert and
 * back, and the grouped product over the experts' rows. The arithmetic and
 * its order are the reference every device is held to (the cuda device's
 * in plugins/device/cuda/moe.cu): the router's exponentials and sums in
 * double, one token's experts in index order, each token's routes added
 * in the order of expert index. core/model/moe.c composes them.
 *
 * The per-token loops are single-threaded: a token's work is E or C
 * operations, small beside the experts' products, which the grouped
 * product hands to matmul_forward/_backward (threaded, deterministic).
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

/* Scores, log-sum-exp and the top k of token n. */
static void route_token(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                        int64_t n, int64_t E, int64_t k, int sigmoid) {
    const float *z = logits + n * E;
    float *s = scores + n * E;
    double mx = z[0], sum = 0.0;
    for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += exp((double)z[e] - mx);
    lse[n] = (float)(mx + log(sum));
    for (int64_t e = 0; e < E; e++)
        s[e] = sigmoid ? (float)(1.0 / (1.0 + exp(-(double)z[e]))) : (float)(exp((double)z[e] - mx) / sum);
    int32_t *id = idx + n * k;
    for (int64_t j = 0; j < k; j++) { /* the k highest score + bias, ties to the lower index */
        int32_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++) taken |= id[i] == e;
            if (!taken && (best < 0 || s[e] + bias[e] > s[best] + bias[best])) best = (int32_t)e;
        }
        id[j] = best;
    }
    for (int64_t j = 1; j < k; j++) /* ascending: the combine's order */
        for (int64_t i = j; i > 0 && id[i - 1] > id[i]; i--) {
            int32_t t = id[i];
            id[i] = id[i - 1];
            id[i - 1] = t;
        }
    double g = 0.0;
    for (int64_t j = 0; j < k; j++) g += s[id[j]];
    for (int64_t j = 0; j < k; j++) gate[n * k + j] = k > 1 ? (float)(s[id[j]] / g) : s[id[j]];
}

void plait_k_moe_route(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                       int64_t N, int64_t E, int64_t k, int sigmoid) {
    for (int64_t n = 0; n < N; n++) route_token(scores, lse, idx, gate, logits, bias, n, E, k, sigmoid);
}

/* The routes' rows: x float32 (xf) or rounded to bf16 (xh) */
static void permute_rows(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *xf, plait_bf16 *xh,
                         const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                         int64_t capacity) {
    for (int64_t e = 0; e <= E; e++) off[e] = 0;
    for (int64_t e = 0; e < E; e++) routed[e] = 0.0f;
    for (int64_t r = 0; r < N * k; r++) { /* kept routes counted in off[e+1] */
        const int32_t e = idx[r];
        routed[e] += 1.0f;
        row[r] = off[e + 1] < capacity ? (off[e + 1]++, 0) : -1;
    }
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    /* off[e] is expert e's next row while the rows fill (it ends at the
     * first row of e + 1), shifted back after */
    for (int64_t r = 0; r < N * k; r++) {
        if (row[r] < 0) continue;
        const int32_t e = idx[r], at = off[e]++;
        row[r] = at;
        tok[at] = (int32_t)(r / k);
        if (xh) plait_k_narrow(xh + (int64_t)at * C, inp + (r / k) * C, C);
        else memcpy(xf + (int64_t)at * C, inp + (r / k) * C, (size_t)C * sizeof(float));
    }
    for (int64_t e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;
}

void plait_k_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx,
                         const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity) {
    permute_rows(row, tok, off, routed, x, NULL, idx, inp, N, E, k, C, capacity);
}

void plait_k_moe_unpermute(float *out, const float *res, const float *shared, const float *y, const int32_t *row,
                           const float *gate, int64_t N, int64_t k, int64_t C) {
    for (int64_t n = 0; n < N; n++) {
        float *o = out + n * C;
        if (o != res + n * C) memcpy(o, res + n * C, (size_t)C * sizeof(float));
        if (shared)
            for (int64_t c = 0; c < C; c++) o[c] += shared[n * C + c];
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            const float g = gate[n * k + j];
            if (r < 0) continue;
            for (int64_t c = 0; c < C; c++) o[c] += g * y[(int64_t)r * C + c];
        }
    }
}

void plait_k_moe_unpermute_backward(float *dy_rows, double *dgate, const float *dout, const float *y,
                                    const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            dgate[n * k + j] = 0.0;
            if (r < 0) continue;
            const float gt = gate[n * k + j];
            double dot = 0.0;
            for (int64_t c = 0; c < C; c++) {
                dy_rows[(int64_t)r * C + c] = gt * dout[n * C + c];
                dot += (double)dout[n * C + c] * (double)y[(int64_t)r * C + c];
            }
            dgate[n * k + j] = dot;
        }
}

void plait_k_moe_permute_backward(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            if (r < 0) continue;
            for (int64_t c = 0; c < C; c++) dinp[n * C + c] += dx[(int64_t)r * C + c];
        }
}

void plait_k_moe_route_backward(float *dlogits, const double *dgate, const float *logits, const float *scores,
                                const float *lse, const int32_t *idx, const float *gate, const float *routed, int64_t N,
                                int64_t E, int64_t k, int sigmoid, double aux, double z, double share) {
    for (int64_t n = 0; n < N; n++) {
        const float *s = scores + n * E;
        const int32_t *id = idx + n * k;
        const double *dg = dgate + n * k;
        /* the gates' share of score j's gradient: g_j = s_j / Σ s gives
         * d s_j = (dg_j - Σ_l dg_l g_l) / Σ s */
        double sum = 0.0, dot = 0.0;
        for (int64_t j = 0; k > 1 && j < k; j++) sum += s[id[j]];
        for (int64_t j = 0; k > 1 && j < k; j++) dot += dg[j] * gate[n * k + j];
        double sds = 0.0;
        for (int pass = 0; pass < 2; pass++) /* pass 0: Σ s·ds; pass 1: the logits' gradients */
            for (int64_t e = 0; e < E; e++) {
                double ds = aux * (double)E * (double)routed[e] / ((double)N * (double)N * (double)k) * share;
                for (int64_t j = 0; j < k; j++)
                    if (id[j] == e) ds += k > 1 ? (dg[j] - dot) / sum : dg[0];
                const double se = s[e];
                if (pass == 0) {
                    sds += se * ds;
                    continue;
                }
                double g = sigmoid ? ds * se * (1.0 - se) : se * (ds - sds);
                /* z-loss: d(lse²) = 2 lse softmax */
                const double p = exp((double)logits[n * E + e] - (double)lse[n]);
                g += z * 2.0 * (double)lse[n] * p / (double)N * share;
                dlogits[n * E + e] = (float)g;
            }
    }
}

void plait_k_moe_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                                const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            plait_k_matmul_forward(out + r0 * OC, inp + r0 * C, weight + e * OC * C, bias ? bias + e * OC : NULL, n, C,
                                   OC);
    }
}

void plait_k_moe_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                 const float *weight, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            plait_k_matmul_backward(dinp ? dinp + r0 * C : NULL, dweight ? dweight + e * OC * C : NULL,
                                    dbias ? dbias + e * OC : NULL, dout + r0 * OC, inp + r0 * C,
                                    weight ? weight + e * OC * C : NULL, n, C, OC);
    }
}

/* ---- on bf16 activations (plait/kernels_moe.h, ABI 1.29) --------------------
 * The float32 entries' loops with each bf16 row widened into the thread's
 * scratch as it is read and each bf16 output row rounded once; the grouped
 * products expert by expert on kernels_matmul_bf16.c's tiles. */

void plait_k_moe_permute_bf16(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x,
                              const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                              int64_t capacity) {
    permute_rows(row, tok, off, routed, NULL, x, idx, inp, N, E, k, C, capacity);
}

void plait_k_moe_unpermute_bf16(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                                const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    float *w = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)C, "moe_unpermute_bf16");
    for (int64_t n = 0; n < N; n++) {
        float *o = out + n * C;
        if (o != res + n * C) memcpy(o, res + n * C, (size_t)C * sizeof(float));
        if (shared) {
            plait_k_widen(w, shared + n * C, C);
            for (int64_t c = 0; c < C; c++) o[c] += w[c];
        }
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            const float g = gate[n * k + j];
            if (r < 0) continue;
            plait_k_widen(w, y + (int64_t)r * C, C);
            for (int64_t c = 0; c < C; c++) o[c] += g * w[c];
        }
    }
}

void plait_k_moe_unpermute_backward_bf16(plait_bf16 *dy_rows, double *dgate, const float *dout, const plait_bf16 *y,
                                         const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    float *w = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)(2 * C), "moe_unpermute_backward_bf16");
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            dgate[n * k + j] = 0.0;
            if (r < 0) continue;
            const float gt = gate[n * k + j];
            plait_k_widen(w, y + (int64_t)r * C, C);
            double dot = 0.0;
            for (int64_t c = 0; c < C; c++) {
                w[C + c] = gt * dout[n * C + c];
                dot += (double)dout[n * C + c] * (double)w[c];
            }
            plait_k_narrow(dy_rows + (int64_t)r * C, w + C, C);
            dgate[n * k + j] = dot;
        }
}

void plait_k_moe_permute_backward_bf16(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k,
                                       int64_t C) {
    float *w = plait_k_scratch_or_die(PLAIT_K_SLOT_ROWS0, (size_t)C, "moe_permute_backward_bf16");
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            if (r < 0) continue;
            plait_k_widen(w, dx + (int64_t)r * C, C);
            for (int64_t c = 0; c < C; c++) dinp[n * C + c] += w[c];
        }
}

void plait_k_moe_matmul_forward_bf16(plait_bf16 *out, int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                     const plait_bf16 *bias, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            plait_k_matmul_forward_bf16_ld(out + r0 * ldo, ldo, inp + r0 * C, weight + e * OC * C,
                                           bias ? bias + e * OC : NULL, n, C, OC);
    }
}

void plait_k_moe_matmul_backward_bf16(plait_bf16 *dinp, float *dweight, float *dbias, const plait_bf16 *dout,
                                      int64_t ldo, const plait_bf16 *inp, const plait_bf16 *weight,
                                      const plait_bf16 *pre, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    for (int64_t e = 0; e < E; e++) {
        const int64_t r0 = off[e], n = off[e + 1] - r0;
        if (n > 0)
            plait_k_matmul_backward_bf16_ld(dinp ? dinp + r0 * C : NULL, dweight ? dweight + e * OC * C : NULL,
                                            dbias ? dbias + e * OC : NULL, dout + r0 * ldo, ldo, inp + r0 * C,
                                            dinp ? weight + e * OC * C : NULL, dinp && pre ? pre + r0 * C : NULL, n, C,
                                            OC);
    }
}
