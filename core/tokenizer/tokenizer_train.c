#include "tokenizer/tokenizer_train.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/heap.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_internal.h"

#define MAX_VOCAB 10000000

/* A distinct piece of the text: its current tokens and how often it occurs. */
typedef struct word {
    int32_t *sym;
    int32_t len;
    int64_t freq;
} word;

/* A pair's count over all words and the words that (may) hold it: a word is
 * listed when the pair first appears in it and stays listed; merging checks. */
typedef struct pair_stat {
    int64_t count;
    int32_t *words;
    int32_t n_words, cap;
} pair_stat;

typedef struct heap_entry {
    int64_t count;
    uint64_t key;
} heap_entry;

typedef struct trainer {
    word *words;
    size_t n_words;
    plait_u64_map pair_index; /* pair key -> index in stats */
    pair_stat *stats;
    size_t n_stats, stats_cap;
    plait_heap heap;          /* of heap_entry: candidate pairs, stale ones skipped */
    plait_bytes_map vocab;    /* token bytes -> id, ids in order */
    plait_bpe_merge *merges;
    int32_t n_merges, merges_cap;
    int failed;               /* out of memory somewhere */
} trainer;

static int more_frequent(const void *a, const void *b) {
    const heap_entry *x = a, *y = b;
    return x->count != y->count ? x->count > y->count : x->key < y->key;
}

static void heap_push(trainer *t, int64_t count, uint64_t key) {
    heap_entry e = {count, key};
    if (count > 0 && plait_heap_push(&t->heap, &e) != 0) t->failed = 1;
}

static pair_stat *stat_of(trainer *t, uint64_t key) {
    int inserted = 0;
    int64_t *idx = plait_u64_map_upsert(&t->pair_index, key, (int64_t)t->n_stats, &inserted);
    if (!idx) {
        t->failed = 1;
        return NULL;
    }
    if (inserted) {
        if (t->n_stats == t->stats_cap) {
            size_t cap = t->stats_cap ? t->stats_cap * 2 : 4096;
            pair_stat *s = realloc(t->stats, cap * sizeof *s);
            if (!s) {
                t->failed = 1;
                return NULL;
            }
            t->stats = s;
            t->stats_cap = cap;
        }
        memset(&t->stats[t->n_stats++], 0, sizeof(pair_stat));
    }
    return &t->stats[*idx];
}

