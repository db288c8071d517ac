/*
 * [run] init_from of a Llama-family model (checkpoint/weights_import.h,
 * llama_hf.h), on files this test writes as save_pretrained lays them out:
 * a directory with config.json and model.safetensors, tied and untied, is
 * read back bit-identical by LlamaForCausalLM's names; so is a sharded
 * one (model.safetensors.index.json) and one stored in bf16 (converted);
 * every config.json field that describes the model is checked against the
 * run's [model] keys and a mismatch refused naming the key and both
 * values; features plait does not implement (biases, rope scaling, another
 * activation or head size, a sliding window) are refused naming the key;
 * a plait model of the other arch is refused naming both archs.
 *
 * Hugging Face Mixtral (hf_experts.h), written as MixtralForCausalLM's
 * save_pretrained lays it out: a llama mixture of experts is read back
 * bit-identical from one tensor an expert, the router under
 * block_sparse_moe.gate and no router bias (read as zeros), from one file
 * and from shards that split an expert stack between files; the names map
 * both ways; config.json's expert keys are checked against the run's, and
 * a router jitter, a missing or extra expert, a Llama config for a run
 * with experts and a model Mixtral does not compute (moe_every 2) are
 * refused naming the key or tensor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/llama_hf.h"
#include "checkpoint/hf_experts.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/weights_import.h"
#include "model/model_harness.h"
#include "runtime/error.h"

static char tmpdir[256];

/* [model] keys added to every run's config (test_rope_scaling's) */
static const char *g_extra = "";

static const char *llama_ini(int tied) {
    static char buf[768];
    snprintf(buf, sizeof buf,
             "[run]\nseed = 3\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 16\n"
             "ffn_hidden = 24\nblock_size = 8\nvocab_size = 11\nrope_theta = 500\nnorm_eps = 1e-6\n"
             "tie_embeddings = %s\n%s",
             tied ? "true" : "false", g_extra);
    return buf;
}

/* config.json of the model llama_ini describes, with `change` (one
 * member, "\"key\": value", or "") replacing the member of its name or
 * added. */
static void write_members(const char *dir, const char *const *base, size_t n, const char *change);

static void write_config(const char *dir, int tied, const char *change) {
    const char *const base[] = {"\"architectures\": [\"LlamaForCausalLM\"]",
                                "\"model_type\": \"llama\"",
                                "\"hidden_size\": 16",
                                "\"num_hidden_layers\": 2",
                                "\"num_attention_heads\": 4",
                                "\"num_key_value_heads\": 2",
                                "\"intermediate_size\": 24",
                                "\"vocab_size\": 11",
                                "\"rms_norm_eps\": 1e-06",
                                "\"rope_theta\": 500.0",
                                "\"max_position_embeddings\": 64",
                                "\"hidden_act\": \"silu\"",
                                "\"attention_bias\": false",
                                "\"mlp_bias\": false",
                                "\"rope_scaling\": null",
                                tied ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false"};
    write_members(dir, base, sizeof base / sizeof base[0], change);
}

/* config.json of members base[n], `change` replacing the member of its
 * name or added. */
static void write_members(const char *dir, const char *const *base, size_t n, const char *change) {
    const char *colon = strchr(change, ':');
    const size_t key_len = colon ? (size_t)(colon - change) : 0;
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\n");
    int replaced = 0;
    for (size_t i = 0; i < n; i++) {
        const int same = key_len && strncmp(base[i], change, key_len + 1) == 0;
        replaced |= same;
        fprintf(f, "  %s%s\n", same ? change : base[i], i + 1 < n || (key_len && !replaced) ? "," : "");
    }
    if (key_len && !replaced) fprintf(f, "  %s\n", change);
    fprintf(f, "}\n");
    fclose(f);
}

/* The harness's parameters (its deterministic initial values) as a
 * save_pretrained file: the tied head left out; tensors [from, to) only. */
static void write_weights(harness *h, const char *path, int32_t from, int32_t to, const char *meta_arch) {
    plait_st_writer *w = NULL;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    assert_int_equal(plait_st_writer_metadata(w, "format", "pt"), PLAIT_OK);
    if (meta_arch) assert_int_equal(plait_st_writer_metadata(w, "plait.model.arch", meta_arch), PLAIT_OK);
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = from; i < to; i++) {
            plait_param *p = &h->set.params[i];
            if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
            int64_t shape[2] = {p->shape[0], p->ndim > 1 ? p->shape[1] : 0};
            if (!pass) assert_int_equal(plait_st_writer_declare(w, p->name, p->ndim, shape), PLAIT_OK);
            else assert_int_equal(plait_st_writer_write(w, p->name, p->data, p->numel), PLAIT_OK);
        }
    assert_int_equal(plait_st_writer_finish(w, NULL), PLAIT_OK);
    assert_int_equal(plait_st_writer_commit(w), PLAIT_OK);
}

