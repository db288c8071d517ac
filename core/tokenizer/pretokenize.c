#include "tokenizer/pretokenize.h"

#include <stdint.h>

#include "tokenizer/unicode_class.h"

static plait_char_class class_at(const unsigned char *s, size_t len, size_t pos, size_t *n) {
    uint32_t cp;
    *n = plait_utf8_next(s + pos, len - pos, &cp);
    return plait_char_class_of(cp);
}

/* End of the run of characters of class `c` from `pos` (class OTHER also
 * stops at nothing but letters, numbers and spaces). */
static size_t run_of(const unsigned char *s, size_t len, size_t pos, plait_char_class c) {
    while (pos < len) {
        size_t n;
        if (class_at(s, len, pos, &n) != c) break;
        pos += n;
    }
    return pos;
}

/* 's 't 're 've 'm 'll 'd: length of the contraction at pos, or 0. */
static size_t contraction(const unsigned char *s, size_t len, size_t pos) {
    if (s[pos] != '\'' || pos + 1 >= len) return 0;
    unsigned char a = s[pos + 1], b = pos + 2 < len ? s[pos + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

size_t plait_pretokenize_next(const unsigned char *s, size_t len, size_t pos) {
    size_t k = contraction(s, len, pos);
    if (k) return pos + k;
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space,
     * then a run of one class. */
    size_t start = pos + (s[pos] == ' ' && pos + 1 < len ? 1 : 0), n;
    plait_char_class c = class_at(s, len, start, &n);
    if (c != PLAIT_CHAR_SPACE) return run_of(s, len, start + n, c);
    /* "\s+(?!\S)": the run of white space, minus its last character when
     * something other than white space follows it; if that leaves nothing
     * (one space before a word), "\s+" takes the single character. */
    size_t end = run_of(s, len, pos, PLAIT_CHAR_SPACE);
    if (end == len) return end;
    /* back off by one character (the run's last, which may be multi-byte) */
    size_t last = pos, p = pos;
    while (p < end) {
        last = p;
        class_at(s, len, p, &n);
        p += n;
    }
    return last > pos ? last : end;
}
