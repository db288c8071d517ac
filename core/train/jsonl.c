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

/* One line's document to fn. */
static plait_status one_line(const unsigned char *line, size_t len, int64_t number, const char *key, const char *path,
                             plait_jsonl_fn fn, void *ctx, size_t line_end) {
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "%s: line %lld", path, (long long)number);
    plait_json_doc *doc = NULL;
    plait_status st = plait_json_parse_any((const char *)line, len, what, &doc);
    if (st != PLAIT_OK) return st;
    const plait_json *root = plait_json_root(doc), *v = plait_json_get(root, key);
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
    else st = fn(ctx, v->str, v->str_len, line_end);
    plait_json_free(doc);
    return st;
}

plait_status plait_jsonl_each(const unsigned char *data, size_t from, size_t to, const char *key, const char *path,
                              plait_jsonl_fn fn, void *ctx) {
    int64_t number = 1;
    for (size_t i = 0; i < from; i++) number += data[i] == '\n';
    for (size_t p = from; p < to; number++) {
        const unsigned char *nl = memchr(data + p, '\n', to - p);
        size_t end = nl ? (size_t)(nl - data) : to, next = nl ? end + 1 : to;
        if (!blank(data + p, end - p)) {
            plait_status st = one_line(data + p, end - p, number, key, path, fn, ctx, next);
            if (st != PLAIT_OK) return st;
        }
        p = next;
    }
    return PLAIT_OK;
}
