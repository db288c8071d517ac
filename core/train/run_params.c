/*
 * This rank's parameters: the layers the plan puts on this stage, each
 * parameter cut to the slice the plan's shard gives (TP), in global order.
 * Unless the optimizer owns them (ZeRO), data and gradients live in two flat
 * buffers in that order, so data-parallel buckets are contiguous ranges.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "train/run.h"
#include "train/run_internal.h"

plait_status plait_run_build_params(plait_run *run) {
    const plait_model_spec *spec = run->spec;
    int32_t n = 0;
    run->local_of_global = malloc(sizeof(int32_t) * (size_t)spec->n_params);
    plait_param *params = calloc((size_t)spec->n_params, sizeof *params);
    if (!run->local_of_global || !params) {
        free(params);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory building parameters");
    }
    size_t offset = 0;
    for (int32_t g = 0; g < spec->n_params; g++) {
        run->local_of_global[g] = -1;
        const plait_param *src = &spec->params[g];
        if (run->plan.layer_stage[src->layer] != run->stage) continue;
        plait_param *p = &params[n];
        *p = *src;
        p->struct_size = sizeof *p;
        plait_status st = plait_param_apply_shard(p, &run->plan.shards[g]);
        if (st != PLAIT_OK) {
            free(params);
            return st;
        }
        p->flat_offset = offset;
        offset += p->numel;
        /* keep 16-float (64-byte) alignment between tensors for the kernels */
        offset = (offset + 15) & ~(size_t)15;
        run->local_of_global[g] = n++;
    }
    /* Tied pairs split across pipeline stages: both local members are
     * flagged, so an optimizer owning gradients keeps them whole for the
     * embedding group's sum (PLAIT_PARAM_TIED_REMOTE). */
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *c = &spec->params[g];
        if (!(c->flags & PLAIT_PARAM_TIED_COPY) || c->tied_to < 0 || c->tied_to >= spec->n_params) continue;
        int32_t o = c->tied_to;
        if (run->plan.layer_stage[c->layer] == run->plan.layer_stage[spec->params[o].layer]) continue;
        if (run->local_of_global[g] >= 0) params[run->local_of_global[g]].flags |= PLAIT_PARAM_TIED_REMOTE;
        if (run->local_of_global[o] >= 0) params[run->local_of_global[o]].flags |= PLAIT_PARAM_TIED_REMOTE;
    }
    run->params.struct_size = sizeof run->params;
    run->params.params = params;
    run->params.n_params = n;
    run->params.layers = spec->layers;
    run->params.n_layers_total = spec->n_layers;
    run->params.numel = 0;
    int32_t local_layers = 0;
    for (int32_t l = 0; l < spec->n_layers; l++) local_layers += run->plan.layer_stage[l] == run->stage;
    run->params.n_layers = local_layers;
    for (int32_t i = 0; i < n; i++) run->params.numel += params[i].numel;
    run->flat_numel = offset;
    return PLAIT_OK;
}

/* The local original of a tied copy, if any. */
static const plait_param *tied_original(const plait_run *run, const plait_param *p) {
    if (!(p->flags & PLAIT_PARAM_TIED_COPY) || p->tied_to < 0) return NULL;
    int32_t l = run->local_of_global[p->tied_to];
    return l >= 0 ? &run->params.params[l] : NULL;
}


plait_status plait_run_alloc_storage(plait_run *run) {
    size_t bytes = run->flat_numel * sizeof(float);
    if (!(run->opt_flags & PLAIT_OPTIM_OWNS_PARAMS)) {
        run->data_flat = plait_alloc(bytes ? bytes : 64, PLAIT_MEM_HOST, 64, "parameters");
        if (!run->data_flat) return PLAIT_ERR_NO_MEMORY;
        memset(run->data_flat, 0, bytes);
        run->params.data_flat = run->data_flat;
    }
    if (!(run->opt_flags & PLAIT_OPTIM_OWNS_GRADS)) {
        run->grad_flat = plait_alloc(bytes ? bytes : 64, PLAIT_MEM_HOST, 64, "gradients");
        if (!run->grad_flat) return PLAIT_ERR_NO_MEMORY;
        memset(run->grad_flat, 0, bytes);
        run->params.grad_flat = run->grad_flat;
    }
    for (int32_t i = 0; i < run->params.n_params; i++) {
        plait_param *p = &run->params.params[i];
        if (run->data_flat) p->data = run->data_flat + p->flat_offset;
        if (run->grad_flat) p->grad = run->grad_flat + p->flat_offset;
    }
    /* A tied copy on the same rank as its original shares the original's
     * values (one tensor in the model) but keeps its own gradient. */
    for (int32_t i = 0; i < run->params.n_params; i++) {
        plait_param *p = &run->params.params[i];
        const plait_param *orig = tied_original(run, p);
        if (orig && run->data_flat) p->data = orig->data;
    }
    return PLAIT_OK;
}

/* Fill the core-owned parameter storage with the layout-independent initial
 * values. A tied copy takes its original's values (initialised by the
 * original's name), so both pipeline ends start equal. */

plait_status plait_run_init_values(plait_run *run) {
    if (!run->data_flat) return PLAIT_OK;
    for (int32_t i = 0; i < run->params.n_params; i++) {
        plait_param *p = &run->params.params[i];
        if (tied_original(run, p)) continue; /* shares storage */
        plait_param as = *p;
        if ((p->flags & PLAIT_PARAM_TIED_COPY) && p->tied_to >= 0) {
            as.name = run->spec->params[p->tied_to].name;
            as.index = p->tied_to;
        }
        plait_status st = plait_model_init_values(&as, 0, p->numel, p->data);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

void plait_run_free_params(plait_run *run) {
    plait_free(run->data_flat);
    plait_free(run->grad_flat);
    run->data_flat = run->grad_flat = NULL;
    free(run->params.params);
    run->params.params = NULL;
    free(run->local_of_global);
    run->local_of_global = NULL;
}

double plait_run_flops_per_token(const plait_run *run) {
    const plait_model_spec *s = run->spec;
    double n = 0;
    for (int32_t g = 0; g < s->n_params; g++) {
        const plait_param *p = &s->params[g];
        if ((p->flags & PLAIT_PARAM_TIED_COPY) || strcmp(p->name, "transformer.wpe.weight") == 0) continue;
        double numel = 1;
        for (int d = 0; d < p->ndim; d++) numel *= (double)p->shape[d];
        n += numel;
    }
    double attn = strcmp(s->arch, "gpt") == 0 ? 12.0 * s->n_layer * s->n_embd * s->block_size : 0;
    return 6.0 * n + attn;
}