static void list_word(trainer *t, pair_stat *s, int32_t w) {
    if (s->n_words && s->words[s->n_words - 1] == w) return;
    if (s->n_words == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 4;
        int32_t *p = realloc(s->words, sizeof *p * (size_t)cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        s->words = p;
        s->cap = cap;
    }
    s->words[s->n_words++] = w;
}

/* Add `sign` * freq to every adjacent pair of word w; list w under pairs
 * that hold `fresh` (a new token) or, on the first count, under all. */
static void count_pairs(trainer *t, int32_t w, int sign, int32_t fresh, int first) {
    word *wd = &t->words[w];
    for (int32_t i = 0; i + 1 < wd->len; i++) {
        pair_stat *s = stat_of(t, plait_pair_key(wd->sym[i], wd->sym[i + 1]));
        if (!s) return;
        s->count += sign * wd->freq;
        if (sign > 0 && (first || wd->sym[i] == fresh || wd->sym[i + 1] == fresh)) list_word(t, s, w);
    }
}

/* Count the distinct pieces of every text, then make them words of bytes. */
static plait_status collect_words(trainer *t, const void *const *texts, const size_t *lens, size_t n) {
    plait_bytes_map pieces = {0};
    for (size_t k = 0; k < n && !t->failed; k++) {
        const unsigned char *s = texts[k];
        for (size_t pos = 0; pos < lens[k];) {
            size_t end = plait_pretokenize_next(s, lens[k], pos);
            int64_t *c = plait_bytes_map_upsert(&pieces, s + pos, end - pos, 0, NULL);
            if (!c) {
                t->failed = 1;
                break;
            }
            (*c)++;
            pos = end;
        }
    }
    int32_t id_of_byte[256];
    for (int i = 0; i < 256; i++) id_of_byte[plait_byte_in_vocab_order(i)] = i;
    t->words = t->failed ? NULL : calloc(pieces.count ? pieces.count : 1, sizeof *t->words);
    if (!t->words) t->failed = 1;
    for (size_t e = 0; !t->failed && e < pieces.count; e++) {
        size_t len;
        const unsigned char *b = plait_bytes_map_key(&pieces, e, &len);
        word *wd = &t->words[t->n_words++];
        wd->sym = malloc(sizeof(int32_t) * len);
        if (!wd->sym) {
            t->failed = 1;
            break;
        }
        for (size_t i = 0; i < len; i++) wd->sym[i] = id_of_byte[b[i]];
        wd->len = (int32_t)len;
        wd->freq = pieces.values[e];
    }
    plait_bytes_map_free(&pieces);
    return t->failed ? plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory counting the training text") : PLAIT_OK;
}

/* Replace every (a, b) in word w by `id`, left to right. */
static void merge_word(word *wd, int32_t a, int32_t b, int32_t id) {
    int32_t k = 0;
    for (int32_t i = 0; i < wd->len; i++) {
        if (i + 1 < wd->len && wd->sym[i] == a && wd->sym[i + 1] == b) {
            wd->sym[k++] = id;
            i++;
        } else {
            wd->sym[k++] = wd->sym[i];
        }
    }
    wd->len = k;
}

static int holds(const word *wd, int32_t a, int32_t b) {
    for (int32_t i = 0; i + 1 < wd->len; i++)
        if (wd->sym[i] == a && wd->sym[i + 1] == b) return 1;
    return 0;
}

/* The bytes of token `id` (its entry in vocab: ids are entries in order). */
static const unsigned char *token_bytes(const trainer *t, int32_t id, size_t *len) {
    return plait_bytes_map_key(&t->vocab, (size_t)id, len);
}

/* Apply merge (a, b): the new token's id (an existing one when another merge
 * already made the same bytes). Counts of the touched words' pairs are
 * moved, and the changed pairs re-enter the heap. */
static void apply_merge(trainer *t, int32_t a, int32_t b) {
    size_t la, lb;
    const unsigned char *ba = token_bytes(t, a, &la), *bb = token_bytes(t, b, &lb);
    unsigned char *joined = malloc(la + lb);
    if (!joined) {
        t->failed = 1;
        return;
    }
    memcpy(joined, ba, la);
    memcpy(joined + la, bb, lb);
    int64_t *id = plait_bytes_map_upsert(&t->vocab, joined, la + lb, (int64_t)t->vocab.count, NULL);
    free(joined);
    if (!id) {
        t->failed = 1;
        return;
    }
    int32_t fresh = (int32_t)*id;
    if (t->n_merges == t->merges_cap) {
        int32_t cap = t->merges_cap ? t->merges_cap * 2 : 1024;
        plait_bpe_merge *m = realloc(t->merges, sizeof *m * (size_t)cap);
        if (!m) {
            t->failed = 1;
            return;
        }
        t->merges = m;
        t->merges_cap = cap;
    }
    t->merges[t->n_merges++] = (plait_bpe_merge){a, b, fresh};
    const int64_t *idx = plait_u64_map_find(&t->pair_index, plait_pair_key(a, b));
    pair_stat *s = &t->stats[*idx];
    /* the list may grow while we walk it (a word holding a, b, a, b) */
    for (int32_t k = 0; k < s->n_words && !t->failed; k++) {
        int32_t w = s->words[k];
        word *wd = &t->words[w];
        if (!holds(wd, a, b)) continue;
        count_pairs(t, w, -1, -1, 0);
        merge_word(wd, a, b, fresh);
        count_pairs(t, w, +1, fresh, 0);
        s = &t->stats[*plait_u64_map_find(&t->pair_index, plait_pair_key(a, b))]; /* stats may have moved */
        for (int32_t i = 0; i + 1 < wd->len; i++) {
            uint64_t key = plait_pair_key(wd->sym[i], wd->sym[i + 1]);
            heap_push(t, t->stats[*plait_u64_map_find(&t->pair_index, key)].count, key);
        }
    }
}

static void free_trainer(trainer *t) {
    for (size_t w = 0; w < t->n_words; w++) free(t->words[w].sym);
    free(t->words);
    for (size_t i = 0; i < t->n_stats; i++) free(t->stats[i].words);
    free(t->stats);
    plait_heap_free(&t->heap);
    free(t->merges);
    plait_u64_map_free(&t->pair_index);
    plait_bytes_map_free(&t->vocab);
}

/* The tokenizer from the learned vocabulary and merges, plus <|endoftext|>. */
static plait_status build(const trainer *t, plait_tokenizer **out) {
    plait_tokenizer *tok = plait_tokenizer_new("");
    if (!tok) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = PLAIT_OK;
    for (size_t e = 0; st == PLAIT_OK && e < t->vocab.count; e++) {
        size_t len;
        const unsigned char *b = plait_bytes_map_key(&t->vocab, e, &len);
        st = plait_tokenizer_add_token(tok, b, len, (int32_t)e, "trained vocabulary", 0);
    }
    if (st == PLAIT_OK)
        st = plait_tokenizer_add_token(tok, (const unsigned char *)"<|endoftext|>", 13, (int32_t)t->vocab.count,
                                       "trained vocabulary", 0);
    if (st == PLAIT_OK) st = plait_tokenizer_finish_vocab(tok, "trained vocabulary");
    for (int32_t r = 0; st == PLAIT_OK && r < t->n_merges; r++)
        st = plait_tokenizer_add_merge(tok, t->merges[r].a, t->merges[r].b, "trained merges", (size_t)r + 1, 0);
    if (st != PLAIT_OK) {
        plait_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return PLAIT_OK;
}

plait_status plait_tokenizer_train(const plait_tokenizer_train_options *o, const void *const *texts,
                                   const size_t *lens, size_t n, plait_tokenizer **out) {
    *out = NULL;
    if (o->vocab_size < 257 || o->vocab_size > MAX_VOCAB)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "vocabulary size %d is out of range: 257 (the 256 bytes and <|endoftext|>) .. %d",
                               o->vocab_size, MAX_VOCAB);
    trainer t = {0};
    plait_heap_init(&t.heap, sizeof(heap_entry), more_frequent);
    for (int i = 0; i < 256 && !t.failed; i++) {
        unsigned char b = plait_byte_in_vocab_order(i);
        if (!plait_bytes_map_upsert(&t.vocab, &b, 1, i, NULL)) t.failed = 1;
    }
    plait_status st = t.failed ? plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory") : collect_words(&t, texts, lens, n);
    for (size_t w = 0; st == PLAIT_OK && w < t.n_words && !t.failed; w++) count_pairs(&t, (int32_t)w, +1, -1, 1);
    for (size_t i = 0; st == PLAIT_OK && i < t.pair_index.cap && !t.failed; i++)
        if (t.pair_index.keys[i] != UINT64_MAX) heap_push(&t, t.stats[t.pair_index.values[i]].count, t.pair_index.keys[i]);
    /* the vocabulary ends with <|endoftext|>, so learn until size - 1 */
    while (st == PLAIT_OK && !t.failed && (int32_t)t.vocab.count < o->vocab_size - 1 && t.heap.len) {
        heap_entry e;
        plait_heap_pop(&t.heap, &e);
        const int64_t *idx = plait_u64_map_find(&t.pair_index, e.key);
        if (!idx || t.stats[*idx].count != e.count) continue; /* stale */
        if (e.count < 2) break;                                 /* nothing repeats any more */
        apply_merge(&t, (int32_t)(e.key >> 32), (int32_t)(uint32_t)e.key);
        if (o->progress) o->progress(o->ctx, (int32_t)t.vocab.count + 1, o->vocab_size);
    }
    if (st == PLAIT_OK && t.failed) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory training the tokenizer");
    if (st == PLAIT_OK) st = build(&t, out);
    free_trainer(&t);
    return st;
}
