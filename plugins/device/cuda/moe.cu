/*
 * The mixture of experts' kernels (plait/kernels.h, ABI 1.21), float32,
 * in the CPU kernels' order (core/kernels/kernels_moe.c): one thread a
 * token for the router and its backward, one thread an expert for the
 * dispatch's counts and rows (each expert walks the routes in token
 * order, so a capacity keeps the first routes, as the CPU's), one thread
 * an element for the row copies and sums. Products and sums explicitly
 * rounded (never contracted into an FMA) so the bits follow the CPU's
 * wherever the libraries' exp and log do. No atomics: the same inputs
 * give the same bits. Written to be right, not fast: the router's loops
 * are a thread's, over E experts. The grouped product is kernels.c's (a
 * cuBLASLt product an expert). The row kernels are templates on the
 * rows' type: float32, or bf16 (ABI 1.29: the rows widened exactly where
 * read, rounded once where written, every sum float32).
 */
#include "kcommon.cuh"

/* token n's scores, log-sum-exp, top k (ascending) and gates */
PC_KERNEL(moe_route_kernel, PC_THREADS)
(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias, int64_t N, int64_t E,
 int64_t k, int sigmoid) {
    PC_GRID_STRIDE(n, (size_t)N) {
        const float *z = logits + n * E;
        float *s = scores + n * E;
        double mx = z[0], sum = 0.0;
        for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int64_t e = 0; e < E; e++) sum = __dadd_rn(sum, exp((double)z[e] - mx));
        lse[n] = (float)(mx + log(sum));
        for (int64_t e = 0; e < E; e++)
            s[e] = sigmoid ? (float)(1.0 / (1.0 + exp(-(double)z[e]))) : (float)(exp((double)z[e] - mx) / sum);
        int32_t *id = idx + n * k;
        for (int64_t j = 0; j < k; j++) {
            int32_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= id[i] == e;
                if (!taken && (best < 0 || __fadd_rn(s[e], bias[e]) > __fadd_rn(s[best], bias[best])))
                    best = (int32_t)e;
            }
            id[j] = best;
        }
        for (int64_t j = 1; j < k; j++)
            for (int64_t i = j; i > 0 && id[i - 1] > id[i]; i--) {
                const int32_t t = id[i];
                id[i] = id[i - 1];
                id[i - 1] = t;
            }
        double g = 0.0;
        for (int64_t j = 0; j < k; j++) g = __dadd_rn(g, (double)s[id[j]]);
        for (int64_t j = 0; j < k; j++) gate[n * k + j] = k > 1 ? (float)((double)s[id[j]] / g) : s[id[j]];
    }
}

/* expert e's routes (routed[e]) and kept rows (into off[e + 1]) */
PC_KERNEL(moe_count_kernel, PC_THREADS)
(int32_t *off, float *routed, const int32_t *idx, int64_t Nk, int64_t E, int64_t capacity) {
    PC_GRID_STRIDE(e, (size_t)E) {
        int64_t all = 0;
        for (int64_t r = 0; r < Nk; r++) all += idx[r] == (int32_t)e;
        routed[e] = (float)all;
        off[e + 1] = (int32_t)(all < capacity ? all : capacity);
    }
}

/* the offsets' running sum: one thread */
PC_KERNEL(moe_offsets_kernel, 1)(int32_t *off, int64_t E) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        off[0] = 0;
        for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    }
}

/* expert e's routes in token order: the first `capacity` to its rows */
PC_KERNEL(moe_rows_kernel, PC_THREADS)
(int32_t *row, int32_t *tok, const int32_t *off, const int32_t *idx, int64_t Nk, int64_t k, int64_t E,
 int64_t capacity) {
    PC_GRID_STRIDE(e, (size_t)E) {
        int64_t n = 0;
        for (int64_t r = 0; r < Nk; r++) {
            if (idx[r] != (int32_t)e) continue;
            if (n >= capacity) {
                row[r] = -1;
                continue;
            }
            const int32_t at = off[e] + (int32_t)n++;
            row[r] = at;
            tok[at] = (int32_t)(r / k);
        }
    }
}

/* x[row[r], c] = inp[token of r, c] for the kept routes (TX: float, or
 * bf16 rounded once) */
template <typename TX>
PC_KERNEL_T(PC_THREADS)
moe_gather_kernel(TX *x, const float *inp, const int32_t *row, int64_t Nk, int64_t k, int64_t C) {
    PC_GRID_STRIDE(i, (size_t)(Nk * C)) {
        const int64_t r = (int64_t)i / C, c = (int64_t)i % C, at = row[r];
        if (at >= 0) pc_put(x + at * C + c, inp[(r / k) * C + c]);
    }
}

/* out[n, c] = res (+ shared) + Σ_j gate·y[row], j in order (TY: the rows'
 * type, widened exactly; the sum float32) */
