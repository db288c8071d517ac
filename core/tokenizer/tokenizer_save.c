/* Writing a tokenizer in GPT-2's format: vocab.json and merges.txt (or, for
 * one those cannot describe, the tokenizer.json it came from). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/staged_dir.h"
#include "tokenizer/byte_map.h"
#include "tokenizer/tokenizer_internal.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/safetensors_json.h"

/* Token bytes in GPT-2's byte alphabet, as UTF-8. */
static void append_alphabet(plait_jbuf *b, const unsigned char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = plait_byte_to_unicode(bytes[i]);
        char u[2];
        if (cp < 0x80) {
            u[0] = (char)cp;
            plait_jbuf_append(b, u, 1);
        } else { /* the alphabet stays below U+0800: two bytes */
            u[0] = (char)(0xc0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3f));
            plait_jbuf_append(b, u, 2);
        }
    }
}

int plait_tokenizer_file_name(const char *name) {
    return !strcmp(name, "vocab.json") || !strcmp(name, "merges.txt") || !strcmp(name, "tokenizer.json");
}

plait_status plait_tokenizer_gpt2_text(const plait_tokenizer *t, plait_jbuf *vocab, plait_jbuf *merges) {
    *vocab = (plait_jbuf){0};
    *merges = (plait_jbuf){0};
    if (!plait_tokenizer_gpt2_compatible(t))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: GPT-2's vocab.json and merges.txt cannot describe this tokenizer (%s); use its "
                               "tokenizer.json",
                               t->source,
                               t->pretok == PLAIT_PRETOK_LLAMA3  ? "Llama 3's pre-tokenizer"
                               : t->pretok == PLAIT_PRETOK_QWEN2 ? "Qwen2's pre-tokenizer"
                               : t->nfc                          ? "an NFC normalizer"
                               : t->ignore_merges                ? "ignore_merges"
                                                                 : "a post-processor's first token");
    plait_jbuf text = {0};
    plait_jbuf_puts(vocab, "{");
    for (int32_t id = 0; id < t->n_ids; id++) {
        const unsigned char *bytes;
        size_t n;
        plait_tokenizer_token(t, id, &bytes, &n);
        plait_jbuf_free(&text);
        append_alphabet(&text, bytes, n);
        if (id) plait_jbuf_puts(vocab, ", ");
        plait_jbuf_string(vocab, text.data ? text.data : "");
        plait_jbuf_printf(vocab, ": %d", id);
    }
    plait_jbuf_puts(vocab, "}");
    plait_jbuf_puts(merges, "#version: 0.2\n");
    for (int32_t r = 0; r < t->n_merges; r++) {
        const unsigned char *bytes;
        size_t n;
        plait_tokenizer_token(t, t->merges[r].a, &bytes, &n);
        append_alphabet(merges, bytes, n);
        plait_jbuf_puts(merges, " ");
        plait_tokenizer_token(t, t->merges[r].b, &bytes, &n);
        append_alphabet(merges, bytes, n);
        plait_jbuf_puts(merges, "\n");
    }
    plait_jbuf_free(&text);
    if (!vocab->failed && !merges->failed) return PLAIT_OK;
    plait_jbuf_free(vocab);
    plait_jbuf_free(merges);
    return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory writing the tokenizer's vocab.json and merges.txt");
}

/* The tokenizer.json it was read from, copied, and read back to check that
 * the file still holds this tokenizer (it may have changed since). */
static plait_status copy_json(const plait_tokenizer *t, const plait_staged_dir *d) {
    char *text = NULL, copy[PATH_MAX];
    size_t len = 0;
    plait_status st = plait_fs_read_small_file(t->source, (size_t)1 << 30, &text, &len);
    if (st == PLAIT_OK) st = plait_staged_dir_write(d, "tokenizer.json", text, len);
    free(text);
    plait_tokenizer *back = NULL;
    if (st == PLAIT_OK)
        st = plait_tokenizer_load_hf(plait_staged_dir_path(d, "tokenizer.json", copy, sizeof copy), &back);
    if (st == PLAIT_OK && plait_tokenizer_fingerprint(back) != plait_tokenizer_fingerprint(t))
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s has changed since the tokenizer was read from it; not copied",
                             t->source);
    plait_tokenizer_free(back);
    return st;
}

plait_status plait_tokenizer_write_staged(const plait_tokenizer *t, const plait_staged_dir *d) {
    if (!plait_tokenizer_gpt2_compatible(t)) return copy_json(t, d);
    plait_jbuf vocab, merges;
    plait_status st = plait_tokenizer_gpt2_text(t, &vocab, &merges);
    if (st == PLAIT_OK) st = plait_staged_dir_write(d, "vocab.json", vocab.data, vocab.len);
    if (st == PLAIT_OK) st = plait_staged_dir_write(d, "merges.txt", merges.data, merges.len);
    plait_jbuf_free(&vocab);
    plait_jbuf_free(&merges);
    return st;
}

plait_status plait_tokenizer_save(const plait_tokenizer *t, const char *dir) {
    plait_staged_dir d;
    plait_status st = plait_staged_dir_begin(&d, dir, plait_tokenizer_file_name);
    if (st != PLAIT_OK) return st;
    st = plait_tokenizer_write_staged(t, &d);
    if (st == PLAIT_OK) st = plait_staged_dir_commit(&d);
    if (st != PLAIT_OK) plait_staged_dir_abort(&d);
    return st;
}
