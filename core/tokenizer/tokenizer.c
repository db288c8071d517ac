/* The tokenizer object: building its tables, encoding and decoding. */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/hash.h"
#include "tokenizer/heap.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretokenize.h"

plait_tokenizer *plait_tokenizer_new(const char *source) {
    plait_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    snprintf(t->source, sizeof t->source, "%s", source ? source : "");
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    t->eot = -1;
    t->bos = -1;
    return t;
}

void plait_tokenizer_free(plait_tokenizer *t) {
    if (!t) return;
    plait_bytes_map_free(&t->tokens);
    plait_u64_map_free(&t->merge_rank);
    free(t->entry_of_id);
    free(t->merged);
    free(t->added);
    free(t->merges);
    free(t);
}

plait_status plait_tokenizer_add_token(plait_tokenizer *t, const unsigned char *bytes, size_t len, int32_t id,
                                       const char *what, size_t offset) {
    if (id < 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: token id %d is negative", what, offset, id);
    if (len == 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: empty token (id %d)", what, offset, id);
    int inserted = 0;
    int64_t *v = plait_bytes_map_upsert(&t->tokens, bytes, len, id, &inserted);
    if (!v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    if (!inserted)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: byte %zu: token id %d has the same bytes as id %lld",
                               what, offset, id, (long long)*v);
    if (id >= t->n_ids) t->n_ids = id + 1;
    if (len == 1) t->byte_id[bytes[0]] = id;
    /* GPT-2's end of text, and Llama 3's */
    if ((len == 13 && memcmp(bytes, "<|endoftext|>", 13) == 0) ||
        (len == 15 && memcmp(bytes, "<|end_of_text|>", 15) == 0))
        t->eot = id;
    return PLAIT_OK;
}

/* Ids must be 0..N-1, each once. With more ids than tokens one below the
 * token count is unused: found with a table of the count, not of the
 * largest id (gigabytes for a few bytes of file). With no more ids than
 * tokens, a missing id means another is used twice (finish_vocab). */
static plait_status missing_id(const plait_tokenizer *t, const char *what) {
    const size_t n = t->tokens.count;
    unsigned char *seen = calloc(n ? n : 1, 1);
    if (!seen) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    for (size_t e = 0; e < n; e++)
        if ((uint64_t)t->tokens.values[e] < n) seen[t->tokens.values[e]] = 1;
    size_t i = 0;
    while (i < n && seen[i]) i++;
    free(seen);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: no token has id %zu, but ids go up to %d (ids must be 0..N-1)",
                           what, i, t->n_ids - 1);
}

/* Entry e's bytes for a message: printable ASCII as is, others as \xNN,
 * cut with "..." where the buffer (at least 16 bytes) ends. */
static void token_text(const plait_tokenizer *t, size_t e, char *out, size_t cap) {
    size_t len = 0, n = 0, i = 0;
    const unsigned char *b = plait_bytes_map_key(&t->tokens, e, &len);
    out[0] = '\0';
    for (; i < len && n + 8 < cap; i++) {
        int plain = b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"' && b[i] != '\\';
        n += (size_t)snprintf(out + n, cap - n, plain ? "%c" : "\\x%02x", b[i]);
    }
    if (i < len) snprintf(out + n, cap - n, "...");
}

plait_status plait_tokenizer_finish_vocab(plait_tokenizer *t, const char *what) {
    if ((size_t)t->n_ids > t->tokens.count) return missing_id(t, what);
    free(t->entry_of_id);
    free(t->merged);
    t->entry_of_id = malloc(sizeof(int32_t) * (size_t)(t->n_ids ? t->n_ids : 1));
    t->merged = calloc((size_t)(t->n_ids ? t->n_ids : 1), 1);
    if (!t->entry_of_id || !t->merged) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int32_t i = 0; i < t->n_ids; i++) t->entry_of_id[i] = -1;
    for (size_t e = 0; e < t->tokens.count; e++) {
        int32_t id = (int32_t)t->tokens.values[e];
        if (t->entry_of_id[id] >= 0) {
            char first[64], second[64];
            token_text(t, (size_t)t->entry_of_id[id], first, sizeof first);
            token_text(t, e, second, sizeof second);
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: token id %d is used twice, by \"%s\" and by \"%s\"",
                                   what, id, first, second);
        }
        t->entry_of_id[id] = (int32_t)e;
    }
    /* no id is missing now: as many distinct ids below n_ids as tokens,
     * and no more tokens than n_ids */
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: byte 0x%02x has no token of its own; a byte-level BPE vocabulary holds "
                                   "all 256 single bytes",
                                   what, b);
    return PLAIT_OK;
}

