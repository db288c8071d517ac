/*
 * A minimal single-stage driver of the core model for tests and the
 * benchmark: config from INI text, the description, a plan (optionally a
 * Megatron TP split), flat parameter and gradient storage with initial
 * values, the model, and a forward+backward of one micro-batch.
 * Storage is the open device's memory (device/device.h) when a device with
 * its own memory is open before harness_init (on_device), host memory
 * otherwise.
 */
#ifndef PLAIT_TESTS_MODEL_HARNESS_H
#define PLAIT_TESTS_MODEL_HARNESS_H

#include <plait/parallel.h>

#include "config/config.h"
#include "model/model.h"

typedef struct harness {
    plait_config *cfg;
    plait_model_desc *desc;
    const plait_model_spec *spec;
    plait_plan plan;
    plait_shard *shards;
    int32_t *layer_stage, *layer_chunk;
    plait_param_set set;
    plait_param *params;
    float *data, *grad;      /* flat storage (lm_head's data aliases wte's) */
    int on_device;           /* data and grad are the open device's memory (host code
                                must not touch them: plait_device_copy) */
    plait_model *model;
    int32_t B, T, V, C;
    int32_t tp, tp_rank;
} harness;

/* Builds everything for `ini` ([model]/[run] keys; the rest defaults).
 * tp > 1 splits parameters Megatron-style for rank tp_rank, with `ops`.
 * Returns 0, or -1 after printing the error. */
int harness_init(harness *h, const char *ini, int32_t micro_batch, int32_t tp, int32_t tp_rank,
                 const plait_tp_ops *ops);

typedef struct harness_opts {
    int32_t tp, tp_rank;
    const plait_tp_ops *ops;
    const int32_t *layer_stage; /* NULL: every layer on stage 0 */
    int32_t stage;
    int32_t max_slots;          /* 0 = 1 */
    int split_backward;         /* plait_model_create_args.split_backward */
    const plait_kernels *kernels; /* plait_model_create_args.kernels (NULL: the device's) */
    int activations_bf16;       /* plait_model_create_args.activations_bf16 */
    int stale_weights;          /* harness_trace_run: no plait_model_weights_changed after its updates */
    int params_gathered;        /* plait_model_create_args.params_gathered */
    int residual_bf16;          /* plait_model_create_args.residual_bf16 */
} harness_opts;

/* The CPU's kernel table without the fused attention (ABI 1.7): a model
 * on it runs attention_forward/_backward and keeps the probabilities. */
const plait_kernels *harness_unfused_kernels(void);
int harness_init_ex(harness *h, const char *ini, int32_t micro_batch, const harness_opts *o);
void harness_free(harness *h);

/* The local parameter with global name `name`, or NULL. */
plait_param *harness_param(harness *h, const char *name);

void harness_zero_grads(harness *h);
/* Forward every layer, then backward every layer, of one micro-batch
 * (slot 0). Returns the status of the first failing call. */
plait_status harness_step(harness *h, const int32_t *tokens, const int32_t *targets);
/* Forward only, the logits kept readable (plait_model_keep_logits). */
plait_status harness_forward(harness *h, const int32_t *tokens, const int32_t *targets);

/* `steps` steps of plain SGD (lr 0.05, so every step sees new parameters)
 * with o->max_slots micro-batches in flight the way a pipeline interleaves
 * them: the forwards of slots 0, 1, ..., then the backwards last slot
 * first (with o->split_backward: every slot's input halves, then the
 * weight halves in the same order, so gradients accumulate in the same
 * order), telling the model its weights changed after each update (unless
 * o->stale_weights). Records each slot's loss sum (loss[step * slots + slot]) and the
 * gradients after each step ([steps][numel]), and the activation bytes at
 * the end. Host memory only. Returns 0, or -1 after printing the error. */
typedef struct harness_trace {
    int steps;        /* set by the caller */
    double *loss;
    float *grads;
    size_t numel;
    uint64_t act_bytes;
    uint64_t host_bytes; /* plait_model_host_activation_bytes */
    uint64_t copy_bytes; /* plait_model_weight_copy_bytes */
    int bf16;         /* plait_model_bf16_activations */
} harness_trace;
int harness_trace_run(const char *ini, int32_t micro_batch, const harness_opts *o, harness_trace *t);
void harness_trace_free(harness_trace *t);
/* Of two traces of the same steps: the largest relative difference of
 * their per-slot losses (`slots` a step), and of their gradients
 * (norm of the difference over the norm of b's) over every step. */
double harness_loss_dev(const harness_trace *a, const harness_trace *b, int slots);
double harness_grad_dev(const harness_trace *a, const harness_trace *b);

/* One micro-batch's loss and every gradient of the model `ini` describes,
 * with 1 math thread and with `threads`: 0 when they agree bit for bit,
 * else -1 after printing which differs. Leaves the kernels on 1 thread. */
int harness_threads_agree(const char *ini, int threads);

/* Of the model h holds: a forward-only forward (evaluation) of one
 * micro-batch of pseudo-random tokens, the head's backward after it
 * (which must be refused, naming "forward-only"), then a training step on
 * the same tokens: 0 when the refusal came and the evaluation's loss is
 * finite, positive and the training forward's bit for bit, else -1 after
 * printing which. Leaves the model training, its logits not kept. */
int harness_forward_only_agrees(harness *h);

/* Deterministic pseudo-random tokens in [0, V). */
void harness_tokens(int32_t *dst, size_t n, int32_t V, uint32_t seed);

#endif
