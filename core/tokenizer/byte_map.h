/*
 * GPT-2's byte-to-unicode map: every byte is written in vocab.json and
 * merges.txt as one printable character, so tokens never contain spaces or
 * control characters. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
 * themselves (as code points); the other 68 bytes, in increasing order,
 * become U+0100, U+0101, ... (so a space is U+0120 'Ġ'). The order of that
 * list (the printable ranges first, then the rest) is also the order of the
 * first 256 ids of GPT-2's vocabulary, which trained tokenizers follow.
 * Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_BYTE_MAP_H
#define PLAIT_CORE_TOKENIZER_BYTE_MAP_H

#include <stdint.h>

/* The code point that stands for byte b. */
uint32_t plait_byte_to_unicode(unsigned char b);
/* The byte a code point stands for, or -1 if it stands for none. */
int plait_unicode_to_byte(uint32_t cp);
/* The i-th byte (0..255) in GPT-2's vocabulary order. */
unsigned char plait_byte_in_vocab_order(int i);

#endif
