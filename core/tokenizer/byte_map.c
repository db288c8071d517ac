#include "tokenizer/byte_map.h"

/* The 188 printable bytes stand for themselves; the 68 others are, in
 * increasing order, 0x00..0x20 (33), 0x7F..0xA0 (34) and 0xAD (1). */
static int printable(unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae; }

static unsigned nth_unprintable(unsigned n) { return n < 33 ? n : n < 67 ? 0x7f + (n - 33) : 0xad; }

uint32_t plait_byte_to_unicode(unsigned char b) {
    if (printable(b)) return b;
    return 256 + (b <= 0x20 ? b : b < 0xad ? 33 + (b - 0x7fu) : 67);
}

int plait_unicode_to_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    return cp < 256 + 68 ? (int)nth_unprintable(cp - 256) : -1;
}

unsigned char plait_byte_in_vocab_order(int i) {
    if (i < 94) return (unsigned char)('!' + i);
    if (i < 106) return (unsigned char)(0xa1 + (i - 94));
    if (i < 188) return (unsigned char)(0xae + (i - 106));
    return (unsigned char)nth_unprintable((unsigned)(i - 188));
}
