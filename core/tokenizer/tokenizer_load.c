/* Reading GPT-2's vocab.json + merges.txt and Hugging Face's tokenizer.json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_class.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/safetensors_json.h"

#define MAX_FILE_BYTES ((size_t)1 << 30)

/* "line 7 (byte 120)" for line-based files (line > 0), "byte 120" else. */
static const char *where_text(size_t line, size_t offset, char *buf, size_t cap) {
    if (line) snprintf(buf, cap, "line %zu (byte %zu)", line, offset);
    else snprintf(buf, cap, "byte %zu", offset);
    return buf;
}

/* Token text in GPT-2's byte alphabet -> bytes (at most `len` of them).
 * `offset` is the text's position in the file, `line` its line (0: the
 * file has no lines to speak of, JSON). */
static plait_status alphabet_to_bytes(const char *s, size_t len, unsigned char *out, size_t *n, const char *what,
                                      size_t line, size_t offset) {
    size_t k = 0;
    char where[64];
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t at = i;
        i += plait_utf8_next((const unsigned char *)s + i, len - i, &cp);
        if (cp == UINT32_MAX)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: %s: token \"%.*s\" is not valid UTF-8 (byte 0x%02x at byte %zu of the file): "
                                   "GPT-2's files are UTF-8 text; the file is damaged or not a tokenizer file",
                                   what, where_text(line, offset, where, sizeof where), (int)(len < 80 ? len : 80), s,
                                   (unsigned char)s[at], offset + at);
        int b = plait_unicode_to_byte(cp);
        if (b < 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: %s: token \"%.*s\" has the character U+%04X, which GPT-2's byte "
                                   "alphabet does not use (not a byte-level BPE vocabulary?)",
                                   what, where_text(line, offset, where, sizeof where), (int)(len < 80 ? len : 80), s,
                                   (unsigned)cp);
        out[k++] = (unsigned char)b;
    }
    *n = k;
    return PLAIT_OK;
}

/* The id of a token given in the byte alphabet, or -1. */
static plait_status lookup(const plait_tokenizer *t, const char *s, size_t len, int32_t *id, const char *what,
                           size_t line, size_t offset) {
    unsigned char stack[512] = {0}, *bytes = len <= sizeof stack ? stack : malloc(len);
    if (!bytes) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    size_t n = 0;
    plait_status st = alphabet_to_bytes(s, len, bytes, &n, what, line, offset);
    const int64_t *v = st == PLAIT_OK ? plait_bytes_map_find(&t->tokens, bytes, n) : NULL;
    if (bytes != stack) free(bytes);
    if (st != PLAIT_OK) return st;
    char where[64];
    if (!v)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: %s: merge part \"%.*s\" is not in the vocabulary", what,
                               where_text(line, offset, where, sizeof where), (int)(len < 80 ? len : 80), s);
    *id = (int32_t)*v;
    return PLAIT_OK;
}

static plait_status merge_strings(plait_tokenizer *t, const char *a, size_t la, const char *b, size_t lb,
                                  const char *what, size_t line, size_t offset) {
    int32_t ia, ib;
    plait_status st = lookup(t, a, la, &ia, what, line, offset);
    if (st == PLAIT_OK) st = lookup(t, b, lb, &ib, what, line, offset + la + 1);
    if (st == PLAIT_OK) st = plait_tokenizer_add_merge(t, ia, ib, what, line, offset);
    return st;
}

/* {"token": id, ...} in the byte alphabet. */
static plait_status add_vocab(plait_tokenizer *t, const plait_json *obj, const char *what) {
    if (!obj || obj->type != PLAIT_JSON_OBJECT)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: the vocabulary must be a JSON object of "
                                                   "\"token\": id",
                               what, obj ? obj->pos : 0);
    unsigned char *bytes = NULL;
    size_t cap = 0;
    plait_status st = PLAIT_OK;
    for (const plait_json *c = obj->child; st == PLAIT_OK && c; c = c->next) {
        if (c->type != PLAIT_JSON_INT || c->num < 0 || c->num > INT32_MAX - 1) {
            st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: the id of token \"%.80s\" must be an integer "
                                                     "0..%d",
                                 what, c->pos, c->key, INT32_MAX - 1);
            break;
        }
        size_t len = strlen(c->key), n = 0;
        if (len > cap) {
            unsigned char *p = realloc(bytes, len);
            if (!p) {
                st = plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
                break;
            }
            bytes = p;
            cap = len;
        }
        st = alphabet_to_bytes(c->key, len, bytes, &n, what, 0, c->key_pos);
        if (st == PLAIT_OK) st = plait_tokenizer_add_token(t, bytes, n, (int32_t)c->num, what, c->key_pos);
    }
    free(bytes);
    return st;
}

