#include "checkpoint/weights_export.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/gpt2_names.h"
#include "runtime/error.h"
#include "runtime/out_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/llama_hf.h"
#include "checkpoint/hf_experts.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_json.h"

/* model.safetensors metadata naming the format it was exported in. */
#define EXPORT_MARK "plait.export"

typedef struct model_shape {
    long long n_layer, n_head, n_embd, block_size, vocab_size;
    long long eot; /* the end-of-text token's id (hf's bos/eos_token_id), -1: none */
    int llama;     /* [model] arch = llama: `ls` holds its shape */
    plait_llama_shape ls;
    plait_st_dtype dtype; /* the tensors' (--dtype), config.json's torch_dtype */
} model_shape;

/* PyTorch's name of a dtype, as config.json's torch_dtype says it. */
static const char *torch_name(plait_st_dtype d) {
    return d == PLAIT_ST_BF16 ? "bfloat16" : d == PLAIT_ST_F16 ? "float16" : "float32";
}

static plait_status read_shape(const plait_ckpt *ck, plait_export_format format, model_shape *m) {
    const char *arch = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.arch");
    memset(m, 0, sizeof *m);
    /* a mixture of experts: a llama one as Mixtral, never as a dense model
     * missing its MLPs */
    const char *experts = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.moe_experts");
    m->llama = arch && strcmp(arch, "llama") == 0;
    if (experts && strcmp(experts, "0") != 0 && !m->llama)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: a mixture of experts (moe_experts = %s) of [model] arch = %s: --format hf and "
                               "nanogpt describe dense GPTs (allowed: a llama mixture of experts, exported with "
                               "--format hf as Hugging Face's MixtralForCausalLM or Qwen3MoeForCausalLM); sample it "
                               "with plait sample",
                               plait_ckpt_dir(ck), experts, arch ? arch : "(unrecorded)");
    if (m->llama && format != PLAIT_EXPORT_HF)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: a llama model; --format nanogpt is nanoGPT's GPT-2 layout (allowed for llama: "
                               "--format hf, LlamaForCausalLM)",
                               plait_ckpt_dir(ck));
    if (m->llama) {
        plait_status st = plait_llama_shape_from_ckpt(ck, &m->ls);
        m->block_size = m->ls.block_size;
        m->vocab_size = m->ls.vocab_size;
        if (st == PLAIT_OK) st = plait_llama_hf_class_ok(&m->ls, plait_ckpt_dir(ck));
        return st;
    }
    if (!arch || strcmp(arch, "gpt") != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: %s", plait_ckpt_dir(ck),
                               arch ? "the model is neither a GPT nor a llama ([model] arch = mlp): nothing to export"
                                    : "the model file has no 'plait.model.arch' metadata (not written by plait train?)");
    static const char *const keys[] = {"n_layer", "n_head", "n_embd", "block_size", "vocab_size"};
    long long *dst[] = {&m->n_layer, &m->n_head, &m->n_embd, &m->block_size, &m->vocab_size};
    for (size_t i = 0; i < 5; i++) {
        char key[64];
        snprintf(key, sizeof key, "plait.model.%s", keys[i]);
        const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
        char *end = NULL;
        *dst[i] = v ? strtoll(v, &end, 10) : 0;
        if (!v || !*v || *end || *dst[i] < 1)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: model metadata '%s' is %s%s%s", plait_ckpt_dir(ck), key,
                                   v ? "'" : "missing", v ? v : "", v ? "', not a positive integer" : "");
    }
    return PLAIT_OK;
}

static int config_json(char *buf, size_t cap, plait_export_format format, const model_shape *m) {
    if (m->llama) return plait_llama_hf_config_json(buf, cap, &m->ls, m->eot, torch_name(m->dtype));
    if (format == PLAIT_EXPORT_NANOGPT)
        return snprintf(buf, cap,
                        "{\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_embd\": %lld,\n  \"block_size\": %lld,\n"
                        "  \"vocab_size\": %lld,\n  \"dropout\": 0.0,\n  \"bias\": true\n}\n",
                        m->n_layer, m->n_head, m->n_embd, m->block_size, m->vocab_size);
    /* null, not left out, without one: GPT2Config would take GPT-2's 50256,
     * another token or none of this vocabulary */
    char eos[96] = "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n";
    if (m->eot >= 0)
        snprintf(eos, sizeof eos, "  \"bos_token_id\": %lld,\n  \"eos_token_id\": %lld,\n", m->eot, m->eot);
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
                    "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n"
                    "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
                    "  \"attn_pdrop\": 0.0,\n  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
                    "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n"
                    "%s  \"torch_dtype\": \"%s\"\n}\n",
                    m->vocab_size, m->block_size, m->block_size, m->n_embd, m->n_layer, m->n_head, eos,
                    torch_name(m->dtype));
}