/* The harness's parameters as a bf16 save_pretrained stores them: each
 * value cut to bfloat16 in place first (so the file holds it exactly),
 * then written as BF16, the header padded to 8 bytes. */
static void write_bf16(harness *h, const char *path) {
    char header[8192];
    size_t len = 0, off = 0;
    len += (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int32_t i = 0; i < h->set.n_params; i++) {
        plait_param *p = &h->set.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        for (size_t e = 0; e < p->numel; e++) {
            uint32_t bits;
            memcpy(&bits, &p->data[e], 4);
            bits &= 0xffff0000u;
            memcpy(&p->data[e], &bits, 4);
        }
        char shape[64];
        if (p->ndim > 1) snprintf(shape, sizeof shape, "%lld,%lld", (long long)p->shape[0], (long long)p->shape[1]);
        else snprintf(shape, sizeof shape, "%lld", (long long)p->shape[0]);
        len += (size_t)snprintf(header + len, sizeof header - len,
                                ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", p->name,
                                shape, off, off + 2 * p->numel);
        off += 2 * p->numel;
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    assert_true(len + 8 < sizeof header);
    while (len % 8) header[len++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = len;
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, len, f);
    for (int32_t i = 0; i < h->set.n_params; i++) {
        plait_param *p = &h->set.params[i];
        for (size_t e = 0; !(p->flags & PLAIT_PARAM_TIED_COPY) && e < p->numel; e++) {
            uint32_t bits;
            memcpy(&bits, &p->data[e], 4);
            uint16_t top = (uint16_t)(bits >> 16);
            fwrite(&top, 2, 1, f);
        }
    }
    fclose(f);
}

static char *model_dir(const char *name) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    return dir;
}

/* A source model for llama_ini(tied) and a fresh directory `name` for
 * it: path[cap] set to its model.safetensors (not written yet). */
static char *start(harness *src, int tied, const char *name, char *path, size_t cap) {
    assert_int_equal(harness_init(src, llama_ini(tied), 1, 1, 0, NULL), 0);
    char *dir = model_dir(name);
    snprintf(path, cap, "%s/model.safetensors", dir);
    return dir;
}

/* Open `path` for a run of `ini`; each parameter read back must
 * equal `want`'s bit for bit. Returns the open status. */
static plait_status read_back_ini(const char *path, const char *ini, harness *want) {
    harness h;
    assert_int_equal(harness_init(&h, ini, 1, 1, 0, NULL), 0);
    plait_weights *w = NULL;
    plait_status st = plait_weights_open(path, h.spec, h.cfg, &w);
    for (int32_t i = 0; st == PLAIT_OK && i < h.set.n_params; i++) {
        plait_param *p = &h.set.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        memset(p->data, 0x7f, p->numel * sizeof(float)); /* every element must be written */
        assert_int_equal(plait_weights_read(w, p, 0, p->numel, p->data), PLAIT_OK);
        if (memcmp(p->data, want->set.params[i].data, p->numel * sizeof(float)) != 0)
            fail_msg("%s: %s differs", path, p->name);
    }
    plait_weights_close(w);
    harness_free(&h);
    return st;
}

static plait_status read_back(const char *path, int tied, harness *want) {
    return read_back_ini(path, llama_ini(tied), want);
}

