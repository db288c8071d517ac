/*
 * Hugging Face's config.json of a llama model (llama_hf.h): checked against
 * the run's [model] keys when weights are read in, written beside weights
 * written out. The class it names (LlamaForCausalLM, Qwen2, Qwen3, Mistral,
 * Mixtral, Qwen3-MoE) follows from the model's features.
 */
#include "checkpoint/llama_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/safetensors_json.h"
#include "runtime/error.h"

/* ---- config.json -------------------------------------------------------- */

/* A number member (integer or real) of `obj`: 1 with *v set, 0 when absent
 * or null, -1 when of another type. */
static int number(const plait_json *obj, const char *key, double *v) {
    const plait_json *j = plait_json_get(obj, key);
    if (!j || j->type == PLAIT_JSON_NULL) return 0;
    if (j->type == PLAIT_JSON_INT) *v = (double)j->num;
    else if (j->type == PLAIT_JSON_REAL) *v = j->real;
    else return -1;
    return 1;
}

static plait_status not_a(const char *path, const char *key, const char *what) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: '%s' is not %s", path, key, what);
}

/* One number of config.json, `dflt` where left out, against the run's. */
static plait_status same_number(const char *path, const plait_json *root, const char *key, double dflt, double want,
                                const char *ours, const char *cls) {
    double v = dflt;
    int got = number(root, key, &v);
    if (got < 0) return not_a(path, key, "a number");
    /* every number compared is a size, an epsilon or a base: one at or
     * below 0 is no model's, and no [model] value could load it */
    if (!(v > 0)) return not_a(path, key, "above 0 (the file is damaged, or not a Llama model's config.json)");
    int same = fabs(v - want) <= 1e-12 * fabs(want);
    if (same) return PLAIT_OK;
    char have[40], need[40];
    plait_llama_real_text(v, have, sizeof have);
    plait_llama_real_text(want, need, sizeof need);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: %s = %s%s, but the run has [model] %s = %s: the model in the file is another "
                           "one (give model.%s=%s to load it)",
                           path, key, have, got ? "" : cls, ours, need, ours, have);
}

static plait_status refuse_feature(const char *path, const char *key, const char *value, const char *why) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: %s = %s: %s; plait's llama arch does not implement it, so the model could "
                           "not compute what it was trained to",
                           path, key, value, why);
}

/* attention_bias, mlp_bias: false (or left out). */
static plait_status no_bias(const char *path, const plait_json *root, const char *key) {
    const plait_json *j = plait_json_get(root, key);
    if (!j || j->type == PLAIT_JSON_NULL || (j->type == PLAIT_JSON_BOOL && !j->num)) return PLAIT_OK;
    if (j->type != PLAIT_JSON_BOOL) return not_a(path, key, "true or false");
    return refuse_feature(path, key, "true", "the projections have biases");
}

/* The llama3 parameters of `obj` (a rope_scaling or rope_parameters
 * object, named `where`) against the run's rope_scaling = llama3. */
static plait_status same_llama3(const char *path, const char *where, const plait_json *obj,
                                const plait_rope_scaling *want) {
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    static const char *const ours[] = {"rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                       "rope_original_max_pos"};
    const double run[] = {want->factor, want->low_freq_factor, want->high_freq_factor, (double)want->original_max_pos};
    for (int i = 0; i < 4; i++) {
        char key[96];
        double v = 0;
        snprintf(key, sizeof key, "%s.%s", where, keys[i]);
        const int got = number(obj, keys[i], &v);
        if (got <= 0) return not_a(path, key, "a number (rope_type llama3 gives all four of its parameters)");
        if (fabs(v - run[i]) <= 1e-12 * fabs(run[i])) continue;
        char have[40], need[40];
        plait_llama_real_text(v, have, sizeof have);
        plait_llama_real_text(run[i], need, sizeof need);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: %s = %s, but the run has [model] %s = %s: the model in the file is "
                               "another one (give model.%s=%s to load it)",
                               path, key, have, ours[i], need, ours[i], have);
    }
    return PLAIT_OK;
}

/* rope_scaling (transformers 4) or rope_parameters (5): none (null, or
 * rope_type default) or llama3, as the run's rope_scaling; any other type
 * refused (plait does not implement it). */
