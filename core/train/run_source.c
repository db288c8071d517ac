#include "train/run_source.h"

#include <string.h>

#include "runtime/error.h"
#include "runtime/log.h"

/* Fresh run: parameters from the layout-independent initialiser (a tied copy
 * by its original's name, so both ends of a pipeline start equal); no
 * optimizer state (the optimizer zero-fills). */
static plait_status init_read(void *ctx, int32_t index, const char *which, size_t offset, size_t count, float *dst) {
    plait_run *run = ctx;
    if (strcmp(which, "param") != 0)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "a fresh run has no optimizer state '%s'", which);
    int32_t l = run->local_of_global[index];
    if (l < 0) return plait_set_error(PLAIT_ERR_INVALID_ARG, "parameter %d is not on this rank", index);
    plait_param as = run->params.params[l];
    if ((as.flags & PLAIT_PARAM_TIED_COPY) && as.tied_to >= 0) {
        as.name = run->spec->params[as.tied_to].name;
        as.index = as.tied_to;
    }
    return plait_model_init_values(&as, offset, count, dst);
}

plait_status plait_run_source_open(plait_run *run, const char *resume_dir, plait_run_source *src) {
    memset(src, 0, sizeof *src);
    src->run = run;
    if (!resume_dir) {
        src->source = (plait_value_source){.struct_size = sizeof(plait_value_source), .ctx = run, .read = init_read};
        return PLAIT_OK;
    }
    plait_status st = plait_ckpt_open(resume_dir, &src->ck);
    if (st != PLAIT_OK) return st;
    plait_ckpt_source_init(&src->cks, src->ck, run->spec, &run->params);
    src->source = src->cks.src;
    return PLAIT_OK;
}

plait_status plait_run_source_fill_params(plait_run *run, plait_run_source *src) {
    for (int32_t i = 0; i < run->params.n_params; i++) {
        plait_param *p = &run->params.params[i];
        int shared = 0;
        for (int32_t j = 0; j < i && !shared; j++) shared = run->params.params[j].data == p->data;
        if (shared) continue;
        plait_status st = src->source.read(src->source.ctx, p->index, "param", 0, p->numel, p->data);
        if (st != PLAIT_OK) return plait_wrap_error(st, "initial values of %s", p->name);
    }
    return PLAIT_OK;
}

plait_status plait_run_source_restore_state(plait_run *run, plait_run_source *src) {
    if (!src->ck) return PLAIT_OK;
    const plait_ckpt_state *state = plait_ckpt_state_of(src->ck);
    if (state->seed != run->seed)
        PLAIT_WARN("train", "checkpoint %s was written with seed %llu; this run uses [run] seed = %llu (data "
                            "sampling follows the new seed from here on)",
                   plait_ckpt_dir(src->ck), (unsigned long long)state->seed, (unsigned long long)run->seed);
    run->step = state->step;
    if (run->opt->set_step) run->opt->set_step(run->opt_state, state->optim_step);
    return PLAIT_OK;
}

void plait_run_source_close(plait_run_source *src) {
    if (src->ck) plait_ckpt_close(src->ck);
    src->ck = NULL;
}
