#include "checkpoint/weights_import.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/llama_hf.h"
#include "checkpoint/hf_experts.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_json.h"
#include "model/tied.h"

#define NAME_CAP 512

struct plait_weights {
    char *path;
    plait_st_file *st;
    plait_st_file **shards; /* llama: the other files of a sharded model (index.json), n_shards */
    size_t n_shards;
    const plait_model_spec *spec;
    const plait_config *cfg; /* the run's [model] keys; NULL: not checked against a plait file's */
    int llama;
    plait_gpt2_orientation orientation;
    const plait_st_tensor **tensor; /* [n_params] by global index; NULL for tied copies */
    /* [n_params]: a stacked expert tensor read from Hugging Face's one
     * tensor an expert (hf_experts.h), its experts' in order; NULL for the
     * others */
    const plait_st_tensor ***parts;
    /* whose expert names the file has (Mixtral's or Qwen3-MoE's: a missing
     * expert_bias reads as 0), or none */
    plait_hf_experts experts;
    char note[512];
    /* the last parameter converted to plait's orientation and shape (transposed, padded) */
    pthread_mutex_t lock;
    int32_t cached;
    float *cache;
};

static size_t spec_numel(const plait_param *p) {
    size_t n = 1;
    for (int32_t d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

static void shape_text(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static const char *format_of(const plait_weights *w) {
    if (w->experts == PLAIT_HF_EXPERTS_MIXTRAL) return "Hugging Face MixtralForCausalLM names, one tensor an expert";
    if (w->experts) return "Hugging Face Qwen3MoeForCausalLM names, one tensor an expert";
    return w->llama ? "Llama-family names (Hugging Face LlamaForCausalLM, plait)"
                    : plait_gpt2_orientation_name(w->orientation);
}

static plait_status shape_error(const plait_weights *w, const plait_st_tensor *t, int32_t ndim,
                                const int64_t *want, const char *why) {
    char have[128], need[128];
    shape_text(have, sizeof have, t->ndim, t->shape);
    shape_text(need, sizeof need, ndim, want);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: tensor '%s' has shape %s, the config needs %s%s (%s)", w->path,
                           t->name, have, need, why, format_of(w));
}

/* The parameter's global index by canonical name, or -1. */
static int32_t param_of(const plait_model_spec *spec, const char *name) {
    for (int32_t i = 0; i < spec->n_params; i++)
        if (!plait_tied_is_copy(&spec->params[i]) && strcmp(spec->params[i].name, name) == 0) return i;
    return -1;
}

static int is_named(const plait_param *p, const char *name) { return strcmp(p->name, name) == 0; }

/* A dense block's MLP input weight (transformer.h.N.mlp.c_fc.weight): its
 * shape tells the file's orientation. Not an expert's (mlp.experts.*,
 * mlp.shared_experts.*). */
static int dense_c_fc(const char *name) {
    static const char suffix[] = ".mlp.c_fc.weight";
    const size_t n = strlen(name), k = sizeof suffix - 1;
    int layer = -1, end = 0;
    return n > k && strcmp(name + n - k, suffix) == 0 && sscanf(name, "transformer.h.%d%n", &layer, &end) == 1 &&
           layer >= 0 && (size_t)end == n - k;
}

/* The file's orientation from the first dense block's mlp.c_fc.weight.
 * A mixture of experts whose every block is sparse has none: such a file
 * is plait's own (Hugging Face's GPT-2 has no experts, and plait exports
 * none as GPT-2), saved as nn.Linear weights. */
static plait_status detect_orientation(plait_weights *w) {
    const plait_model_spec *s = w->spec;
    const int64_t C = s->n_embd;
    const plait_st_tensor *experts = NULL;
    for (size_t i = 0; i < plait_st_count(w->st); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(w->st, i);
        char name[NAME_CAP];
        plait_gpt2_canonical(t->name, name, sizeof name);
        if (!experts && strstr(name, ".mlp.experts.") && t->ndim == 3) experts = t;
        if (!dense_c_fc(name)) continue;
        if (t->ndim == 2 && t->shape[0] == C && t->shape[1] == 4 * C) {
            w->orientation = PLAIT_GPT2_CONV1D;
            return PLAIT_OK;
        }
        if (t->ndim == 2 && t->shape[0] == 4 * C && t->shape[1] == C) {
            w->orientation = PLAIT_GPT2_LINEAR;
            return PLAIT_OK;
        }
        char have[128];
        shape_text(have, sizeof have, t->ndim, t->shape);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' has shape %s, the config (n_embd = %lld) needs [%lld, %lld] "
                               "(Hugging Face Conv1D weights) or [%lld, %lld] (plait/nanoGPT Linear weights)",
                               w->path, t->name, have, (long long)C, (long long)C, (long long)(4 * C),
                               (long long)(4 * C), (long long)C);
    }
    if (experts) {
        w->orientation = PLAIT_GPT2_LINEAR;
        return PLAIT_OK;
    }
    if (plait_st_find(w->st, "model.embed_tokens.weight"))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: a Llama-family model (tensor 'model.embed_tokens.weight'), but [model] "
                               "arch = gpt: give model.arch=llama and the model's shape to load it",
                               w->path);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: no tensor 'transformer.h.0.mlp.c_fc.weight' (or 'h.0.mlp.c_fc.weight'): not "
                           "a GPT-2 model file",
                           w->path);
}