/* hf's tokenizer_config.json: GPT2Tokenizer (AutoTokenizer then needs no
 * config.json to choose it), GPT-2's special tokens where the vocabulary
 * has <|endoftext|> and none where it has not (a default naming a token the
 * vocabulary lacks would be added as a new id past the model's), no space
 * prepended and none removed on decoding, so its ids and text are plait's. */
static int tokenizer_config_json(char *buf, size_t cap, const model_shape *m) {
    const char *special = m->eot >= 0 ? "\"<|endoftext|>\"" : "null";
    return snprintf(buf, cap,
                    "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %lld,\n"
                    "  \"add_prefix_space\": false,\n  \"clean_up_tokenization_spaces\": false,\n"
                    "  \"bos_token\": %s,\n  \"eos_token\": %s,\n  \"unk_token\": %s\n}\n",
                    m->block_size, special, special, special);
}

/* A file export writes beside the model: its name and its bytes. */
typedef struct out_text {
    const char *name;
    const char *data;
    size_t len;
} out_text;

/* 1 if `path` holds exactly `t`'s bytes (what this export would write). */
static int same_text(const char *path, const out_text *t) {
    char *text = NULL;
    size_t len = 0;
    int same = plait_fs_read_small_file(path, t->len, &text, &len) == PLAIT_OK && len == t->len &&
               memcmp(text, t->data, len) == 0;
    free(text);
    plait_clear_error();
    return same;
}

/* One tensor into the writer, transposed ([out, in] -> [in, out]) for a
 * Hugging Face Conv1D weight. */
static plait_status put(plait_st_writer *w, const char *name, const plait_st_tensor *t, int transpose) {
    if (!transpose) return plait_st_writer_write(w, name, t->data, t->numel);
    const int64_t rows = t->shape[0], cols = t->shape[1];
    float *buf = malloc(t->bytes ? t->bytes : 4);
    if (!buf) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory exporting '%s'", name);
    for (int64_t o = 0; o < rows; o++)
        for (int64_t i = 0; i < cols; i++) buf[i * rows + o] = t->data[o * cols + i];
    plait_status st = plait_st_writer_write(w, name, buf, t->numel);
    free(buf);
    return st;
}

static const char *format_name(plait_export_format format) { return format == PLAIT_EXPORT_HF ? "hf" : "nanogpt"; }

/* The model's tensors of a checkpoint, one at a time: a gathered
 * checkpoint's model file, or a sharded one's parameters (its index's
 * tensors but the optimizer's), each assembled from its slices only while
 * it is written, so an export never holds more than one tensor. */
static size_t model_count(const plait_ckpt *ck) {
    const plait_ckpt_index *ix = plait_ckpt_index_of(ck);
    if (!ix) return plait_st_count(plait_ckpt_st(ck, PLAIT_CKPT_MODEL));
    size_t n = 0;
    for (int32_t i = 0; i < ix->n_tensors; i++) n += strncmp(ix->tensors[i].name, "optim.", 6) != 0;
    return n;
}

/* Tensor i of model_count's: its name and shape in *t, with `load` its
 * elements too (*owned: a buffer the caller frees, NULL when mapped). */
static plait_status model_tensor(const plait_ckpt *ck, size_t i, int load, plait_st_tensor *t, float **owned) {
    *owned = NULL;
    const plait_ckpt_index *ix = plait_ckpt_index_of(ck);
    if (!ix) {
        *t = *plait_st_tensor_at(plait_ckpt_st(ck, PLAIT_CKPT_MODEL), i);
        return PLAIT_OK;
    }
    const plait_ckpt_index_tensor *it = NULL;
    for (int32_t k = 0; k < ix->n_tensors && !it; k++)
        if (strncmp(ix->tensors[k].name, "optim.", 6) != 0 && i-- == 0) it = &ix->tensors[k];
    memset(t, 0, sizeof *t);
    t->name = it->name;
    t->ndim = it->ndim;
    memcpy(t->shape, it->shape, sizeof t->shape);
    t->numel = it->numel;
    t->bytes = 4 * (uint64_t)it->numel;
    if (!load) return PLAIT_OK;
    *owned = malloc(t->bytes ? t->bytes : 4);
    if (!*owned) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory exporting '%s'", t->name);
    plait_shard whole = {-1, 1, 0, 1, 0};
    t->data = *owned;
    return plait_ckpt_index_read(it, &whole, 0, it->numel, *owned, plait_ckpt_dir(ck));
}

