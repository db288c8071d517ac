#include "optim_common.h"

#include <math.h>

plait_status optim_begin_update(const plait_host *host, const char *who, const plait_optim_hparams *hp, int64_t step,
                                double norm, int64_t *updates, plait_adamw_args *args) {
    if (!isfinite(norm))
        return host->set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: the gradient norm at step %lld is not finite (NaN or Inf gradients): "
                               "training diverged; no parameter was changed. Lower [optim] lr, or check the data",
                               who, (long long)step + 1); /* 0-based here; metrics.csv counts from 1 */
    (*updates)++;
    *args = (plait_adamw_args){
        .struct_size = sizeof *args,
        .lr = (float)plait_optim_lr_at(hp, step),
        .beta1 = (float)hp->beta1,
        .beta2 = (float)hp->beta2,
        .eps = (float)hp->eps,
        .step = *updates,
        .grad_scale = (float)plait_optim_clip_scale(hp->grad_clip, norm),
    };
    return PLAIT_OK;
}

const char *optim_where(const plait_host *host, const plait_config *cfg, const char *section, const char *key) {
    return PLAIT_HOST_HAS(host, config_where) ? host->config_where(cfg, section, key) : "config";
}

plait_status optim_refuse_offload_params(const plait_host *host, const plait_config *cfg, const char *who) {
    return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [optim] offload_params = true: the optimizer (%s) keeps every parameter whole where "
                           "the model computes, so it has no shards to keep beside the state; use an optimizer that "
                           "shards the parameters ([optim] plugin = zero3, at any dp), or offload_params = false",
                           optim_where(host, cfg, "optim", "offload_params"), who);
}
