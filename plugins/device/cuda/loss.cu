/*
 * Softmax cross-entropy over the vocabulary, whole (fused: one block per
 * row computes max, Σexp, the loss and the gradient in place, never
 * storing probabilities; crossentropy_fused with vocabulary padding, what
 * the model's head runs without tensor parallelism) or vocabulary-parallel
 * in pieces (rowmax, sumexp, target logit, loss rows, backward; the TP
 * group combines the pieces).
 * Only the first n_valid columns are classes (the rest is vocabulary
 * padding: gradient 0); a negative target means no loss and no gradient.
 * Block reductions have a fixed shape, and the loss sum runs in double in
 * row order on one thread. Rows whose width is a multiple of 4 (and 16-byte
 * aligned) are read 4 columns a load.
 *
 * crossentropy_fused_bf16 is the fused kernel templated on the logits'
 * element type: bf16 logits widened on load (8 columns a 16-byte load
 * where the width is a multiple of 8), fp32 arithmetic, the gradient
 * rounded once to bf16, losses, lse and the loss sum as in fp32.
 */
#include "async_copy.cuh"
#include "kcommon.cuh"

#define ROWS_PER_LOSS_CHUNK 1024
/* threads of the fused cross-entropy's block, one block a row */
#define CE_THREADS (PC_THREADS * 2)

/* The row passes below take, with vec (the row 16-byte aligned), groups of
 * V = pc_vec<T>::V columns (4 floats, 8 bf16) as one 16-byte load per
 * thread, then the columns past the last whole group one by one; else
 * every column one by one. */

template <typename T> __device__ static float row_max(const T *l, int64_t n, float *sh, int vec) {
    constexpr int V = pc_vec<T>::V;
    float m = -INFINITY;
    int64_t c0 = 0;
    if (vec) {
        for (int64_t g = threadIdx.x; g < n / V; g += blockDim.x) {
            float x[V];
            pc_ld(x, l + g * V);
            PC_UNROLL
            for (int k = 0; k < V; k++) m = fmaxf(m, x[k]);
        }
        c0 = n / V * V;
    }
    for (int64_t c = c0 + threadIdx.x; c < n; c += blockDim.x) m = fmaxf(m, pc_get(l + c));
    return pc_block_max(m, sh);
}

template <typename T> __device__ static float row_sumexp(const T *l, int64_t n, float m, float *sh, int vec) {
    constexpr int V = pc_vec<T>::V;
    float s = 0;
    int64_t c0 = 0;
    if (vec) {
        for (int64_t g = threadIdx.x; g < n / V; g += blockDim.x) {
            float x[V];
            pc_ld(x, l + g * V);
            PC_UNROLL
            for (int k = 0; k < V; k++) s += expf(x[k] - m);
        }
        c0 = n / V * V;
    }
    for (int64_t c = c0 + threadIdx.x; c < n; c += blockDim.x) s += expf(pc_get(l + c) - m);
    return pc_block_sum(s, sh);
}

/* column c's gradient from its logit x */
__device__ static inline float ce_grad(float x, int64_t c, int64_t n_valid, float lse, int64_t t, float scale) {
    if (c >= n_valid) return 0.0f;
    float v = expf(x - lse) * scale;
    return c == t ? v - scale : v;
}

/* d = (exp(l − lse) − onehot)·scale over the valid columns, 0 on padding;
 * every thread reads its elements before writing them (in place allowed) */
template <typename T>
__device__ static void row_backward(T *d, const T *l, int64_t Vl, int64_t n_valid, float lse, int64_t t, float scale,
                                    int vec) {
    constexpr int V = pc_vec<T>::V;
    int64_t c0 = 0;
    if (vec) {
        for (int64_t g = threadIdx.x; g < Vl / V; g += blockDim.x) {
            float x[V];
            pc_ld(x, l + g * V);
            PC_UNROLL
            for (int k = 0; k < V; k++) x[k] = ce_grad(x[k], g * V + k, n_valid, lse, t, scale);
            pc_st(d + g * V, x);
        }
        c0 = Vl / V * V;
    }
    for (int64_t c = c0 + threadIdx.x; c < Vl; c += blockDim.x)
        pc_put(d + c, ce_grad(pc_get(l + c), c, n_valid, lse, t, scale));
}

