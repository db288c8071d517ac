/*
 * lm_head's products under tensor parallelism on a bf16 run. The
 * vocabulary-parallel head (gpt_layers.c, llama_layers.c) keeps ln_f's
 * output and this rank's slice of the logits in float32, as its loss
 * combines them across the tp group in float32 (the rows' max, sum of
 * exponentials and target logit: Megatron-LM's vocabulary-parallel cross
 * entropy, which also reads float32 logits); its products read bf16, as
 * every product of a bf16 run does:
 *   forward   the logits = ln_f's output rounded to bf16 (head_lnf) times
 *             lm_head's bf16 copy, accumulated and written in float32;
 *   backward  the logits' gradient rounded to bf16 a chunk of head_rows
 *             rows at a time into the scratch (head_logits: a whole copy
 *             would add half the logits' size again), ln_f's output
 *             gradient written in bf16 as this rank's partial sums,
 *             widened to float32 exactly and summed over the group as a
 *             column-parallel product's input gradient is (gpt_bf16.c),
 *             lm_head's weight gradient added chunk by chunk in float32.
 * Why not the fused chunks of the head without tp (gpt_bf16.c, "the
 * head"), which keep no logits: they keep, per live slot, a float32
 * weight gradient of the head's shard (Vl x C) in their place, which at
 * the widths tp serves outweighs the logits (GPT-3 175B at tp 8: 315 MB
 * against 52 MB for a micro-batch of 2,048 tokens), and their loss would
 * take the group's three collectives once a chunk.
 * head_lnf and head_logits lie in the backward scratch
 * (plait_model_scratch_get), which the head's forward and its backward's
 * start find idle; the chunks cover sb.dres, so the bf16 copy of a
 * residual gradient is forgotten (dres_of).
 */
#include "model/model_bodies.h"

plait_status plait_tp_head_logits_bf16(plait_model *m, model_slot *s) {
    const int64_t BT = m->B * m->T, C = m->C;
    plait_status st = plait_model_scratch_get(m);
    if (st != PLAIT_OK) return st;
    m->k->to_bf16(m->head_lnf, s->lnf, (size_t)(BT * C));
    m->k->matmul_forward_residual_bf16(s->logits, NULL, m->head_lnf, plait_model_head_bf16(m), NULL, BT, C, m->Vl);
    return PLAIT_OK;
}

/* Over every chunk of rows: the logits' gradient in bf16, then the
 * products' backward from it (dinp NULL: the weight gradient alone; dw
 * NULL: the input gradient alone). */
static void head_chunks(plait_model *m, model_slot *s, plait_bf16 *dinp, float *dw) {
    const int64_t BT = m->B * m->T, C = m->C, Vl = m->Vl;
    const plait_bf16 *w = plait_model_head_bf16(m);
    for (int64_t r = 0; r < BT; r += m->head_rows) {
        const int64_t n = BT - r < m->head_rows ? BT - r : m->head_rows;
        m->k->to_bf16(m->head_logits, s->logits + r * Vl, (size_t)(n * Vl));
        m->k->matmul_backward_bf16(dinp ? dinp + r * C : NULL, dw, NULL, m->head_logits, m->head_lnf + r * C,
                                   dinp ? w : NULL, n, C, Vl);
    }
}

plait_status plait_tp_head_backward_bf16(plait_model *m, model_slot *s, float *dw, int input) {
    const int64_t BT = m->B * m->T, C = m->C;
    const int32_t layer = m->desc->n_layer + 1;
    plait_status st = plait_model_scratch_get(m);
    if (st != PLAIT_OK) return st;
    m->dres_of = NULL; /* the chunks cover sb.dres */
    m->k->to_bf16(m->head_lnf, s->lnf, (size_t)(BT * C));
    if (!input) {
        head_chunks(m, s, NULL, dw);
        return PLAIT_OK;
    }
    const int overlap = dw && m->tp_overlap;
    head_chunks(m, s, m->sb.dln, overlap ? NULL : dw);
    plait_tp_widen(m, m->s_dln, m->sb.dln, BT * C);
    if (!overlap) return plait_tp_grad_sum(m, m->s_dln, "before lm_head", layer);
    tp_pending pend; /* the sum travels while the weight gradient is made */
    if ((st = plait_tp_grad_sum_start(m, m->s_dln, "before lm_head", layer, &pend)) != PLAIT_OK) return st;
    head_chunks(m, s, NULL, dw);
    return plait_tp_grad_sum_end(m, &pend);
}
