/* Activation bytes of a model chunk, from its layer range. */
#include "cost/activations.h"

#include <math.h>
#include <string.h>

#include "cost/cost.h"
#include "model/model.h"

/* The model aligns every buffer of a slot to 16 floats (model/model_slots.c),
 * a bf16 buffer of n elements taking (n + 1) / 2 floats before alignment. */
static double al(double n) { return (double)(((long long)n + 15) / 16 * 16); }
static double bh(double n) { return al((double)(((long long)n + 1) / 2)); }
/* what sequence parallelism divides the sequence by (1 without it) */
static double seq_cut(const plait_cost_shape *s) { return s->q > 1 ? s->q : 1; }

void plait_cost_device_of(const plait_kernels *k, int64_t T, int64_t HS, plait_cost_device *out) {
    memset(out, 0, sizeof *out);
    out->bf16_path = plait_model_kernels_bf16(k, HS);
    out->llama_bf16_path = plait_model_kernels_llama_bf16(k);
    out->ring_bf16 = PLAIT_KERNELS_HAS_RING_ATTENTION_BF16(k);
    if (PLAIT_KERNELS_HAS_FUSED_ATTENTION(k, HS)) out->att_scratch = (double)k->attention_fused_scratch(1, T, 1, HS);
    out->att_backward_products = 5; /* core/kernels/kernels_attention.c */
    out->bf16_tensors = PLAIT_KERNELS_HAS_FROM_BF16(k);
    out->moe_bf16 = PLAIT_KERNELS_HAS_MOE_BF16(k) && PLAIT_KERNELS_HAS_FROM_BF16(k);
}

void plait_cost_device_cuda(int64_t T, int64_t HS, plait_cost_device *out) {
    memset(out, 0, sizeof *out);
    out->bf16_path = HS <= PLAIT_ATTENTION_FUSED_MAX_HS;
    out->llama_bf16_path = 1;
    out->ring_bf16 = 1;
    out->att_scratch = out->bf16_path ? (double)T : 0;
    out->att_backward_products = 7;
    out->bf16_tensors = 1; /* plugins/device/cuda's table has from_bf16 */
    out->moe_bf16 = 1;     /* and the experts' bf16 entries */
    out->own_memory = 1;
}

void plait_cost_shape_init(plait_cost_shape *s, const plait_model_spec *spec, const plait_cost_shape_in *in) {
    memset(s, 0, sizeof *s);
    s->B = in->B;
    /* a cp rank keeps its 2 of the 2cp chunks of every sequence: every
     * activation is of T / cp rows (model/model.c, cp_setup) */
    s->cp = in->cp > 1 ? in->cp : 1;
    s->T = spec->block_size / s->cp;
    s->C = spec->n_embd;
    s->L = spec->n_layer;
    s->gpt = strcmp(spec->arch, "gpt") == 0;
    s->llama = strcmp(spec->arch, "llama") == 0;
    s->recompute = in->recompute;
    s->split = in->split;
    double NH = s->gpt || s->llama ? spec->n_head : 1, HS = (double)plait_model_spec_head_size(spec);
    s->HS = HS;
    s->fused = (s->gpt && HS <= PLAIT_ATTENTION_FUSED_MAX_HS) || s->llama;
    s->att_scratch = s->fused && in->device ? in->device->att_scratch / s->cp : 0;
    s->att_bwd = in->device && in->device->att_backward_products > 0 ? in->device->att_backward_products : 5;
    s->NHl = floor(NH / in->tp); /* the model's integer division (the mlp arch: no heads under tp) */
    s->Cl = s->NHl * HS;
    s->Fl = (s->llama ? spec->ffn_hidden : 4 * s->C) / in->tp;
    s->NKVl = floor(spec->n_kv_head / in->tp);
    s->Wq = (s->NHl + 2 * s->NKVl) * HS;
    s->qk_norm = s->llama && plait_model_spec_qk_norm(spec);
    s->Vl = in->vocab_padded > 0 ? in->vocab_padded / in->tp : spec->vocab_size;
    s->sp = in->sp && in->tp > 1;
    s->q = s->sp ? in->tp : 1;
    /* the model's rule (tp, sp and cp keep bf16 blocks, cp where the
     * device has ring attention's bf16 entries); under tp
     * the head stays float32 (model/gpt_bf16.c) */
    const plait_bf16_terms terms = {.requested = in->precision == PLAIT_PRECISION_BF16,
                                    .gpt = s->gpt,
                                    .llama = s->llama,
                                    /* qk_norm widens the bf16 heads (model/model.c) */
                                    .kernels = in->device && (s->llama ? in->device->llama_bf16_path &&
                                                                             (!s->qk_norm || in->device->bf16_tensors)
                                                                       : in->device->bf16_path),
                                    .context_parallel = s->cp > 1,
                                    .ring_bf16 = in->device && in->device->ring_bf16,
                                    .head_size = (int64_t)HS,
                                    .n_embd = spec->n_embd};
    s->bf16 = plait_model_grants_bf16(&terms);
    s->bf16_head = s->bf16 && !in->tensor_parallel && (s->gpt || s->llama);
    /* the model's rule (model/model.c): a bf16 run on kernels that widen bf16 */
    s->res16 = in->residual_bf16 && terms.requested && in->device && in->device->bf16_tensors;
    s->offload = in->offload && in->recompute == 2 && in->device && in->device->own_memory;
    s->moe_kernels = in->device && in->device->moe_bf16;
}