/* File f's tensor t (canonical name `name`) as parameter gi, or as the
 * tied head: each at most once; anything else is no parameter of this model. */
static plait_status place(plait_weights *w, const plait_st_file *f, const plait_st_tensor *t, const char *name,
                          int32_t gi, int is_head, const plait_st_tensor **head) {
    if (is_head) {
        if (*head)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: tensors '%s' and '%s' are both the head",
                                   w->path, (*head)->name, t->name);
        *head = t;
        return PLAIT_OK;
    }
    if (gi < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' is not a parameter of this model ([model] arch = %s, "
                               "n_layer = %d): a model of another shape%s?",
                               plait_st_path(f), t->name, w->spec->arch, (int)w->spec->n_layer,
                               w->llama ? " or family" : "");
    const plait_st_tensor *other = w->tensor[gi];
    /* an expert's tensor of Hugging Face's, whichever came first */
    for (int64_t e = 0; !other && w->parts && w->parts[gi] && e < w->spec->params[gi].shape[0]; e++)
        other = w->parts[gi][e];
    if (other)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: tensors '%s' and '%s' are both '%s'", w->path,
                               other->name, t->name, name);
    w->tensor[gi] = t;
    return PLAIT_OK;
}

/* Every tensor of the file is a parameter of this model (or a mask buffer,
 * or the tied head), each at most once. */
static plait_status map_tensors(plait_weights *w, const plait_st_tensor **head) {
    const plait_model_spec *s = w->spec;
    *head = NULL;
    for (size_t i = 0; i < plait_st_count(w->st); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(w->st, i);
        char name[NAME_CAP];
        plait_gpt2_kind kind = plait_gpt2_canonical(t->name, name, sizeof name);
        if (kind == PLAIT_GPT2_BUFFER) continue; /* whatever its dtype: never read */
        plait_status st = plait_st_require_float(w->st, t);
        if (st != PLAIT_OK) return st;
        int32_t gi = kind == PLAIT_GPT2_PARAM ? param_of(s, name) : -1;
        st = place(w, w->st, t, name, gi, kind == PLAIT_GPT2_HEAD, head);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static void add_note(plait_weights *w, const char *fmt, long long a, long long b, long long c) {
    size_t n = strlen(w->note);
    if (n + 2 >= sizeof w->note) return;
    if (n) n += (size_t)snprintf(w->note + n, sizeof w->note - n, "; ");
    snprintf(w->note + n, sizeof w->note - n, fmt, a, b, c);
}

/* A stacked expert tensor read from Hugging Face's: every expert's tensor
 * present, each with the shape of the stacked one's slice. */
static plait_status check_parts(const plait_weights *w, int32_t gi) {
    const plait_param *p = &w->spec->params[gi];
    for (int64_t e = 0; e < p->shape[0]; e++) {
        const plait_st_tensor *t = w->parts && w->parts[gi] ? w->parts[gi][e] : NULL;
        char name[NAME_CAP];
        plait_hf_experts_to_hf(w->experts, p->name, (long long)e, name, sizeof name);
        if (!t)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: no tensor '%s' (the config has moe_experts = %lld): a model of "
                                   "another shape?",
                                   w->path, name, (long long)p->shape[0]);
        if (t->ndim != 2 || t->shape[0] != p->shape[1] || t->shape[1] != p->shape[2])
            return shape_error(w, t, 2, p->shape + 1, " (one expert's slice of the stacked tensor)");
    }
    return PLAIT_OK;
}

/* Each parameter present with the config's shape (in the file's
 * orientation; a llama's exactly: no relaxation applies to its names). */
static plait_status check_shapes(plait_weights *w) {
    const plait_model_spec *s = w->spec;
    for (int32_t gi = 0; gi < s->n_params; gi++) {
        const plait_param *p = &s->params[gi];
        if (plait_tied_is_copy(p)) continue;
        const plait_st_tensor *t = w->tensor[gi];
        if ((w->parts && w->parts[gi]) ||
            (!t && w->experts && plait_hf_experts_to_hf(w->experts, p->name, 0, NULL, 0) == PLAIT_EXPERT_NAME_EXPERT)) {
            plait_status st = check_parts(w, gi);
            if (st != PLAIT_OK) return st;
            continue;
        }
        if (!t && w->experts && plait_hf_experts_to_hf(w->experts, p->name, 0, NULL, 0) == PLAIT_EXPERT_NAME_BIAS)
            continue;
        if (!t)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: no tensor '%s' (the config has n_layer = %d, arch = %s%s): a model "
                                   "of another shape?",
                                   w->path, p->name, (int)s->n_layer, s->arch,
                                   strcmp(p->name, "lm_head.weight") == 0 ? ", an untied head" : "");
        int64_t want[2] = {p->shape[0], p->ndim > 1 ? p->shape[1] : 0};
        int transposed = !w->llama && w->orientation == PLAIT_GPT2_CONV1D && plait_gpt2_conv1d_weight(p->name);
        if (transposed) {
            want[0] = p->shape[1];
            want[1] = p->shape[0];
        }
        int rows_ok = t->ndim == p->ndim && t->shape[0] == want[0];
        const char *why = "";
        if (is_named(p, "transformer.wte.weight")) {
            rows_ok = t->ndim == 2 && t->shape[0] >= 1 && t->shape[0] <= want[0];
            why = " (or fewer rows: the vocabulary padded with zero rows)";
        } else if (is_named(p, "transformer.wpe.weight")) {
            rows_ok = t->ndim == 2 && t->shape[0] >= want[0];
            why = " (or more rows: positions cut to block_size)";
        }
        /* a stacked expert tensor [experts, out, in]: every dimension as the config's */
        for (int32_t d = 2; rows_ok && d < p->ndim; d++) rows_ok = t->shape[d] == p->shape[d];
        if (!rows_ok || (p->ndim > 1 && t->shape[1] != want[1]))
            return shape_error(w, t, p->ndim, p->ndim > 2 ? p->shape : want, why);
        if (is_named(p, "transformer.wte.weight") && t->shape[0] < want[0])
            add_note(w, "token table: %lld rows in the file, rows %lld..%lld are zero", (long long)t->shape[0],
                     (long long)t->shape[0], (long long)want[0] - 1);
        if (is_named(p, "transformer.wpe.weight") && t->shape[0] > want[0])
            add_note(w, "position table: %lld rows in the file, the first %lld used", (long long)t->shape[0],
                     (long long)want[0], 0);
    }
    return PLAIT_OK;
}

