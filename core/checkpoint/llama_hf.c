/*
 * A llama model's shape (llama_hf.h): from the model's description and
 * config, from the keys a checkpoint records, and the text of each key;
 * the Hugging Face class its features allow. config.json's side is
 * llama_hf_config.c.
 */
#include "checkpoint/llama_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/tied.h"
#include "runtime/error.h"

const char *const plait_llama_ckpt_keys[] = {"n_kv_head",
                                             "ffn_hidden",
                                             "norm_eps",
                                             "rope_theta",
                                             "tie_embeddings",
                                             "rope_scaling",
                                             "rope_factor",
                                             "rope_low_freq_factor",
                                             "rope_high_freq_factor",
                                             "rope_original_max_pos",
                                             "qkv_bias",
                                             "head_dim",
                                             "qk_norm",
                                             NULL};
/* plait_llama_ckpt_keys' indices */
enum { KEY_ROPE_FIRST_PARAM = 6, KEY_ROPE_LAST_PARAM = 9, KEY_QKV_BIAS = 10, KEY_HEAD_DIM = 11, KEY_QK_NORM = 12 };

/* rope_scaling = none's parameters: the keys' defaults (core_schema.c) */
static const plait_rope_scaling rope_none = {PLAIT_ROPE_SCALING_NONE, 8, 1, 4, 8192};

static const plait_param *param_named(const plait_model_spec *spec, const char *name) {
    for (int32_t i = 0; i < spec->n_params; i++)
        if (strcmp(spec->params[i].name, name) == 0) return &spec->params[i];
    return NULL;
}

plait_status plait_llama_shape_of(const plait_model_spec *spec, const plait_config *cfg, plait_llama_shape *out) {
    const plait_param *k = param_named(spec, "model.layers.0.self_attn.k_proj.weight");
    const plait_param *gate = param_named(spec, "model.layers.0.mlp.gate_proj.weight");
    const plait_param *head = param_named(spec, "lm_head.weight");
    /* block 0 of a mixture of experts has no dense MLP: the spec's width is the same number */
    if (strcmp(spec->arch, "llama") != 0 || !k || !head || spec->n_head < 1)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "[model] arch = %s: not a llama model", spec->arch);
    const long long hs = (long long)plait_model_spec_head_size(spec);
    *out = (plait_llama_shape){.n_layer = spec->n_layer,
                               .n_head = spec->n_head,
                               .n_kv_head = (long long)k->shape[0] / hs,
                               .n_embd = spec->n_embd,
                               .ffn_hidden = gate ? (long long)gate->shape[0] : (long long)spec->ffn_hidden,
                               .vocab_size = spec->vocab_size,
                               .block_size = spec->block_size,
                               .norm_eps = plait_config_float(cfg, "model", "norm_eps"),
                               .rope_theta = plait_config_float(cfg, "model", "rope_theta"),
                               .tied = plait_tied_is_copy(head),
                               .qkv_bias = param_named(spec, "model.layers.0.self_attn.q_proj.bias") != NULL,
                               .head_dim = hs,
                               .qk_norm = plait_model_spec_qk_norm(spec),
                               .rope = {strcmp(plait_config_str(cfg, "model", "rope_scaling"), "llama3") == 0
                                            ? PLAIT_ROPE_SCALING_LLAMA3
                                            : PLAIT_ROPE_SCALING_NONE,
                                        plait_config_float(cfg, "model", "rope_factor"),
                                        plait_config_float(cfg, "model", "rope_low_freq_factor"),
                                        plait_config_float(cfg, "model", "rope_high_freq_factor"),
                                        plait_config_int(cfg, "model", "rope_original_max_pos")}};
    out->moe_experts = plait_config_int(cfg, "model", "moe_experts");
    if (out->moe_experts > 0) {
        out->moe_top_k = plait_config_int(cfg, "model", "moe_top_k");
        out->moe_every = plait_config_int(cfg, "model", "moe_every");
        out->moe_shared = plait_config_int(cfg, "model", "moe_shared_experts");
        out->moe_sigmoid = strcmp(plait_config_str(cfg, "model", "moe_router"), "sigmoid") == 0;
        /* the first sparse block's experts give the width the key resolves to */
        char name[96];
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.gate_proj.weight", out->moe_every - 1);
        const plait_param *up = param_named(spec, name);
        out->moe_ffn_hidden = up ? (long long)up->shape[1] : 0;
    }
    return PLAIT_OK;
}

plait_hf_experts plait_llama_hf_experts(const plait_llama_shape *s) {
    return s->moe_experts == 0 ? PLAIT_HF_EXPERTS_NONE
           : s->qk_norm        ? PLAIT_HF_EXPERTS_QWEN3_MOE
                               : PLAIT_HF_EXPERTS_MIXTRAL;
}

