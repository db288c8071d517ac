/*
 * The optimizer plugin against a layout with experts and against the
 * learning-rate schedule (train/optim_abi.h), checked before any rank
 * starts: by `plait config check`, and by the launcher of `plait
 * train` / `plait bench train`, in the words each rank would refuse it
 * with (train/optim_abi.h), so that the job stops once instead of every
 * rank stopping alone.
 */
#ifndef PLAIT_CLI_OPTIM_CHECK_H
#define PLAIT_CLI_OPTIM_CHECK_H

#include "config/config.h"

/* PLAIT_OK, or PLAIT_ERR_INVALID_CONFIG naming where the key was set, the
 * plugin's ABI and what works ([parallel] ep > 1, or tp x ep, with an
 * optimizer that predates them, or a schedule of a later ABI than it
 * declares). The plugin is loaded only at ep > 1 or for such a schedule; one
 * that does not load here is left to the ranks, which name why. Not
 * thread-safe (loads plugins, the thread's error slot). */
plait_status plait_cli_check_optim(const plait_config *cfg);

#endif