/* A stored head must be the token table itself: plait ties them. */
static plait_status check_head(plait_weights *w, const plait_st_tensor *head) {
    if (!head) return PLAIT_OK;
    const plait_st_tensor *wte =
        w->tensor[param_of(w->spec, w->llama ? "model.embed_tokens.weight" : "transformer.wte.weight")];
    if (head->ndim != wte->ndim || head->shape[0] != wte->shape[0] || head->shape[1] != wte->shape[1])
        return shape_error(w, head, wte->ndim, wte->shape, " (the token table's: the head is tied to it)");
    if (memcmp(head->data, wte->data, wte->bytes) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: '%s' differs from '%s': plait ties the output head to the token table "
                               "and cannot load an untied head",
                               w->path, head->name, wte->name);
    return PLAIT_OK;
}

/* Weights that start a run are finite: a NaN or Inf is named with its
 * tensor and element, not left to surface as a diverged run. */
static plait_status check_finite_tensor(const plait_weights *w, const plait_st_tensor *t) {
    for (size_t k = 0; k < t->numel; k++) {
        if (isfinite(t->data[k])) continue;
        double stored = 0;
        if (!strcmp(t->dtype, "F64")) memcpy(&stored, t->raw + 8 * k, sizeof stored);
        if (isfinite(stored) && stored != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: tensor '%s' holds %g at element %zu of %zu, past float32's "
                                   "range (+-3.4e38): plait trains in float32 and cannot start from it",
                                   w->path, t->name, stored, k, t->numel);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' holds a non-finite value (%s) at element %zu of %zu: "
                               "the weights are damaged or were saved by a run that had diverged; they "
                               "cannot start a run",
                               w->path, t->name, isnan(t->data[k]) ? "NaN" : "Inf", k, t->numel);
    }
    return PLAIT_OK;
}

/* Weights that start a run are finite: a NaN or Inf is named with its
 * tensor and element, not left to surface as a diverged run. Buffers
 * (attention masks) are never read, so never checked. */
static plait_status check_finite(const plait_weights *w, const plait_st_tensor *head) {
    plait_status st = head ? check_finite_tensor(w, head) : PLAIT_OK;
    for (int32_t gi = 0; st == PLAIT_OK && gi < w->spec->n_params; gi++)
        if (w->tensor[gi]) st = check_finite_tensor(w, w->tensor[gi]);
    for (int32_t gi = 0; w->parts && st == PLAIT_OK && gi < w->spec->n_params; gi++)
        for (int64_t e = 0; w->parts[gi] && st == PLAIT_OK && e < w->spec->params[gi].shape[0]; e++)
            st = check_finite_tensor(w, w->parts[gi][e]);
    return st;
}

/* Shapes cannot tell the head count: a plait checkpoint records it. */
static plait_status check_heads(const plait_weights *w) {
    const char *v = plait_st_metadata(w->st, "plait.model.n_head");
    if (!v || atoll(v) == (long long)w->spec->n_head) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: the model was trained with n_head = %s, the config has n_head = %d (the "
                           "shapes agree, the attention would not)",
                           w->path, v, (int)w->spec->n_head);
}

