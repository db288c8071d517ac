/*
 * [optim.zeroN] master = sharded where the ranks' model would read float32
 * weights, refused before any rank starts: by `plait config check`, and by
 * the launcher of `plait train` / `plait bench train` (a layout it starts,
 * or -n N), in the words each rank would refuse it with (train/masters.h),
 * so that the job stops once instead of every rank stopping alone. `plait
 * plan` applies the same rule to each layout it weighs (cost/layouts.h,
 * plait_cost_check_masters).
 */
#ifndef PLAIT_CLI_MASTERS_CHECK_H
#define PLAIT_CLI_MASTERS_CHECK_H

#include "config/config.h"

/* PLAIT_OK, or PLAIT_ERR_INVALID_CONFIG naming where the key was set, why
 * the model reads float32 weights and what works. The model's bf16 rule
 * is the planner's (plait_cost_shape_init) on the device the ranks will
 * open (cli/cost_device.h, asked only when the key says sharded); a device
 * that does not open here (a GPU run checked on a machine without one) is
 * left to the ranks, which refuse it alike. Not thread-safe (loads
 * plugins, the thread's error slot). */
plait_status plait_cli_check_masters(const plait_config *cfg);

#endif
