#include "cli/sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "kernels/kernels.h"
#include "comm/comm.h"
#include "device/device.h"
#include "host/host_table.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "runtime/memory.h"
#include "runtime/process_state.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/llama_hf.h"
#include "cli/cli.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "train/run_source.h"
#include "train/precision.h"
#include "tokenizer/tokenizer.h"

/* A configuration holding the checkpoint's [model] keys (everything else
 * default). They are read as a config text named after the model file, so a
 * bad value is reported as the checkpoint's, never as a command-line override. */
static plait_status config_from_checkpoint(const plait_ckpt *ck, plait_config **out) {
    plait_config *cfg = plait_config_new();
    if (!cfg) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_config_declare_core(cfg);
    char text[2048], where[4200];
    size_t len = (size_t)snprintf(text, sizeof text, "[model]\n");
    for (size_t i = 0; st == PLAIT_OK && plait_ckpt_model_keys[i]; i++) {
        char key[64];
        snprintf(key, sizeof key, "plait.model.%s", plait_ckpt_model_keys[i]);
        const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
        if (!v || strpbrk(v, "\n\r;#") || strlen(v) > 100) {
            st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s/" PLAIT_CKPT_MODEL_FILE ": the '%s' metadata is %s (not "
                                                     "written by plait train?)",
                                 plait_ckpt_dir(ck), key, v ? "not a single short value" : "missing");
            break;
        }
        len += (size_t)snprintf(text + len, sizeof text - len, "%s = %s\n", plait_ckpt_model_keys[i], v);
    }
    /* a llama's own keys and a mixture of experts', where the checkpoint records them */
    const char *const *const lists[] = {plait_llama_ckpt_keys, plait_ckpt_moe_keys};
    for (size_t l = 0; l < 2; l++)
        for (size_t i = 0; st == PLAIT_OK && lists[l][i]; i++) {
            char key[64];
            snprintf(key, sizeof key, "plait.model.%s", lists[l][i]);
            const char *v = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, key);
            if (v && !strpbrk(v, "\n\r;#") && strlen(v) <= 100 && len < sizeof text)
                len += (size_t)snprintf(text + len, sizeof text - len, "%s = %s\n", lists[l][i], v);
        }
    snprintf(where, sizeof where, "%s/" PLAIT_CKPT_MODEL_FILE " (metadata plait.model.*)", plait_ckpt_dir(ck));
    if (st == PLAIT_OK) st = plait_config_load_string(cfg, where, text);
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, (char *const[]){NULL});
    if (st != PLAIT_OK) {
        plait_config_free(cfg);
        return st;
    }
    *out = cfg;
    return PLAIT_OK;
}

/* `plait sample DIR/model.safetensors`: the checkpoint is the directory. */
static plait_status refuse_file_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return PLAIT_OK;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    else snprintf(dir, sizeof dir, "%s", slash ? "/" : ".");
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "%s is %s; plait sample reads a checkpoint directory (ckpt-<step>) or a run "
                           "directory: try 'plait sample %s'",
                           path, S_ISREG(sb.st_mode) ? "a file" : plait_file_kind(sb.st_mode), dir);
}

/* xorshift64*: the sampler's own generator, seeded by --seed. */
static double next_uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static int by_mass(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Nucleus sampling: keep the most likely tokens whose mass first reaches
 * top_p of `sum` (every token as likely as the last one kept, too), zero
 * the rest; the new sum. `sorted` holds V doubles. */
static double nucleus(double *p, int32_t V, double sum, double top_p, double *sorted) {
    memcpy(sorted, p, sizeof(double) * (size_t)V);
    qsort(sorted, (size_t)V, sizeof(double), by_mass);
    double mass = 0, cut = sorted[0];
    for (int32_t i = 0; i < V && sorted[i] > 0; i++) {
        mass += sorted[i];
        cut = sorted[i];
        if (mass >= top_p * sum) break;
    }
    double kept = 0;
    for (int32_t v = 0; v < V; v++) {
        if (p[v] < cut) p[v] = 0;
        kept += p[v];
    }
    return kept;
}

static int32_t pick(const float *logits, int32_t V, double temperature, int32_t top_k, double top_p, uint64_t *rng,
                    double *p) {
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0) return best;
    /* top-k threshold: the k-th largest logit */
    float threshold = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *copy = malloc(sizeof(float) * (size_t)V);
        if (copy) {
            memcpy(copy, logits, sizeof(float) * (size_t)V);
            for (int32_t i = 0; i < top_k; i++) { /* partial selection; V is small */
                int32_t m = i;
                for (int32_t j = i + 1; j < V; j++)
                    if (copy[j] > copy[m]) m = j;
                float t = copy[i];
                copy[i] = copy[m];
                copy[m] = t;
            }
            threshold = copy[top_k - 1];
            free(copy);
        }
    }
    double sum = 0;
    for (int32_t v = 0; v < V; v++) {
        p[v] = logits[v] >= threshold ? exp(((double)logits[v] - logits[best]) / temperature) : 0;
        sum += p[v];
    }
    if (top_p < 1) {
        double *sorted = malloc(sizeof(double) * (size_t)V);
        if (sorted) sum = nucleus(p, V, sum, top_p, sorted);
        free(sorted);
    }
    double u = next_uniform(rng) * sum;
    for (int32_t v = 0; v < V; v++) {
        u -= p[v];
        if (u <= 0 && p[v] > 0) return v;
    }
    return best;
}

