#include "checkpoint/safetensors_json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

#define MAX_DEPTH 32

/* Nodes and decoded strings live in one list of blocks freed together. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} block;

struct plait_json_doc {
    block *blocks;
    plait_json *root;
};

typedef struct parser {
    const char *s;
    size_t len, pos;
    const char *what;
    plait_json_doc *doc;
    int failed;
    int any;   /* accept true, false, null and real numbers */
} parser;

static void *arena_alloc(plait_json_doc *doc, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->cap = cap;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static plait_status fail(parser *p, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static plait_status fail(parser *p, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->failed = 1;
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: %s", p->what, p->pos, msg);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static const char *describe(int c) {
    static _Thread_local char buf[16];
    if (c < 0) return "end of input";
    if (c >= 0x20 && c < 0x7f) snprintf(buf, sizeof buf, "'%c'", c);
    else snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *d, uint32_t cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xc0 | cp >> 6); d[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | cp >> 12);
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | cp >> 18);
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no
 * surrogates, <= U+10FFFF), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; }
    else return 0;
    if (avail < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

/* p->pos is at the opening quote. Decodes into the arena. */
static plait_status parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = ++p->pos;
    /* Decoded text is never longer than the source. */
    size_t end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    char *dst = arena_alloc(p->doc, (end > p->len ? p->len : end) - start + 1);
    if (!dst) return fail(p, "out of memory");
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) return fail(p, "unterminated string (started at byte %zu)", start - 1);
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) return fail(p, "raw control character 0x%02x in a string (must be escaped)", c);
        if (c != '\\') {
            size_t k = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
            if (!k) return fail(p, "invalid UTF-8 in a string");
            memcpy(dst + n, p->s + p->pos, k);
            n += k;
            p->pos += k;
            continue;
        }
        if (p->pos + 1 >= p->len) return fail(p, "unterminated escape");
        char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': dst[n++] = '"'; break;
        case '\\': dst[n++] = '\\'; break;
        case '/': dst[n++] = '/'; break;
        case 'b': dst[n++] = '\b'; break;
        case 'f': dst[n++] = '\f'; break;
        case 'n': dst[n++] = '\n'; break;
        case 'r': dst[n++] = '\r'; break;
        case 't': dst[n++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (p->pos + 4 > p->len || hex4(p->s + p->pos, &cp)) return fail(p, "bad \\u escape");
            p->pos += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) return fail(p, "lone low surrogate in \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (p->pos + 6 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                    hex4(p->s + p->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return fail(p, "high surrogate not followed by a low surrogate");
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) return fail(p, "\\u0000 in a string is not supported");
            n += put_utf8(dst + n, cp);
            break;
        }
        default: return fail(p, "unknown escape '\\%c'", e);
        }
    }
    dst[n] = '\0';
    *out = dst;
    *out_len = n;
    return PLAIT_OK;
}

static plait_status parse_int(parser *p, int64_t *out) {
    size_t start = p->pos;
    int neg = 0;
    if (peek(p) == '-') {
        neg = 1;
        p->pos++;
    }
    int c = peek(p);
    if (c < '0' || c > '9') return fail(p, "expected a digit, found %s", describe(c));
    if (c == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
        return fail(p, "number with a leading zero");
    uint64_t v = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    while ((c = peek(p)) >= '0' && c <= '9') {
        uint64_t d = (uint64_t)(c - '0');
        if (v > (limit - d) / 10) {
            p->pos = start;
            return fail(p, "integer out of the int64 range");
        }
        v = v * 10 + d;
        p->pos++;
    }
    if ((c == '.' || c == 'e' || c == 'E') && !p->any)
        return fail(p, "only integers are allowed here (no fraction or exponent)");
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return PLAIT_OK;
}

static plait_status parse_value(parser *p, plait_json *node, int depth);

static int by_key(const void *a, const void *b) {
    const plait_json *x = *(const plait_json *const *)a, *y = *(const plait_json *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->key_pos > y->key_pos) - (x->key_pos < y->key_pos);
}

/* Member names must be unique: sorted by name (then position), a repeat is
 * a neighbour; the later of the first repeated pair is reported. Sorting
 * keeps this O(n log n) for objects of 50 000 members (a vocabulary). */
static plait_status check_unique_keys(parser *p, const plait_json *node) {
    if (node->count < 2) return PLAIT_OK;
    const plait_json **v = malloc(node->count * sizeof *v);
    if (!v) return fail(p, "out of memory");
    size_t n = 0;
    for (const plait_json *c = node->child; c; c = c->next) v[n++] = c;
    qsort(v, n, sizeof *v, by_key);
    const plait_json *dup = NULL;
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1]->key, v[i]->key) == 0 && (!dup || v[i]->key_pos < dup->key_pos)) dup = v[i];
    free(v);
    if (!dup) return PLAIT_OK;
    p->pos = dup->key_pos;
    return fail(p, "duplicate member name \"%s\"", dup->key);
}

