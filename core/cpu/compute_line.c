#include "cpu/compute_line.h"

#include <stdio.h>

#include "cpu/blas.h"
#include "cpu/cpu_features.h"
#include "kernels/kernels.h"

void plait_compute_line(char *buf, size_t len, int threads, const char *precision) {
    plait_cpu_features f;
    plait_cpu_detect(&f);
    char have[128], blas[256], gemm[160], bf16[160] = "";
    plait_cpu_feature_list(&f, have, sizeof have);
    plait_blas_describe(blas, sizeof blas);
    plait_kernels_gemm_describe(gemm, sizeof gemm);
    /* bf16 runs: which library multiplies the bf16 operands */
    if (plait_kernels_precision() != PLAIT_KERNELS_FP32) {
        bf16[0] = ',', bf16[1] = ' ';
        plait_kernels_bf16_describe(bf16 + 2, sizeof bf16 - 2);
    }
    snprintf(buf, len, "%s (%s), %s, %s%s, %d math thread%s per rank, precision %s", f.brand[0] ? f.brand : "CPU", have,
             blas, gemm, bf16, threads, threads == 1 ? "" : "s", precision);
}
