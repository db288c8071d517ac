/*
 * The Llama family outside plait: Hugging Face's LlamaForCausalLM
 * config.json, and the [model] keys of a llama model that a checkpoint
 * records beside the common ones (checkpoint.h plait_ckpt_model_keys).
 *
 * Tensor names need no mapping: plait's llama parameters carry
 * LlamaForCausalLM's names and [out, in] shapes (model/model_desc.c), and
 * its rotary positions are transformers' rotate_half, so a Hugging Face
 * file is read by its own names and a plait checkpoint is one already.
 * What names cannot tell (the head counts, RMSNorm's epsilon, the rotary
 * base, features plait does not implement) lives in config.json, checked
 * here against the run's [model] keys (llama_hf_config.c), the rest in
 * llama_hf.c.
 *
 * Pure functions over their arguments, thread-safe; no allocation is kept.
 */
#ifndef PLAIT_CORE_CHECKPOINT_LLAMA_HF_H
#define PLAIT_CORE_CHECKPOINT_LLAMA_HF_H

#include <stddef.h>
#include <plait/model.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_experts.h"
#include "config/config.h"
#include "model/rope_freq.h"

/* A llama model's shape, as resolved by the model description: n_kv_head
 * and ffn_hidden as the parameters have them (never the keys' 0 for "the
 * default"). */
typedef struct plait_llama_shape {
    long long n_layer, n_head, n_kv_head, n_embd, ffn_hidden, vocab_size, block_size;
    double norm_eps, rope_theta;
    int tied;
    int qkv_bias; /* [model] qkv_bias: q, k and v have biases (Qwen2's) */
    long long head_dim; /* the heads' size (resolved: never 0) */
    int qk_norm;        /* [model] qk_norm: q's and k's heads have norms (Qwen3's) */
    /* [model] rope_scaling: its type, and its parameters' values (the
     * keys' defaults under rope_scaling = none) */
    plait_rope_scaling rope;
    /* a mixture of experts (moe_experts 0: dense): the experts, a token's
     * top k, one expert's width (resolved: never 0), every n-th block
     * sparse, the shared experts, and the router (1: sigmoid, 0: softmax) */
    long long moe_experts, moe_top_k, moe_ffn_hidden, moe_every, moe_shared;
    int moe_sigmoid;
} plait_llama_shape;

/* The shape of the described llama model `spec`, built from `cfg` (which
 * gives norm_eps, rope_theta and the rope scaling). PLAIT_ERR_INVALID_ARG when spec is not
 * a llama description. */
plait_status plait_llama_shape_of(const plait_model_spec *spec, const plait_config *cfg, plait_llama_shape *out);

/* The llama keys a checkpoint records as "plait.model.<key>", beside
 * plait_ckpt_model_keys, NULL-terminated: n_kv_head, ffn_hidden, norm_eps,
 * rope_theta, tie_embeddings, rope_scaling, rope_factor,
 * rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos,
 * qkv_bias, head_dim, qk_norm (a checkpoint written before plait knew
 * rope scaling has none of rope_scaling and its parameters: it read as
 * rope_scaling = none; one written before it knew qkv_bias, head_dim or
 * qk_norm has none: they read as false, n_embd / n_head and false). */
extern const char *const plait_llama_ckpt_keys[];

/* The text of key `plait_llama_ckpt_keys[i]` for `s` into buf[cap]
 * (integers in decimal, reals in the shortest text that reads back to the
 * same double, "true"/"false"): what a checkpoint records and what
 * a [model] key would be given. */
void plait_llama_key_text(const plait_llama_shape *s, size_t i, char *buf, size_t cap);

/* The shortest %g text of v into buf[cap] that reads back as v: 1e-05,
 * not 1.0000000000000001e-05; a whole number in full (500000, not 5e+05):
 * a key's text and config.json's numbers. */
void plait_llama_real_text(double v, char *buf, size_t cap);

