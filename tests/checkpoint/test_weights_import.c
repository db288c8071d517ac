/*
 * [run] init_from's reader (checkpoint/weights_import.h) against the
 * committed fixture tests/reference/hf_gpt2_tiny*.safetensors, written by
 * PyTorch in the Hugging Face GPT2LMHeadModel layout (make_hf_fixture.py):
 * imported, the model's logits equal PyTorch's within 1e-4 relative; the
 * same weights under GPT2Model names (no "transformer."), torch.compile's
 * "_orig_mod." prefix, or in the nanoGPT format (Linear weights, stored
 * head) give bit-identical logits; a vocabulary padded beyond the file's
 * gets zero rows (zero logits) and a shorter block_size the first
 * positions; tensor-parallel slices come out of the converted tensors; and
 * every mismatch is refused naming the file, the tensor and both shapes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "checkpoint/gpt2_names.h"
#include "checkpoint/weights_import.h"
#include "model/model_harness.h"
#include "runtime/error.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/safetensors.h"

enum { L = 2, H = 4, C = 32, T = 24, V = 50, B = 2 };

static char fixture[1024], reference[1024], tmpdir[256];

static const char *ini(char *buf, size_t cap, int n_layer, int n_embd, int block, int vocab) {
    snprintf(buf, cap,
             "[model]\nn_layer = %d\nn_head = %d\nn_embd = %d\nblock_size = %d\nvocab_size = %d\n",
             n_layer, H, n_embd, block, vocab);
    return buf;
}

/* Fill the harness's parameters from `path`; returns the open status. */
static plait_status load(harness *h, const char *path) {
    plait_weights *w = NULL;
    plait_status st = plait_weights_open(path, h->spec, h->cfg, &w);
    if (st != PLAIT_OK) return st;
    for (int32_t i = 0; i < h->set.n_params; i++) {
        plait_param *p = &h->set.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue; /* aliases wte */
        assert_int_equal(plait_weights_read(w, p, 0, p->numel, p->data), PLAIT_OK);
    }
    plait_weights_close(w);
    return PLAIT_OK;
}

/* Logits [B, block, vocab] of the fixture's tokens (first `block` positions). */
static float *logits_of(const char *path, int block, int vocab) {
    char buf[256];
    harness h;
    assert_int_equal(harness_init(&h, ini(buf, sizeof buf, L, C, block, vocab), B, 1, 0, NULL), 0);
    if (load(&h, path) != PLAIT_OK) fail_msg("%s: %s", path, plait_last_error());
    plait_st_file *ref = NULL;
    assert_int_equal(plait_st_open(reference, 0, &ref), PLAIT_OK);
    const plait_st_tensor *tok = plait_st_find(ref, "tokens");
    assert_non_null(tok);
    int32_t tokens[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < block; t++) tokens[b * block + t] = (int32_t)tok->data[b * T + t];
    plait_st_close(ref);
    assert_int_equal(harness_forward(&h, tokens, tokens), PLAIT_OK);
    size_t n = (size_t)B * (size_t)block * (size_t)vocab;
    float *out = malloc(n * sizeof *out);
    assert_non_null(out);
    memcpy(out, plait_model_logits(h.model, 0), n * sizeof *out);
    harness_free(&h);
    return out;
}

static void test_hf_logits_match_pytorch(void **state) {
    (void)state;
    float *got = logits_of(fixture, T, V);
    plait_st_file *ref = NULL;
    assert_int_equal(plait_st_open(reference, 0, &ref), PLAIT_OK);
    const plait_st_tensor *want = plait_st_find(ref, "logits");
    assert_non_null(want);
    assert_int_equal(want->numel, B * T * V);
    double err = 0, scale = 0;
    for (size_t i = 0; i < want->numel; i++) {
        err = fmax(err, fabs((double)got[i] - want->data[i]));
        scale = fmax(scale, fabs((double)want->data[i]));
    }
    printf("HF GPT-2 fixture: max |plait - PyTorch| = %.3g, max |logit| = %.3g, relative %.3g\n", err, scale,
           err / scale);
    assert_true(scale > 1.0);
    assert_true(err <= 1e-4 * scale);
    plait_st_close(ref);
    free(got);
}

