/*
 * A byte-level BPE tokenizer, GPT-2's kind: text is cut into pieces by
 * GPT-2's pattern or Llama 3's (pretokenize.h), each piece's bytes start as
 * one token each, and merges are applied lowest rank first (every occurrence
 * of the best pair, left to right) until none applies; with ignore_merges
 * (Llama 3) a piece that is a vocabulary token whole is that token. Ids and
 * merges come from GPT-2's files (vocab.json + merges.txt, bytes written
 * with byte_map.h's characters) or a Hugging Face tokenizer.json whose model
 * is BPE, or from plait_tokenizer_train (tokenizer_train.h). Encoding any
 * bytes and decoding the ids gives the bytes back exactly; text is never
 * interpreted as special tokens ("<|endoftext|>" in a file is ordinary
 * text, as in GPT-2's encoder.py), and a special token's id decodes to its
 * text; plait_tokenizer_eot names the end-of-text id for callers that
 * separate documents with it, plait_tokenizer_bos the id a tokenizer.json's
 * post-processor puts before every text (Llama 3's <|begin_of_text|>).
 *
 * Ownership: the caller owns a loaded tokenizer (plait_tokenizer_free).
 * Thread-safety: immutable after loading; every function taking a const
 * tokenizer may run concurrently. Errors: PLAIT_ERR_SYSTEM (a file cannot be
 * read), PLAIT_ERR_PROTOCOL (a malformed file: the message names the file and
 * the byte offset, and the line for merges.txt), PLAIT_ERR_INVALID_ARG (an id
 * out of range), PLAIT_ERR_NO_MEMORY.
 */
#ifndef PLAIT_CORE_TOKENIZER_TOKENIZER_H
#define PLAIT_CORE_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

typedef struct plait_tokenizer plait_tokenizer;

/* Ids appended by encode; the caller frees ids (free) or reuses the buffer. */
typedef struct plait_token_buf {
    int32_t *ids;
    size_t len, cap;
} plait_token_buf;

/* `path` is a directory holding tokenizer.json, or vocab.json and merges.txt
 * (tokenizer.json wins when both are there), or a tokenizer.json file. */
plait_status plait_tokenizer_load(const char *path, plait_tokenizer **out);
/* GPT-2's two files. */
plait_status plait_tokenizer_load_gpt2(const char *vocab_json, const char *merges_txt, plait_tokenizer **out);
/* A Hugging Face tokenizer.json with "model": {"type": "BPE", ...} and a
 * ByteLevel (or no) pre-tokenizer, or Llama 3's Sequence of a Split with its
 * pattern and a ByteLevel without one; added_tokens join the vocabulary.
 * Anything else that would change the ids is refused, naming the JSON path. */
plait_status plait_tokenizer_load_hf(const char *tokenizer_json, plait_tokenizer **out);
void plait_tokenizer_free(plait_tokenizer *t);

/* Number of ids (one more than the largest). */
int32_t plait_tokenizer_vocab_size(const plait_tokenizer *t);
/* Number of merges. */
int32_t plait_tokenizer_merges(const plait_tokenizer *t);
/* The id of "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3), or -1
 * when the vocabulary has neither. */
int32_t plait_tokenizer_eot(const plait_tokenizer *t);
/* The id tokenizer.json's post-processor (TemplateProcessing) puts before
 * every text, as Hugging Face's encode does by default; -1 when none. */
int32_t plait_tokenizer_bos(const plait_tokenizer *t);
/* Whether GPT-2's vocab.json + merges.txt say everything about it (GPT-2's
 * pattern, no ignore_merges, no post-processor token). */
int plait_tokenizer_gpt2_compatible(const plait_tokenizer *t);
/* A hash of the ids' bytes and the merges in order: equal for tokenizers
 * that encode and decode alike, whatever files they were read from (a
 * checkpoint records it with the tokenizer's path). */
uint64_t plait_tokenizer_fingerprint(const plait_tokenizer *t);
/* Where it was loaded from ("" for a trained one). */
const char *plait_tokenizer_source(const plait_tokenizer *t);