/* Floats of a block's saved tensors (model/recompute.c's parts, in their
 * order): those a slot keeps for each block (kept = 1), or those the model
 * keeps once for every block to recompute into (kept = 0). Selective
 * drops the attention probabilities and the GELU output; full drops them
 * all. Under bf16 activations the parts marked bf16 are stored so
 * (model/model_slots.c, slot_carve). */
static double block_parts_floats(const plait_cost_shape *s, int kept) {
    double BT = s->B * s->T, Rq = BT / seq_cut(s);
    if (s->llama && s->bf16) { /* slot_carve's llama bf16 branch: the norms' outputs on R rows; selective
                                * drops SwiGLU's output, full every part */
        const double swi = bh(BT * s->Fl), sel = s->recompute == 1, full = s->recompute == 2;
        const double rest = bh(Rq * s->C) + al(Rq) + bh(BT * s->Wq) + al(s->B * s->NHl * s->T) + bh(BT * s->Cl) +
                            al(Rq * s->C) + bh(Rq * s->C) + al(Rq) + bh(BT * 2 * s->Fl);
        return kept ? (1 - full) * (rest + (1 - sel) * swi) : full * (rest + swi) + sel * swi;
    }
    if (s->llama) { /* slot_carve's llama branch, float32: selective drops SwiGLU's output */
        const double n[] = {BT * s->C, BT,         BT * s->Wq, BT * s->Cl,           BT * s->C, BT * s->C,
                            BT,        BT * s->Fl, BT * s->Fl, s->B * s->NHl * s->T, BT * s->Fl};
        /* cut along the sequence: the norms' statistics and res2 (their
         * outputs are kept gathered, as the products read them) */
        const int seq[] = {0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0};
        double f = 0;
        for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
            const int dropped = s->recompute == 2 || (s->recompute == 1 && i == sizeof n / sizeof n[0] - 1);
            if (dropped == !kept) f += al(seq[i] ? n[i] / seq_cut(s) : n[i]);
        }
        return f;
    }
    const double att = s->fused ? 0 : s->B * s->NHl * s->T * s->T, lse = s->fused ? s->B * s->NHl * s->T : 0;
    /* seq: cut along the sequence by q (the norms' outputs and statistics
     * and res2: the column-parallel products read the outputs gathered into
     * one buffer the blocks share, counted in the scratch) */
    const struct {
        double n;
        int gpt_only, selective, bf16, seq;
    } parts[] = {{BT * s->C, 1, 0, 1, 1},  {BT, 1, 0, 0, 1},
                 {BT, 1, 0, 0, 1},         {BT * 3 * s->Cl, 1, 0, 1, 0},
                 {att, 1, 1, 0, 0},        {BT * s->Cl, 1, 0, 1, 0},
                 {BT * s->C, 1, 0, 0, 1},  {BT * s->C, 0, 0, 1, 1},
                 {BT, 0, 0, 0, 1},         {BT, 0, 0, 0, 1},
                 {BT * s->Fl, 0, 0, 1, 0}, {BT * s->Fl, 0, 1, 1, 0},
                 {lse, 1, 0, 0, 0}};
    double f = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].gpt_only && !s->gpt) continue;
        int dropped = s->recompute == 2 || (s->recompute == 1 && parts[i].selective);
        if (dropped != !kept || parts[i].n <= 0) continue;
        double n = parts[i].seq ? parts[i].n / seq_cut(s) : parts[i].n;
        f += s->bf16 && parts[i].bf16 ? bh(n) : al(n);
    }
    return f;
}

/* [model] qk_norm's parts (model/recompute_keep.c): q's and k's heads
 * before their norms (k's from an offset rounded up to 32 elements), in
 * the products' type, and their deviations; kept but under full. */