/* A plait checkpoint or export records its arch: one of another arch is
 * refused by name rather than by its first unknown tensor. */
static plait_status check_arch(const plait_weights *w) {
    const char *arch = plait_st_metadata(w->st, "plait.model.arch");
    if (!arch || strcmp(arch, w->spec->arch) == 0) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: a plait model of [model] arch = %s, but this run has arch = %s: init_from "
                           "reads a model of the run's arch (%s); give model.arch=%s and that model's shape to "
                           "start from this one",
                           w->path, arch, w->spec->arch,
                           strcmp(w->spec->arch, "llama") == 0
                               ? "a Hugging Face Llama directory, or a plait llama checkpoint, run or export"
                               : "GPT-2's weights, or a plait gpt checkpoint, run or export",
                           arch);
}

/* A plait checkpoint or export records its mixture of experts' keys (a
 * dense one none: moe_experts = 0): each that shapes the model must be the
 * run's, named, rather than surface as a tensor of another shape, or a
 * dense model's MLPs missing. */
static plait_status check_moe_meta(const plait_weights *w) {
    if (!w->cfg || !plait_st_metadata(w->st, "plait.model.arch")) return PLAIT_OK;
    const char *experts = plait_st_metadata(w->st, "plait.model.moe_experts");
    for (size_t i = 0; plait_ckpt_moe_shape_keys[i]; i++) {
        char meta[64], now[64];
        snprintf(meta, sizeof meta, "plait.model.%s", plait_ckpt_moe_shape_keys[i]);
        const char *was = i == 0 && !experts ? "0" : plait_st_metadata(w->st, meta);
        plait_value v;
        if (!was || plait_config_get(w->cfg, "model", plait_ckpt_moe_shape_keys[i], &v) != PLAIT_OK) continue;
        if (v.type == PLAIT_KEY_INT) snprintf(now, sizeof now, "%lld", (long long)v.i);
        else snprintf(now, sizeof now, "%s", v.s ? v.s : "");
        if (i == 0 && strcmp(now, "0") == 0 && !experts) return PLAIT_OK; /* dense, both */
        if (strcmp(was, now) == 0) continue;
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: the model was trained with [model] %s = %s, the run has %s = %s: "
                               "init_from starts from the same mixture of experts (give model.%s=%s to load it)",
                               w->path, plait_ckpt_moe_shape_keys[i], was, plait_ckpt_moe_shape_keys[i], now,
                               plait_ckpt_moe_shape_keys[i], was);
    }
    return PLAIT_OK;
}

/* A GPT-2 config.json beside the weights (a save_pretrained directory's,
 * plait export's, nanoGPT's GPTConfig): what the shapes cannot tell must
 * be what plait computes. The head count must be the run's; GPT2Config's
 * layer_norm_epsilon, activation_function and attention scaling must be
 * plait's GPT (LayerNorm eps 1e-5, tanh GELU, 1/sqrt(head size)). A key
 * left out takes GPT2Config's default where the file says model_type
 * gpt2, and is not compared otherwise (nanoGPT's has no model_type); a
 * file of another model_type is left to the tensors' names. */
