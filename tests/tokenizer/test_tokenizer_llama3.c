/* Llama 3's tokenizer.json: its pattern's pieces (checked against Hugging
 * Face tokenizers' Split with the same pattern when they were written),
 * and a small synthetic Llama-3-style tokenizer.json (the 256 byte tokens,
 * a few merges, a vocabulary-only word, two special tokens, ignore_merges,
 * a TemplateProcessing putting <|begin_of_text|> first) encoding to ids
 * derived by hand; pre-tokenizers and post-processors plait does not
 * implement are refused naming the JSON path. */
#include "train_io_test.h"

#include "tokenizer/byte_map.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "tokenizer-llama3");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(scratch);
    return 0;
}

/* `text` cut by Llama 3's pattern (Qwen2's where `qwen2`) must give
 * `want`, pieces joined by '|'. */
static void cut_pieces(const char *text, const char *want, int qwen2) {
    char got[512];
    size_t k = 0, len = strlen(text);
    for (size_t pos = 0; pos < len;) {
        size_t end = qwen2 ? plait_pretokenize_next_qwen2((const unsigned char *)text, len, pos)
                           : plait_pretokenize_next_llama3((const unsigned char *)text, len, pos);
        assert_true(end > pos && end <= len);
        k += (size_t)snprintf(got + k, sizeof got - k, "%s%.*s", pos ? "|" : "", (int)(end - pos), text + pos);
        pos = end;
    }
    got[k] = '\0';
    if (strcmp(got, want) != 0) fail_msg("\"%s\" cut into \"%s\", expected \"%s\"", text, got, want);
}

static void expect_pieces(const char *text, const char *want) { cut_pieces(text, want, 0); }

static void test_pieces(void **state) {
    (void)state;
    /* contractions in any case, also U+017F (long s) folded to 's' */
    expect_pieces("I'M here", "I|'M| here");
    expect_pieces("you'RE'll", "you|'RE|'ll");
    expect_pieces("don't", "don|'t");
    expect_pieces("'\xc5\xbf x", "'\xc5\xbf| x");
    expect_pieces("'hello", "'hello"); /* not a contraction: one non-letter leads the word */
    /* numbers in threes, any script's digits */
    expect_pieces("12345", "123|45");
    expect_pieces(" 12345", " |123|45");
    expect_pieces("1,234,567", "1|,|234|,|567");
    expect_pieces("\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6", "\xd9\xa3\xd9\xa4\xd9\xa5|\xd9\xa6");
    /* punctuation keeps the line breaks after it */
    expect_pieces("Hello.\n\nWorld", "Hello|.\n\n|World");
    expect_pieces("end.)\r\n", "end|.)\r\n");
    expect_pieces("a ?!\nb", "a| ?!\n|b");
    expect_pieces("(x)", "(x|)");
    expect_pieces("?\n", "?\n");
    /* white space: up to its last line break, else all but the last
     * character before a word */
    expect_pieces("a  b", "a| | b");
    expect_pieces("a   word", "a|  | word");
    expect_pieces("x\n  y", "x|\n| | y");
    expect_pieces("  \n\n  end", "  \n\n| | end");
    expect_pieces("a\r\n\r\nb", "a|\r\n\r\n|b");
    expect_pieces("trailing   ", "trailing|   ");
    /* any one non-letter but a line break may lead a word */
    expect_pieces("\tindent", "\tindent");
    expect_pieces(" \tx", " |\tx");
    expect_pieces("x\xc2\xa0y", "x|\xc2\xa0y");            /* U+00A0 */
    expect_pieces("x \xe3\x80\x80y", "x| |\xe3\x80\x80y"); /* U+3000 */
    /* letters of any script */
    expect_pieces("na\xc3\xafve caf\xc3\xa9", "na\xc3\xafve| caf\xc3\xa9");
    expect_pieces("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae",
                  "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae");
}

/* Token bytes in GPT-2's byte alphabet as a JSON string's contents. */
static size_t alphabet(const char *bytes, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = plait_byte_to_unicode((unsigned char)bytes[i]);
        if (cp == '"' || cp == '\\') out[k++] = '\\';
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xc0 | cp >> 6);
            out[k++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[k] = '\0';
    return k;
}

/* The merges, in rank order, and a word the vocabulary holds without a
 * merge making it (only ignore_merges produces it). */
static const char *const merges[][2] = {
    {"'", "M"}, {"h", "e"}, {" ", "he"}, {"1", "2"}, {"12", "3"}, {".", "\n"}, {".\n", "\n"}, {" ", " "},
};
#define N_MERGES 8
#define WORD " na\xc3\xafve"
#define ID_WORD (256 + N_MERGES)
#define ID_BOS (ID_WORD + 1)
#define ID_EOT (ID_WORD + 2)

