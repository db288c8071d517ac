/*
 * Token + position embeddings, and their vocabulary-parallel form (each TP
 * rank holds a slice of the token table's rows). Gradients are summed in
 * token order: deterministic. Threaded without changing any sum: the
 * forward by blocks of token positions; the backward by blocks of table
 * rows, each block scanning every token in order and adding only those of
 * its own rows, so each row gets the same additions in the same order as
 * one thread would give it.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_pool.h"

#define EMB_ROWS 64  /* token positions per work item (forward) */
#define EMB_TABLE 8  /* table rows per work item (backward), at least */
#define EMB_BLOCKS 128

typedef struct emb_job {
    float *out, *dwte, *dwpe;
    const float *wte, *wpe, *dout;
    const int32_t *tokens;
    int64_t vocab_start, n_rows, T, C;
} emb_job;

static void forward_rows(void *vj, int64_t i0, int64_t i1) {
    const emb_job *j = vj;
    const int64_t C = j->C;
    for (int64_t i = i0; i < i1; i++) {
        float *o = j->out + i * C;
        int64_t row = (int64_t)j->tokens[i] - j->vocab_start;
        const float *p = j->wpe ? j->wpe + (i % j->T) * C : NULL;
        if (row >= 0 && row < j->n_rows) {
            const float *e = j->wte + row * C;
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

void plait_k_embedding_forward_vocab(float *out, const int32_t *tokens, const float *wte,
                                     int64_t vocab_start, int64_t n_rows, const float *wpe,
                                     int64_t B, int64_t T, int64_t C) {
    emb_job j = {.out = out, .wte = wte, .wpe = wpe, .tokens = tokens, .vocab_start = vocab_start,
                 .n_rows = n_rows, .T = T, .C = C};
    plait_pool_for(B * T, EMB_ROWS, forward_rows, &j);
}

void plait_k_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_forward_vocab(out, tokens, wte, 0, INT64_MAX, wpe, B, T, C);
}

/* dwte rows [r0, r1) (local indices): every token of those rows, in order */
static void dwte_rows(void *vj, int64_t r0, int64_t r1) {
    const emb_job *j = vj;
    const int64_t C = j->C, n = j->n_rows; /* n_rows: tokens here (B·T) */
    for (int64_t i = 0; i < n; i++) {
        int64_t row = (int64_t)j->tokens[i] - j->vocab_start;
        if (row < r0 || row >= r1) continue;
        const float *d = j->dout + i * C;
        float *g = j->dwte + row * C;
        for (int64_t c = 0; c < C; c++) g[c] += d[c];
    }
}

/* dwpe rows [t0, t1): for each position, the sequences in order */
static void dwpe_rows(void *vj, int64_t t0, int64_t t1) {
    const emb_job *j = vj;
    const int64_t C = j->C, T = j->T, B = j->n_rows / T;
    for (int64_t t = t0; t < t1; t++) {
        float *g = j->dwpe + t * C;
        for (int64_t b = 0; b < B; b++) {
            const float *d = j->dout + (b * T + t) * C;
            for (int64_t c = 0; c < C; c++) g[c] += d[c];
        }
    }
}

void plait_k_embedding_backward_vocab(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t vocab_start, int64_t n_rows,
                                      int64_t B, int64_t T, int64_t C) {
    emb_job j = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tokens = tokens,
                 .vocab_start = vocab_start, .n_rows = B * T, .T = T, .C = C};
    if (dwte) {
        /* the table's row count bounds the blocks; with the whole
         * vocabulary (n_rows = INT64_MAX) it is the largest token + 1 */
        int64_t rows = n_rows;
        if (rows == INT64_MAX) {
            rows = 0;
            for (int64_t i = 0; i < B * T; i++)
                if ((int64_t)tokens[i] - vocab_start + 1 > rows) rows = (int64_t)tokens[i] - vocab_start + 1;
        }
        /* at most EMB_BLOCKS blocks: each one scans all B·T tokens */
        int64_t chunk = (rows + EMB_BLOCKS - 1) / EMB_BLOCKS;
        plait_pool_for(rows, chunk > EMB_TABLE ? chunk : EMB_TABLE, dwte_rows, &j);
    }
    if (dwpe) plait_pool_for(T, EMB_TABLE, dwpe_rows, &j);
}

void plait_k_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                const int32_t *tokens, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_backward_vocab(dwte, dwpe, dout, tokens, 0, INT64_MAX, B, T, C);
}

static void add_positions_rows(void *vj, int64_t i0, int64_t i1) {
    const emb_job *j = vj;
    const int64_t C = j->C;
    for (int64_t i = i0; i < i1; i++) {
        float *o = j->out + i * C;
        const float *p = j->wpe + (i % j->T) * C;
        for (int64_t c = 0; c < C; c++) o[c] += p[c];
    }
}

void plait_k_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    emb_job j = {.out = out, .wpe = wpe, .T = T, .C = C};
    plait_pool_for(B * T, EMB_ROWS, add_positions_rows, &j);
}
