#include "dp_buckets.h"

#include <stdlib.h>
#include <string.h>

plait_status dp_buckets_build(const plait_host *host, plait_param_set *set, const uint8_t *skip,
                             size_t bucket_bytes, dp_buckets *out) {
    memset(out, 0, sizeof *out);
    out->params = set;
    if (set->n_params == 0) return PLAIT_OK;
    out->b = calloc((size_t)set->n_params, sizeof *out->b);
    out->param_bucket = calloc((size_t)set->n_params, sizeof *out->param_bucket);
    if (!out->b || !out->param_bucket) {
        dp_buckets_free(out);
        return host->set_error(PLAIT_ERR_NO_MEMORY, "dp: out of memory building buckets");
    }
    size_t limit = bucket_bytes / sizeof(float);
    if (limit == 0) limit = 1;
    dp_bucket *cur = NULL;
    for (int32_t i = set->n_params - 1; i >= 0; i--) {
        plait_param *p = &set->params[i];
        if (skip && skip[i]) { /* and the next bucket cannot reach across it */
            out->param_bucket[i] = -1;
            cur = NULL;
            continue;
        }
        if (!p->grad)
            return host->set_error(PLAIT_ERR_INVALID_ARG, "dp: parameter %s has no gradient storage", p->name);
        /* Gradients must be contiguous in reverse order: p ends where the bucket begins. */
        int fits = cur && cur->count + p->numel <= limit && p->grad + p->numel == cur->grad;
        if (!fits) {
            cur = &out->b[out->n++];
            cur->grad = p->grad + p->numel;
            cur->count = 0;
            cur->first_layer = p->layer;
            cur->last_layer = p->layer;
        }
        cur->grad = p->grad;
        cur->count += p->numel;
        cur->pending++;
        if (p->layer < cur->first_layer) cur->first_layer = p->layer;
        out->param_bucket[i] = (int32_t)(cur - out->b);
    }
    return PLAIT_OK;
}

void dp_buckets_reset(dp_buckets *bk) {
    for (int32_t i = 0; i < bk->n; i++) {
        bk->b[i].pending = 0;
        bk->b[i].started = 0;
        bk->b[i].started_in_call = 0;
        bk->b[i].req = NULL;
    }
    for (int32_t i = 0; i < bk->params->n_params; i++)
        if (bk->param_bucket[i] >= 0) bk->b[bk->param_bucket[i]].pending++;
}

void dp_buckets_free(dp_buckets *bk) {
    free(bk->b);
    free(bk->param_bucket);
    memset(bk, 0, sizeof *bk);
}
