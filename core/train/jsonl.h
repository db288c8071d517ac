/*
 * JSON Lines input for `plait data prepare`: a file whose every line is a
 * JSON object, one document each, its text the string under a key ("text"
 * in FineWeb's, The Pile's and Megatron-LM's data preprocessing's jsonl).
 * Blank lines are passed over. Each line is parsed strictly (RFC 8259, the
 * parser of checkpoint/safetensors_json.h, true, false, null and reals
 * allowed in other members); its string is decoded (escapes, \uXXXX and
 * surrogate pairs into UTF-8).
 *
 * Errors (PLAIT_ERR_PROTOCOL) name the file, the line and what is wrong: a
 * line that is not a JSON object, one without the key, a key whose value
 * is not a string; the callback's own error is returned as it is.
 * Reentrant: lines may be read on several threads at once.
 */
#ifndef PLAIT_CORE_TRAIN_JSONL_H
#define PLAIT_CORE_TRAIN_JSONL_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* One line's document. */
typedef struct plait_jsonl_doc {
    const char *text; /* decoded, NUL-terminated (a \u0000 is refused), owned by `owner` */
    size_t len;
    struct plait_json_doc *owner;
} plait_jsonl_doc;

/* Line `number` (from 1) of file `path`, `len` bytes without its newline:
 * its document into *doc (text NULL for a blank line), freed with
 * plait_jsonl_doc_free. */
plait_status plait_jsonl_line(const unsigned char *line, size_t len, int64_t number, const char *key, const char *path,
                              plait_jsonl_doc *doc);
void plait_jsonl_doc_free(plait_jsonl_doc *doc);

/* A document: its decoded text, and the byte just past its line. */
typedef plait_status (*plait_jsonl_fn)(void *ctx, const char *text, size_t len, size_t line_end);

/* Every document of the lines in bytes [from, to) of `data` (`from` a line
 * start), in order, to fn; `path` names the file in errors, whose line
 * numbers count from the file's start. */
plait_status plait_jsonl_each(const unsigned char *data, size_t from, size_t to, const char *key, const char *path,
                              plait_jsonl_fn fn, void *ctx);

/* 1 if a path names JSON Lines by its extension (.jsonl, .ndjson). */
int plait_jsonl_path(const char *path);

#endif
