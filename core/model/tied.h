/*
 * The tied weight, core side: the one module that answers the questions the
 * core asks about the output head's copy of the token embedding
 * ("lm_head.weight", PLAIT_PARAM_TIED_COPY, tied_to = "transformer.wte.weight";
 * declared in model/model_desc.c). The rules themselves (values, gradient
 * order, who folds, counting) are stated once in sdk/include/plait/model.h,
 * whose inline helpers (plait_tied_original, plait_tied_local_original)
 * plugins and the core share.
 *
 * Pure functions over the caller's structures; thread-safe as long as the
 * caller does not modify them concurrently. Nothing is allocated.
 */
#ifndef PLAIT_CORE_MODEL_TIED_H
#define PLAIT_CORE_MODEL_TIED_H

#include <stdint.h>
#include <plait/kernels.h>
#include <plait/model.h>

/* 1 if `p` is a tied copy: counted, initialised and checkpointed as its
 * original, never on its own. */
int plait_tied_is_copy(const plait_param *p);

/* The parameter whose values `p` holds: its original (in `spec`) for a tied
 * copy, `p` itself otherwise. Never NULL. */
const plait_param *plait_tied_source(const plait_model_spec *spec, const plait_param *p);

/* `p` as the layout-independent initialiser must see it: a tied copy takes
 * its original's name and global index, so both pipeline ends start equal. */
plait_param plait_tied_init_as(const plait_model_spec *spec, const plait_param *p);

/* Flag PLAIT_PARAM_TIED_REMOTE on this rank's members (local[local_of_global[g]])
 * of every tied pair whose two layers run on different pipeline stages
 * (layer_stage[layer], the plan's). */
void plait_tied_mark_remote(const plait_model_spec *spec, const int32_t *layer_stage, plait_param *local,
                            const int32_t *local_of_global);

/* original.grad += copy.grad (that order) for every tied pair this rank
 * holds both members of: the fold of a gradient owner (the core's, after the
 * reductions), computed with `k` (the device's kernels: gradients are
 * device memory). */
void plait_tied_fold_grads(plait_param_set *set, const plait_kernels *k);

#endif
