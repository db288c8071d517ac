/*
 * `plait export`: a plait checkpoint's model as files other tools load
 * directly, weights only.
 *
 *   hf       a llama model ([model] arch = llama): <out>/model.safetensors
 *            with its own names, which are LlamaForCausalLM's (llama_hf.h;
 *            lm_head only when untied, as save_pretrained leaves it out),
 *            and a LlamaForCausalLM config.json from the llama keys the
 *            checkpoint records (Qwen2ForCausalLM with q, k and v
 *            biases, Qwen3ForCausalLM with q and k norms); a llama mixture
 *            of experts as MixtralForCausalLM, or Qwen3MoeForCausalLM with
 *            q and k norms (hf_experts.h: an expert's tensors one by one,
 *            the router renamed, a zero expert_bias left out; a model
 *            neither computes, or a non-zero bias, refused naming the
 *            key). A GPT: <out>/model.safetensors in the Hugging Face GPT2LMHeadModel
 *            layout (gpt2_names.h: Conv1D weights transposed to [in, out],
 *            the tied lm_head left out as save_pretrained leaves it) and
 *            <out>/config.json (model_type gpt2, gelu_new, LayerNorm eps
 *            1e-5, no dropout, tied embeddings): what
 *            GPT2LMHeadModel.from_pretrained(<out>) reads; with the
 *            tokenizer the run recorded, its vocab.json and merges.txt
 *            (GPT-2's format) and a tokenizer_config.json naming
 *            GPT2Tokenizer and its special tokens, for
 *            AutoTokenizer.from_pretrained(<out>).
 *   nanogpt  <out>/model.safetensors with nanoGPT's state-dict names and
 *            nn.Linear layouts, lm_head.weight included (equal to the token
 *            table) so load_state_dict(strict=True) of nanoGPT's GPT
 *            accepts it, and <out>/config.json with nanoGPT's GPTConfig
 *            fields (n_layer, n_head, n_embd, block_size, vocab_size,
 *            dropout, bias). No tokenizer files: nanoGPT encodes with
 *            tiktoken's gpt2 (or a dataset's meta.pkl), named in its own
 *            scripts.
 *
 * Float32 by default, exactly the checkpoint's values; `dtype` bfloat16
 * or float16 stores each rounded to nearest, ties to even (torchtitan's
 * export_dtype; the half-size files models are published in), and
 * config.json's torch_dtype says which; a float16 export refuses a weight
 * past its range (65504), naming it, and leaves no file. Each file is
 * written atomically (temporary file, fsync, rename), the model first, so
 * a failure leaves no partial file; <out> is created if missing and other
 * files in it are left alone. Errors name the file (PLAIT_ERR_SYSTEM,
 * PLAIT_ERR_PROTOCOL for a checkpoint that is not plait's GPT or llama,
 * PLAIT_ERR_INVALID_ARG for a llama asked for as nanogpt, or a mixture of
 * experts that is no Mixtral).
 */
#ifndef PLAIT_CORE_CHECKPOINT_WEIGHTS_EXPORT_H
#define PLAIT_CORE_CHECKPOINT_WEIGHTS_EXPORT_H

#include <stddef.h>
#include <plait/types.h>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_json.h"

typedef enum plait_export_format {
    PLAIT_EXPORT_HF = 0,
    PLAIT_EXPORT_NANOGPT = 1
} plait_export_format;

/* What export takes from the tokenizer a run recorded: its end-of-text
 * id (-1: none), which hf's config.json names as bos and eos_token_id, and
 * for hf its vocab.json and merges.txt texts (vocab.data NULL: none). */
typedef struct plait_export_tokenizer {
    long long eot;
    plait_jbuf vocab, merges;
} plait_export_tokenizer;

/* Read the tokenizer at `path` (as training saw it) into `out` (on entry:
 * eot -1, no texts), the texts only when `files`. `fingerprint` is the one
 * the run recorded (NULL: none); a tokenizer that no longer has it, or
 * cannot be read, gives nothing, and the function says why. The export
 * frees the texts. */
typedef void (*plait_export_tokenizer_fn)(const char *path, const char *fingerprint, int files, void *ctx,
                                          plait_export_tokenizer *out);

/* What an export held: every tensor is read, written and given back
 * before the next (a sharded checkpoint's assembled from its slices into
 * one buffer; a gathered one's mapped pages released), so its memory is
 * its largest tensor (twice, transposed for hf's Conv1D), never the model. */
typedef struct plait_export_memory {
    uint64_t largest_held; /* bytes of tensor data held at once, at most */
    uint64_t model_bytes;  /* the model's tensors, all together */
} plait_export_memory;

/* Export `checkpoint` (a checkpoint directory, or a run directory: its
 * latest complete checkpoint) to out_dir (created if missing; its parent
 * must exist). `tokenizer_of` (may be NULL: no id, no files) reads the
 * recorded tokenizer; a checkpoint that records no tokenizer is taken to
 * hold GPT-2's tokens (id 50256 where the vocabulary reaches it) and gets
 * no tokenizer files. The checkpoint directory used goes to used[cap] (may
 * be NULL); *tokenizer_files (may be NULL) is set to 1 when the tokenizer's
 * files were written, -1 when none was recorded and the run read its
 * data as bytes (a byte-level model: its ids are bytes, not GPT-2's
 * tokens; a checkpoint from before plait recorded that: 256 ids), else 0; *what (may be NULL) to what the model was written
 * as ("Hugging Face LlamaForCausalLM", ...; static); *mem (may be NULL)
 * to what it held. */
plait_status plait_weights_export(const char *checkpoint, plait_export_format format, plait_st_dtype dtype,
                                  const char *out_dir, plait_export_tokenizer_fn tokenizer_of, void *ctx, char *used,
                                  size_t cap, int *tokenizer_files, const char **what, plait_export_memory *mem);

#endif