static plait_status read_json(const char *path, plait_json_doc **doc) {
    char *text = NULL;
    size_t len = 0;
    plait_status st = plait_fs_read_small_file(path, MAX_FILE_BYTES, &text, &len);
    if (st == PLAIT_OK) st = plait_json_parse_any(text, len, path, doc);
    free(text);
    return st;
}

/* merges.txt: an optional "#version" first line, then "a b" per line. */
static plait_status add_merges_txt(plait_tokenizer *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    plait_status st = plait_fs_read_small_file(path, MAX_FILE_BYTES, &text, &len);
    size_t line = 0;
    for (size_t pos = 0; st == PLAIT_OK && pos < len;) {
        char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, stop = end;
        line++;
        if (stop > pos && text[stop - 1] == '\r') stop--;
        if (stop > pos && !(line == 1 && strncmp(text + pos, "#version", 8) == 0)) {
            const char *sp = memchr(text + pos, ' ', stop - pos);
            size_t la = sp ? (size_t)(sp - (text + pos)) : 0;
            if (!sp || la == 0 || la + 1 >= stop - pos || memchr(sp + 1, ' ', (size_t)(text + stop - sp - 1)))
                st = plait_set_error(PLAIT_ERR_PROTOCOL,
                                     "%s: line %zu (byte %zu): expected two tokens separated by one space, found "
                                     "\"%.*s\"",
                                     path, line, pos, (int)(stop - pos < 80 ? stop - pos : 80), text + pos);
            else
                st = merge_strings(t, text + pos, la, sp + 1, stop - pos - la - 1, path, line, pos);
        }
        pos = end + 1;
    }
    free(text);
    return st;
}

plait_status plait_tokenizer_load_gpt2(const char *vocab_json, const char *merges_txt, plait_tokenizer **out) {
    *out = NULL;
    plait_tokenizer *t = plait_tokenizer_new(vocab_json);
    if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory loading %s", vocab_json);
    plait_json_doc *doc = NULL;
    plait_status st = read_json(vocab_json, &doc);
    if (st == PLAIT_OK) st = add_vocab(t, plait_json_root(doc), vocab_json);
    if (st == PLAIT_OK) st = plait_tokenizer_finish_vocab(t, vocab_json);
    plait_json_free(doc);
    if (st == PLAIT_OK) st = add_merges_txt(t, merges_txt);
    if (st != PLAIT_OK) {
        plait_tokenizer_free(t);
        return st;
    }
    *out = t;
    return PLAIT_OK;
}

static int is_string(const plait_json *j, const char *s) {
    return j && j->type == PLAIT_JSON_STRING && strcmp(j->str, s) == 0;
}

/* added_tokens: [{"id": N, "content": "raw text", ...}]; an id the model's
 * vocabulary already has is skipped when it names the same token there
 * (GPT-2's <|endoftext|> is in both), and refused when it names another:
 * one of the two would silently never be produced or decoded. */
static plait_status add_added_tokens(plait_tokenizer *t, const plait_json *arr, const plait_json *vocab,
                                     const char *what) {
    if (!arr || arr->type == PLAIT_JSON_NULL) return PLAIT_OK;
    if (arr->type != PLAIT_JSON_ARRAY)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: \"added_tokens\" must be an array", what, arr->pos);
    for (const plait_json *a = arr->child; a; a = a->next) {
        const plait_json *id = plait_json_get(a, "id"), *content = plait_json_get(a, "content");
        if (!id || id->type != PLAIT_JSON_INT || id->num < 0 || id->num > INT32_MAX - 1 || !content ||
            content->type != PLAIT_JSON_STRING || content->str_len == 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: an added token needs an integer \"id\" and "
                                                       "a non-empty \"content\"",
                                   what, a->pos);
        const plait_json *known = NULL;
        for (const plait_json *v = vocab->child; v && !known; v = v->next)
            if (v->num == id->num) known = v;
        if (known) {
            size_t len = strlen(known->key), n = 0;
            unsigned char *bytes = malloc(len + 1);
            if (!bytes) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
            plait_status st = alphabet_to_bytes(known->key, len, bytes, &n, what, 0, known->key_pos);
            int same = st == PLAIT_OK && n == content->str_len && memcmp(bytes, content->str, n) == 0;
            free(bytes);
            if (st != PLAIT_OK) return st;
            if (same) continue;
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: byte %zu: added token \"%.80s\" has id %lld, which the vocabulary gives to "
                                   "\"%.80s\" (byte %zu): an id names one token; give the added token an id the "
                                   "vocabulary does not use",
                                   what, a->pos, content->str, (long long)id->num, known->key, known->key_pos);
        }
        plait_status st = plait_tokenizer_add_token(t, (const unsigned char *)content->str, content->str_len,
                                                    (int32_t)id->num, what, content->pos);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

