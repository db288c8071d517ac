/*
 * GPT-2 tensor names and weight orientations outside plait, in one place:
 *
 *   plait / nanoGPT   "transformer.h.<i>.attn.c_attn.weight" [3C, C]: the
 *                     nn.Linear orientation [out, in]; "lm_head.weight" is the
 *                     token table (tied), stored or not. A sparse block
 *                     of a mixture of experts (plait's own: GPT-2 has
 *                     none) holds "mlp.router.*", "mlp.experts.*" and
 *                     "mlp.shared_experts.*" where a dense one has its MLP.
 *   Hugging Face      GPT2LMHeadModel: the same names, but the four
 *                     projections (attn.c_attn, attn.c_proj, mlp.c_fc,
 *                     mlp.c_proj) are Conv1D modules whose weight is stored
 *                     [in, out], the transpose; "lm_head.weight" is tied to
 *                     "transformer.wte.weight" and usually omitted; each
 *                     block carries non-parameter buffers "attn.bias" (the
 *                     causal mask) and "attn.masked_bias"; files saved from
 *                     GPT2Model (the hub's gpt2 itself) drop the
 *                     "transformer." prefix.
 *   torch.compile     prefixes every name with "_orig_mod." (nanoGPT
 *                     checkpoints of compiled models).
 *
 * plait's own names are the canonical ones (model_desc.c). Pure functions,
 * thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_GPT2_NAMES_H
#define PLAIT_CORE_CHECKPOINT_GPT2_NAMES_H

#include <stddef.h>

/* How a file stores the projection weights. */
typedef enum plait_gpt2_orientation {
    PLAIT_GPT2_LINEAR = 0, /* plait, nanoGPT: [out, in] */
    PLAIT_GPT2_CONV1D = 1  /* Hugging Face GPT2LMHeadModel: [in, out] */
} plait_gpt2_orientation;

/* What a tensor name in a foreign file is. */
typedef enum plait_gpt2_kind {
    PLAIT_GPT2_PARAM = 0,   /* a model parameter: canonical name written */
    PLAIT_GPT2_HEAD = 1,    /* lm_head.weight: the tied copy of the token table */
    PLAIT_GPT2_BUFFER = 2,  /* attn.bias / attn.masked_bias: not a parameter, ignored */
    PLAIT_GPT2_UNKNOWN = 3  /* anything else (canonical name still written) */
} plait_gpt2_kind;

/* The canonical name of `name` into out[cap] (prefixes "_orig_mod."
 * removed, "transformer." added where GPT2Model dropped it) and its kind.
 * A name longer than cap is UNKNOWN. */
plait_gpt2_kind plait_gpt2_canonical(const char *name, char *out, size_t cap);

/* 1 if the canonical parameter `name` is a Conv1D weight in the Hugging
 * Face orientation (stored transposed relative to plait's). */
int plait_gpt2_conv1d_weight(const char *name);

/* Name of the orientation, for messages ("Hugging Face GPT-2 (Conv1D)", ...). */
const char *plait_gpt2_orientation_name(plait_gpt2_orientation orientation);

#endif
