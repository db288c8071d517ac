/*
 * CUDA C++ for the host compiler: what the cuda device plugin's kernel
 * files (plugins/device/cuda, the .cu files) use, defined over the emulator's
 * scheduler (emu_sched.h) so that g++ compiles the same source nvcc does
 * and the kernels run on the CPU. Force-included (-include) before
 * everything else in each .cu file of the emulated plugin; kcommon.cuh's
 * PC_LAUNCH turns into pc_emu_launcher() when PLAIT_CUDA_EMU is defined.
 *
 * Function qualifiers are dropped, __shared__ becomes static storage (one
 * block runs at a time in the process, launches being serialised, so a
 * block's threads share it as they would on-chip), and every launch checks that each pointer
 * argument lies in memory the emulated runtime handed out as device or
 * pinned memory (a host pointer given to a kernel faults on a GPU).
 */
#ifndef PLAIT_CUDA_EMU_KERNEL_H
#define PLAIT_CUDA_EMU_KERNEL_H

/* CUDA's headers keep qualifiers defined before them */
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static

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

/* The threads of a launch run on one OS thread and never switch inside
 * these, so a plain read-modify-write is atomic among them. */
template <typename T> static inline T atomicAdd(T *p, T v) {
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

template <typename... P> struct pc_emu_launch {
    const char *name;
    void (*fn)(P...);
    dim3 grid, block;
    template <typename... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel launched with the wrong number of arguments");
        pc_emu_call<P...> c{fn, std::tuple<P...>(static_cast<P>(a)...)};
        int ok = std::apply(
            [this](const P &...v) {
                int i = 0, all = 1;
                ((all &= pc_emu_arg_ok(name, i++, v)), ...);
                return all;
            },
            c.args);
        const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
        pc_emu_launched(ok ? pc_emu_run(name, g, b, &pc_emu_call<P...>::body, &c) : -1);
    }
};

template <typename... P>
static inline pc_emu_launch<P...> pc_emu_launcher(const char *name, void (*fn)(P...), dim3 grid, dim3 block) {
    return pc_emu_launch<P...>{name, fn, grid, block};
}

#endif