/* The row's loss and lse from its max m and Σexp s (thread 0 writes
 * them); returns lse. */
template <typename T>
__device__ static float row_loss(float *losses, float *lse_out, int64_t r, const T *l, int64_t t, int64_t n_valid,
                                 float m, float s) {
    const float tl = t >= 0 && t < n_valid ? pc_get(l + t) : 0.0f;
    const float lse = m + logf(s);
    if (threadIdx.x == 0) {
        losses[r] = t >= 0 ? lse - tl : 0.0f;
        if (lse_out) lse_out[r] = lse;
    }
    return lse;
}

/* 1 if the row's gradient is to be computed: there is a gradient to write
 * and the row has a target (a row without one gets zeros here). Every
 * thread has read l[t] (row_loss) before the row may be overwritten. */
template <typename T> __device__ static int row_gradient_wanted(T *dlogits, int64_t r, int64_t Vl, int64_t t) {
    if (!dlogits) return 0;
    __syncthreads();
    if (t >= 0) return 1;
    for (int64_t c = threadIdx.x; c < Vl; c += blockDim.x) pc_put(dlogits + r * Vl + c, 0.0f);
    return 0;
}

/* The whole loss of one row, its first n_valid of Vl columns classes
 * (crossentropy: all of them): max and Σexp over the valid columns, the
 * loss and lse, then the gradient in place; the losses' sum is
 * loss_sum_kernel's (crossentropy_fused). T: the logits' element type. */
template <typename T>
PC_KERNEL_T(CE_THREADS)
ce_fused_kernel(float *losses, float *lse_out, T *dlogits, const T *logits, const int32_t *targets, int64_t Vl,
                int64_t n_valid, float scale, int vec) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const T *l = logits + r * Vl;
    const int64_t t = targets[r];
    const float m = row_max(l, n_valid, sh, vec);
    const float s = row_sumexp(l, n_valid, m, sh, vec);
    const float lse = row_loss(losses, lse_out, r, l, t, n_valid, m, s);
    if (!row_gradient_wanted(dlogits, r, Vl, t)) return;
    row_backward(dlogits + r * Vl, l, Vl, n_valid, lse, t, scale, vec);
}

/* The fused kernel for a bf16 row of at most CE_STAGE_COLUMNS columns (fewer
 * where the device lets a block opt in to less: pc_loss_prepare), the
 * row staged in the block's shared memory: each thread copies its own
 * groups of 8 (g = threadIdx.x + k·blockDim.x) with cp.async, all in
 * flight at once, and reads them back for the max, Σexp and gradient
 * passes, so the row comes from device memory once. On an H100 (GPT-2's
 * 50,304 columns; the figures are in
 * docs/measurements/2026-11-26-h100-gpu-session.md, "cross-entropy")
 * ce_fused_kernel's three reads miss the L2 with hundreds of rows in
 * flight, and the row held in registers instead was slower still: its
 * ~100 registers a thread leave room for one block a multiprocessor, so
 * each block's load, reductions and writes ran one after another. Staged
 * in shared memory (100.6 KB for GPT-2) two blocks fit an H100's
 * multiprocessor and one loads while the other computes and writes.
 * Each thread visits its groups in ce_fused_kernel's order with the same
 * arithmetic, so the bits are the same. */
#define CE_STAGE_COLUMNS 65536
#define CE_STAGE_BYTES (CE_STAGE_COLUMNS * 2)
/* the staged kernel's static shared memory (block reductions), counted
 * with its dynamic shared memory against the device's opt-in limit */
#define CE_STAGE_STATIC_WORDS 32

/* The widest staged row, in bytes, on the open device: CE_STAGE_BYTES,
 * less where the device lets a block opt in to less (pc_loss_prepare);
 * 0 until then. Written at open(), before any kernel call. */
static size_t ce_stage_max;

