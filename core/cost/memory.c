/* Memory per rank: what plait stores, by the ZeRO stages, activations and buffers. */
#include "cost/cost.h"

#include <string.h>

#include "coll/sum_tree.h"

void plait_cost_bytes_of(plait_cost_bytes *out) {
    /* Parameters, gradients and Adam's moments are float32 in every
     * precision (the parameters are their own master weights: the update
     * reads and writes them, then the bf16 copy is made from them). */
    *out = (plait_cost_bytes){
        .weight = 4, .weight_copy = 2, .grad = 4, .optim = 8, .message = 4, .adam_io = 4 + 8 + 16, .copy_io = 4 + 2};
}

double plait_cost_zero_shard(const plait_cost_rank *r, double n) {
    double experts = r->ep > 1 ? r->expert_numel : 0, en = n / (r->ep > 1 ? r->ep : 1);
    return (r->param_numel - experts) / n + experts / (en > 1 ? en : 1);
}

double plait_cost_zero_unit_bytes(double bucket, int zero, int n) {
    if (bucket > 0) return bucket;
    const double floor = zero >= 1 && zero <= 2 ? n * 4.0 * 1048576 : 0; /* 1M floats a rank */
    return floor > PLAIT_COST_ZERO_BUCKET ? floor : PLAIT_COST_ZERO_BUCKET;
}

int plait_cost_distributed(const plait_cost_rank *r, const plait_cost_job *j) {
    const double n = (r->dp > 0 ? r->dp : 1) * (j->cp > 1 ? j->cp : 1);
    return j->zero >= 1 && j->zero <= 2 && n > 1 && r->master_numel > 0 && !(j->whole_masters & (1 << j->zero));
}

int plait_cost_zero3_bf16(const plait_cost_rank *r, const plait_cost_job *j) {
    return j->zero >= 3 && r->bf16 && r->largest_gather_numel > 0;
}

double plait_cost_adam_io(int moments16) {
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    return b.adam_io - (moments16 ? b.optim : 0); /* the moments read and written at half the bytes */
}

