/* What a partition's bounds make: the costliest chunk, each layer's stage and chunk. */
#include "partition.h"

double pp_partition_max_cost(const double *costs, int32_t k, const int32_t *bounds) {
    double worst = 0;
    for (int32_t c = 0; c < k; c++) {
        double sum = 0;
        for (int32_t i = bounds[c]; i < bounds[c + 1]; i++) sum += costs[i];
        if (sum > worst) worst = sum;
    }
    return worst;
}

void pp_partition_assign(const int32_t *bounds, int32_t p, int32_t v, int32_t *layer_stage,
                         int32_t *layer_chunk) {
    for (int32_t k = 0; k < p * v; k++)
        for (int32_t i = bounds[k]; i < bounds[k + 1]; i++) {
            layer_stage[i] = k % p;
            layer_chunk[i] = k / p;
        }
}
