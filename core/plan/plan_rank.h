/*
 * One rank's step cost (plan.h) from the plan its parallel plugin made: the
 * layers it runs, its TP slices, its pipeline schedule. Used as the visitor
 * of plait_layout_preflight_visit (train/preflight.h). Pure; thread-safe.
 */
#ifndef PLAIT_CORE_PLAN_RANK_H
#define PLAIT_CORE_PLAN_RANK_H

#include "plan/plan.h"
#include "train/preflight.h"

/* Fill `out` for the rank `r` describes. The activation bytes follow the
 * model's slot layout (model/gpt.c, slot_layout and scratch_get) times the
 * largest number of micro-batches the schedule keeps alive per chunk. */
void plait_plan_rank_from_plan(const plait_layout_rank *r, plait_plan_rank *out);

#endif
