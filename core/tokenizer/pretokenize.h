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
 * breaks stay with the punctuation or white space before them.
 * Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_PRETOKENIZE_H
#define PLAIT_CORE_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>

/* The end of the piece that starts at `pos` (< len): always > pos. */
size_t plait_pretokenize_next(const unsigned char *s, size_t len, size_t pos);
/* The same for Llama 3's pattern. */
size_t plait_pretokenize_next_llama3(const unsigned char *s, size_t len, size_t pos);

/* Which pattern a tokenizer cuts text with. */
typedef enum plait_pretokenizer { PLAIT_PRETOK_GPT2 = 0, PLAIT_PRETOK_LLAMA3 } plait_pretokenizer;

/* The exact pattern string tokenizer.json's Split holds for Llama 3. */
extern const char plait_pretokenize_llama3_pattern[];

#endif
