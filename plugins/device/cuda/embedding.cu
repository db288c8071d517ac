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
 *
 * Every kernel takes 4 columns at a time (16-byte loads and stores) where
 * the width is a multiple of 4 and the rows start 16-byte aligned, else
 * one; each element gets the same additions in the same order either way,
 * so the bits are the same.
 */
#include "kcommon.cuh"

#define EMB_OWNERS 1024
#define EMB_TILE 2048

/* V (1 or 4) columns at a time: with 4, C a multiple of 4 and every row
 * 16-byte aligned (the launcher checks), one float4 load of each table row
 * and one store; the same sum for each element either way. */
template <int V>
PC_KERNEL_T(PC_THREADS)
emb_forward_kernel(float *out, const int32_t *tokens, const float *wte, int64_t vocab_start, int64_t n_rows,
                   const float *wpe, int64_t T, size_t BT, int64_t C) {
    const int64_t G = C / V; /* groups a row */
    PC_GRID_STRIDE(k, BT * (size_t)G) {
        const size_t i = k / (size_t)G;
        const int64_t c = (int64_t)(k % (size_t)G) * V;
        const int64_t row = (int64_t)tokens[i] - vocab_start;
        float e[V], p[V];
        if (row >= 0 && row < n_rows)
            pc_ld(e, wte + row * C + c);
        else
            for (int u = 0; u < V; u++) e[u] = 0.0f;
        if (wpe) {
            pc_ld(p, wpe + (int64_t)(i % (size_t)T) * C + c);
            for (int u = 0; u < V; u++) e[u] += p[u];
        }
        pc_st(out + i * (size_t)C + c, e);
    }
}

template <int V>
PC_KERNEL_T(PC_THREADS)
dwte_kernel(float *dwte, const float *dout, const int32_t *tokens, int64_t vocab_start, int64_t n_rows, int64_t BT,
            int64_t C) {
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
            for (int64_t c = (int64_t)threadIdx.x * V; c < C; c += (int64_t)blockDim.x * V) {
                float gv[V], dv[V];
                pc_ld(gv, g + c);
                pc_ld(dv, d + c);
                for (int u = 0; u < V; u++) gv[u] += dv[u];
                pc_st(g + c, gv);
            }
        }
    }
}

/* dwpe[t][c] += dout[b][t][c] for b in order (V columns a thread) */
template <int V>
PC_KERNEL_T(PC_THREADS)
dwpe_kernel(float *dwpe, const float *dout, int64_t B, int64_t T, int64_t C) {
    PC_GRID_STRIDE(k, (size_t)(T * C) / V) {
        const size_t e = k * V;
        float acc[V], d[V];
        pc_ld(acc, dwpe + e);
        for (int64_t b = 0; b < B; b++) {
            pc_ld(d, dout + (size_t)(b * T * C) + e);
            for (int u = 0; u < V; u++) acc[u] += d[u];
        }
        pc_st(dwpe + e, acc);
    }
}

/* out[b][t] += wpe[t] (V columns a thread) */
template <int V>
PC_KERNEL_T(PC_THREADS)
add_positions_kernel(float *out, const float *wpe, size_t n, size_t TC) {
    PC_GRID_STRIDE(k, n / V) {
        const size_t e = k * V;
        float o[V], p[V];
        pc_ld(o, out + e);
        pc_ld(p, wpe + e % TC);
        for (int u = 0; u < V; u++) o[u] += p[u];
        pc_st(out + e, o);
    }
}

/* 1 if rows of C floats at each pointer (NULL: no constraint) are all
 * 16-byte aligned: C a multiple of 4 and the bases aligned */
static int emb_vec(int64_t C, const void *a, const void *b, const void *c) {
    return C % 4 == 0 && pc_aligned16(a) && (!b || pc_aligned16(b)) && (!c || pc_aligned16(c));
}

extern "C" {

void pc_launch_embedding_forward(float *out, const int32_t *tokens, const float *wte, int64_t vocab_start,
                                 int64_t n_rows, const float *wpe, int64_t B, int64_t T, int64_t C) {
    size_t n = (size_t)(B * T * C);
    if (!n) return;
    if (emb_vec(C, out, wte, wpe))
        PC_LAUNCH_T(emb_forward_kernel<4>, pc_blocks(n / 4), PC_THREADS, PC_THREADS)(
            out, tokens, wte, vocab_start, n_rows, wpe, T, (size_t)(B * T), C);
    else
        PC_LAUNCH_T(emb_forward_kernel<1>, pc_blocks(n), PC_THREADS, PC_THREADS)(
            out, tokens, wte, vocab_start, n_rows, wpe, T, (size_t)(B * T), C);
    pc_check_launch("embedding_forward");
}

void pc_launch_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                  int64_t vocab_start, int64_t n_rows, int64_t B, int64_t T, int64_t C) {
    if (B * T * C <= 0) return;
    if (dwte) {
        unsigned owners = n_rows < EMB_OWNERS ? (unsigned)(n_rows > 0 ? n_rows : 1) : EMB_OWNERS;
        if (emb_vec(C, dwte, dout, NULL))
            PC_LAUNCH_T(dwte_kernel<4>, owners, PC_THREADS, PC_THREADS)(dwte, dout, tokens, vocab_start, n_rows,
                                                                         B * T, C);
        else
            PC_LAUNCH_T(dwte_kernel<1>, owners, PC_THREADS, PC_THREADS)(dwte, dout, tokens, vocab_start, n_rows,
                                                                         B * T, C);
    }
    if (dwpe) {
        if (emb_vec(C, dwpe, dout, NULL))
            PC_LAUNCH_T(dwpe_kernel<4>, pc_blocks((size_t)(T * C) / 4), PC_THREADS, PC_THREADS)(dwpe, dout, B, T, C);
        else
            PC_LAUNCH_T(dwpe_kernel<1>, pc_blocks((size_t)(T * C)), PC_THREADS, PC_THREADS)(dwpe, dout, B, T, C);
    }
    pc_check_launch("embedding_backward");
}

void pc_launch_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    size_t n = (size_t)(B * T * C);
    if (!n) return;
    if (emb_vec(C, out, wpe, NULL))
        PC_LAUNCH_T(add_positions_kernel<4>, pc_blocks(n / 4), PC_THREADS, PC_THREADS)(out, wpe, n, (size_t)(T * C));
    else
        PC_LAUNCH_T(add_positions_kernel<1>, pc_blocks(n), PC_THREADS, PC_THREADS)(out, wpe, n, (size_t)(T * C));
    pc_check_launch("add_positions");
}

} /* extern "C" */