static plait_status check_gpt2_config(const char *path, const plait_model_spec *spec) {
    char *text = NULL;
    size_t len = 0;
    plait_status st = plait_fs_read_small_file(path, 1 << 20, &text, &len);
    plait_json_doc *doc = NULL;
    if (st == PLAIT_OK) st = plait_json_parse_any(text, len, path, &doc);
    const plait_json *root = st == PLAIT_OK ? plait_json_root(doc) : NULL;
    if (st == PLAIT_OK && root->type != PLAIT_JSON_OBJECT)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: not a JSON object (a model's config.json is one)",
                             path);
    const plait_json *type = root && st == PLAIT_OK ? plait_json_get(root, "model_type") : NULL;
    const int gpt2 = type && type->type == PLAIT_JSON_STRING && !strcmp(type->str, "gpt2");
    if (st == PLAIT_OK && (gpt2 || !type)) {
        const plait_json *heads = plait_json_get(root, "n_head");
        if (heads && heads->type != PLAIT_JSON_INT)
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: 'n_head' is not an integer", path);
        else if ((heads || gpt2) && (heads ? heads->num : 12) != spec->n_head)
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "weights %s: n_head = %lld%s, but the run has [model] n_head = %d: the shapes agree, "
                                 "the attention would not (give model.n_head=%lld to load it)",
                                 path, (long long)(heads ? heads->num : 12), heads ? "" : " (GPT2Config's default)",
                                 (int)spec->n_head, (long long)(heads ? heads->num : 12));
    }
    if (st == PLAIT_OK && gpt2) {
        const plait_json *eps = plait_json_get(root, "layer_norm_epsilon");
        const double e = !eps                           ? 1e-5
                         : eps->type == PLAIT_JSON_REAL ? eps->real
                         : eps->type == PLAIT_JSON_INT  ? (double)eps->num
                                                        : -1;
        if (!(fabs(e - 1e-5) <= 1e-12))
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "weights %s: layer_norm_epsilon is not 1e-05: plait's GPT LayerNorm adds 1e-5, so "
                                 "the model could not compute what it was trained to",
                                 path);
    }
    if (st == PLAIT_OK && gpt2) {
        const plait_json *act = plait_json_get(root, "activation_function");
        const char *a = !act ? "gelu_new" : act->type == PLAIT_JSON_STRING ? act->str : NULL;
        if (!a || (strcmp(a, "gelu_new") && strcmp(a, "gelu_pytorch_tanh") && strcmp(a, "gelu_fast")))
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "weights %s: activation_function = %s%s%s: plait's GPT computes GELU's tanh "
                                 "approximation (allowed: gelu_new, gelu_pytorch_tanh, gelu_fast)",
                                 path, a ? "'" : "", a ? a : "(not a string)", a ? "'" : "");
    }
    static const char *const flags[] = {"scale_attn_weights", "scale_attn_by_inverse_layer_idx"};
    for (int i = 0; i < 2 && st == PLAIT_OK && gpt2; i++) {
        const plait_json *f = plait_json_get(root, flags[i]);
        const int want = i == 0;
        if (f && (f->type != PLAIT_JSON_BOOL || (int)f->num != want))
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "weights %s: %s is not %s: plait's GPT scales attention by 1/sqrt(head size) alone, "
                                 "so the model could not compute what it was trained to",
                                 path, flags[i], want ? "true" : "false");
    }
    plait_json_free(doc);
    free(text);
    return st;
}

static plait_status open_gpt(plait_weights *w) {
    const plait_st_tensor *head = NULL;
    plait_status st = check_arch(w);
    if (st == PLAIT_OK) st = check_moe_meta(w);
    if (st == PLAIT_OK) st = detect_orientation(w);
    if (st == PLAIT_OK) st = map_tensors(w, &head);
    if (st == PLAIT_OK) st = check_shapes(w);
    if (st == PLAIT_OK) st = check_head(w, head);
    if (st == PLAIT_OK) st = check_heads(w);
    if (st == PLAIT_OK) st = check_finite(w, head);
    return st;
}

/* ---- the llama arch: the file's names are plait's ---------------------- */

/* Older transformers saved each layer's rotary frequencies as a buffer:
 * computed, not learned, never read. */
static int llama_buffer(const char *name) {
    static const char suffix[] = ".rotary_emb.inv_freq";
    size_t n = strlen(name);
    return n >= sizeof suffix - 1 && strcmp(name + n - (sizeof suffix - 1), suffix) == 0;
}

/* Hugging Face's tensor t of expert `expert` as that expert's slice of plait's
 * stacked tensor `name`: each at most once, never beside the stacked
 * tensor itself. */
static plait_status place_part(plait_weights *w, const plait_st_file *f, const plait_st_tensor *t, const char *name,
                               long long expert) {
    const int32_t gi = param_of(w->spec, name);
    if (gi < 0 || w->spec->params[gi].ndim != 3)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' is an expert's, but this model ([model] arch = %s, n_layer = "
                               "%d) has no '%s': a mixture of experts needs [model] moe_experts > 0 (and moe_every "
                               "= 1 for Mixtral's every block, Qwen3-MoE's decoder_sparse_step)",
                               plait_st_path(f), t->name, w->spec->arch, (int)w->spec->n_layer, name);
    const long long E = (long long)w->spec->params[gi].shape[0];
    if (expert >= E)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' is expert %lld, but the run has [model] moe_experts = %lld "
                               "(experts 0 .. %lld)",
                               plait_st_path(f), t->name, expert, E, E - 1);
    if (!w->parts) w->parts = calloc((size_t)w->spec->n_params, sizeof *w->parts);
    if (w->parts && !w->parts[gi]) w->parts[gi] = calloc((size_t)E, sizeof **w->parts);
    if (!w->parts || !w->parts[gi]) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    const plait_st_tensor *other = w->tensor[gi] ? w->tensor[gi] : w->parts[gi][expert];
    if (other)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: tensors '%s' and '%s' are both '%s'%s", w->path,
                               other->name, t->name, name, w->tensor[gi] ? "" : "'s expert");
    w->parts[gi][expert] = t;
    return PLAIT_OK;
}