static plait_status check_rope(const char *path, const plait_json *root, const plait_rope_scaling *want) {
    const plait_json *scaling = plait_json_get(root, "rope_scaling");
    const plait_json *params = plait_json_get(root, "rope_parameters");
    const plait_json *obj = NULL, *type = NULL;
    const char *where = NULL;
    if (scaling && scaling->type != PLAIT_JSON_NULL) {
        where = "rope_scaling", obj = scaling;
        type = plait_json_get(scaling, "rope_type");
        if (!type) type = plait_json_get(scaling, "type");
    } else if (params && params->type == PLAIT_JSON_OBJECT) {
        type = plait_json_get(params, "rope_type");
        if (type && (type->type != PLAIT_JSON_STRING || strcmp(type->str, "default") != 0))
            where = "rope_parameters", obj = params;
    }
    const char *name = type && type->type == PLAIT_JSON_STRING ? type->str : NULL;
    const int llama3 = where && name && !strcmp(name, "llama3");
    if (where && !llama3) {
        char value[160];
        snprintf(value, sizeof value, "%s%s%s", name ? "type '" : "", name ? name : "(an unnamed type)",
                 name ? "'" : "");
        return refuse_feature(path, obj == params ? "rope_parameters.rope_type" : where, value,
                              "the rotary positions are scaled in a way plait does not implement (allowed: null, "
                              "default or llama3)");
    }
    const int run_llama3 = want->type == PLAIT_ROPE_SCALING_LLAMA3;
    if (llama3 != run_llama3)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: %s = %s, but the run has [model] rope_scaling = %s: the model in the "
                               "file rotates by other angles (give model.rope_scaling=%s%s to load it)",
                               path, where ? where : "rope_scaling", llama3 ? "type 'llama3'" : "null",
                               run_llama3 ? "llama3" : "none", llama3 ? "llama3" : "none",
                               llama3 ? " and its parameters" : "");
    return llama3 ? same_llama3(path, where, obj, want) : PLAIT_OK;
}

/* The Hugging Face class a shape reads as, and its config class's
 * defaults for the keys a file may leave out (transformers' config
 * classes: Llama 2 7B's, Qwen2 7B's, Qwen3 8B's, Mistral 7B's, Mixtral
 * 8x7B's, Qwen3-MoE's). */
typedef struct hf_class {
    const char *model_type, *name, *cls;
    double hidden, layers, kv_heads, ffn, vocab, eps, theta, positions; /* kv_heads 0: num_attention_heads */
    double head_dim;                                                    /* 0: hidden_size / num_attention_heads */
    int windowed; /* Qwen's: sliding_window counts only under use_sliding_window (check_qwen_window) */
} hf_class;

#define LEFT_OUT(cls) " (" cls "'s default: the file leaves it out)"
static const hf_class hf_llama = {
    "llama", "Llama", LEFT_OUT("LlamaConfig"), 4096, 32, 0, 11008, 32000, 1e-6, 10000, 2048, 0, 0};
static const hf_class hf_qwen2 = {
    "qwen2", "Qwen2", LEFT_OUT("Qwen2Config"), 4096, 32, 32, 22016, 151936, 1e-6, 10000, 32768, 0, 1};
static const hf_class hf_qwen3 = {
    "qwen3", "Qwen3", LEFT_OUT("Qwen3Config"), 4096, 32, 32, 22016, 151936, 1e-6, 10000, 32768, 128, 1};
static const hf_class hf_mistral = {
    "mistral", "Mistral", LEFT_OUT("MistralConfig"), 4096, 32, 8, 14336, 32000, 1e-6, 10000, 4096 * 32, 0, 0};
static const hf_class hf_mixtral = {
    "mixtral", "Mixtral", LEFT_OUT("MixtralConfig"), 4096, 32, 8, 14336, 32000, 1e-5, 1e6, 4096 * 32, 0, 0};
static const hf_class hf_qwen3_moe = {
    "qwen3_moe", "Qwen3-MoE", LEFT_OUT("Qwen3MoeConfig"), 2048, 24, 4, 6144, 151936, 1e-6, 10000, 32768, 0, 1};
#undef LEFT_OUT

static const hf_class *class_of(const plait_llama_shape *s) {
    if (s->moe_experts > 0) return s->qk_norm ? &hf_qwen3_moe : &hf_mixtral;
    return s->qk_norm ? &hf_qwen3 : s->qkv_bias ? &hf_qwen2 : &hf_llama;
}