static double qk_norm_floats(const plait_cost_shape *s, int kept) {
    if (!s->qk_norm || (s->recompute == 2) == kept) return 0;
    const double BT = s->B * s->T, r32 = ceil(BT * s->NHl * s->HS / 32) * 32;
    const double heads = r32 + BT * s->NKVl * s->HS, rstd = ceil(BT * s->NHl / 32) * 32 + BT * s->NKVl;
    return (s->bf16 ? bh(heads) : al(heads)) + al(rstd);
}

static double block_floats(const plait_cost_shape *s, int kept) {
    return block_parts_floats(s, kept) + qk_norm_floats(s, kept);
}

/* Floats a block's slot keeps for the weight half of a split backward
 * (model/model_slots.c, stash_carve): the block output's and ln_2's gradients,
 * the rest in buffers the input half leaves dead where recompute is none
 * (c_fc's and c_attn's outputs; the probabilities when they hold two
 * residual-stream tensors). Under bf16 activations (a GPT), all bf16:
 * the block output's, attn.c_proj's and both LayerNorms' output
 * gradients, c_fc's and c_attn's the same way. */
static double stash_floats(const plait_cost_shape *s) {
    double BT = s->B * s->T, BTCq = BT * s->C / seq_cut(s), f = al(BT * s->C) + al(BTCq); /* dy, dln2 */
    const double qkn = s->qk_norm ? al(2 * s->HS) : 0; /* the q and k norms' weight gradients */
    if (s->llama && s->bf16) /* stash_carve's llama bf16 branch: all apart, bf16 */
        return 2 * bh(BT * s->C) + 2 * bh(BTCq) + bh(BT * 2 * s->Fl) + bh(BT * s->Wq) + qkn;
    if (s->llama) /* stash_carve's llama branch: all apart, float32 */
        return 4 * al(BT * s->C) + 2 * al(BT * s->Fl) + al(BT * s->Wq) + qkn;
    int none = s->recompute == 0;
    if (s->bf16) return 4 * bh(BT * s->C) + (none ? 0 : bh(BT * s->Fl) + bh(BT * 3 * s->Cl));
    if (!none) f += al(BT * s->Fl) + (s->gpt ? al(BT * 3 * s->Cl) : 0);
    if (s->gpt && !(none && !s->fused && s->NHl * s->T >= 2 * s->C)) f += al(BT * s->C) + al(BTCq); /* dres2, dln1 */
    return f;
}

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

double plait_cost_message_bytes(const plait_cost_shape *s) { return s->sp && s->bf16 ? 2 : 4; }

double plait_cost_boundary_bytes(const plait_cost_shape *s) { return 4 * al(s->B * s->T * s->C / seq_cut(s)); }

/* The residual stream at boundary l (0..L) sits between layers l and
 * l + 1: a slot holding either keeps it, but the output of a chunk that
 * ends before the head, sent to the next stage, is the boundary pool's, as
 * are the gradients (plait_cost_boundary_bytes). */
static int slot_boundaries(const plait_cost_shape *s, int first, int last) {
    int boundaries = imin(last, s->L) - imax(first - 1, 0) + 1;
    return last <= s->L ? boundaries - 1 : boundaries;
}

double plait_cost_slot_host_bytes(const plait_cost_shape *s, int first, int last) {
    const int boundaries = slot_boundaries(s, first, last);
    const double BTCq = s->B * s->T * s->C / seq_cut(s);
    return s->offload && boundaries > 0 ? boundaries * (s->res16 ? 2 * al(BTCq) : 4 * al(BTCq)) : 0;
}

double plait_cost_slot_bytes(const plait_cost_shape *s, int first, int last) {
    /* the tokens and targets; the residual stream is cut along the
     * sequence under sp */
    double BT = s->B * s->T, BTCq = BT * s->C / seq_cut(s), f = al(BT) * 2;
    /* in host memory under [model] recompute_offload */
    const int boundaries = s->offload ? 0 : slot_boundaries(s, first, last);
    int blocks = imin(last, s->L) - imax(first, 1) + 1;
    /* under a bf16 residual stream each of them is bf16, those the slot
     * writes and reads and the one it receives (model/model_slots.c) */
    if (boundaries > 0) f += boundaries * (s->res16 ? bh(BTCq) : al(BTCq));
    if (blocks > 0) f += blocks * (block_floats(s, 1) + (s->split ? stash_floats(s) : 0));
    /* the head: ln_f's output (gathered) and the logits (under a bf16
     * head, which computes the logits a chunk at a time in the scratch,
     * ln_f's output gradient in bf16 and lm_head's weight gradient), ln_f's
     * mean and rstd (this rank's rows), the rows' log-sum-exp, sum of
     * exponentials and losses; a split backward's ln_f gradient (a float32
     * head: the bf16 head's weight half reads what its forward left) */
    if (first <= s->L + 1 && s->L + 1 <= last)
        f += (s->bf16_head ? bh(BT * s->C) + al(s->Vl * s->C) : al(BT * s->C) + al(BT * s->Vl)) +
             2 * al(BT / seq_cut(s)) + 3 * al(BT) + (s->split && !s->bf16_head ? al(BTCq) : 0);
    return 4 * f;
}