static void test_padded_vocab_and_short_context(void **state) {
    (void)state;
    enum { VP = 64, TS = 16 };
    float *got = logits_of(fixture, TS, VP);
    float *full = logits_of(fixture, T, V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < TS; t++)
            for (int v = 0; v < VP; v++) {
                float g = got[(b * TS + t) * VP + v];
                if (v >= V) {
                    assert_true(g == 0.0f); /* a zero row of the padded table */
                    continue;
                }
                /* causal: the first TS positions see only the first TS tokens */
                float f = full[(b * T + t) * V + v];
                assert_true(fabsf(g - f) <= 1e-5f * (1.0f + fabsf(f)));
            }
    free(got);
    free(full);
}

/* ---- variants of the fixture, written with plait's safetensors writer --- */

enum { SHORT_NAMES = 1, ORIG_MOD = 2, LINEAR = 4, WITH_HEAD = 8, BAD_HEAD = 16, DROP_LN_F = 32, A_NAN = 64, BF16_VALUES = 128 };

static void write_variant(const char *path, unsigned how) {
    plait_st_file *src = NULL;
    assert_int_equal(plait_st_open(fixture, 0, &src), PLAIT_OK);
    plait_st_writer *w = NULL;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    size_t n = plait_st_count(src);
    char (*names)[256] = calloc(n + 1, sizeof *names);
    float **data = calloc(n + 1, sizeof *data);
    size_t *numel = calloc(n + 1, sizeof *numel);
    assert_non_null(numel);
    assert_non_null(names);
    assert_non_null(data);
    size_t k = 0;
    const plait_st_tensor *wte = NULL;
    for (size_t i = 0; i < n; i++) {
        const plait_st_tensor *t = plait_st_tensor_at(src, i);
        char canon[256];
        plait_gpt2_canonical(t->name, canon, sizeof canon);
        if ((how & DROP_LN_F) && strcmp(canon, "transformer.ln_f.bias") == 0) continue;
        if (strcmp(canon, "transformer.wte.weight") == 0) wte = t;
        const char *name = t->name;
        if ((how & SHORT_NAMES) && strncmp(name, "transformer.", 12) == 0) name += 12;
        snprintf(names[k], sizeof names[k], "%s%s", (how & ORIG_MOD) ? "_orig_mod." : "", name);
        int64_t shape[PLAIT_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        data[k] = malloc(t->bytes ? t->bytes : 4);
        assert_non_null(data[k]);
        if ((how & LINEAR) && plait_gpt2_conv1d_weight(canon)) {
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
            for (int64_t r = 0; r < t->shape[0]; r++)
                for (int64_t c = 0; c < t->shape[1]; c++) data[k][c * t->shape[0] + r] = t->data[r * t->shape[1] + c];
        } else {
            memcpy(data[k], t->data, t->bytes);
        }
        if ((how & A_NAN) && strcmp(canon, "transformer.h.1.mlp.c_fc.weight") == 0) data[k][17] = NAN;
        for (size_t e = 0; (how & BF16_VALUES) && e < t->numel; e++) { /* keep bfloat16's bits only */
            uint32_t bits;
            memcpy(&bits, &data[k][e], 4);
            bits &= 0xffff0000u;
            memcpy(&data[k][e], &bits, 4);
        }
        assert_int_equal(plait_st_writer_declare(w, names[k], t->ndim, shape), PLAIT_OK);
        numel[k++] = t->numel;
    }
    if (how & (WITH_HEAD | BAD_HEAD)) {
        assert_non_null(wte);
        snprintf(names[k], sizeof names[k], "lm_head.weight");
        data[k] = malloc(wte->bytes);
        memcpy(data[k], wte->data, wte->bytes);
        if (how & BAD_HEAD) data[k][7] += 1.0f;
        assert_int_equal(plait_st_writer_declare(w, names[k], 2, wte->shape), PLAIT_OK);
        numel[k++] = wte->numel;
    }
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(plait_st_writer_write(w, names[i], data[i], numel[i]), PLAIT_OK);
        free(data[i]);
    }
    assert_int_equal(plait_st_writer_finish(w, NULL), PLAIT_OK);
    assert_int_equal(plait_st_writer_commit(w), PLAIT_OK);
    free(names);
    free(data);
    free(numel);
    plait_st_close(src);
}