plait_status plait_tokenizer_add_merge(plait_tokenizer *t, int32_t a, int32_t b, const char *what, size_t line,
                                       size_t offset) {
    const unsigned char *ba, *bb;
    size_t la, lb;
    if (plait_tokenizer_token(t, a, &ba, &la) != PLAIT_OK || plait_tokenizer_token(t, b, &bb, &lb) != PLAIT_OK)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: line %zu (byte %zu): merge of unknown ids %d and %d", what,
                               line, offset, a, b);
    unsigned char stack[256], *joined = la + lb <= sizeof stack ? stack : malloc(la + lb);
    if (!joined) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    memcpy(joined, ba, la);
    memcpy(joined + la, bb, lb);
    int64_t *r = plait_bytes_map_find(&t->tokens, joined, la + lb);
    if (joined != stack) free(joined);
    if (!r)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: line %zu (byte %zu): merging tokens %d and %d makes a token that is not in "
                               "the vocabulary",
                               what, line, offset, a, b);
    /* Every part must be a byte or made by an earlier merge, the order BPE
     * training produces; encoding relies on it (a new pair always ranks
     * after the merge that formed it). */
    int32_t parts[2] = {a, b};
    for (int k = 0; k < 2; k++)
        if ((k == 0 ? la : lb) > 1 && !t->merged[parts[k]])
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: line %zu (byte %zu): token %d is neither a byte nor made by an earlier "
                                   "merge (merges must come in the order they were learned)",
                                   what, line, offset, parts[k]);
    int inserted = 0;
    int64_t *slot = plait_u64_map_upsert(&t->merge_rank, plait_pair_key(a, b), t->n_merges, &inserted);
    if (!slot) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
    if (!inserted)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: line %zu (byte %zu): the merge of %d and %d repeats "
                                                   "merge %lld",
                               what, line, offset, a, b, (long long)*slot);
    if (t->n_merges == t->merges_cap) {
        int32_t cap = t->merges_cap ? t->merges_cap * 2 : 1024;
        plait_bpe_merge *m = realloc(t->merges, sizeof *m * (size_t)cap);
        if (!m) return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", what);
        t->merges = m;
        t->merges_cap = cap;
    }
    t->merges[t->n_merges++] = (plait_bpe_merge){a, b, (int32_t)*r};
    t->merged[*r] = 1;
    return PLAIT_OK;
}

int32_t plait_tokenizer_vocab_size(const plait_tokenizer *t) { return t->n_ids; }
int32_t plait_tokenizer_merges(const plait_tokenizer *t) { return t->n_merges; }
int32_t plait_tokenizer_eot(const plait_tokenizer *t) { return t->eot; }
int32_t plait_tokenizer_bos(const plait_tokenizer *t) { return t->bos; }
int plait_tokenizer_gpt2_compatible(const plait_tokenizer *t) {
    return t->pretok == PLAIT_PRETOK_GPT2 && !t->ignore_merges && t->bos < 0 && !t->nfc;
}
const char *plait_tokenizer_source(const plait_tokenizer *t) { return t->source; }

uint64_t plait_tokenizer_fingerprint(const plait_tokenizer *t) {
    uint64_t h = plait_fnv1a(PLAIT_FNV1A_BASIS, &t->n_ids, sizeof t->n_ids);
    for (int32_t id = 0; id < t->n_ids; id++) {
        const unsigned char *bytes = NULL;
        size_t len = 0;
        if (plait_tokenizer_token(t, id, &bytes, &len) != PLAIT_OK) continue;
        uint32_t n = (uint32_t)len;
        h = plait_fnv1a(plait_fnv1a(h, &n, sizeof n), bytes, len);
    }
    for (int32_t m = 0; m < t->n_merges; m++) {
        int32_t pair[2] = {t->merges[m].a, t->merges[m].b};
        h = plait_fnv1a(h, pair, sizeof pair);
    }
    /* only what GPT-2's files cannot say, so theirs keep the hash they had */
    if (!plait_tokenizer_gpt2_compatible(t)) {
        int32_t more[3] = {(int32_t)t->pretok, t->ignore_merges, t->bos};
        h = plait_fnv1a(h, more, sizeof more);
        if (t->nfc) h = plait_fnv1a(h, "NFC", 3); /* so that those without keep the hash they had */
    }
    plait_clear_error();
    return h;
}

plait_status plait_tokenizer_token(const plait_tokenizer *t, int32_t id, const unsigned char **bytes, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->entry_of_id)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "token id %d is out of range (the vocabulary has ids 0..%d)",
                               id, t->n_ids - 1);
    *bytes = plait_bytes_map_key(&t->tokens, (size_t)t->entry_of_id[id], len);
    return PLAIT_OK;
}