double plait_cost_scratch_bytes(const plait_cost_shape *s) {
    double BT = s->B * s->T;
    /* the products' gradients (model/model_slots.c, plait_model_scratch_get):
     * float32, or bf16 with the residual stream's gradient converted once */
    const double dfc = s->llama ? 2 * s->Fl : s->Fl, dqkv = s->llama ? s->Wq : 3 * s->Cl; /* llama: bf16 only */
    double f = s->bf16 ? bh(BT * s->C) + bh(BT * dfc) + bh(BT * s->Cl) + bh(BT * dqkv) + bh(BT * s->C)
                       : al(BT * s->C) + al(BT * s->Fl) + al(BT * s->Cl) + al(BT * 3 * s->Cl);
    if (s->bf16 && !s->bf16_head) /* tp: the float32 gradient its collectives and head read, the identities */
        f += al(BT * s->C) + al(64 + s->C);
    if (s->sp) { /* the sequence-parallel buffers (model/model_slots.c, plait_model_sp_scratch) */
        f += al(BT * s->C) + al(BT * s->C / seq_cut(s)) + al(2 * s->C);
        /* the gathered norm output the products read (the llama arch's
         * float32 slots keep theirs) */
        if (s->bf16) f += bh(BT * s->C);
        else if (!s->llama) f += al(BT * s->C);
    }
    if (s->bf16) { /* the bf16 head's least chunk of logits, where the gradients leave too little room; under
                    * tp the head's products' chunk of the logits' gradient so, then ln_f's output in bf16 */
        size_t extra = 0;
        plait_model_head_rows((int64_t)BT, (int64_t)s->Vl,
                              (size_t)(bh(BT * dfc) + bh(BT * s->Cl) + bh(BT * dqkv) + bh(BT * s->C)), &extra);
        f += al((double)extra) + (s->bf16_head ? 0 : bh(BT * s->C));
    }
    f += al(3 * BT);
    /* a bf16 residual stream or [model] recompute_offload: the running
     * layer's widened or fetched input and float32 output
     * (model/model_slots.c, residual_get) */
    if (s->res16 || s->offload) f += 2 * al(BT * s->C / seq_cut(s));
    /* the attention's: the device's fused scratch (at least Cl floats: the
     * weight half's saved key-bias gradient), or the probabilities' gradient */
    /* gate_proj's output gradient (bf16: SwiGLU's and a packed
     * projection's); the rotary angles' table */
    if (s->llama && !s->bf16) f += al(BT * s->Fl) + s->T * s->HS;
    if (s->llama && s->bf16) f += bh(BT * s->Fl) + bh(BT * (s->Fl > s->Cl ? s->Fl : s->Cl)) + s->T * s->HS;
    if (s->qk_norm) { /* the heads' norms' buffers (model/model_slots.c, plait_model_qk_norm_scratch) */
        const double K = ceil(BT * s->Cl / 32) * 32;
        f += 2 * K + (s->bf16 ? K / 2 : 0) + al(2 * s->HS);
    }
    if ((s->gpt || s->llama) && s->fused) {
        double n = s->B * s->NHl * s->att_scratch;
        f += al(n > s->Cl ? n : s->Cl);
    } else if (s->gpt) {
        f += al(s->B * s->NHl * s->T * s->T);
    }
    return 4 * (f + block_floats(s, 0));
}

void plait_cost_block_flops_per_token(const plait_cost_shape *s, double f, double *train, double *again,
                                      double attention[2]) {
    /* a token attends over the whole sequence, T x cp, under cp too */
    double T = s->T * s->cp, att = 4.0 * T * s->C;
    if (attention) attention[0] = attention[1] = 0;
    if (!(s->gpt || s->llama) || !s->fused) {
        *train = 3.0 * f;
        *again = s->recompute == 2 ? f : s->recompute == 1 && s->gpt ? att : 0;
        return;
    }
    double products = f - att, half = T * s->C; /* one product over the causal half of the square */
    *train = 3.0 * products + 2.0 * half + s->att_bwd * half;
    *again = s->recompute == 2 ? products + 2.0 * half : 0;
    if (attention) {
        attention[1] = s->recompute == 2 ? 2.0 * half : 0;
        attention[0] = (2.0 + s->att_bwd) * half + attention[1];
    }
}

