#include "tokenizer/unicode_class.h"

size_t plait_utf8_next(const unsigned char *s, size_t avail, uint32_t *cp) {
    unsigned c = s[0];
    size_t n;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) { n = 2; v = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { n = 3; v = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 4; v = c & 0x07; }
    else goto invalid;
    if (avail < n) goto invalid;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) goto invalid;
        v = v << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) || (n == 4 && (v < 0x10000 || v > 0x10ffff)))
        goto invalid;
    *cp = v;
    return n;
invalid:
    *cp = UINT32_MAX;
    return 1;
}

static int in_ranges(const plait_unicode_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Unicode's White_Space property (PropList.txt), which \s means in the
 * Python `regex` module: stable since Unicode 6.3. */
static int is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

plait_char_class plait_char_class_of(uint32_t cp) {
    if (cp == UINT32_MAX) return PLAIT_CHAR_OTHER;
    if (cp < 0x80) { /* the common case without a search */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return PLAIT_CHAR_LETTER;
        if (cp >= '0' && cp <= '9') return PLAIT_CHAR_NUMBER;
        return is_white_space(cp) ? PLAIT_CHAR_SPACE : PLAIT_CHAR_OTHER;
    }
    if (is_white_space(cp)) return PLAIT_CHAR_SPACE;
    if (in_ranges(plait_unicode_letters, plait_unicode_letters_count, cp)) return PLAIT_CHAR_LETTER;
    if (in_ranges(plait_unicode_numbers, plait_unicode_numbers_count, cp)) return PLAIT_CHAR_NUMBER;
    return PLAIT_CHAR_OTHER;
}
