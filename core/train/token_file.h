/*
 * Token files: reading one mapped file of tokens and writing llm.c's .bin
 * format.
 *
 * llm.c's format: a header of 256 little-endian int32 — header[0] the magic,
 * header[1] the version, header[2] the token count — then the tokens, little
 * endian: uint16 with magic 20240520 and version 1 (GPT-2-sized
 * vocabularies), uint32 with magic 20240801 and version 7 (llm.c's format
 * for larger ones, as its data_common.py writes for Llama 3). Readers also
 * take raw uint16 (nanoGPT's prepare.py: no header) and text (each byte one
 * token). Each is recognised, or refused naming why: a file read as tokens
 * whose first 1024 bytes have llm.c's header layout around a wrong magic (a
 * damaged header), or whose first 64 KiB are text, is not taken for raw
 * tokens; a file read as text with an llm.c header or a NUL byte in its
 * first 64 KiB is not taken for text; compressed files, archives, NumPy
 * and safetensors files are named for what they are.
 *
 * Errors name the file and the byte offset of what is wrong. A reader is
 * read-only after open and may be shared by threads; a writer belongs to one
 * thread.
 */
#ifndef PLAIT_CORE_TRAIN_TOKEN_FILE_H
#define PLAIT_CORE_TRAIN_TOKEN_FILE_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <plait/types.h>

#define PLAIT_LLMC_MAGIC_U16 20240520u
#define PLAIT_LLMC_VERSION_U16 1u
#define PLAIT_LLMC_MAGIC_U32 20240801u
#define PLAIT_LLMC_VERSION_U32 7u
#define PLAIT_LLMC_HEADER_BYTES (256 * 4)

typedef struct plait_token_file {
    char path[PATH_MAX];
    const uint8_t *map;      /* the whole file */
    size_t map_bytes;
    const uint8_t *tokens;   /* the first token's first byte */
    int64_t n_tokens;
    int width;               /* bytes per token: 1 (text), 2 or 4 */
    int llmc_header;
} plait_token_file;

/* Map `path`. `text` = every byte is a token; otherwise a token file (llm.c
 * header, uint16 or uint32, or raw uint16). Errors: PLAIT_ERR_SYSTEM (cannot
 * open or map), PLAIT_ERR_INVALID_CONFIG (empty or not a regular file),
 * PLAIT_ERR_PROTOCOL (bad header: wrong version, a count that does not match
 * the size, a truncated header; odd raw size; not the format asked for). */
plait_status plait_token_file_open(const char *path, int text, plait_token_file *out);
void plait_token_file_close(plait_token_file *f);
/* What an open file holds, for messages: "llm.c uint16 tokens", "text (a
 * token per byte)"... */
const char *plait_token_file_kind(const plait_token_file *f);

static inline int32_t plait_token_file_at(const plait_token_file *f, int64_t i) {
    const uint8_t *p = f->tokens + (size_t)i * (size_t)f->width;
    if (f->width == 1) return p[0];
    if (f->width == 2) return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The first token >= vocab_size: PLAIT_ERR_PROTOCOL naming the file, the
 * byte offset and the token index; PLAIT_OK when all are below. */
plait_status plait_token_file_check(const plait_token_file *f, int32_t vocab_size);

/* Writing llm.c's format. The header's count is written at close, so a file
 * that was not closed has count 0 and a size that does not match: readers
 * refuse it. */
typedef struct plait_token_writer {
    FILE *f;
    char path[PATH_MAX];
    int width;               /* 2 or 4 */
    int64_t count;
} plait_token_writer;

/* width 2 (uint16) or 4 (uint32). */
plait_status plait_token_writer_open(plait_token_writer *w, const char *path, int width);
/* Append ids; one that does not fit the width is PLAIT_ERR_INVALID_ARG. */
plait_status plait_token_writer_append(plait_token_writer *w, const int32_t *ids, size_t n);
/* Write the count into the header, flush and fsync, close. */
plait_status plait_token_writer_close(plait_token_writer *w);
/* Close and delete after an error. */
void plait_token_writer_abort(plait_token_writer *w);

#endif
