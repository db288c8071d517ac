/* Memory per rank: the ZeRO paper's accounting per precision, activations and buffers. */
#include "cost/cost.h"

#include <string.h>

void plait_cost_bytes_of(plait_precision p, int micro_batches, plait_cost_bytes *out) {
    memset(out, 0, sizeof *out);
    if (p != PLAIT_PRECISION_BF16) {
        /* fp32 storage (tf32 only changes how products are computed): the
         * weights are their own master copy */
        *out = (plait_cost_bytes){.weight = 4, .grad = 4, .optim = 8, .activation = 4, .adam_io = 28};
        return;
    }
    /* mixed precision: bf16 weights, gradients and activations; the
     * optimizer keeps fp32 master weights and moments (K = 12 in the ZeRO
     * paper). Accumulating over micro-batches in bf16 would lose the small
     * ones, so a rank that runs more than one keeps an fp32 gradient buffer
     * (Megatron-LM's main_grad, DeepSpeed's bf16 optimizer) and reduces it. */
    out->fp32_accumulation = micro_batches > 1;
    out->weight = 2;
    out->grad = out->fp32_accumulation ? 4 : 2;
    out->optim = 12;
    out->activation = 2;
    /* AdamW reads the gradient, reads and writes the master weight and
     * both moments, and writes the bf16 weight */
    out->adam_io = out->grad + 8 + 16 + 2;
}

void plait_cost_memory(const plait_cost_rank *r, const plait_cost_job *j, double process_bytes, plait_cost_mem *out) {
    memset(out, 0, sizeof *out);
    plait_cost_bytes b;
    plait_cost_bytes_of(j->precision, r->micro_batches, &b);
    double psi = r->param_numel, n = r->dp > 0 ? r->dp : 1;
    /* stage 1 shards the optimizer state, 2 also the gradients, 3 also the weights */
    out->param = b.weight * psi / (j->zero >= 3 ? n : 1);
    out->grad = b.grad * psi / (j->zero >= 2 ? n : 1);
    out->state = b.optim * psi / (j->zero >= 1 ? n : 1);
    out->activations = b.activation * r->act_elems;
    /* The largest message a collective runs whole needs a scratch buffer of
     * that size plus a quarter (the collectives grow it geometrically): a
     * gradient bucket under plain DP, a TP all-reduce, a pipeline message. */
    double largest = 0, grads = b.grad * psi;
    if (r->dp > 1 && j->zero == 0) largest = grads < j->bucket_bytes ? grads : j->bucket_bytes;
    if (r->tp > 1 && b.activation * r->tp_msg_elems > largest) largest = b.activation * r->tp_msg_elems;
    if (r->pp > 1 && b.activation * r->pp_msg_elems > largest) largest = b.activation * r->pp_msg_elems;
    out->buffers = 1.25 * largest;
    /* ZeRO's working buffers, per unit (a layer's parameters, U): stage 1
     * keeps two units in flight with their shards, 2 (U + U/n); stage 2 a
     * layer's gradients plus two units; stage 3 also the gathered
     * parameters of the running layer and the prefetched one. */
    if (j->zero > 0 && r->dp > 1) {
        double U = b.grad * r->largest_layer_numel;
        if (j->zero == 1) out->buffers += 2 * (U + U / n);
        else out->buffers += 3 * U + (j->zero == 3 ? 2 * b.weight * r->largest_layer_numel : 0);
    }
    out->process = process_bytes;
    out->total = out->param + out->grad + out->state + out->activations + out->buffers + out->process;
}