/* Tensor i into the writer under its own name (transposed for a Hugging
 * Face Conv1D weight), then its memory given back: what it held (its
 * assembled or mapped bytes, and the transposed copy) counted in *mem. */
static plait_status put_tensor(plait_st_writer *w, const plait_ckpt *ck, size_t i, const char *as, int hf,
                               plait_export_memory *mem) {
    plait_st_tensor t;
    float *owned;
    plait_status st = model_tensor(ck, i, 1, &t, &owned);
    const int transpose = hf && st == PLAIT_OK && plait_gpt2_conv1d_weight(t.name);
    if (st == PLAIT_OK) st = put(w, as ? as : t.name, &t, transpose);
    if (st == PLAIT_OK && t.bytes * (transpose ? 2 : 1) > mem->largest_held)
        mem->largest_held = t.bytes * (transpose ? 2 : 1);
    if (st == PLAIT_OK) plait_ckpt_release_tensor(ck, t.name);
    free(owned);
    return st;
}

/* Declare tensor `t` of a llama checkpoint under its Hugging Face name:
 * its own, or with experts `family`'s (hf_experts.h): a stacked expert
 * tensor as one tensor an expert, no expert_bias. */
static plait_status declare_llama(plait_st_writer *w, const plait_st_tensor *t, plait_hf_experts family) {
    char name[512];
    const plait_expert_name kind = family ? plait_hf_experts_to_hf(family, t->name, 0, name, sizeof name)
                                          : PLAIT_EXPERT_NAME_NONE;
    if (kind == PLAIT_EXPERT_NAME_BIAS) return PLAIT_OK;
    if (kind != PLAIT_EXPERT_NAME_EXPERT) return plait_st_writer_declare(w, kind ? name : t->name, t->ndim, t->shape);
    plait_status st = PLAIT_OK;
    for (int64_t e = 0; st == PLAIT_OK && e < t->shape[0]; e++) {
        plait_hf_experts_to_hf(family, t->name, (long long)e, name, sizeof name);
        st = plait_st_writer_declare(w, name, 2, t->shape + 1);
    }
    return st;
}

/* Tensor i of a mixture of experts' export (declare_llama's names, of
 * `family`): the router renamed, each expert's slice of a stacked tensor
 * under its own name, the expert_bias only checked to be zero (neither
 * family's router has one: a bias that steered the choice would route
 * otherwise there). */
static plait_status put_experts(plait_st_writer *w, const plait_ckpt *ck, size_t i, plait_hf_experts family,
                                plait_export_memory *mem) {
    plait_st_tensor t;
    float *owned;
    char name[512];
    plait_status st = model_tensor(ck, i, 0, &t, &owned);
    const plait_expert_name kind = st == PLAIT_OK ? plait_hf_experts_to_hf(family, t.name, 0, name, sizeof name) : 0;
    if (st != PLAIT_OK || kind == PLAIT_EXPERT_NAME_NONE || kind == PLAIT_EXPERT_NAME_ROUTER)
        return st == PLAIT_OK ? put_tensor(w, ck, i, kind ? name : NULL, 0, mem) : st;
    st = model_tensor(ck, i, 1, &t, &owned);
    for (size_t k = 0; st == PLAIT_OK && kind == PLAIT_EXPERT_NAME_BIAS && k < t.numel; k++)
        if (t.data[k] != 0)
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s: '%s' is %g for expert %zu, not 0: the bias balancing ([model] moe_bias_rate) "
                                 "steers this model's routing, and Hugging Face's %s has no router bias, so it "
                                 "would route tokens otherwise (allowed: a model trained with moe_bias_rate = 0)",
                                 plait_ckpt_dir(ck), t.name, (double)t.data[k], k,
                                 family == PLAIT_HF_EXPERTS_MIXTRAL ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM");
    const size_t slice = kind == PLAIT_EXPERT_NAME_EXPERT ? t.numel / (size_t)t.shape[0] : 0;
    for (int64_t e = 0; st == PLAIT_OK && slice && e < t.shape[0]; e++) {
        plait_hf_experts_to_hf(family, t.name, (long long)e, name, sizeof name);
        st = plait_st_writer_write(w, name, t.data + (size_t)e * slice, slice);
    }
    if (st == PLAIT_OK && t.bytes > mem->largest_held) mem->largest_held = t.bytes;
    if (st == PLAIT_OK) plait_ckpt_release_tensor(ck, t.name);
    free(owned);
    return st;
}

