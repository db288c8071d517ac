/*
 * Contiguous partition of the model's layers into pipeline chunks.
 *
 * K = p * v chunks in model order (virtual stage k = chunk c of stage s with
 * k = c*p + s). A partition is given by K+1 bounds: chunk k holds layers
 * [bounds[k], bounds[k+1]), with bounds[0] = 0, bounds[K] = n_layers and
 * every chunk non-empty. So layer 0 (the token embedding) is always on
 * stage 0 and the last layer (ln_f, head and loss) on the last stage.
 * The balanced cut is the SDK's (plait/partition_util.h,
 * plait_partition_balanced), the one `plait plan` predicts, and so is the
 * text a partition is written as (plait_partition_format); here are the
 * explicit one ([parallel.pp] stages) and what the plugin makes of bounds.
 *
 * Everything here is pure: no I/O, no globals, no allocation beyond what is
 * documented; thread-safe. Messages go to `err` (may be NULL; err_len bytes,
 * always terminated).
 */
#ifndef PLAIT_PP_PARTITION_H
#define PLAIT_PP_PARTITION_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* Parse an explicit partition "0-3,4-7" (also "5" for a one-layer chunk;
 * spaces allowed): exactly k ranges of global layer indices, in model
 * order, covering 0..n_layers-1 with no gap and no overlap. Writes k+1
 * bounds. Errors: PLAIT_ERR_INVALID_CONFIG with a message naming the range
 * and what is wrong (syntax, reversed/empty range, out of range, gap,
 * overlap or out of order, wrong count, first range not starting at 0,
 * last not ending at n_layers-1). */
plait_status pp_partition_parse(const char *text, int32_t n_layers, int32_t k, int32_t *bounds,
                                char *err, size_t err_len);

/* Cost of the most expensive chunk. */
double pp_partition_max_cost(const double *costs, int32_t k, const int32_t *bounds);

/* Fill layer_stage and layer_chunk (n_layers entries each) from the bounds
 * of k = p*v chunks: layers of chunk k go to stage k % p, model chunk k / p. */
void pp_partition_assign(const int32_t *bounds, int32_t p, int32_t v, int32_t *layer_stage,
                         int32_t *layer_chunk);

#endif
