/*
 * What GPT-2's pre-tokenisation needs to know about text: UTF-8 decoding that
 * never fails (a byte that does not start a valid sequence is taken alone, as
 * Python's "surrogateescape" does) and the three classes its pattern tests:
 * \p{L} letters, \p{N} numbers and \s white space (the Unicode White_Space
 * property, as in the Python `regex` module that encoder.py uses).
 *
 * The letter and number tables are generated (gen_unicode_tables.py) from
 * Python's unicodedata; the Unicode version is named in unicode_tables.c.
 * Pure functions; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_UNICODE_CLASS_H
#define PLAIT_CORE_TOKENIZER_UNICODE_CLASS_H

#include <stddef.h>
#include <stdint.h>

typedef enum plait_char_class {
    PLAIT_CHAR_OTHER = 0,  /* anything else, invalid UTF-8 bytes included */
    PLAIT_CHAR_LETTER,
    PLAIT_CHAR_NUMBER,
    PLAIT_CHAR_SPACE
} plait_char_class;

typedef struct plait_unicode_range {
    uint32_t lo, hi;
} plait_unicode_range;

extern const plait_unicode_range plait_unicode_letters[];
extern const size_t plait_unicode_letters_count;
extern const plait_unicode_range plait_unicode_numbers[];
extern const size_t plait_unicode_numbers_count;

/* Decode one character at s[0..avail) (avail >= 1): returns its length in
 * bytes (1..4) and its code point in *cp, or 1 and *cp = UINT32_MAX for a
 * byte that does not start a valid RFC 3629 sequence (overlong forms,
 * surrogates, values above U+10FFFF and truncated sequences are invalid). */
size_t plait_utf8_next(const unsigned char *s, size_t avail, uint32_t *cp);

/* The class of a code point (UINT32_MAX, an invalid byte, is OTHER). */
plait_char_class plait_char_class_of(uint32_t cp);

#endif
