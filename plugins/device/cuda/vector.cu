/*
 * Vector kernels: scale, axpy, AdamW, Σx² in double, and the row-wise
 * bias / residual epilogues of the linear layers with the bias gradient.
 * Element-wise kernels compute each element from that element alone (scale,
 * axpy and the multi-tensor AdamW with 16-byte loads where the pointers
 * allow: pc_map, pc_ld); the
 * two reductions (Σx², the bias gradient) have fixed orders that depend
 * on the sizes alone (the bias gradient in row chunks: pcuda.h's column
 * sums).
 */
#include "kcommon.cuh"

PC_KERNEL(scale_kernel, PC_THREADS)(float *x, size_t n, float a, int vec) {
    pc_map(x, x, (const float *)NULL, n, vec, [a](float v, float) { return v * a; });
}

PC_KERNEL(axpy_kernel, PC_THREADS)(float *y, const float *x, size_t n, float a, int vec) {
    pc_map(y, y, x, n, vec, [a](float v, float w) { return v + a * w; });
}

/* One element of AdamW: the CPU kernel's operations in its order
 * (core/kernels/kernels_vector.c), each rounded on its own. The explicitly
 * rounded intrinsics are what keep that order: a plain `a * b + c` may be
 * fused into one FMA by nvcc or ptxas, and which product gets fused
 * differs between the per-tensor and the multi-tensor kernel, so one
 * rank (adamw_multi) and data-parallel ranks (adamw) would end a step with
 * parameters a rounding apart although their gradients and moments agree
 * bit for bit (seen on an H100; the emulator never fuses). */
__device__ static inline void adamw_value(float &param, float grad, float &m, float &v, float b1, float b2,
                                          float step_size, float bc2_sqrt, float decay, float gs, float eps) {
    const float g = __fmul_rn(grad, gs);
    const float p = __fmul_rn(param, decay);
    const float mi = __fadd_rn(__fmul_rn(b1, m), __fmul_rn(__fsub_rn(1.0f, b1), g));
    const float vi = __fadd_rn(__fmul_rn(b2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), g), g));
    m = mi;
    v = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    param = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
}

__device__ static inline void adamw_elem(float *param, const float *grad, float *m, float *v, size_t i, float b1,
                                         float b2, float step_size, float bc2_sqrt, float decay, float gs, float eps) {
    adamw_value(param[i], grad[i], m[i], v[i], b1, b2, step_size, bc2_sqrt, decay, gs, eps);
}

PC_KERNEL(adamw_kernel, PC_THREADS)(float *param, const float *grad, float *m, float *v, size_t n, float b1,
                                    float b2, float step_size, float bc2_sqrt, float decay, float gs, float eps) {
    PC_GRID_STRIDE(i, n) adamw_elem(param, grad, m, v, i, b1, b2, step_size, bc2_sqrt, decay, gs, eps);
}

/* AdamW over a list of tensors (plait_adamw_tensor): block b takes
 * elements [b·ADAMW_CHUNK, (b+1)·ADAMW_CHUNK) of the list's running index,
 * finds the tensor holding its first by bisection on the offsets, and
 * walks into the next ones; the clipping factor comes from device memory,
 * and a NaN one (a norm that was not finite) changes nothing. */
#define ADAMW_CHUNK 4096
PC_KERNEL(adamw_multi_kernel, PC_THREADS)(const plait_adamw_tensor *t, size_t count, size_t total, float b1, float b2,
                                          float step_size, float bc2_sqrt, float lr, float eps, const float *scale) {
    const float gs = *scale;
    if (isnan(gs)) return;
    const size_t lo = (size_t)blockIdx.x * ADAMW_CHUNK, hi = lo + ADAMW_CHUNK < total ? lo + ADAMW_CHUNK : total;
    size_t a = 0, b = count; /* the last entry whose offset <= lo */
    while (b - a > 1) {
        const size_t mid = (a + b) / 2;
        if (t[mid].offset <= lo) a = mid;
        else b = mid;
    }
    for (size_t k = a; k < count && t[k].offset < hi; k++) {
        const plait_adamw_tensor e = t[k];
        const size_t s0 = lo > e.offset ? lo - e.offset : 0, end = e.offset + e.n;
        const size_t s1 = (hi < end ? hi : end) - e.offset;
        const float decay = __fsub_rn(1.0f, __fmul_rn(lr, e.weight_decay)); /* as the host computes it for adamw */
        float *p = e.param + s0, *m = e.m + s0, *v = e.v + s0;
        const float *g = e.grad + s0;
        size_t done = 0;
        if (pc_aligned16(p) && pc_aligned16(g) && pc_aligned16(m) && pc_aligned16(v)) {
            /* 16-byte loads of the four arrays, the same arithmetic per element */
            done = (s1 - s0) / 4 * 4;
            for (size_t q = 4 * threadIdx.x; q < done; q += 4 * blockDim.x) {
                float pr[4], gr[4], mr[4], vr[4];
                pc_ld(pr, p + q), pc_ld(gr, g + q), pc_ld(mr, m + q), pc_ld(vr, v + q);
                for (int j = 0; j < 4; j++) adamw_value(pr[j], gr[j], mr[j], vr[j], b1, b2, step_size, bc2_sqrt, decay, gs, eps);
                pc_st(p + q, pr), pc_st(m + q, mr), pc_st(v + q, vr);
            }
        }
        for (size_t i = done + threadIdx.x; i < s1 - s0; i += blockDim.x)
            adamw_elem(p, g, m, v, i, b1, b2, step_size, bc2_sqrt, decay, gs, eps);
    }
}

