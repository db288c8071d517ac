/* A rank's FLOPs, parameters, activations and messages from its plan. */
#include "cost/rank_cost.h"

#include <math.h>
#include <string.h>

#include <plait/partition_util.h>

#include "cost/activations.h"

#include "model/model.h"
#include "model/tied.h"
#include "train/step_pipeline.h"

/* The elements of global parameter `gi`'s slice on this plan: its shard,
 * and at tp × ep an expert tensor's second split too. */
/* The most buffers of the model's boundary pool (model/model_slots.c) the
 * rank holds at once, replaying its instruction list as the executor runs
 * it (train/run_step.c, train/step_pipeline.c): the forward of a chunk
 * whose output is sent takes one, which SEND_ACT hands to the ring of
 * sends in flight; RECV_GRAD takes one, the backward the rest of the
 * gradients it touches (`need`: 1 where the chunk is the embedding or the
 * head alone, else both parities) and gives them back after it, all but
 * the input gradient SEND_GRAD hands to the ring (the embedding's chunk:
 * all, after its weight half); a send first waits for the one `window`
 * before it of its kind, whose buffer goes back (the step's end, the
 * rest). The larger of a training step's and an evaluation pass's (its
 * forwards and their sends only). */
static double pool_peak(const plait_plan *plan, int32_t pp, const int8_t *need) {
    const int32_t window = plait_step_send_window(plan, pp);
    int64_t peak = 0;
    for (int train = 0; train < 2; train++) {
        int64_t held = 0, ring[2] = {0, 0};
        for (size_t i = 0; i < plan->n_instr; i++) {
            const plait_instr *in = &plan->schedule[i];
            const int c = (int)in->chunk, kind = in->op == PLAIT_INSTR_SEND_GRAD;
            const int sends_grad = c < 64 && need[c] < 0, n = c < 64 ? (need[c] < 0 ? -need[c] : need[c]) : 2;
            switch ((plait_instr_op)in->op) {
                case PLAIT_INSTR_FORWARD:
                    /* the output a SEND_ACT for the same chunk and micro-batch follows */
                    if (i + 1 < plan->n_instr && plan->schedule[i + 1].op == PLAIT_INSTR_SEND_ACT) held++;
                    break;
                case PLAIT_INSTR_SEND_ACT:
                case PLAIT_INSTR_SEND_GRAD:
                    if (!train && kind) break;
                    if (ring[kind] == window) held--;
                    else ring[kind]++;
                    break;
                case PLAIT_INSTR_RECV_GRAD:
                    held += train;
                    break;
                case PLAIT_INSTR_BACKWARD:
                case PLAIT_INSTR_BACKWARD_INPUT:
                    if (!train) break;
                    if (!(i > 0 && plan->schedule[i - 1].op == PLAIT_INSTR_RECV_GRAD)) held++;
                    held += n - 1;
                    if (held > peak) peak = held;
                    if (sends_grad) held -= n - 1;
                    else if (in->op == PLAIT_INSTR_BACKWARD) held -= n;
                    break;
                case PLAIT_INSTR_BACKWARD_WEIGHT:
                    if (train && !sends_grad) held -= n;
                    break;
                default:
                    break;
            }
            if (held > peak) peak = held;
        }
    }
    return (double)peak;
}

/* The slots the stage's plan allocates, by chunk (at most 64): chunks
 * whose layers are alike one for one (the embedding, the head, a sparse
 * and a dense block each its own kind: plait_model_layer_kind) share theirs, so the first chunk of each such
 * class gets the most micro-batches the class keeps alive at once over
 * the plan's instructions (at least 1), the others 0. */
static void chunk_slots(const plait_plan *plan, int32_t stage, int nl, int L, int chunks, const int *sparse_of,
                        int *peak) {
    int first[64], count[64], class_of[64], live[64] = {0};
    for (int c = 0; c < chunks && c < 64; c++) {
        first[c] = -1, count[c] = 0, class_of[c] = c, peak[c] = 0;
        for (int l = 0; l < nl; l++)
            if ((!plan->layer_stage || plan->layer_stage[l] == stage) &&
                (!plan->layer_chunk || plan->layer_chunk[l] == c)) {
                if (first[c] < 0) first[c] = l;
                count[c]++;
            }
    }
#define KIND(l) plait_model_layer_kind(l, L, (l) < 4096 && sparse_of[l])
    for (int c = 0; c < chunks && c < 64; c++)
        for (int o = 0; o < c && class_of[c] == c; o++) {
            int same = first[c] >= 0 && first[o] >= 0 && count[c] == count[o];
            for (int i = 0; same && i < count[c]; i++) same = KIND(first[c] + i) == KIND(first[o] + i);
            if (same) class_of[c] = o;
        }
#undef KIND
    for (size_t i = 0; i < plan->n_instr; i++) {
        const plait_instr *in = &plan->schedule[i];
        if (in->chunk >= chunks || in->chunk >= 64) continue;
        const int k = class_of[in->chunk];
        if (in->op == PLAIT_INSTR_FORWARD && ++live[k] > peak[k]) peak[k] = live[k];
        /* a split backward holds the slot until its weight half */
        if (in->op == PLAIT_INSTR_BACKWARD || in->op == PLAIT_INSTR_BACKWARD_WEIGHT) live[k]--;
    }
    for (int c = 0; c < chunks && c < 64; c++)
        if (class_of[c] == c && peak[c] < 1) peak[c] = 1;
}

