/*
 * [run] precision on the CPU: which mode the kernels run, or why the
 * requested one cannot run here.
 *
 * fp32 always runs. bf16 needs AVX512_BF16 or AMX_BF16 (cpuid) and a bf16
 * product: oneDNN's matmul (libdnnl2) or a BLAS with cblas_sbgemm; tf32 is a GPU format and is refused on the CPU. The
 * hidden [run] debug_cpu_hide and debug_bf16_emulate keys are the testing
 * switches (a CPU without a feature; the bf16 numbers without the
 * instructions).
 *
 * These are the cpu device's rules ([device] plugin = cpu); any other
 * device accepts or refuses the mode in its open() (the core's own CPU
 * kernels then stay fp32).
 *
 * Thread-safety: reentrant. Errors: PLAIT_ERR_INVALID_CONFIG naming the
 * key's FILE:LINE (or its other origin), the value and what is missing.
 */
#ifndef PLAIT_CORE_TRAIN_PRECISION_H
#define PLAIT_CORE_TRAIN_PRECISION_H

#include <plait/types.h>

#include "config/config.h"

/* The kernels' mode for `cfg` (PLAIT_KERNELS_FP32, _BF16, _BF16_EMULATED of
 * kernels/kernels.h) in *mode. */
plait_status plait_precision_from_config(const plait_config *cfg, int *mode);

#endif
