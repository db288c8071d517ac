/*
 * A bf16 run's tp activation collectives through a comm plugin that moves
 * device memory itself (nccl), which cannot carry the core's bf16 wire
 * format (that one encodes in host memory): the float32 values rounded to
 * bf16 in a device buffer of this table's (host->kernels->to_bf16, on the
 * compute stream before the collective's ready point), a plain bf16
 * collective (NCCL's ncclBfloat16: every partial sum rounded to bf16 at
 * each hop, as Megatron-LM's bf16 collectives are), the result widened
 * back into the float32 buffer (from_bf16, ABI 1.23) once the collective
 * ended: at once for a blocking call, at tp16_wait for a request.
 *
 * Owned by the tp plugin's state; one thread (the model's) calls it. Its
 * buffers are device memory from host->alloc, grown to the largest message
 * and freed by tp16_free. Errors are set with host->set_error and returned.
 */
#ifndef PLAIT_TP_WIRE16_H
#define PLAIT_TP_WIRE16_H

#include <stddef.h>

#include <plait/plait.h>

/* requests in flight at once (the model keeps one input-gradient
 * reduction in flight at a time) */
#define TP16_SLOTS 8

typedef struct tp16_slot {
    plait_bf16 *buf;    /* device memory: the bf16 input, then the output */
    size_t cap;         /* its elements */
    plait_request *req; /* in flight (NULL: free) */
    float *dst;         /* where the result is widened to, dst_n values */
    size_t dst_n;
    size_t out_off; /* the output's offset in buf (elements) */
} tp16_slot;

typedef struct tp16 {
    const plait_host *host;
    tp16_slot slot[TP16_SLOTS];
} tp16;

/* 1 if the rank's kernel table carries bf16 through device memory
 * (to_bf16 and from_bf16). */
int tp16_available(const plait_host *host);

/* The collectives, as host->coll's of PLAIT_F32 (sums only): `req` NULL
 * blocks; else *req is the request, which only tp16_wait may end. An
 * activation's all-reduce in place: */
plait_status tp16_allreduce(tp16 *w, plait_comm *comm, float *x, size_t count, const plait_coll_opts *opts,
                            plait_request **req);
/* Sequence parallelism's all-gather (gather = 1: src count values, dst
 * count x members) or reduce-scatter (gather = 0: src count x members,
 * dst count), as host->coll's of PLAIT_F32. */
plait_status tp16_sequence(tp16 *w, plait_comm *comm, int gather, const float *src, float *dst, size_t count,
                           int members, const plait_coll_opts *opts, plait_request **req);

/* 1 if `req` is one of this table's, then ended here: *st is the wait's
 * status (the compute stream waits for it on the device where the core
 * can) and its result is widened into its float32 buffer. 0: not ours. */
int tp16_wait(tp16 *w, plait_request *req, plait_status *st);

/* Free the device buffers (none may be in flight). */
void tp16_free(tp16 *w);

#endif