static plait_status llama_map_file(plait_weights *w, const plait_st_file *f, const plait_st_tensor **head) {
    const plait_model_spec *s = w->spec;
    for (size_t i = 0; i < plait_st_count(f); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(f, i);
        const char *name = t->name;
        if (strncmp(name, "_orig_mod.", 10) == 0) name += 10; /* torch.compile's prefix */
        if (llama_buffer(name)) continue;
        plait_status st = plait_st_require_float(f, t);
        if (st != PLAIT_OK) return st;
        char plait_name[NAME_CAP];
        long long expert = -1;
        plait_hf_experts family = PLAIT_HF_EXPERTS_NONE;
        plait_expert_name kind = plait_hf_experts_from_hf(name, plait_name, sizeof plait_name, &expert, &family);
        if (kind != PLAIT_EXPERT_NAME_NONE && w->experts && family != w->experts)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: tensor '%s' has %s's expert names where others have %s's: one "
                                   "model's files hold one family's",
                                   w->path, name, family == PLAIT_HF_EXPERTS_MIXTRAL ? "Mixtral" : "Qwen3-MoE",
                                   family == PLAIT_HF_EXPERTS_MIXTRAL ? "Qwen3-MoE" : "Mixtral");
        if (kind != PLAIT_EXPERT_NAME_NONE) w->experts = family;
        if (kind == PLAIT_EXPERT_NAME_EXPERT) {
            st = place_part(w, f, t, plait_name, expert);
            if (st != PLAIT_OK) return st;
            continue;
        }
        if (kind == PLAIT_EXPERT_NAME_ROUTER) name = plait_name;
        int32_t gi = param_of(s, name);
        /* only a tied head is no parameter of its own */
        st = place(w, f, t, name, gi, gi < 0 && strcmp(name, "lm_head.weight") == 0, head);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

/* The one file name a sharded model's index names, checked to stay in its
 * directory. */
static plait_status shard_name_ok(const char *index, const char *tensor, const char *file) {
    size_t n = strlen(file);
    if (n > 12 && !strchr(file, '/') && strcmp(file, "..") != 0 && strcmp(file + n - 12, ".safetensors") == 0)
        return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: weight_map names '%s' for '%s': allowed is a .safetensors file beside the "
                           "index",
                           index, file, tensor);
}

/* A sharded save_pretrained model: model.safetensors.index.json's
 * weight_map names the file of each tensor; each file is opened once and
 * each tensor must be in the file the index names. */
static plait_status llama_open_shards(plait_weights *w, const char *dir, const char *index) {
    char *text = NULL;
    size_t len = 0;
    plait_json_doc *doc = NULL;
    plait_status st = plait_fs_read_small_file(index, 64u << 20, &text, &len);
    if (st == PLAIT_OK) st = plait_json_parse_any(text, len, index, &doc);
    const plait_json *map = st == PLAIT_OK ? plait_json_get(plait_json_root(doc), "weight_map") : NULL;
    if (st == PLAIT_OK && (!map || map->type != PLAIT_JSON_OBJECT || !map->count))
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: no 'weight_map' object naming each tensor's file",
                             index);
    const char **names = st == PLAIT_OK ? calloc(map->count, sizeof *names) : NULL;
    plait_st_file **files = st == PLAIT_OK ? calloc(map->count, sizeof *files) : NULL;
    if (st == PLAIT_OK && (!names || !files)) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    size_t n = 0;
    for (const plait_json *e = st == PLAIT_OK ? map->child : NULL; e && st == PLAIT_OK; e = e->next) {
        if (e->type != PLAIT_JSON_STRING) {
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: weight_map['%s'] is not a file name", index,
                                 e->key);
            break;
        }
        st = shard_name_ok(index, e->key, e->str);
        size_t f = 0;
        while (f < n && strcmp(names[f], e->str) != 0) f++;
        if (st == PLAIT_OK && f == n) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, e->str);
            st = plait_st_open(path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &files[n]);
            if (st == PLAIT_OK) names[n++] = e->str;
        }
        if (st == PLAIT_OK && !plait_st_find(files[f], e->key))
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: no tensor '%s', which %s places there",
                                 plait_st_path(files[f]), e->key, index);
    }
    /* and no tensor the index does not name */
    for (size_t f = 0; st == PLAIT_OK && f < n; f++)
        for (size_t i = 0; st == PLAIT_OK && i < plait_st_count(files[f]); i++) {
            const plait_st_tensor *t = plait_st_tensor_at(files[f], i);
            const plait_json *where = plait_json_get(map, t->name);
            if (!where || where->type != PLAIT_JSON_STRING || strcmp(where->str, names[f]) != 0)
                st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                     "weights %s: tensor '%s' is not placed in this file by %s (a shard of another "
                                     "save?)",
                                     plait_st_path(files[f]), t->name, index);
        }
    if (st == PLAIT_OK) {
        w->st = files[0];
        w->shards = files;
        w->n_shards = n;
        files = NULL;
    }
    for (size_t f = 0; files && f < n; f++) plait_st_close(files[f]);
    free(files);
    free(names);
    plait_json_free(doc);
    free(text);
    return st;
}

