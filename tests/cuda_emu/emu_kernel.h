/*
 * CUDA C++ for the host compiler: what the cuda device plugin's kernel
 * files (plugins/device/cuda, the .cu files) use, defined over the emulator's
 * scheduler (emu_sched.h) so that g++ compiles the same source nvcc does
 * and the kernels run on the CPU. Force-included (-include) before
 * everything else in each .cu file of the emulated plugin; kcommon.cuh's
 * PC_LAUNCH turns into pc_emu_launcher() when PLAIT_CUDA_EMU is defined.
 *
 * Function qualifiers are dropped, __launch_bounds__ too (PC_KERNEL hands
 * the bound to the launch, which refuses a block over it, and a block of
 * over 256 threads of a kernel that declares none, as a GPU may), __shared__
 * becomes static storage (one block runs at a time in the process,
 * launches being serialised, so a block's threads share it as they would
 * on-chip) and dynamic shared memory the scheduler's buffer
 * (pc_emu_dynamic_shared, through kcommon.cuh's PC_SHARED_DYNAMIC), and
 * every launch checks that each pointer argument lies in
 * memory the emulated runtime handed out as device or pinned memory (a
 * host pointer given to a kernel faults on a GPU), then queues the kernel
 * on its stream: it runs later, in stream order (emu_queue.h).
 */
#ifndef PLAIT_CUDA_EMU_KERNEL_H
#define PLAIT_CUDA_EMU_KERNEL_H

/* CUDA's headers keep qualifiers defined before them */
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>

#include "emu_sched.h"
#include "emu_runtime.h"

static inline uint3 pc_emu_uint3(int which) {
    const unsigned *v = pc_emu_builtin(which);
    return make_uint3(v[0], v[1], v[2]);
}
#define threadIdx (pc_emu_uint3(0))
#define blockIdx (pc_emu_uint3(1))
#define blockDim (pc_emu_uint3(2))
#define gridDim (pc_emu_uint3(3))
#define warpSize 32

static inline void __syncthreads(void) { pc_emu_syncthreads(); }

template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8, "the emulator shuffles values of up to 8 bytes");
    T out;
    unsigned lane = pc_emu_builtin(0)[0] % 32u;
    (void)width;
    pc_emu_shuffle(mask, &v, &out, sizeof v, lane ^ (unsigned)lane_mask);
    return out;
}

/* ---- warp collectives (every lane of the warp must reach them: stricter
 * than CUDA, which waits for the mask's lanes only) ---------------------- */

static inline unsigned pc_emu_lane_id(void) { return pc_emu_builtin(0)[0] % 32u; }

static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)pc_emu_warp_gather(mask, "", 0); }

static inline unsigned __ballot_sync(unsigned mask, int pred) {
    unsigned char p = pred != 0;
    unsigned out = 0;
    const pc_emu_lane *all = pc_emu_warp_gather(mask, &p, 1);
    for (unsigned l = 0; l < 32; l++) out |= (mask >> l & 1u) && all[l].value[0] ? 1u << l : 0u;
    return out;
}

/* the lanes of `mask` whose value equals the caller's */
template <typename T> static inline unsigned __match_any_sync(unsigned mask, T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_any_sync takes 32- or 64-bit values");
    unsigned out = 0;
    const pc_emu_lane *all = pc_emu_warp_gather(mask, &v, sizeof v);
    for (unsigned l = 0; l < 32; l++) out |= (mask >> l & 1u) && memcmp(all[l].value, &v, sizeof v) == 0 ? 1u << l : 0u;
    return out;
}

/* each lane's 32-bit value, 0 for the lanes outside `mask` (each lane of
 * which gives the same mask) */
static inline void pc_emu_gather_u32(unsigned mask, unsigned v, unsigned value[32]) {
    const pc_emu_lane *all = pc_emu_warp_gather(mask, &v, sizeof v);
    for (unsigned l = 0; l < 32; l++) {
        value[l] = 0;
        if (mask >> l & 1u) memcpy(&value[l], all[l].value, sizeof value[l]);
    }
}

/* Σ over the lanes of `mask`, modulo 2^32 */
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
    unsigned value[32], out = 0;
    pc_emu_gather_u32(mask, v, value);
    for (unsigned l = 0; l < 32; l++) out += value[l];
    return out;
}

/* the largest of the values of the lanes of `mask` */
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    unsigned value[32], out = 0;
    pc_emu_gather_u32(mask, v, value);
    for (unsigned l = 0; l < 32; l++) out = value[l] > out ? value[l] : out;
    return out;
}

static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }

/* The threads of a launch run on one OS thread and never switch inside
 * these, so a plain read-modify-write is atomic among them. A 64-bit one on
 * shared memory (the kernels' __shared__ arrays are static storage here,
 * outside the runtime's device memory) is refused: sm_80 and sm_90 have no
 * such instruction, nvcc emits a compare-and-swap loop (ATOMS.CAST.SPIN.64
 * in sm_90's code), and lanes contending for one word serialise on it. */