/* `src`'s tensors written by hand, as other writers lay them out: RAW_BF16
 * stores each as BF16 (its top 16 bits), as a bf16 model's file holds
 * them; RAW_UNALIGNED keeps F32 after a header one byte longer than 8-byte
 * padding (the format does not require alignment); RAW_U8_MASK stores each
 * block's attention mask buffer (attn.bias) as U8, as older transformers
 * saved it; RAW_U8_PARAM stores one parameter as U8 (a quantised model). */
enum raw_form { RAW_BF16, RAW_UNALIGNED, RAW_U8_MASK, RAW_U8_PARAM };

static int stored_u8(enum raw_form form, const plait_st_tensor *t) {
    size_t n = strlen(t->name);
    if (form == RAW_U8_MASK) return n >= 10 && strcmp(t->name + n - 10, ".attn.bias") == 0;
    return form == RAW_U8_PARAM && strcmp(t->name, "transformer.h.0.ln_1.bias") == 0;
}

static void write_raw_form(const char *src_path, const char *path, enum raw_form form) {
    plait_st_file *src = NULL;
    assert_int_equal(plait_st_open(src_path, 0, &src), PLAIT_OK);
    size_t cap = 1 << 16, len = 0, off = 0;
    char *header = malloc(cap);
    len += (size_t)snprintf(header + len, cap - len, "{");
    for (size_t i = 0; i < plait_st_count(src); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(src, i);
        size_t esize = stored_u8(form, t) ? 1 : form == RAW_BF16 ? 2 : 4;
        len += (size_t)snprintf(header + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                                t->name, esize == 2 ? "BF16" : esize == 1 ? "U8" : "F32");
        for (int d = 0; d < t->ndim; d++) len += (size_t)snprintf(header + len, cap - len, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        len += (size_t)snprintf(header + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + esize * t->numel);
        off += esize * t->numel;
    }
    len += (size_t)snprintf(header + len, cap - len, "}");
    while (len % 8) header[len++] = ' ';
    if (form == RAW_UNALIGNED) header[len++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t n = len;
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < plait_st_count(src); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(src, i);
        for (size_t e = 0; e < t->numel; e++) {
            uint32_t bits;
            memcpy(&bits, &t->data[e], 4);
            uint16_t top = (uint16_t)(bits >> 16);
            uint8_t byte = t->data[e] != 0.0f;
            if (stored_u8(form, t)) fwrite(&byte, 1, 1, f);
            else if (form == RAW_BF16) fwrite(&top, 2, 1, f);
            else fwrite(&bits, 4, 1, f);
        }
    }
    fclose(f);
    free(header);
    plait_st_close(src);
}

/* A model stored in bfloat16 starts a run: the same logits as its values
 * in float32. */
static void test_bf16_weights(void **state) {
    (void)state;
    char f32[512], bf16[512];
    snprintf(f32, sizeof f32, "%s/bf16-values.safetensors", tmpdir);
    snprintf(bf16, sizeof bf16, "%s/bf16.safetensors", tmpdir);
    write_variant(f32, BF16_VALUES);
    write_raw_form(f32, bf16, RAW_BF16);
    float *want = logits_of(f32, T, V), *got = logits_of(bf16, T, V);
    assert_memory_equal(got, want, sizeof(float) * B * T * V);
    free(want);
    free(got);
}

/* Files other writers make, read as the same model: F32 data not 4-byte
 * aligned (copied, not called damaged), and attention masks stored as U8
 * buffers (ignored, whatever their dtype). */
static void test_other_writers_layouts(void **state) {
    (void)state;
    char path[512];
    float *want = logits_of(fixture, T, V);
    static const enum raw_form forms[] = {RAW_UNALIGNED, RAW_U8_MASK};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(path, sizeof path, "%s/form%d.safetensors", tmpdir, (int)forms[i]);
        write_raw_form(fixture, path, forms[i]);
        float *got = logits_of(path, T, V);
        assert_memory_equal(got, want, sizeof(float) * B * T * V);
        free(got);
    }
    free(want);
}