template <typename TY>
PC_KERNEL_T(PC_THREADS)
moe_unpermute_kernel(float *out, const float *res, const TY *shared, const TY *y, const int32_t *row, const float *gate,
                     int64_t N, int64_t k, int64_t C) {
    PC_GRID_STRIDE(i, (size_t)(N * C)) {
        const int64_t n = (int64_t)i / C, c = (int64_t)i % C;
        float o = res[i];
        if (shared) o = __fadd_rn(o, pc_get(shared + i));
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            if (r >= 0) o = __fadd_rn(o, __fmul_rn(gate[n * k + j], pc_get(y + (int64_t)r * C + c)));
        }
        out[i] = o;
    }
}

/* one route a thread: its row's gradient and its gate's */
template <typename TY>
PC_KERNEL_T(PC_THREADS)
moe_unpermute_backward_kernel(TY *dy_rows, double *dgate, const float *dout, const TY *y, const int32_t *row,
                              const float *gate, int64_t Nk, int64_t k, int64_t C) {
    PC_GRID_STRIDE(r, (size_t)Nk) {
        const int32_t at = row[r];
        const int64_t n = (int64_t)r / k;
        double dot = 0.0;
        if (at >= 0)
            for (int64_t c = 0; c < C; c++) {
                pc_put(dy_rows + (int64_t)at * C + c, __fmul_rn(gate[r], dout[n * C + c]));
                dot = __dadd_rn(dot, __dmul_rn((double)dout[n * C + c], (double)pc_get(y + (int64_t)at * C + c)));
            }
        dgate[r] = dot;
    }
}

/* dinp[n, c] += dx[row[n, j], c], j in order */
template <typename TX>
PC_KERNEL_T(PC_THREADS)
moe_permute_backward_kernel(float *dinp, const TX *dx, const int32_t *row, int64_t N, int64_t k, int64_t C) {
    PC_GRID_STRIDE(i, (size_t)(N * C)) {
        const int64_t n = (int64_t)i / C, c = (int64_t)i % C;
        float v = dinp[i];
        for (int64_t j = 0; j < k; j++) {
            const int32_t r = row[n * k + j];
            if (r >= 0) v = __fadd_rn(v, pc_get(dx + (int64_t)r * C + c));
        }
        dinp[i] = v;
    }
}

/* score e's gradient of token n: the balancing loss's, plus its gate's
 * through the renormalisation when chosen */
__device__ static inline double moe_dscore(const int32_t *id, const double *dg, double dot, double sum, double base,
                                           int64_t k, int64_t e) {
    double ds = base;
    for (int64_t j = 0; j < k; j++)
        if (id[j] == e) ds = __dadd_rn(ds, k > 1 ? __ddiv_rn(__dsub_rn(dg[j], dot), sum) : dg[0]);
    return ds;
}

/* the load-balancing loss's gradient on an expert's score:
 * aux·E·routed/(N²k)·share */
__device__ static inline double moe_balance(double aux, double share, float routed, int64_t N, int64_t E, int64_t k) {
    return __dmul_rn(__ddiv_rn(__dmul_rn(__dmul_rn(aux, (double)E), (double)routed),
                               __dmul_rn(__dmul_rn((double)N, (double)N), (double)k)),
                     share);
}

/* one token a thread: its logits' gradients */
PC_KERNEL(moe_route_backward_kernel, PC_THREADS)
(float *dlogits, const double *dgate, const float *logits, const float *scores, const float *lse, const int32_t *idx,
 const float *gate, const float *routed, int64_t N, int64_t E, int64_t k, int sigmoid, double aux, double z,
 double share) {
    PC_GRID_STRIDE(n, (size_t)N) {
        const float *s = scores + n * E;
        const int32_t *id = idx + n * k;
        const double *dg = dgate + n * k;
        double sum = 0.0, dot = 0.0, sds = 0.0;
        for (int64_t j = 0; k > 1 && j < k; j++) sum = __dadd_rn(sum, (double)s[id[j]]);
        for (int64_t j = 0; k > 1 && j < k; j++) dot = __dadd_rn(dot, __dmul_rn(dg[j], (double)gate[n * k + j]));
        for (int64_t e = 0; e < E; e++) {
            const double base = moe_balance(aux, share, routed[e], N, E, k);
            sds = __dadd_rn(sds, __dmul_rn((double)s[e], moe_dscore(id, dg, dot, sum, base, k, e)));
        }
        const double l = (double)lse[n];
        for (int64_t e = 0; e < E; e++) {
            const double base = moe_balance(aux, share, routed[e], N, E, k);
            const double ds = moe_dscore(id, dg, dot, sum, base, k, e), se = s[e];
            double g = sigmoid ? __dmul_rn(__dmul_rn(ds, se), __dsub_rn(1.0, se)) : __dmul_rn(se, __dsub_rn(ds, sds));
            const double p = exp((double)logits[n * E + e] - l);
            g = __dadd_rn(g, __dmul_rn(__ddiv_rn(__dmul_rn(__dmul_rn(__dmul_rn(z, 2.0), l), p), (double)N), share));
            dlogits[n * E + e] = (float)g;
        }
    }
}