static plait_status parse_prompt(const char *prompt, int32_t vocab, int32_t **out, int64_t *n) {
    size_t len = strlen(prompt);
    int32_t *t = malloc(sizeof(int32_t) * (len + 1));
    if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    int64_t k = 0;
    if (vocab <= 256) {
        for (size_t i = 0; i < len; i++) {
            const unsigned char c = (unsigned char)prompt[i];
            if (c >= vocab) { /* a byte-level model of fewer than 256 tokens */
                free(t);
                return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                       "--prompt: byte %zu is 0x%02x, outside the model's %d-token vocabulary of "
                                       "bytes 0..%d (its text is bytes below 0x%02x%s)",
                                       i, c, vocab, vocab - 1, vocab,
                                       vocab == 128 ? ": ASCII; a character outside it is several bytes of 0x80 "
                                                      "or more in UTF-8"
                                                    : "");
            }
            t[k++] = c;
        }
    } else {
        const char *p = prompt;
        while (*p) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v >= vocab) {
                free(t);
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "--prompt: with a %d-token vocabulary give token ids "
                                                              "(0..%d) separated by spaces",
                                       vocab, vocab - 1);
            }
            t[k++] = (int32_t)v;
            p = end;
            while (*p == ' ') p++;
        }
    }
    *out = t;
    *n = k;
    return PLAIT_OK;
}

/* The run's tokenizer: --tokenizer, else the one recorded at training. */
static plait_status open_tokenizer(const plait_sample_options *o, const plait_ckpt *ck, plait_tokenizer **tok) {
    *tok = NULL;
    const char *path = o->tokenizer ? o->tokenizer : plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.data.tokenizer");
    if (!path || !*path) return PLAIT_OK;
    plait_status st = plait_tokenizer_load(path, tok);
    if (st != PLAIT_OK && !o->tokenizer)
        return plait_set_error(st, "%s (the tokenizer this run was trained with; give --tokenizer DIR if it moved)",
                               plait_last_error());
    /* the recorded tokenizer must still be the one the run trained with:
     * replaced in place, it would turn the model's ids into other text */
    const char *want = o->tokenizer ? NULL : plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.data.tokenizer_fingerprint");
    char have[24];
    if (st == PLAIT_OK && want) {
        snprintf(have, sizeof have, "%016llx", (unsigned long long)plait_tokenizer_fingerprint(*tok));
        if (strcmp(have, want) != 0) {
            plait_tokenizer_free(*tok);
            *tok = NULL;
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "the tokenizer at %s has changed since this run trained with it (fingerprint %s, "
                                   "recorded %s): its ids would decode to other text; give --tokenizer DIR with the "
                                   "run's tokenizer (or this one, to use it anyway)",
                                   path, have, want);
        }
    }
    return st;
}

/* The prompt's ids through the tokenizer, after the token its
 * post-processor puts first (Llama 3's <|begin_of_text|>), as Hugging Face
 * encodes a prompt; without one, an empty prompt is <|endoftext|>, or a
 * newline when the vocabulary has no such token. */
static plait_status encode_prompt(const plait_tokenizer *tok, const char *prompt, int32_t **out, int64_t *n) {
    plait_token_buf ids = {0};
    plait_status st = plait_tokenizer_encode_prompt(tok, prompt, strlen(prompt), &ids);
    if (st == PLAIT_OK && ids.len == 0)
        st = plait_tokenizer_eot(tok) >= 0 ? plait_token_buf_push(&ids, plait_tokenizer_eot(tok))
                                           : plait_tokenizer_encode(tok, "\n", 1, &ids);
    if (st != PLAIT_OK) {
        plait_token_buf_free(&ids);
        return st;
    }
    *out = ids.ids ? ids.ids : malloc(sizeof(int32_t));
    *n = (int64_t)ids.len;
    return *out ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
}

