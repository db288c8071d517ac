/* The documents of a JSON Lines file (jsonl.h). */
#include "train/jsonl.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/safetensors_json.h"
#include "runtime/error.h"

int plait_jsonl_path(const char *path) {
    size_t n = strlen(path);
    return (n > 6 && !strcmp(path + n - 6, ".jsonl")) || (n > 7 && !strcmp(path + n - 7, ".ndjson"));
}

static int blank(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

void plait_jsonl_doc_free(plait_jsonl_doc *doc) {
    if (doc->owner) plait_json_free(doc->owner);
    *doc = (plait_jsonl_doc){0};
}

plait_status plait_jsonl_line(const unsigned char *line, size_t len, int64_t number, const char *key, const char *path,
                              plait_jsonl_doc *doc) {
    *doc = (plait_jsonl_doc){0};
    if (blank(line, len)) return PLAIT_OK;
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "%s: line %lld", path, (long long)number);
    plait_status st = plait_json_parse_any((const char *)line, len, what, &doc->owner);
    if (st != PLAIT_OK) return st;
    const plait_json *root = plait_json_root(doc->owner), *v = plait_json_get(root, key);
    if (root->type != PLAIT_JSON_OBJECT)
        st = plait_set_error(PLAIT_ERR_PROTOCOL,
                             "%s: not a JSON object (a JSON Lines file holds one object a line, "
                             "its document under \"%s\")",
                             what, key);
    else if (!v)
        st = plait_set_error(PLAIT_ERR_PROTOCOL,
                             "%s: the object has no \"%s\" (name the document's member with "
                             "--json-key)",
                             what, key);
    else if (v->type != PLAIT_JSON_STRING)
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s: \"%s\" is not a string", what, key);
    if (st != PLAIT_OK) {
        plait_jsonl_doc_free(doc);
        return st;
    }
    doc->text = v->str;
    doc->len = v->str_len;
    return PLAIT_OK;
}

plait_status plait_jsonl_each(const unsigned char *data, size_t from, size_t to, const char *key, const char *path,
                              plait_jsonl_fn fn, void *ctx) {
    int64_t number = 1;
    for (size_t i = 0; i < from; i++) number += data[i] == '\n';
    for (size_t p = from; p < to; number++) {
        const unsigned char *nl = memchr(data + p, '\n', to - p);
        size_t end = nl ? (size_t)(nl - data) : to, next = nl ? end + 1 : to;
        plait_jsonl_doc doc;
        plait_status st = plait_jsonl_line(data + p, end - p, number, key, path, &doc);
        if (st == PLAIT_OK && doc.text) st = fn(ctx, doc.text, doc.len, next);
        plait_jsonl_doc_free(&doc);
        if (st != PLAIT_OK) return st;
        p = next;
    }
    return PLAIT_OK;
}
