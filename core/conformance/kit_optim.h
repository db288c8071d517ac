/*
 * The optim part of `plait plugin test`: one process drives an optimizer
 * plugin through create → materialize → step on a small parameter set the
 * kit owns (three parameters, one without weight decay, 4.1 K elements),
 * with gradients large enough that clipping acts and a schedule with
 * warmup and decay, and checks:
 *   optim-math    each step's parameters against the reference update the
 *                 plugin's state names imply ("exp_avg","exp_avg_sq": AdamW
 *                 as PyTorch; "momentum": SGD with momentum as PyTorch, with
 *                 decoupled weight decay), after clipping by the global norm
 *                 and at the scheduled learning rate (plait/optim_util.h's
 *                 rules), and the lr and norm the step reports;
 *   optim-state   the state exported after two steps, materialized into a
 *                 fresh instance, continues bit for bit like the original;
 *   optim-memory  memory() counts 4 bytes per element for parameters and
 *                 gradients and 4 per element per state tensor.
 * Plugins that own parameter or gradient storage, or reduce gradients
 * themselves (ZeRO), need a data-parallel group: the kit says so (skip).
 * [optim] values for the checks are the kit's (kit_optim_overrides), and a
 * user's section.key=value overrides come after them.
 */
#ifndef PLAIT_CORE_KIT_OPTIM_H
#define PLAIT_CORE_KIT_OPTIM_H

#include <plait/plugin.h>

#include "config/config.h"
#include "conformance/kit_report.h"

/* The [optim] and [run] settings the checks run with, NULL-terminated. */
extern const char *const kit_optim_overrides[];

/* Run the optim checks on plugin `desc` (configuration `cfg`, which holds
 * the kit's overrides; `host`, the table handed to the plugin); rows go to
 * *report. */
void plait_kit_optim_run(const plait_plugin_desc *desc, const plait_config *cfg, const plait_host *host,
                         kit_report *report);

#endif