/* A llama checkpoint holds LlamaForCausalLM's names and orientations
 * already, lm_head only when untied (a tied copy is never saved, as
 * save_pretrained leaves it out): written as it is; a mixture of experts
 * with `family`'s names for its experts and router (hf_experts.h). */
static plait_status write_llama(const plait_ckpt *ck, const char *path, plait_hf_experts family, plait_st_dtype dtype,
                                plait_export_memory *mem) {
    plait_st_writer *w = NULL;
    plait_status st = plait_st_writer_create(path, &w);
    if (st == PLAIT_OK) st = plait_st_writer_dtype(w, dtype);
    if (st == PLAIT_OK) st = plait_st_writer_metadata(w, EXPORT_MARK, "hf");
    if (st == PLAIT_OK) st = plait_st_writer_metadata(w, "format", "pt"); /* as write_model's */
    float *none;
    for (size_t i = 0; st == PLAIT_OK && i < model_count(ck); i++) {
        plait_st_tensor t;
        st = model_tensor(ck, i, 0, &t, &none);
        if (st == PLAIT_OK) st = declare_llama(w, &t, family);
        mem->model_bytes += t.bytes;
    }
    for (size_t i = 0; st == PLAIT_OK && i < model_count(ck); i++)
        st = family ? put_experts(w, ck, i, family, mem) : put_tensor(w, ck, i, NULL, 0, mem);
    if (st == PLAIT_OK) st = plait_st_writer_finish(w, NULL);
    if (st == PLAIT_OK) return plait_st_writer_commit(w);
    plait_st_writer_abort(w);
    return st;
}

static plait_status write_model(const plait_ckpt *ck, plait_export_format format, const char *path,
                                plait_st_dtype dtype, plait_export_memory *mem) {
    const int hf = format == PLAIT_EXPORT_HF;
    plait_st_writer *w = NULL;
    plait_status st = plait_st_writer_create(path, &w);
    if (st == PLAIT_OK) st = plait_st_writer_dtype(w, dtype);
    /* the mark by which a later export knows the file is its own to replace */
    if (st == PLAIT_OK) st = plait_st_writer_metadata(w, EXPORT_MARK, format_name(format));
    /* transformers 4 refuses a file whose metadata lacks the format tag;
     * "pt" is what save_pretrained writes */
    if (st == PLAIT_OK) st = plait_st_writer_metadata(w, "format", "pt");
    size_t wte = SIZE_MAX;
    plait_st_tensor t;
    float *none;
    int64_t wte_shape[PLAIT_ST_MAX_DIMS];
    int32_t wte_ndim = 0;
    for (size_t i = 0; st == PLAIT_OK && i < model_count(ck); i++) {
        st = model_tensor(ck, i, 0, &t, &none);
        if (st != PLAIT_OK) break;
        int64_t shape[PLAIT_ST_MAX_DIMS];
        memcpy(shape, t.shape, sizeof shape);
        if (hf && plait_gpt2_conv1d_weight(t.name)) {
            shape[0] = t.shape[1];
            shape[1] = t.shape[0];
        }
        if (strcmp(t.name, "transformer.wte.weight") == 0) {
            wte = i;
            wte_ndim = t.ndim;
            memcpy(wte_shape, t.shape, sizeof wte_shape);
        }
        st = plait_st_writer_declare(w, t.name, t.ndim, shape);
        mem->model_bytes += t.bytes;
    }
    if (st == PLAIT_OK && wte == SIZE_MAX)
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: no tensor 'transformer.wte.weight'", plait_ckpt_dir(ck));
    if (st == PLAIT_OK && !hf) st = plait_st_writer_declare(w, "lm_head.weight", wte_ndim, wte_shape);
    for (size_t i = 0; st == PLAIT_OK && i < model_count(ck); i++) st = put_tensor(w, ck, i, NULL, hf, mem);
    if (st == PLAIT_OK && !hf) st = put_tensor(w, ck, wte, "lm_head.weight", 0, mem);
    if (st == PLAIT_OK) st = plait_st_writer_finish(w, NULL);
    if (st == PLAIT_OK) return plait_st_writer_commit(w);
    plait_st_writer_abort(w);
    return st;
}