/* Append the ids of `len` bytes of `text` (any bytes) to `out`. */
plait_status plait_tokenizer_encode(const plait_tokenizer *t, const void *text, size_t len, plait_token_buf *out);
/* The same after the post-processor's first token, when there is one
 * (plait_tokenizer_bos): the ids Hugging Face's encode gives with its
 * special tokens added, as a prompt is encoded. */
plait_status plait_tokenizer_encode_prompt(const plait_tokenizer *t, const void *text, size_t len,
                                           plait_token_buf *out);
/* As plait_tokenizer_encode, handing the ids to `sink` in batches (at most about 64K at a
 * time, in order) instead of keeping them: for texts larger than memory
 * should hold as ids. The ids are exactly those of plait_tokenizer_encode on
 * the whole text. A sink error stops the encoding and is returned. */
plait_status plait_tokenizer_encode_stream(const plait_tokenizer *t, const void *text, size_t len,
                                           plait_status (*sink)(void *ctx, const int32_t *ids, size_t n, size_t done),
                                           void *ctx);
/* The first position p >= from (from <= len) at which a piece of both
 * patterns starts whatever bytes come before p: an ASCII letter or digit
 * at p - 1 and a space at p (a letter's or digit's piece ends before a
 * space in GPT-2's pattern and Llama 3's, and neither looks behind); len
 * when there is none. So the ids of text[0, p) followed by those of
 * text[p, len) are the ids of the whole text: encoders may cut a long
 * text there and encode the parts apart. */
size_t plait_tokenizer_cut(const void *text, size_t len, size_t from);
/* The bytes of token `id` (not NUL-terminated): PLAIT_ERR_INVALID_ARG when
 * id is outside [0, vocab_size). */
plait_status plait_tokenizer_token(const plait_tokenizer *t, int32_t id, const unsigned char **bytes, size_t *len);
/* Decode n ids into a malloc'd buffer (NUL-terminated for convenience; *len
 * excludes it). An id out of range is PLAIT_ERR_INVALID_ARG naming its
 * position; nothing is returned then. */
plait_status plait_tokenizer_decode(const plait_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len);

/* Write vocab.json and merges.txt (GPT-2's format) into `dir`, created if
 * missing; a tokenizer GPT-2's files cannot describe
 * (plait_tokenizer_gpt2_compatible) is written as a copy of the
 * tokenizer.json it was read from instead, refused (PLAIT_ERR_PROTOCOL) when
 * that file no longer holds the same tokenizer. Either way the files
 * replace any there together (built in a sibling staging directory, then
 * swapped in), so a reader never sees half of a tokenizer. A `dir` holding other files is refused (staged_dir.h). */
plait_status plait_tokenizer_save(const plait_tokenizer *t, const char *dir);
/* The texts of vocab.json and merges.txt, as plait_tokenizer_save writes
 * them, for a caller that writes the files itself (plait export); the
 * caller frees both buffers (plait_jbuf_free), also after an error.
 * PLAIT_ERR_INVALID_ARG for a tokenizer the two files cannot describe. */
struct plait_jbuf;
plait_status plait_tokenizer_gpt2_text(const plait_tokenizer *t, struct plait_jbuf *vocab, struct plait_jbuf *merges);
/* Write vocab.json and merges.txt (or the copy of tokenizer.json, as
 * plait_tokenizer_save) into a staging directory someone else commits
 * (runtime/staged_dir.h), e.g. beside a prepared dataset. */
struct plait_staged_dir;
plait_status plait_tokenizer_write_staged(const plait_tokenizer *t, const struct plait_staged_dir *d);
/* vocab.json, merges.txt, tokenizer.json: the names a tokenizer directory holds. */
int plait_tokenizer_file_name(const char *name);

/* Append ids to a buffer (grows it); PLAIT_ERR_NO_MEMORY on failure. */
plait_status plait_token_buf_push(plait_token_buf *b, int32_t id);
void plait_token_buf_free(plait_token_buf *b);

#endif