static void test_directory_tied_and_untied(void **state) {
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        harness src;
        assert_int_equal(harness_init(&src, llama_ini(tied), 1, 1, 0, NULL), 0);
        char *dir = model_dir(tied ? "tied" : "untied");
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_weights(&src, path, 0, src.set.n_params, NULL);
        write_config(dir, tied, "");
        if (read_back(dir, tied, &src) != PLAIT_OK) fail_msg("%s: %s", dir, plait_last_error());
        /* the file alone, config.json beside it */
        if (read_back(path, tied, &src) != PLAIT_OK) fail_msg("%s: %s", path, plait_last_error());
        /* the other tie: refused by config.json, naming both */
        assert_int_equal(read_back(dir, !tied, &src), PLAIT_ERR_INVALID_CONFIG);
        assert_non_null(strstr(plait_last_error(), "tie_word_embeddings"));
        assert_non_null(strstr(plait_last_error(), "tie_embeddings"));
        harness_free(&src);
    }
}

static void test_sharded(void **state) {
    (void)state;
    harness src;
    assert_int_equal(harness_init(&src, llama_ini(0), 1, 1, 0, NULL), 0);
    char *dir = model_dir("sharded");
    const int32_t half = src.set.n_params / 2;
    char path[600];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    write_weights(&src, path, 0, half, NULL);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_weights(&src, path, half, src.set.n_params, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int32_t i = 0; i < src.set.n_params; i++)
        fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", src.set.params[i].name,
                i < half ? 1 : 2);
    fprintf(f, "}}\n");
    fclose(f);
    write_config(dir, 0, "");
    if (read_back(dir, 0, &src) != PLAIT_OK) fail_msg("%s: %s", dir, plait_last_error());
    /* an index placing a tensor in the other shard */
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"weight_map\": {\"%s\": \"model-00002-of-00002.safetensors\"}}\n", src.set.params[0].name);
    fclose(f);
    assert_int_equal(read_back(dir, 0, &src), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), src.set.params[0].name));
    harness_free(&src);
}

/* A model saved in bfloat16 is read as its values in float32. */
static void test_bf16(void **state) {
    (void)state;
    harness src;
    char path[600];
    char *dir = start(&src, 1, "bf16", path, sizeof path);
    write_bf16(&src, path);
    write_config(dir, 1, "\"torch_dtype\": \"bfloat16\"");
    if (read_back(dir, 1, &src) != PLAIT_OK) fail_msg("%s: %s", dir, plait_last_error());
    harness_free(&src);
}

/* Each config.json difference, and what the message must name. */
static void test_config_refusals(void **state) {
    (void)state;
    static const struct {
        const char *extra;
        const char *says[3];
    } cases[] = {
        {"\"num_key_value_heads\": 4", {"num_key_value_heads = 4", "n_kv_head = 2", NULL}},
        {"\"intermediate_size\": 32", {"intermediate_size = 32", "ffn_hidden = 24", NULL}},
        {"\"rms_norm_eps\": 1e-05", {"rms_norm_eps = 1e-05", "norm_eps = 1e-06", NULL}},
        {"\"rope_theta\": 10000.0", {"rope_theta = 10000", "rope_theta = 500", NULL}},
        {"\"hidden_size\": 32", {"hidden_size = 32", "n_embd = 16", NULL}},
        {"\"num_hidden_layers\": 3", {"num_hidden_layers = 3", "n_layer = 2", NULL}},
        {"\"vocab_size\": 12", {"vocab_size = 12", "vocab_size = 11", NULL}},
        {"\"max_position_embeddings\": 4", {"max_position_embeddings = 4", "block_size = 8", NULL}},
        {"\"model_type\": \"gemma\"", {"model_type = gemma", "llama or mistral", NULL}},
        {"\"model_type\": \"mistral\"", {"sliding_window = 4096", "MistralConfig's default", NULL}},
        {"\"model_type\": \"qwen2\"", {"model_type = qwen2", "give model.qkv_bias=true", NULL}},
        {"\"attention_bias\": true", {"attention_bias = true", NULL, NULL}},
        {"\"mlp_bias\": true", {"mlp_bias = true", NULL, NULL}},
        {"\"hidden_act\": \"gelu\"", {"hidden_act = gelu", "silu", NULL}},
        {"\"head_dim\": 8", {"head_dim = 8", NULL, NULL}},
        {"\"sliding_window\": 4096", {"sliding_window", NULL, NULL}},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", {"rope_scaling", "llama3", NULL}},
        {"\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}", {"rope_scaling", "linear", NULL}},
        {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 500.0}", {"rope_type", "yarn", NULL}},
    };
    harness src;
    char path[600];
    char *dir = start(&src, 0, "refusals", path, sizeof path);
    write_weights(&src, path, 0, src.set.n_params, NULL);
    /* transformers 5's rope_parameters with the default type reads as rope_theta */
    write_config(dir, 0, "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500.0}");
    if (read_back(dir, 0, &src) != PLAIT_OK) fail_msg("rope_parameters: %s", plait_last_error());
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_config(dir, 0, cases[c].extra);
        plait_status st = read_back(dir, 0, &src);
        if (st != PLAIT_ERR_INVALID_CONFIG) fail_msg("%s: accepted (%d)", cases[c].extra, (int)st);
        for (int s = 0; s < 3 && cases[c].says[s]; s++)
            if (!strstr(plait_last_error(), cases[c].says[s]))
                fail_msg("%s: the message does not say '%s': %s", cases[c].extra, cases[c].says[s],
                         plait_last_error());
        if (!strstr(plait_last_error(), "config.json")) fail_msg("no file named: %s", plait_last_error());
    }
    harness_free(&src);
}

