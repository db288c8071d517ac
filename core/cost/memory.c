/* Memory per rank: the ZeRO paper's accounting plus activations and buffers. */
#include "cost/cost.h"

#include <string.h>

void plait_cost_memory(const plait_cost_rank *r, int zero_stage, double bucket_bytes, double process_bytes,
                       plait_cost_mem *out) {
    memset(out, 0, sizeof *out);
    double psi = r->param_numel, n = r->dp > 0 ? r->dp : 1;
    /* fp32 everywhere: 4 bytes of parameter, 4 of gradient, 8 of Adam moments */
    switch (zero_stage) {
    case 1: out->param = 4 * psi; out->grad = 4 * psi; out->state = 8 * psi / n; break;
    case 2: out->param = 4 * psi; out->grad = 4 * psi / n; out->state = 8 * psi / n; break;
    case 3: out->param = 4 * psi / n; out->grad = 4 * psi / n; out->state = 8 * psi / n; break;
    default: out->param = 4 * psi; out->grad = 4 * psi; out->state = 8 * psi; break;
    }
    out->activations = r->act_bytes;
    /* The largest message a collective runs whole needs a scratch buffer of
     * that size plus a quarter (the collectives grow it geometrically): a
     * gradient bucket under plain DP, a TP all-reduce, a pipeline message. */
    double largest = 0;
    if (r->dp > 1 && zero_stage == 0) largest = 4 * psi < bucket_bytes ? 4 * psi : bucket_bytes;
    if (r->tp > 1 && r->tp_msg_bytes > largest) largest = r->tp_msg_bytes;
    if (r->pp > 1 && r->pp_msg_bytes > largest) largest = r->pp_msg_bytes;
    out->buffers = 1.25 * largest;
    /* ZeRO's working buffers, per unit (a layer's parameters, U): stage 1
     * keeps two units in flight with their shards, 2 (U + U/n); stage 2 a
     * layer's gradients plus two units; stage 3 also the gathered
     * parameters of the running layer and the prefetched one. */
    if (zero_stage > 0 && r->dp > 1) {
        double U = 4 * r->largest_layer_numel;
        if (zero_stage == 1) out->buffers += 2 * (U + U / n);
        else out->buffers += 3 * U + (zero_stage == 3 ? 2 * U : 0);
    }
    out->process = process_bytes;
    out->total = out->param + out->grad + out->state + out->activations + out->buffers + out->process;
}
