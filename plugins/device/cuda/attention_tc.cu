/*
 * The fused attention's tensor-core kernels (attention.cu: what they
 * compute, the fp32 kernels and the entries): bf16 runs at head size 32,
 * 64 or 128, and every bf16-activation run at those sizes. 4 warps a
 * block, each owning 16 rows (or keys) of a tile; q, k, v, dO, the
 * probabilities and dS are rounded to bf16 for the products (mma.sync
 * m16n8k16, mma.cuh), every accumulation is fp32, the softmax in fp32
 * (exp2 with the scale's log2 e folded in).
 *
 * Written for Ampere and Hopper alike: padded shared memory (rows of D+8
 * bf16 values, so ldmatrix's 8 rows fall in distinct banks), two stages:
 * while a block computes on one tile pair from one set of buffers, the
 * next pair comes into the other through cp.async (async_copy.cuh), one
 * barrier a tile; no TMA, no wgmma: the structure to tune on a GPU
 * (docs/gpu.md). With bf16 activations the tiles are copied into shared
 * memory as they are, 8 values a 16-byte cp.async; float ones are rounded
 * on the way in.
 *
 * The launches live here with their kernel templates (at_forward_tc,
 * at_backward_tc: attention.cuh), instantiated for both element types,
 * and so does pc_attention_prepare, which allows the kernels their
 * dynamic shared memory.
 */
#include <stdint.h>

#include "async_copy.cuh"
#include "attention.cuh"
#include "mma.cuh"

#define AT_WARPS 4 /* 16 rows of a tile per warp */
#define AT_THREADS (AT_WARPS * PC_WARP)
#define AT_LOG2E 1.4426950408889634f
#define AT_LN2 0.6931471805599453f

/* ---- tiles in shared memory ------------------------------------------------- */

/* Tile rows of bf16 pairs: D + 8 values a row (16 bytes of padding). */
template <int D> struct at_tile {
    static constexpr int SD = D + 8;              /* values a row */
    static constexpr int WORDS = AT_TILE * SD / 2; /* uint32 words a tile */
};

/* The tensor-core kernels' shared memory (dynamic: two stages of two
 * tiles are 68 KiB at head size 128, over the 48 KiB of static shared
 * memory a block may have): tiles A and B (forward and dQ: K and V; dK and
 * dV: Q and dO) in two buffers each, stage 0 and 1, then (dK and dV) each
 * stage's log-sum-exps and D of its query rows. */
template <int D> struct at_smem {
    static constexpr size_t TILE = at_tile<D>::WORDS * sizeof(uint32_t);
    static constexpr size_t ROWS = 2 * AT_TILE * sizeof(float); /* lse and D of a stage */
    static constexpr size_t FWD = 4 * TILE, DQ = 4 * TILE, DKDV = 4 * TILE + 2 * ROWS;
    static __device__ uint32_t *a(unsigned char *s, int stage) { return (uint32_t *)(s + stage * TILE); }
    static __device__ uint32_t *b(unsigned char *s, int stage) { return (uint32_t *)(s + (2 + stage) * TILE); }
    static __device__ float *lse(unsigned char *s, int stage) { return (float *)(s + 4 * TILE + stage * ROWS); }
    static __device__ float *dv(unsigned char *s, int stage) { return lse(s, stage) + AT_TILE; }
};
static_assert(at_smem<128>::DKDV <= 99 * 1024, "the tensor-core kernels' shared memory must stay within the 99 KiB "
                                               "the smallest sm_80-class GPUs (sm_86, sm_89) let a block opt in to");

/* AT_TILE rows of D values from g (row stride `stride` values) into s as
 * bf16; rows at or past `rows` are zeros. Every thread of the block takes
 * part; pairs (floats, rounded) or groups of 8 (bf16, as they are: g and
 * the stride 16-byte aligned) along a row are contiguous across threads
 * (coalesced). The bf16 groups are cp.async copies, visible once the
 * issuing thread waited for its group and a barrier followed; the floats
 * (rounded on the way, which cp.async cannot do) are stored at once,
 * visible after the barrier alone. */