/* Llama 3.1's rope scaling: a config.json with rope_type llama3 (as
 * transformers 4 and 5 write it) loads into a run of rope_scaling =
 * llama3 with the same parameters; another factor, or no scaling on
 * either side, is refused naming the key; and plait export's config.json
 * writes the object back. */
static void test_rope_scaling(void **state) {
    (void)state;
    static const char *const llama31 =
        "\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
        "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
    harness src;
    char path[600];
    g_extra = "rope_scaling = llama3\n";
    char *dir = start(&src, 0, "rope_llama3", path, sizeof path);
    write_weights(&src, path, 0, src.set.n_params, NULL);
    write_config(dir, 0, llama31);
    if (read_back(dir, 0, &src) != PLAIT_OK) fail_msg("llama3 rope_scaling: %s", plait_last_error());
    write_config(dir, 0,
                 "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500.0, \"factor\": 8.0, "
                 "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}");
    if (read_back(dir, 0, &src) != PLAIT_OK) fail_msg("llama3 rope_parameters: %s", plait_last_error());
    static const struct {
        const char *extra, *says[2];
    } refused[] = {
        {"\"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
         "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}",
         {"rope_scaling.factor = 32", "rope_factor = 8"}},
        {"\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\"}", {"low_freq_factor", "a number"}},
        {"\"rope_scaling\": null", {"rope_scaling = null", "rope_scaling = llama3"}},
    };
    for (size_t c = 0; c < sizeof refused / sizeof refused[0]; c++) {
        write_config(dir, 0, refused[c].extra);
        if (read_back(dir, 0, &src) != PLAIT_ERR_INVALID_CONFIG) fail_msg("%s: accepted", refused[c].extra);
        for (int k = 0; k < 2; k++)
            if (!strstr(plait_last_error(), refused[c].says[k]))
                fail_msg("%s: the message does not say '%s': %s", refused[c].extra, refused[c].says[k],
                         plait_last_error());
    }
    plait_llama_shape shape;
    assert_int_equal(plait_llama_shape_of(src.spec, src.cfg, &shape), PLAIT_OK);
    char json[4096];
    plait_llama_hf_config_json(json, sizeof json, &shape, -1, NULL);
    static const char *const written[] = {"\"factor\": 8.0", "\"high_freq_factor\": 4.0", "\"low_freq_factor\": 1.0",
                                          "\"original_max_position_embeddings\": 8192", "\"rope_type\": \"llama3\""};
    for (size_t k = 0; k < sizeof written / sizeof written[0]; k++)
        if (!strstr(json, written[k])) fail_msg("export's config.json lacks %s:\n%s", written[k], json);
    harness_free(&src);
    g_extra = "";
}

