/*
 * The cost of each pipeline stage of a layout from the model's shape alone,
 * without asking the parallel plugin for any rank's plan: what lets `plait
 * plan` weigh every layout of thousands of ranks in about a second. It
 * follows the plugins' rules (a rank of tp holds whole heads and 1/tp of
 * the MLP and of the vocabulary, padded to a multiple of tp; a pipeline
 * splits the layers into p x v contiguous chunks minimising the costliest;
 * the schedules keep the micro-batches alive their instruction lists do);
 * the plugin's own plan confirms the layouts `plait plan` shows.
 *
 * A plait_cost_model holds the model's description and caches (per tp,
 * per chunk count); it is not thread-safe. Everything else is pure.
 */
#ifndef PLAIT_CORE_COST_STAGES_H
#define PLAIT_CORE_COST_STAGES_H

#include <stddef.h>

#include "config/config.h"
#include "cost/cost.h"
#include "cost/layouts.h"

typedef struct plait_cost_model plait_cost_model;

/* The model `cfg` (finalized) describes. Errors: the model's own
 * (PLAIT_ERR_INVALID_CONFIG naming the key), PLAIT_ERR_NO_MEMORY. Free with
 * plait_cost_model_free. */
plait_status plait_cost_model_new(plait_config *cfg, plait_cost_model **out);
void plait_cost_model_free(plait_cost_model *m);

/* Why the model cannot be cut into tp slices and pp x v pipeline chunks
 * (written to why, returned), or NULL when it can. */
const char *plait_cost_model_refuses(const plait_cost_model *m, int tp, int pp, int v, char *why, size_t len);

/* The cost of each of l->pp stages (stages[s]) of layout `l` with
 * `global_batch` sequences a step, training in `precision` on the device
 * `dev` describes. The layout must not be refused (above) and its batch
 * arithmetic must hold (global_batch divisible by dp x micro_batch).
 * Returns 0, or -1 when out of memory. */
int plait_cost_model_stages(plait_cost_model *m, const plait_cost_layout *l, int64_t global_batch,
                            plait_precision precision, const plait_cost_device *dev, plait_cost_rank *stages);

/* 1 when the model has attention for context parallelism to split (the
 * gpt and llama archs), else 0. */
int plait_cost_model_attention(const plait_cost_model *m);

/* Parameters of the whole model (tied copies once). */
double plait_cost_model_params(const plait_cost_model *m);

#endif