/* Whether a checkpoint records key `plait_llama_ckpt_keys[i]` for `s`:
 * every key but the rope scaling's parameters under rope_scaling = none
 * (a [model] text made of what a checkpoint records, as plait sample
 * makes, then sets none of them). */
int plait_llama_key_recorded(const plait_llama_shape *s, size_t i);

/* Whether `s` is a model a Hugging Face class computes. A mixture of
 * experts with q and k norms must be Qwen3MoeForCausalLM's: no shared
 * experts, a softmax router, no q, k and v biases (its attention_bias
 * would bias o_proj too); any top k (norm_topk_prob: renormalised for k >
 * 1, as plait does) and any moe_every (decoder_sparse_step). One without
 * must be MixtralForCausalLM's: besides, every block sparse (moe_every 1)
 * and a top k of at least 2 (Mixtral renormalises the k chosen scores,
 * plait's k = 1 keeps the score itself). A dense model with q and k norms
 * is Qwen3ForCausalLM's, which has no q, k and v biases either. `where`
 * names the model in the message (a checkpoint's directory, "[model]").
 * PLAIT_ERR_INVALID_CONFIG naming the key, its value and what is allowed. */
plait_status plait_llama_hf_class_ok(const plait_llama_shape *s, const char *where);

/* Whose expert names a mixture of experts `s` has on Hugging Face's side:
 * Qwen3-MoE's with q and k norms, else Mixtral's; NONE for a dense model. */
plait_hf_experts plait_llama_hf_experts(const plait_llama_shape *s);

/* The shape a llama checkpoint records. PLAIT_ERR_PROTOCOL naming the
 * checkpoint and the key when one is missing or malformed (a checkpoint of
 * another arch, or older than these keys). */
plait_status plait_llama_shape_from_ckpt(const plait_ckpt *ck, plait_llama_shape *out);

/* Check the Hugging Face config.json at `path` against `want`: model_type
 * llama, qwen2 for a model with q, k and v biases (qkv_bias), qwen3 for
 * one with q and k norms (qk_norm; head_dim 128 where the file leaves it
 * out) (either's use_sliding_window false, or no layer under the window:
 * layer_types without sliding_attention, or max_window_layers at least
 * num_hidden_layers), or mixtral for a mixture of experts (its num_local_experts,
 * num_experts_per_tok and intermediate_size, an expert's width, equal to
 * the run's moe_experts, moe_top_k and expert width; router_jitter_noise
 * 0); plait_llama_hf_class_ok first; hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, intermediate_size, vocab_size, rms_norm_eps,
 * rope_theta (or rope_parameters.rope_theta), tie_word_embeddings equal
 * to the run's, max_position_embeddings at least block_size; rope_scaling
 * (or transformers 5's rope_parameters) null, default, or llama3 with the
 * run's rope_scaling = llama3 and its factor, low_freq_factor,
 * high_freq_factor and original_max_position_embeddings equal to the
 * run's, head_dim (default hidden_size / num_attention_heads) the run's;
 * and no feature plait does not implement (attention_bias or
 * mlp_bias true, another rope scaling type, a hidden_act other than silu, a sliding_window). Keys the file
 * leaves out take LlamaConfig's defaults. PLAIT_ERR_INVALID_CONFIG naming
 * the file, the key and both values; PLAIT_ERR_PROTOCOL for a file that is
 * not JSON. */
plait_status plait_llama_check_hf_config(const char *path, const plait_llama_shape *want);

/* The config.json `plait export --format hf` writes for `s`
 * (LlamaForCausalLM, Qwen2ForCausalLM with qkv_bias, Qwen3ForCausalLM
 * with qk_norm, or MixtralForCausalLM for a mixture of experts: the
 * caller checked plait_llama_hf_class_ok; its
 * torch_dtype `torch_dtype`, "float32" when NULL; bos/eos_token_id `eot`,
 * or null when < 0) into buf[cap]; returns what snprintf returns. */
int plait_llama_hf_config_json(char *buf, size_t cap, const plait_llama_shape *s, long long eot,
                               const char *torch_dtype);

#endif