/* The normalizer write_json writes. */
static const char *g_normalizer = "null";

/* A Llama-3-style tokenizer.json; `pre` and `post` replace its
 * pre_tokenizer and post_processor when given. Ids: byte b is id b. */
static const char *write_json(const char *name, int ignore_merges, const char *pre, const char *post) {
    static char path[PATH_MAX + 64];
    static char json[65536];
    char a[64], b[64], template[512];
    snprintf(template, sizeof template,
             "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
             "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
             "\"<|begin_of_text|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
             "\"type_id\": 0}}], \"pair\": [], \"special_tokens\": {\"<|begin_of_text|>\": "
             "{\"id\": \"<|begin_of_text|>\", \"ids\": [%d], \"tokens\": [\"<|begin_of_text|>\"]}}}]}",
             ID_BOS);
    size_t k = 0;
    k += (size_t)snprintf(json + k, sizeof json - k,
                          "{\"version\": \"1.0\", \"added_tokens\": ["
                          "{\"id\": %d, \"content\": \"<|begin_of_text|>\", \"special\": true},"
                          "{\"id\": %d, \"content\": \"<|end_of_text|>\", \"special\": true}],"
                          "\"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s,"
                          "\"decoder\": {\"type\": \"ByteLevel\"},"
                          "\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {",
                          ID_BOS, ID_EOT, g_normalizer,
                          pre ? pre
                              : "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                                "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
                                "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
                                "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
                                "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                                "\"use_regex\": false}]}",
                          post ? post : template, ignore_merges ? "true" : "false");
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        alphabet(&c, 1, a);
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"%s\": %d", i ? ", " : "", a, i);
    }
    for (int m = 0; m < N_MERGES; m++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", merges[m][0], merges[m][1]);
        alphabet(joined, strlen(joined), a);
        k += (size_t)snprintf(json + k, sizeof json - k, ", \"%s\": %d", a, 256 + m);
    }
    alphabet(WORD, strlen(WORD), a);
    k += (size_t)snprintf(json + k, sizeof json - k, ", \"%s\": %d}, \"merges\": [", a, ID_WORD);
    for (int m = 0; m < N_MERGES; m++) {
        alphabet(merges[m][0], strlen(merges[m][0]), a);
        alphabet(merges[m][1], strlen(merges[m][1]), b);
        k += (size_t)snprintf(json + k, sizeof json - k, "%s[\"%s\", \"%s\"]", m ? ", " : "", a, b);
    }
    k += (size_t)snprintf(json + k, sizeof json - k, "]}}");
    assert_true(k < sizeof json - 1);
    snprintf(path, sizeof path, "%s/%s.json", scratch, name);
    write_bytes(path, json, k);
    return path;
}

