/*
 * Token + position embeddings and their gradients, whole-vocabulary or
 * vocabulary-parallel (wte holds rows [vocab_start, vocab_start+n_rows);
 * n_rows = INT64_MAX for the whole table).
 *
 * The token-table gradient is deterministic without atomics: EMB_OWNERS
 * blocks each own the table rows r with r % EMB_OWNERS == block, and every
 * block walks all tokens in order (staged through shared memory), adding
 * the rows it owns, each thread its own columns. So every dwte element
 * receives its additions in token order from one thread: the same sums as
 * the CPU kernel, in the same order, whatever the table size (which the
 * whole-vocabulary call does not pass).
 */
#include "kcommon.cuh"

#define EMB_OWNERS 1024
#define EMB_TILE 2048

PC_KERNEL(emb_forward_kernel, PC_THREADS)(float *out, const int32_t *tokens, const float *wte, int64_t vocab_start,
                                          int64_t n_rows, const float *wpe, int64_t T, size_t BT, int64_t C) {
    PC_GRID_STRIDE(k, BT * (size_t)C) {
        size_t i = k / (size_t)C;
        int64_t c = (int64_t)(k % (size_t)C);
        int64_t row = (int64_t)tokens[i] - vocab_start;
        float e = row >= 0 && row < n_rows ? wte[row * C + c] : 0.0f;
        out[k] = wpe ? e + wpe[(int64_t)(i % (size_t)T) * C + c] : e;
    }
}

PC_KERNEL(dwte_kernel, PC_THREADS)(float *dwte, const float *dout, const int32_t *tokens, int64_t vocab_start,
                                   int64_t n_rows, int64_t BT, int64_t C) {
    __shared__ int64_t rows[EMB_TILE];
    const int64_t owner = blockIdx.x, owners = gridDim.x;
    for (int64_t t0 = 0; t0 < BT; t0 += EMB_TILE) {
        int64_t len = BT - t0 < EMB_TILE ? BT - t0 : EMB_TILE;
        __syncthreads(); /* the previous tile is done with */
        for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
            int64_t r = (int64_t)tokens[t0 + k] - vocab_start;
            rows[k] = r >= 0 && r < n_rows && r % owners == owner ? r : -1;
        }
        __syncthreads();
        for (int64_t k = 0; k < len; k++) {
            int64_t r = rows[k];
            if (r < 0) continue;
            const float *d = dout + (t0 + k) * C;
            float *g = dwte + r * C;
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x) g[c] += d[c];
        }
    }
}

/* dwpe[t][c] += dout[b][t][c] for b in order */
PC_KERNEL(dwpe_kernel, PC_THREADS)(float *dwpe, const float *dout, int64_t B, int64_t T, int64_t C) {
    PC_GRID_STRIDE(k, (size_t)(T * C)) {
        float acc = dwpe[k];
        for (int64_t b = 0; b < B; b++) acc += dout[(size_t)(b * T * C) + k];
        dwpe[k] = acc;
    }
}

PC_KERNEL(add_positions_kernel, PC_THREADS)(float *out, const float *wpe, size_t n, size_t TC) {
    PC_GRID_STRIDE(k, n) out[k] += wpe[k % TC];
}

extern "C" {

void pc_launch_embedding_forward(float *out, const int32_t *tokens, const float *wte, int64_t vocab_start,
                                 int64_t n_rows, const float *wpe, int64_t B, int64_t T, int64_t C) {
    size_t n = (size_t)(B * T * C);
    if (!n) return;
    PC_LAUNCH(emb_forward_kernel, pc_blocks(n), PC_THREADS)(
        out, tokens, wte, vocab_start, n_rows, wpe, T, (size_t)(B * T), C);
    pc_check_launch("embedding_forward");
}

void pc_launch_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                  int64_t vocab_start, int64_t n_rows, int64_t B, int64_t T, int64_t C) {
    if (B * T * C <= 0) return;
    if (dwte) {
        unsigned owners = n_rows < EMB_OWNERS ? (unsigned)(n_rows > 0 ? n_rows : 1) : EMB_OWNERS;
        PC_LAUNCH(dwte_kernel, owners, PC_THREADS)(dwte, dout, tokens, vocab_start, n_rows, B * T, C);
    }
    if (dwpe) PC_LAUNCH(dwpe_kernel, pc_blocks((size_t)(T * C)), PC_THREADS)(dwpe, dout, B, T, C);
    pc_check_launch("embedding_backward");
}

void pc_launch_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    size_t n = (size_t)(B * T * C);
    if (!n) return;
    PC_LAUNCH(add_positions_kernel, pc_blocks(n), PC_THREADS)(out, wpe, n, (size_t)(T * C));
    pc_check_launch("add_positions");
}

} /* extern "C" */