double plait_cost_tp_block_collectives(const plait_cost_shape *s) {
    /* under sequence parallelism a block norm's output kept on this rank's
     * rows is gathered again for its product's weight gradient: both
     * norms' in gpt blocks and bf16 llama blocks, ln_2's in the mlp arch's
     * (the float32 llama blocks keep theirs gathered) */
    const double again = !s->sp ? 0.0 : s->gpt || (s->llama && s->bf16) ? 1.0 : s->llama ? 0.0 : 0.5;
    return 4.0 + again + (s->recompute == 2 ? (s->sp ? 1.5 : 1.0) : 0.0);
}

/* Of the tp collectives, per micro-batch of `blocks` blocks (`sparse` of
 * them with experts) and the head where `head`, the all-reduces' worth a
 * one-pass backward starts before the weight gradients of the
 * column-parallel products whose input gradients they sum (2 all-reduces,
 * or under sequence parallelism 2 reduce-scatters, half an all-reduce each;
 * the mlp arch's one; lm_head's one; none under a split backward) and,
 * under sequence parallelism, before the products ahead of the weight
 * gradients that read the norms' outputs gathered again (`gathers` of
 * *msgs: half an all-reduce a gather, as plait_cost_tp_block_collectives
 * counts them), and the FLOPs of what runs while they travel
 * ([parallel.tp] overlap, model/tp_conjugates.c). */
static void tp_overlap(const plait_cost_shape *s, double blocks, double sparse, int head, double *msgs, double *gathers,
                       double *flops) {
    *msgs = *gathers = *flops = 0;
    if (s->split) return;                /* a split backward's weight half runs later anyway */
    const int attn = s->gpt || s->llama; /* else the mlp arch: its MLP half alone */
    const double half = s->sp ? 0.5 : 1.0, att_cols = s->llama ? s->Wq : attn ? 3.0 * s->Cl : 0.0;
    const double mlp_cols = s->llama ? 2.0 * s->Fl : s->Fl, rows = 2.0 * s->B * s->T * s->C;
    /* c_attn's (q|k|v's) weight gradient in every block, c_fc's (gate|up's)
     * in the dense ones (a sparse block's experts sum theirs blocking) */
    /* lm_head's, behind its weight gradient, vocabulary-parallel */
    *msgs = half * ((attn ? blocks : 0.0) + (blocks - sparse) + (head ? 1.0 : 0.0));
    *flops = rows * (att_cols * blocks + mlp_cols * (blocks - sparse) + (head ? s->Vl : 0.0));
    /* under sequence parallelism the norms' outputs gathered again (half an
     * all-reduce each, plait_cost_tp_block_collectives) beside what the
     * backward makes before the weight gradients that read them: the
     * attention half's c_proj (o_proj) gradients and the attention's
     * backward (counted at the products' rate: the windows are longer
     * than that), the llama blocks' q|k|v input gradient too; the MLP
     * half's c_proj (down_proj) gradients, the llama blocks' gate|up input
     * gradient too (a sparse block's router gathers its input blocking) */
    if (!s->sp || (s->llama && !s->bf16)) return; /* float32 llama blocks keep theirs gathered */
    const double T = s->T * (s->cp > 1 ? s->cp : 1), tokens = s->B * s->T;
    const double att_bwd = s->fused ? s->att_bwd * tokens * T * s->Cl : 8.0 * tokens * T * s->Cl;
    *gathers = 0.5 * ((attn ? blocks : 0.0) + (blocks - sparse));
    *msgs += *gathers;
    *flops += (attn ? blocks : 0.0) * (rows * (2.0 * s->Cl + (s->llama ? s->Wq : 0.0)) + att_bwd) +
              (blocks - sparse) * rows * (2.0 * s->Fl + (s->llama ? 2.0 * s->Fl : 0.0));
}