plait_status plait_token_buf_push(plait_token_buf *b, int32_t id) {
    if (b->len == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        int32_t *p = realloc(b->ids, cap * sizeof *p);
        if (!p) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory holding %zu token ids", b->len);
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->len++] = id;
    return PLAIT_OK;
}

void plait_token_buf_free(plait_token_buf *b) {
    free(b->ids);
    *b = (plait_token_buf){0};
}

/* ---- encoding one piece ---------------------------------------------------
 * Symbols form a linked list over the piece's bytes; candidate pairs sit in
 * a binary heap ordered by (rank, position of the left symbol), so the best
 * merge is applied at every place it occurs, left to right, before any later
 * one: GPT-2's order, in O(n log n) instead of its O(n^2) rescans. A heap
 * entry is stale when its left symbol died, got a new right neighbour, or
 * changed id; it is then skipped. */

typedef struct pair_entry {
    int32_t rank, left, right;
} pair_entry;

typedef struct piece_work {
    int32_t *id, *next, *prev;
    plait_heap heap;          /* of pair_entry */
    size_t cap;
} piece_work;

static int entry_before(const void *a, const void *b) {
    const pair_entry *x = a, *y = b;
    return x->rank != y->rank ? x->rank < y->rank : x->left < y->left;
}

static void push_pair(const plait_tokenizer *t, piece_work *w, int32_t left) {
    if (left < 0 || w->next[left] < 0) return;
    const int64_t *r = plait_u64_map_find(&t->merge_rank, plait_pair_key(w->id[left], w->id[w->next[left]]));
    if (!r) return;
    pair_entry e = {(int32_t)*r, left, w->next[left]};
    plait_heap_push(&w->heap, &e); /* never grows: room was reserved for the piece */
}

static int work_reserve(piece_work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(w->id, cap * sizeof *a);
    if (a) w->id = a;
    int32_t *b = realloc(w->next, cap * sizeof *b);
    if (b) w->next = b;
    int32_t *c = realloc(w->prev, cap * sizeof *c);
    if (c) w->prev = c;
    /* each merge adds at most two entries to the n - 1 first ones */
    if (!a || !b || !c || plait_heap_reserve(&w->heap, 3 * cap) != 0) return -1;
    w->cap = cap;
    return 0;
}

static plait_status encode_piece(const plait_tokenizer *t, piece_work *w, const unsigned char *s, size_t n,
                                 plait_token_buf *out) {
    if (n > INT32_MAX / 4)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "a run of %zu bytes without a break is too long to encode", n);
    if (work_reserve(w, n) != 0) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory encoding");
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        w->prev[i] = (int32_t)i - 1;
    }
    w->heap.len = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, w, (int32_t)i);
    while (w->heap.len) {
        pair_entry e;
        plait_heap_pop(&w->heap, &e);
        if (w->next[e.left] != e.right || w->id[e.left] < 0) continue;
        const plait_bpe_merge *m = &t->merges[e.rank];
        if (w->id[e.left] != m->a || w->id[e.right] != m->b) continue;
        w->id[e.left] = m->result;
        w->id[e.right] = -1;
        w->next[e.left] = w->next[e.right];
        if (w->next[e.left] >= 0) w->prev[w->next[e.left]] = e.left;
        push_pair(t, w, w->prev[e.left]);
        push_pair(t, w, e.left);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (plait_token_buf_push(out, w->id[i]) != PLAIT_OK) return PLAIT_ERR_NO_MEMORY;
    return PLAIT_OK;
}

/* Pieces up to this long are remembered within one encode call: text
 * repeats its words, and a hit skips the merging. */
#define CACHE_PIECE_BYTES 64

/* Ids are handed to a stream's sink in batches of about this many. */
#define STREAM_BATCH 65536

typedef struct stream_sink {
    plait_status (*sink)(void *ctx, const int32_t *ids, size_t n, size_t done);
    void *ctx;
    size_t len; /* the caller's text's bytes */
} stream_sink;

/* Encode text already normalised into `out`; with a sink, `out` is
 * emptied into it whenever it holds a batch, and at the end. */