/* A plait model of the other arch is named as such, either way round. */
static void test_other_arch(void **state) {
    (void)state;
    harness src;
    char path[600];
    start(&src, 0, "gpt_meta", path, sizeof path);
    write_weights(&src, path, 0, src.set.n_params, "gpt");
    assert_int_equal(read_back(path, 0, &src), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "arch = gpt"));
    assert_non_null(strstr(plait_last_error(), "arch = llama"));
    /* a Llama file for a gpt run */
    harness gpt;
    assert_int_equal(harness_init(&gpt,
                                  "[model]\nn_layer = 2\nn_head = 4\nn_embd = 16\nblock_size = 8\nvocab_size = 11\n",
                                  1, 1, 0, NULL),
                     0);
    write_weights(&src, path, 0, src.set.n_params, NULL);
    plait_weights *w = NULL;
    assert_int_equal(plait_weights_open(path, gpt.spec, gpt.cfg, &w), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "model.arch=llama"));
    harness_free(&gpt);
    harness_free(&src);
}

/* A wrong shape names the tensor and both shapes. */
static void test_shapes(void **state) {
    (void)state;
    harness src;
    char path[600];
    start(&src, 0, "shapes", path, sizeof path);
    write_weights(&src, path, 0, src.set.n_params, NULL); /* no config.json: shapes alone */
    harness other;
    assert_int_equal(harness_init(&other,
                                  "[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 4\nn_embd = 16\n"
                                  "ffn_hidden = 24\nblock_size = 8\nvocab_size = 11\n",
                                  1, 1, 0, NULL),
                     0);
    plait_weights *w = NULL;
    assert_int_equal(plait_weights_open(path, other.spec, other.cfg, &w), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "model.layers.0.self_attn.k_proj.weight"));
    assert_non_null(strstr(plait_last_error(), "[8, 16]"));
    assert_non_null(strstr(plait_last_error(), "[16, 16]"));
    harness_free(&other);
    harness_free(&src);
}

#define EXPERTS 3

static const char *moe_ini(const char *extra) {
    static char buf[768];
    snprintf(buf, sizeof buf,
             "[run]\nseed = 5\n[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 16\n"
             "ffn_hidden = 24\nblock_size = 8\nvocab_size = 11\nrope_theta = 500\nnorm_eps = 1e-5\n"
             "moe_experts = %d\nmoe_top_k = 2\nmoe_ffn_hidden = 12\n%s",
             EXPERTS, extra);
    return buf;
}

/* MixtralForCausalLM's config.json for moe_ini, `change` as write_config's. */
static void write_mixtral_config(const char *dir, const char *change) {
    static const char *const base[] = {"\"architectures\": [\"MixtralForCausalLM\"]",
                                       "\"model_type\": \"mixtral\"",
                                       "\"hidden_size\": 16",
                                       "\"num_hidden_layers\": 2",
                                       "\"num_attention_heads\": 4",
                                       "\"num_key_value_heads\": 2",
                                       "\"intermediate_size\": 12",
                                       "\"vocab_size\": 11",
                                       "\"rms_norm_eps\": 1e-05",
                                       "\"rope_parameters\": {\"rope_theta\": 500.0, \"rope_type\": \"default\"}",
                                       "\"max_position_embeddings\": 64",
                                       "\"num_local_experts\": 3",
                                       "\"num_experts_per_tok\": 2",
                                       "\"router_jitter_noise\": 0.0",
                                       "\"sliding_window\": null",
                                       "\"head_dim\": null",
                                       "\"tie_word_embeddings\": false"};
    write_members(dir, base, sizeof base / sizeof base[0], change);
}

/* One tensor of the Mixtral save: its name, shape and data. */
typedef struct hf_tensor {
    char name[160];
    int32_t ndim;
    int64_t shape[3];
    const float *data;
    size_t numel;
} hf_tensor;

