/*
 * A strict parser for the subset of JSON that safetensors headers and
 * checkpoint manifests use — objects, arrays, strings and integers — and a
 * growable text buffer for writing them.
 *
 * Strict means: RFC 8259 syntax only (no comments, trailing commas, single
 * quotes, NaN); strings must be valid UTF-8 without raw control characters
 * or \u0000; numbers must be integers that fit in int64 (no fraction or
 * exponent, no leading zeros); keys are unique within an object; nesting is
 * at most 32 deep; after the top-level value only whitespace may follow.
 * true, false, null and non-integer numbers are refused ("not used by the
 * formats plait reads") rather than silently accepted, except by
 * plait_json_parse_any (for documents such as Hugging Face's tokenizer.json
 * that use them).
 *
 * Thread-safety: a document is immutable after parsing; different documents
 * are independent.
 */
#ifndef PLAIT_CORE_CHECKPOINT_SAFETENSORS_JSON_H
#define PLAIT_CORE_CHECKPOINT_SAFETENSORS_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

typedef enum plait_json_type {
    PLAIT_JSON_OBJECT = 0,
    PLAIT_JSON_ARRAY = 1,
    PLAIT_JSON_STRING = 2,
    PLAIT_JSON_INT = 3,
    PLAIT_JSON_BOOL = 4,   /* plait_json_parse_any only: num is 0 or 1 */
    PLAIT_JSON_NULL = 5,   /* plait_json_parse_any only */
    PLAIT_JSON_REAL = 6    /* plait_json_parse_any only: a number with a fraction or exponent, in real */
} plait_json_type;

typedef struct plait_json plait_json;
struct plait_json {
    plait_json_type type;
    const char *key;       /* member name inside an object, else NULL */
    const char *str;       /* STRING: decoded, NUL-terminated */
    size_t str_len;
    int64_t num;           /* INT */
    size_t pos;            /* byte offset in the source where the value starts
                              (the opening quote of a string) */
    size_t end;            /* byte offset just past the value */
    size_t count;          /* OBJECT/ARRAY: number of children */
    plait_json *child;     /* OBJECT/ARRAY: first child, in source order */
    plait_json *next;      /* next sibling */
    size_t key_pos;        /* member of an object: byte offset of its name's opening quote */
    double real;           /* REAL */
};

typedef struct plait_json_doc plait_json_doc;

/* Parse `len` bytes of `text` (need not be NUL-terminated). On error returns
 * PLAIT_ERR_PROTOCOL with "<what>: byte N: <problem>". The caller frees *out
 * with plait_json_free. */
plait_status plait_json_parse(const char *text, size_t len, const char *what, plait_json_doc **out);
/* The same, also accepting true, false, null and non-integer numbers. */
plait_status plait_json_parse_any(const char *text, size_t len, const char *what, plait_json_doc **out);
void plait_json_free(plait_json_doc *doc);
const plait_json *plait_json_root(const plait_json_doc *doc);
/* Member `key` of an object, or NULL (also NULL when `obj` is not an object). */
const plait_json *plait_json_get(const plait_json *obj, const char *key);

/* Exactly n (<= 16) lower-case hex digits, the way the formats write
 * checksums, into *out: 0, else -1. */
int plait_json_hex(const char *s, int n, uint64_t *out);

/* Growable NUL-terminated text. On allocation failure `failed` is set and
 * later appends do nothing; check it once at the end. */
typedef struct plait_jbuf {
    char *data;
    size_t len, cap;
    int failed;
} plait_jbuf;

void plait_jbuf_append(plait_jbuf *b, const char *s, size_t n);
void plait_jbuf_puts(plait_jbuf *b, const char *s);
void plait_jbuf_printf(plait_jbuf *b, const char *fmt, ...) PLAIT_PRINTF(2, 3);
/* Append `s` as a JSON string literal (quotes and escapes added). */
void plait_jbuf_string(plait_jbuf *b, const char *s);
void plait_jbuf_free(plait_jbuf *b);

#endif