void plait_cost_memory(const plait_cost_rank *r, const plait_cost_job *j, double process_bytes, plait_cost_mem *out) {
    memset(out, 0, sizeof *out);
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    /* the group that replicates the parameters, and over which ZeRO shards
     * them, is dp x cp: a cp rank holds every weight of its dp rank
     * (sdk/include/plait/optim.h, plait_optim_init.dp_comm) */
    double psi = r->param_numel, n = (r->dp > 0 ? r->dp : 1) * (j->cp > 1 ? j->cp : 1);
    /* a ZeRO shard of it: the routed experts' elements (ep > 1) over the
     * edp group, the dp x cp / ep ranks holding the same experts, the
     * others over dp x cp (plugins/optim/common/zero.h) */
    double shard = plait_cost_zero_shard(r, n);
    /* stage 1 shards the optimizer state, 2 also the gradients, 3 also the
     * parameters (plugins/optim/common/zero.h); ZeRO-1/2 gathering bf16
     * weights (param_gather) keep their float32 shard as the master copy;
     * the bf16 copy is whole on every rank but under ZeRO-3, which gathers
     * the weights the products read in bf16 and hands them to the model,
     * whose own copy is then a tied copy's alone (the gpt head's), made
     * while its layer runs in one buffer (model/model.h,
     * plait_model_lend_weight_copy).
     * As a distributed optimizer ([optim.zeroN] master: sharded where the
     * products read bf16 copies, the default) ZeRO-1/2 keep a shard too,
     * and no whole float32 copy of the weights the products read through
     * the bf16 copy (master_numel): 2 + 4/n bytes of such a weight where
     * plain ZeRO-1/2 keep 6 */
    int distributed = plait_cost_distributed(r, j);
    int shard_masters = j->zero >= 1 && j->zero <= 2 && n > 1 &&
                        (distributed || (r->param_wire > 0 && r->param_wire < 1));
    out->param = b.weight * (j->zero >= 3 ? shard : psi - (distributed ? r->master_numel : 0)) +
                 (shard_masters ? b.weight * shard : 0) +
                 b.weight_copy *
                     (j->zero >= 3 ? (plait_cost_zero3_bf16(r, j) ? r->largest_tied_copy_numel : r->largest_copy_numel)
                                   : r->weight_copy_numel);
    /* [optim.zero1] grad_accum = bf16: slices as ZeRO-2's, bf16 but where
     * the offload store reads float32 ones (slice16), and over more than
     * one micro-batch a bf16 running sum of every gradient, whose buffer
     * then holds the bf16 slices (plugins/optim/common/zero.h) */
    int accum16 = j->zero == 1 && j->grad_accum16, sum16 = accum16 && r->micro_batches > 1;
    int slice16 = accum16 && !j->offload;
    out->grad = (slice16 && sum16 ? 0 : (slice16 ? 2 : b.grad) * (j->zero >= 2 || accum16 ? shard : psi)) +
                (sum16 ? 2 * psi : 0);
    out->state = (j->moments16 ? b.optim / 2 : b.optim) * (j->zero >= 1 ? shard : psi);
    if (j->offload) { /* the moments leave the device (plugins/optim/README.md) */
        out->host_state = j->offload == 1 ? out->state : j->offload_buffer;
        out->disk = j->offload == 2 ? out->state : 0;
        /* host on a device with events: whole page-locked mirrors of the
         * gradients and parameters this rank updates, which the copies on
         * the communication stream fill beside the host's update
         * (plugins/optim/common/offload_copy.h; the parameters' not with
         * offload_params, whose shards are on the host already) */
        if (j->offload == 1)
            out->host_state += (b.grad + (j->offload_params && j->zero >= 3 ? 0 : b.weight)) *
                               (j->zero >= 1 ? shard : psi);
        out->state = 0;
        if (j->offload_params && j->zero >= 3) { /* ZeRO-3's float32 shards go with them */
            out->param -= b.weight * shard;
            if (j->offload == 1) out->host_state += b.weight * shard;
            else {
                out->disk += b.weight * shard;
                /* and the largest layer's slice read ahead of its gather
                 * (plugins/optim/common/offload.h) */
                out->host_state += b.weight * r->largest_layer_numel / n;
            }
        }
    }
    out->activations = r->act_bytes;
    out->host_activations = r->host_act_bytes;
    /* The largest message a collective runs whole needs a scratch buffer of
     * that size plus a quarter (the collectives grow it geometrically): a
     * gradient bucket under plain DP, a TP all-reduce, a pipeline message. */
    double largest = 0, grads = b.grad * psi, msg = r->msg_bytes > 0 ? r->msg_bytes : b.message;
    if (n > 1 && j->zero == 0) largest = grads < j->bucket_bytes ? grads : j->bucket_bytes;
    if (r->tp > 1 && msg * r->tp_msg_elems > largest) largest = msg * r->tp_msg_elems;
    if (r->pp > 1 && msg * r->pp_msg_elems > largest) largest = msg * r->pp_msg_elems;
    out->buffers = 1.25 * largest;
    /* ZeRO's working buffers (plugins/optim/common/zero_pool.c; ZeRO-1
     * accumulating in bf16 keeps ZeRO-2's and the widening piece), of the
     * largest layer, U, and the largest unit, P: a unit packs consecutive
     * tensors of one layer up to the unit size (plait_cost_zero_unit_bytes),
     * a larger tensor being one alone, so P is the layer where it is
     * smaller than that, else the larger of the unit size and the largest
     * tensor. Stage 1 keeps f units in flight with their shards,
     * f (P + P/n); stage 2 a layer's gradients plus f units, U + f P;
     * stage 3 also the gathered parameters of g layers, the running one
     * and those prefetched, a weight the products read in bf16 at half. f is [optim.zeroN] max_inflight (2 by
     * default), g [optim.zero3] prefetch_layers + 1 (2), as the plugins
     * declare their buffers (zero_pool.c, zero_buffer_bytes). */
    if (j->zero > 0 && n > 1) {
        double layer = r->largest_layer_numel, unit = plait_cost_zero_unit_bytes(j->bucket_bytes, j->zero, (int)n) / 4;
        double big = r->largest_tensor_numel > unit ? r->largest_tensor_numel : unit;
        double U = b.grad * layer, P = b.grad * (big < layer ? big : layer);
        const double f = j->zero_inflight[j->zero] > 0 ? j->zero_inflight[j->zero] : 2;
        const double g = j->zero3_gathered > 0 ? j->zero3_gathered : 2;
        /* ZeRO-3's gathered layers: bf16 where the products read bf16 */
        const double gathered = plait_cost_zero3_bf16(r, j) ? r->largest_gather_numel : layer;
        if (j->zero == 1 && !accum16) out->buffers += f * (P + P / n);
        else out->buffers += U + f * P + (j->zero == 3 ? g * b.weight * gathered : 0);
        /* ZeRO-3 gathering bf16 from offloaded slices: one float32 slice to round */
        if (j->zero == 3 && j->offload_params && plait_cost_zero3_bf16(r, j)) out->buffers += P / n;
        /* the widening piece of the bf16 sums or slices (ZERO_ACC_CHUNK) */
        if (sum16 || slice16) out->buffers += b.grad * 65536;
    }
    /* [run] deterministic over more than one micro-batch a step: the
     * micro-batches' gradients are summed in the canonical tree
     * (coll/sum_tree.h), one array of the rank's flat gradient a level.
     * Where the core keeps the gradients (adam, ZeRO-1) it allocates the
     * levels its counter reaches and the scratch each micro-batch's
     * gradient lands in (train/run_params.c); ZeRO-2/3 declare their
     * tree's most levels over their units (plugins/optim/common/zero_state.c) */
    if (j->deterministic && r->micro_batches > 1) {
        const double level = b.grad * r->flat_numel;
        const int32_t m = r->micro_batches;
        out->buffers += level * (j->zero >= 2 ? plait_sum_tree_max_levels(m) : plait_sum_tree_levels_used(m) + 1);
    }
    out->process = process_bytes;
    out->total = out->param + out->grad + out->state + out->activations + out->buffers + out->process;
}