template <typename T> static inline T atomicAdd(T *p, T v) {
    if (sizeof(T) == 8 && !pc_emu_is_device_memory(p))
        pc_emu_fault("a 64-bit atomicAdd on shared memory (a compare-and-swap loop on sm_80 and sm_90: contended, "
                     "it serialises the warp)");
    T old = *p;
    *p = old + v;
    return old;
}

/* CUDA's explicitly rounded arithmetic (never fused into an FMA on a GPU):
 * here every operation is rounded on its own already (ISO C++, no
 * contraction), so they are the plain operations. */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }

static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- tensor-core instructions (plugins/device/cuda/mma.cuh's stand-ins) ----
 *
 * What NVIDIA's PTX ISA documents, computed once per warp when its 32
 * lanes reach the instruction (pc_emu_warp_op): ldmatrix.sync.aligned.m8n8
 * (.x1/.x2/.x4, .trans; b16) and mma.sync.aligned.m16n8k16.row.col with
 * bf16 operands and f32 accumulators ("Matrix Fragments for mma.m16n8k16
 * with floating point type"). In a lane, groupID = lane / 4 and
 * threadID_in_group = lane % 4. A shared misreading of that documentation
 * would pass both the stand-in and the kernels written against it: the gpu
 * tests on a GPU are what settles it. */

static inline float pc_emu_bf16_lo(uint32_t r) { return __uint_as_float(r << 16); }
static inline float pc_emu_bf16_hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

struct pc_emu_ldmatrix_lane {
    const void *row; /* the row address this lane supplies */
    uint32_t *r;     /* its destination registers */
    int num, trans;
};

/* Matrix j's 8 rows are the addresses of lanes 8j..8j+7 (16-byte aligned
 * rows of 8 b16 elements). Lane l receives in r[j] the pair at row l/4,
 * columns 2(l%4) and 2(l%4)+1 (lower column in the lower half); with
 * .trans, the pair of the transposed matrix: rows 2(l%4), 2(l%4)+1 of
 * column l/4. */
static const char *pc_emu_ldmatrix_op(void *const lanes[32]) {
    pc_emu_ldmatrix_lane *const *L = (pc_emu_ldmatrix_lane *const *)lanes;
    const int num = L[0]->num, trans = L[0]->trans;
    uint32_t got[32][4];
    for (int l = 0; l < 32; l++) {
        if (L[l]->num != num || L[l]->trans != trans) return "ldmatrix: lanes of one warp at different shapes";
        if (l < 8 * num && ((uintptr_t)L[l]->row % 16) != 0) return "ldmatrix: a row address not 16-byte aligned";
    }
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < num; j++) {
            uint16_t lo, hi;
            if (!trans) {
                const unsigned char *p = (const unsigned char *)L[8 * j + l / 4]->row + 4 * (l % 4);
                memcpy(&lo, p, 2);
                memcpy(&hi, p + 2, 2);
            } else {
                memcpy(&lo, (const unsigned char *)L[8 * j + 2 * (l % 4)]->row + 2 * (l / 4), 2);
                memcpy(&hi, (const unsigned char *)L[8 * j + 2 * (l % 4) + 1]->row + 2 * (l / 4), 2);
            }
            got[l][j] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < num; j++) L[l]->r[j] = got[l][j];
    return NULL;
}

static inline void pc_emu_ldmatrix(uint32_t *r, const void *row, int num, int trans) {
    pc_emu_ldmatrix_lane me = {row, r, num, trans};
    pc_emu_warp_op(&me, pc_emu_ldmatrix_op);
}

struct pc_emu_mma_lane {
    const uint32_t *a, *b; /* 4 and 2 registers of bf16 pairs */
    const float *c;
    float *d; /* may be c */
};

/* D[16x8] = A[16x16]·B[16x8] + C. A's register i/2, half i%2 holds
 * a_i at row groupID + 8·((i/2)%2), column 2·threadID_in_group + i%2 +
 * 8·(i/4); B's b_i at row 2·threadID_in_group + i%2 + 8·(i/2), column
 * groupID; C's and D's c_i at row groupID + 8·(i/2), column
 * 2·threadID_in_group + i%2. The products of bf16 values are exact in
 * fp32; they are summed in fp32 in k order after C (the hardware's
 * internal order and precision are its own). */
static const char *pc_emu_mma_bf16_op(void *const lanes[32]) {
    pc_emu_mma_lane *const *L = (pc_emu_mma_lane *const *)lanes;
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 8; i++) {
            uint32_t ra = L[l]->a[i / 2];
            A[g + 8 * ((i / 2) % 2)][2 * t + i % 2 + 8 * (i / 4)] = i % 2 ? pc_emu_bf16_hi(ra) : pc_emu_bf16_lo(ra);
        }
        for (int i = 0; i < 4; i++) {
            uint32_t rb = L[l]->b[i / 2];
            B[2 * t + i % 2 + 8 * (i / 2)][g] = i % 2 ? pc_emu_bf16_hi(rb) : pc_emu_bf16_lo(rb);
        }
        for (int i = 0; i < 4; i++) C[g + 8 * (i / 2)][2 * t + i % 2] = L[l]->c[i];
    }
    /* a row's 8 sums side by side (the compiler's vectors), each in k order */
    float D[16][8];
    for (int row = 0; row < 16; row++) {
        float acc[8];
        for (int col = 0; col < 8; col++) acc[col] = C[row][col];
        for (int k = 0; k < 16; k++)
            for (int col = 0; col < 8; col++) acc[col] += A[row][k] * B[k][col];
        for (int col = 0; col < 8; col++) D[row][col] = acc[col];
    }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) L[l]->d[i] = D[l / 4 + 8 * (i / 2)][2 * (l % 4) + i % 2];
    return NULL;
}