/* Which ids are added tokens: ignore_merges never makes a piece of text
 * one of them (Hugging Face looks the piece up in the model's vocabulary). */
static plait_status mark_added(plait_tokenizer *t, const plait_json *arr, const char *what) {
    t->added = calloc((size_t)(t->n_ids ? t->n_ids : 1), 1);
    if (!t->added) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    for (const plait_json *a = arr && arr->type == PLAIT_JSON_ARRAY ? arr->child : NULL; a; a = a->next) {
        const plait_json *content = plait_json_get(a, "content");
        const int64_t *id = plait_bytes_map_find(&t->tokens, content->str, content->str_len);
        if (id) t->added[*id] = 1;
    }
    return PLAIT_OK;
}

/* {"type": "NFC"} and nothing else (Qwen2's normalizer). */
static int nfc_only(const plait_json *v) {
    return v->type == PLAIT_JSON_OBJECT && v->count == 1 && is_string(plait_json_get(v, "type"), "NFC");
}

static plait_status check_hf_kind(const plait_json *root, const plait_json *model, const char *what) {
    if (!model || model->type != PLAIT_JSON_OBJECT)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: no \"model\" object (not a tokenizer.json?)", what,
                               root->pos);
    const plait_json *type = plait_json_get(model, "type");
    if (type && !is_string(type, "BPE"))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte %zu: model type \"%s\" is not supported; plait reads "
                               "byte-level BPE (\"type\": \"BPE\")",
                               what, type->pos, type->type == PLAIT_JSON_STRING ? type->str : "?");
    /* settings that would change the ids: refused rather than ignored, so
     * plait never encodes a text other than Hugging Face would */
    static const struct {
        const char *object, *key, *allowed, *what;
    } fixed[] = {
        {NULL, "normalizer", "null or {\"type\": \"NFC\"}",
         "a normalizer other than NFC (lowercasing, another Unicode normalisation, ...)"},
        {"model", "dropout", "null or 0", "BPE dropout"},
        {"model", "byte_fallback", "false", "byte fallback tokens"},
        {"model", "continuing_subword_prefix", "\"\" or null", "a continuing-subword prefix"},
        {"model", "end_of_word_suffix", "\"\" or null", "an end-of-word suffix"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const plait_json *obj = fixed[i].object ? plait_json_get(root, fixed[i].object) : root;
        const plait_json *v = obj && obj->type == PLAIT_JSON_OBJECT ? plait_json_get(obj, fixed[i].key) : NULL;
        if (!v || v->type == PLAIT_JSON_NULL) continue;
        int ok = 0;
        if (!strcmp(fixed[i].allowed, "false")) ok = v->type == PLAIT_JSON_BOOL && v->num == 0;
        else if (!strcmp(fixed[i].allowed, "true")) ok = v->type == PLAIT_JSON_BOOL && v->num == 1;
        else if (!strcmp(fixed[i].allowed, "null or 0")) ok = (v->type == PLAIT_JSON_INT && v->num == 0) ||
                                                             (v->type == PLAIT_JSON_REAL && v->real == 0);
        else if (!strcmp(fixed[i].key, "normalizer")) ok = nfc_only(v);
        else ok = v->type == PLAIT_JSON_STRING && v->str_len == 0;
        if (!ok)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: \"%s%s%s\" asks for %s, which plait's "
                                                       "byte-level BPE does not do (allowed: %s, as GPT-2's)",
                                   what, v->pos, fixed[i].object ? fixed[i].object : "",
                                   fixed[i].object ? "." : "", fixed[i].key, fixed[i].what, fixed[i].allowed);
    }
    return PLAIT_OK;
}