/* The file is of class hc: a Qwen file's sliding_window counts only
 * under use_sliding_window (check_qwen_window), a Mistral file's is 4096
 * where it leaves it out. */
static plait_status check_features(const char *path, const plait_json *root, const plait_llama_shape *want,
                                   const hf_class *hc) {
    plait_status st = no_bias(path, root, "attention_bias");
    if (st == PLAIT_OK) st = no_bias(path, root, "mlp_bias");
    if (st != PLAIT_OK) return st;
    const plait_json *act = plait_json_get(root, "hidden_act");
    if (act && act->type != PLAIT_JSON_NULL && (act->type != PLAIT_JSON_STRING || strcmp(act->str, "silu") != 0))
        return refuse_feature(path, "hidden_act", act->type == PLAIT_JSON_STRING ? act->str : "(not a string)",
                              "the MLP's activation is not SiLU (allowed: silu)");
    st = check_rope(path, root, &want->rope);
    if (st != PLAIT_OK) return st;
    double hd = 0;
    int got = number(root, "head_dim", &hd);
    if (got < 0) return not_a(path, "head_dim", "a number");
    if (!got) /* the config class's default */
        hd = hc->head_dim > 0 ? hc->head_dim : floor((double)want->n_embd / (double)want->n_head);
    if (hd != (double)want->head_dim)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: head_dim = %.0f%s, but the run has [model] head_dim = %lld: the model in "
                               "the file is another one (give model.head_dim=%.0f to load it)",
                               path, hd,
                               got                ? ""
                               : hc->head_dim > 0 ? hc->cls
                                                  : " (hidden_size / num_attention_heads: the file leaves it out)",
                               want->head_dim, hd);
    const plait_json *sw = plait_json_get(root, "sliding_window");
    if (!sw && hc == &hf_mistral)
        return refuse_feature(path, "sliding_window", "4096 (MistralConfig's default: the file leaves it out)",
                              "attention sees a sliding window (allowed: null)");
    if (!hc->windowed && sw && sw->type != PLAIT_JSON_NULL)
        return refuse_feature(path, "sliding_window", "set", "attention sees a sliding window (allowed: null)");
    return PLAIT_OK;
}

/* A mixture of experts against Mixtral's config.json: the experts, the
 * top k and an expert's width (intermediate_size) are the run's, and no
 * router jitter (noise on the router's input in training, which plait's
 * router does not add). */
static plait_status check_mixtral(const char *path, const plait_json *root, const plait_llama_shape *want) {
    static const char cls[] = " (MixtralConfig's default: the file leaves it out)";
    plait_status st = same_number(path, root, "num_local_experts", 8, (double)want->moe_experts, "moe_experts", cls);
    if (st == PLAIT_OK)
        st = same_number(path, root, "num_experts_per_tok", 2, (double)want->moe_top_k, "moe_top_k", cls);
    if (st == PLAIT_OK)
        st = same_number(path, root, "intermediate_size", 14336, (double)want->moe_ffn_hidden, "moe_ffn_hidden", cls);
    double jitter = 0;
    const int got = number(root, "router_jitter_noise", &jitter);
    if (st == PLAIT_OK && got < 0) return not_a(path, "router_jitter_noise", "a number");
    if (st == PLAIT_OK && jitter != 0) {
        char value[40];
        plait_llama_real_text(jitter, value, sizeof value);
        return refuse_feature(path, "router_jitter_noise", value,
                              "the router's input is scaled by random noise in training (allowed: 0)");
    }
    return st;
}

/* A mixture of experts against Qwen3-MoE's config.json: the experts, the
 * top k, an expert's width (moe_intermediate_size) and the sparse blocks
 * (decoder_sparse_step, and no mlp_only_layers) are the run's, the chosen
 * scores renormalised as plait does (norm_topk_prob: for a top k above
 * 1), and where a block is dense its width (intermediate_size). */