/* f(x) for each of this thread's valid logits of the row l: its staged
 * groups (8 values each, the first Gv groups of the row valid), then the
 * row's last n_valid % 8 valid values read from l; the order of
 * ce_fused_kernel's loops, so the sums have its bits */
template <typename F>
__device__ static inline void ce_each_valid(const uint4 *q, const plait_bf16 *l, int64_t Gv, int64_t n_valid, F f) {
    const int64_t bd = blockDim.x;
    for (int64_t g = threadIdx.x; g < Gv; g += bd) {
        float x[8];
        pc_widen(x, q[g]);
        PC_UNROLL
        for (int j = 0; j < 8; j++) f(x[j]);
    }
    for (int64_t c = Gv * 8 + threadIdx.x; c < n_valid; c += bd) f(pc_get(l + c));
}

/* (a template for PC_LAUNCH_T_SHARED; one instance, bf16) */
template <typename T>
PC_KERNEL_T(CE_THREADS)
ce_fused_staged_kernel(float *losses, float *lse_out, T *dlogits, const T *logits, const int32_t *targets, int64_t Vl,
                       int64_t n_valid, float scale) {
    static_assert(sizeof(T) == 2, "the staged cross-entropy takes bf16 rows");
    PC_SHARED_DYNAMIC(stage);
    __shared__ float sh[CE_STAGE_STATIC_WORDS];
    uint4 *q = (uint4 *)stage;
    const int64_t r = blockIdx.x, G = Vl / 8, Gv = n_valid / 8, bd = blockDim.x;
    const plait_bf16 *l = logits + r * Vl;
    const int64_t t = targets[r];
    for (int64_t g = threadIdx.x; g < G; g += bd) pc_cp_async16(q + g, l + g * 8);
    pc_cp_async_commit();
    pc_cp_async_wait<0>(); /* each thread reads back only the groups it copied */
    float m = -INFINITY;
    ce_each_valid(q, l, Gv, n_valid, [&](float x) { m = fmaxf(m, x); });
    m = pc_block_max(m, sh);
    float s = 0;
    ce_each_valid(q, l, Gv, n_valid, [&](float x) { s += expf(x - m); });
    s = pc_block_sum(s, sh);
    const float lse = row_loss(losses, lse_out, r, l, t, n_valid, m, s);
    if (!row_gradient_wanted(dlogits, r, Vl, t)) return;
    plait_bf16 *d = dlogits + r * Vl;
    for (int64_t g = threadIdx.x; g < G; g += bd) {
        float x[8];
        pc_widen(x, q[g]);
        PC_UNROLL
        for (int j = 0; j < 8; j++) x[j] = ce_grad(x[j], g * 8 + j, n_valid, lse, t, scale);
        pc_st(d + g * 8, x);
    }
}

/* *loss_sum += Σ losses in double in row order: the block stages a chunk
 * of rows in shared memory (coalesced reads) and thread 0 adds it. */