static void write_token(const plait_tokenizer *tok, int32_t V, int32_t id, FILE *out, int tty) {
    const unsigned char *bytes;
    size_t len;
    unsigned char one = (unsigned char)id;
    if (tok && plait_tokenizer_token(tok, id, &bytes, &len) == PLAIT_OK) plait_cli_put_bytes(bytes, len, out, tty);
    else if (V <= 256) plait_cli_put_bytes(&one, 1, out, tty);
    else fprintf(out, "%d ", id);
}

/* long: `plait sample` in the order it happens, from the checkpoint to the
 * last token: a model set up by hand (no job) whose every object is freed
 * at one end */
plait_status plait_sample(const plait_sample_options *o, FILE *out) {
    plait_ckpt *ck = NULL;
    plait_status st = refuse_file_path(o->checkpoint);
    if (st != PLAIT_OK) return st;
    st = plait_ckpt_open_named(o->checkpoint, &ck);
    if (st != PLAIT_OK) return st;
    st = plait_ckpt_check_finite(ck);
    if (st != PLAIT_OK) {
        plait_ckpt_close(ck);
        return st;
    }
    plait_run run;
    memset(&run, 0, sizeof run);
    plait_run_source src;
    int have_src = 0;
    plait_tokenizer *tok = NULL;
    int32_t *ctx = NULL;
    double *probs = NULL;
    float *row = NULL; /* the last position's logits, read from the device */
    st = config_from_checkpoint(ck, &run.cfg);
    if (st == PLAIT_OK) st = plait_model_describe(run.cfg, 1, &run.model.desc);
    if (st == PLAIT_OK) {
        run.model.spec = plait_model_desc_spec(run.model.desc);
        run.work.batch = (plait_batch){.global_batch = 1, .micro_batch = 1, .accumulation = 1, .dp = 1};
        run.model.block_size = run.model.spec->block_size;
        st = plait_run_prefill_plan(&run);
    }
    /* the device and precision as `plait train` chooses them (the run's
     * config, PLAIT_* variables, overrides); sampling joins no job, one
     * math thread */
    plait_config *dev_cfg = NULL;
    int device_open = 0, precision = PLAIT_KERNELS_FP32;
    if (st == PLAIT_OK) st = plait_cli_load_config(o->config, o->n_overrides, o->overrides, &dev_cfg);
    if (st == PLAIT_OK) st = plait_precision_from_config(dev_cfg, &precision);
    if (st == PLAIT_OK) {
        st = plait_device_open(plait_plugin_host(), dev_cfg, 0, 1);
        device_open = st == PLAIT_OK;
        plait_host_attach_device();
    }
    /* the core's own CPU kernels compute as the device's do (run_world.c) */
    if (st == PLAIT_OK && plait_kernels_set_precision(precision) != 0)
        st = plait_set_error(PLAIT_ERR_INTERNAL, "the kernels refused precision mode %d", precision);
    if (st == PLAIT_OK) st = plait_run_build_params(&run);
    if (st == PLAIT_OK) st = plait_run_alloc_storage(&run);
    if (st == PLAIT_OK) {
        plait_ckpt_source_init(&src.cks, ck, run.model.spec, &run.params.set);
        src.source = src.cks.src;
        src.ck = NULL; /* closed below, not by the source */
        have_src = 1;
        st = plait_run_source_fill_params(&run, &src);
    }
    if (st == PLAIT_OK) {
        plait_model_create_args args = {.plan = &run.work.plan, .stage = 0, .params = &run.params.set, .max_slots = 1};
        st = plait_model_create(run.model.desc, &args, &run.model.instance);
    }
    if (st == PLAIT_OK) st = plait_run_source_fill_buffers(&run, &src); /* the routers' selection bias */
    int32_t V = run.model.spec ? run.model.spec->vocab_size : 0, T = run.model.block_size;
    int64_t n = 0;
    if (st == PLAIT_OK) st = open_tokenizer(o, ck, &tok);
    /* sample only ids the tokenizer has (GPT-2's 50257 of a padded 50304) */
    int32_t V_pick = tok && plait_tokenizer_vocab_size(tok) < V ? plait_tokenizer_vocab_size(tok) : V;
    if (st == PLAIT_OK && tok && plait_tokenizer_vocab_size(tok) > V)
        st = plait_set_error(PLAIT_ERR_INVALID_ARG, "tokenizer %s has %d ids, more than the model's %d",
                             plait_tokenizer_source(tok), plait_tokenizer_vocab_size(tok), V);
    /* no prompt: the default text, where there is text to give */
    const char *prompt = o->prompt ? o->prompt : tok || V <= 256 ? PLAIT_SAMPLE_DEFAULT_PROMPT : "";
    if (st == PLAIT_OK && !o->prompt && *prompt)
        fprintf(stderr, "plait sample: no --prompt given: starting from \"%s\" (the default; --prompt TEXT "
                        "chooses another, --prompt '' starts from nothing)\n", prompt);
    if (st == PLAIT_OK)
        st = tok ? encode_prompt(tok, prompt, &ctx, &n) : parse_prompt(prompt, V, &ctx, &n);
    if (st == PLAIT_OK) {
        int32_t *grown = realloc(ctx, sizeof(int32_t) * (size_t)(n + o->tokens + 1));
        probs = malloc(sizeof(double) * (size_t)V);
        row = malloc(sizeof(float) * (size_t)V);
        if (!grown || !probs || !row) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        else ctx = grown;
    }
    if (st == PLAIT_OK && n == 0) ctx[n++] = '\n' < V ? '\n' : 0; /* an empty prompt starts a new line */
    plait_kernels_set_threads(1); /* sampling joins no job: one math thread */
    int32_t *window = st == PLAIT_OK ? calloc((size_t)T, sizeof(int32_t)) : NULL;
    if (st == PLAIT_OK && !window) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 1;
    int tty = isatty(fileno(out));
    /* each token's calls into the device plugin are compared with this, as
     * `plait train` compares each step's (train/run.h) */
    plait_process_state set_up;
    plait_process_state_take(&set_up);
    /* the prompt as given, not an <|endoftext|> */
    if (st == PLAIT_OK && tok) plait_cli_put_bytes((const unsigned char *)prompt, strlen(prompt), out, tty);
    for (int64_t i = 0; st == PLAIT_OK && !tok && i < n; i++) write_token(NULL, V, ctx[i], out, tty);
    for (int64_t g = 0; st == PLAIT_OK && g < o->tokens; g++) {
        int64_t start = n > T ? n - T : 0, len = n - start;
        memset(window, 0, sizeof(int32_t) * (size_t)T);
        memcpy(window, ctx + start, sizeof(int32_t) * (size_t)len);
        st = plait_model_set_batch(run.model.instance, 0, window, NULL);
        for (int32_t l = 0; st == PLAIT_OK && l < run.model.spec->n_layers; l++) st = plait_model_forward_layer(run.model.instance, l, 0);
        if (st != PLAIT_OK) break;
        const float *logits = plait_model_logits(run.model.instance, 0) + (size_t)(len - 1) * (size_t)run.work.plan.vocab_padded;
        st = plait_device_copy(row, logits, sizeof(float) * (size_t)V, PLAIT_COPY_TO_HOST);
        char subject[160];
        snprintf(subject, sizeof subject, "token %lld: the calls into the device plugin '%s'", (long long)g + 1,
                 plait_config_str(dev_cfg, "device", "plugin"));
        if (st == PLAIT_OK) st = plait_process_state_refuse(&set_up, subject, "");
        if (st != PLAIT_OK) break;
        int32_t next = pick(row, V_pick, o->temperature, o->top_k, o->top_p, &rng, probs);
        ctx[n++] = next;
        write_token(tok, V, next, out, tty);
        fflush(out);
    }
    if (st == PLAIT_OK) fputc('\n', out);
    plait_process_state_free(&set_up);
    free(window);
    free(probs);
    free(ctx);
    (void)have_src;
    plait_model_free(run.model.instance);
    plait_run_free_params(&run);
    free(row);
    if (device_open) {
        plait_device_close();
        plait_host_attach_device();
    }
    plait_kernels_set_precision(PLAIT_KERNELS_FP32);
    plait_config_free(dev_cfg);
    free(run.work.plan.shards);
    free(run.work.plan.second_shards);
    free(run.work.plan.layer_stage);
    free(run.work.plan.layer_chunk);
    free(run.work.plan.schedule);
    plait_model_desc_free(run.model.desc);
    plait_config_free(run.cfg);
    plait_ckpt_close(ck);
    plait_tokenizer_free(tok);
    return st;
}