static plait_status check_qwen3_moe(const char *path, const plait_json *root, const plait_llama_shape *want) {
    const char *cls = hf_qwen3_moe.cls;
    /* Qwen's files name the experts num_experts, transformers 5's
     * save_pretrained num_local_experts (its attribute_map) */
    const char *experts = plait_json_get(root, "num_experts") || !plait_json_get(root, "num_local_experts")
                              ? "num_experts"
                              : "num_local_experts";
    plait_status st = same_number(path, root, experts, 128, (double)want->moe_experts, "moe_experts", cls);
    if (st == PLAIT_OK)
        st = same_number(path, root, "num_experts_per_tok", 8, (double)want->moe_top_k, "moe_top_k", cls);
    if (st == PLAIT_OK)
        st = same_number(path, root, "moe_intermediate_size", 768, (double)want->moe_ffn_hidden, "moe_ffn_hidden", cls);
    if (st == PLAIT_OK)
        st = same_number(path, root, "decoder_sparse_step", 1, (double)want->moe_every, "moe_every", cls);
    if (st == PLAIT_OK && want->moe_every > 1) /* a dense block between the sparse ones */
        st = same_number(path, root, "intermediate_size", hf_qwen3_moe.ffn, (double)want->ffn_hidden, "ffn_hidden",
                         cls);
    if (st != PLAIT_OK) return st;
    const plait_json *only = plait_json_get(root, "mlp_only_layers");
    if (only && only->type != PLAIT_JSON_NULL && (only->type != PLAIT_JSON_ARRAY || only->child))
        return refuse_feature(path, "mlp_only_layers", "a list of layers",
                              "those layers' MLPs are dense where decoder_sparse_step would make them sparse "
                              "(allowed: [] or null)");
    const plait_json *norm = plait_json_get(root, "norm_topk_prob");
    if (norm && norm->type != PLAIT_JSON_BOOL && norm->type != PLAIT_JSON_NULL)
        return not_a(path, "norm_topk_prob", "true or false");
    const int renorm = norm && norm->type == PLAIT_JSON_BOOL && norm->num;
    if (renorm != (want->moe_top_k > 1))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: norm_topk_prob = %s%s with num_experts_per_tok = %lld: plait renormalises "
                               "the chosen scores for a top k above 1 and keeps the score itself for 1, so it "
                               "computes the file's model only with norm_topk_prob = %s",
                               path, renorm ? "true" : "false", norm ? "" : cls, want->moe_top_k,
                               want->moe_top_k > 1 ? "true" : "false");
    return PLAIT_OK;
}

/* model_type: the run's class (a Llama run reads a Mistral file too: the
 * same model where no layer attends within a sliding window; *hc then
 * Mistral's, for its defaults); what would load a file of another. */
static plait_status check_type(const char *path, const plait_json *root, const hf_class **hc) {
    const hf_class *want = *hc;
    const plait_json *type = plait_json_get(root, "model_type");
    const char *name = type && type->type == PLAIT_JSON_STRING ? type->str : "(missing)";
    if (!strcmp(name, want->model_type)) return PLAIT_OK;
    if (want == &hf_llama && !strcmp(name, hf_mistral.model_type)) {
        *hc = &hf_mistral;
        return PLAIT_OK;
    }
    const char *hint = "";
    if (want == &hf_llama && !strcmp(name, "mixtral"))
        hint = "; a Mixtral model needs model.moe_experts, moe_top_k and moe_ffn_hidden as its num_local_experts, "
               "num_experts_per_tok and intermediate_size";
    else if (want == &hf_llama && !strcmp(name, "qwen2"))
        hint = "; a Qwen2 model's q, k and v projections have biases: give model.qkv_bias=true";
    else if (want == &hf_qwen2 && !strcmp(name, "llama"))
        hint = "; a Llama model's projections have no biases: give model.qkv_bias=false";
    else if (want != &hf_qwen3 && !strcmp(name, "qwen3"))
        hint = "; a Qwen3 model's heads have q and k norms: give model.qk_norm=true (and its head_dim, 128 where "
               "the file leaves it out)";
    else if (want == &hf_qwen3 && strcmp(name, "qwen3") != 0)
        hint = "; the heads of a model of another type have no q and k norms: give model.qk_norm=false";
    else if (want != &hf_qwen3_moe && !strcmp(name, "qwen3_moe"))
        hint = "; a Qwen3-MoE model needs model.qk_norm=true, and model.moe_experts, moe_top_k, moe_ffn_hidden and "
               "moe_every as its num_experts, num_experts_per_tok, moe_intermediate_size and decoder_sparse_step";
    else if (want == &hf_qwen3_moe && !strcmp(name, "mixtral"))
        hint = "; a Mixtral model's heads have no q and k norms: give model.qk_norm=false";
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: model_type = %s: [model] arch = llama%s reads Hugging Face %s models "
                           "(model_type %s)%s",
                           path, name,
                           want == &hf_mixtral     ? " with moe_experts > 0"
                           : want == &hf_qwen3_moe ? " with moe_experts > 0 and qk_norm = true"
                           : want == &hf_qwen3     ? " with qk_norm = true"
                           : want == &hf_qwen2     ? " with qkv_bias = true"
                                                   : "",
                           want->name, want == &hf_llama ? "llama or mistral" : want->model_type, hint);
}

