/*
 * NVIDIA GPUs visible to this process, counted without CUDA: shared by the
 * plugins that drive NVIDIA GPUs (device/cuda, comm/nccl), built into each
 * as a static library (plugins/common/nvidia/CMakeLists.txt), hidden.
 *
 * Why without CUDA: a probe runs in processes that must not initialise the
 * CUDA runtime, above all a launcher that forks ranks afterwards (CUDA does
 * not survive fork); and a probe should not pay for the runtime's start-up
 * nor keep its descriptors open for the life of `plait plugins`.
 */
#ifndef PLAIT_PLUGINS_NVIDIA_GPUS_H
#define PLAIT_PLUGINS_NVIDIA_GPUS_H

#include <stddef.h>

/* Number of NVIDIA GPUs this process may use: those of the driver's list
 * in procfs (or its /dev/nvidiaN nodes) whose device node it can open,
 * filtered by CUDA_VISIBLE_DEVICES as CUDA filters it; where the driver
 * exposes neither, those `nvidia-smi -L` lists (started with posix_spawn,
 * never a fork of this process). 0 with a reason in `why` (a phrase, no
 * trailing period) when none. Makes no CUDA call and leaves no descriptor,
 * thread or child behind. The root of those paths is PLAIT_CUDA_SYSFS_ROOT
 * when set (tests only; nvidia-smi is then <root>/bin/nvidia-smi).
 * Thread-safe, in a process with threads too. */
int nvidia_visible_gpus(char *why, size_t why_len);

#endif
