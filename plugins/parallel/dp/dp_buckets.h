/*
 * Gradient buckets for data parallelism (PyTorch DDP's reducer is the
 * anchor): parameters are grouped, in reverse model order, into buckets of at
 * most `bucket_bytes` whose gradients are contiguous in the core's flat
 * gradient buffer, so each bucket is one in-place all-reduce with no copies.
 * A bucket's all-reduce starts (asynchronously) as soon as the backward pass
 * has produced every gradient in it, overlapping the rest of the backward.
 */
#ifndef PLAIT_DP_BUCKETS_H
#define PLAIT_DP_BUCKETS_H

#include <plait/plait.h>

typedef struct dp_bucket {
    float *grad;          /* first element (in the flat gradient buffer) */
    size_t count;         /* elements */
    int32_t pending;      /* parameters whose gradient is not final yet */
    int32_t first_layer, last_layer;
    plait_request *req;   /* in-flight all-reduce, or NULL */
    /* recorded on the compute stream when the bucket starts, right after
     * its last gradient's backward kernel was queued: the all-reduce
     * touches the bucket only after it (plait_coll_opts.ready); NULL on a
     * device without events (ABI 1.4, plait/device.h) */
    plait_device_event *ready;
    /* onebit compression's error feedback for this bucket (device memory,
     * plait_coll_residual_allreduce floats), or NULL */
    float *residual;
    int started;
    /* 1-based index of the step's grads_ready call that started the bucket;
     * 0 when finish_grads started it. */
    uint32_t started_in_call;
} dp_bucket;

typedef struct dp_buckets {
    dp_bucket *b;
    int32_t n;
    int32_t *param_bucket;   /* local param index -> bucket, -1 = not reduced */
    plait_param_set *params;
} dp_buckets;

/* Build buckets over `params` (core-owned flat gradients required), leaving
 * out the parameters whose `skip` entry is nonzero (`skip` may be NULL).
 * Returns PLAIT_ERR_INVALID_ARG (with message) if a gradient is missing. */
plait_status dp_buckets_build(const plait_host *host, plait_param_set *params, const uint8_t *skip,
                              size_t bucket_bytes, dp_buckets *out);
void dp_buckets_free(dp_buckets *bk);
/* Reset counters at the start of a step. */
void dp_buckets_reset(dp_buckets *bk);

#endif
