/*
 * The data Unicode Normalization Form C needs (nfc.c), generated into
 * nfc_tables.c by gen_nfc_tables.py from Python's unicodedata; the
 * Unicode version is plait_nfc_unicode_version. Constant; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_NFC_TABLES_H
#define PLAIT_CORE_TOKENIZER_NFC_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* The most code points a full canonical decomposition has. */
#define PLAIT_NFC_LONGEST 4

/* Code points lo..hi have canonical combining class ccc (never 0). */
typedef struct plait_nfc_class {
    uint32_t lo, hi;
    uint8_t ccc;
} plait_nfc_class;

/* cp's full canonical decomposition, n code points of to[] (Hangul
 * syllables, decomposed by arithmetic, are not listed). */
typedef struct plait_nfc_decomposition {
    uint32_t cp;
    uint8_t n;
    uint32_t to[PLAIT_NFC_LONGEST];
} plait_nfc_decomposition;

/* first followed by second composes canonically into composite. */
typedef struct plait_nfc_pair {
    uint32_t first, second, composite;
} plait_nfc_pair;

/* Each sorted by its first field (pairs by first, then second). */
extern const plait_nfc_class plait_nfc_classes[];
extern const size_t plait_nfc_classes_count;
extern const plait_nfc_decomposition plait_nfc_decompositions[];
extern const size_t plait_nfc_decompositions_count;
extern const plait_nfc_pair plait_nfc_pairs[];
extern const size_t plait_nfc_pairs_count;
extern const uint32_t plait_nfc_seconds[]; /* every pair's second, once */
extern const size_t plait_nfc_seconds_count;
extern const char plait_nfc_unicode_version[];

#endif