static void test_names_and_layouts(void **state) {
    (void)state;
    float *base = logits_of(fixture, T, V);
    const unsigned variants[] = {SHORT_NAMES, ORIG_MOD, SHORT_NAMES | WITH_HEAD, LINEAR, LINEAR | WITH_HEAD | ORIG_MOD};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/variant%zu.safetensors", tmpdir, i);
        write_variant(path, variants[i]);
        plait_weights *w = NULL;
        char buf[256];
        harness h;
        assert_int_equal(harness_init(&h, ini(buf, sizeof buf, L, C, T, V), B, 1, 0, NULL), 0);
        assert_int_equal(plait_weights_open(path, h.spec, h.cfg, &w), PLAIT_OK);
        assert_int_equal(plait_weights_orientation(w), (variants[i] & LINEAR) ? PLAIT_GPT2_LINEAR : PLAIT_GPT2_CONV1D);
        plait_weights_close(w);
        harness_free(&h);
        float *got = logits_of(path, T, V);
        assert_memory_equal(got, base, sizeof(float) * B * T * V);
        free(got);
    }
    free(base);
}

/* Slices as tensor parallelism cuts them: c_attn's q/k/v groups from the
 * transposed file tensor, the vocabulary with padding rows. */
static void test_tp_slices(void **state) {
    (void)state;
    char buf[256];
    harness h;
    assert_int_equal(harness_init(&h, ini(buf, sizeof buf, L, C, T, V), B, 1, 0, NULL), 0);
    plait_weights *w = NULL;
    assert_int_equal(plait_weights_open(fixture, h.spec, h.cfg, &w), PLAIT_OK);
    const char *names[] = {"transformer.h.1.attn.c_attn.weight", "transformer.h.0.mlp.c_proj.weight",
                           "transformer.wte.weight", "lm_head.weight"};
    for (size_t i = 0; i < 4; i++) {
        plait_param whole = *harness_param(&h, names[i]);
        plait_shard sh = whole.shard;
        sh.parts = 2;
        sh.index = 1;
        if (whole.tp_role == PLAIT_TP_VOCAB) sh.padded_len = 64;
        plait_param part = whole;
        assert_int_equal(plait_param_apply_shard(&part, &sh), PLAIT_OK);
        float *full = malloc(whole.numel * sizeof(float)), *got = malloc(part.numel * sizeof(float)),
              *want = malloc(part.numel * sizeof(float));
        plait_param g = whole;
        plait_shard none = whole.shard;
        none.parts = 1;
        none.index = 0;
        assert_int_equal(plait_param_apply_shard(&g, &none), PLAIT_OK);
        assert_int_equal(plait_weights_read(w, &g, 0, g.numel, full), PLAIT_OK);
        /* chunks, as ZeRO partitions read them */
        size_t half = part.numel / 2;
        assert_int_equal(plait_weights_read(w, &part, 0, half, got), PLAIT_OK);
        assert_int_equal(plait_weights_read(w, &part, half, part.numel - half, got + half), PLAIT_OK);
        assert_int_equal(plait_shard_extract(part.ndim, part.shape, &part.shard, full, 0, part.numel, want), PLAIT_OK);
        assert_memory_equal(got, want, part.numel * sizeof(float));
        if (whole.tp_role == PLAIT_TP_VOCAB) /* rows 50..63 of slice 1 (local rows 18..31) are padding */
            for (size_t e = 18 * C; e < part.numel; e++) assert_true(got[e] == 0.0f);
        free(full);
        free(got);
        free(want);
    }
    /* the transpose itself: plait's c_attn.weight[o][i] is the file's [i][o] */
    plait_st_file *src = NULL;
    assert_int_equal(plait_st_open(fixture, 0, &src), PLAIT_OK);
    const plait_st_tensor *t = plait_st_find(src, "transformer.h.1.attn.c_attn.weight");
    plait_param *p = harness_param(&h, "transformer.h.1.attn.c_attn.weight");
    float *mine = malloc(p->numel * sizeof(float));
    assert_int_equal(plait_weights_read(w, p, 0, p->numel, mine), PLAIT_OK);
    assert_true(mine[5 * C + 3] == t->data[3 * 3 * C + 5]);
    assert_true(mine[(3 * C - 1) * C + C - 1] == t->data[(C - 1) * 3 * C + 3 * C - 1]);
    free(mine);
    plait_st_close(src);
    plait_weights_close(w);
    harness_free(&h);
}