static plait_status encode_text(const plait_tokenizer *t, const void *text, size_t len, plait_token_buf *out,
                                const stream_sink *sink) {
    const unsigned char *s = text;
    piece_work w = {0};
    plait_heap_init(&w.heap, sizeof(pair_entry), entry_before);
    plait_bytes_map cache = {0};   /* piece -> (start in `memo` << 8 | count) */
    plait_token_buf memo = {0};
    plait_status st = PLAIT_OK;
    for (size_t pos = 0; st == PLAIT_OK && pos < len;) {
        size_t end = t->pretok == PLAIT_PRETOK_LLAMA3  ? plait_pretokenize_next_llama3(s, len, pos)
                     : t->pretok == PLAIT_PRETOK_QWEN2 ? plait_pretokenize_next_qwen2(s, len, pos)
                                                       : plait_pretokenize_next(s, len, pos),
               n = end - pos;
        int64_t *hit = n <= CACHE_PIECE_BYTES ? plait_bytes_map_find(&cache, s + pos, n) : NULL;
        const int64_t *whole = t->ignore_merges && !hit ? plait_bytes_map_find(&t->tokens, s + pos, n) : NULL;
        if (whole && t->added && t->added[*whole]) whole = NULL;
        if (whole) {
            st = plait_token_buf_push(out, (int32_t)*whole);
        } else if (hit) {
            size_t start = (size_t)(*hit >> 8), count = (size_t)(*hit & 0xff);
            for (size_t k = 0; st == PLAIT_OK && k < count; k++) st = plait_token_buf_push(out, memo.ids[start + k]);
        } else {
            size_t before = out->len;
            st = encode_piece(t, &w, s + pos, n, out);
            if (st == PLAIT_OK && n <= CACHE_PIECE_BYTES) {
                size_t start = memo.len;
                for (size_t k = before; st == PLAIT_OK && k < out->len; k++) st = plait_token_buf_push(&memo, out->ids[k]);
                if (st == PLAIT_OK &&
                    !plait_bytes_map_upsert(&cache, s + pos, n, (int64_t)start << 8 | (int64_t)(out->len - before), NULL))
                    st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory encoding");
            }
        }
        pos = end;
        if (st == PLAIT_OK && sink && (out->len >= STREAM_BATCH || pos == len)) {
            /* the caller's bytes done (normalised text is another length) */
            st = sink->sink(sink->ctx, out->ids, out->len, pos == len ? sink->len : pos * sink->len / len);
            out->len = 0;
        }
    }
    free(w.id);
    free(w.next);
    free(w.prev);
    plait_heap_free(&w.heap);
    plait_bytes_map_free(&cache);
    plait_token_buf_free(&memo);
    return st;
}

/* encode_text of the text in the tokenizer's normal form: as it is, or
 * under an NFC normalizer its NFC (nfc.h), unless it is all ASCII. */
static plait_status encode_into(const plait_tokenizer *t, const void *text, size_t len, plait_token_buf *out,
                                stream_sink *sink) {
    if (sink) sink->len = len;
    if (!t->nfc || plait_nfc_trivial(text, len)) return encode_text(t, text, len, out, sink);
    unsigned char *norm = malloc(plait_nfc_bound(len));
    if (!norm) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory normalising %zu bytes of text (NFC)", len);
    plait_status st = encode_text(t, norm, plait_nfc(text, len, norm), out, sink);
    free(norm);
    return st;
}

size_t plait_tokenizer_cut(const void *text, size_t len, size_t from) {
    const unsigned char *s = text;
    for (size_t p = from > 0 ? from : 1; p < len; p++) {
        const unsigned char c = s[p - 1];
        if (s[p] == ' ' && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return p;
    }
    return len;
}

plait_status plait_tokenizer_encode(const plait_tokenizer *t, const void *text, size_t len, plait_token_buf *out) {
    return encode_into(t, text, len, out, NULL);
}

plait_status plait_tokenizer_encode_prompt(const plait_tokenizer *t, const void *text, size_t len,
                                           plait_token_buf *out) {
    plait_status st = t->bos >= 0 ? plait_token_buf_push(out, t->bos) : PLAIT_OK;
    return st == PLAIT_OK ? encode_into(t, text, len, out, NULL) : st;
}

plait_status plait_tokenizer_encode_stream(const plait_tokenizer *t, const void *text, size_t len,
                                           plait_status (*sink)(void *ctx, const int32_t *ids, size_t n, size_t done),
                                           void *ctx) {
    plait_token_buf buf = {0};
    stream_sink s = {sink, ctx, len};
    plait_status st = encode_into(t, text, len, &buf, &s);
    plait_token_buf_free(&buf);
    return st;
}

plait_status plait_tokenizer_decode(const plait_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b;
        size_t l;
        if (plait_tokenizer_token(t, ids[i], &b, &l) != PLAIT_OK)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "token %zu of %zu: id %d is out of range (the vocabulary "
                                                          "has ids 0..%d)",
                                   i, n, ids[i], t->n_ids - 1);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory decoding %zu tokens", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b;
        size_t l;
        plait_tokenizer_token(t, ids[i], &b, &l);
        memcpy(buf + k, b, l);
        k += l;
    }
    buf[k] = '\0';
    *out = buf;
    *len = k;
    return PLAIT_OK;
}
