#include "cpu/compute_line.h"

#include <stdio.h>

#include "cpu/blas.h"
#include "cpu/cpu_features.h"

void plait_compute_line(char *buf, size_t len, int threads, const char *precision) {
    plait_cpu_features f;
    plait_cpu_detect(&f);
    char have[128], blas[256];
    plait_cpu_feature_list(&f, have, sizeof have);
    plait_blas_describe(blas, sizeof blas);
    snprintf(buf, len, "%s (%s), %s, %d math thread%s per rank, precision %s", f.brand[0] ? f.brand : "CPU", have,
             blas, threads, threads == 1 ? "" : "s", precision);
}
