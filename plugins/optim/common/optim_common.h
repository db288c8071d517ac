/*
 * Logic shared by the Adam-family optimizer plugins (adam, zero1/2/3),
 * compiled into each of them (a static source, no shared library). The
 * hyperparameters, the learning-rate schedule, clipping, the rule of which
 * gradients count in the global norm and the exact global norm itself are
 * the SDK's (plait/optim_util.h), shared with third-party optimizers; this
 * file adds only what is AdamW's. Uses only the SDK (plugins never link the
 * core).
 */
#ifndef PLAIT_OPTIM_COMMON_H
#define PLAIT_OPTIM_COMMON_H

#include <plait/host.h>
#include <plait/optim.h>
#include <plait/optim_util.h>

/* The start of one AdamW update, shared by adam and the ZeRO stages: fails
 * (naming `who`, nothing changed) when the global norm is not finite; else
 * advances *updates and fills the kernel arguments for this step: the
 * scheduled lr, the clipping scale and the bias-correction step. */
plait_status optim_begin_update(const plait_host *host, const char *who, const plait_optim_hparams *hp, int64_t step,
                                double norm, int64_t *updates, plait_adamw_args *args);

/* Where [section] key of `cfg` was set, for a message that names it
 * (host->config_where, ABI 1.34; "config" from an older core). */
const char *optim_where(const plait_host *host, const plait_config *cfg, const char *section, const char *key);

/* [optim] offload_params = true beside optimizer `who`, which keeps every
 * parameter whole (adam, zero1, zero2): refused naming where it was set,
 * in the words both ops.check and create() use. */
plait_status optim_refuse_offload_params(const plait_host *host, const plait_config *cfg, const char *who);

#endif
