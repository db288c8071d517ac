/*
 * GPT-2's pre-tokenisation: text is cut into pieces by the pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (first alternative that matches, each as long as it can) before BPE, so no
 * token ever spans two pieces. Implemented directly rather than with a regex
 * engine; works on bytes, where a byte that is not valid UTF-8 is one
 * character of the "other" class (unicode_class.h). Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_PRETOKENIZE_H
#define PLAIT_CORE_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>

/* The end of the piece that starts at `pos` (< len): always > pos. */
size_t plait_pretokenize_next(const unsigned char *s, size_t len, size_t pos);

#endif