void plait_cost_tp_traffic(const plait_cost_shape *s, double blocks, double sparse, int embedding, int head,
                           double micro_batches, plait_cost_rank *r) {
    r->tp_msgs = micro_batches * (plait_cost_tp_block_collectives(s) * blocks + embedding + head);
    r->tp_msg_elems = s->B * s->T * s->C;
    double msgs, gathers, flops;
    tp_overlap(s, blocks, sparse, head, &msgs, &gathers, &flops);
    r->tp_hide_msgs = micro_batches * msgs;
    r->tp_hide_gathers = micro_batches * gathers;
    r->tp_hide_flops = micro_batches * flops;
}

void plait_cost_add_layer_flops(const plait_cost_shape *s, double f, int block, double tokens, int tp,
                                plait_cost_rank *r) {
    double train = 3.0 * f, again = 0, att[2] = {0, 0};
    if (block) plait_cost_block_flops_per_token(s, f, &train, &again, att);
    r->flops += (train + again) * tokens / tp;
    r->recompute_flops += again * tokens / tp;
    r->attention_flops += att[0] * tokens / tp;
    r->recompute_attention_flops += att[1] * tokens / tp;
}

double plait_cost_ep_bytes(double tokens, int64_t k, int64_t C, int64_t E, int ep, double sparse_blocks,
                           double micro_batches) {
    if (ep <= 1) return 0.0;
    const double rows = 4.0 * tokens * (double)k * (double)(ep - 1) / ep, counts = (double)(E / ep) * (ep - 1);
    return sparse_blocks * micro_batches * (rows * (double)C * sizeof(float) + counts * sizeof(int32_t));
}

int plait_cost_experts_bf16(const plait_cost_moe *moe, const plait_cost_shape *s, int tp) {
    const int64_t F = moe && tp > 0 ? moe->F / tp : 0;
    return moe && moe->E > 0 && s->bf16 && s->moe_kernels && (int64_t)s->C % 8 == 0 && F % 8 == 0;
}

/* Floats that n elements of the experts' rows take: half where bf16
 * (every such n a multiple of 8: model/moe.c's TAKE_ROWS). */
static double rows_floats(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, double n) {
    return plait_cost_experts_bf16(moe, s, tp) ? n / 2 : n;
}

void plait_cost_moe_of(const plait_config *cfg, int64_t ffn_hidden, plait_cost_moe *out) {
    out->E = plait_config_int(cfg, "model", "moe_experts");
    out->k = out->E > 0 ? plait_config_int(cfg, "model", "moe_top_k") : 0;
    out->F = out->E > 0 ? plait_config_int(cfg, "model", "moe_ffn_hidden") : 0;
    if (out->E > 0 && out->F <= 0) out->F = ffn_hidden;
    out->S = out->E > 0 ? plait_config_int(cfg, "model", "moe_shared_experts") : 0;
    out->llama = strcmp(plait_config_str(cfg, "model", "arch"), "llama") == 0;
}

/* Floats of a block's bf16 stash (stash_carve's bf16 branches) a sparse
 * block does not carve: the MLP half's dy, dln2 and dfc (gpt: dfc lent by
 * c_fc's output at recompute none), less the float32 norm output
 * gradient [R,C] it carves instead (model/moe_bf16.c). */
static double bf16_stash_unkept(const plait_cost_shape *s) {
    const double BT = s->B * s->T, Rq = BT / seq_cut(s);
    const double mlp = s->llama ? bh(BT * s->C) + bh(Rq * s->C) + bh(BT * 2 * s->Fl)
                                : 2 * bh(BT * s->C) + (s->recompute == 0 ? 0 : bh(BT * s->Fl));
    return mlp - al(Rq * s->C);
}

double plait_cost_sparse_unkept_bytes(const plait_cost_shape *s) {
    const double BT = s->B * s->T, Rq = BT / seq_cut(s), sel = s->recompute == 1;
    if (s->recompute == 2) /* full: the parts are the shared buffers, the stash as below */
        return !s->split ? 0
               : s->bf16 ? 4 * bf16_stash_unkept(s)
                         : 4 * (al(BT * s->C) + (s->llama ? 2 : 1) * al(BT * s->Fl));
    /* llama: gate's, up's and SwiGLU's outputs (bf16: gate|up as one, and
     * the norm's bf16 output); gpt: c_fc's and GELU's outputs (bf16: and
     * ln_2's bf16 output); selective shares SwiGLU's and GELU's */
    const double ln = s->bf16 ? bh(Rq * s->C) : 0, F = s->bf16 ? bh(BT * s->Fl) : al(BT * s->Fl);
    const double gate_up = s->llama ? (s->bf16 ? bh(BT * 2 * s->Fl) : 2 * F) : F;
    /* stash_carve's float32 dy and dfch (llama: and dgate; gpt: dfch lent
     * by c_fc's output at recompute none); bf16: bf16_stash_unkept */
    const double stash = !s->split  ? 0
                         : s->bf16  ? bf16_stash_unkept(s)
                         : s->llama ? al(BT * s->C) + 2 * al(BT * s->Fl)
                                    : al(BT * s->C) + (s->recompute == 0 ? 0 : al(BT * s->Fl));
    return 4 * (ln + gate_up + (sel ? 0 : F) + stash);
}