/* 1 if `path` (a model.safetensors) was written by plait export. */
static int model_is_ours(const char *path) {
    plait_st_file *f = NULL;
    int ours = plait_st_open(path, PLAIT_ST_ANY_DTYPE, &f) == PLAIT_OK && plait_st_metadata(f, EXPORT_MARK);
    plait_st_close(f);
    plait_clear_error();
    return ours;
}

/* 1 if `path` (a config.json) is, byte for byte, one plait export writes. */
static int config_is_ours(const char *path) {
    char *text = NULL;
    size_t len = 0;
    plait_json_doc *doc = NULL;
    int ours = 0;
    if (plait_fs_read_small_file(path, 1 << 16, &text, &len) == PLAIT_OK &&
        plait_json_parse_any(text, len, path, &doc) == PLAIT_OK) {
        const plait_json *root = plait_json_root(doc);
        for (int f = 0; f < 2 && !ours; f++) {
            static const char *const keys[2][5] = {
                {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"},
                {"n_layer", "n_head", "n_embd", "block_size", "vocab_size"}};
            long long v[5] = {0};
            int ok = 1;
            for (int k = 0; k < 5 && ok; k++) {
                const plait_json *j = plait_json_get(root, keys[f][k]);
                ok = j && j->type == PLAIT_JSON_INT;
                if (ok) v[k] = j->num;
            }
            if (!ok) continue;
            const plait_json *eos = plait_json_get(root, "eos_token_id");
            model_shape m = {v[0], v[1], v[2], v[3], v[4], eos && eos->type == PLAIT_JSON_INT ? eos->num : -1};
            for (int d = PLAIT_ST_F32; d <= PLAIT_ST_F16 && !ours; d++) { /* any --dtype's */
                char json[2048];
                m.dtype = (plait_st_dtype)d;
                int n = config_json(json, sizeof json, f == 0 ? PLAIT_EXPORT_HF : PLAIT_EXPORT_NANOGPT, &m);
                ours = n > 0 && (size_t)n == len && memcmp(json, text, len) == 0;
            }
        }
    }
    plait_json_free(doc);
    free(text);
    plait_clear_error();
    return ours;
}

/* What export may write into: not a checkpoint or a run directory, and no
 * file there by a name it writes (model.safetensors, config.json, the
 * tokenizer's `texts`) that is not a regular file it wrote itself: beside
 * its own model, or, for a config or a tokenizer file, with the bytes it
 * would write (a tokenizer put beside the model by hand). */
static plait_status check_out_dir(const char *out_dir, const out_text *texts, size_t n_texts) {
    const char *role = plait_ckpt_dir_role(out_dir);
    if (role)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "--out %s is a %s: export never writes into one (its model.safetensors would be "
                               "replaced); choose another directory",
                               out_dir, role);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    int model_ours = access(path, F_OK) == 0 && model_is_ours(path);
    for (size_t i = 0; i < 2 + n_texts; i++) {
        snprintf(path, sizeof path, "%s/%s", out_dir,
                 i == 0 ? "model.safetensors" : i == 1 ? "config.json" : texts[i - 2].name);
        struct stat sb;
        if (lstat(path, &sb) != 0) continue;
        if (S_ISLNK(sb.st_mode))
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "%s is a symbolic link: export replaces only files it wrote; choose "
                                   "another --out or remove the link",
                                   path);
        int ours = S_ISREG(sb.st_mode) && (model_ours || (i == 1 && config_is_ours(path)) ||
                                           (i >= 2 && same_text(path, &texts[i - 2])));
        if (!ours)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "%s was not written by plait export: not replacing it (a downloaded model?); "
                                   "choose another --out or move it away",
                                   path);
    }
    return PLAIT_OK;
}

