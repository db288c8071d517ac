/*
 * Learning a byte-level BPE from text (`plait tokenizer train`), GPT-2's
 * way: the text is cut by GPT-2's pattern (pretokenize.h) and counted per
 * distinct piece; starting from the 256 bytes, the most frequent adjacent
 * pair of tokens (counted over all pieces, never across two) becomes a new
 * token, until the vocabulary reaches `vocab_size` or no pair occurs twice.
 * Ties go to the pair with the smaller ids, so the result depends only on
 * the text. Ids: the 256 bytes in GPT-2's order (byte_map.h), then the new
 * tokens in the order they were learned, then "<|endoftext|>" last, as in
 * GPT-2's vocabulary (256 + 50000 merges + 1 = 50257).
 *
 * Cost: one pass over the text, then work proportional to the pieces each
 * merge touches (a heap picks the best pair); the 383 KB bundled corpus at
 * 4096 takes well under a second.
 * Thread-safety: reentrant; texts are only read.
 */
#ifndef PLAIT_CORE_TOKENIZER_TOKENIZER_TRAIN_H
#define PLAIT_CORE_TOKENIZER_TOKENIZER_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

#include "tokenizer/tokenizer.h"

typedef struct plait_tokenizer_train_options {
    int32_t vocab_size;   /* wanted size, 257 (bytes + end of text) or more */
    /* Called after every merge with the size so far (may be NULL). */
    void (*progress)(void *ctx, int32_t vocab_now, int32_t vocab_wanted);
    void *ctx;
} plait_tokenizer_train_options;

/* Learn from `n` texts (each pre-tokenised on its own). The caller owns *out.
 * Errors: PLAIT_ERR_INVALID_ARG (vocab_size out of range),
 * PLAIT_ERR_NO_MEMORY. */
plait_status plait_tokenizer_train(const plait_tokenizer_train_options *o, const void *const *texts,
                                   const size_t *lens, size_t n, plait_tokenizer **out);

#endif
