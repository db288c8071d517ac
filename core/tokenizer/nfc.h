/*
 * Unicode Normalization Form C of UTF-8 text (UAX #15): each character
 * decomposed canonically, the combining marks after a starter put in the
 * order of their canonical combining classes, then composed again
 * wherever a primary composite exists and nothing blocks it. What a
 * tokenizer.json's {"type": "NFC"} normalizer applies before the
 * pre-tokenizer (Qwen2's and Qwen3's), on the tables of Unicode's version
 * plait_nfc_unicode_version (nfc_tables.h).
 *
 * Bytes that are not valid UTF-8 pass through unchanged and compose with
 * nothing. A run of more than PLAIT_NFC_RUN code points none of which
 * starts a new composition unit (combining marks after one starter, more
 * than any text in the Stream-Safe format holds) is normalised in pieces
 * of that many.
 *
 * Pure functions; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_NFC_H
#define PLAIT_CORE_TOKENIZER_NFC_H

#include <stddef.h>

#define PLAIT_NFC_RUN 1024

/* The bytes plait_nfc may write for len bytes of input: NFC grows UTF-8
 * text at most threefold (UAX #15, "Stabilized Strings"). */
static inline size_t plait_nfc_bound(size_t len) { return 3 * len + 16; }

/* NFC of s[0..len) into out (room for plait_nfc_bound(len) bytes); returns
 * the bytes written. */
size_t plait_nfc(const unsigned char *s, size_t len, unsigned char *out);

/* 1 if s[0..len) is its own NFC for certain without looking further (every
 * byte ASCII), else 0: the caller may skip plait_nfc. */
int plait_nfc_trivial(const unsigned char *s, size_t len);

#endif