double plait_cost_moe_acts_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || moe->E <= 0) return 0;
    const double N = s->B * s->T, E = (double)moe->E, Nk = N * (double)moe->k, C = s->C;
    const double F = (double)moe->F / tp, SF = (double)(moe->S * moe->F) / tp;
    const double acts = s->recompute == 1 ? 2 : 3; /* selective shares the activation's output */
    const int bf = plait_cost_experts_bf16(moe, s, tp);
    /* the rows (bf16 where the experts run bf16, the llama arch's gate|up
     * one tensor of both widths; at ep > 1 the outputs alone: the inputs
     * the dispatch sends are a buffer the blocks share, the hidden tensors
     * the holders', plait_cost_held_bytes) and, bf16, the shared experts' input */
    double rows = ep > 1 ? Nk * C : 2 * Nk * C + acts * Nk * F;
    if (SF > 0) rows += acts * N * SF + N * C + (bf ? N * C : 0);
    const double f = 2 * N * E + N + E + 4 * Nk + E + 1 + rows_floats(moe, s, tp, rows);
    return sizeof(float) * ceil(f / 64) * 64; /* each block's part 256-byte aligned */
}

/* n floats rounded up to 64 (256 bytes), as moe.c's kept_carve lays each part out */
static double r64(double n) { return ceil(n / 64) * 64; }

double plait_cost_moe_split_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || moe->E <= 0 || !s->split) return 0;
    const double N = s->B * s->T, Nk = N * (double)moe->k, C = s->C;
    const double F = (double)moe->F / tp, SF = (double)(moe->S * moe->F) / tp, two = moe->llama ? 2 : 1;
    if (plait_cost_experts_bf16(moe, s, tp)) { /* bf16: the rows' dy, the first product's one tensor */
        const double rows = ep > 1 ? 0 : r64(Nk * C / 2) + r64(two * Nk * F / 2);
        return 4 * (r64(N * C) + r64(N * (double)moe->E) + rows + (SF > 0 ? r64(two * N * SF / 2) : 0));
    }
    const double rows = ep > 1 ? 0 : r64(Nk * C) + two * r64(Nk * F); /* at ep > 1 the holders' */
    return 4 * (r64(N * C) + r64(N * (double)moe->E) + rows + (SF > 0 ? two * r64(N * SF) : 0));
}

double plait_cost_moe_shared_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || moe->E <= 0 || s->recompute == 0) return 0;
    if (s->recompute == 2)
        return plait_cost_moe_acts_bytes(moe, s, tp, ep) + plait_cost_held_shared_bytes(moe, s, tp, ep);
    const double Nk = ep > 1 ? 0 : s->B * s->T * (double)moe->k; /* at ep > 1 the holders' (below) */
    const double f = rows_floats(moe, s, tp, Nk * (double)moe->F / tp + s->B * s->T * (double)(moe->S * moe->F) / tp);
    return sizeof(float) * ceil(f / 64) * 64 + plait_cost_held_shared_bytes(moe, s, tp, ep);
}

double plait_cost_moe_scratch_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || moe->E <= 0) return 0;
    const double N = s->B * s->T, Nk = N * (double)moe->k;
    const double F = (double)moe->F / tp, SF = (double)(moe->S * moe->F) / tp;
    const double wide = Nk * F > N * SF ? Nk * F : N * SF;
    /* the gates' gradients (N·k doubles), first; at ep > 1 each source's
     * gradients of the rank's E/ep experts, ep of them: E experts' worth
     * (moe.c's ep_grad_floats), and the held rows' output and input
     * gradients, N·k rows of C each (moe_ep.c's moe_held_grads, balanced as
     * plait_cost_held_bytes); under bf16 activations the sparse halves'
     * float32 norm output and its gradient, shared likewise
     * (model/moe_bf16.c; the plan is of training: a forward-only model,
     * evaluating or sampling, allocates the output's half alone) */
    const double expert = moe->llama ? 3.0 * F * s->C : 2.0 * F * s->C + F + s->C;
    const double grads = ep > 1 ? (double)moe->E * expert + rows_floats(moe, s, tp, 2 * Nk * s->C) : 0;
    const double norm = s->bf16 ? 2 * N * s->C : 0;
    /* where the experts run bf16, the llama arch's gate and up input
     * gradients in bf16 before their float32 sum (model/moe.c's gu_dx) */
    const double gu = plait_cost_experts_bf16(moe, s, tp) && moe->llama ? Nk * s->C : 0;
    /* at ep > 1 the rows the dispatch sends and those the held experts
     * send back in the combine, N·k rows each (balanced), one buffer of
     * each the blocks share (model/moe_ep.c's moe_send_x, moe_held_y) */
    const double trades = ep > 1 ? rows_floats(moe, s, tp, Nk * s->C) + rows_floats(moe, s, tp, Nk * s->C) : 0;
    return sizeof(float) * (2 * Nk + 3 * wide + 3 * Nk * s->C + N * (double)moe->E + grads + norm + gu + trades);
}

