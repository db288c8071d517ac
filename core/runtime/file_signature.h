/*
 * What a file is, from its first bytes: for readers that recognise their
 * own format positively and, when a file is not theirs, say what it looks
 * like instead of calling it damaged ("a gzip-compressed file", "text").
 * Pure functions of the bytes given (the text check also sets the thread's
 * error); thread-safe.
 */
#ifndef PLAIT_CORE_RUNTIME_FILE_SIGNATURE_H
#define PLAIT_CORE_RUNTIME_FILE_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/error.h"

/* Bytes a reader looks at to tell what a file is: enough to tell, cheap
 * on a file of any size. */
#define PLAIT_SIGNATURE_BYTES ((size_t)65536)

/* A known binary format starting at p (n bytes available): compressed files
 * and archives, NumPy .npy, ELF, safetensors ("a safetensors file (model
 * weights)"), llm.c token files ("an llm.c token file"); with a reason or a
 * hint where one helps. NULL when none is recognised. */
const char *plait_file_signature(const uint8_t *p, size_t n);

/* 1 if [p, p + n) reads as text: UTF-8 without NUL and without control
 * bytes other than tab, line feed, carriage return and form feed (a
 * sequence cut at the end counts). */
int plait_looks_like_text(const uint8_t *p, size_t n);

/* For a command that reads `path` (its n bytes at p) as text: PLAIT_OK, or
 * PLAIT_ERR_INVALID_ARG with a message naming what the file is instead (a
 * known binary format, or a NUL byte in its first PLAIT_SIGNATURE_BYTES,
 * which no text has) and `command`, the one that refuses it. */
plait_status plait_text_input_check(const char *path, const uint8_t *p, size_t n, const char *command);

#endif
