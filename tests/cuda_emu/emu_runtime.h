/*
 * The emulated CUDA runtime's own functions (beyond CUDA's, which
 * emu_cudart.c implements with NVIDIA's declarations): what a launch
 * reports to it. Thread-safe.
 */
#ifndef PLAIT_CUDA_EMU_RUNTIME_H
#define PLAIT_CUDA_EMU_RUNTIME_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if `p` is NULL or lies in device or pinned memory this runtime handed
 * out; else prints why (kernel, argument index) and returns 0. */
int pc_emu_check_kernel_pointer(const char *kernel, int index, const void *p);

/* After a launch: rc 0 or -1 (the launch failed: CUDA's sticky
 * cudaErrorLaunchFailure from then on). */
void pc_emu_launched(int rc);

#ifdef __cplusplus
}
#endif
#endif