/* The harness's parameters in Mixtral's names (hf_experts.h): a stacked
 * expert tensor as one tensor an expert, the router renamed, no
 * expert_bias. Returns the count written to out[cap]. */
static size_t mixtral_tensors(harness *h, hf_tensor *out, size_t cap) {
    size_t n = 0;
    for (int32_t i = 0; i < h->set.n_params; i++) {
        plait_param *p = &h->set.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        char name[160];
        plait_expert_name kind = plait_hf_experts_to_hf(PLAIT_HF_EXPERTS_MIXTRAL, p->name, 0, name, sizeof name);
        if (kind == PLAIT_EXPERT_NAME_BIAS) continue;
        const int64_t parts = kind == PLAIT_EXPERT_NAME_EXPERT ? p->shape[0] : 1;
        for (int64_t e = 0; e < parts; e++) {
            assert_true(n < cap);
            hf_tensor *t = &out[n++];
            if (kind == PLAIT_EXPERT_NAME_EXPERT) {
                plait_hf_experts_to_hf(PLAIT_HF_EXPERTS_MIXTRAL, p->name, (long long)e, t->name, sizeof t->name);
                t->ndim = 2;
                t->shape[0] = p->shape[1];
                t->shape[1] = p->shape[2];
            } else {
                snprintf(t->name, sizeof t->name, "%s", kind ? name : p->name);
                t->ndim = p->ndim;
                t->shape[0] = p->shape[0];
                t->shape[1] = p->ndim > 1 ? p->shape[1] : 0;
            }
            t->numel = p->numel / (size_t)parts;
            t->data = p->data + (size_t)e * t->numel;
        }
    }
    return n;
}

