/* A rank's FLOPs, parameters, activations and messages from its plan. */
#include "cost/rank_cost.h"

#include <string.h>

#include "model/model.h"
#include "model/tied.h"

/* The model aligns every buffer of a slot to 16 floats (model/gpt.c). */
static double al(double n) { return (double)(((long long)n + 15) / 16 * 16); }

typedef struct shape {
    double B, T, C, Cl, NHl, Fl, Vl;
    int L, gpt;
    int recompute; /* 0 none, 1 selective, 2 full (plait_layout_rank) */
    int split;     /* the schedule splits backwards (zb1) */
} shape;

/* Floats of a block's saved tensors (model/recompute.c's parts, in their
 * order): those a slot keeps for each block (kept = 1), or those the
 * model keeps once for every block to recompute into (kept = 0).
 * Selective drops the attention probabilities and the GELU output; full
 * drops them all. */
static double block_floats(const shape *s, int kept) {
    double BT = s->B * s->T;
    const struct {
        double floats;
        int gpt_only, selective;
    } parts[] = {{al(BT * s->C), 1, 0},      {al(BT), 1, 0},       {al(BT), 1, 0},
                 {al(BT * 3 * s->Cl), 1, 0}, {al(s->B * s->NHl * s->T * s->T), 1, 1},
                 {al(BT * s->Cl), 1, 0},     {al(BT * s->C), 1, 0}, {al(BT * s->C), 0, 0},
                 {al(BT), 0, 0},             {al(BT), 0, 0},       {al(BT * s->Fl), 0, 0},
                 {al(BT * s->Fl), 0, 1}};
    double f = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].gpt_only && !s->gpt) continue;
        int dropped = s->recompute == 2 || (s->recompute == 1 && parts[i].selective);
        if (dropped != !kept) continue;
        f += parts[i].floats;
    }
    return f;
}

/* Floats a block's slot keeps for the weight half of a split backward
 * (model/gpt.c stash_layout): the block output's and ln_2's gradients,
 * the rest in buffers the input half leaves dead where recompute is none
 * (c_fc's and c_attn's outputs; the probabilities when they hold two
 * residual-stream tensors). */
static double stash_floats(const shape *s) {
    double BT = s->B * s->T, f = 2 * al(BT * s->C);
    int none = s->recompute == 0;
    if (!none) f += al(BT * s->Fl) + (s->gpt ? al(BT * 3 * s->Cl) : 0);
    if (s->gpt && !(none && s->NHl * s->T >= 2 * s->C)) f += 2 * al(BT * s->C);
    return f;
}

/* Floats one activation slot holds for layers [first, last] of this rank
 * (model/gpt.c slot_layout): token and target ids, two gradient buffers,
 * the residual stream at every boundary the slot touches, each block's
 * saved tensors and, with the head, its logits. */
static double slot_floats(const shape *s, int first, int last) {
    double BT = s->B * s->T, f = al(BT) * 2 + al(BT * s->C) * 2;
#define HAS(l) ((l) >= first && (l) <= last)
    for (int l = 0; l <= s->L; l++)
        if (HAS(l) || HAS(l + 1)) f += al(BT * s->C);
    for (int l = 1; l <= s->L; l++)
        if (HAS(l)) f += block_floats(s, 1) + (s->split ? stash_floats(s) : 0);
    if (HAS(s->L + 1)) f += al(BT * s->C) + 2 * al(BT) + al(BT * s->Vl) + 2 * al(BT) + (s->split ? al(BT * s->C) : 0);
#undef HAS
    return f;
}

/* The backward scratch all slots share (model/gpt.c scratch_get), and
 * under recompute the one block's worth of dropped tensors it recomputes
 * into (model/recompute.c). */
static double scratch_floats(const shape *s) {
    double BT = s->B * s->T;
    return al(BT * s->C) + al(BT * s->Fl) + al(BT * s->Cl) + al(BT * 3 * s->Cl) +
           (s->gpt ? al(s->B * s->NHl * s->T * s->T) : 0) + al(3 * BT) + block_floats(s, 0);
}

static double shard_numel(const plait_param *g, const plait_shard *sh) {
    plait_param p = *g;
    if (plait_param_apply_shard(&p, sh) != PLAIT_OK) return (double)g->numel;
    return (double)p.numel;
}