template <int D> __device__ static void at_load_tile(uint32_t *s, const float *g, int64_t stride, int64_t rows) {
    constexpr int HALF = D / 2;
    for (int i = threadIdx.x; i < AT_TILE * HALF; i += blockDim.x) {
        const int r = i / HALF, c = 2 * (i % HALF);
        float a = 0.0f, b = 0.0f;
        if (r < rows) {
            a = g[r * stride + c];
            b = g[r * stride + c + 1];
        }
        s[r * (at_tile<D>::SD / 2) + c / 2] = pc_pack_bf16(a, b);
    }
}
template <int D>
__device__ static void at_load_tile(uint32_t *s, const plait_bf16 *g, int64_t stride, int64_t rows) {
    constexpr int GROUPS = D / 8;
    for (int i = threadIdx.x; i < AT_TILE * GROUPS; i += blockDim.x) {
        const int r = i / GROUPS, c = 8 * (i % GROUPS);
        uint32_t *d = s + r * (at_tile<D>::SD / 2) + c / 2;
        if (r < rows) pc_cp_async16(d, g + r * stride + c);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

/* A query tile's log-sum-exps and D (`rows` of them valid, from lse and
 * Dv) into sL and sD: cp.async copies, thread i (< AT_TILE) row i. */
__device__ static void at_load_rows(float *sL, float *sD, const float *lse, const float *Dv, int64_t rows) {
    for (int i = threadIdx.x; i < AT_TILE; i += blockDim.x)
        if (i < rows) {
            pc_cp_async4(sL + i, lse + i);
            pc_cp_async4(sD + i, Dv + i);
        }
}

/* After its wait, each thread of at_load_rows (the same rows) turns its
 * log-sum-exps into log2 units and fills the rows past the end: p =
 * exp2(-inf) = 0 there. */
__device__ static void at_finish_rows(float *sL, float *sD, int64_t rows) {
    for (int i = threadIdx.x; i < AT_TILE; i += blockDim.x) {
        const bool in = i < rows;
        sL[i] = in ? sL[i] * AT_LOG2E : INFINITY;
        sD[i] = in ? sD[i] : 0.0f;
    }
}

/* Two adjacent outputs (an accumulator's pair) to p: bf16 as one 4-byte store. */
__device__ static inline void at_put2(float *p, float a, float b) {
    p[0] = a;
    p[1] = b;
}
__device__ static inline void at_put2(plait_bf16 *p, float a, float b) { *(uint32_t *)p = pc_pack_bf16(a, b); }

/* The address lane `lane` gives ldmatrix for the four 8x8 blocks at tile
 * rows r0.., columns c0..: blocks (r0, c0), (r0+8, c0), (r0, c0+8),
 * (r0+8, c0+8) — an A fragment of rows r0..r0+15, columns c0..c0+15, or
 * (transposed) two B fragments. */
template <int D> __device__ static const void *at_rows16(const uint32_t *s, int r0, int c0, int lane) {
    const int r = r0 + lane % 8 + ((lane / 8) & 1) * 8, c = c0 + (lane / 16) * 8;
    return (const char *)s + 2 * (r * at_tile<D>::SD + c);
}

/* The address for the four blocks at rows r0..r0+7, columns c0, c0+8,
 * c0+16, c0+24: two k-steps' B fragments of an 8-column n-tile. */
template <int D> __device__ static const void *at_cols32(const uint32_t *s, int r0, int c0, int lane) {
    const int r = r0 + lane % 8, c = c0 + (lane / 8) * 8;
    return (const char *)s + 2 * (r * at_tile<D>::SD + c);
}

/* Sum over the 4 lanes of a quad (the lanes holding one accumulator row):
 * a butterfly, so every lane gets the same bits. */
__device__ static inline float at_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ static inline float at_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* c = A · (tile rows n0..n0+7)ᵀ: one 8-column n-tile of a product whose
 * A operand (16 rows x D) is `a` (D/16 fragments) and whose B operand's
 * columns are tile rows (k = the tile's D columns); two k-steps an
 * ldmatrix. */
template <int D>
__device__ static inline void at_mma_cols(float c[4], const uint32_t (*a)[4], const uint32_t *s, int n0, int lane) {
    c[0] = c[1] = c[2] = c[3] = 0.0f;
PC_UNROLL
    for (int ks = 0; ks < D / 16; ks += 2) {
        uint32_t b[4];
        pc_ldmatrix_x4(b, at_cols32<D>(s, n0, ks * 16, lane));
        pc_mma_bf16(c, a[ks], b);
        pc_mma_bf16(c, a[ks + 1], b + 2);
    }
}

/* acc[D/8][4] += a · tile rows k0..k0+15: the A operand `a` is 16 rows x
 * 16 (k = those tile rows), the B operand the rows themselves, all D
 * columns (transposed ldmatrix). */
template <int D>
__device__ static inline void at_mma_rows(float (*acc)[4], const uint32_t a[4], const uint32_t *s, int k0, int lane) {
PC_UNROLL
    for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t b[4];
        pc_ldmatrix_x4_trans(b, at_rows16<D>(s, k0, dt * 8, lane));
        pc_mma_bf16(acc[dt], a, b);
        pc_mma_bf16(acc[dt + 1], a, b + 2);
    }
}

/* The accumulators of n-tiles 2kk and 2kk+1 (16 columns) as the A
 * fragment of a next product whose k runs over those columns: the layouts
 * coincide, so only the rounding to bf16 is left. */
__device__ static inline void at_acc_to_a(uint32_t a[4], const float (*c)[4], int kk) {
    a[0] = pc_pack_bf16(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pc_pack_bf16(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pc_pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pc_pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* A block of the kernels that walk key tiles for one query tile (the
 * forward, dQ): which tile and head it owns, the most keys first, and
 * where that head's q, k and v start. load_keys(stage, j) issues key tile
 * j's K and V into `stage` as one cp.async group. */
template <int D, typename E> struct at_qblock {
    int64_t bh, b, h, qt, q0, Cl, C3, T;
    const E *q, *k, *v;
    __device__ at_qblock(const E *qkv, int64_t B, int64_t T_, int64_t NH) {
        const int64_t BH = B * NH, nQ = (T_ + AT_TILE - 1) / AT_TILE;
        qt = nQ - 1 - blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
        Cl = NH * D, C3 = 3 * Cl, q0 = qt * AT_TILE, T = T_;
        q = qkv + b * T * C3 + h * D, k = q + Cl, v = q + 2 * Cl;
    }
    __device__ void load_keys(unsigned char *smem, int stage, int64_t j) const {
        at_load_tile<D>(at_smem<D>::a(smem, stage), k + j * AT_TILE * C3, C3, T - j * AT_TILE);
        at_load_tile<D>(at_smem<D>::b(smem, stage), v + j * AT_TILE * C3, C3, T - j * AT_TILE);
        pc_cp_async_commit();
    }
};

/* ---- tensor cores: forward ------------------------------------------------ */

/* One block per (query tile, b, h), the tiles with the most keys first.
 * Warp w owns rows 16w..16w+15 of the tile; a lane holds rows g and g+8
 * (g = lane/4) of every accumulator. Key tile j (K and V) is in stage j % 2
 * (at_smem); j + 1 comes in while j is used. */
template <int D, typename E>
PC_KERNEL_T(AT_THREADS)
attn_fwd_tc(E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t NH, float scale_log2) {
    constexpr int KS = D / 16, DT = D / 8, NT = AT_TILE / 8;
    using S = at_smem<D>;
    PC_SHARED_DYNAMIC(smem);
    const at_qblock<D, E> blk(qkv, B, T, NH);
    const int64_t bh = blk.bh, b = blk.b, h = blk.h, qt = blk.qt, q0 = blk.q0, Cl = blk.Cl, C3 = blk.C3;
    const E *q = blk.q;
    const int warp = threadIdx.x / PC_WARP, lane = threadIdx.x % PC_WARP, g = lane / 4, t = lane % 4;
    const auto load_keys = [&](int stage, int64_t j) { blk.load_keys(smem, stage, j); };

    /* the warp's 16 query rows as A fragments, staged through stage 1's K
     * buffer while key tile 0 comes into stage 0 */
    at_load_tile<D>(S::a(smem, 1), q + q0 * C3, C3, T - q0);
    pc_cp_async_commit();
    load_keys(0, 0);
    pc_cp_async_wait<1>();
    __syncthreads();
    uint32_t qa[KS][4];
PC_UNROLL
    for (int ks = 0; ks < KS; ks++) pc_ldmatrix_x4(qa[ks], at_rows16<D>(S::a(smem, 1), warp * 16, ks * 16, lane));

    float o[DT][4], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
PC_UNROLL
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    const int64_t row0 = q0 + warp * 16 + g; /* rows row0 and row0 + 8 */

    for (int64_t kt = 0; kt <= qt; kt++) {
        const int64_t k0 = kt * AT_TILE;
        const int stage = (int)(kt & 1);
        /* this thread's copies of key tile kt have landed; after the barrier
         * everyone's have, and every warp is done with the other stage (key
         * tile kt-1, or Q), which key tile kt+1 then fills */
        pc_cp_async_wait<0>();
        __syncthreads();
        if (kt < qt) load_keys(stage ^ 1, kt + 1);
        const uint32_t *sK = S::a(smem, stage), *sV = S::b(smem, stage);

        /* S = Q·Kᵀ for the warp's 16 rows and the tile's 64 keys */
        float s[NT][4];
PC_UNROLL
        for (int nt = 0; nt < NT; nt++) at_mma_cols<D>(s[nt], qa, sK, nt * 8, lane);
        /* scale (into log2 units), mask, and the rows' new maxima */
        const bool edge = kt == qt || k0 + AT_TILE > T;
        float mx[2] = {m_run[0], m_run[1]};
PC_UNROLL
        for (int nt = 0; nt < NT; nt++)
PC_UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t key = k0 + nt * 8 + 2 * t + (i & 1), row = row0 + 8 * (i >> 1);
                float x = s[nt][i] * scale_log2;
                if (edge && (key > row || key >= T)) x = -INFINITY;
                s[nt][i] = x;
                mx[i >> 1] = fmaxf(mx[i >> 1], x);
            }
        float corr[2];
PC_UNROLL
        for (int r = 0; r < 2; r++) {
            mx[r] = at_quad_max(mx[r]); /* finite: key k0 <= every row of the tile */
            corr[r] = exp2f(m_run[r] - mx[r]);
            m_run[r] = mx[r];
            l_run[r] *= corr[r];
        }
PC_UNROLL
        for (int dt = 0; dt < DT; dt++)
PC_UNROLL
            for (int i = 0; i < 4; i++) o[dt][i] *= corr[i >> 1];
PC_UNROLL
        for (int nt = 0; nt < NT; nt++)
PC_UNROLL
            for (int i = 0; i < 4; i++) {
                const float p = exp2f(s[nt][i] - mx[i >> 1]);
                s[nt][i] = p;
                l_run[i >> 1] += p; /* this lane's part; the quad's sum at the end */
            }
        /* O += P·V: P's accumulators are already A fragments (k = key) */
PC_UNROLL
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[4];
            at_acc_to_a(pa, s, kk);
            at_mma_rows<D>(o, pa, sV, kk * 16, lane);
        }
    }

    E *orow = out + b * T * Cl + h * D;
PC_UNROLL
    for (int r = 0; r < 2; r++) {
        const float l = at_quad_sum(l_run[r]);
        const int64_t row = row0 + 8 * r;
        if (row >= T) continue;
        const float inv = 1.0f / l;
PC_UNROLL
        for (int dt = 0; dt < DT; dt++) at_put2(orow + row * Cl + dt * 8 + 2 * t, o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        if (t == 0) lse[bh * T + row] = (m_run[r] + log2f(l)) * AT_LN2;
    }
}

/* ---- tensor cores: backward ----------------------------------------------- */

/* dK and dV of one key tile: one block per (key tile, b, h), the tiles
 * seen by the most queries first. Warp w owns keys 16w..16w+15 and
 * computes, for each query tile, Sᵀ and dPᵀ (its 16 keys x 64 queries),
 * then dV += Pᵀ·dO and dK += dSᵀ·Q in registers. The i-th query tile the
 * block walks (Q, dO, its lse and D) is in stage i % 2; i + 1 comes in
 * while i is used. */
template <int D, typename E>
PC_KERNEL_T(AT_THREADS)
attn_bwd_dkdv_tc(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *Dv, int64_t B,
                     int64_t T, int64_t NH, float scale_log2, float scale) {
    constexpr int KS = D / 16, DT = D / 8, NT = AT_TILE / 8;
    using S = at_smem<D>;
    PC_SHARED_DYNAMIC(smem);
    const int64_t BH = B * NH, nQ = (T + AT_TILE - 1) / AT_TILE;
    const int64_t kt = blockIdx.x / BH, bh = blockIdx.x % BH, b = bh / NH, h = bh % NH;
    const int64_t Cl = NH * D, C3 = 3 * Cl, k0 = kt * AT_TILE;
    const E *q = qkv + b * T * C3 + h * D, *k = q + Cl, *v = q + 2 * Cl, *dO = dout + b * T * Cl + h * D;
    const int warp = threadIdx.x / PC_WARP, lane = threadIdx.x % PC_WARP, g = lane / 4, t = lane % 4;
    /* query tile j into `stage` */
    const auto load_queries = [&](int stage, int64_t j) {
        const int64_t r0 = j * AT_TILE;
        at_load_tile<D>(S::a(smem, stage), q + r0 * C3, C3, T - r0);
        at_load_tile<D>(S::b(smem, stage), dO + r0 * Cl, Cl, T - r0);
        at_load_rows(S::lse(smem, stage), S::dv(smem, stage), lse + bh * T + r0, Dv + bh * T + r0, T - r0);
        pc_cp_async_commit();
    };

    /* the warp's 16 keys of K and V as A fragments, staged through stage 1
     * while the first query tile comes into stage 0 */
    at_load_tile<D>(S::a(smem, 1), k + k0 * C3, C3, T - k0);
    at_load_tile<D>(S::b(smem, 1), v + k0 * C3, C3, T - k0);
    pc_cp_async_commit();
    load_queries(0, kt);
    pc_cp_async_wait<1>();
    __syncthreads();
    uint32_t ka[KS][4], va[KS][4];
PC_UNROLL
    for (int ks = 0; ks < KS; ks++) {
        pc_ldmatrix_x4(ka[ks], at_rows16<D>(S::a(smem, 1), warp * 16, ks * 16, lane));
        pc_ldmatrix_x4(va[ks], at_rows16<D>(S::b(smem, 1), warp * 16, ks * 16, lane));
    }
    float dk[DT][4], dv[DT][4];
PC_UNROLL
    for (int dt = 0; dt < DT; dt++)
PC_UNROLL
        for (int i = 0; i < 4; i++) dk[dt][i] = dv[dt][i] = 0.0f;
    const int64_t key0 = k0 + warp * 16 + g; /* keys key0 and key0 + 8 */

    for (int64_t qt = kt; qt < nQ; qt++) {
        const int64_t q0 = qt * AT_TILE;
        const int stage = (int)((qt - kt) & 1);
        /* as the forward's loop: query tile qt has landed, the other stage
         * is free for qt+1 */
        pc_cp_async_wait<0>();
        at_finish_rows(S::lse(smem, stage), S::dv(smem, stage), T - q0);
        __syncthreads();
        if (qt + 1 < nQ) load_queries(stage ^ 1, qt + 1);
        const uint32_t *sA = S::a(smem, stage), *sB = S::b(smem, stage);
        const float *sL = S::lse(smem, stage), *sD = S::dv(smem, stage);

        float st[NT][4], dpt[NT][4]; /* Sᵀ and dPᵀ: rows = keys, columns = queries */
PC_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            at_mma_cols<D>(st[nt], ka, sA, nt * 8, lane);
            at_mma_cols<D>(dpt[nt], va, sB, nt * 8, lane);
        }
        /* Pᵀ = exp(s - lse), 0 where the query precedes the key; dSᵀ = Pᵀ(dPᵀ - D) */
PC_UNROLL
        for (int nt = 0; nt < NT; nt++)
PC_UNROLL
            for (int i = 0; i < 4; i++) {
                const int c = nt * 8 + 2 * t + (i & 1);
                float p = exp2f(st[nt][i] * scale_log2 - sL[c]);
                if (qt == kt && q0 + c < key0 + 8 * (i >> 1)) p = 0.0f;
                st[nt][i] = p;
                dpt[nt][i] = p * (dpt[nt][i] - sD[c]);
            }
        /* dV += Pᵀ·dO, dK += dSᵀ·Q (k = query) */
PC_UNROLL
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[4], da[4];
            at_acc_to_a(pa, st, kk);
            at_acc_to_a(da, dpt, kk);
            at_mma_rows<D>(dv, pa, sB, kk * 16, lane);
            at_mma_rows<D>(dk, da, sA, kk * 16, lane);
        }
    }

    E *dkrow = dqkv + b * T * C3 + Cl + h * D, *dvrow = dkrow + Cl;
PC_UNROLL
    for (int r = 0; r < 2; r++) {
        const int64_t key = key0 + 8 * r;
        if (key >= T) continue;
PC_UNROLL
        for (int dt = 0; dt < DT; dt++) {
            at_put2(dkrow + key * C3 + dt * 8 + 2 * t, dk[dt][2 * r] * scale, dk[dt][2 * r + 1] * scale);
            at_put2(dvrow + key * C3 + dt * 8 + 2 * t, dv[dt][2 * r], dv[dt][2 * r + 1]);
        }
    }
}

/* dQ of one query tile: one block per (query tile, b, h), the most keys
 * first; warp w owns rows 16w..16w+15 and walks the key tiles up to the
 * diagonal: S and dP again, dQ += dS·K in registers. Key tile j (K and V)
 * is in stage j % 2, as in the forward. */
template <int D, typename E>
PC_KERNEL_T(AT_THREADS)
attn_bwd_dq_tc(E *dqkv, const E *dout, const E *qkv, const float *lse, const float *Dv, int64_t B,
                   int64_t T, int64_t NH, float scale_log2, float scale) {
    constexpr int KS = D / 16, DT = D / 8, NT = AT_TILE / 8;
    using S = at_smem<D>;
    PC_SHARED_DYNAMIC(smem);
    const at_qblock<D, E> blk(qkv, B, T, NH);
    const int64_t bh = blk.bh, b = blk.b, h = blk.h, qt = blk.qt, q0 = blk.q0, Cl = blk.Cl, C3 = blk.C3;
    const E *q = blk.q, *dO = dout + b * T * Cl + h * D;
    const int warp = threadIdx.x / PC_WARP, lane = threadIdx.x % PC_WARP, g = lane / 4, t = lane % 4;
    const auto load_keys = [&](int stage, int64_t j) { blk.load_keys(smem, stage, j); };

    /* the warp's 16 rows of Q and dO as A fragments, staged through stage
     * 1 while key tile 0 comes into stage 0 */
    at_load_tile<D>(S::a(smem, 1), q + q0 * C3, C3, T - q0);
    at_load_tile<D>(S::b(smem, 1), dO + q0 * Cl, Cl, T - q0);
    pc_cp_async_commit();
    load_keys(0, 0);
    pc_cp_async_wait<1>();
    __syncthreads();
    uint32_t qa[KS][4], oa[KS][4];
PC_UNROLL
    for (int ks = 0; ks < KS; ks++) {
        pc_ldmatrix_x4(qa[ks], at_rows16<D>(S::a(smem, 1), warp * 16, ks * 16, lane));
        pc_ldmatrix_x4(oa[ks], at_rows16<D>(S::b(smem, 1), warp * 16, ks * 16, lane));
    }
    const int64_t row0 = q0 + warp * 16 + g;
    float l2[2], dr[2];
PC_UNROLL
    for (int r = 0; r < 2; r++) {
        const bool in = row0 + 8 * r < T;
        l2[r] = in ? lse[bh * T + row0 + 8 * r] * AT_LOG2E : INFINITY;
        dr[r] = in ? Dv[bh * T + row0 + 8 * r] : 0.0f;
    }
    float dq[DT][4];
PC_UNROLL
    for (int dt = 0; dt < DT; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;

    for (int64_t kt = 0; kt <= qt; kt++) {
        const int64_t k0 = kt * AT_TILE;
        const int stage = (int)(kt & 1);
        pc_cp_async_wait<0>(); /* as the forward's loop */
        __syncthreads();
        if (kt < qt) load_keys(stage ^ 1, kt + 1);
        const uint32_t *sA = S::a(smem, stage), *sB = S::b(smem, stage);
        float s[NT][4], dp[NT][4];
PC_UNROLL
        for (int nt = 0; nt < NT; nt++) {
            at_mma_cols<D>(s[nt], qa, sA, nt * 8, lane);
            at_mma_cols<D>(dp[nt], oa, sB, nt * 8, lane);
        }
        const bool edge = kt == qt || k0 + AT_TILE > T;
PC_UNROLL
        for (int nt = 0; nt < NT; nt++)
PC_UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t key = k0 + nt * 8 + 2 * t + (i & 1), row = row0 + 8 * (i >> 1);
                float p = exp2f(s[nt][i] * scale_log2 - l2[i >> 1]);
                if (edge && (key > row || key >= T)) p = 0.0f;
                s[nt][i] = p * (dp[nt][i] - dr[i >> 1]); /* dS */
            }
        /* dQ += dS·K (k = key) */
PC_UNROLL
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t da[4];
            at_acc_to_a(da, s, kk);
            at_mma_rows<D>(dq, da, sA, kk * 16, lane);
        }
    }

    E *dqrow = dqkv + b * T * C3 + h * D;
PC_UNROLL
    for (int r = 0; r < 2; r++) {
        const int64_t row = row0 + 8 * r;
        if (row >= T) continue;
PC_UNROLL
        for (int dt = 0; dt < DT; dt++)
            at_put2(dqrow + row * C3 + dt * 8 + 2 * t, dq[dt][2 * r] * scale, dq[dt][2 * r + 1] * scale);
    }
}

/* ---- launches --------------------------------------------------------------- */

/* A launch of a kernel of the templates above (AT_THREADS threads,
 * `bytes` of dynamic shared memory: at_smem<d>'s FWD, DKDV or DQ) for head
 * size d and the element type E in scope (parenthesised: the template's
 * comma). */
#define AT_TC(kernel, d, bytes) PC_LAUNCH_T_SHARED((kernel<d, E>), blocks, AT_THREADS, AT_THREADS, (bytes))

template <typename E>
void at_forward_tc(E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const unsigned blocks = at_blocks(B, T, NH);
    const float scale = 1.0f / sqrtf((float)HS), sl = scale * AT_LOG2E;
    if (HS == 32) AT_TC(attn_fwd_tc, 32, at_smem<32>::FWD)(out, lse, qkv, B, T, NH, sl);
    if (HS == 64) AT_TC(attn_fwd_tc, 64, at_smem<64>::FWD)(out, lse, qkv, B, T, NH, sl);
    if (HS == 128) AT_TC(attn_fwd_tc, 128, at_smem<128>::FWD)(out, lse, qkv, B, T, NH, sl);
}

template <typename E>
void at_backward_tc(E *dqkv, const float *Dv, const E *dout, const E *qkv, const float *lse, int64_t B, int64_t T,
                    int64_t NH, int64_t HS) {
    const unsigned blocks = at_blocks(B, T, NH);
    const float scale = 1.0f / sqrtf((float)HS), sl = scale * AT_LOG2E;
#define AT_CASE(d)                                                                                                     \
    if (HS == d) {                                                                                                     \
        AT_TC(attn_bwd_dkdv_tc, d, at_smem<d>::DKDV)(dqkv, dout, qkv, lse, Dv, B, T, NH, sl, scale);                   \
        AT_TC(attn_bwd_dq_tc, d, at_smem<d>::DQ)(dqkv, dout, qkv, lse, Dv, B, T, NH, sl, scale);                       \
    }
    AT_CASE(32)
    AT_CASE(64)
    AT_CASE(128)
#undef AT_CASE
}

template void at_forward_tc<float>(float *, float *, const float *, int64_t, int64_t, int64_t, int64_t);
template void at_forward_tc<plait_bf16>(plait_bf16 *, float *, const plait_bf16 *, int64_t, int64_t, int64_t, int64_t);
template void at_backward_tc<float>(float *, const float *, const float *, const float *, const float *, int64_t,
                                    int64_t, int64_t, int64_t);
template void at_backward_tc<plait_bf16>(plait_bf16 *, const float *, const plait_bf16 *, const plait_bf16 *,
                                         const float *, int64_t, int64_t, int64_t, int64_t);

/* The tensor-core kernels at head size D for element type E allowed their
 * dynamic shared memory on the current device. */
template <int D, typename E> static cudaError_t at_allow_shared(void) {
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute((const void *)attn_fwd_tc<D, E>, a, (int)at_smem<D>::FWD);
    if (e == cudaSuccess) e = cudaFuncSetAttribute((const void *)attn_bwd_dkdv_tc<D, E>, a, (int)at_smem<D>::DKDV);
    if (e == cudaSuccess) e = cudaFuncSetAttribute((const void *)attn_bwd_dq_tc<D, E>, a, (int)at_smem<D>::DQ);
    return e;
}

extern "C" cudaError_t pc_attention_prepare(void) {
    cudaError_t e = at_allow_shared<32, float>();
    if (e == cudaSuccess) e = at_allow_shared<64, float>();
    if (e == cudaSuccess) e = at_allow_shared<128, float>();
    if (e == cudaSuccess) e = at_allow_shared<32, plait_bf16>();
    if (e == cudaSuccess) e = at_allow_shared<64, plait_bf16>();
    if (e == cudaSuccess) e = at_allow_shared<128, plait_bf16>();
    return e;
}
