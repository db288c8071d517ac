/*
 * Turning text into token files for training (`plait data prepare`), as
 * llm.c's and nanoGPT's prepare scripts do: every input file is one
 * document (a JSON Lines file, *.jsonl or *.ndjson, one a line: the string
 * under json_key, as Megatron-LM's data preprocessing reads them), encoded with a tokenizer and preceded by the token its
 * tokenizer.json's post-processor puts first (Llama 3's <|begin_of_text|>)
 * or else, when the vocabulary has "<|endoftext|>", by that (llm.c's
 * convention: each document starts with the end-of-text token). The last `val_fraction` of the input bytes
 * (taken from the start of a line, so no word is cut) is encoded separately
 * as the validation set, the way nanoGPT's prepare.py splits its text.
 *
 * Output, in one directory that appears whole (runtime/staged_dir.h):
 *   train_000000.bin, train_000001.bin, ...  llm.c's format (token_file.h),
 *   val_000000.bin, ...                      shard_tokens tokens per shard
 *                                            (the last one of each shorter);
 *   vocab.json, merges.txt                   the tokenizer, so the directory
 *                                            names its own vocabulary
 *                                            (tokenizer.json, copied, for
 *                                            one GPT-2's files cannot say).
 * Tokens are uint16 while the vocabulary has at most 65536 ids, uint32
 * above (or as `dtype` forces; a vocabulary too large for a forced uint16 is
 * refused before anything is written).
 *
 * Thread-safety: reentrant. Errors: those of the tokenizer, the token
 * writer and the staged directory, each naming the file; nothing is left in
 * the output directory on error.
 */
#ifndef PLAIT_CORE_TRAIN_DATA_PREPARE_H
#define PLAIT_CORE_TRAIN_DATA_PREPARE_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

#include "tokenizer/tokenizer.h"

enum { PLAIT_PREPARE_TEXT = 1, PLAIT_PREPARE_JSONL = 2 };
#define PLAIT_PREPARE_MAX_WORKERS 256

typedef struct plait_prepare_options {
    const char *const *inputs;   /* text files, in order */
    int n_inputs;
    const plait_tokenizer *tokenizer;
    const char *out_dir;
    double val_fraction;         /* 0 <= f < 1 */
    int64_t shard_tokens;        /* tokens per shard, >= 1 */
    int dtype_bytes;             /* 0 = by vocabulary, 2 = uint16, 4 = uint32 */
    /* the member holding a JSON Lines input's documents (train/jsonl.h:
     * an input named *.jsonl or *.ndjson is one document a line); NULL =
     * "text" */
    const char *json_key;
    /* every input as: 0 = by its name (JSON Lines as above, else text),
     * PLAIT_PREPARE_TEXT or PLAIT_PREPARE_JSONL */
    int format;
    /* threads encoding a JSON Lines file's documents, or a text file's
     * parts cut where the tokenizer's pieces allow (plait_tokenizer_cut)
     * (0 = the machine's cores; at most PLAIT_PREPARE_MAX_WORKERS): the
     * output is the same bits whatever their number */
    int workers;
    /* the bytes of a text file's parts encoded apart (0 = 4 MiB; tests
     * take less) */
    size_t text_part_bytes;
    /* progress (may be NULL): bytes of input done and in all, tokens so far */
    void (*progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total, int64_t tokens);
    void *ctx;
} plait_prepare_options;

typedef struct plait_prepare_result {
    uint64_t bytes;
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
    int dtype_bytes;
} plait_prepare_result;

plait_status plait_data_prepare(const plait_prepare_options *o, plait_prepare_result *result);

#endif