static void expect_refusal(const char *path, const char *ini_text, const char *const *needles) {
    harness h;
    assert_int_equal(harness_init(&h, ini_text, B, 1, 0, NULL), 0);
    plait_weights *w = NULL;
    plait_status st = plait_weights_open(path, h.spec, h.cfg, &w);
    const char *msg = plait_last_error();
    if (st == PLAIT_OK) fail_msg("%s accepted for %s", path, ini_text);
    assert_null(w);
    for (const char *const *n = needles; *n; n++)
        if (!strstr(msg, *n)) fail_msg("error '%s' does not mention '%s'", msg, *n);
    harness_free(&h);
}

static void test_refusals(void **state) {
    (void)state;
    char buf[256];
    expect_refusal(fixture, ini(buf, sizeof buf, L, C, T, 40),
                   (const char *const[]){fixture, "transformer.wte.weight", "[50, 32]", "[40, 32]", NULL});
    expect_refusal(fixture, ini(buf, sizeof buf, L, C, 30, V),
                   (const char *const[]){"transformer.wpe.weight", "[24, 32]", "[30, 32]", NULL});
    expect_refusal(fixture, ini(buf, sizeof buf, L, 64, T, V),
                   (const char *const[]){"transformer.h.0.mlp.c_fc.weight", "[32, 128]", "[64, 256]", NULL});
    expect_refusal(fixture, ini(buf, sizeof buf, 3, C, T, V),
                   (const char *const[]){"no tensor 'transformer.h.2.ln_1.weight'", "n_layer = 3", NULL});
    expect_refusal(fixture, ini(buf, sizeof buf, 1, C, T, V),
                   (const char *const[]){"transformer.h.1.", "not a parameter of this model", NULL});
    char path[512];
    snprintf(path, sizeof path, "%s/bad_head.safetensors", tmpdir);
    write_variant(path, BAD_HEAD);
    expect_refusal(path, ini(buf, sizeof buf, L, C, T, V), (const char *const[]){"lm_head.weight", "untied", NULL});
    snprintf(path, sizeof path, "%s/no_ln_f.safetensors", tmpdir);
    write_variant(path, DROP_LN_F);
    expect_refusal(path, ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){path, "no tensor 'transformer.ln_f.bias'", NULL});
    expect_refusal("/nonexistent/gpt2.safetensors", ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){"/nonexistent/gpt2.safetensors", NULL});
    /* a file that is not safetensors: the reader's refusal, naming it */
    snprintf(path, sizeof path, "%s/garbage.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs("not a safetensors file at all", f);
    fclose(f);
    expect_refusal(path, ini(buf, sizeof buf, L, C, T, V), (const char *const[]){path, NULL});
    /* a NaN among the weights: named with its tensor and element, before any step */
    snprintf(path, sizeof path, "%s/nan.safetensors", tmpdir);
    write_variant(path, A_NAN);
    expect_refusal(path, ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){path, "tensor 'transformer.h.1.mlp.c_fc.weight' holds a non-finite value "
                                               "(NaN) at element 17", NULL});
    /* a parameter stored as U8 (a quantised model): named with its dtype */
    snprintf(path, sizeof path, "%s/u8.safetensors", tmpdir);
    write_raw_form(fixture, path, RAW_U8_PARAM);
    expect_refusal(path, ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){path, "h.0.ln_1.bias has dtype U8, which plait does not read", NULL});
    /* the small MLP arch has no GPT-2 weights */
    expect_refusal(fixture, "[model]\narch = mlp\nn_layer = 2\nn_embd = 32\n",
                   (const char *const[]){"arch = mlp", NULL});
}

