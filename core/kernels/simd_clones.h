/*
 * PLAIT_SIMD_CLONES: hot elementwise loops (the kernels', the collectives'
 * wire formats) are compiled for AVX-512, AVX2 and baseline x86-64 and the
 * best one is picked at load time (the binary must run on any x86-64, so
 * there is no -march). Every clone computes the same fixed-order sums; GCC
 * does not contract to FMA in ISO C mode, so the clones agree bit for bit
 * under GCC (clang may fuse within a clone). Sanitizer builds skip the
 * clones.
 */
#ifndef PLAIT_CORE_KERNELS_SIMD_CLONES_H
#define PLAIT_CORE_KERNELS_SIMD_CLONES_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(PLAIT_NO_SIMD_CLONES)
#define PLAIT_SIMD_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PLAIT_SIMD_CLONES
#endif

#endif
