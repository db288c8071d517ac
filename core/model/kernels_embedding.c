/*
 * Token + position embeddings, and their vocabulary-parallel form (each TP
 * rank holds a slice of the token table's rows). Gradients are summed in
 * token order: deterministic.
 */
#include <string.h>

#include "model/kernels.h"

void plait_k_embedding_forward_vocab(float *out, const int32_t *tokens, const float *wte,
                                     int64_t vocab_start, int64_t n_rows, const float *wpe,
                                     int64_t B, int64_t T, int64_t C) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float *o = out + (b * T + t) * C;
            int64_t row = (int64_t)tokens[b * T + t] - vocab_start;
            const float *p = wpe ? wpe + t * C : NULL;
            if (row >= 0 && row < n_rows) {
                const float *e = wte + row * C;
                if (p)
                    for (int64_t c = 0; c < C; c++) o[c] = e[c] + p[c];
                else
                    memcpy(o, e, (size_t)C * sizeof *o);
            } else if (p) {
                memcpy(o, p, (size_t)C * sizeof *o);
            } else {
                memset(o, 0, (size_t)C * sizeof *o);
            }
        }
}

void plait_k_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_forward_vocab(out, tokens, wte, 0, INT64_MAX, wpe, B, T, C);
}

void plait_k_embedding_backward_vocab(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t vocab_start, int64_t n_rows,
                                      int64_t B, int64_t T, int64_t C) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *d = dout + (b * T + t) * C;
            int64_t row = (int64_t)tokens[b * T + t] - vocab_start;
            if (dwte && row >= 0 && row < n_rows) {
                float *g = dwte + row * C;
                for (int64_t c = 0; c < C; c++) g[c] += d[c];
            }
            if (dwpe) {
                float *g = dwpe + t * C;
                for (int64_t c = 0; c < C; c++) g[c] += d[c];
            }
        }
}

void plait_k_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_backward_vocab(dwte, dwpe, dout, tokens, 0, INT64_MAX, B, T, C);
}

void plait_k_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float *o = out + (b * T + t) * C;
            const float *p = wpe + t * C;
            for (int64_t c = 0; c < C; c++) o[c] += p[c];
        }
}
