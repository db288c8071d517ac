/*
 * Token + position embeddings and their gradients, whole-vocabulary or
 * vocabulary-parallel (wte holds rows [vocab_start, vocab_start+n_rows);
 * n_rows = INT64_MAX for the whole table).
 *
 * The token-table gradient is deterministic without floating-point
 * atomics: EMB_OWNERS blocks each own the table rows r with r % EMB_OWNERS
 * == block, and every block reads all tokens, a tile at a time. A block
 * gathers the (row, position) pairs it owns in the tile in token order
 * (an integer prefix sum over its threads), sorts them by that composite
 * key (unique, so the order is the same on every run: each row's
 * positions ascending), and each thread then walks the sorted pairs for
 * its own columns. A row's sum stays in registers over its run of pairs:
 * dwte is loaded once at the run's start and stored once at its end (a
 * run is a row's pairs within one tile), whatever the number of repeats,
 * and a thread's dout loads do not wait on its additions, EMB_LOADS of
 * them in flight. So every dwte element
 * still receives its additions in token order, from one thread, starting
 * from its value: the same sums as the CPU kernel, in the same order,
 * whatever the table size (which the whole-vocabulary call does not
 * pass). Real text is Zipfian: one row can take thousands of a batch's
 * tokens, which a load and a store of dwte per repeat would turn into as
 * long a chain of dependent round trips to memory.
 *
 * Every kernel takes 4 columns at a time (16-byte loads and stores) where
 * the width is a multiple of 4 and the rows start 16-byte aligned, else
 * one; each element gets the same additions in the same order either way,
 * so the bits are the same.
 */
#include "kcommon.cuh"

/* Blocks of the token-table gradient (a power of two: ownership is a
 * mask), tokens a pass (a position in it fits EMB_POS_BITS; EMB_TILE keys
 * of 8 bytes are its shared memory), a thread's tokens of a pass, and the
 * dout rows a thread has in flight. */
#define EMB_OWNERS 1024
#define EMB_TILE 4096
#define EMB_POS_BITS 12
#define EMB_POS_MASK ((1u << EMB_POS_BITS) - 1)
#define EMB_PER (EMB_TILE / PC_THREADS)
#define EMB_LOADS 8

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

/* Exclusive prefix sum over the block (PC_THREADS threads) of each
 * thread's v, in thread order; *total gets the block's sum. `sums` holds a
 * value a warp. Integer sums: the same on every run. Ends with every
 * thread past one __syncthreads after its write of `sums`. */
__device__ inline unsigned emb_block_scan(unsigned v, unsigned *sums, unsigned *total) {
    const unsigned lane = threadIdx.x % PC_WARP, warp = threadIdx.x / PC_WARP;
    unsigned pre = v, sum = v; /* inclusive prefix and total of the lane's group of 2o lanes */
    for (unsigned o = 1; o < PC_WARP; o <<= 1) {
        const unsigned other = __shfl_xor_sync(0xffffffffu, sum, (int)o);
        if (lane & o) pre += other;
        sum += other;
    }
    if (lane == PC_WARP - 1) sums[warp] = pre;
    __syncthreads();
    unsigned before = 0, all = 0;
    for (unsigned w = 0; w < PC_THREADS / PC_WARP; w++) {
        const unsigned s = sums[w];
        before += w < warp ? s : 0u;
        all += s;
    }
    *total = all;
    return before + pre - v;
}

/* dwte[r] += dout[i] for each token i whose row r this block owns
 * (r % EMB_OWNERS == block), tile by tile: the owned (row, position) pairs
 * of a tile gathered in token order, sorted by that composite key (unique:
 * the same order on every run), then each thread walks the sorted pairs
 * for its columns, keeping a row's sum in registers over its run: one load
 * and one store of dwte a row a tile, EMB_LOADS rows of dout in flight. */
