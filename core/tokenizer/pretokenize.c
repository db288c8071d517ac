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

/* "\s+(?!\S)|\s+" at white space: the run of white space, minus its last
 * character when something other than white space follows it; if that
 * leaves nothing (one space before a word), "\s+" takes the single
 * character. */
static size_t space_run(const unsigned char *s, size_t len, size_t pos) {
    size_t end = run_of(s, len, pos, PLAIT_CHAR_SPACE), n;
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

size_t plait_pretokenize_next(const unsigned char *s, size_t len, size_t pos) {
    size_t k = contraction(s, len, pos);
    if (k) return pos + k;
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space,
     * then a run of one class. */
    size_t start = pos + (s[pos] == ' ' && pos + 1 < len ? 1 : 0), n;
    plait_char_class c = class_at(s, len, start, &n);
    if (c != PLAIT_CHAR_SPACE) return run_of(s, len, start + n, c);
    return space_run(s, len, pos);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d): the contractions in any case. */
static size_t contraction_any_case(const unsigned char *s, size_t len, size_t pos) {
    if (s[pos] != '\'' || pos + 1 >= len) return 0;
    unsigned char a = s[pos + 1] | 0x20, b = pos + 2 < len ? s[pos + 2] | 0x20 : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    /* U+017F LATIN SMALL LETTER LONG S folds to 's' (Unicode case folding,
     * which the regex engine Hugging Face uses applies under (?i)) */
    if (s[pos + 1] == 0xc5 && pos + 2 < len && s[pos + 2] == 0xbf) return 3;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

const char plait_pretokenize_llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char plait_pretokenize_qwen2_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

/* Llama 3's pattern with numbers in runs of at most `digits`. */
static size_t next_llama3(const unsigned char *s, size_t len, size_t pos, int digits) {
    size_t k = contraction_any_case(s, len, pos);
    if (k) return pos + k;
    size_t n0, n1 = 0;
    plait_char_class c0 = class_at(s, len, pos, &n0);
    plait_char_class c1 = pos + n0 < len ? class_at(s, len, pos + n0, &n1) : PLAIT_CHAR_SPACE;
    int has_next = pos + n0 < len;
    /* "[^\r\n\p{L}\p{N}]?\p{L}+": one character of any other kind (a
     * space, a tab, punctuation) may lead a run of letters */
    if (c0 == PLAIT_CHAR_LETTER) return run_of(s, len, pos + n0, PLAIT_CHAR_LETTER);
    if (c0 != PLAIT_CHAR_NUMBER && !is_newline(s[pos]) && has_next && c1 == PLAIT_CHAR_LETTER)
        return run_of(s, len, pos + n0 + n1, PLAIT_CHAR_LETTER);
    /* "\p{N}{1,3}": numbers in threes, from the left (Qwen2's "\p{N}": one by one) */
    if (c0 == PLAIT_CHAR_NUMBER) {
        size_t end = pos + n0;
        for (int i = 1; i < digits && end < len; i++) {
            size_t n;
            if (class_at(s, len, end, &n) != PLAIT_CHAR_NUMBER) break;
            end += n;
        }
        return end;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*": punctuation, an ASCII space before it,
     * the line breaks after it */
    size_t start = c0 == PLAIT_CHAR_OTHER ? pos : s[pos] == ' ' && has_next && c1 == PLAIT_CHAR_OTHER ? pos + 1 : len;
    if (start < len) {
        size_t end = run_of(s, len, start, PLAIT_CHAR_OTHER);
        while (end < len && is_newline(s[end])) end++;
        return end;
    }
    /* white space: "\s*[\r\n]+" takes it up to its last line break;
     * without one, "\s+(?!\S)|\s+" as in GPT-2's pattern */
    size_t end = run_of(s, len, pos, PLAIT_CHAR_SPACE), last_break = 0;
    for (size_t p = pos; p < end; p++)
        if (is_newline(s[p])) last_break = p + 1;
    if (last_break) return last_break;
    return space_run(s, len, pos);
}

size_t plait_pretokenize_next_llama3(const unsigned char *s, size_t len, size_t pos) {
    return next_llama3(s, len, pos, 3);
}

size_t plait_pretokenize_next_qwen2(const unsigned char *s, size_t len, size_t pos) {
    return next_llama3(s, len, pos, 1);
}
