"""Cases for plait's Normalization Form C (core/tokenizer/nfc.c) with
Python's own NFC of each (unicodedata.normalize), written as two files of
lines, IN and WANT, one case a line (no case holds a line break):

  - every code point alone (but the surrogates and the line breaks);
  - every code point followed by a combining acute accent (230), and by a
    cedilla (202) then an acute: what composes with it, and in what order;
  - every primary composite's pair (its first, then its second), with a
    mark of each class between them (blocked or not);
  - Hangul: every leading consonant with every vowel, every LV syllable with
    a trailing consonant, and jamo runs;
  - 200000 random strings of 1 to 8 code points drawn from the code points
    that decompose, the combining marks, the pairs' seconds and ASCII.

usage: nfc_cases.py IN WANT   (prints the Unicode version of the tables)
"""
import random
import sys
import unicodedata


def main():
    rnd = random.Random(20261201)
    cases = []
    every = [cp for cp in range(0x110000) if not (0xD800 <= cp < 0xE000) and cp not in (0x0A, 0x0D, 0x85, 0x2028,
                                                                                            0x2029)]
    for cp in every:
        c = chr(cp)
        cases += [c, c + "\u0301", c + "\u0327\u0301"]
    decomposing = [cp for cp in every if unicodedata.decomposition(chr(cp)) and
                   not unicodedata.decomposition(chr(cp)).startswith("<")]
    marks = [cp for cp in every if unicodedata.combining(chr(cp))]
    classes = sorted({unicodedata.combining(chr(cp)): cp for cp in marks}.values())
    seconds = set()
    for cp in decomposing:
        d = [int(x, 16) for x in unicodedata.decomposition(chr(cp)).split()]
        if len(d) == 2:
            seconds.add(d[1])
            a, b = chr(d[0]), chr(d[1])
            cases.append(a + b)
            for m in classes:
                cases.append(a + chr(m) + b)
    for lead in range(0x1100, 0x1113):
        for vowel in range(0x1161, 0x1176):
            cases.append(chr(lead) + chr(vowel))
    for s in range(0xAC00, 0xD7A4, 28):
        cases.append(chr(s) + chr(0x11A8 + (s // 28) % 27))
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A7, 0x11C3))
    for _ in range(20000):
        cases.append("".join(chr(rnd.choice(jamo)) for _ in range(rnd.randint(2, 6))))
    pool = decomposing + marks + sorted(seconds) + list(range(0x20, 0x7F)) + list(range(0xAC00, 0xAC40))
    for _ in range(200000):
        cases.append("".join(chr(rnd.choice(pool)) for _ in range(rnd.randint(1, 8))))
    with open(sys.argv[1], "w", encoding="utf-8", newline="\n") as fin, \
            open(sys.argv[2], "w", encoding="utf-8", newline="\n") as fwant:
        for c in cases:
            fin.write(c + "\n")
            fwant.write(unicodedata.normalize("NFC", c) + "\n")
    print(unicodedata.unidata_version)


main()