double plait_cost_held_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || ep <= 1 || moe->E <= 0) return 0;
    double rows = s->B * s->T * (double)moe->k;
    const double acts = s->recompute == 1 ? 2 : 3; /* selective shares the activation's output */
    const double F = (double)moe->F / tp;          /* an expert's width, at tp × ep its slice */
    /* the device rows (their gradients in the backward's scratch,
     * plait_cost_moe_scratch_bytes), then the host head: moe_ep.c's moe_held
     * (72 bytes) and the E int32 row counts behind it */
    /* under a split backward each row's output gradients beside it
     * (moe_ep.c's held_kept: C, and F a first product, the llama arch's
     * two; bf16 where the experts run bf16, as the rows) */
    const double kept = s->split ? s->C + (moe->llama ? 2.0 : 1.0) * F : 0;
    const double dev = rows_floats(moe, s, tp, rows * (s->C + acts * F + kept)); /* the outputs: shared */
    return sizeof(float) * dev + 72 + sizeof(int32_t) * (double)moe->E;
}

double plait_cost_held_shared_bytes(const plait_cost_moe *moe, const plait_cost_shape *s, int tp, int ep) {
    if (!moe || ep <= 1 || moe->E <= 0 || s->recompute == 0) return 0;
    if (s->recompute == 2) return plait_cost_held_bytes(moe, s, tp, ep);
    return sizeof(float) * rows_floats(moe, s, tp, s->B * s->T * (double)moe->k * (double)moe->F / tp);
}

void plait_cost_ep_traffic(const plait_cost_moe *moe, const plait_cost_shape *s, int ep, double sparse, double m,
                           plait_cost_rank *r) {
    /* recompute = full reruns each sparse block's dispatch and combine
     * before its backward: 6 trades of the rows instead of 4 */
    const double again = s->recompute == 2 ? 1.5 : 1.0;
    r->ep = ep;
    r->ep_msgs = ep > 1 && moe->E > 0 ? 4.0 * again * sparse * m : 0;
    /* the rows travel bf16 where the experts run bf16: half the bytes
     * (the counts int32 still) */
    const double rows = plait_cost_ep_bytes(s->B * s->T, moe->k, (int64_t)s->C, moe->E, ep, sparse, m),
                 counts = plait_cost_ep_bytes(0, moe->k, (int64_t)s->C, moe->E, ep, sparse, m);
    const double bytes = plait_cost_experts_bf16(moe, s, 1) ? counts + (rows - counts) / 2 : rows;
    r->ep_bytes = moe->E > 0 ? again * bytes : 0;
}

void plait_cost_ring_traffic(const plait_cost_shape *s, double blocks, double micro_batches, plait_cost_rank *r) {
    r->cp = (int)s->cp;
    r->cp_passes = r->cp_msg_elems = r->cp_hide_flops = r->cp_tail_msgs = 0;
    if (s->cp <= 1 || blocks <= 0) return;
    double kv = s->Wq - s->Cl; /* k and v of this rank's kv heads */
    if (!s->llama || kv <= 0) kv = 2 * s->Cl;
    r->cp_passes = (s->cp - 1) * blocks * micro_batches;
    r->cp_msg_elems = s->B * s->T * kv;
    /* QKᵀ and att·V of one query block against one key block over the
     * keys its queries see: a block holds 2 of the 2cp chunks, so of the
     * 4 chunk pairs of two blocks 2 are seen on average (the ring's
     * kernels skip the rest, core/kernels/kernels_ring.c) */
    r->cp_hide_flops = 2.0 * s->B * s->T * s->T * s->Cl;
    r->cp_tail_msgs = blocks * micro_batches;
}