plait_status plait_llama_hf_class_ok(const plait_llama_shape *s, const char *where) {
    const char *key = NULL, *allowed = NULL;
    char value[32];
    if (s->moe_experts == 0) {
        if (s->qk_norm && s->qkv_bias)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [model] qk_norm = true with qkv_bias = true, which no Hugging Face class "
                                   "computes: Qwen3ForCausalLM's q and k norms come without biases, or with "
                                   "attention_bias, which puts one on o_proj too (allowed: qkv_bias = false)",
                                   where);
        return PLAIT_OK;
    }
    /* Qwen3-MoE (q and k norms) takes any top k (its norm_topk_prob says
     * whether the chosen scores are renormalised: plait's rule, k > 1) and
     * any moe_every (its decoder_sparse_step); Mixtral neither */
    const int qwen3 = s->qk_norm;
    const char *cls = qwen3 ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM";
    if (!qwen3 && s->moe_every != 1) {
        key = "moe_every", allowed = "1: Mixtral's every block is sparse";
        snprintf(value, sizeof value, "%lld", s->moe_every);
    } else if (s->moe_shared != 0) {
        key = "moe_shared_experts", allowed = qwen3 ? "0: Qwen3-MoE has no shared experts"
                                                    : "0: Mixtral has no shared "
                                                      "experts";
        snprintf(value, sizeof value, "%lld", s->moe_shared);
    } else if (s->moe_sigmoid) {
        key = "moe_router", allowed = qwen3 ? "softmax, Qwen3-MoE's" : "softmax, Mixtral's";
        snprintf(value, sizeof value, "sigmoid");
    } else if (s->qkv_bias) {
        key = "qkv_bias", allowed = qwen3 ? "false: Qwen3-MoE's attention_bias biases o_proj too"
                                          : "false: Mixtral's q, k and v projections have no biases";
        snprintf(value, sizeof value, "true");
    } else if (!qwen3 && s->moe_top_k < 2) {
        key = "moe_top_k", allowed = "2 or more: Mixtral renormalises the chosen scores to sum to 1, which with "
                                     "k = 1 gives a gate of 1 where plait's gate is the score itself";
        snprintf(value, sizeof value, "%lld", s->moe_top_k);
    }
    if (!key) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: a mixture of experts with [model] %s = %s, which Hugging Face's %s does not compute "
                           "(allowed: %s)",
                           where, key, value, cls, allowed);
}

void plait_llama_real_text(double v, char *buf, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void plait_llama_key_text(const plait_llama_shape *s, size_t i, char *buf, size_t cap) {
    switch (i) {
    case 0: snprintf(buf, cap, "%lld", s->n_kv_head); break;
    case 1: snprintf(buf, cap, "%lld", s->ffn_hidden); break;
    case 2:
        plait_llama_real_text(s->norm_eps, buf, cap);
        break;
    case 3:
        plait_llama_real_text(s->rope_theta, buf, cap);
        break;
    case 4:
        snprintf(buf, cap, "%s", s->tied ? "true" : "false");
        break;
    case 5:
        snprintf(buf, cap, "%s", s->rope.type == PLAIT_ROPE_SCALING_LLAMA3 ? "llama3" : "none");
        break;
    case 6:
        plait_llama_real_text(s->rope.factor, buf, cap);
        break;
    case 7:
        plait_llama_real_text(s->rope.low_freq_factor, buf, cap);
        break;
    case 8:
        plait_llama_real_text(s->rope.high_freq_factor, buf, cap);
        break;
    case KEY_ROPE_LAST_PARAM:
        snprintf(buf, cap, "%lld", (long long)s->rope.original_max_pos);
        break;
    case KEY_QKV_BIAS:
        snprintf(buf, cap, "%s", s->qkv_bias ? "true" : "false");
        break;
    case KEY_HEAD_DIM:
        snprintf(buf, cap, "%lld", s->head_dim);
        break;
    default:
        snprintf(buf, cap, "%s", s->qk_norm ? "true" : "false");
        break;
    }
}

/* The rope scaling a checkpoint records (none where it records none: one
 * written before plait knew rope scaling). */
static plait_status rope_from_ckpt(const plait_ckpt *ck, plait_rope_scaling *out) {
    *out = rope_none;
    const char *type = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.rope_scaling");
    if (!type || !strcmp(type, "none")) return PLAIT_OK;
    static const char *const keys[] = {"rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                       "rope_original_max_pos"};
    double v[4];
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "plait.model.%s", keys[i]);
        const char *text = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
        char *end = NULL;
        v[i] = text ? strtod(text, &end) : 0;
        if (strcmp(type, "llama3") != 0 || !text || *end || !(v[i] > 0) || !isfinite(v[i]))
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: model metadata 'plait.model.rope_scaling' is '%s' and '%s' is %s%s%s "
                                   "(allowed: rope_scaling none or llama3, its parameters above 0)",
                                   plait_ckpt_dir(ck), type, key, text ? "'" : "missing", text ? text : "",
                                   text ? "'" : "");
    }
    *out = (plait_rope_scaling){PLAIT_ROPE_SCALING_LLAMA3, v[0], v[1], v[2], (int64_t)v[3]};
    return PLAIT_OK;
}

