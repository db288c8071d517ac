/*
 * Pre-tokenisation, the patterns plait implements. GPT-2's: text is cut
 * into pieces by the pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (first alternative that matches, each as long as it can) before BPE, so no
 * token ever spans two pieces. Implemented directly rather than with a regex
 * engine; works on bytes, where a byte that is not valid UTF-8 is one
 * character of the "other" class (unicode_class.h).
 *
 * Llama 3's (a Hugging Face Split with this pattern, behaviour Isolated):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (one line in tokenizer.json): contractions in any case, a word may take
 * one leading non-letter (a tab, punctuation), numbers go in threes, line
 * breaks stay with the punctuation or white space before them. Qwen2's
 * is the same with \p{N} for \p{N}{1,3}: every digit its own piece.
 * Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_PRETOKENIZE_H
#define PLAIT_CORE_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>

/* The end of the piece that starts at `pos` (< len): always > pos. */
size_t plait_pretokenize_next(const unsigned char *s, size_t len, size_t pos);
/* The same for Llama 3's pattern. */
size_t plait_pretokenize_next_llama3(const unsigned char *s, size_t len, size_t pos);
/* The same for Qwen2's (Qwen2, 2.5 and 3): Llama 3's with each digit a
 * piece of its own (\p{N} where Llama 3 has \p{N}{1,3}). */
size_t plait_pretokenize_next_qwen2(const unsigned char *s, size_t len, size_t pos);

/* Which pattern a tokenizer cuts text with. */
typedef enum plait_pretokenizer { PLAIT_PRETOK_GPT2 = 0, PLAIT_PRETOK_LLAMA3, PLAIT_PRETOK_QWEN2 } plait_pretokenizer;

/* The exact pattern strings tokenizer.json's Split holds for Llama 3 and
 * for Qwen2. */
extern const char plait_pretokenize_llama3_pattern[];
extern const char plait_pretokenize_qwen2_pattern[];

#endif
