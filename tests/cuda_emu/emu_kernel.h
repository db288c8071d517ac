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
 * on-chip), and every launch checks that each pointer argument lies in
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

static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    pc_emu_lane all[32];
    pc_emu_warp_gather(mask, "", 0, all);
}

static inline unsigned __ballot_sync(unsigned mask, int pred) {
    pc_emu_lane all[32];
    unsigned char p = pred != 0;
    unsigned out = 0;
    pc_emu_warp_gather(mask, &p, 1, all);
    for (unsigned l = 0; l < 32; l++) out |= (mask >> l & 1u) && all[l].value[0] ? 1u << l : 0u;
    return out;
}

/* the lanes of `mask` whose value equals the caller's */
template <typename T> static inline unsigned __match_any_sync(unsigned mask, T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_any_sync takes 32- or 64-bit values");
    pc_emu_lane all[32];
    unsigned out = 0;
    pc_emu_warp_gather(mask, &v, sizeof v, all);
    for (unsigned l = 0; l < 32; l++) out |= (mask >> l & 1u) && memcmp(all[l].value, &v, sizeof v) == 0 ? 1u << l : 0u;
    return out;
}

/* Σ over the lanes of `mask` (each of which gives the same mask), modulo 2^32 */
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
    pc_emu_lane all[32];
    unsigned out = 0;
    pc_emu_warp_gather(mask, &v, sizeof v, all);
    for (unsigned l = 0; l < 32; l++)
        if (mask >> l & 1u) {
            unsigned x;
            memcpy(&x, all[l].value, sizeof x);
            out += x;
        }
    return out;
}

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
    pc_emu_call<P...> call;
    static void run(void *q) {
        auto *l = static_cast<pc_emu_queued *>(q);
        pc_emu_launched(pc_emu_run(l->name, l->grid, l->block, &pc_emu_call<P...>::body, &l->call));
    }
    static void drop(void *q) { delete static_cast<pc_emu_queued *>(q); }
};

template <typename... P> struct pc_emu_launch {
    const char *name;
    void (*fn)(P...);
    dim3 grid, block;
    cudaStream_t stream;
    unsigned max_threads; /* __launch_bounds__; 0: none declared */
    template <typename... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel launched with the wrong number of arguments");
        if (!pc_emu_check_bound(name, block.x * block.y * block.z, max_threads)) {
            pc_emu_launched(-1);
            return;
        }
        auto *q = new pc_emu_queued<P...>{
            name, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, {fn, std::tuple<P...>(static_cast<P>(a)...)}};
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
 * kernel whose __launch_bounds__ is `max_threads` (0: none declared). */
template <typename... P>
static inline pc_emu_launch<P...> pc_emu_launcher(const char *name, void (*fn)(P...), dim3 grid, dim3 block,
                                                  cudaStream_t stream = NULL, unsigned max_threads = 0) {
    return pc_emu_launch<P...>{name, fn, grid, block, stream, max_threads};
}

#endif
