/*
 * Activation memory of the GPT model as it keeps it (model/model_slots.c,
 * model/recompute.c's recompute modes), in elements, from the layer range a
 * model chunk holds. Both the cost of a rank from its plugin's plan
 * (rank_cost.h) and the cost of a stage from the model's shape alone
 * (stages.h) use it. Pure arithmetic; thread-safe.
 *
 * Per block and micro-batch this is Korthikanti et al.'s count ("Reducing
 * Activation Recomputation in Large Transformer Models", 2022) for a model
 * without dropout: 16·s·b·h elements plus a·s²·b for the attention
 * probabilities (their 34·s·b·h + 5·a·s²·b bytes at 2 bytes an element,
 * less the dropout masks and outputs); selective recomputation drops the
 * probabilities (and, as plait does, the GELU output), full keeps the
 * block's input alone. A fused attention (the model uses the device's
 * when its kernel table has one) keeps a·s·b log-sum-exps instead of the
 * probabilities, and its backward recomputes the scores in every mode. With tensor parallelism the head-split and
 * column-split tensors shrink by t, the LayerNorm inputs do not.
 */
#ifndef PLAIT_CORE_COST_ACTIVATIONS_H
#define PLAIT_CORE_COST_ACTIVATIONS_H

#include <plait/model.h>

/* The shapes one rank's activations have. */
typedef struct plait_cost_shape {
    double B, T, C;   /* micro-batch, sequence, width */
    double Cl, NHl;   /* this rank's attention width and heads (C/tp, n_head/tp) */
    double Fl, Vl;    /* its MLP width (4C/tp) and vocabulary slice */
    int L, gpt;       /* blocks; the GPT model (else the MLP test model) */
    int recompute;    /* 0 none, 1 selective, 2 full */
    int split;        /* the schedule splits backwards into input and weight halves (zb1) */
    int fused;        /* fused attention: each row's log-sum-exp, no probabilities (GPT, head size <=
                         PLAIT_ATTENTION_FUSED_MAX_HS: plait's devices all have it) */
    double HS;        /* head size */
} plait_cost_shape;

/* Shapes of a rank of `tp` with micro-batch B, the vocabulary padded to
 * `vocab_padded` (0 = unpadded). */
void plait_cost_shape_init(plait_cost_shape *s, const plait_model_spec *spec, double B, int tp, double vocab_padded,
                           int recompute, int split);

/* Elements one activation slot holds for layers [first, last] of the
 * model (0 = embedding, 1..L blocks, L+1 head): token and target ids, two
 * gradient buffers, the residual stream at every boundary the slot touches,
 * each block's saved tensors and, with the head, its logits. */
double plait_cost_slot_elems(const plait_cost_shape *s, int first, int last);

/* The backward scratch all slots share, and under recompute the one
 * block's worth of dropped tensors it recomputes into. */
double plait_cost_scratch_elems(const plait_cost_shape *s);

/* Forward FLOPs per token a recompute mode runs again for one block: full,
 * the whole block; selective, the attention scores and their product with
 * the values (4·T·C; the GELU's elementwise work is not counted). A fused
 * attention's backward recomputes the scores (2·T·C) in every mode, and
 * selective recomputes nothing else of attention. */
double plait_cost_recompute_flops_per_token(const plait_cost_shape *s, double block_flops_per_token);

#endif