static double shard_numel(const plait_plan *plan, const plait_param *g, int32_t gi) {
    plait_param p = *g;
    if (plait_param_apply_shard(&p, &plan->shards[gi]) != PLAIT_OK) return (double)g->numel;
    if (plan->second_shards && plait_param_apply_second(&p, &plan->second_shards[gi]) != PLAIT_OK)
        return (double)g->numel;
    return (double)p.numel;
}

/* The layers the plan puts on this rank's stage, as text: the plan's
 * chunks in model order (chunk c of stage s is the (c·pp + s)-th) back
 * into the partition's bounds, then this stage's chunks of them. */
static void stage_layers(const plait_plan *plan, const plait_mesh *mesh, int nl, plait_cost_rank *out) {
    int32_t bounds[4097];
    int k = 0, pp = mesh->pp > 0 ? mesh->pp : 1;
    if (nl < 1 || nl > 4096) return;
    for (int l = 0; l < nl; l++) {
        int c = plan->layer_stage ? (plan->layer_chunk ? plan->layer_chunk[l] * pp : 0) + plan->layer_stage[l] : 0;
        if (l > 0 && c == k - 1) continue;
        if (c != k) return; /* not chunks in model order: nothing said */
        bounds[k++] = l;
    }
    bounds[k] = nl;
    const int stage = plan->layer_stage ? mesh->pp_rank : 0, stride = plan->layer_stage ? pp : 1;
    size_t need = plait_partition_format(bounds, k, stage, stride, out->layers, sizeof out->layers);
    out->layers_cut = need >= sizeof out->layers;
}

/* long: one rank's cost from its plan, each part (parameters, FLOPs,
 * activations, messages) reading the same locals: the plan, its layers'
 * placement and the shape */
