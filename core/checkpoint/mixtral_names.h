/*
 * Hugging Face Mixtral's mixture-of-experts tensor names beside plait's,
 * in one place (a sparse block of plait's llama arch, model_desc.c):
 *
 *   plait, model.layers.L.mlp.       MixtralForCausalLM, model.layers.L.block_sparse_moe.
 *   router.weight [E, C]             gate.weight [E, C]
 *   router.expert_bias [E]           none: Mixtral's router has no bias (read as 0)
 *   experts.gate_proj.weight [E,F,C] experts.N.w1.weight [F, C], N = 0 .. E-1
 *   experts.up_proj.weight [E,F,C]   experts.N.w3.weight [F, C]
 *   experts.down_proj.weight [E,C,F] experts.N.w2.weight [C, F]
 *
 * plait stacks an expert's tensors with the expert axis first; Mixtral
 * keeps one tensor per expert, expert N being plait's slice N. Every other
 * tensor (embedding, attention, norms, head) has the Llama names plait's
 * llama arch uses already. transformers 5 fuses w1 and w3 in memory
 * (gate_up_proj) but reads and writes these names.
 *
 * Pure functions over their arguments, thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_MIXTRAL_NAMES_H
#define PLAIT_CORE_CHECKPOINT_MIXTRAL_NAMES_H

#include <stddef.h>

typedef enum plait_mixtral_kind {
    PLAIT_MIXTRAL_NONE = 0, /* a name both share */
    PLAIT_MIXTRAL_ROUTER,   /* the router's weight */
    PLAIT_MIXTRAL_EXPERT,   /* one expert's slice of a stacked tensor */
    PLAIT_MIXTRAL_BIAS      /* plait's expert_bias: Mixtral has none */
} plait_mixtral_kind;

/* Mixtral's name `hf` as plait's: ROUTER or EXPERT with plait's name in
 * buf[cap] (for EXPERT the stacked tensor's, *expert set to N); NONE when
 * `hf` is no Mixtral expert or router name (buf untouched). */
plait_mixtral_kind plait_mixtral_from_hf(const char *hf, char *buf, size_t cap, long long *expert);

/* plait's name `name` as Mixtral's: ROUTER with the gate's name in
 * buf[cap], EXPERT with expert `expert`'s name in buf[cap], BIAS for the
 * expert_bias (buf untouched), NONE for a name both share. */
plait_mixtral_kind plait_mixtral_to_hf(const char *name, long long expert, char *buf, size_t cap);

#endif
