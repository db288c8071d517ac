#include "model/tied.h"

int plait_tied_is_copy(const plait_param *p) { return (p->flags & PLAIT_PARAM_TIED_COPY) != 0; }

const plait_param *plait_tied_source(const plait_model_spec *spec, const plait_param *p) {
    int32_t o = plait_tied_original(p);
    return o >= 0 && o < spec->n_params ? &spec->params[o] : p;
}

plait_param plait_tied_init_as(const plait_model_spec *spec, const plait_param *p) {
    plait_param as = *p;
    int32_t o = plait_tied_original(p);
    if (o >= 0) {
        as.name = spec->params[o].name;
        as.index = o;
    }
    return as;
}

void plait_tied_mark_remote(const plait_model_spec *spec, const int32_t *layer_stage, plait_param *local,
                            const int32_t *local_of_global) {
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *c = &spec->params[g];
        int32_t o = plait_tied_original(c);
        if (o < 0 || o >= spec->n_params) continue;
        if (layer_stage[c->layer] == layer_stage[spec->params[o].layer]) continue;
        if (local_of_global[g] >= 0) local[local_of_global[g]].flags |= PLAIT_PARAM_TIED_REMOTE;
        if (local_of_global[o] >= 0) local[local_of_global[o]].flags |= PLAIT_PARAM_TIED_REMOTE;
    }
}

void plait_tied_fold_grads(plait_param_set *set, const plait_kernels *k) {
    for (int32_t i = 0; i < set->n_params; i++) {
        const plait_param *copy = &set->params[i];
        int32_t o = plait_tied_local_original(set, copy);
        if (o < 0) continue;
        /* y += 1·x is y + x exactly (1·x is x), in the device's memory */
        k->axpy(set->params[o].grad, copy->grad, copy->numel, 1.0f);
    }
}