/* A Qwen2 or Qwen3 file's sliding window: none of its layers under it
 * (layer_types, which transformers 5 writes, or use_sliding_window with
 * max_window_layers, the layers from which the window applies). */
static plait_status check_qwen_window(const char *path, const plait_json *root, double layers) {
    const plait_json *types = plait_json_get(root, "layer_types");
    if (types && types->type == PLAIT_JSON_ARRAY) {
        for (const plait_json *t = types->child; t; t = t->next) {
            if (t->type != PLAIT_JSON_STRING) return not_a(path, "layer_types", "a list of strings");
            if (strcmp(t->str, "full_attention") != 0)
                return refuse_feature(path, "layer_types", t->str,
                                      "a layer's attention is not full (allowed: full_attention)");
        }
        return PLAIT_OK;
    }
    const plait_json *use = plait_json_get(root, "use_sliding_window");
    if (!use || use->type == PLAIT_JSON_NULL || (use->type == PLAIT_JSON_BOOL && !use->num)) return PLAIT_OK;
    if (use->type != PLAIT_JSON_BOOL) return not_a(path, "use_sliding_window", "true or false");
    double from = 28; /* Qwen2Config's and Qwen3Config's max_window_layers */
    if (number(root, "max_window_layers", &from) < 0) return not_a(path, "max_window_layers", "a number");
    const plait_json *sw = plait_json_get(root, "sliding_window");
    if (from >= layers || !sw || sw->type == PLAIT_JSON_NULL) return PLAIT_OK;
    return refuse_feature(path, "use_sliding_window", "true",
                          "the layers from max_window_layers on attend within a sliding window (allowed: false, or "
                          "max_window_layers at least num_hidden_layers)");
}