/* true, false, null (plait_json_parse_any only). */
static plait_status parse_literal(parser *p, plait_json *node) {
    static const struct { const char *word; plait_json_type type; int64_t num; } words[] = {
        {"true", PLAIT_JSON_BOOL, 1}, {"false", PLAIT_JSON_BOOL, 0}, {"null", PLAIT_JSON_NULL, 0}};
    if (!p->any) return fail(p, "true, false and null are not used by this format");
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            node->type = words[i].type;
            node->num = words[i].num;
            p->pos += n;
            return PLAIT_OK;
        }
    }
    return fail(p, "expected a value, found %s", describe(peek(p)));
}

/* A number with a fraction or exponent (plait_json_parse_any only): the
 * integer part was parsed from `start`; RFC 8259's grammar for the rest. */
static plait_status parse_real_tail(parser *p, plait_json *node, size_t start) {
    if (peek(p) == '.') {
        p->pos++;
        if (peek(p) < '0' || peek(p) > '9') return fail(p, "expected a digit after '.'");
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (peek(p) < '0' || peek(p) > '9') return fail(p, "expected a digit in the exponent");
        while (peek(p) >= '0' && peek(p) <= '9') p->pos++;
    }
    char buf[64];
    size_t n = p->pos - start < sizeof buf - 1 ? p->pos - start : sizeof buf - 1;
    memcpy(buf, p->s + start, n);
    buf[n] = '\0';
    node->type = PLAIT_JSON_REAL;
    node->real = strtod(buf, NULL);
    return PLAIT_OK;
}

static plait_status parse_container(parser *p, plait_json *node, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    node->type = is_object ? PLAIT_JSON_OBJECT : PLAIT_JSON_ARRAY;
    if (depth >= MAX_DEPTH) return fail(p, "nesting deeper than %d levels", MAX_DEPTH);
    p->pos++;
    skip_ws(p);
    if (peek(p) == close) {
        p->pos++;
        return PLAIT_OK;
    }
    plait_json **tail = &node->child;
    for (;;) {
        skip_ws(p);
        plait_json *child = arena_alloc(p->doc, sizeof *child);
        if (!child) return fail(p, "out of memory");
        memset(child, 0, sizeof *child);
        if (is_object) {
            if (peek(p) != '"') return fail(p, "expected a member name in quotes, found %s", describe(peek(p)));
            child->key_pos = p->pos;
            size_t key_len;
            if (parse_string(p, &child->key, &key_len) != PLAIT_OK) return PLAIT_ERR_PROTOCOL;
            if (strlen(child->key) != key_len) return fail(p, "member name contains NUL");
            skip_ws(p);
            if (peek(p) != ':') return fail(p, "expected ':' after a member name, found %s", describe(peek(p)));
            p->pos++;
            skip_ws(p);
        }
        if (parse_value(p, child, depth + 1) != PLAIT_OK) return PLAIT_ERR_PROTOCOL;
        *tail = child;
        tail = &child->next;
        node->count++;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->pos++;
            skip_ws(p);
            if (peek(p) == close) return fail(p, "trailing comma");
            continue;
        }
        if (c == close) {
            p->pos++;
            return is_object ? check_unique_keys(p, node) : PLAIT_OK;
        }
        return fail(p, "expected ',' or '%c', found %s", close, describe(c));
    }
}