static void write_file(const char *path, const hf_tensor *t, size_t n) {
    plait_st_writer *w = NULL;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    assert_int_equal(plait_st_writer_metadata(w, "format", "pt"), PLAIT_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(plait_st_writer_declare(w, t[i].name, t[i].ndim, t[i].shape), PLAIT_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(plait_st_writer_write(w, t[i].name, t[i].data, t[i].numel), PLAIT_OK);
    assert_int_equal(plait_st_writer_finish(w, NULL), PLAIT_OK);
    assert_int_equal(plait_st_writer_commit(w), PLAIT_OK);
}

static void expect_refusal(const char *dir, const char *extra, const char *want) {
    harness h;
    assert_int_equal(harness_init(&h, moe_ini(extra), 1, 1, 0, NULL), 0);
    plait_weights *w = NULL;
    assert_int_not_equal(plait_weights_open(dir, h.spec, h.cfg, &w), PLAIT_OK);
    assert_null(w);
    if (!strstr(plait_last_error(), want)) fail_msg("refusal '%s' does not say '%s'", plait_last_error(), want);
    harness_free(&h);
}

/* Hugging Face's expert names both ways, Mixtral's and Qwen3-MoE's, and
 * the names neither has. */
static void test_expert_names(void **state) {
    (void)state;
    char buf[160];
    long long e = -1;
    plait_hf_experts f = PLAIT_HF_EXPERTS_NONE;
    assert_int_equal(plait_hf_experts_from_hf("model.layers.3.block_sparse_moe.experts.7.w3.weight", buf, sizeof buf,
                                              &e, &f),
                     PLAIT_EXPERT_NAME_EXPERT);
    assert_string_equal(buf, "model.layers.3.mlp.experts.up_proj.weight");
    assert_int_equal(e, 7);
    assert_int_equal(f, PLAIT_HF_EXPERTS_MIXTRAL);
    assert_int_equal(plait_hf_experts_from_hf("model.layers.0.block_sparse_moe.gate.weight", buf, sizeof buf, &e, &f),
                     PLAIT_EXPERT_NAME_ROUTER);
    assert_string_equal(buf, "model.layers.0.mlp.router.weight");
    f = PLAIT_HF_EXPERTS_NONE;
    assert_int_equal(plait_hf_experts_from_hf("model.layers.2.mlp.experts.11.down_proj.weight", buf, sizeof buf, &e,
                                              &f),
                     PLAIT_EXPERT_NAME_EXPERT);
    assert_string_equal(buf, "model.layers.2.mlp.experts.down_proj.weight");
    assert_int_equal(e, 11);
    assert_int_equal(f, PLAIT_HF_EXPERTS_QWEN3_MOE);
    assert_int_equal(plait_hf_experts_from_hf("model.layers.5.mlp.gate.weight", buf, sizeof buf, &e, &f),
                     PLAIT_EXPERT_NAME_ROUTER);
    assert_string_equal(buf, "model.layers.5.mlp.router.weight");
    static const char *const neither[] = {"model.layers.0.block_sparse_moe.experts.1.w4.weight",
                                          "model.layers.0.mlp.gate_proj.weight",
                                          "model.layers.0.mlp.experts.1.w1.weight",
                                          "model.layers.0.mlp.experts.gate_proj.weight",
                                          "model.layers.0.mlp.gate.weight.x"};
    for (size_t i = 0; i < sizeof neither / sizeof neither[0]; i++)
        assert_int_equal(plait_hf_experts_from_hf(neither[i], buf, sizeof buf, &e, &f), PLAIT_EXPERT_NAME_NONE);
    const plait_hf_experts mx = PLAIT_HF_EXPERTS_MIXTRAL, q3 = PLAIT_HF_EXPERTS_QWEN3_MOE;
    assert_int_equal(plait_hf_experts_to_hf(mx, "model.layers.1.mlp.experts.down_proj.weight", 2, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_EXPERT);
    assert_string_equal(buf, "model.layers.1.block_sparse_moe.experts.2.w2.weight");
    assert_int_equal(plait_hf_experts_to_hf(mx, "model.layers.1.mlp.experts.gate_proj.weight", 0, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_EXPERT);
    assert_string_equal(buf, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
    assert_int_equal(plait_hf_experts_to_hf(q3, "model.layers.1.mlp.experts.up_proj.weight", 3, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_EXPERT);
    assert_string_equal(buf, "model.layers.1.mlp.experts.3.up_proj.weight");
    assert_int_equal(plait_hf_experts_to_hf(q3, "model.layers.4.mlp.router.weight", 0, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_ROUTER);
    assert_string_equal(buf, "model.layers.4.mlp.gate.weight");
    assert_int_equal(plait_hf_experts_to_hf(mx, "model.layers.1.mlp.router.expert_bias", 0, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_BIAS);
    assert_int_equal(plait_hf_experts_to_hf(q3, "model.layers.1.mlp.down_proj.weight", 0, buf, sizeof buf),
                     PLAIT_EXPERT_NAME_NONE);
}

static void test_mixtral_file_and_shards(void **state) {
    (void)state;
    harness src;
    assert_int_equal(harness_init(&src, moe_ini(""), 1, 1, 0, NULL), 0);
    hf_tensor t[128];
    const size_t n = mixtral_tensors(&src, t, 128);
    char path[600];
    char *dir = model_dir("one");
    write_mixtral_config(dir, "");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, t, n);
    assert_int_equal(read_back_ini(dir, moe_ini(""), &src), PLAIT_OK);

    /* two shards, split in the middle of a stack: experts 0..1 of the
     * first expert tensor in one file, expert 2 in the other */
    dir = model_dir("sharded");
    write_mixtral_config(dir, "");
    size_t cut = 0;
    while (cut < n && !strstr(t[cut].name, ".experts.2.")) cut++;
    assert_true(cut > 0 && cut < n);
    const char *files[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        write_file(path, f ? t + cut : t, f ? n - cut : cut);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *ix = fopen(path, "w");
    assert_non_null(ix);
    fprintf(ix, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < n; i++) fprintf(ix, "%s\"%s\": \"%s\"", i ? ", " : "", t[i].name, files[i >= cut]);
    fprintf(ix, "}}\n");
    fclose(ix);
    assert_int_equal(read_back_ini(dir, moe_ini(""), &src), PLAIT_OK);
    harness_free(&src);
}

static void test_mixtral_refusals(void **state) {
    (void)state;
    harness src;
    assert_int_equal(harness_init(&src, moe_ini(""), 1, 1, 0, NULL), 0);
    hf_tensor t[128];
    const size_t n = mixtral_tensors(&src, t, 128);
    char path[600];
    static const struct {
        const char *member, *want;
    } bad[] = {
        {"\"router_jitter_noise\": 0.01", "router_jitter_noise = 0.01"},
        {"\"num_local_experts\": 4", "num_local_experts = 4, but the run has [model] moe_experts = 3"},
        {"\"num_experts_per_tok\": 1", "num_experts_per_tok = 1, but the run has [model] moe_top_k = 2"},
        {"\"intermediate_size\": 24", "intermediate_size = 24, but the run has [model] moe_ffn_hidden = 12"},
        {"\"sliding_window\": 4", "sliding_window = set"},
        {"\"model_type\": \"llama\"", "model_type = llama: [model] arch = llama with moe_experts > 0"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        char *dir = model_dir("bad");
        write_mixtral_config(dir, bad[b].member);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_file(path, t, n);
        expect_refusal(dir, "", bad[b].want);
    }
    /* a model Mixtral does not compute */
    char *dir = model_dir("every");
    write_mixtral_config(dir, "");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, t, n);
    expect_refusal(dir, "moe_every = 2\n", "moe_every = 2, which Hugging Face's MixtralForCausalLM does not compute");
    /* an expert missing, and one past the run's experts */
    size_t last = 0;
    while (last < n && !strstr(t[last].name, "layers.1.block_sparse_moe.experts.2.w3")) last++;
    assert_true(last < n);
    dir = model_dir("missing");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    hf_tensor fewer[128];
    memcpy(fewer, t, n * sizeof *t);
    fewer[last] = fewer[n - 1];
    write_file(path, fewer, n - 1);
    expect_refusal(dir, "", "no tensor 'model.layers.1.block_sparse_moe.experts.2.w3.weight'");
    snprintf(fewer[last].name, sizeof fewer[last].name, "model.layers.1.block_sparse_moe.experts.5.w3.weight");
    fewer[last].data = t[last].data;
    fewer[last].ndim = t[last].ndim;
    memcpy(fewer[last].shape, t[last].shape, sizeof t[last].shape);
    fewer[last].numel = t[last].numel;
    fewer[n - 1] = t[n - 1];
    write_file(path, fewer, n);
    expect_refusal(dir, "", "is expert 5, but the run has [model] moe_experts = 3");
    /* an expert stack given twice: by its experts and whole, after them */
    hf_tensor both[129];
    memcpy(both, t, n * sizeof *t);
    const plait_param *stacked = NULL;
    for (int32_t i = 0; i < src.set.n_params && !stacked; i++)
        if (!strcmp(src.set.params[i].name, "model.layers.0.mlp.experts.up_proj.weight")) stacked = &src.set.params[i];
    assert_non_null(stacked);
    both[n] = (hf_tensor){.ndim = 3, .data = stacked->data, .numel = stacked->numel};
    snprintf(both[n].name, sizeof both[n].name, "%s", stacked->name);
    memcpy(both[n].shape, stacked->shape, sizeof both[n].shape);
    write_file(path, both, n + 1);
    expect_refusal(dir, "", "are both 'model.layers.0.mlp.experts.up_proj.weight'");
    /* a Mixtral directory for a run without experts */
    dir = model_dir("dense");
    write_mixtral_config(dir, "");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, t, n);
    harness dense;
    assert_int_equal(harness_init(&dense,
                                  "[model]\narch = llama\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 16\n"
                                  "ffn_hidden = 12\nblock_size = 8\nvocab_size = 11\n",
                                  1, 1, 0, NULL),
                     0);
    plait_weights *w = NULL;
    assert_int_not_equal(plait_weights_open(dir, dense.spec, dense.cfg, &w), PLAIT_OK);
    assert_non_null(strstr(plait_last_error(), "a Mixtral model needs model.moe_experts"));
    harness_free(&dense);
    harness_free(&src);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/plait_test_weights_llama_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directory_tied_and_untied),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_other_arch),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_expert_names),
        cmocka_unit_test(test_mixtral_file_and_shards),
        cmocka_unit_test(test_mixtral_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
