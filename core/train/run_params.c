/*
 * This rank's parameters: the layers the plan puts on this stage, each
 * parameter cut to the slice the plan's shard gives (TP; an expert
 * tensor's at tp × ep cut again by its second), in global order; the
 * model's buffers (PLAIT_PARAM_BUFFER) are the model's, not in the set.
 * Unless the optimizer owns them (ZeRO), data and gradients live in two flat
 * buffers in that order, so data-parallel buckets are contiguous ranges.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "device/device.h"
#include "model/model.h"
#include "model/tied.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "train/masters.h"
#include "train/run.h"
#include "train/run_internal.h"

plait_status plait_run_build_params(plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    int32_t n = 0;
    run->params.local_of_global = malloc(sizeof(int32_t) * (size_t)spec->n_params);
    plait_param *params = calloc((size_t)spec->n_params, sizeof *params);
    if (!run->params.local_of_global || !params) {
        free(params);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory building parameters");
    }
    size_t offset = 0;
    for (int32_t g = 0; g < spec->n_params; g++) {
        run->params.local_of_global[g] = -1;
        const plait_param *src = &spec->params[g];
        if (run->work.plan.layer_stage[src->layer] != run->work.stage) continue;
        if (src->flags & PLAIT_PARAM_BUFFER) continue; /* the model's own (model/model_buffers.c) */
        plait_param *p = &params[n];
        *p = *src;
        p->struct_size = sizeof *p;
        plait_status st = plait_param_apply_shard(p, &run->work.plan.shards[g]);
        if (st == PLAIT_OK && run->work.plan.second_shards)
            st = plait_param_apply_second(p, &run->work.plan.second_shards[g]);
        if (st != PLAIT_OK) {
            free(params);
            return st;
        }
        p->flat_offset = offset;
        offset += p->numel;
        /* keep 16-float (64-byte) alignment between tensors for the kernels */
        offset = (offset + 15) & ~(size_t)15;
        run->params.local_of_global[g] = n++;
    }
    /* Tied pairs split across pipeline stages: both local members are
     * flagged, so an optimizer owning gradients keeps them whole for the
     * embedding group's sum (PLAIT_PARAM_TIED_REMOTE). */
    plait_tied_mark_remote(spec, run->work.plan.layer_stage, params, run->params.local_of_global);
    run->params.set.struct_size = sizeof run->params.set;
    run->params.set.params = params;
    run->params.set.n_params = n;
    run->params.set.layers = spec->layers;
    run->params.set.n_layers_total = spec->n_layers;
    run->params.set.numel = 0;
    int32_t local_layers = 0;
    for (int32_t l = 0; l < spec->n_layers; l++) local_layers += run->work.plan.layer_stage[l] == run->work.stage;
    run->params.set.n_layers = local_layers;
    for (int32_t i = 0; i < n; i++) run->params.set.numel += params[i].numel;
    run->params.flat_numel = offset;
    return PLAIT_OK;
}



/* Which masters the optimizer keeps sharded is plait_check_masters' rule
 * (masters.h, shared with `plait config check`); here, the copies. */
plait_status plait_run_keep_masters(plait_run *run) {
    int sharded = 0;
    plait_status st = plait_check_masters(run->cfg, run->optim.flags, plait_model_bf16_activations(run->model.instance),
                                          &sharded);
    if (st != PLAIT_OK || !sharded) return st;
    /* A group of one keeps the whole master whichever way. */
    if ((int64_t)run->world.mesh.dp * (run->world.mesh.cp > 1 ? run->world.mesh.cp : 1) < 2) return PLAIT_OK;
    const int32_t n = run->params.set.n_params;
    run->params.weight_copy = calloc(n ? (size_t)n : 1, sizeof *run->params.weight_copy);
    if (!run->params.weight_copy) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the weight copies");
    int any = 0;
    for (int32_t i = 0; i < n; i++) {
        plait_param *p = &run->params.set.params[i];
        /* a tied pair's values are its original's, read in float32 */
        if (plait_tied_original(p) >= 0 || (p->flags & PLAIT_PARAM_TIED_REMOTE)) continue;
        run->params.weight_copy[i] = plait_model_keep_weight_copy(run->model.instance, p->index);
        any |= run->params.weight_copy[i] != NULL;
    }
    if (!any) {
        free(run->params.weight_copy);
        run->params.weight_copy = NULL;
    }
    return PLAIT_OK;
}

plait_status plait_run_lend_copies(plait_run *run) {
    const uint32_t need = PLAIT_OPTIM_OWNS_PARAMS | PLAIT_OPTIM_GATHERS_COPIES;
    if ((run->optim.flags & need) != need || run->optim.abi_minor < 37 ||
        !plait_model_bf16_activations(run->model.instance))
        return PLAIT_OK;
    const int32_t n = run->params.set.n_params;
    run->params.copy_view = calloc(n ? (size_t)n : 1, sizeof *run->params.copy_view);
    run->params.copy_gathered = calloc(n ? (size_t)n : 1, 1);
    if (!run->params.copy_view || !run->params.copy_gathered)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the weight copies");
    int any = 0;
    for (int32_t i = 0; i < n; i++) {
        const plait_param *p = &run->params.set.params[i];
        /* a tied pair's values are its original's, read in float32, and
         * gathered so */
        if (plait_tied_original(p) >= 0 || (p->flags & PLAIT_PARAM_TIED_REMOTE)) continue;
        int lent = plait_model_lend_weight_copy(run->model.instance, p->index, &run->params.copy_view[i]);
        if (lent < 0) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the weight copies");
        run->params.copy_gathered[i] = (unsigned char)lent;
        any |= lent;
    }
    if (!any) {
        free(run->params.copy_view);
        free(run->params.copy_gathered);
        run->params.copy_view = NULL;
        run->params.copy_gathered = NULL;
        return PLAIT_OK;
    }
    return plait_model_settle_weight_copies(run->model.instance);
}

