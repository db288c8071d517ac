/*
 * The emulated CUDA runtime's own functions (beyond CUDA's, which
 * emu_cudart.c and emu_memory.c implement with NVIDIA's declarations):
 * what a launch reports to it, and what queues work on its streams.
 * Thread-safe.
 */
#ifndef PLAIT_CUDA_EMU_RUNTIME_H
#define PLAIT_CUDA_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if `p` is NULL or lies in device or pinned memory this runtime handed
 * out; else prints why (kernel, argument index) and returns 0. */
int pc_emu_check_kernel_pointer(const char *kernel, int index, const void *p);

/* Device-wide synchronisations so far (cudaFree, cudaFreeHost,
 * cudaDeviceSynchronize). Exported from the emulated plugin (default
 * visibility) so a test can dlsym it. */
__attribute__((visibility("default"))) uint64_t plait_cuda_emu_device_syncs(void);

/* Host waits for one stream or event so far (cudaStreamSynchronize,
 * cudaEventSynchronize), exported likewise: a test sees that a code path
 * waits for nothing. */
__attribute__((visibility("default"))) uint64_t plait_cuda_emu_stream_syncs(void);

/* 1 if `p` lies in device memory this runtime handed out (cudaMalloc). */
int pc_emu_is_device_memory(const void *p);

/* 1 if [p, p+n) lies in one block of device or pinned memory this runtime
 * handed out: what a kernel reaches as global memory. */
int pc_emu_is_global_memory(const void *p, size_t n);

/* Threads a block of a kernel without __launch_bounds__ may have: above
 * it the compiler's free choice of up to 255 registers a thread can exceed
 * a multiprocessor's 65536, and the GPU refuses the launch. */
#define PC_EMU_UNBOUNDED_THREADS 256u

/* 1 if a block of `threads` fits the kernel's __launch_bounds__
 * `max_threads` (0: it declares none, PC_EMU_UNBOUNDED_THREADS then); else
 * prints why and returns 0 (a GPU refuses such a launch). */
int pc_emu_check_bound(const char *kernel, unsigned threads, unsigned max_threads);

/* 1 if a block of kernel `func` may have `bytes` of dynamic shared memory
 * on the calling thread's device: up to 48 KiB, or up to what
 * cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) set
 * there (at most 227 KiB); else prints why and returns 0 (a GPU refuses
 * such a launch). */
int pc_emu_check_shared(const char *kernel, const void *func, size_t bytes);

/* After a launch: rc 0 or -1 (the launch failed: CUDA's sticky
 * cudaErrorLaunchFailure from then on). */
void pc_emu_launched(int rc);

/* Queues run(ctx) on stream `stream` (a cudaStream_t; NULL: the legacy
 * default stream), then drop(ctx); returns 0, or -1 (an unknown stream or
 * no memory: drop(ctx) was called, run never will be). Kernel launches and
 * the cuBLASLt stand-in's products go through it. */
int pc_emu_enqueue(void *stream, void (*run)(void *), void (*drop)(void *), void *ctx);

#ifdef __cplusplus
}
#endif
#endif
