#include "checkpoint/checkpoint_state.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"

static const char *const file_names[2] = {PLAIT_CKPT_MODEL_FILE, PLAIT_CKPT_OPTIM_FILE};

plait_status plait_ckpt_refuse(const char *dir, const char *file, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "checkpoint refused: %s/%s: %s", dir, file, msg);
}

void plait_ckpt_state_render(plait_jbuf *b, const plait_ckpt_state *s, const plait_ckpt_file_fact facts[2],
                             const plait_ckpt_extra_files *extra, char *const *meta_key, char *const *meta_val,
                             size_t n_meta) {
    size_t n_extra = extra ? extra->n : 0;
    plait_jbuf_printf(b, "{\n  \"format\": \"%s\",\n  \"format_version\": %d,\n  \"plait_version\": ",
                      PLAIT_CKPT_FORMAT_NAME, n_extra ? 3 : 2);
    plait_jbuf_string(b, PLAIT_VERSION);
    plait_jbuf_printf(b, ",\n  \"step\": %lld,\n  \"seed\": %lld,\n  \"data_step\": %lld,\n  \"optim_step\": %lld,\n",
                      (long long)s->step, (long long)s->seed, (long long)s->data_step, (long long)s->optim_step);
    plait_jbuf_puts(b, "  \"data\": {\"path\": ");
    plait_jbuf_string(b, s->data.path ? s->data.path : "");
    plait_jbuf_printf(b, ", \"tokens\": %lld, \"train_tokens\": %lld, \"train_crc32c\": \"%08" PRIx32 "\"},\n",
                      (long long)s->data.tokens, (long long)s->data.train_tokens, s->data.train_crc32c);
    plait_jbuf_puts(b, "  \"layout\": ");
    plait_jbuf_string(b, s->layout ? s->layout : "");
    plait_jbuf_puts(b, ",\n  \"files\": {");
    for (int f = 0; f < 2; f++)
        plait_jbuf_printf(b, "%s\n    \"%s\": {\"bytes\": %llu, \"crc32c\": \"%08x\"}", f ? "," : "", file_names[f],
                          (unsigned long long)facts[f].bytes, facts[f].crc);
    for (size_t i = 0; i < n_extra; i++) {
        plait_jbuf_puts(b, ",\n    ");
        plait_jbuf_string(b, extra->name[i]);
        plait_jbuf_printf(b, ": {\"bytes\": %llu, \"crc32c\": \"%08x\"}", (unsigned long long)extra->fact[i].bytes,
                          extra->fact[i].crc);
    }
    plait_jbuf_puts(b, "\n  },\n  \"meta\": {");
    for (size_t i = 0; i < n_meta; i++) {
        plait_jbuf_puts(b, i ? ",\n    " : "\n    ");
        plait_jbuf_string(b, meta_key[i]);
        plait_jbuf_puts(b, ": ");
        plait_jbuf_string(b, meta_val[i]);
    }
    plait_jbuf_puts(b, n_meta ? "\n  }\n}\n" : "}\n}\n");
}

/* Every number of state.json counts something (steps, tokens, the seed of
 * [run] seed): an integer >= 0. */
static plait_status get_int(const char *dir, const plait_json *obj, const char *key, int64_t *out) {
    const plait_json *v = plait_json_get(obj, key);
    if (!v || v->type != PLAIT_JSON_INT || v->num < 0)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"%s\" is missing or not an integer >= 0", key);
    *out = v->num;
    return PLAIT_OK;
}

/* "data": the training data the run read (format 2). */
static plait_status parse_data(const char *dir, const plait_json *root, plait_ckpt_data *out) {
    const plait_json *d = plait_json_get(root, "data");
    const plait_json *path = plait_json_get(d, "path"), *crc = plait_json_get(d, "train_crc32c");
    uint64_t c = 0;
    if (!d || d->type != PLAIT_JSON_OBJECT || !path || path->type != PLAIT_JSON_STRING || !crc ||
        crc->type != PLAIT_JSON_STRING || plait_json_hex(crc->str, 8, &c) != 0)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE,
                                 "\"data\" must hold \"path\", \"tokens\", \"train_tokens\" and \"train_crc32c\" "
                                 "(8 hex digits)");
    plait_status st = get_int(dir, d, "tokens", &out->tokens);
    if (st == PLAIT_OK) st = get_int(dir, d, "train_tokens", &out->train_tokens);
    if (st != PLAIT_OK) return st;
    out->path = path->str;
    out->train_crc32c = (uint32_t)c;
    return PLAIT_OK;
}