/* What a plait checkpoint recorded of the llama keys equals the run's. */
static plait_status llama_check_meta(const plait_weights *w, const plait_llama_shape *want) {
    for (size_t i = 0; plait_llama_ckpt_keys[i]; i++) {
        char key[64], now[64];
        snprintf(key, sizeof key, "plait.model.%s", plait_llama_ckpt_keys[i]);
        const char *was = plait_st_metadata(w->st, key);
        plait_llama_key_text(want, i, now, sizeof now);
        if (was && strcmp(was, now) != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: the model was trained with [model] %s = %s, the run has %s = %s "
                                   "(give model.%s=%s to load it)",
                                   w->path, plait_llama_ckpt_keys[i], was, plait_llama_ckpt_keys[i], now,
                                   plait_llama_ckpt_keys[i], was);
    }
    const char *heads = plait_st_metadata(w->st, "plait.model.n_head");
    if (heads && atoll(heads) != want->n_head)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: the model was trained with n_head = %s, the config has n_head = %lld (the "
                               "shapes agree, the attention would not)",
                               w->path, heads, want->n_head);
    return PLAIT_OK;
}

/* `dir` (NULL for a file given alone) holds the model: model.safetensors,
 * or the shards model.safetensors.index.json names; and its config.json
 * when there is one (a plait checkpoint has none: its metadata is checked). */
static plait_status open_llama(plait_weights *w, const char *dir, const plait_config *cfg) {
    plait_llama_shape want;
    if (!cfg)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "weights %s: a llama model is checked against its [model] "
                                                      "keys, and none were given", w->path);
    plait_status st = plait_llama_shape_of(w->spec, cfg, &want);
    if (st != PLAIT_OK) return st;
    char index[PATH_MAX], config[PATH_MAX];
    struct stat sb;
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir ? dir : ".");
    if (dir && stat(w->path, &sb) != 0 && stat(index, &sb) == 0) {
        free(w->path);
        w->path = strdup(index);
        if (!w->path) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        st = llama_open_shards(w, dir, index);
    } else {
        st = plait_st_open(w->path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &w->st);
    }
    if (st != PLAIT_OK) return plait_wrap_error(st, "[run] init_from");
    /* config.json beside the model: the directory's, or the file's own directory's */
    if (dir) {
        snprintf(config, sizeof config, "%s/config.json", dir);
    } else {
        snprintf(config, sizeof config, "%s", w->path);
        char *slash = strrchr(config, '/');
        snprintf(slash ? slash + 1 : config, sizeof config - (size_t)(slash ? slash + 1 - config : 0), "config.json");
    }
    st = check_arch(w);
    if (st == PLAIT_OK && stat(config, &sb) == 0) st = plait_llama_check_hf_config(config, &want);
    if (st == PLAIT_OK) st = llama_check_meta(w, &want);
    if (st == PLAIT_OK) st = check_moe_meta(w);
    const plait_st_tensor *head = NULL;
    for (size_t f = 0; st == PLAIT_OK && f < (w->n_shards ? w->n_shards : 1); f++)
        st = llama_map_file(w, w->n_shards ? w->shards[f] : w->st, &head);
    if (st == PLAIT_OK) st = check_shapes(w);
    if (st == PLAIT_OK) st = check_head(w, head);
    if (st == PLAIT_OK) st = check_finite(w, head);
    return st;
}

plait_status plait_weights_open(const char *path, const plait_model_spec *spec, const plait_config *cfg,
                                plait_weights **out) {
    *out = NULL;
    const int llama = strcmp(spec->arch, "llama") == 0;
    if (strcmp(spec->arch, "gpt") != 0 && !llama)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] init_from = %s: pretrained weights are GPT-2's or a Llama's; [model] arch = %s",
                               path, spec->arch);
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char newest[PATH_MAX];
    const char *role = is_dir ? plait_ckpt_dir_role(path) : NULL;
    if (role && strcmp(role, "run directory") == 0) {
        /* a run directory, as sample and export read one: its newest checkpoint that opens */
        plait_ckpt *ck = NULL;
        plait_status found = plait_ckpt_open_named(path, &ck);
        if (found != PLAIT_OK) return plait_wrap_error(found, "[run] init_from");
        snprintf(newest, sizeof newest, "%s", plait_ckpt_dir(ck));
        plait_ckpt_close(ck);
        path = newest;
    }
    plait_weights *w = calloc(1, sizeof *w);
    if (!w) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&w->lock, NULL);
    w->spec = spec;
    w->cfg = cfg;
    w->llama = llama;
    w->cached = -1;
    size_t len = strlen(path) + sizeof "/model.safetensors";
    w->path = malloc(len);
    w->tensor = calloc((size_t)spec->n_params, sizeof *w->tensor);
    plait_status st = PLAIT_OK;
    if (!w->path || !w->tensor) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    snprintf(w->path, len, "%s%s", path, is_dir ? "/model.safetensors" : "");
    if (!is_dir && stat(path, &sb) != 0) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "[run] init_from = %s: %s", path, strerror(errno));
        goto fail;
    }
    if (llama) {
        st = open_llama(w, is_dir ? path : NULL, cfg);
    } else {
        st = plait_st_open(w->path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &w->st);
        st = st == PLAIT_OK ? open_gpt(w) : plait_wrap_error(st, "[run] init_from");
        /* config.json beside the model: the directory's, or the file's own directory's */
        char config[PATH_MAX];
        snprintf(config, sizeof config, "%s", w->path);
        char *slash = strrchr(config, '/');
        snprintf(slash ? slash + 1 : config, sizeof config - (size_t)(slash ? slash + 1 - config : 0), "config.json");
        if (st == PLAIT_OK && stat(config, &sb) == 0) st = check_gpt2_config(config, spec);
    }
    if (st != PLAIT_OK) goto fail;
    *out = w;
    return PLAIT_OK;
