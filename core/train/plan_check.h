/*
 * The rules every parallel plugin's plans must keep across the ranks of one
 * layout — what the step executor relies on and cannot check rank by rank
 * (plait/parallel.h states them; `plait plugin test` prints their names):
 *   plan           every layer has exactly one pipeline stage and model
 *                  chunk, all ranks agree, and in model order the virtual
 *                  stages (chunk x pp + stage) run 0, 1, ..., V-1, none empty;
 *   plan-shards    a parameter's slices over a tensor-parallel group are all
 *                  whole, or tp distinct indices along one dimension;
 *   plan-batches   the data-parallel replicas' micro-batches partition the
 *                  step's exactly and the ranks of one replica agree;
 *   plan-schedule  each stage runs FORWARD then BACKWARD of each of its
 *                  (chunk, micro-batch) pairs exactly once, receives an
 *                  activation or gradient before using it and sends it after
 *                  making it, and ends with one REDUCE_GRADS, then OPTIM_STEP.
 * A plan breaking one would train wrong numbers or deadlock, so the
 * launcher's preflight (train/preflight.h) collects every rank's plan into a
 * set and refuses the layout before any rank starts.
 *
 * A set owns copies of what it was given (the plans may be freed after
 * plait_plan_set_add returns). Not thread-safe; one set per caller.
 */
#ifndef PLAIT_CORE_PLAN_CHECK_H
#define PLAIT_CORE_PLAN_CHECK_H

#include <stddef.h>

#include "train/preflight.h"

typedef struct plait_plan_set plait_plan_set;

/* An empty set for a dp x tp x pp layout; NULL (error set) when out of memory. */
plait_plan_set *plait_plan_set_new(int dp, int tp, int pp);

/* Add one rank's plan (a plait_layout_visit: `set` is the plait_plan_set).
 * Ranks beyond the layout's world size are ignored; running out of memory
 * is remembered and reported by plait_plan_set_check. */
void plait_plan_set_add(void *set, const plait_layout_rank *rank);

/* Ranks added so far. */
int plait_plan_set_ranks(const plait_plan_set *set);

/* Check the rules above over the ranks added (all of the layout's must have
 * been): NULL when every rule holds; else the name of the first rule broken,
 * with the ranks and items involved written to why[cap]. */
const char *plait_plan_set_check(const plait_plan_set *set, char *why, size_t cap);

/* Free the set and its copies; NULL is ignored. */
void plait_plan_set_free(plait_plan_set *set);

#endif
