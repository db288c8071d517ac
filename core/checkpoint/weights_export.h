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

/* Export `checkpoint` (a checkpoint directory, or a run directory: its
 * latest complete checkpoint) to out_dir (created if missing; its parent
 * must exist). The checkpoint directory used goes to used[cap] (may be
 * NULL). */
plait_status plait_weights_export(const char *checkpoint, plait_export_format format, const char *out_dir,
                                  char *used, size_t cap);

#endif
