/*
 * `plait export`: a plait checkpoint's model as files other tools load
 * directly, weights only.
 *
 *   hf       <out>/model.safetensors in the Hugging Face GPT2LMHeadModel
 *            layout (gpt2_names.h: Conv1D weights transposed to [in, out],
 *            the tied lm_head left out as save_pretrained leaves it) and
 *            <out>/config.json (model_type gpt2, gelu_new, LayerNorm eps
 *            1e-5, no dropout, tied embeddings): what
 *            GPT2LMHeadModel.from_pretrained(<out>) reads.
 *   nanogpt  <out>/model.safetensors with nanoGPT's state-dict names and
 *            nn.Linear layouts, lm_head.weight included (equal to the token
 *            table) so load_state_dict(strict=True) of nanoGPT's GPT
 *            accepts it, and <out>/config.json with nanoGPT's GPTConfig
 *            fields (n_layer, n_head, n_embd, block_size, vocab_size,
 *            dropout, bias).
 *
 * Float32 throughout, exactly the checkpoint's values. Each file is
 * written atomically (temporary file, fsync, rename), the model first, so
 * a failure leaves no partial file; <out> is created if missing and other
 * files in it are left alone. Errors name the file (PLAIT_ERR_SYSTEM,
 * PLAIT_ERR_PROTOCOL for a checkpoint that is not plait's GPT).
 */
#ifndef PLAIT_CORE_CHECKPOINT_WEIGHTS_EXPORT_H
#define PLAIT_CORE_CHECKPOINT_WEIGHTS_EXPORT_H

#include <stddef.h>
#include <plait/types.h>

typedef enum plait_export_format {
    PLAIT_EXPORT_HF = 0,
    PLAIT_EXPORT_NANOGPT = 1
} plait_export_format;

/* The end-of-text token's id in the tokenizer a run recorded (its path,
 * as training saw it), or -1 when it has none or cannot be read (the
 * caller says why). hf's config.json names it as bos and eos_token_id. */
typedef long long (*plait_export_eot_fn)(const char *tokenizer, void *ctx);

/* Export `checkpoint` (a checkpoint directory, or a run directory: its
 * latest complete checkpoint) to out_dir (created if missing; its parent
 * must exist). `eot_of` (may be NULL: no id) reads the recorded tokenizer's
 * end-of-text id; a checkpoint that records no tokenizer is taken to hold
 * GPT-2's tokens (id 50256 where the vocabulary reaches it). The
 * checkpoint directory used goes to used[cap] (may be NULL). */
plait_status plait_weights_export(const char *checkpoint, plait_export_format format, const char *out_dir,
                                  plait_export_eot_fn eot_of, void *ctx, char *used, size_t cap);

#endif