static void expect_ids(const plait_tokenizer *t, const char *text, const int32_t *want, size_t n) {
    plait_token_buf ids = {0};
    assert_int_equal(plait_tokenizer_encode(t, text, strlen(text), &ids), PLAIT_OK);
    int same = ids.len == n && memcmp(ids.ids, want, n * sizeof *want) == 0;
    if (!same) {
        char got[256];
        size_t k = 0;
        for (size_t i = 0; i < ids.len && k + 16 < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, " %d", ids.ids[i]);
        fail_msg("\"%s\" encoded to%s", text, got);
    }
    char *back = NULL;
    size_t len = 0;
    assert_int_equal(plait_tokenizer_decode(t, ids.ids, ids.len, &back, &len), PLAIT_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(back, text, len);
    free(back);
    plait_token_buf_free(&ids);
}

#define EXPECT(t, text, ...)                                                                                           \
    do {                                                                                                               \
        static const int32_t want_[] = {__VA_ARGS__};                                                                  \
        expect_ids(t, text, want_, sizeof want_ / sizeof want_[0]);                                                    \
    } while (0)

static void test_encode_decode(void **state) {
    (void)state;
    plait_tokenizer *t = NULL;
    if (plait_tokenizer_load(write_json("llama3", 1, NULL, NULL), &t) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_tokenizer_vocab_size(t), ID_EOT + 1);
    assert_int_equal(plait_tokenizer_bos(t), ID_BOS);
    assert_int_equal(plait_tokenizer_eot(t), ID_EOT);
    assert_false(plait_tokenizer_gpt2_compatible(t));
    /* merges 256 'M, 257 he, 258 " he", 259 12, 260 123, 261 ".\n", 262 ".\n\n", 263 "  " */
    EXPECT(t, "I'M here", 'I', 256, 258, 'r', 'e');
    EXPECT(t, "I'm", 'I', '\'', 'm');
    EXPECT(t, "12345", 260, '4', '5');
    EXPECT(t, "Hi.\n\nyo", 'H', 'i', 262, 'y', 'o');
    EXPECT(t, "a   b", 'a', 263, ' ', 'b');
    /* the whole piece " naïve" is a vocabulary token: no merges needed */
    EXPECT(t, "a naïve", 'a', ID_WORD);
    EXPECT(t, "日本", 0xe6, 0x97, 0xa5, 0xe6, 0x9c, 0xac);
    /* the text of a special token is ordinary text */
    EXPECT(t, "<|end_of_text|>", '<', '|', 'e', 'n', 'd', '_', 'o', 'f', '_', 't', 'e', 'x', 't', '|', '>');
    /* a prompt starts with the post-processor's first token */
    plait_token_buf prompt = {0};
    assert_int_equal(plait_tokenizer_encode_prompt(t, "I'm", 3, &prompt), PLAIT_OK);
    assert_int_equal(prompt.len, 4);
    assert_int_equal(prompt.ids[0], ID_BOS);
    assert_int_equal(prompt.ids[1], 'I');
    prompt.len = 0;
    assert_int_equal(plait_tokenizer_encode_prompt(t, "", 0, &prompt), PLAIT_OK);
    assert_int_equal(prompt.len, 1);
    assert_int_equal(prompt.ids[0], ID_BOS);
    plait_token_buf_free(&prompt);
    /* a special token's id decodes to its text */
    int32_t ids[] = {ID_BOS, 'I', ID_EOT};
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(plait_tokenizer_decode(t, ids, 3, &out, &len), PLAIT_OK);
    assert_string_equal(out, "<|begin_of_text|>I<|end_of_text|>");
    free(out);
    plait_tokenizer_free(t);

    /* without ignore_merges the word is its bytes: no merge makes it */
    if (plait_tokenizer_load(write_json("merges", 0, NULL, NULL), &t) != PLAIT_OK) fail_msg("%s", plait_last_error());
    EXPECT(t, "a naïve", 'a', ' ', 'n', 'a', 0xc3, 0xaf, 'v', 'e');
    plait_tokenizer_free(t);
}

/* GPT-2's files cannot say what Llama 3's tokenizer does: saving it copies
 * its tokenizer.json, which reads back as the same tokenizer. */
static void test_save_copies_json(void **state) {
    (void)state;
    plait_tokenizer *t = NULL, *back = NULL;
    assert_int_equal(plait_tokenizer_load(write_json("save", 1, NULL, NULL), &t), PLAIT_OK);
    char dir[PATH_MAX + 32], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/saved", scratch);
    assert_int_equal(plait_tokenizer_save(t, dir), PLAIT_OK);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_equal(plait_tokenizer_load(dir, &back), PLAIT_OK);
    assert_true(plait_tokenizer_fingerprint(back) == plait_tokenizer_fingerprint(t));
    assert_int_equal(plait_tokenizer_bos(back), ID_BOS);
    plait_tokenizer_free(back);
    /* the same vocabulary and merges with GPT-2's pattern is another tokenizer */
    assert_int_equal(plait_tokenizer_load(write_json("gpt2", 0, "{\"type\": \"ByteLevel\"}", "null"), &back), PLAIT_OK);
    assert_true(plait_tokenizer_gpt2_compatible(back));
    assert_int_equal(plait_tokenizer_bos(back), -1);
    plait_token_buf prompt = {0};
    assert_int_equal(plait_tokenizer_encode_prompt(back, "I", 1, &prompt), PLAIT_OK);
    assert_int_equal(prompt.len, 1);
    assert_int_equal(prompt.ids[0], 'I');
    plait_token_buf_free(&prompt);
    assert_true(plait_tokenizer_fingerprint(back) != plait_tokenizer_fingerprint(t));
    plait_tokenizer_free(back);
    plait_tokenizer_free(t);
}

static void expect_refused(const char *name, const char *pre, const char *post, const char *needle1,
                           const char *needle2) {
    plait_tokenizer *t = NULL;
    const char *path = write_json(name, 1, pre, post);
    assert_int_equal(plait_tokenizer_load(path, &t), PLAIT_ERR_PROTOCOL);
    assert_null(t);
    const char *msg = plait_last_error();
    if (!strstr(msg, path) || !strstr(msg, needle1) || !strstr(msg, needle2))
        fail_msg("error \"%s\" lacks the file, \"%s\" or \"%s\"", msg, needle1, needle2);
}

#define SPLIT(regex, behavior, bytelevel)                                                                              \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" regex             \
    "\"}, \"behavior\": \"" behavior "\", \"invert\": false}, " bytelevel "]}"

static void test_refused(void **state) {
    (void)state;
    /* a pattern plait does not implement is never replaced by GPT-2's */
    expect_refused("regex", SPLIT("\\\\p{L}+|\\\\s+", "Isolated", "{\"type\": \"ByteLevel\", \"use_regex\": false}"),
                   NULL, "pre_tokenizer.pretokenizers[0].pattern.Regex", "not a pattern plait implements");
    expect_refused("behavior",
                   SPLIT("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
                         "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
                         "Removed", "{\"type\": \"ByteLevel\", \"use_regex\": false}"),
                   NULL, "pre_tokenizer.pretokenizers[0].behavior", "Isolated");
    expect_refused("twice",
                   SPLIT("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
                         "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+",
                         "Isolated", "{\"type\": \"ByteLevel\"}"),
                   NULL, "pre_tokenizer.pretokenizers[1].use_regex", "must be false");
    expect_refused("whitespace", "{\"type\": \"Whitespace\"}", NULL, "pre_tokenizer.type \"Whitespace\"",
                   "not supported");
    expect_refused("prefix", "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", NULL,
                   "pre_tokenizer.add_prefix_space", "must be false");
    /* a template plait's encoding does not follow */
    expect_refused("eos", NULL,
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\"}}, "
                   "{\"SpecialToken\": {\"id\": \"<|end_of_text|>\"}}], \"special_tokens\": {}}",
                   "post_processor.single[1]", "none after it");
    expect_refused("notext", NULL,
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], "
                   "\"special_tokens\": {}}",
                   "post_processor.single has no", "where the text goes");
    expect_refused("bert", NULL, "{\"type\": \"BertProcessing\"}", "post_processor.type \"BertProcessing\"",
                   "not supported");
    expect_refused("noid", NULL,
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}, "
                   "{\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {}}",
                   "post_processor.special_tokens", "<s>");
}

