/*
 * The emulated plugin's GPU count: plugins/common/nvidia's function (which
 * reads the driver's files) replaced by the emulated runtime's count, so
 * the plugin's probe, count and open see the emulated GPU(s).
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "nvidia_gpus.h"

int nvidia_visible_gpus(char *why, size_t why_len) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        snprintf(why, why_len, "PLAIT_CUDA_EMU_DEVICES asks for none");
        return 0;
    }
    return n;
}