void plait_cost_rank_from_plan(const plait_layout_rank *lr, plait_precision precision, const plait_cost_device *dev,
                               int sp, int cp, int residual_bf16, int offload, const plait_cost_moe *moe,
                               plait_cost_rank *out) {
    const plait_model_spec *spec = lr->spec;
    const plait_plan *plan = lr->plan;
    const plait_mesh *mesh = lr->mesh;
    memset(out, 0, sizeof *out);
    out->dp = mesh->dp;
    out->tp = mesh->tp;
    out->pp = mesh->pp;
    out->stage = mesh->pp_rank;
    out->micro_batches = plan->micro_batches;
    out->rows = (double)lr->batch->micro_batch * spec->block_size / (cp > 1 ? cp : 1);
    out->chunks = plan->chunks > 0 ? plan->chunks : 1;
    int stage = mesh->pp_rank, L = spec->n_layer, nl = spec->n_layers;
    const int ep = moe && moe->E > 0 && mesh->ep > 1 ? mesh->ep : 1;
    int sparse_of[4096] = {0}; /* a sparse block's layer: 1 */
    for (int32_t g = 0; g < spec->n_params; g++)
        if ((spec->params[g].flags & PLAIT_PARAM_EXPERT) && spec->params[g].layer >= 0 && spec->params[g].layer < 4096)
            sparse_of[spec->params[g].layer] = 1;
#define LOCAL(l) ((l) >= 0 && (l) < nl && (!plan->layer_stage || plan->layer_stage[l] == stage))

    /* parameters: the TP slice of every parameter of a local layer; a tied
     * copy counts only where its original is not local (the head's copy of
     * the token embedding on the last stage) */
    double layer_numel[4096] = {0};
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        if (!LOCAL(p->layer)) continue;
        double e = plan->shards ? shard_numel(plan, p, g) : (double)p->numel;
        /* its E / ep experts (the core's prefilled plan splits them over ep already) */
        const int experts = (p->flags & PLAIT_PARAM_EXPERT) && ep > 1;
        if (experts && !(plan->shards && plan->shards[g].dim == 0 && plan->shards[g].parts > 1)) e /= ep;
        if (!(p->flags & PLAIT_PARAM_BUFFER)) out->flat_numel += 16 * ceil(e / 16);
        if (plait_tied_is_copy(p) && LOCAL(plait_tied_source(spec, p)->layer)) continue;
        if (experts) out->expert_numel += e;
        out->param_numel += e;
        if (e > out->largest_tensor_numel) out->largest_tensor_numel = e;
        out->tensors++;
        if (p->layer < 4096) layer_numel[p->layer] += e;
    }
    for (int l = 0; l < nl && l < 4096; l++)
        if (layer_numel[l] > out->largest_layer_numel) out->largest_layer_numel = layer_numel[l];
    stage_layers(plan, mesh, nl, out);

    /* activations: per chunk, the largest number of micro-batches between
     * their forward and their backward in the schedule, times the chunk's
     * slot; plus the shared backward scratch */
    plait_cost_shape s;
    int split = 0;
    for (size_t i = 0; i < plan->n_instr && !split; i++) split = plan->schedule[i].op == PLAIT_INSTR_BACKWARD_INPUT;
    const plait_cost_shape_in shape_in = {.B = (double)lr->batch->micro_batch,
                                          .tp = mesh->tp,
                                          .tensor_parallel = plan->tp_ops != NULL,
                                          .vocab_padded = plan->vocab_padded > 0 ? (double)plan->vocab_padded : 0,
                                          .recompute = lr->recompute,
                                          .sp = sp && mesh->tp > 1,
                                          .cp = cp,
                                          .split = split,
                                          .precision = precision,
                                          .device = dev,
                                          .residual_bf16 = residual_bf16,
                                          .offload = offload};
    plait_cost_shape_init(&s, spec, &shape_in);
    /* under bf16 activations the products read a bf16 copy of their local
     * weights, the head's (tied or not) included (model/model_bf16.c) */
    out->bf16 = s.bf16, out->width = s.C / (mesh->tp > 0 ? mesh->tp : 1); /* its products' width */
    out->sp = s.sp, out->msg_bytes = plait_cost_message_bytes(&s); /* what its messages take */
    double layer_copy[4096] = {0}, layer_master[4096] = {0}, layer_tied_copy[4096] = {0};
    /* the experts' weights too where they run bf16 (model/moe_experts_bf16.c) */
    const int copies = PLAIT_BF16_COPY_HEAD |
                       (plait_cost_experts_bf16(moe, &s, mesh->tp) ? PLAIT_BF16_COPY_EXPERTS : 0);
    for (int32_t g = 0; s.bf16 && g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        if (!LOCAL(p->layer) || !plait_model_bf16_copied(spec, g, copies)) continue;
        double e = plan->shards ? shard_numel(plan, p, g) : (double)p->numel;
        out->weight_copy_numel += (double)plait_model_bf16_copy_numel((size_t)e);
        if (p->layer < 4096) layer_copy[p->layer] += (double)plait_model_bf16_copy_numel((size_t)e);
        if (!plait_tied_is_copy(p)) out->master_numel += e;
        if (p->layer >= 4096) continue;
        if (plait_tied_is_copy(p)) layer_tied_copy[p->layer] += (double)plait_model_bf16_copy_numel((size_t)e);
        else layer_master[p->layer] += e;
    }
    for (int l = 0; l < nl && l < 4096; l++) {
        if (layer_copy[l] > out->largest_copy_numel) out->largest_copy_numel = layer_copy[l];
        if (layer_tied_copy[l] > out->largest_tied_copy_numel) out->largest_tied_copy_numel = layer_tied_copy[l];
        const double gathered = layer_numel[l] - layer_master[l] / 2;
        if (s.bf16 && gathered > out->largest_gather_numel) out->largest_gather_numel = gathered;
    }

    /* FLOPs: each local layer's forward estimate, x3 for forward + backward, split over TP (heads, MLP
     * columns, vocabulary), and the forwards a recompute mode runs again; of T / cp tokens a sequence */
    double tokens = (double)lr->batch->micro_batch * s.T * plan->micro_batches;
    for (int l = 0; l < nl; l++)
        if (LOCAL(l)) {
            plait_cost_add_layer_flops(&s, spec->layers[l].flops_per_token, l >= 1 && l <= L, tokens, mesh->tp, out);
        }

    int has_embedding = LOCAL(0), has_head = LOCAL(L + 1);
    /* per chunk, the gradients its backward touches, negative where it
     * sends its input gradient (pool_peak) */
    int8_t need[64];
    memset(need, 0, sizeof need);
    /* the slots of chunks of alike layers are shared (train/step_pipeline.c's
     * plait_step_slot): a class's first chunk counts the most micro-batches
     * its chunks keep alive at once, the others none */
    int class_peak[64];
    chunk_slots(plan, stage, nl, L, out->chunks, sparse_of, class_peak);
    for (int c = 0; c < out->chunks; c++) {
        int first = -1, last = -1, sparse = 0;
        for (int l = 0; l < nl; l++)
            if (LOCAL(l) && (!plan->layer_chunk || plan->layer_chunk[l] == c)) {
                if (first < 0) first = l;
                last = l;
                sparse += l < 4096 && sparse_of[l];
            }
        if (first < 0) continue;
        if (c < 64)
            need[c] = (int8_t)((first == last && (first == 0 || first == L + 1) ? 1 : 2) * (first > 0 ? -1 : 1));
        const int peak = c < 64 ? class_peak[c] : 1;
        /* recompute = full: a sparse block's routing and experts' rows
         * live only from its rerun to its backward, in one set (below);
         * a split backward keeps the held rows to its weight half (counted
         * for every live slot: a bound) */
        const double moe_kept = s.recompute == 2 ? (s.split ? plait_cost_held_bytes(moe, &s, mesh->tp, ep) : 0)
                                                 : plait_cost_held_bytes(moe, &s, mesh->tp, ep) +
                                                       plait_cost_moe_acts_bytes(moe, &s, mesh->tp, ep);
        out->host_act_bytes += peak * plait_cost_slot_host_bytes(&s, first, last);
        out->offload_bytes += 2 * plan->micro_batches * plait_cost_slot_host_bytes(&s, first, last);
        out->act_bytes += peak * (plait_cost_slot_bytes(&s, first, last) +
                                  sparse * (moe_kept + plait_cost_moe_split_bytes(moe, &s, mesh->tp, ep) -
                                            plait_cost_sparse_unkept_bytes(&s)));
    }
    out->act_bytes += pool_peak(plan, mesh->pp, need) * plait_cost_boundary_bytes(&s);
    out->act_bytes += plait_cost_scratch_bytes(&s);
    int any_sparse = 0;
    for (int l = 0; l < nl && l < 4096; l++) any_sparse |= LOCAL(l) && sparse_of[l];
    if (any_sparse) out->act_bytes += plait_cost_moe_scratch_bytes(moe, &s, mesh->tp, ep);
    if (any_sparse) out->act_bytes += plait_cost_moe_shared_bytes(moe, &s, mesh->tp, ep);

    /* TP: Megatron's count, per micro-batch 2 all-reduces of b.s.h in the forward and 2 in the backward
     * of every block, one more for the vocab-parallel embedding's output and one for the head's input
     * gradient */
    double bsh = s.B * s.T * s.C;
    int blocks = 0;
    for (int l = 1; l <= L; l++) blocks += LOCAL(l);
    plait_cost_ring_traffic(&s, blocks, plan->micro_batches, out); /* cp's ring */
    int sparse = 0;
    for (int l = 1; l <= L && l < 4096; l++) sparse += LOCAL(l) && sparse_of[l];
    if (moe) plait_cost_ep_traffic(moe, &s, ep, sparse, plan->micro_batches, out); /* ep's all-to-alls */
    if (mesh->tp > 1) plait_cost_tp_traffic(&s, blocks, sparse, has_embedding, has_head, plan->micro_batches, out);
    /* PP: every chunk boundary sends the activation forward and its
     * gradient back, once per micro-batch; the first and last chunk of the
     * model have one side each */
    if (mesh->pp > 1) {
        double sends = 0;
        for (int c = 0; c < out->chunks; c++) {
            int k = c * mesh->pp + stage, K = out->chunks * mesh->pp;
            sends += (k < K - 1) + (k > 0);
        }
        out->pp_msgs = sends * plan->micro_batches;
        out->pp_msg_elems = s.sp ? bsh / mesh->tp : bsh; /* under sp each rank sends its part of the sequence */
        out->bubble = plan->bubble_formula > 0 ? plan->bubble_formula
                                               : plait_cost_bubble(out->chunks > 1 ? "interleaved" : "1f1b", mesh->pp,
                                                                   plan->micro_batches, out->chunks);
    }
#undef LOCAL
}