fail:
    plait_weights_close(w);
    return st;
}

void plait_weights_close(plait_weights *w) {
    if (!w) return;
    if (w->n_shards)
        for (size_t f = 0; f < w->n_shards; f++) plait_st_close(w->shards[f]);
    else if (w->st)
        plait_st_close(w->st);
    free(w->shards);
    pthread_mutex_destroy(&w->lock);
    free(w->cache);
    for (int32_t gi = 0; w->parts && gi < w->spec->n_params; gi++) free(w->parts[gi]);
    free(w->parts);
    free(w->tensor);
    free(w->path);
    free(w);
}

const char *plait_weights_path(const plait_weights *w) { return w->path; }
plait_gpt2_orientation plait_weights_orientation(const plait_weights *w) { return w->orientation; }
const char *plait_weights_format(const plait_weights *w) { return format_of(w); }
const char *plait_weights_note(const plait_weights *w) { return w->note; }

/* Parameter gi that no one tensor of the file holds, into the cache: a
 * stacked expert tensor from its experts' (in expert order), or Hugging
 * Face's missing expert_bias as zeros. Called with the lock held. */
static plait_status assembled(plait_weights *w, int32_t gi, const float **out) {
    const plait_param *p = &w->spec->params[gi];
    if (w->cached != gi) {
        free(w->cache);
        w->cached = -1;
        const size_t n = spec_numel(p);
        w->cache = calloc(n ? n : 1, sizeof(float));
        if (!w->cache)
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "weights %s: out of memory for '%s'", w->path, p->name);
        const size_t slice = p->ndim == 3 ? n / (size_t)p->shape[0] : 0;
        for (int64_t e = 0; w->parts && w->parts[gi] && e < p->shape[0]; e++)
            memcpy(w->cache + (size_t)e * slice, w->parts[gi][e]->data, slice * sizeof(float));
        w->cached = gi;
    }
    *out = w->cache;
    return PLAIT_OK;
}

/* Parameter gi as a full tensor in plait's orientation: the mapped data itself
 * when the file already holds it so (a longer position table included: its
 * first rows are contiguous), else converted into the cache. Called with
 * the lock held. */
static plait_status full_tensor(plait_weights *w, int32_t gi, const float **out) {
    const plait_param *p = &w->spec->params[gi];
    const plait_st_tensor *t = w->tensor[gi];
    if (!t) return assembled(w, gi, out);
    int transposed = !w->llama && w->orientation == PLAIT_GPT2_CONV1D && plait_gpt2_conv1d_weight(p->name);
    int padded = t->shape[0] < p->shape[0];
    if (!transposed && !padded) {
        *out = t->data;
        return PLAIT_OK;
    }
    if (w->cached != gi) {
        free(w->cache);
        w->cached = -1;
        size_t n = spec_numel(p);
        w->cache = calloc(n ? n : 1, sizeof(float));
        if (!w->cache) return plait_set_error(PLAIT_ERR_NO_MEMORY, "weights %s: out of memory for '%s'", w->path, p->name);
        if (transposed) {
            /* file [in, out] -> plait [out, in] */
            const int64_t rows = p->shape[0], cols = p->shape[1];
            for (int64_t i = 0; i < cols; i++)
                for (int64_t o = 0; o < rows; o++) w->cache[o * cols + i] = t->data[i * rows + o];
        } else {
            memcpy(w->cache, t->data, t->bytes); /* the rows the file has; the rest stays zero */
        }
        w->cached = gi;
    }
    *out = w->cache;
    return PLAIT_OK;
}

plait_status plait_weights_read(plait_weights *w, const plait_param *param, size_t offset, size_t count,
                                float *dst) {
    int32_t gi = param->index;
    if (gi < 0 || gi >= w->spec->n_params)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "weights: parameter index %d out of range", (int)gi);
    gi = plait_tied_source(w->spec, &w->spec->params[gi])->index;
    pthread_mutex_lock(&w->lock);
    const float *full = NULL;
    plait_status st = full_tensor(w, gi, &full);
    if (st == PLAIT_OK) st = plait_shard_extract(param->ndim, param->shape, &param->shard, full, offset, count, dst);
    pthread_mutex_unlock(&w->lock);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "weights %s: '%s'", w->path, param->name);
}
