/*
 * Which float32 master weights a distributed optimizer keeps sharded: the
 * rule of [optim.zeroN] master, one place for `plait train` (each rank,
 * once its model exists: run_params.c) and, before any rank starts, `plait
 * config check`, the launchers (cli/masters_check.h) and each layout `plait
 * plan` weighs (cost/layouts.h), so that all refuse the same runs in the
 * same words.
 */
#ifndef PLAIT_CORE_MASTERS_H
#define PLAIT_CORE_MASTERS_H

#include <stdint.h>

#include <plait/types.h>

#include "config/config.h"

/* [optim.<plugin>] master of an optimizer that can keep the float32
 * master weights sharded over dp (PLAIT_OPTIM_SHARDS_MASTERS in
 * optim_flags; any other optimizer: PLAIT_OK, *sharded 0): *sharded is 1
 * where they are (master = auto or sharded on a model that reads the
 * weights' bf16 copy, bf16_copy: plait_model_bf16_activations). master =
 * sharded where the model reads float32 weights (bf16_copy 0) is
 * PLAIT_ERR_INVALID_CONFIG naming where the key was set and what works.
 * `plait train` asks on every rank once its model exists; `plait config
 * check` asks with the rule the planner applies to the device the ranks
 * will open (cli/cost_device.h), so both refuse the same layouts with the
 * same words. Not thread-safe (the calling thread's error slot). */
plait_status plait_check_masters(const plait_config *cfg, uint32_t optim_flags, int bf16_copy, int *sharded);

#endif
