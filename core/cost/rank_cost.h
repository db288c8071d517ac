/*
 * One rank's step cost (cost.h) from the plan its parallel plugin made: the
 * layers it runs, its TP slices, its pipeline schedule. Used as the visitor
 * of plait_layout_preflight_visit (train/preflight.h). Pure; thread-safe.
 */
#ifndef PLAIT_CORE_COST_RANK_COST_H
#define PLAIT_CORE_COST_RANK_COST_H

#include "cost/activations.h"
#include "cost/cost.h"
#include "train/preflight.h"

/* Fill `out` for the rank `r` describes, training in `precision` on the
 * device `dev` describes, with sequence parallelism over its tp group
 * when `sp` (activations.h says what it splits) and context parallelism
 * over `cp` ranks (the preflight plans a cp group's rank 0 alone: the
 * plan is the dp x tp x pp mesh's, and each cp rank computes and keeps
 * T / cp of every sequence, with ring attention's traffic). The activation bytes
 * follow the model's slot layout (model/model_slots.c: slot_carve and
 * plait_model_scratch_get) times the largest number of micro-batches the
 * schedule keeps alive per chunk, in bf16 where the model grants it
 * (plait_model_grants_bf16). With experts (`moe`, E > 0) and the mesh's
 * ep > 1, the experts' parameters are the rank's E / ep, and the
 * all-to-alls and held rows are counted (activations.h). residual_bf16:
 * the config's [run] residual is bf16; offload: its [model]
 * recompute_offload is host. */
void plait_cost_rank_from_plan(const plait_layout_rank *r, plait_precision precision, const plait_cost_device *dev,
                               int sp, int cp, int residual_bf16, int offload, const plait_cost_moe *moe,
                               plait_cost_rank *out);

#endif
