#include "train/precision.h"

#include <stdio.h>
#include <string.h>

#include "cpu/blas.h"
#include "cpu/cpu_features.h"
#include "kernels/kernels.h"
#include "runtime/error.h"

plait_status plait_precision_from_config(const plait_config *cfg, int *mode) {
    const char *p = plait_config_str(cfg, "run", "precision");
    const char *where = NULL;
    plait_config_origin(cfg, "run", "precision", &where);
    *mode = PLAIT_KERNELS_FP32;
    /* another device judges the mode itself, in its open() */
    if (strcmp(plait_config_str(cfg, "device", "plugin"), "cpu") != 0) return PLAIT_OK;
    if (strcmp(p, "fp32") == 0) return PLAIT_OK;
    if (strcmp(p, "tf32") == 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'precision' in [run]: tf32 is TensorFloat-32, a format of NVIDIA GPUs' "
                               "tensor cores, and CPUs have no such mode; on the CPU use fp32 (the default) or bf16",
                               where);
    /* bf16 */
    plait_cpu_features f;
    plait_cpu_detect(&f);
    char bad[64];
    const char *hide = plait_config_str(cfg, "run", "debug_cpu_hide");
    if (plait_cpu_hide(&f, hide, bad, sizeof bad) != 0) {
        const char *hw = NULL;
        plait_config_origin(cfg, "run", "debug_cpu_hide", &hw);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'debug_cpu_hide' in [run]: '%s' is not a CPU feature (allowed: avx2, avx512, "
                               "avx512_bf16, amx_bf16)",
                               hw, bad);
    }
    if (plait_config_bool(cfg, "run", "debug_bf16_emulate")) {
        *mode = PLAIT_KERNELS_BF16_EMULATED;
        return PLAIT_OK;
    }
    if (!f.has[PLAIT_CPU_AVX512_BF16] && !f.has[PLAIT_CPU_AMX_BF16]) {
        char have[128];
        plait_cpu_feature_list(&f, have, sizeof have);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'precision' in [run]: bf16 needs a CPU with AVX512_BF16 or AMX_BF16, and this "
                               "one (%s) has neither (it has: %s); use precision = fp32",
                               where, f.brand[0] ? f.brand : "unknown", have);
    }
    char why[768];
    int rc = plait_kernels_bf16_native(NULL, 0, why, sizeof why);
    if (rc == -2) return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: key 'precision' in [run]: %s", where, why);
    if (rc != 0) {
        char blas[256];
        plait_blas_describe(blas, sizeof blas);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'precision' in [run]: this CPU has %s but %s (the BLAS: %s); use "
                               "precision = fp32, install Debian's libdnnl2, or use an OpenBLAS built with "
                               "BUILD_BFLOAT16=1",
                               where, f.has[PLAIT_CPU_AMX_BF16] ? "AMX_BF16" : "AVX512_BF16", why, blas);
    }
    *mode = PLAIT_KERNELS_BF16;
    return PLAIT_OK;
}