static plait_status check_config(const char *path, const plait_json *root, const plait_llama_shape *want) {
    if (!root || root->type != PLAIT_JSON_OBJECT) return not_a(path, "the document", "an object");
    plait_status cst = plait_llama_hf_class_ok(want, "[model]");
    if (cst != PLAIT_OK) return cst;
    const hf_class *hc = class_of(want);
    const int moe = want->moe_experts > 0;
    plait_status tst = check_type(path, root, &hc);
    if (tst != PLAIT_OK) return tst;
    const char *cls = hc->cls;
    /* a key left out takes its class's default */
    double heads = 32; /* every class's default */
    number(root, "num_attention_heads", &heads);
    double rope_theta = 10000;
    const plait_json *params = plait_json_get(root, "rope_parameters");
    int theta_in_params = params && params->type == PLAIT_JSON_OBJECT && number(params, "rope_theta", &rope_theta) > 0;
    const struct {
        const char *key;
        double dflt, want;
        const char *ours;
    } num[] = {
        {"hidden_size", hc->hidden, (double)want->n_embd, "n_embd"},
        {"num_hidden_layers", hc->layers, (double)want->n_layer, "n_layer"},
        {"num_attention_heads", 32, (double)want->n_head, "n_head"},
        {"num_key_value_heads", hc->kv_heads > 0 ? hc->kv_heads : heads, (double)want->n_kv_head, "n_kv_head"},
        {"intermediate_size", hc->ffn, (double)want->ffn_hidden, "ffn_hidden"},
        {"vocab_size", hc->vocab, (double)want->vocab_size, "vocab_size"},
        {"rms_norm_eps", hc->eps, want->norm_eps, "norm_eps"},
        {theta_in_params ? "rope_parameters.rope_theta" : "rope_theta", hc->theta, want->rope_theta, "rope_theta"},
    };
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) {
        const plait_json *from = root;
        const char *key = num[i].key;
        if (!strcmp(key, "rope_parameters.rope_theta")) {
            from = params;
            key = "rope_theta";
        }
        /* Mixtral's intermediate_size is an expert's width, Qwen3-MoE's a
         * dense block's: check_mixtral's, check_qwen3_moe's */
        if (moe && !strcmp(key, "intermediate_size")) continue;
        plait_status st = same_number(path, from, key, num[i].dflt, num[i].want, num[i].ours, cls);
        if (st != PLAIT_OK) return st;
    }
    if (moe) {
        plait_status st = hc == &hf_qwen3_moe ? check_qwen3_moe(path, root, want) : check_mixtral(path, root, want);
        if (st != PLAIT_OK) return st;
    }
    const plait_json *tie = plait_json_get(root, "tie_word_embeddings");
    if (tie && tie->type != PLAIT_JSON_BOOL && tie->type != PLAIT_JSON_NULL)
        return not_a(path, "tie_word_embeddings", "true or false");
    int tied = tie && tie->type == PLAIT_JSON_BOOL && tie->num;
    if (tied != want->tied)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tie_word_embeddings = %s%s, but the run has [model] tie_embeddings = %s "
                               "(give model.tie_embeddings=%s to load it)",
                               path, tied ? "true" : "false", tie ? "" : cls, want->tied ? "true" : "false",
                               tied ? "true" : "false");
    double positions = hc->positions;
    if (number(root, "max_position_embeddings", &positions) < 0)
        return not_a(path, "max_position_embeddings", "a number");
    if (positions < (double)want->block_size)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: max_position_embeddings = %.0f, but the run has [model] block_size = %lld: "
                               "the model was not made for contexts that long (allowed: block_size <= %.0f)",
                               path, positions, want->block_size, positions);
    plait_status st = check_features(path, root, want, hc);
    return st == PLAIT_OK && hc->windowed ? check_qwen_window(path, root, (double)want->n_layer) : st;
}

plait_status plait_llama_check_hf_config(const char *path, const plait_llama_shape *want) {
    char *text = NULL;
    size_t len = 0;
    plait_status st = plait_fs_read_small_file(path, 1 << 20, &text, &len);
    if (st != PLAIT_OK) return st;
    plait_json_doc *doc = NULL;
    st = plait_json_parse_any(text, len, path, &doc);
    if (st == PLAIT_OK) st = check_config(path, plait_json_root(doc), want);
    plait_json_free(doc);
    free(text);
    return st;
}

/* config.json's rope_scaling for `r` into buf[cap]: null, or Llama 3.1's
 * object (reals as LlamaConfig writes them, with a decimal point). */
static void rope_json(const plait_rope_scaling *r, char *buf, size_t cap) {
    if (r->type != PLAIT_ROPE_SCALING_LLAMA3) {
        snprintf(buf, cap, "null");
        return;
    }
    char v[3][40];
    const double x[3] = {r->factor, r->low_freq_factor, r->high_freq_factor};
    for (int i = 0; i < 3; i++) {
        plait_llama_real_text(x[i], v[i], sizeof v[i]);
        if (!strpbrk(v[i], ".e")) strcat(v[i], ".0");
    }
    snprintf(buf, cap,
             "{\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
             "    \"original_max_position_embeddings\": %lld,\n    \"rope_type\": \"llama3\"\n  }",
             v[0], v[2], v[1], (long long)r->original_max_pos);
}

