/* Normalization Form C (nfc.h): the text is cut before each character
 * that can neither combine with what precedes it nor reorder across it
 * (a starter that is no composite's second and decomposes to such a
 * starter), and each piece decomposed, reordered and composed alone, which
 * gives the whole text's form. ASCII text, every character such a
 * boundary, is copied as it is. */
#include "tokenizer/nfc.h"

#include <stdint.h>
#include <string.h>

#include "tokenizer/nfc_tables.h"
#include "tokenizer/unicode_class.h"

/* Hangul's syllables, decomposed and composed by arithmetic (Unicode
 * chapter 3.12): S = SBASE + (L·VCOUNT + V)·TCOUNT + T */
#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

/* An invalid byte b travels as RAW + b: no class, no decomposition, no pair. */
#define RAW 0x110000u

static unsigned ccc(uint32_t cp) {
    size_t lo = 0, hi = plait_nfc_classes_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < plait_nfc_classes[mid].lo) hi = mid;
        else if (cp > plait_nfc_classes[mid].hi) lo = mid + 1;
        else return plait_nfc_classes[mid].ccc;
    }
    return 0;
}

static const plait_nfc_decomposition *decomposition(uint32_t cp) {
    size_t lo = 0, hi = plait_nfc_decompositions_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < plait_nfc_decompositions[mid].cp) hi = mid;
        else if (cp > plait_nfc_decompositions[mid].cp) lo = mid + 1;
        else return &plait_nfc_decompositions[mid];
    }
    return NULL;
}

static int is_second(uint32_t cp) {
    if (cp >= VBASE && cp < TBASE + TCOUNT) return 1; /* Hangul's vowels and trailing consonants */
    size_t lo = 0, hi = plait_nfc_seconds_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < plait_nfc_seconds[mid]) hi = mid;
        else if (cp > plait_nfc_seconds[mid]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* The composite of a followed by b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = plait_nfc_pairs_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const plait_nfc_pair *p = &plait_nfc_pairs[mid];
        if (a < p->first || (a == p->first && b < p->second)) hi = mid;
        else if (a > p->first || b > p->second) lo = mid + 1;
        else return p->composite;
    }
    return 0;
}

/* 1 if cp starts a unit: nothing before it combines with it or with what
 * follows it, nor reorders across it. */
static int boundary(uint32_t cp) {
    if (cp >= RAW) return 1;
    if (ccc(cp) || is_second(cp)) return 0;
    const plait_nfc_decomposition *d = decomposition(cp);
    return !d || (!ccc(d->to[0]) && !is_second(d->to[0]));
}

/* Appends cp's full canonical decomposition to u[*n..). */
static void decompose(uint32_t cp, uint32_t *u, size_t *n) {
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        const uint32_t s = cp - SBASE, t = s % TCOUNT;
        u[(*n)++] = LBASE + s / NCOUNT;
        u[(*n)++] = VBASE + s % NCOUNT / TCOUNT;
        if (t) u[(*n)++] = TBASE + t;
        return;
    }
    const plait_nfc_decomposition *d = cp < RAW ? decomposition(cp) : NULL;
    if (!d) {
        u[(*n)++] = cp;
        return;
    }
    for (uint8_t i = 0; i < d->n; i++) u[(*n)++] = d->to[i];
}

static size_t put_utf8(uint32_t cp, unsigned char *out) {
    if (cp >= RAW) {
        out[0] = (unsigned char)(cp - RAW);
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The unit u[0..n) (decomposed) reordered, composed and written to out;
 * returns the bytes written. */
static size_t flush(uint32_t *u, size_t n, unsigned char *out) {
    if (!n) return 0;
    /* canonical ordering: a stable sort of each run of marks by class */
    for (size_t i = 1; i < n; i++) {
        const unsigned c = u[i] < RAW ? ccc(u[i]) : 0;
        if (!c) continue;
        for (size_t j = i; j > 0; j--) {
            const unsigned before = u[j - 1] < RAW ? ccc(u[j - 1]) : 0;
            if (before <= c) break;
            const uint32_t x = u[j];
            u[j] = u[j - 1];
            u[j - 1] = x;
        }
    }
    /* canonical composition: each character joins the last starter unless
     * a character between them has a class of its own at least as high
     * (blocked), or the starter was not the one before it with class 0 */
    size_t starter = 0, kept = 1;
    unsigned last = u[0] < RAW && ccc(u[0]) ? 256 : 0;
    for (size_t i = 1; i < n; i++) {
        const uint32_t c = u[i];
        const unsigned cls = c < RAW ? ccc(c) : 0;
        const uint32_t comp = u[starter] < RAW && c < RAW ? compose(u[starter], c) : 0;
        if (comp && (last < cls || last == 0)) {
            u[starter] = comp;
            continue;
        }
        if (!cls) starter = kept;
        last = cls;
        u[kept++] = c;
    }
    size_t o = 0;
    for (size_t i = 0; i < kept; i++) o += put_utf8(u[i], out + o);
    return o;
}

int plait_nfc_trivial(const unsigned char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] >= 0x80) return 0;
    return 1;
}

size_t plait_nfc(const unsigned char *s, size_t len, unsigned char *out) {
    uint32_t u[PLAIT_NFC_RUN + 2 * PLAIT_NFC_LONGEST];
    size_t n = 0, o = 0;
    for (size_t p = 0; p < len;) {
        if (s[p] < 0x80 && (p + 1 >= len || s[p + 1] < 0x80)) { /* ASCII before ASCII: a unit alone */
            o += flush(u, n, out + o);
            n = 0;
            out[o++] = s[p++];
            continue;
        }
        uint32_t cp;
        const size_t k = plait_utf8_next(s + p, len - p, &cp);
        if (cp == UINT32_MAX) cp = RAW + s[p];
        if (boundary(cp) || n >= PLAIT_NFC_RUN) {
            o += flush(u, n, out + o);
            n = 0;
        }
        decompose(cp, u, &n);
        p += k;
    }
    return o + flush(u, n, out + o);
}