void pc_launch_moe_route(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                         int64_t N, int64_t E, int64_t k, int sigmoid) {
    if (N <= 0) return;
    PC_LAUNCH(moe_route_kernel, pc_blocks((size_t)N), PC_THREADS)
    (scores, lse, idx, gate, logits, bias, N, E, k, sigmoid);
    pc_check_launch("moe_route");
}

/* the routes' rows and offsets, then the rows gathered as TX */
template <typename TX>
static void moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, TX *x, const int32_t *idx,
                        const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity,
                        const char *name) {
    const int64_t Nk = N * k;
    PC_LAUNCH(moe_count_kernel, pc_blocks((size_t)E), PC_THREADS)(off, routed, idx, Nk, E, capacity);
    PC_LAUNCH(moe_offsets_kernel, 1, 1)(off, E);
    PC_LAUNCH(moe_rows_kernel, pc_blocks((size_t)E), PC_THREADS)(row, tok, off, idx, Nk, k, E, capacity);
    if (Nk * C > 0)
        PC_LAUNCH_T(moe_gather_kernel<TX>, pc_blocks((size_t)(Nk * C)), PC_THREADS, PC_THREADS)(x, inp, row, Nk, k, C);
    pc_check_launch(name);
}

template <typename TY>
static void moe_unpermute(float *out, const float *res, const TY *shared, const TY *y, const int32_t *row,
                          const float *gate, int64_t N, int64_t k, int64_t C, const char *name) {
    if (N * C <= 0) return;
    PC_LAUNCH_T(moe_unpermute_kernel<TY>, pc_blocks((size_t)(N * C)), PC_THREADS, PC_THREADS)
    (out, res, shared, y, row, gate, N, k, C);
    pc_check_launch(name);
}

template <typename TY>
static void moe_unpermute_backward(TY *dy_rows, double *dgate, const float *dout, const TY *y, const int32_t *row,
                                   const float *gate, int64_t N, int64_t k, int64_t C, const char *name) {
    if (N * k <= 0) return;
    PC_LAUNCH_T(moe_unpermute_backward_kernel<TY>, pc_blocks((size_t)(N * k)), PC_THREADS, PC_THREADS)
    (dy_rows, dgate, dout, y, row, gate, N * k, k, C);
    pc_check_launch(name);
}

template <typename TX>
static void moe_permute_backward(float *dinp, const TX *dx, const int32_t *row, int64_t N, int64_t k, int64_t C,
                                 const char *name) {
    if (N * C <= 0) return;
    PC_LAUNCH_T(moe_permute_backward_kernel<TX>, pc_blocks((size_t)(N * C)), PC_THREADS, PC_THREADS)
    (dinp, dx, row, N, k, C);
    pc_check_launch(name);
}

void pc_launch_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx,
                           const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity) {
    moe_permute(row, tok, off, routed, x, idx, inp, N, E, k, C, capacity, "moe_permute");
}

void pc_launch_moe_unpermute(float *out, const float *res, const float *shared, const float *y, const int32_t *row,
                             const float *gate, int64_t N, int64_t k, int64_t C) {
    moe_unpermute(out, res, shared, y, row, gate, N, k, C, "moe_unpermute");
}

void pc_launch_moe_unpermute_backward(float *dy_rows, double *dgate, const float *dout, const float *y,
                                      const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    moe_unpermute_backward(dy_rows, dgate, dout, y, row, gate, N, k, C, "moe_unpermute_backward");
}

void pc_launch_moe_permute_backward(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C) {
    moe_permute_backward(dinp, dx, row, N, k, C, "moe_permute_backward");
}

/* the same on bf16 rows (ABI 1.29) */
void pc_launch_moe_permute_bf16(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x,
                                const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                                int64_t capacity) {
    moe_permute(row, tok, off, routed, x, idx, inp, N, E, k, C, capacity, "moe_permute_bf16");
}

void pc_launch_moe_unpermute_bf16(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                                  const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    moe_unpermute(out, res, shared, y, row, gate, N, k, C, "moe_unpermute_bf16");
}

void pc_launch_moe_unpermute_backward_bf16(plait_bf16 *dy_rows, double *dgate, const float *dout, const plait_bf16 *y,
                                           const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    moe_unpermute_backward(dy_rows, dgate, dout, y, row, gate, N, k, C, "moe_unpermute_backward_bf16");
}

void pc_launch_moe_permute_backward_bf16(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k,
                                         int64_t C) {
    moe_permute_backward(dinp, dx, row, N, k, C, "moe_permute_backward_bf16");
}

void pc_launch_moe_route_backward(float *dlogits, const double *dgate, const float *logits, const float *scores,
                                  const float *lse, const int32_t *idx, const float *gate, const float *routed,
                                  int64_t N, int64_t E, int64_t k, int sigmoid, double aux, double z, double share) {
    if (N <= 0) return;
    PC_LAUNCH(moe_route_backward_kernel, pc_blocks((size_t)N), PC_THREADS)
    (dlogits, dgate, logits, scores, lse, idx, gate, routed, N, E, k, sigmoid, aux, z, share);
    pc_check_launch("moe_route_backward");
}
