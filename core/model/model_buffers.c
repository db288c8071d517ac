/*
 * The model's buffers: tensors of the description that are not parameters
 * (PLAIT_PARAM_BUFFER: a sparse block's routers' selection bias), which the
 * model keeps itself, whole, on every rank holding their layer, as
 * Megatron-Core and DeepSeek-V3 keep the expert bias a buffer: no
 * gradient, no optimizer state, so no optimizer shards, gathers or updates
 * them (the trainer's balancing moves them, train/run_moe.c). They start at
 * zero (their initialiser's rule, param_init.c) and the trainer fills them
 * from a checkpoint and reads them back for one (model.h).
 */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/model_internal.h"
#include "runtime/error.h"

plait_status plait_model_buffers_setup(plait_model *m) {
    const plait_model_desc *d = m->desc;
    size_t floats = 0;
    for (int32_t gi = 0; gi < d->spec.n_params; gi++)
        if ((d->params[gi].flags & PLAIT_PARAM_BUFFER) && m->local_layer[d->params[gi].layer])
            floats += (d->params[gi].numel + 15) / 16 * 16;
    if (floats == 0) return PLAIT_OK;
    m->buffers = calloc((size_t)d->spec.n_params, sizeof *m->buffers);
    m->buffer_mem = plait_device_alloc(floats * sizeof(float), "parameters");
    if (!m->buffers || !m->buffer_mem)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for its buffers");
    m->buffer_bytes = floats * sizeof(float);
    m->k->zero(m->buffer_mem, floats);
    size_t at = 0;
    for (int32_t gi = 0; gi < d->spec.n_params; gi++) {
        const plait_param *g = &d->params[gi];
        if (!(g->flags & PLAIT_PARAM_BUFFER) || !m->local_layer[g->layer]) continue;
        /* whole on every rank: the description's entry, the model's storage */
        m->buffers[gi] = *g;
        m->buffers[gi].data = m->buffer_mem + at;
        m->buffers[gi].grad = NULL;
        m->param[gi] = &m->buffers[gi];
        at += (g->numel + 15) / 16 * 16;
    }
    return PLAIT_OK;
}

void plait_model_buffers_free(plait_model *m) {
    plait_device_free(m->buffer_mem);
    free(m->buffers);
    m->buffer_mem = NULL;
    m->buffers = NULL;
}

/* Buffer gi of this rank's layers, or the error naming it. */
static plait_status buffer_at(const plait_model *m, int32_t gi, const plait_param **out) {
    const plait_param *p = m->buffers && gi >= 0 && gi < m->desc->spec.n_params ? &m->buffers[gi] : NULL;
    if (!p || !p->data)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: tensor %d (%s) is not a buffer of this rank's layers",
                               (int)gi, gi >= 0 && gi < m->desc->spec.n_params ? m->desc->params[gi].name : "?");
    *out = p;
    return PLAIT_OK;
}

int plait_model_has_buffer(const plait_model *m, int32_t gi) {
    return m && m->buffers && gi >= 0 && gi < m->desc->spec.n_params && m->buffers[gi].data;
}

plait_status plait_model_buffer_read(const plait_model *m, int32_t gi, float *host) {
    const plait_param *p = NULL;
    plait_status st = buffer_at(m, gi, &p);
    return st == PLAIT_OK ? plait_device_copy(host, p->data, p->numel * sizeof(float), PLAIT_COPY_TO_HOST) : st;
}

plait_status plait_model_buffer_write(plait_model *m, int32_t gi, const float *host) {
    const plait_param *p = NULL;
    plait_status st = buffer_at(m, gi, &p);
    return st == PLAIT_OK ? plait_device_copy(p->data, host, p->numel * sizeof(float), PLAIT_COPY_TO_DEVICE) : st;
}
