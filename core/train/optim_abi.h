/*
 * What an optimizer plugin's declared ABI allows of a layout with experts
 * ([parallel] ep > 1) and of the learning-rate schedules ([optim]
 * lr_schedule): one rule for `plait train` (each rank once the plugin is
 * loaded: run_setup.c) and, before any rank starts, `plait config check`
 * and the launchers (cli/optim_check.h), so that all refuse the same runs
 * in the same words.
 */
#ifndef PLAIT_CORE_OPTIM_ABI_H
#define PLAIT_CORE_OPTIM_ABI_H

#include <stdint.h>

#include <plait/types.h>

#include "config/config.h"

/* The lowest optimizer ABI minor that reads the config's [optim]
 * lr_schedule as set: 36 for linear, wsd and inverse_sqrt, else 0. */
int plait_lr_schedule_minor(const plait_config *cfg);

/* PLAIT_OK, or PLAIT_ERR_INVALID_CONFIG naming where the key was set, the
 * plugin, its ABI and what works, for an optimizer (its ops' flags
 * `optim_flags`, ABI 1.`abi_minor`) that predates the schedule set
 * (plait_lr_schedule_minor), that at ep > 1 reduces the gradients
 * itself and predates the experts' group (plait_optim_init.edp_comm, ABI
 * 1.20), or that at tp x ep predates an expert tensor cut over both
 * (plait_plan.second_shards, ABI 1.28). `tp` and `ep` are the layout's
 * (the config's [parallel] keys resolved). Not thread-safe (the calling
 * thread's error slot). */
plait_status plait_check_optim_abi(const plait_config *cfg, int tp, int ep, uint32_t optim_flags, uint16_t abi_minor);

#endif