PC_KERNEL(loss_sum_kernel, ROWS_PER_LOSS_CHUNK)(double *loss_sum, const float *losses, int64_t BT) {
    __shared__ float chunk[ROWS_PER_LOSS_CHUNK];
    double total = 0;
    for (int64_t r0 = 0; r0 < BT; r0 += ROWS_PER_LOSS_CHUNK) {
        if (r0 + threadIdx.x < BT) chunk[threadIdx.x] = losses[r0 + threadIdx.x];
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t n = BT - r0 < ROWS_PER_LOSS_CHUNK ? BT - r0 : ROWS_PER_LOSS_CHUNK;
            for (int64_t k = 0; k < n; k++) total += (double)chunk[k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss_sum += total;
}

PC_KERNEL(rowmax_kernel, PC_THREADS)(float *rowmax, const float *logits, int64_t Vl, int64_t n_valid, int vec) {
    __shared__ float sh[32];
    float m = row_max(logits + (int64_t)blockIdx.x * Vl, n_valid, sh, vec);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

PC_KERNEL(sumexp_kernel, PC_THREADS)(float *sumexp, const float *logits, const float *rowmax, int64_t Vl,
                                     int64_t n_valid, int vec) {
    __shared__ float sh[32];
    float s = row_sumexp(logits + (int64_t)blockIdx.x * Vl, n_valid, rowmax[blockIdx.x], sh, vec);
    if (threadIdx.x == 0) sumexp[blockIdx.x] = s;
}

PC_KERNEL(target_kernel, PC_THREADS)(float *tlogit, const float *logits, const int32_t *targets,
                                     int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid) {
    PC_GRID_STRIDE(r, (size_t)BT) {
        int64_t c = (int64_t)targets[r] - vocab_start;
        tlogit[r] = targets[r] >= 0 && c >= 0 && c < n_valid ? logits[(int64_t)r * Vl + c] : 0.0f;
    }
}

/* One block: rows in chunks; each thread its row's lse and loss, then
 * thread 0 adds the chunk's losses in row order in double. */
PC_KERNEL(loss_rows_kernel, ROWS_PER_LOSS_CHUNK)(float *losses, float *lse, const float *rowmax, const float *sumexp,
                                        const float *tlogit, const int32_t *targets, int64_t BT,
                                        double *loss_sum) {
    __shared__ float chunk[ROWS_PER_LOSS_CHUNK];
    double total = 0;
    for (int64_t r0 = 0; r0 < BT; r0 += ROWS_PER_LOSS_CHUNK) {
        int64_t r = r0 + threadIdx.x;
        if (r < BT) {
            float tl = tlogit[r];
            float z = rowmax[r] + logf(sumexp[r]);
            float loss = targets[r] >= 0 ? z - tl : 0.0f;
            lse[r] = z;
            losses[r] = loss;
            chunk[threadIdx.x] = loss;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t n = BT - r0 < ROWS_PER_LOSS_CHUNK ? BT - r0 : ROWS_PER_LOSS_CHUNK;
            for (int64_t k = 0; k < n; k++) total += (double)chunk[k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss_sum += total;
}

PC_KERNEL(ce_backward_kernel, PC_THREADS)(float *dlogits, const float *logits, const float *lse,
                                          const int32_t *targets, int64_t vocab_start, int64_t Vl, int64_t n_valid,
                                          float scale, int vec) {
    const int64_t r = blockIdx.x;
    float *d = dlogits + r * Vl;
    if (targets[r] < 0) {
        for (int64_t c = threadIdx.x; c < Vl; c += blockDim.x) d[c] = 0.0f;
        return;
    }
    row_backward(d, logits + r * Vl, Vl, n_valid, lse[r], (int64_t)targets[r] - vocab_start, scale, vec);
}

/* 1 if rows of Vl values of T at a (and b, unless NULL) start 16-byte
 * aligned: the row passes' 16-byte loads */
template <typename T> static int rows_vec(int64_t Vl, const T *a, const T *b) {
    return Vl % pc_vec<T>::V == 0 && pc_aligned16(a) && (!b || pc_aligned16(b));
}

/* crossentropy_fused for logits of element type T */
template <typename T>
static void ce_fused(float *losses, float *lse, double *loss_sum, T *dlogits, const T *logits, const int32_t *targets,
                     int64_t BT, int64_t Vl, int64_t n_valid, float scale, const char *what) {
    if (BT <= 0) return;
    const int vec = rows_vec(Vl, logits, (const T *)dlogits);
    if (sizeof(T) == 2 && vec && (size_t)Vl * 2 <= ce_stage_max)
        PC_LAUNCH_T_SHARED(ce_fused_staged_kernel<plait_bf16>, (unsigned)BT, CE_THREADS, CE_THREADS,
                           (size_t)Vl * 2)(losses, lse, (plait_bf16 *)dlogits, (const plait_bf16 *)logits,
                                           targets, Vl, n_valid, scale);
    else
        PC_LAUNCH_T(ce_fused_kernel<T>, (unsigned)BT, CE_THREADS, CE_THREADS)(losses, lse, dlogits, logits, targets,
                                                                             Vl, n_valid, scale, vec);
    PC_LAUNCH(loss_sum_kernel, 1, ROWS_PER_LOSS_CHUNK)(loss_sum, losses, BT);
    pc_check_launch(what);
}

/* The staged cross-entropy allowed its shared memory (over the 48 KiB a
 * launch gets without asking) on the current device, within what the
 * device lets a block opt in to: GPT-2's 50,304 columns (100,608 bytes)
 * still fit sm_86's 99 KiB, a wider head takes ce_fused_kernel there. */
extern "C" cudaError_t pc_loss_prepare(size_t optin) {
    const size_t room = optin > CE_STAGE_STATIC_WORDS * sizeof(float) ? optin - CE_STAGE_STATIC_WORDS * sizeof(float) : 0;
    const size_t stage = (room < CE_STAGE_BYTES ? room : CE_STAGE_BYTES) / 16 * 16;
    const cudaError_t e = cudaFuncSetAttribute((const void *)ce_fused_staged_kernel<plait_bf16>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage);
    ce_stage_max = e == cudaSuccess ? stage : 0;
    return e;
}

extern "C" {

void pc_launch_crossentropy(float *losses, float *dlogits, const float *logits, const int32_t *targets, int64_t BT,
                            int64_t V, float scale) {
    if (BT <= 0) return;
    PC_LAUNCH_T(ce_fused_kernel<float>, (unsigned)BT, CE_THREADS, CE_THREADS)(
        losses, (float *)NULL, dlogits, logits, targets, V, V, scale, rows_vec(V, logits, (const float *)dlogits));
    pc_check_launch("crossentropy");
}

void pc_launch_crossentropy_fused(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                                  const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale) {
    ce_fused(losses, lse, loss_sum, dlogits, logits, targets, BT, Vl, n_valid, scale, "crossentropy_fused");
}

void pc_launch_crossentropy_fused_bf16(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                       const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                       int64_t n_valid, float scale) {
    ce_fused(losses, lse, loss_sum, dlogits, logits, targets, BT, Vl, n_valid, scale, "crossentropy_fused_bf16");
}

void pc_launch_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl, int64_t n_valid) {
    if (BT <= 0) return;
    PC_LAUNCH(rowmax_kernel, (unsigned)BT, PC_THREADS)(rowmax, logits, Vl, n_valid,
                                                       rows_vec(Vl, logits, (const float *)NULL));
    pc_check_launch("logits_rowmax");
}

void pc_launch_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT, int64_t Vl,
                             int64_t n_valid) {
    if (BT <= 0) return;
    PC_LAUNCH(sumexp_kernel, (unsigned)BT, PC_THREADS)(sumexp, logits, rowmax, Vl, n_valid,
                                                       rows_vec(Vl, logits, (const float *)NULL));
    pc_check_launch("logits_sumexp");
}

void pc_launch_logits_target(float *tlogit, const float *logits, const int32_t *targets, int64_t vocab_start,
                             int64_t BT, int64_t Vl, int64_t n_valid) {
    if (BT <= 0) return;
    PC_LAUNCH(target_kernel, pc_blocks((size_t)BT), PC_THREADS)(tlogit, logits, targets, vocab_start, BT, Vl, n_valid);
    pc_check_launch("logits_target");
}

void pc_launch_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp, const float *tlogit,
                         const int32_t *targets, int64_t BT, double *loss_sum) {
    if (BT <= 0) return;
    PC_LAUNCH(loss_rows_kernel, 1, ROWS_PER_LOSS_CHUNK)(losses, lse, rowmax, sumexp, tlogit, targets, BT, loss_sum);
    pc_check_launch("loss_rows");
}

void pc_launch_crossentropy_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                     int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid, float scale) {
    if (BT <= 0) return;
    PC_LAUNCH(ce_backward_kernel, (unsigned)BT, PC_THREADS)(
        dlogits, logits, lse, targets, vocab_start, Vl, n_valid, scale, rows_vec(Vl, logits, (const float *)dlogits));
    pc_check_launch("crossentropy_backward");
}

} /* extern "C" */