static inline void pc_emu_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    pc_emu_mma_lane me = {a, b, c, d};
    pc_emu_warp_op(&me, pc_emu_mma_bf16_op);
}

/* ---- asynchronous copies (plugins/device/cuda/async_copy.cuh's stand-ins) ----
 *
 * cp.async from global to shared memory, queued per thread and performed
 * at the latest moment PTX allows (emu_sched.h says what is checked). The
 * source must be memory a kernel reaches as global (device or pinned),
 * the destination must not be. */
static inline void pc_emu_cp_async_global(void *dst, const void *src, unsigned bytes) {
    if (!pc_emu_is_global_memory(src, bytes))
        pc_emu_fault("cp.async from memory that is not the device's (its source must be global memory)");
    if (pc_emu_is_global_memory(dst, 1))
        pc_emu_fault("cp.async into device memory (its destination must be shared memory)");
    pc_emu_cp_async(dst, src, bytes);
}

/* ---- launches -------------------------------------------------------------- */

template <typename... P> struct pc_emu_call {
    void (*fn)(P...);
    std::tuple<P...> args;
    /* each GPU thread gets its own copies of the arguments, as on a GPU */
    static void body(void *c) {
        auto *s = static_cast<pc_emu_call *>(c);
        std::apply(s->fn, s->args);
    }
};

template <typename T> static inline int pc_emu_arg_ok(const char *kernel, int i, const T &v) {
    if constexpr (std::is_pointer_v<T>)
        return pc_emu_check_kernel_pointer(kernel, i, (const void *)v);
    else
        return (void)kernel, (void)i, (void)v, 1;
}

/* One queued launch: the kernel runs when its stream reaches it. */
template <typename... P> struct pc_emu_queued {
    const char *name;
    unsigned grid[3], block[3];
    size_t shared; /* dynamic shared memory a block */
    pc_emu_call<P...> call;
    static void run(void *q) {
        auto *l = static_cast<pc_emu_queued *>(q);
        pc_emu_launched(pc_emu_run(l->name, l->grid, l->block, l->shared, &pc_emu_call<P...>::body, &l->call));
    }
    static void drop(void *q) { delete static_cast<pc_emu_queued *>(q); }
};

template <typename... P> struct pc_emu_launch {
    const char *name;
    void (*fn)(P...);
    dim3 grid, block;
    cudaStream_t stream;
    unsigned max_threads; /* __launch_bounds__; 0: none declared */
    size_t shared;        /* dynamic shared memory a block */
    template <typename... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel launched with the wrong number of arguments");
        if (!pc_emu_check_bound(name, block.x * block.y * block.z, max_threads) ||
            !pc_emu_check_shared(name, (const void *)fn, shared)) {
            pc_emu_launched(-1);
            return;
        }
        auto *q = new pc_emu_queued<P...>{name,
                                          {grid.x, grid.y, grid.z},
                                          {block.x, block.y, block.z},
                                          shared,
                                          {fn, std::tuple<P...>(static_cast<P>(a)...)}};
        /* pointers are checked at the launch, where the message can name it */
        int ok = std::apply(
            [this](const P &...v) {
                int i = 0, all = 1;
                ((all &= pc_emu_arg_ok(name, i++, v)), ...);
                return all;
            },
            q->call.args);
        if (!ok) {
            delete q;
            pc_emu_launched(-1);
            return;
        }
        if (pc_emu_enqueue((void *)stream, &pc_emu_queued<P...>::run, &pc_emu_queued<P...>::drop, q) != 0)
            pc_emu_launched(-1);
    }
};

/* A launch on `stream` (the legacy default stream if none is given) of a
 * kernel whose __launch_bounds__ is `max_threads` (0: none declared), each
 * block with `shared` bytes of dynamic shared memory (over 48 KiB only
 * where cudaFuncSetAttribute allowed the kernel that much). */
template <typename... P>
static inline pc_emu_launch<P...> pc_emu_launcher(const char *name, void (*fn)(P...), dim3 grid, dim3 block,
                                                  cudaStream_t stream = NULL, unsigned max_threads = 0,
                                                  size_t shared = 0) {
    return pc_emu_launch<P...>{name, fn, grid, block, stream, max_threads, shared};
}

#endif