/* The mixture of experts a checkpoint records (none where it records
 * none: a dense model). */
static plait_status moe_from_ckpt(const plait_ckpt *ck, plait_llama_shape *out) {
    static const char *const keys[] = {"moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_every", "moe_shared_experts"};
    long long *dst[] = {&out->moe_experts, &out->moe_top_k, &out->moe_ffn_hidden, &out->moe_every, &out->moe_shared};
    const char *experts = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.moe_experts");
    if (!experts || !strcmp(experts, "0")) return PLAIT_OK;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "plait.model.%s", keys[i]);
        const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
        char *end = NULL;
        *dst[i] = v ? strtoll(v, &end, 10) : -1;
        if (!v || !*v || *end || *dst[i] < 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: model metadata '%s' is %s%s%s (a checkpoint of a mixture of experts "
                                   "records it as a whole number)",
                                   plait_ckpt_dir(ck), key, v ? "'" : "missing", v ? v : "", v ? "', malformed" : "");
    }
    const char *router = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.moe_router");
    out->moe_sigmoid = router && !strcmp(router, "sigmoid");
    if (!out->moe_ffn_hidden) out->moe_ffn_hidden = out->ffn_hidden; /* the key's 0: the dense width */
    return PLAIT_OK;
}

int plait_llama_key_recorded(const plait_llama_shape *s, size_t i) {
    return i < KEY_ROPE_FIRST_PARAM || i > KEY_ROPE_LAST_PARAM || s->rope.type == PLAIT_ROPE_SCALING_LLAMA3;
}

/* A true/false key a checkpoint records: false where it records none
 * (one written before plait knew the key). */
static plait_status flag_from_ckpt(const plait_ckpt *ck, const char *key, int *out) {
    const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
    *out = v && !strcmp(v, "true");
    if (v && !*out && strcmp(v, "false") != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: model metadata '%s' is '%s' (allowed: true, false)",
                               plait_ckpt_dir(ck), key, v);
    return PLAIT_OK;
}

/* qkv_bias, head_dim and qk_norm as a checkpoint records them: false,
 * n_embd / n_head and false where it records none (one written before
 * plait knew the keys). */
static plait_status qkv_from_ckpt(const plait_ckpt *ck, plait_llama_shape *out) {
    plait_status st = flag_from_ckpt(ck, "plait.model.qkv_bias", &out->qkv_bias);
    if (st == PLAIT_OK) st = flag_from_ckpt(ck, "plait.model.qk_norm", &out->qk_norm);
    if (st != PLAIT_OK) return st;
    const char *hd = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.head_dim");
    char *end = NULL;
    out->head_dim = hd ? strtoll(hd, &end, 10) : out->n_embd / out->n_head;
    if (hd && (!*hd || *end || out->head_dim < 2))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: model metadata 'plait.model.head_dim' is '%s' (a llama checkpoint records the "
                               "heads' size as a whole number of at least 2)",
                               plait_ckpt_dir(ck), hd);
    return PLAIT_OK;
}

plait_status plait_llama_shape_from_ckpt(const plait_ckpt *ck, plait_llama_shape *out) {
    long long *dst[] = {&out->n_layer,    &out->n_head,     &out->n_embd,    &out->block_size,
                        &out->vocab_size, &out->n_kv_head, &out->ffn_hidden};
    static const char *const all[] = {"n_layer",    "n_head",     "n_embd",   "block_size",    "vocab_size",
                                      "n_kv_head",  "ffn_hidden", "norm_eps", "rope_theta", "tie_embeddings"};
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "plait.model.%s", all[i]);
        const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
        char *end = NULL;
        int ok = v && *v;
        if (ok && i < 7) {
            *dst[i] = strtoll(v, &end, 10);
            ok = !*end && *dst[i] >= 1;
        } else if (ok && i < 9) {
            double d = strtod(v, &end);
            ok = !*end && d > 0 && isfinite(d);
            *(i == 7 ? &out->norm_eps : &out->rope_theta) = d;
        } else if (ok) {
            ok = !strcmp(v, "true") || !strcmp(v, "false");
            out->tied = !strcmp(v, "true");
        }
        if (!ok)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: model metadata '%s' is %s%s%s (a llama checkpoint records it; one written "
                                   "before plait recorded the llama keys cannot be exported: resume it for one "
                                   "step to write a new checkpoint)",
                                   plait_ckpt_dir(ck), key, v ? "'" : "missing", v ? v : "", v ? "', malformed" : "");
    }
    plait_status st = rope_from_ckpt(ck, &out->rope);
    if (st == PLAIT_OK) st = qkv_from_ckpt(ck, out);
    return st == PLAIT_OK ? moe_from_ckpt(ck, out) : st;
}