plait_status plait_weights_export(const char *checkpoint, plait_export_format format, plait_st_dtype dtype,
                                  const char *out_dir, plait_export_tokenizer_fn tokenizer_of, void *ctx, char *used,
                                  size_t cap, int *tokenizer_files, const char **what, plait_export_memory *mem) {
    if (tokenizer_files) *tokenizer_files = 0;
    plait_export_memory held = {0, 0};
    plait_ckpt *ck = NULL;
    plait_status st = plait_ckpt_open_named(checkpoint, &ck);
    if (st != PLAIT_OK) return st;
    model_shape m;
    st = read_shape(ck, format, &m);
    m.dtype = dtype;
    /* the end-of-text id and hf's tokenizer files: the recorded tokenizer's;
     * without one the tokens are taken as GPT-2's (llm.c's token files
     * record none), whose id is 50256 where the vocabulary reaches it, and
     * no files are written (which GPT-2 files the tokens came from is not
     * known) */
    const int hf = format == PLAIT_EXPORT_HF;
    plait_export_tokenizer tok = {.eot = -1};
    const char *tokenizer = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.data.tokenizer");
    if (st == PLAIT_OK && tokenizer && *tokenizer && tokenizer_of)
        tokenizer_of(tokenizer, plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.data.tokenizer_fingerprint"), hf,
                     ctx, &tok);
    m.eot = tokenizer && *tokenizer ? tok.eot : m.vocab_size > 50256 ? 50256 : -1;
    if (m.eot >= m.vocab_size) m.eot = -1;
    char tok_config[512];
    int tok_config_len = tokenizer_config_json(tok_config, sizeof tok_config, &m);
    const out_text texts[] = {{"vocab.json", tok.vocab.data, tok.vocab.len},
                              {"merges.txt", tok.merges.data, tok.merges.len},
                              {"tokenizer_config.json", tok_config, (size_t)tok_config_len}};
    const size_t n_texts = hf && tok.vocab.data && tok.merges.data ? 3 : 0;
    int made = 0; /* --out created here: removed again if the export fails (it is then empty) */
    if (st == PLAIT_OK && !(made = mkdir(out_dir, 0755) == 0) && errno != EEXIST)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", out_dir, strerror(errno));
    /* One export at a time into a directory: a second waits for nothing and
     * is refused (flock on the directory itself, dropped however we end). */
    int lock = -1, locked = 0;
    if (st == PLAIT_OK) {
        lock = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (lock < 0)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s: %s", out_dir, strerror(errno));
        else if (flock(lock, LOCK_EX | LOCK_NB) != 0)
            st = plait_set_error(PLAIT_ERR_INVALID_ARG, "another plait export is writing into %s; wait for it to "
                                                        "end (two at once would mix their files)", out_dir);
        else
            locked = 1;
    }
    if (st == PLAIT_OK) st = check_out_dir(out_dir, texts, n_texts);
    if (st == PLAIT_OK) (void)plait_out_remove_stale_temps(out_dir); /* a killed export's */
    size_t len = strlen(out_dir) + 32;
    char *path = malloc(len);
    if (st == PLAIT_OK && !path) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK) {
        snprintf(path, len, "%s/model.safetensors", out_dir);
        st = m.llama ? write_llama(ck, path, plait_llama_hf_experts(&m.ls), dtype, &held)
                     : write_model(ck, format, path, dtype, &held);
    }
    if (st == PLAIT_OK) {
        char json[2048];
        int n = config_json(json, sizeof json, format, &m);
        snprintf(path, len, "%s/config.json", out_dir);
        st = plait_fs_write_file_atomic(path, json, (size_t)n);
    }
    for (size_t i = 0; st == PLAIT_OK && i < n_texts; i++) {
        snprintf(path, len, "%s/%s", out_dir, texts[i].name);
        st = plait_fs_write_file_atomic(path, texts[i].data, texts[i].len);
    }
    /* no tokenizer and a run that read text as bytes (recorded; before it
     * was, one id for each byte value): a byte-level model */
    const char *data = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.data.format");
    int bytes = data ? strcmp(data, "bytes") == 0 : m.vocab_size == 256;
    if (st == PLAIT_OK && tokenizer_files)
        *tokenizer_files = n_texts > 0 ? 1 : !(tokenizer && *tokenizer) && bytes ? -1 : 0;
    if (st == PLAIT_OK && used) snprintf(used, cap, "%s", plait_ckpt_dir(ck));
    if (st == PLAIT_OK && mem) *mem = held;
    if (st == PLAIT_OK && what)
        *what = m.llama && m.ls.moe_experts > 0 ? "Hugging Face MixtralForCausalLM"
                : m.llama                       ? "Hugging Face LlamaForCausalLM"
                : hf                            ? "Hugging Face GPT2LMHeadModel"
                                                : "nanoGPT";
    /* only by the export that holds the lock: the one refused must not
     * remove a directory the other has just begun to write into */
    if (st != PLAIT_OK && made && locked) rmdir(out_dir);
    if (lock >= 0) close(lock);
    free(path);
    plait_jbuf_free(&tok.vocab);
    plait_jbuf_free(&tok.merges);
    plait_ckpt_close(ck);
    return st;
}