plait_status plait_tokenizer_load_hf(const char *path, plait_tokenizer **out) {
    *out = NULL;
    plait_tokenizer *t = plait_tokenizer_new(path);
    if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory loading %s", path);
    plait_json_doc *doc = NULL;
    plait_status st = read_json(path, &doc);
    const plait_json *root = doc ? plait_json_root(doc) : NULL;
    const plait_json *model = plait_json_get(root, "model");
    if (st == PLAIT_OK) st = check_hf_kind(root, model, path);
    if (st == PLAIT_OK) st = plait_hf_pre_tokenizer(root, path, &t->pretok);
    const plait_json *norm = plait_json_get(root, "normalizer");
    t->nfc = norm && norm->type == PLAIT_JSON_OBJECT; /* check_hf_kind let only NFC through */
    const plait_json *ignore = plait_json_get(model, "ignore_merges");
    if (st == PLAIT_OK && ignore && ignore->type != PLAIT_JSON_NULL && ignore->type != PLAIT_JSON_BOOL)
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: model.ignore_merges must be true or false", path,
                             ignore->pos);
    t->ignore_merges = ignore && ignore->type == PLAIT_JSON_BOOL && ignore->num;
    const plait_json *vocab = plait_json_get(model, "vocab"), *merges = plait_json_get(model, "merges");
    if (st == PLAIT_OK) st = add_vocab(t, vocab, path);
    if (st == PLAIT_OK) st = add_added_tokens(t, plait_json_get(root, "added_tokens"), vocab, path);
    if (st == PLAIT_OK) st = plait_tokenizer_finish_vocab(t, path);
    if (st == PLAIT_OK) st = mark_added(t, plait_json_get(root, "added_tokens"), path);
    if (st == PLAIT_OK) st = plait_hf_post_processor(t, root, path);
    if (st == PLAIT_OK && (!merges || merges->type != PLAIT_JSON_ARRAY))
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: \"model\" has no \"merges\" array", path, model->pos);
    size_t line = 0;
    for (const plait_json *m = st == PLAIT_OK ? merges->child : NULL; st == PLAIT_OK && m; m = m->next) {
        line++;
        /* "a b" (the older layout) or ["a", "b"] (tokenizers >= 0.20) */
        if (m->type == PLAIT_JSON_STRING) {
            const char *sp = strchr(m->str, ' ');
            if (!sp || sp == m->str || !sp[1] || strchr(sp + 1, ' '))
                st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: merge %zu must be \"a b\", found \"%.80s\"",
                                     path, m->pos, line, m->str);
            else
                st = merge_strings(t, m->str, (size_t)(sp - m->str), sp + 1, strlen(sp + 1), path, line, m->pos);
        } else if (m->type == PLAIT_JSON_ARRAY && m->count == 2 && m->child->type == PLAIT_JSON_STRING &&
                   m->child->next->type == PLAIT_JSON_STRING) {
            st = merge_strings(t, m->child->str, m->child->str_len, m->child->next->str, m->child->next->str_len, path,
                               line, m->pos);
        } else {
            st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: merge %zu must be \"a b\" or [\"a\", \"b\"]", path,
                                 m->pos, line);
        }
    }
    plait_json_free(doc);
    if (st != PLAIT_OK) {
        plait_tokenizer_free(t);
        return st;
    }
    *out = t;
    return PLAIT_OK;
}

static int exists(const char *path) {
    struct stat s;
    return stat(path, &s) == 0;
}

plait_status plait_tokenizer_load(const char *path, plait_tokenizer **out) {
    *out = NULL;
    char a[PATH_MAX], b[PATH_MAX];
    struct stat s;
    if (stat(path, &s) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "tokenizer %s: %s", path, strerror(errno));
    if (S_ISREG(s.st_mode)) return plait_tokenizer_load_hf(path, out);
    if (!S_ISDIR(s.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "tokenizer %s is %s; give a tokenizer.json file or a directory holding one, or "
                               "vocab.json and merges.txt",
                               path, plait_file_kind(s.st_mode));
    /* Each file found is read (and refused for what it is, a FIFO say), not
     * passed over for the next kind. */
    snprintf(a, sizeof a, "%s/tokenizer.json", path);
    if (exists(a)) return plait_tokenizer_load_hf(a, out);
    snprintf(a, sizeof a, "%s/vocab.json", path);
    snprintf(b, sizeof b, "%s/merges.txt", path);
    int va = exists(a), mb = exists(b);
    if (va && mb) return plait_tokenizer_load_gpt2(a, b, out);
    if (va || mb)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "tokenizer %s holds %s but no %s: a GPT-2 tokenizer needs "
                                                         "both vocab.json and merges.txt",
                               path, va ? "vocab.json" : "merges.txt", va ? "merges.txt" : "vocab.json");
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "tokenizer %s: the directory holds neither tokenizer.json nor vocab.json and merges.txt",
                           path);
}
