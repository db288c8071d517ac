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
 * The kit drives the step as the core does: each parameter is a layer of
 * its own, the forward hooks in order, the backward hooks in reverse with
 * the rank's gradient written in between, then finish_grads and step.
 * Plugins that own parameter or gradient storage, or reduce gradients
 * themselves (ZeRO), run on a data-parallel group of local ranks: every
 * rank computes different gradients, the reference update uses their sum
 * (gradients arrive prescaled, so the group sums), parameters and state are
 * read with export_tensor (rank 0's, broadcast), and the memory report must
 * hold an equal shard of each tensor the plugin shards.
 * [optim] values for the checks are the kit's (kit_optim_overrides), and a
 * user's section.key=value overrides come after them.
 */
#ifndef PLAIT_CORE_KIT_OPTIM_H
#define PLAIT_CORE_KIT_OPTIM_H

#include <plait/plugin.h>

#include "comm/comm.h"
#include "config/config.h"
#include "conformance/kit_report.h"

/* The [optim] and [run] settings the checks run with, NULL-terminated. */
extern const char *const kit_optim_overrides[];

/* 1 if plugin `desc` needs a data-parallel group (it owns storage or
 * reduces gradients itself). */
int plait_kit_optim_needs_group(const plait_plugin_desc *desc);

/* Run the optim checks on plugin `desc` (configuration `cfg`, which holds
 * the kit's overrides; `host`, the table handed to the plugin) over the
 * data-parallel group `dp` (NULL: one process); every member calls it with
 * the same arguments (the checks are collective), and rank 0's *report
 * holds the verdicts. */
void plait_kit_optim_run(const plait_plugin_desc *desc, const plait_config *cfg, const plait_host *host,
                         plait_comm *dp, kit_report *report);

#endif