/* The exact accumulator's value and the clipping factor (plait/kernels.h):
 * one thread, integer arithmetic (plait_sumsq_acc_value). */
PC_KERNEL(sumsq_clip_kernel, PC_WARP)(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip) {
    if (threadIdx.x != 0) return;
    const double v = plait_sumsq_acc_value(acc);
    *sumsq = v;
    *scale = isfinite(v) ? plait_clip_factor(grad_clip, v) : NAN;
}

/* Pass 1: block b sums elements b*256+t, b*256+t+G*256, ... per thread in
 * index order, then over the block; pass 2 sums the G partials. The order
 * depends on n only. */
PC_KERNEL(sumsq_partial_kernel, PC_THREADS)(double *partials, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0;
    PC_GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
    s = pc_block_sum(s, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

PC_KERNEL(sumsq_final_kernel, PC_REDUCE_BLOCKS)(double *partials) {
    __shared__ double sh[32];
    double s = pc_block_sum(partials[threadIdx.x], sh);
    if (threadIdx.x == 0) partials[0] = s;
}

/* out = res + bias, or out += res + bias when `add` (bias may be NULL;
 * out may be res when not adding). V (1 or 4) elements a thread: with 4,
 * C a multiple of 4 and the pointers 16-byte aligned (the launcher
 * checks); each element's arithmetic is the same either way. */
template <int V>
PC_KERNEL_T(PC_THREADS)
res_bias_kernel(float *out, const float *res, const float *bias, size_t rows, size_t C, int add) {
    PC_GRID_STRIDE(k, rows * C / V) {
        const size_t i = k * V;
        float x[V], b[V], o[V];
        pc_ld(x, res + i);
        if (bias) {
            pc_ld(b, bias + i % C);
            for (int u = 0; u < V; u++) x[u] += b[u];
        }
        if (add) {
            pc_ld(o, out + i);
            for (int u = 0; u < V; u++) x[u] = o[u] + x[u];
        }
        pc_st(out + i, x);
    }
}

/* Pass 1 of the bias gradient (pcuda.h, column sums) from a dout of T
 * (float, or bf16 widened exactly): block b handles chunk b / colblocks
 * and 256 column groups of it; each thread sums its columns over the
 * chunk's rows in order, in float32. With vec (OC a multiple of the 16-byte
 * group, 4 floats or 8 bf16, dout 16-byte aligned) a thread's group is one
 * 16-byte load a row, else one column; each column's sum is its rows in
 * order either way, so the bits are the same. One thread per column over
 * all rows (the CPU's order) left a GPT-2 layer's 768..3072 columns to
 * 3..12 blocks walking 16k rows each. */
template <typename T>
PC_KERNEL_T(PC_THREADS) bias_partial_kernel(float *part, const T *dout, int64_t BT, int64_t OC, unsigned colblocks,
                                            int vec) {
    constexpr int V = pc_vec<T>::V;
    const int64_t chunk = blockIdx.x / colblocks, width = vec ? V : 1;
    const int64_t c = ((int64_t)(blockIdx.x % colblocks) * blockDim.x + threadIdx.x) * width;
    if (c >= OC) return;
    const int64_t r1 = (chunk + 1) * PC_COL_ROWS < BT ? (chunk + 1) * PC_COL_ROWS : BT;
    if (!vec) {
        float s = 0.0f;
        for (int64_t r = chunk * PC_COL_ROWS; r < r1; r++) s += pc_get(dout + r * OC + c);
        part[chunk * OC + c] = s;
        return;
    }
    float s[V] = {}, v[V];
    for (int64_t r = chunk * PC_COL_ROWS; r < r1; r++) {
        pc_ld(v, dout + r * OC + c);
        PC_UNROLL
        for (int k = 0; k < V; k++) s[k] += v[k];
    }
    PC_UNROLL
    for (int k = 0; k < V; k++) part[chunk * OC + c + k] = s[k];
}

/* Pass 2: acc[c] += the chunks' sums, in chunk order. */
PC_KERNEL(col_finish_kernel, PC_THREADS)(float *acc, const float *part, int64_t chunks, int64_t C) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a = 0.0f;
    for (int64_t k = 0; k < chunks; k++) a += part[k * C + c];
    acc[c] += a;
}

/* Both bias gradients: the partials (16-byte groups where they fit), then
 * the chunks' sums into dbias. */
template <typename T> static void bias_backward(float *dbias, const T *dout, int64_t BT, int64_t OC, const char *what) {
    if (OC <= 0 || BT <= 0) return;
    const int64_t chunks = pc_col_chunks(BT);
    const int vec = OC % pc_vec<T>::V == 0 && pc_aligned16(dout);
    const int64_t threads = vec ? OC / pc_vec<T>::V : OC;
    const unsigned colblocks = (unsigned)((threads + PC_THREADS - 1) / PC_THREADS);
    float *part = (float *)pc_scratch((size_t)(chunks * OC) * sizeof(float));
    if (!part) return;
    PC_LAUNCH_T(bias_partial_kernel<T>, (unsigned)(colblocks * chunks), PC_THREADS, PC_THREADS)(part, dout, BT, OC,
                                                                                                  colblocks, vec);
    pc_launch_col_finish(dbias, part, chunks, OC);
    pc_check_launch(what);
}

extern "C" {

void pc_launch_scale(float *x, size_t n, float a) {
    if (!n) return;
    const int vec = pc_aligned16(x);
    PC_LAUNCH(scale_kernel, pc_map_blocks(n, vec), PC_THREADS)(x, n, a, vec);
    pc_check_launch("scale");
}

void pc_launch_axpy(float *y, const float *x, size_t n, float a) {
    if (!n) return;
    const int vec = pc_aligned16(y) && pc_aligned16(x);
    PC_LAUNCH(axpy_kernel, pc_map_blocks(n, vec), PC_THREADS)(y, x, n, a, vec);
    pc_check_launch("axpy");
}

void pc_launch_adamw(float *param, const float *grad, float *m, float *v, size_t n, float beta1, float beta2,
                     float step_size, float bc2_sqrt, float decay, float grad_scale, float eps) {
    if (!n) return;
    PC_LAUNCH(adamw_kernel, pc_blocks(n), PC_THREADS)(
        param, grad, m, v, n, beta1, beta2, step_size, bc2_sqrt, decay, grad_scale, eps);
    pc_check_launch("adamw");
}

void pc_launch_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, float beta1, float beta2,
                           float step_size, float bc2_sqrt, float lr, float eps, const float *scale) {
    if (!total || !count) return;
    PC_LAUNCH(adamw_multi_kernel, (unsigned)((total + ADAMW_CHUNK - 1) / ADAMW_CHUNK), PC_THREADS)(
        tensors, count, total, beta1, beta2, step_size, bc2_sqrt, lr, eps, scale);
    pc_check_launch("adamw_multi");
}

void pc_launch_sumsq_clip(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip) {
    PC_LAUNCH(sumsq_clip_kernel, 1, PC_WARP)(sumsq, scale, acc, grad_clip);
    pc_check_launch("sumsq_clip");
}

void pc_launch_sumsq(const float *x, size_t n) {
    PC_LAUNCH(sumsq_partial_kernel, PC_REDUCE_BLOCKS, PC_THREADS)(pc.reduce_partials, x, n);
    PC_LAUNCH(sumsq_final_kernel, 1, PC_REDUCE_BLOCKS)(pc.reduce_partials);
    pc_check_launch("sumsq");
}

void pc_launch_res_bias(float *out, const float *res, const float *bias, int64_t rows, int64_t C, int add) {
    size_t n = (size_t)rows * (size_t)C;
    if (!n) return;
    /* out += res + bias in the CPU's association, o + (x + b), either way */
    if (C % 4 == 0 && pc_aligned16(out) && pc_aligned16(res) && (!bias || pc_aligned16(bias)))
        PC_LAUNCH_T(res_bias_kernel<4>, pc_blocks(n / 4), PC_THREADS, PC_THREADS)(out, res, bias, (size_t)rows,
                                                                                  (size_t)C, add);
    else
        PC_LAUNCH_T(res_bias_kernel<1>, pc_blocks(n), PC_THREADS, PC_THREADS)(out, res, bias, (size_t)rows,
                                                                              (size_t)C, add);
    pc_check_launch("bias/residual");
}

void pc_launch_col_finish(float *acc, const float *partials, int64_t chunks, int64_t C) {
    PC_LAUNCH(col_finish_kernel, (unsigned)((C + PC_THREADS - 1) / PC_THREADS), PC_THREADS)(acc, partials, chunks, C);
}

void pc_launch_bias_backward(float *dbias, const float *dout, int64_t BT, int64_t OC) {
    bias_backward(dbias, dout, BT, OC, "bias_backward");
}

void pc_launch_bias_backward_bf16(float *dbias, const plait_bf16 *dout, int64_t BT, int64_t OC) {
    bias_backward(dbias, dout, BT, OC, "bias_backward_bf16");
}

} /* extern "C" */