int plait_llama_hf_config_json(char *buf, size_t cap, const plait_llama_shape *s, long long eot,
                               const char *torch_dtype) {
    if (!torch_dtype) torch_dtype = "float32";
    char eps[40], theta[40], eos[96] = "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n", rope[320];
    rope_json(&s->rope, rope, sizeof rope);
    plait_llama_real_text(s->norm_eps, eps, sizeof eps);
    plait_llama_real_text(s->rope_theta, theta, sizeof theta);
    if (!strpbrk(theta, ".e")) strcat(theta, ".0"); /* a float, as LlamaConfig writes it */
    if (eot >= 0) snprintf(eos, sizeof eos, "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n", eot, eot);
    /* the training coefficients (router_aux_loss_coef) are left out: the
     * model computes the same without them */
    if (s->moe_experts > 0 && !s->qk_norm)
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"MixtralForCausalLM\"],\n  \"model_type\": \"mixtral\",\n"
                        "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
                        "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
                        "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
                        "  \"num_local_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n"
                        "  \"router_jitter_noise\": 0.0,\n  \"output_router_logits\": false,\n"
                        "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
                        "  \"rope_scaling\": %s,\n  \"sliding_window\": null,\n  \"attention_dropout\": 0.0,\n"
                        "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n"
                        "%s  \"torch_dtype\": \"%s\"\n}\n",
                        s->vocab_size, s->n_embd, s->moe_ffn_hidden, s->n_layer, s->n_head, s->n_kv_head, s->head_dim,
                        s->moe_experts, s->moe_top_k, s->block_size, eps, theta, rope, s->tied ? "true" : "false", eos,
                        torch_dtype);
    /* Qwen3-MoE: q and k norms, the experts, no biases, no sliding window;
     * the training coefficients (router_aux_loss_coef) left out */
    if (s->moe_experts > 0 && s->qk_norm)
        return snprintf(
            buf, cap,
            "{\n  \"architectures\": [\"Qwen3MoeForCausalLM\"],\n  \"model_type\": \"qwen3_moe\",\n"
            "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"moe_intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
            "  \"num_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n  \"decoder_sparse_step\": %lld,\n"
            "  \"mlp_only_layers\": [],\n  \"norm_topk_prob\": %s,\n  \"output_router_logits\": false,\n"
            "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
            "  \"rope_scaling\": %s,\n  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n"
            "  \"sliding_window\": null,\n  \"max_window_layers\": %lld,\n  \"attention_dropout\": 0.0,\n"
            "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n"
            "%s  \"torch_dtype\": \"%s\"\n}\n",
            s->vocab_size, s->n_embd, s->ffn_hidden, s->moe_ffn_hidden, s->n_layer, s->n_head, s->n_kv_head,
            s->head_dim, s->moe_experts, s->moe_top_k, s->moe_every, s->moe_top_k > 1 ? "true" : "false", s->block_size,
            eps, theta, rope, s->n_layer, s->tied ? "true" : "false", eos, torch_dtype);
    /* Qwen3: q and k norms, no biases (attention_bias would put one on
     * o_proj too), no sliding window on any layer */
    if (s->qk_norm)
        return snprintf(buf, cap,
                        "{\n  \"architectures\": [\"Qwen3ForCausalLM\"],\n  \"model_type\": \"qwen3\",\n"
                        "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
                        "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
                        "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
                        "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
                        "  \"rope_scaling\": %s,\n  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n"
                        "  \"sliding_window\": null,\n  \"max_window_layers\": %lld,\n  \"attention_dropout\": 0.0,\n"
                        "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n"
                        "%s  \"torch_dtype\": \"%s\"\n}\n",
                        s->vocab_size, s->n_embd, s->ffn_hidden, s->n_layer, s->n_head, s->n_kv_head, s->head_dim,
                        s->block_size, eps, theta, rope, s->n_layer, s->tied ? "true" : "false", eos, torch_dtype);
    /* Qwen2: q, k and v with biases, no sliding window on any layer */
    if (s->qkv_bias)
        return snprintf(
            buf, cap,
            "{\n  \"architectures\": [\"Qwen2ForCausalLM\"],\n  \"model_type\": \"qwen2\",\n"
            "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
            "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
            "  \"rope_scaling\": %s,\n  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
            "  \"max_window_layers\": %lld,\n  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n"
            "  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n%s  \"torch_dtype\": \"%s\"\n}\n",
            s->vocab_size, s->n_embd, s->ffn_hidden, s->n_layer, s->n_head, s->n_kv_head, s->head_dim, s->block_size,
            eps, theta, rope, s->n_layer, s->tied ? "true" : "false", eos, torch_dtype);
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                    "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
                    "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
                    "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
                    "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
                    "  \"rope_scaling\": %s,\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n"
                    "  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n  \"initializer_range\": 0.02,\n"
                    "  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n%s  \"torch_dtype\": \"%s\"\n}\n",
                    s->vocab_size, s->n_embd, s->ffn_hidden, s->n_layer, s->n_head, s->n_kv_head, s->head_dim,
                    s->block_size, eps, theta, rope, s->tied ? "true" : "false", eos, torch_dtype);
}