template <int V>
PC_KERNEL_T(PC_THREADS)
dwte_kernel(float *dwte, const float *dout, const int32_t *tokens, int64_t vocab_start, int64_t n_rows, int64_t BT,
            int64_t C) {
    __shared__ uint64_t keys[EMB_TILE]; /* row << EMB_POS_BITS | position in the tile */
    __shared__ unsigned sums[PC_THREADS / PC_WARP];
    const int64_t owner = blockIdx.x;
    const unsigned tid = threadIdx.x, first = tid * EMB_PER;
    for (int64_t t0 = 0; t0 < BT; t0 += EMB_TILE) {
        const unsigned len = (unsigned)(BT - t0 < EMB_TILE ? BT - t0 : EMB_TILE);
        /* this thread's EMB_PER consecutive tokens of the tile: which it owns */
        unsigned mine = 0;
        for (unsigned j = 0; j < EMB_PER && first + j < len; j++) {
            const int64_t r = (int64_t)tokens[t0 + first + j] - vocab_start;
            if (r >= 0 && r < n_rows && (r & (EMB_OWNERS - 1)) == owner) mine |= 1u << j;
        }
        /* every thread is past the previous tile's walk once the scan returns */
        unsigned n, at = emb_block_scan((unsigned)__popc(mine), sums, &n);
        for (; mine; mine &= mine - 1) {
            const unsigned j = (unsigned)__ffs((int)mine) - 1;
            const int64_t r = (int64_t)tokens[t0 + first + j] - vocab_start;
            keys[at++] = (uint64_t)r << EMB_POS_BITS | (first + j);
        }
        unsigned m = 1; /* n rounded up to a power of two, padded with the largest key */
        while (m < n) m <<= 1;
        for (unsigned i = n + tid; i < m; i += PC_THREADS) keys[i] = UINT64_MAX;
        __syncthreads();
        if (n == 0) continue;
        /* bitonic sort of keys[0, m), ascending */
        for (unsigned k = 2; k <= m; k <<= 1)
            for (unsigned j = k >> 1; j > 0; j >>= 1) {
                for (unsigned i = tid; i < m; i += PC_THREADS) {
                    const unsigned p = i ^ j;
                    if (p > i) {
                        const uint64_t a = keys[i], b = keys[p];
                        if ((a > b) == ((i & k) == 0)) keys[i] = b, keys[p] = a;
                    }
                }
                __syncthreads();
            }
        /* each run of one row: its dwte loaded at the run's first pair, the
         * dout rows added in position order, stored at its last */
        for (int64_t c = (int64_t)tid * V; c < C; c += (int64_t)PC_THREADS * V) {
            float acc[V] = {};
            for (unsigned k0 = 0; k0 < n; k0 += EMB_LOADS) {
                float d[EMB_LOADS][V], g[EMB_LOADS][V] = {};
                PC_UNROLL
                for (unsigned u = 0; u < EMB_LOADS; u++) {
                    const unsigned k = k0 + u;
                    if (k >= n) break;
                    const uint64_t key = keys[k];
                    const int64_t r = (int64_t)(key >> EMB_POS_BITS);
                    pc_ld(d[u], dout + (t0 + (int64_t)(key & EMB_POS_MASK)) * C + c);
                    if (k == 0 || keys[k - 1] >> EMB_POS_BITS != key >> EMB_POS_BITS) pc_ld(g[u], dwte + r * C + c);
                }
                PC_UNROLL
                for (unsigned u = 0; u < EMB_LOADS; u++) {
                    const unsigned k = k0 + u;
                    if (k >= n) break;
                    const uint64_t row = keys[k] >> EMB_POS_BITS;
                    if (k == 0 || keys[k - 1] >> EMB_POS_BITS != row)
                        for (int e = 0; e < V; e++) acc[e] = g[u][e];
                    for (int e = 0; e < V; e++) acc[e] += d[u][e];
                    if (k + 1 == n || keys[k + 1] >> EMB_POS_BITS != row) pc_st(dwte + (int64_t)row * C + c, acc);
                }
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
        /* a table of fewer rows than EMB_OWNERS: one block a row (r < n_rows
         * = blocks, so the mask leaves r) */
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