void plait_cost_rank_from_plan(const plait_layout_rank *lr, plait_cost_rank *out) {
    const plait_model_spec *spec = lr->spec;
    const plait_plan *plan = lr->plan;
    const plait_mesh *mesh = lr->mesh;
    memset(out, 0, sizeof *out);
    out->dp = mesh->dp;
    out->tp = mesh->tp;
    out->pp = mesh->pp;
    out->node_rank = mesh->world_rank;
    out->micro_batches = plan->micro_batches;
    out->chunks = plan->chunks > 0 ? plan->chunks : 1;
    int stage = mesh->pp_rank, L = spec->n_layer, nl = spec->n_layers;
#define LOCAL(l) ((l) >= 0 && (l) < nl && (!plan->layer_stage || plan->layer_stage[l] == stage))

    /* parameters: the TP slice of every parameter of a local layer; a tied
     * copy counts only where its original is not local (the head's copy of
     * the token embedding on the last stage) */
    double layer_numel[4096] = {0};
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        if (!LOCAL(p->layer)) continue;
        if (plait_tied_is_copy(p) && LOCAL(plait_tied_source(spec, p)->layer)) continue;
        double e = plan->shards ? shard_numel(p, &plan->shards[g]) : (double)p->numel;
        out->param_numel += e;
        if (p->layer < 4096) layer_numel[p->layer] += e;
    }
    for (int l = 0; l < nl && l < 4096; l++)
        if (layer_numel[l] > out->largest_layer_numel) out->largest_layer_numel = layer_numel[l];

    /* FLOPs: each local layer's forward estimate, x3 for forward + backward,
     * split over TP (heads, MLP columns and the vocabulary are all cut) */
    double tokens = (double)lr->batch->micro_batch * spec->block_size * plan->micro_batches;
    for (int l = 0; l < nl; l++)
        if (LOCAL(l)) out->flops += 3.0 * spec->layers[l].flops_per_token * tokens / mesh->tp;

    /* activations: per chunk, the largest number of micro-batches between
     * their forward and their backward in the schedule, times the chunk's
     * slot; plus the shared backward scratch */
    shape s = {.B = (double)lr->batch->micro_batch, .T = spec->block_size, .C = spec->n_embd,
               .L = L, .gpt = strcmp(spec->arch, "gpt") == 0, .recompute = lr->recompute};
    for (size_t i = 0; i < plan->n_instr && !s.split; i++) s.split = plan->schedule[i].op == PLAIT_INSTR_BACKWARD_INPUT;
    double NH = s.gpt ? spec->n_head : 1, HS = s.gpt ? s.C / NH : s.C;
    s.NHl = NH / mesh->tp;
    s.Cl = s.NHl * HS;
    s.Fl = 4 * s.C / mesh->tp;
    s.Vl = plan->vocab_padded > 0 ? (double)plan->vocab_padded / mesh->tp : spec->vocab_size;
    int has_embedding = LOCAL(0), has_head = LOCAL(L + 1);
    for (int c = 0; c < out->chunks; c++) {
        int first = -1, last = -1;
        for (int l = 0; l < nl; l++)
            if (LOCAL(l) && (!plan->layer_chunk || plan->layer_chunk[l] == c)) {
                if (first < 0) first = l;
                last = l;
            }
        if (first < 0) continue;
        int live = 0, peak = 0;
        for (size_t i = 0; i < plan->n_instr; i++) {
            const plait_instr *in = &plan->schedule[i];
            if (in->chunk != c) continue;
            if (in->op == PLAIT_INSTR_FORWARD && ++live > peak) peak = live;
            /* a split backward holds the slot until its weight half */
            if (in->op == PLAIT_INSTR_BACKWARD || in->op == PLAIT_INSTR_BACKWARD_WEIGHT) live--;
        }
        if (peak < 1) peak = 1;
        out->act_bytes += 4.0 * peak * slot_floats(&s, first, last);
    }
    out->act_bytes += 4.0 * scratch_floats(&s);

    /* TP: Megatron's count, per micro-batch 2 all-reduces of b.s.h in the
     * forward and 2 in the backward of every block, one more for the
     * vocab-parallel embedding's output and one for the head's input
     * gradient */
    double bsh = 4.0 * s.B * s.T * s.C;
    if (mesh->tp > 1) {
        int blocks = 0;
        for (int l = 1; l <= L; l++) blocks += LOCAL(l);
        out->tp_msgs = plan->micro_batches * (4.0 * blocks + has_embedding + has_head);
        out->tp_msg_bytes = bsh;
    }
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
        out->pp_msg_bytes = bsh;
        out->bubble = plan->bubble_formula > 0 ? plan->bubble_formula
                                               : plait_cost_bubble(mesh->pp, plan->micro_batches, out->chunks);
    }
#undef LOCAL
}