/* Qwen2's tokenizer.json (Qwen2, 2.5 and 3): the NFC normalizer before
 * Llama 3's pattern with single digits. Digits are pieces of their own (no
 * merge joins them), a decomposed character encodes as its composed form
 * (and decodes so), ASCII text as it is; the normalizer and the pattern
 * change the fingerprint and keep GPT-2's files from describing it; any
 * other normalizer is refused. */
#define QWEN2_SPLIT                                                                                                    \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "                                 \
    "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"                              \
    "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"                                           \
    "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "                                      \
    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]}"

static void test_qwen2(void **state) {
    (void)state;
    cut_pieces("12345", "1|2|3|4|5", 1);
    cut_pieces(" 2024-06", " |2|0|2|4|-|0|6", 1);
    cut_pieces("I'M here", "I|'M| here", 1);
    plait_tokenizer *t = NULL, *plain = NULL;
    g_normalizer = "{\"type\": \"NFC\"}";
    if (plait_tokenizer_load(write_json("qwen2", 1, QWEN2_SPLIT, "{\"type\": \"ByteLevel\"}"), &t) != PLAIT_OK)
        fail_msg("%s", plait_last_error());
    g_normalizer = "null";
    if (plait_tokenizer_load(write_json("qwen2-plain", 1, QWEN2_SPLIT, "{\"type\": \"ByteLevel\"}"), &plain) !=
        PLAIT_OK)
        fail_msg("%s", plait_last_error());
    assert_false(plait_tokenizer_gpt2_compatible(t));
    assert_true(plait_tokenizer_fingerprint(t) != plait_tokenizer_fingerprint(plain));
    EXPECT(t, "12345", '1', '2', '3', '4', '5');
    EXPECT(t, "I'M here", 'I', 256, 258, 'r', 'e');
    EXPECT(t, "a naïve", 'a', ID_WORD);
    /* " nai" + U+0308 (combining diaeresis) + "ve": its NFC is the word's bytes */
    static const char decomposed[] = "a nai\xcc\x88ve";
    plait_token_buf ids = {0}, raw = {0};
    assert_int_equal(plait_tokenizer_encode(t, decomposed, strlen(decomposed), &ids), PLAIT_OK);
    assert_int_equal(ids.len, 2);
    assert_int_equal(ids.ids[0], 'a');
    assert_int_equal(ids.ids[1], ID_WORD);
    /* without the normalizer the mark stays: other ids */
    assert_int_equal(plait_tokenizer_encode(plain, decomposed, strlen(decomposed), &raw), PLAIT_OK);
    assert_true(raw.len > 2);
    plait_token_buf_free(&ids);
    plait_token_buf_free(&raw);
    plait_tokenizer_free(t);
    plait_tokenizer_free(plain);
    g_normalizer = "{\"type\": \"NFKC\"}";
    assert_int_not_equal(plait_tokenizer_load(write_json("nfkc", 1, QWEN2_SPLIT, NULL), &t), PLAIT_OK);
    g_normalizer = "null";
    if (!strstr(plait_last_error(), "\"normalizer\" asks for a normalizer other than NFC"))
        fail_msg("refusal: %s", plait_last_error());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2),         cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_encode_decode), cmocka_unit_test(test_save_copies_json),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
