/* Activation elements of a model chunk, from its layer range. */
#include "cost/activations.h"

#include <string.h>

#include "kernels/kernels.h"

/* The model aligns every buffer of a slot to 16 floats (model/model_slots.c). */
static double al(double n) { return (double)(((long long)n + 15) / 16 * 16); }

void plait_cost_shape_init(plait_cost_shape *s, const plait_model_spec *spec, double B, int tp, double vocab_padded,
                           int recompute, int split) {
    memset(s, 0, sizeof *s);
    s->B = B;
    s->T = spec->block_size;
    s->C = spec->n_embd;
    s->L = spec->n_layer;
    s->gpt = strcmp(spec->arch, "gpt") == 0;
    s->recompute = recompute;
    s->split = split;
    double NH = s->gpt ? spec->n_head : 1, HS = s->gpt ? s->C / NH : s->C;
    s->HS = HS;
    s->fused = s->gpt && HS <= PLAIT_ATTENTION_FUSED_MAX_HS;
    s->NHl = NH / tp;
    s->Cl = s->NHl * HS;
    s->Fl = 4 * s->C / tp;
    s->Vl = vocab_padded > 0 ? vocab_padded / tp : spec->vocab_size;
}

/* Elements of a block's saved tensors (model/recompute.c's parts, in their
 * order): those a slot keeps for each block (kept = 1), or those the model
 * keeps once for every block to recompute into (kept = 0). Selective drops
 * the attention probabilities and the GELU output; full drops them all. */
static double block_elems(const plait_cost_shape *s, int kept) {
    double BT = s->B * s->T;
    const double att = s->fused ? 0 : al(s->B * s->NHl * s->T * s->T), lse = s->fused ? al(s->B * s->NHl * s->T) : 0;
    const struct {
        double n;
        int gpt_only, selective;
    } parts[] = {{al(BT * s->C), 1, 0},      {al(BT), 1, 0},       {al(BT), 1, 0},
                 {al(BT * 3 * s->Cl), 1, 0}, {att, 1, 1},
                 {al(BT * s->Cl), 1, 0},     {al(BT * s->C), 1, 0}, {al(BT * s->C), 0, 0},
                 {al(BT), 0, 0},             {al(BT), 0, 0},       {al(BT * s->Fl), 0, 0},
                 {al(BT * s->Fl), 0, 1},     {lse, 1, 0}};
    double f = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].gpt_only && !s->gpt) continue;
        int dropped = s->recompute == 2 || (s->recompute == 1 && parts[i].selective);
        if (dropped != !kept) continue;
        f += parts[i].n;
    }
    return f;
}

/* Elements a block's slot keeps for the weight half of a split backward
 * (model/model_slots.c, stash_carve): the block output's and ln_2's gradients,
 * the rest in buffers the input half leaves dead where recompute is none
 * (c_fc's and c_attn's outputs; the probabilities when they hold two
 * residual-stream tensors). */
static double stash_elems(const plait_cost_shape *s) {
    double BT = s->B * s->T, f = 2 * al(BT * s->C);
    int none = s->recompute == 0;
    if (!none) f += al(BT * s->Fl) + (s->gpt ? al(BT * 3 * s->Cl) : 0);
    if (s->gpt && !(none && !s->fused && s->NHl * s->T >= 2 * s->C)) f += 2 * al(BT * s->C);
    return f;
}

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

double plait_cost_slot_elems(const plait_cost_shape *s, int first, int last) {
    double BT = s->B * s->T, f = al(BT) * 2 + al(BT * s->C) * 2;
    /* the residual stream at boundary l (0..L) sits between layers l and
     * l + 1: a slot holding either keeps it */
    int boundaries = imin(last, s->L) - imax(first - 1, 0) + 1;
    int blocks = imin(last, s->L) - imax(first, 1) + 1;
    if (boundaries > 0) f += boundaries * al(BT * s->C);
    if (blocks > 0) f += blocks * (block_elems(s, 1) + (s->split ? stash_elems(s) : 0));
    if (first <= s->L + 1 && s->L + 1 <= last)
        f += al(BT * s->C) + 2 * al(BT) + al(BT * s->Vl) + 2 * al(BT) + (s->split ? al(BT * s->C) : 0);
    return f;
}

/* The fused attention's scratch as the CPU's kernels size it (model/model_slots.c:
 * at least Cl floats): the largest of plait's devices (the cuda device's
 * is B·NH·T floats). */
static double fused_scratch(const plait_cost_shape *s) {
    double n = (double)plait_k_attention_fused_scratch((int64_t)s->B, (int64_t)s->T, (int64_t)s->NHl, (int64_t)s->HS);
    return al(n > s->Cl ? n : s->Cl);
}

double plait_cost_scratch_elems(const plait_cost_shape *s) {
    double BT = s->B * s->T;
    double att = !s->gpt ? 0 : s->fused ? fused_scratch(s) : al(s->B * s->NHl * s->T * s->T);
    return al(BT * s->C) + al(BT * s->Fl) + al(BT * s->Cl) + al(BT * 3 * s->Cl) + att + al(3 * BT) +
           block_elems(s, 0);
}

double plait_cost_recompute_flops_per_token(const plait_cost_shape *s, double block_flops_per_token) {
    double scores = s->fused ? 2.0 * s->T * s->C : 0; /* the fused backward's */
    if (s->recompute == 2) return block_flops_per_token + scores;
    if (s->recompute == 1 && s->gpt && !s->fused) return 4.0 * s->T * s->C;
    return scores;
}
