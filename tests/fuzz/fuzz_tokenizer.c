/*
 * Fuzz target for the tokenizer files. The first byte picks the file, the
 * rest is its text:
 *   0  vocab.json, beside an empty merges.txt;
 *   1  merges.txt, beside a vocab.json of GPT-2's 256 byte tokens, a few
 *      learned ones ("Ġt", "he", "Ġthe", "in", "er", "ing") and <|endoftext|>;
 *   2  tokenizer.json (Hugging Face; GPT-2's pre-tokenizer or Llama 3's,
 *      ignore_merges, a post-processor's first token).
 * Whatever the bytes, loading returns a status with a message and never
 * crashes, leaks or reads out of bounds (ASan/UBSan); a tokenizer that loads
 * encodes a fixed text and decodes it back unchanged.
 *
 * Built as `fuzz_tokenizer` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_tokenizer_corpus` (replay_main.c over tests/fuzz/corpus/tokenizer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer/byte_map.h"
#include "tokenizer/tokenizer.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *scratch;
static char byte_vocab[16384];

static void put(const char *name, const void *p, size_t n) {
    char path[FUZZ_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* One token in GPT-2's byte alphabet, as a JSON string's contents. */
static size_t alphabet(const char *bytes, char *out) {
    size_t k = 0;
    for (const unsigned char *b = (const unsigned char *)bytes; *b; b++) {
        uint32_t cp = plait_byte_to_unicode(*b);
        if (cp == '"' || cp == '\\') out[k++] = '\\';
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else { /* the alphabet stays below U+0800 */
            out[k++] = (char)(0xc0 | cp >> 6);
            out[k++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    return k;
}

static void setup(void) {
    if (scratch) return;
    scratch = fuzz_scratch("plait-fuzz-tok");
    static const char *const learned[] = {" t", "he", " the", "in", "er", "ing"};
    size_t k = 0;
    byte_vocab[k++] = '{';
    for (int b = 0; b < 256; b++) {
        char one[2] = {(char)b, 0}, text[8];
        size_t n = b ? alphabet(one, text) : 0;
        if (!b) { /* NUL: the alphabet's U+0100 */
            uint32_t cp = plait_byte_to_unicode(0);
            text[n++] = (char)(0xc0 | cp >> 6);
            text[n++] = (char)(0x80 | (cp & 0x3f));
        }
        k += (size_t)snprintf(byte_vocab + k, sizeof byte_vocab - k, "%s\"%.*s\": %d", b ? ", " : "", (int)n, text, b);
    }
    for (int i = 0; i < 6; i++) {
        char text[32];
        size_t n = alphabet(learned[i], text);
        k += (size_t)snprintf(byte_vocab + k, sizeof byte_vocab - k, ", \"%.*s\": %d", (int)n, text, 256 + i);
    }
    snprintf(byte_vocab + k, sizeof byte_vocab - k, ", \"<|endoftext|>\": 262}");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    char path[FUZZ_PATH_MAX];
    plait_tokenizer *t = NULL;
    switch (data[0] % 3) {
    case 0:
        put("vocab.json", in, n);
        put("merges.txt", "#version: 0.2\n", 14);
        unlink((snprintf(path, sizeof path, "%s/tokenizer.json", scratch), path));
        snprintf(path, sizeof path, "%s", scratch);
        break;
    case 1:
        put("vocab.json", byte_vocab, strlen(byte_vocab));
        put("merges.txt", in, n);
        unlink((snprintf(path, sizeof path, "%s/tokenizer.json", scratch), path));
        snprintf(path, sizeof path, "%s", scratch);
        break;
    default:
        put("tokenizer.json", in, n);
        snprintf(path, sizeof path, "%s/tokenizer.json", scratch);
        break;
    }
    if (plait_tokenizer_load(path, &t) != PLAIT_OK) return 0;
    if (plait_tokenizer_bos(t) >= plait_tokenizer_vocab_size(t)) abort();
    static const char text[] = "In the beginning, the thing\n\xc3\xa9t\xc3\xa9 <|endoftext|> \xff\x01 the end.\n\n"
                               "I'M 12345  na\xc3\xafve\t'\xc5\xbf\r\n";
    plait_token_buf ids = {0};
    if (plait_tokenizer_encode(t, text, sizeof text - 1, &ids) == PLAIT_OK) {
        for (size_t i = 0; i < ids.len; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= plait_tokenizer_vocab_size(t)) abort();
        char *back = NULL;
        size_t len = 0;
        if (plait_tokenizer_decode(t, ids.ids, ids.len, &back, &len) == PLAIT_OK &&
            (len != sizeof text - 1 || memcmp(back, text, len) != 0))
            abort(); /* a tokenizer that loads round-trips any bytes */
        free(back);
    }
    plait_token_buf_free(&ids);
    plait_tokenizer_free(t);
    return 0;
}
