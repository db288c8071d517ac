/*
 * Pretrained weights from outside a plait run ([run] init_from): a
 * safetensors file in the Hugging Face GPT-2 layout (GPT2LMHeadModel or
 * GPT2Model names) or the plait/nanoGPT format (a plait checkpoint's
 * model.safetensors, nanoGPT's state dict saved as safetensors), read as
 * full tensors and cut into any rank's slices (TP shards, pipeline stages,
 * ZeRO partitions), like a checkpoint but weights only.
 *
 * Opening checks the whole file against the model description before
 * anything is read: the layout is detected from the first block's
 * mlp.c_fc.weight ([C, 4C] Conv1D or [4C, C] Linear); every parameter must
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
 * The model description must outlive the handle. Reads are thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_WEIGHTS_IMPORT_H
#define PLAIT_CORE_CHECKPOINT_WEIGHTS_IMPORT_H

#include <stddef.h>
#include <plait/model.h>

#include "checkpoint/gpt2_names.h"

typedef struct plait_weights plait_weights;

/* Open `path` (a .safetensors file, or a directory holding
 * model.safetensors) and check it against `spec` (a GPT description). The
 * caller closes *out. */
plait_status plait_weights_open(const char *path, const plait_model_spec *spec, plait_weights **out);
void plait_weights_close(plait_weights *w);

/* The file opened, and its detected layout. */
const char *plait_weights_path(const plait_weights *w);
plait_gpt2_orientation plait_weights_orientation(const plait_weights *w);
/* What was adapted ("token table: 50257 rows, rows 50257..50303 zero"), or
 * "" when nothing; owned by w. */
const char *plait_weights_note(const plait_weights *w);

/* Fill local elements [offset, offset+count) of `param`'s slice (its
 * global index, shape and shard; padding positions 0). A tied copy reads
 * its original's tensor. */
plait_status plait_weights_read(plait_weights *w, const plait_param *param, size_t offset, size_t count,
                                float *dst);

#endif
