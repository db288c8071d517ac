/*
 * The tokenizer's representation, shared by the files that build it (the
 * loaders, the trainer) and use it (encode/decode, save). Not a public API.
 */
#ifndef PLAIT_CORE_TOKENIZER_TOKENIZER_INTERNAL_H
#define PLAIT_CORE_TOKENIZER_TOKENIZER_INTERNAL_H

#include <limits.h>

#include "tokenizer/bytes_map.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/u64_map.h"

typedef struct plait_bpe_merge {
    int32_t a, b, result;
} plait_bpe_merge;

struct plait_tokenizer {
    char source[PATH_MAX];
    plait_bytes_map tokens;      /* token bytes -> id; entry i is the i-th token added */
    int32_t *entry_of_id;        /* id -> entry in `tokens` (-1 = no token with this id) */
    int32_t n_ids;               /* vocab size: largest id + 1 */
    int32_t byte_id[256];        /* the single-byte tokens */
    plait_bpe_merge *merges;     /* in rank order */
    int32_t n_merges, merges_cap;
    plait_u64_map merge_rank;    /* pair_key(a, b) -> rank */
    unsigned char *merged;       /* per id: made by a merge added so far */
    int32_t eot;
    int32_t bos; /* put first by the post-processor, or -1 */
    plait_pretokenizer pretok;
    int ignore_merges;    /* a piece that is a vocabulary token is that token */
    int nfc;              /* the text is put in Unicode's Normalization Form C first (nfc.h) */
    unsigned char *added; /* per id: an added (special) token, never a whole piece */
};

plait_tokenizer *plait_tokenizer_new(const char *source);
/* Add a token with the given id; `what` and `offset` name where it was
 * read, for the error when the bytes or the id are already taken. */
plait_status plait_tokenizer_add_token(plait_tokenizer *t, const unsigned char *bytes, size_t len, int32_t id,
                                       const char *what, size_t offset);
/* After every token is added: every id below the largest must be used and
 * every single byte must be a token. */
plait_status plait_tokenizer_finish_vocab(plait_tokenizer *t, const char *what);
/* Add the next merge (a, b): its result must be a token; a pair seen before
 * is an error. `what`/`line`/`offset` locate it for errors. */
plait_status plait_tokenizer_add_merge(plait_tokenizer *t, int32_t a, int32_t b, const char *what, size_t line,
                                       size_t offset);

/* tokenizer.json's pre_tokenizer (hf_pipeline.c): the pattern, or
 * PLAIT_ERR_PROTOCOL naming the JSON path of what plait does not implement. */
struct plait_json;
plait_status plait_hf_pre_tokenizer(const struct plait_json *root, const char *what, plait_pretokenizer *out);
/* tokenizer.json's post_processor, after the vocabulary is finished: sets
 * t->bos from a TemplateProcessing, or refuses one plait does not follow. */
plait_status plait_hf_post_processor(plait_tokenizer *t, const struct plait_json *root, const char *what);

#endif
