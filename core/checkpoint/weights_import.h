/*
 * Pretrained weights from outside a plait run ([run] init_from): a
 * safetensors file in the Hugging Face GPT-2 layout (GPT2LMHeadModel or
 * GPT2Model names) or the plait/nanoGPT format (a plait checkpoint's
 * model.safetensors, nanoGPT's state dict saved as safetensors), read as
 * full tensors and cut into any rank's slices (TP shards, pipeline stages,
 * ZeRO partitions), like a checkpoint but weights only.
 *
 * Opening checks the whole file against the model description before
 * anything is read: the layout is detected from the first dense block's
 * mlp.c_fc.weight ([C, 4C] Conv1D or [4C, C] Linear; none, but stacked
 * experts: plait's own mixture of experts, Linear); every parameter must
 * be present with the shape the config gives (in the file's layout), and
 * every tensor in the file must be a parameter of this model or one of
 * GPT-2's mask buffers (attn.bias, attn.masked_bias, ignored); a stored
 * lm_head.weight must equal the token table (plait ties them); a plait
 * checkpoint's recorded n_head (metadata) must be the config's. Two
 * relaxations, as nanoGPT and llm.c make them: a token table with fewer
 * rows than [model] vocab_size (GPT-2's 50257 in a vocabulary padded to
 * 50304) gets zero rows after its own, and a position table with more rows
 * than block_size is cut to its first block_size rows. Every refusal names
 * the file and the tensor, with both shapes for a mismatch
 * (PLAIT_ERR_INVALID_CONFIG), or the file's problem (PLAIT_ERR_PROTOCOL,
 * from the safetensors reader: only F32 tensors are read).
 *
 * A llama model ([model] arch = llama) is read by its own names, which are
 * Hugging Face's LlamaForCausalLM names (llama_hf.h): from a file, a
 * directory holding model.safetensors or a sharded save_pretrained
 * (model.safetensors.index.json and the files its weight_map names), a
 * plait checkpoint, export or run directory. Its config.json, where the
 * directory (or the file's directory) holds one, must describe the run's
 * model (plait_llama_check_hf_config); a plait checkpoint's recorded llama
 * keys must be the run's; every parameter must be present with exactly its
 * shape, and a stored lm_head.weight of a tied model equal the embedding.
 * A llama mixture of experts also reads Hugging Face's Mixtral and
 * Qwen3-MoE names (hf_experts.h): each stacked expert tensor from its
 * experts' tensors, which may lie in different shards, the missing router
 * bias as zeros, its config.json as MixtralConfig's or Qwen3MoeConfig's.
 * A plait model of the other arch is refused by name, as is one whose
 * recorded moe_* keys that shape the experts differ from the run's.
 *
 * The model description must outlive the handle. Reads are thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_WEIGHTS_IMPORT_H
#define PLAIT_CORE_CHECKPOINT_WEIGHTS_IMPORT_H

#include <stddef.h>
#include <plait/model.h>

#include "checkpoint/gpt2_names.h"
#include "config/config.h"

typedef struct plait_weights plait_weights;

/* Open `path` (a .safetensors file, or a directory holding
 * model.safetensors) and check it against `spec` (a gpt or llama
 * description; `cfg`, the run's config, gives a llama's norm_eps and
 * rope_theta: required for llama, unused for gpt, may be NULL there). The
 * caller closes *out. */
plait_status plait_weights_open(const char *path, const plait_model_spec *spec, const plait_config *cfg,
                                plait_weights **out);
void plait_weights_close(plait_weights *w);

/* The file opened, and its detected layout. */
const char *plait_weights_path(const plait_weights *w);
plait_gpt2_orientation plait_weights_orientation(const plait_weights *w);
/* What was adapted ("token table: 50257 rows, rows 50257..50303 zero"), or
 * "" when nothing; owned by w. */
const char *plait_weights_note(const plait_weights *w);
/* The format read, for the log ("Hugging Face GPT2LMHeadModel (Conv1D ...)",
 * "Llama-family names ..."); static. */
const char *plait_weights_format(const plait_weights *w);

/* Fill local elements [offset, offset+count) of `param`'s slice (its
 * global index, shape and shard; padding positions 0). A tied copy reads
 * its original's tensor. */
plait_status plait_weights_read(plait_weights *w, const plait_param *param, size_t offset, size_t count,
                                float *dst);

#endif