static plait_status parse_value(parser *p, plait_json *node, int depth) {
    node->pos = p->pos;
    int c = peek(p);
    plait_status st;
    if (c == '{') st = parse_container(p, node, depth, 1);
    else if (c == '[') st = parse_container(p, node, depth, 0);
    else if (c == '"') {
        node->type = PLAIT_JSON_STRING;
        st = parse_string(p, &node->str, &node->str_len);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        node->type = PLAIT_JSON_INT;
        st = parse_int(p, &node->num);
        if (st == PLAIT_OK && p->any && (peek(p) == '.' || peek(p) == 'e' || peek(p) == 'E'))
            st = parse_real_tail(p, node, node->pos);
    } else if (c == 't' || c == 'f' || c == 'n')
        st = parse_literal(p, node);
    else
        st = fail(p, "expected a value, found %s", describe(c));
    node->end = p->pos;
    return st;
}

static plait_status parse_document(const char *text, size_t len, const char *what, int any, plait_json_doc **out) {
    *out = NULL;
    plait_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    parser p = {.s = text, .len = len, .what = what, .doc = doc, .any = any};
    doc->root = arena_alloc(doc, sizeof *doc->root);
    if (!doc->root) {
        plait_json_free(doc);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    }
    memset(doc->root, 0, sizeof *doc->root);
    skip_ws(&p);
    plait_status st = parse_value(&p, doc->root, 0);
    if (st == PLAIT_OK) {
        skip_ws(&p);
        if (p.pos != len) st = fail(&p, "unexpected %s after the end of the document", describe(peek(&p)));
    }
    if (st != PLAIT_OK) {
        plait_json_free(doc);
        return st;
    }
    *out = doc;
    return PLAIT_OK;
}

plait_status plait_json_parse(const char *text, size_t len, const char *what, plait_json_doc **out) {
    return parse_document(text, len, what, 0, out);
}

plait_status plait_json_parse_any(const char *text, size_t len, const char *what, plait_json_doc **out) {
    return parse_document(text, len, what, 1, out);
}

void plait_json_free(plait_json_doc *doc) {
    if (!doc) return;
    for (block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc);
}

const plait_json *plait_json_root(const plait_json_doc *doc) { return doc->root; }

const plait_json *plait_json_get(const plait_json *obj, const char *key) {
    if (!obj || obj->type != PLAIT_JSON_OBJECT) return NULL;
    for (const plait_json *c = obj->child; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    return NULL;
}

/* ---- writing ------------------------------------------------------------ */

static int reserve(plait_jbuf *b, size_t extra) {
    if (b->failed) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

void plait_jbuf_append(plait_jbuf *b, const char *s, size_t n) {
    if (reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void plait_jbuf_puts(plait_jbuf *b, const char *s) { plait_jbuf_append(b, s, strlen(s)); }

void plait_jbuf_printf(plait_jbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void plait_jbuf_string(plait_jbuf *b, const char *s) {
    plait_jbuf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            plait_jbuf_append(b, esc, 2);
        } else if (*p < 0x20) {
            plait_jbuf_printf(b, "\\u%04x", *p);
        } else {
            plait_jbuf_append(b, (const char *)p, 1);
        }
    }
    plait_jbuf_append(b, "\"", 1);
}

void plait_jbuf_free(plait_jbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

int plait_json_hex(const char *s, int n, uint64_t *out) {
    if (n > 16 || (int)strlen(s) != n) return -1;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint64_t)(c - 'a' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}
