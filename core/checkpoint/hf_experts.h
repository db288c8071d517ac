/*
 * Hugging Face's mixture-of-experts tensor names beside plait's, in one
 * place (a sparse block of plait's llama arch, model_desc.c), for the two
 * families plait reads and writes:
 *
 *   plait, model.layers.L.mlp.       MixtralForCausalLM,                Qwen3MoeForCausalLM,
 *                                    model.layers.L.block_sparse_moe.   model.layers.L.mlp.
 *   router.weight [E, C]             gate.weight [E, C]                 gate.weight [E, C]
 *   router.expert_bias [E]           none: the routers have no bias (read as 0)
 *   experts.gate_proj.weight [E,F,C] experts.N.w1.weight [F, C]         experts.N.gate_proj.weight [F, C]
 *   experts.up_proj.weight [E,F,C]   experts.N.w3.weight [F, C]         experts.N.up_proj.weight [F, C]
 *   experts.down_proj.weight [E,C,F] experts.N.w2.weight [C, F]         experts.N.down_proj.weight [C, F]
 *
 * (N = 0 .. E-1.) plait stacks an expert's tensors with the expert axis
 * first; both keep one tensor per expert, expert N being plait's slice N.
 * Every other tensor (embedding, attention, norms, head, a dense block's
 * MLP) has the Llama names plait's llama arch uses already. transformers
 * 5 fuses gate and up in memory (gate_up_proj) but reads and writes these
 * names.
 *
 * Pure functions over their arguments, thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_HF_EXPERTS_H
#define PLAIT_CORE_CHECKPOINT_HF_EXPERTS_H

#include <stddef.h>

/* Whose names. */
typedef enum plait_hf_experts {
    PLAIT_HF_EXPERTS_NONE = 0,
    PLAIT_HF_EXPERTS_MIXTRAL,  /* MixtralForCausalLM's */
    PLAIT_HF_EXPERTS_QWEN3_MOE /* Qwen3MoeForCausalLM's */
} plait_hf_experts;

typedef enum plait_expert_name {
    PLAIT_EXPERT_NAME_NONE = 0, /* a name both share */
    PLAIT_EXPERT_NAME_ROUTER,   /* the router's weight */
    PLAIT_EXPERT_NAME_EXPERT,   /* one expert's slice of a stacked tensor */
    PLAIT_EXPERT_NAME_BIAS      /* plait's expert_bias: neither family has one */
} plait_expert_name;

/* Hugging Face's name `hf` as plait's: ROUTER or EXPERT with plait's name
 * in buf[cap] (for EXPERT the stacked tensor's, *expert set to N) and the
 * family whose name it is in *family; NONE when `hf` is no expert or
 * router name of either (buf, *expert and *family untouched). */
plait_expert_name plait_hf_experts_from_hf(const char *hf, char *buf, size_t cap, long long *expert,
                                           plait_hf_experts *family);

/* plait's name `name` as `family`'s: ROUTER with the router's name in
 * buf[cap], EXPERT with expert `expert`'s name in buf[cap], BIAS for the
 * expert_bias (buf untouched), NONE for a name both share. buf may be NULL
 * (cap 0): the kind alone. */
plait_expert_name plait_hf_experts_to_hf(plait_hf_experts family, const char *name, long long expert, char *buf,
                                         size_t cap);

#endif
