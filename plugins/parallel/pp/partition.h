/*
 * Contiguous partition of the model's layers into pipeline chunks.
 *
 * K = p * v chunks in model order (virtual stage k = chunk c of stage s with
 * k = c*p + s). A partition is given by K+1 bounds: chunk k holds layers
 * [bounds[k], bounds[k+1]), with bounds[0] = 0, bounds[K] = n_layers and
 * every chunk non-empty. So layer 0 (the token embedding) is always on
 * stage 0 and the last layer (ln_f, head and loss) on the last stage.
 * The balanced cut is the SDK's (plait/partition_util.h,
 * plait_partition_balanced), the one `plait plan` predicts, and so are the
 * explicit one's parser ([parallel.pp] stages, plait_partition_parse) and
 * the text a partition is written as (plait_partition_format); here is
 * what the plugin makes of bounds (its log names the costliest chunk).
 *
 * Everything here is pure: no I/O, no globals, no allocation; thread-safe.
 */
#ifndef PLAIT_PP_PARTITION_H
#define PLAIT_PP_PARTITION_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* Cost of the most expensive chunk. */
double pp_partition_max_cost(const double *costs, int32_t k, const int32_t *bounds);

/* Fill layer_stage and layer_chunk (n_layers entries each) from the bounds
 * of k = p*v chunks: layers of chunk k go to stage k % p, model chunk k / p. */
void pp_partition_assign(const int32_t *bounds, int32_t p, int32_t v, int32_t *layer_stage,
                         int32_t *layer_chunk);

#endif