/* A config.json beside a Hugging Face GPT-2 file: what the shapes cannot
 * tell (the head count, the LayerNorm epsilon, the activation, the
 * attention's scaling) must be what the run computes, or it is refused
 * naming the key; plait's own values load. */
static void write_config(const char *dir, const char *json) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
}

static void test_hf_config_json(void **state) {
    (void)state;
    char dir[512], model[600], buf[256], json[512];
    snprintf(dir, sizeof dir, "%s/hfdir", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    write_variant(model, 0);
    const char *good = "{\"model_type\": \"gpt2\", \"n_head\": %d, \"n_embd\": 32, \"layer_norm_epsilon\": "
                       "1e-05, \"activation_function\": \"gelu_new\", \"scale_attn_weights\": true, "
                       "\"scale_attn_by_inverse_layer_idx\": false%s}";
    snprintf(json, sizeof json, good, H, "");
    write_config(dir, json);
    harness h;
    assert_int_equal(harness_init(&h, ini(buf, sizeof buf, L, C, T, V), B, 1, 0, NULL), 0);
    if (load(&h, dir) != PLAIT_OK) fail_msg("%s: %s", dir, plait_last_error());
    if (load(&h, model) != PLAIT_OK) fail_msg("%s: %s", model, plait_last_error());
    harness_free(&h);
    /* the same shapes with other heads: the file's count, and what to give */
    snprintf(json, sizeof json, good, 2, "");
    write_config(dir, json);
    expect_refusal(dir, ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){"config.json", "n_head = 2", "n_head = 4", "model.n_head=2", NULL});
    expect_refusal(model, ini(buf, sizeof buf, L, C, T, V), (const char *const[]){"model.n_head=2", NULL});
    /* left out: GPT2Config's 12 */
    write_config(dir, "{\"model_type\": \"gpt2\"}");
    expect_refusal(dir, ini(buf, sizeof buf, L, C, T, V),
                   (const char *const[]){"n_head = 12 (GPT2Config's default)", NULL});
    /* nanoGPT's GPTConfig fields (no model_type): the head count compared */
    write_config(dir, "{\"n_layer\": 2, \"n_head\": 8, \"n_embd\": 32}");
    expect_refusal(dir, ini(buf, sizeof buf, L, C, T, V), (const char *const[]){"n_head = 8", NULL});
    const char *const features[][2] = {
        {", \"activation_function\": \"relu\"", "activation_function = 'relu'"},
        {", \"layer_norm_epsilon\": 1e-6", "layer_norm_epsilon"},
        {", \"scale_attn_by_inverse_layer_idx\": true", "scale_attn_by_inverse_layer_idx"},
        {", \"scale_attn_weights\": false", "scale_attn_weights"},
    };
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++) {
        /* the later member of the same name: written in its place instead */
        snprintf(json, sizeof json, "{\"model_type\": \"gpt2\", \"n_head\": %d%s}", H, features[i][0]);
        write_config(dir, json);
        expect_refusal(dir, ini(buf, sizeof buf, L, C, T, V),
                       (const char *const[]){"config.json", features[i][1], NULL});
    }
}

static int setup(void **state) {
    (void)state;
    const char *src = getenv("PLAIT_SOURCE_DIR");
    if (!src) src = ".";
    snprintf(fixture, sizeof fixture, "%s/tests/reference/hf_gpt2_tiny.safetensors", src);
    snprintf(reference, sizeof reference, "%s/tests/reference/hf_gpt2_tiny_ref.safetensors", src);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/plait-test-weights-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_logits_match_pytorch),
        cmocka_unit_test(test_padded_vocab_and_short_context),
        cmocka_unit_test(test_names_and_layouts),
        cmocka_unit_test(test_bf16_weights),
        cmocka_unit_test(test_tp_slices),
        cmocka_unit_test(test_other_writers_layouts),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_hf_config_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