plait_status plait_run_alloc_storage(plait_run *run) {
    size_t bytes = run->params.flat_numel * sizeof(float);
    void *const *kept = run->params.weight_copy;
    if (!(run->optim.flags & PLAIT_OPTIM_OWNS_PARAMS)) {
        /* the optimizer keeps the masters of the kept copies: the float32
         * storage leaves them out, and so has another layout than the
         * gradients' (data_flat NULL in the set) */
        size_t numel = 0;
        for (int32_t i = 0; kept && i < run->params.set.n_params; i++)
            if (!kept[i]) numel = (numel + run->params.set.params[i].numel + 15) & ~(size_t)15;
        if (!kept) numel = run->params.flat_numel;
        run->params.data_flat = plait_device_alloc(numel ? numel * sizeof(float) : 64, "parameters");
        if (!run->params.data_flat) return PLAIT_ERR_NO_MEMORY;
        plait_device_kernels()->zero(run->params.data_flat, numel);
        run->params.set.data_flat = kept ? NULL : run->params.data_flat;
    }
    if (!(run->optim.flags & PLAIT_OPTIM_OWNS_GRADS)) {
        run->params.grad_flat = plait_device_alloc(bytes ? bytes : 64, "gradients");
        if (!run->params.grad_flat) return PLAIT_ERR_NO_MEMORY;
        plait_device_kernels()->zero(run->params.grad_flat, run->params.flat_numel);
        run->params.set.grad_flat = run->params.grad_flat;
    }
    size_t data_at = 0;
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (run->params.data_flat && kept) {
            if (!kept[i]) p->data = run->params.data_flat + data_at;
            if (!kept[i]) data_at = (data_at + p->numel + 15) & ~(size_t)15;
        } else if (run->params.data_flat) {
            p->data = run->params.data_flat + p->flat_offset;
        }
        if (run->params.grad_flat) p->grad = run->params.grad_flat + p->flat_offset;
    }
    /* A tied copy on the same rank as its original shares the original's
     * values (one tensor in the model) but keeps its own gradient. */
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        int32_t orig = plait_tied_local_original(&run->params.set, p);
        if (orig >= 0 && run->params.data_flat) p->data = run->params.set.params[orig].data;
    }
    return PLAIT_OK;
}

void plait_run_free_params(plait_run *run) {
    plait_sum_tree_free(run->params.tree);
    run->params.tree = NULL;
    plait_device_free(run->params.grad_scratch);
    run->params.grad_scratch = NULL;
    plait_device_free(run->params.data_flat);
    plait_device_free(run->params.grad_flat);
    run->params.data_flat = run->params.grad_flat = NULL;
    free(run->params.set.params);
    run->params.set.params = NULL;
    free(run->params.weight_copy);
    run->params.weight_copy = NULL;
    free(run->params.copy_view);
    free(run->params.copy_gathered);
    run->params.copy_view = NULL;
    run->params.copy_gathered = NULL;
    free(run->params.local_of_global);
    run->params.local_of_global = NULL;
}

/* 1 if a parameter of `s` is a tied copy of parameter g. */
static int has_tied_copy(const plait_model_spec *s, int32_t g) {
    for (int32_t i = 0; i < s->n_params; i++)
        if (plait_tied_is_copy(&s->params[i]) && s->params[i].tied_to == g) return 1;
    return 0;
}

double plait_run_flops_per_token(const plait_run *run) {
    const plait_model_spec *s = run->model.spec;
    double n = 0;
    for (int32_t g = 0; g < s->n_params; g++) {
        const plait_param *p = &s->params[g];
        /* what takes part in no product: learned positions, an untied
         * token embedding (a lookup; the llama arch's) */
        if (plait_tied_is_copy(p) || strcmp(p->name, "transformer.wpe.weight") == 0 ||
            (strcmp(p->name, "model.embed_tokens.weight") == 0 && !has_tied_copy(s, g)))
            continue;
        double numel = plait_model_param_active(run->model.desc, p); /* a token's share of a mixture of experts */
        for (int d = 0; d < p->ndim; d++) numel *= (double)p->shape[d];
        n += numel;
    }
    double attn = strcmp(s->arch, "mlp") != 0 ? 12.0 * s->n_layer * s->n_embd * s->block_size : 0;
    return 6.0 * n + attn;
}

plait_status plait_run_open_accumulation(plait_run *run) {
    int32_t m = run->work.plan.micro_batches;
    if (!run->deterministic || m <= 1 || !run->params.grad_flat) return PLAIT_OK;
    plait_status st = plait_sum_tree_create(run->params.flat_numel, PLAIT_F32, PLAIT_SUM, m, "deterministic accumulation",
                                            &run->params.tree);
    if (st != PLAIT_OK) return st;
    run->params.grad_scratch = plait_device_alloc(run->params.flat_numel * sizeof(float) + 64, "deterministic accumulation");
    return run->params.grad_scratch ? PLAIT_OK : PLAIT_ERR_NO_MEMORY;
}
