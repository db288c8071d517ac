#include "checkpoint/weights_export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/gpt2_names.h"
#include "runtime/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/safetensors.h"

typedef struct model_shape {
    long long n_layer, n_head, n_embd, block_size, vocab_size;
} model_shape;

static plait_status read_shape(const plait_ckpt *ck, model_shape *m) {
    const char *arch = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.arch");
    if (!arch || strcmp(arch, "gpt") != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: %s", plait_ckpt_dir(ck),
                               arch ? "the model is not a GPT ([model] arch = mlp): nothing to export"
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
    if (format == PLAIT_EXPORT_NANOGPT)
        return snprintf(buf, cap,
                        "{\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_embd\": %lld,\n  \"block_size\": %lld,\n"
                        "  \"vocab_size\": %lld,\n  \"dropout\": 0.0,\n  \"bias\": true\n}\n",
                        m->n_layer, m->n_head, m->n_embd, m->block_size, m->vocab_size);
    /* GPT-2's end-of-text token only when the vocabulary has it */
    char eos[96] = "";
    if (m->vocab_size > 50256) snprintf(eos, sizeof eos, "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n");
    return snprintf(buf, cap,
                    "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n  \"n_embd\": %lld,\n"
                    "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n"
                    "  \"activation_function\": \"gelu_new\",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n"
                    "  \"attn_pdrop\": 0.0,\n  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
                    "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n"
                    "%s  \"torch_dtype\": \"float32\"\n}\n",
                    m->vocab_size, m->block_size, m->block_size, m->n_embd, m->n_layer, m->n_head, eos);
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

static plait_status write_model(const plait_ckpt *ck, plait_export_format format, const char *path) {
    const plait_st_file *src = plait_ckpt_st(ck, PLAIT_CKPT_MODEL);
    const int hf = format == PLAIT_EXPORT_HF;
    plait_st_writer *w = NULL;
    plait_status st = plait_st_writer_create(path, &w);
    const plait_st_tensor *wte = NULL;
    for (size_t i = 0; st == PLAIT_OK && i < plait_st_count(src); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(src, i);
        int64_t shape[PLAIT_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        if (hf && plait_gpt2_conv1d_weight(t->name)) {
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
        }
        if (strcmp(t->name, "transformer.wte.weight") == 0) wte = t;
        st = plait_st_writer_declare(w, t->name, t->ndim, shape);
    }
    if (st == PLAIT_OK && !wte)
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: no tensor 'transformer.wte.weight'", plait_ckpt_dir(ck));
    if (st == PLAIT_OK && !hf) st = plait_st_writer_declare(w, "lm_head.weight", wte->ndim, wte->shape);
    for (size_t i = 0; st == PLAIT_OK && i < plait_st_count(src); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(src, i);
        st = put(w, t->name, t, hf && plait_gpt2_conv1d_weight(t->name));
    }
    if (st == PLAIT_OK && !hf) st = put(w, "lm_head.weight", wte, 0);
    if (st == PLAIT_OK) st = plait_st_writer_finish(w, NULL);
    if (st == PLAIT_OK) return plait_st_writer_commit(w);
    plait_st_writer_abort(w);
    return st;
}

plait_status plait_weights_export(const char *checkpoint, plait_export_format format, const char *out_dir,
                                  char *used, size_t cap) {
    struct stat sb;
    if (stat(checkpoint, &sb) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "checkpoint %s: %s", checkpoint, strerror(errno));
    plait_ckpt *ck = NULL;
    plait_status st = plait_ckpt_open(checkpoint, &ck);
    if (st != PLAIT_OK) {
        /* a run directory: its latest complete checkpoint */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        if (plait_ckpt_open_latest(checkpoint, &ck) != PLAIT_OK || !ck) return plait_set_error(st, "%s", msg);
    }
    model_shape m;
    st = read_shape(ck, &m);
    if (st == PLAIT_OK && mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", out_dir, strerror(errno));
    size_t len = strlen(out_dir) + 32;
    char *path = malloc(len);
    if (st == PLAIT_OK && !path) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK) {
        snprintf(path, len, "%s/model.safetensors", out_dir);
        st = write_model(ck, format, path);
    }
    if (st == PLAIT_OK) {
        char json[2048];
        int n = config_json(json, sizeof json, format, &m);
        snprintf(path, len, "%s/config.json", out_dir);
        st = plait_fs_write_file_atomic(path, json, (size_t)n);
    }
    if (st == PLAIT_OK && used) snprintf(used, cap, "%s", plait_ckpt_dir(ck));
    free(path);
    plait_ckpt_close(ck);
    return st;
}