plait_status plait_ckpt_state_parse(const char *dir, const char *text, size_t len, plait_json_doc **doc,
                                    plait_ckpt_state *state, const plait_json **meta, plait_ckpt_file_fact facts[2]) {
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "%s/" PLAIT_CKPT_STATE_FILE, dir);
    plait_status st = plait_json_parse(text, len, what, doc);
    if (st != PLAIT_OK) return plait_wrap_error(st, "checkpoint %s refused", dir);
    const plait_json *root = plait_json_root(*doc);
    const plait_json *fmt = plait_json_get(root, "format");
    if (!fmt || fmt->type != PLAIT_JSON_STRING || strcmp(fmt->str, PLAIT_CKPT_FORMAT_NAME) != 0)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"format\" is not \"%s\"", PLAIT_CKPT_FORMAT_NAME);
    int64_t version = 0, seed = 0;
    if ((st = get_int(dir, root, "format_version", &version)) != PLAIT_OK) return st;
    if (version < 1 || version > PLAIT_CKPT_FORMAT_VERSION)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE,
                                 "format_version %lld is not 1 to %d (written by a %s plait); use a matching plait "
                                 "version",
                                 (long long)version, PLAIT_CKPT_FORMAT_VERSION,
                                 version > PLAIT_CKPT_FORMAT_VERSION ? "newer" : "foreign");
    memset(state, 0, sizeof *state);
    if ((st = get_int(dir, root, "step", &state->step)) != PLAIT_OK) return st;
    if ((st = get_int(dir, root, "seed", &seed)) != PLAIT_OK) return st;
    state->seed = (uint64_t)seed;
    if ((st = get_int(dir, root, "data_step", &state->data_step)) != PLAIT_OK) return st;
    if ((st = get_int(dir, root, "optim_step", &state->optim_step)) != PLAIT_OK) return st;
    /* format 1 recorded no data, and an "rng_state" that was always 0 */
    state->has_data = version >= 2;
    if (state->has_data && (st = parse_data(dir, root, &state->data)) != PLAIT_OK) return st;
    const plait_json *layout = plait_json_get(root, "layout");
    if (!layout || layout->type != PLAIT_JSON_STRING)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"layout\" is missing");
    state->layout = layout->str;
    *meta = plait_json_get(root, "meta");
    if (!*meta || (*meta)->type != PLAIT_JSON_OBJECT)
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"meta\" is missing or not an object");
    for (const plait_json *m = (*meta)->child; m; m = m->next)
        if (m->type != PLAIT_JSON_STRING)
            return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "meta \"%s\" is not a string", m->key);
    const plait_json *files = plait_json_get(root, "files");
    if (!files || files->type != PLAIT_JSON_OBJECT || files->count < 2 || (version < 3 && files->count != 2))
        return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"files\" must list %s and %s", file_names[0],
                                 file_names[1]);
    for (const plait_json *e = files->child; e; e = e->next) {
        const plait_json *bytes = plait_json_get(e, "bytes"), *crc = plait_json_get(e, "crc32c");
        uint64_t c;
        /* a file of the checkpoint directory itself, never a path */
        if (e->type != PLAIT_JSON_OBJECT || e->count != 2 || !bytes || bytes->type != PLAIT_JSON_INT ||
            bytes->num < 0 || !crc || crc->type != PLAIT_JSON_STRING || plait_json_hex(crc->str, 8, &c) != 0 ||
            !e->key[0] || strchr(e->key, '/') || e->key[0] == '.' || strlen(e->key) > 255)
            return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "files entry for %s is malformed", e->key);
        for (int f = 0; f < 2; f++)
            if (strcmp(e->key, file_names[f]) == 0) {
                facts[f].bytes = (uint64_t)bytes->num;
                facts[f].crc = (uint32_t)c;
            }
    }
    for (int f = 0; f < 2; f++)
        if (!plait_json_get(files, file_names[f]))
            return plait_ckpt_refuse(dir, PLAIT_CKPT_STATE_FILE, "\"files\" must list %s and %s", file_names[0],
                                     file_names[1]);
    return PLAIT_OK;
}

int plait_ckpt_state_extra_file(const plait_json_doc *doc, size_t i, const char **name, plait_ckpt_file_fact *fact) {
    const plait_json *files = plait_json_get(plait_json_root(doc), "files");
    for (const plait_json *e = files ? files->child : NULL; e; e = e->next) {
        if (strcmp(e->key, file_names[0]) == 0 || strcmp(e->key, file_names[1]) == 0 || i-- > 0) continue;
        uint64_t c = 0;
        (void)plait_json_hex(plait_json_get(e, "crc32c")->str, 8, &c);
        *name = e->key;
        fact->bytes = (uint64_t)plait_json_get(e, "bytes")->num;
        fact->crc = (uint32_t)c;
        return 1;
    }
    return 0;
}
