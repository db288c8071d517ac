/* The tokenizer: GPT-2's ids for the reference inputs (written by npm's
 * gpt-3-encoder, see gpt2_reference.js), byte-exact round trips, training,
 * and malformed files refused with the file and the offset. */
#include "train_io_test.h"

#include "runtime/mapped_file.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_train.h"

static char scratch[PATH_MAX];
static plait_tokenizer *gpt2;

static const char *source_path(const char *rel, char *buf, size_t cap) {
    const char *root = getenv("PLAIT_SOURCE_DIR");
    snprintf(buf, cap, "%s/%s", root ? root : ".", rel);
    return buf;
}

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "tokenizer");
    char dir[PATH_MAX];
    if (plait_tokenizer_load(source_path("data/tokenizers/gpt2", dir, sizeof dir), &gpt2) != PLAIT_OK) {
        fprintf(stderr, "%s\n", plait_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    plait_tokenizer_free(gpt2);
    rm_tree(scratch);
    return 0;
}

static void assert_round_trip(const plait_tokenizer *t, const unsigned char *s, size_t n) {
    plait_token_buf ids = {0};
    assert_int_equal(plait_tokenizer_encode(t, s, n, &ids), PLAIT_OK);
    char *back = NULL;
    size_t len = 0;
    assert_int_equal(plait_tokenizer_decode(t, ids.ids, ids.len, &back, &len), PLAIT_OK);
    assert_int_equal(len, n);
    assert_memory_equal(back, s, n);
    free(back);
    plait_token_buf_free(&ids);
}

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static void test_gpt2_reference_ids(void **state) {
    (void)state;
    assert_int_equal(plait_tokenizer_vocab_size(gpt2), 50257);
    assert_int_equal(plait_tokenizer_merges(gpt2), 50000);
    assert_int_equal(plait_tokenizer_eot(gpt2), 50256);
    char path[PATH_MAX];
    FILE *f = fopen(source_path("tests/tokenizer/gpt2_reference.tsv", path, sizeof path), "r");
    assert_non_null(f);
    static char line[1 << 20];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        size_t n = (size_t)(tab - line) / 2;
        unsigned char *bytes = malloc(n + 1);
        for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)(hexval(line[2 * i]) << 4 | hexval(line[2 * i + 1]));
        plait_token_buf ids = {0};
        assert_int_equal(plait_tokenizer_encode(gpt2, bytes, n, &ids), PLAIT_OK);
        char *p = tab + 1;
        size_t k = 0;
        while (*p && *p != '\n') {
            long want = strtol(p, &p, 10);
            if (k >= ids.len || ids.ids[k] != want)
                fail_msg("case %d (%.40s...): token %zu is %d, GPT-2 gives %ld", cases, line, k,
                         k < ids.len ? ids.ids[k] : -1, want);
            k++;
            while (*p == ' ') p++;
        }
        assert_int_equal(k, ids.len);
        assert_round_trip(gpt2, bytes, n);
        plait_token_buf_free(&ids);
        free(bytes);
        cases++;
    }
    fclose(f);
    assert_true(cases >= 30);
}

/* \s is Unicode's White_Space, as in Python's `regex` (GPT-2's encoder.py):
 * U+0085 is space, U+FEFF is not (JavaScript's \s says the opposite). */
static void test_white_space_class(void **state) {
    (void)state;
    const unsigned char nel[] = "a\xc2\x85\xc2\x85" "b";
    size_t end = plait_pretokenize_next(nel, 6, 1);
    assert_int_equal(end, 3); /* "\s+(?!\S)": the first NEL alone, the second goes with nothing else */
    const unsigned char bom[] = "a\xef\xbb\xbf" "b";
    assert_int_equal(plait_pretokenize_next(bom, 5, 1), 4); /* BOM is "other": [^\s\p{L}\p{N}]+ */
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Any bytes: uniform noise, text-like mixes with UTF-8 and broken UTF-8,
 * long runs of one byte (the O(n log n) merge path). */
static void test_round_trip_arbitrary_bytes(void **state) {
    (void)state;
    static const char *const atoms[] = {" ", "  ", "\n", "\t", "'s", "'ll", "a", "the", "Z", "9", "42", ".", "!?",
                                        "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x99\x82", "\xff", "\x80", "\xe2\x82",
                                        "\xc0\xaf", "\xed\xa0\x80", "\0", "\r\n", "\xc2\xa0", "\xc2\x85"};
    unsigned char *buf = malloc(1 << 16);
    for (int round = 0; round < 200; round++) {
        size_t n = next_rand() % 4096;
        if (round % 3 == 0) {
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)next_rand();
        } else {
            size_t k = 0;
            while (k < n) {
                const char *a = atoms[next_rand() % (sizeof atoms / sizeof atoms[0])];
                size_t l = a[0] ? strlen(a) : 1;
                if (k + l > n) break;
                memcpy(buf + k, a, l);
                k += l;
            }
            n = k;
        }
        assert_round_trip(gpt2, buf, n);
    }
    memset(buf, ' ', 1 << 16);
    assert_round_trip(gpt2, buf, 1 << 16);
    memset(buf, 'a', 1 << 16);
    assert_round_trip(gpt2, buf, 1 << 16);
    assert_round_trip(gpt2, buf, 0);
    free(buf);
}

/* The pieces both patterns cut `s` into, as a set of piece ends (ends[i]
 * set where a piece ends at i), offset by `base`. */
static void piece_ends(const unsigned char *s, size_t n, int llama3, size_t base, unsigned char *ends) {
    for (size_t pos = 0; pos < n;) {
        pos = llama3 ? plait_pretokenize_next_llama3(s, n, pos) : plait_pretokenize_next(s, n, pos);
        ends[base + pos] = 1;
    }
}

/* plait_tokenizer_cut's points: in texts of words, numbers, punctuation,
 * white space, line breaks, UTF-8 and broken UTF-8, the pieces of the text
 * before each cut and of the text after it are the whole text's, for
 * GPT-2's pattern and Llama 3's; and GPT-2's ids of the parts, joined, are
 * the whole text's. */
static void test_cut_points(void **state) {
    (void)state;
    static const char *const atoms[] = {" ",        "  ",           "\n",   "\n\n", "\t",       "'s", "'LL", "a",
                                        "the",      "Zoo",          "9",    "42",   "1234",     ".",  "!?",  ".\n",
                                        "\xc3\xa9", "\xe6\x97\xa5", "\xff", "\r\n", "\xc2\xa0", " x", "  y", "7 ",
                                        "b ",       "don't"};
    unsigned char *buf = malloc(8192), *whole = malloc(8193), *parts = malloc(8193);
    int cuts = 0;
    for (int round = 0; round < 300; round++) {
        size_t n = 0, want = next_rand() % 8000;
        while (n < want) {
            const char *a = atoms[next_rand() % (sizeof atoms / sizeof atoms[0])];
            const size_t l = strlen(a);
            if (n + l > want) break;
            memcpy(buf + n, a, l);
            n += l;
        }
        for (int llama3 = 0; llama3 < 2; llama3++) {
            memset(whole, 0, n + 1);
            memset(parts, 0, n + 1);
            piece_ends(buf, n, llama3, 0, whole);
            for (size_t p = 0; p < n;) {
                size_t q = plait_tokenizer_cut(buf, n, p + 1 + next_rand() % 64);
                assert_true(q > p && q <= n);
                if (q < n) {
                    assert_true(buf[q] == ' ');
                    cuts++;
                }
                piece_ends(buf + p, q - p, llama3, p, parts);
                p = q;
            }
            if (memcmp(whole, parts, n + 1) != 0)
                fail_msg("round %d (%s): cut pieces differ", round, llama3 ? "llama3" : "gpt2");
        }
        plait_token_buf all = {0}, joined = {0};
        assert_int_equal(plait_tokenizer_encode(gpt2, buf, n, &all), PLAIT_OK);
        for (size_t p = 0; p < n;) {
            size_t q = plait_tokenizer_cut(buf, n, p + 1 + next_rand() % 256);
            assert_int_equal(plait_tokenizer_encode(gpt2, buf + p, q - p, &joined), PLAIT_OK);
            p = q;
        }
        assert_int_equal(all.len, joined.len);
        assert_memory_equal(all.ids, joined.ids, all.len * sizeof *all.ids);
        plait_token_buf_free(&all);
        plait_token_buf_free(&joined);
    }
    assert_true(cuts > 1000);                                /* the texts were cut */
    assert_int_equal(plait_tokenizer_cut("a.b c", 5, 0), 3); /* after the letter b */
    assert_int_equal(plait_tokenizer_cut("x. b", 4, 0), 4);
    assert_int_equal(plait_tokenizer_cut("ab c", 4, 0), 2);
    free(buf);
    free(whole);
    free(parts);
}

/* The bundled corpus at 4096: at least 2x fewer tokens than bytes, exact
 * round trips, and the saved files load back to the same encoding. */
static void test_train_on_corpus(void **state) {
    (void)state;
    char path[PATH_MAX], dir[PATH_MAX + 16];
    plait_mapped_file corpus;
    assert_int_equal(plait_mapped_file_open(source_path("data/corpus.txt", path, sizeof path), &corpus), PLAIT_OK);
    const void *texts[] = {corpus.data};
    size_t lens[] = {corpus.len};
    plait_tokenizer_train_options o = {.vocab_size = 4096};
    plait_tokenizer *t = NULL;
    assert_int_equal(plait_tokenizer_train(&o, texts, lens, 1, &t), PLAIT_OK);
    assert_int_equal(plait_tokenizer_vocab_size(t), 4096);
    assert_int_equal(plait_tokenizer_eot(t), 4095);
    plait_token_buf ids = {0};
    assert_int_equal(plait_tokenizer_encode(t, corpus.data, corpus.len, &ids), PLAIT_OK);
    printf("corpus: %zu bytes -> %zu tokens (%.2f bytes per token)\n", corpus.len, ids.len,
           (double)corpus.len / (double)ids.len);
    assert_true(2 * ids.len <= corpus.len);
    assert_round_trip(t, corpus.data, corpus.len);

    snprintf(dir, sizeof dir, "%s/trained", scratch);
    assert_int_equal(plait_tokenizer_save(t, dir), PLAIT_OK);
    plait_tokenizer *back = NULL;
    assert_int_equal(plait_tokenizer_load(dir, &back), PLAIT_OK);
    plait_token_buf ids2 = {0};
    assert_int_equal(plait_tokenizer_encode(back, corpus.data, corpus.len, &ids2), PLAIT_OK);
    assert_int_equal(ids2.len, ids.len);
    assert_memory_equal(ids2.ids, ids.ids, ids.len * sizeof(int32_t));
    /* saving again replaces the files whole */
    assert_int_equal(plait_tokenizer_save(back, dir), PLAIT_OK);
    plait_token_buf_free(&ids);
    plait_token_buf_free(&ids2);
    plait_tokenizer_free(back);
    plait_tokenizer_free(t);
    plait_mapped_file_close(&corpus);
}

static void test_train_is_deterministic_and_small_vocab(void **state) {
    (void)state;
    const char *text = "low lower lowest newer newest wider widest low low";
    const void *texts[] = {text};
    size_t lens[] = {strlen(text)};
    plait_tokenizer_train_options o = {.vocab_size = 262};
    plait_tokenizer *a = NULL, *b = NULL;
    assert_int_equal(plait_tokenizer_train(&o, texts, lens, 1, &a), PLAIT_OK);
    assert_int_equal(plait_tokenizer_train(&o, texts, lens, 1, &b), PLAIT_OK);
    assert_int_equal(plait_tokenizer_vocab_size(a), 262);
    plait_token_buf x = {0}, y = {0};
    plait_tokenizer_encode(a, text, lens[0], &x);
    plait_tokenizer_encode(b, text, lens[0], &y);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.ids, y.ids, x.len * sizeof(int32_t));
    assert_true(x.len < lens[0]);
    plait_token_buf_free(&x);
    plait_token_buf_free(&y);
    plait_tokenizer_free(a);
    plait_tokenizer_free(b);
    o.vocab_size = 256;
    assert_int_equal(plait_tokenizer_train(&o, texts, lens, 1, &a), PLAIT_ERR_INVALID_ARG);
}

/* A tokenizer directory with the given file contents. */
static const char *make_tok(const char *name, const char *vocab, const char *merges, const char *hf) {
    static char dir[PATH_MAX + 64];
    char path[PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s/%s", scratch, name);
    mkdir(dir, 0777);
    if (vocab) {
        snprintf(path, sizeof path, "%s/vocab.json", dir);
        write_bytes(path, vocab, strlen(vocab));
    }
    if (merges) {
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        write_bytes(path, merges, strlen(merges));
    }
    if (hf) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        write_bytes(path, hf, strlen(hf));
    }
    return dir;
}

/* A vocab.json of the 256 bytes (GPT-2's order is not required) plus extra. */
static char *byte_vocab(const char *extra) {
    static char buf[8192];
    size_t k = 0;
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{");
    for (int b = 0; b < 256; b++) {
        uint32_t cp = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae ? (uint32_t)b : 0;
        if (!cp) {
            int n = 0;
            for (int c = 0; c < b; c++) n += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
            cp = 256 + (uint32_t)n;
        }
        char u[3] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else {
            u[0] = (char)(0xc0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3f));
        }
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s%s\": %d", b ? ", " : "",
                              cp == '"' || cp == '\\' ? "\\" : "", u, b);
    }
    k += (size_t)snprintf(buf + k, sizeof buf - k, "%s}", extra);
    return buf;
}

static void expect_error(const char *dir, const char *needle1, const char *needle2) {
    plait_tokenizer *t = NULL;
    plait_status st = plait_tokenizer_load(dir, &t);
    assert_int_not_equal(st, PLAIT_OK);
    assert_null(t);
    const char *msg = plait_last_error();
    if (!strstr(msg, needle1) || !strstr(msg, needle2))
        fail_msg("error \"%s\" lacks \"%s\" or \"%s\"", msg, needle1, needle2);
}

static void test_bad_files(void **state) {
    (void)state;
    char vocab[8192];
    /* a valid one first, so the failures below are about what they change */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 256"));
    plait_tokenizer *t = NULL;
    assert_int_equal(plait_tokenizer_load(make_tok("ok", vocab, "#version: 0.2\na b\n", NULL), &t), PLAIT_OK);
    assert_int_equal(plait_tokenizer_vocab_size(t), 257);
    plait_token_buf ids = {0};
    plait_tokenizer_encode(t, "abab", 4, &ids);
    assert_int_equal(ids.len, 2);
    assert_int_equal(ids.ids[0], 256);
    /* decoding an id out of range names it and its position */
    int32_t bad_ids[] = {256, 257};
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(plait_tokenizer_decode(t, bad_ids, 2, &out, &n), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "token 1 of 2: id 257 is out of range"));
    assert_null(out);
    plait_token_buf_free(&ids);
    plait_tokenizer_free(t);

    /* vocab.json: broken JSON (byte offset of the problem) */
    expect_error(make_tok("syntax", "{\"a\": 0, \"b\" 1}", "", NULL), "vocab.json: byte 13", "expected ':'");
    /* a non-integer id */
    expect_error(make_tok("notint", "{\"a\": \"x\"}", "", NULL), "vocab.json: byte 6", "must be an integer");
    /* a gap in the ids */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 300"));
    expect_error(make_tok("gap", vocab, "", NULL), "vocab.json", "no token has id 256");
    /* an id near INT32_MAX: refused as a gap, naming the first id missing
     * (that no table of 2^31 ids is made on the way is what the fuzz
     * corpus's tokenizer.json with such an id checks: CI's fuzz stage runs
     * the corpus under libFuzzer's 2 GiB malloc limit) */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 2147483646"));
    expect_error(make_tok("huge", vocab, "", NULL), "vocab.json", "no token has id 256, but ids go up to 2147483646");
    /* a byte missing */
    expect_error(make_tok("nobytes", "{\"a\": 0}", "", NULL), "vocab.json", "byte 0x00 has no token");
    /* a duplicate member */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"a\": 256"));
    expect_error(make_tok("dup", vocab, "", NULL), "vocab.json: byte", "duplicate member name \"a\"");
    /* one id given to two tokens: both named */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 256, \"ba\": 256, \"cd\": 257"));
    expect_error(make_tok("dup", vocab, "", NULL), "token id 256 is used twice", "by \"ab\" and by \"ba\"");
    /* a character outside the byte alphabet */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"a b\": 256"));
    expect_error(make_tok("alphabet", vocab, "", NULL), "vocab.json: byte", "U+0020");

    /* merges.txt: line and byte offset */
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 256"));
    expect_error(make_tok("m1", vocab, "#version: 0.2\na c\n", NULL), "merges.txt: line 2 (byte 14)",
                 "makes a token that is not in the vocabulary");
    expect_error(make_tok("m2", vocab, "#version: 0.2\na b\nab\n", NULL), "merges.txt: line 3 (byte 18)",
                 "two tokens separated by one space");
    expect_error(make_tok("m3", vocab, "a b\nxyz b\n", NULL), "merges.txt: line 2 (byte 4)", "\"xyz\" is not in");
    expect_error(make_tok("m4", vocab, "a b\na b\n", NULL), "merges.txt: line 2", "repeats merge 0");
    /* invalid UTF-8: its line and byte, never a code point U+FFFFFFFF */
    expect_error(make_tok("m5", vocab, "#version: 0.2\na b\n\xc3\x28 b\n", NULL), "merges.txt: line 3 (byte 18)",
                 "is not valid UTF-8 (byte 0xc3 at byte 18 of the file)");
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"\xff\": 256"));
    expect_error(make_tok("v5", vocab, "", NULL), "vocab.json: byte", "invalid UTF-8 in a string");
    snprintf(vocab, sizeof vocab, "%s", byte_vocab(", \"ab\": 256"));

    /* tokenizer.json */
    char hf[16384];
    snprintf(hf, sizeof hf, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": %s, \"merges\": []}}", vocab);
    expect_error(make_tok("hf1", NULL, NULL, hf), "tokenizer.json: byte 19", "\"WordPiece\" is not supported");
    snprintf(hf, sizeof hf, "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": []}}", vocab);
    expect_error(make_tok("hf2", NULL, NULL, hf), "tokenizer.json: byte 18", "ByteLevel");
    snprintf(hf, sizeof hf, "{\"model\": {\"type\": \"BPE\", \"dropout\": null, \"fuse_unk\": false, \"vocab\": %s, "
                            "\"merges\": [\"a b\", 7]}}", vocab);
    expect_error(make_tok("hf3", NULL, NULL, hf), "tokenizer.json: byte", "merge 2 must be");
    /* settings that would change the ids are refused, not ignored */
    static const struct {
        const char *root, *pre, *model, *want;
    } changes[] = {
        {"\"normalizer\": {\"type\": \"Lowercase\"}, ", "", "", "\"normalizer\" asks for a normalizer"},
        {"", "\"add_prefix_space\": true", "", "pre_tokenizer.add_prefix_space must be false"},
        {"", "\"use_regex\": false", "", "pre_tokenizer.use_regex must be true"},
        {"", "", "\"dropout\": 0.1, ", "\"model.dropout\" asks for BPE dropout"},
        {"", "", "\"ignore_merges\": 1, ", "model.ignore_merges must be true or false"},
        {"", "", "\"byte_fallback\": true, ", "\"model.byte_fallback\" asks for byte fallback"},
        {"", "", "\"end_of_word_suffix\": \"</w>\", ", "\"model.end_of_word_suffix\""},
    };
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "hfc%zu", i);
        snprintf(hf, sizeof hf, "{%s\"pre_tokenizer\": {\"type\": \"ByteLevel\"%s%s}, \"model\": {%s\"type\": "
                                "\"BPE\", \"vocab\": %s, \"merges\": []}}",
                 changes[i].root, changes[i].pre[0] ? ", " : "", changes[i].pre, changes[i].model, vocab);
        expect_error(make_tok(name, NULL, NULL, hf), "tokenizer.json: byte", changes[i].want);
    }
    /* a good one: both merge layouts, an added token, null/false/real values */
    snprintf(hf, sizeof hf, "{\"version\": \"1.0\", \"truncation\": null, \"added_tokens\": [{\"id\": 257, "
                            "\"content\": \"<|endoftext|>\", \"special\": true}], \"pre_tokenizer\": {\"type\": "
                            "\"ByteLevel\", \"add_prefix_space\": false}, \"model\": {\"type\": \"BPE\", \"dropout\": "
                            "0.0, \"fuse_unk\": false, \"vocab\": %s, \"merges\": [[\"a\", \"b\"]]}}", vocab);
    assert_int_equal(plait_tokenizer_load(make_tok("hf4", NULL, NULL, hf), &t), PLAIT_OK);
    assert_int_equal(plait_tokenizer_vocab_size(t), 258);
    assert_int_equal(plait_tokenizer_eot(t), 257);
    plait_tokenizer_free(t);
    /* an added token whose id the vocabulary gives to another token is
     * refused, naming the id and both tokens; the same token in both (as
     * GPT-2's <|endoftext|> is) is one token */
    static const char added_fmt[] = "{\"added_tokens\": [{\"id\": 256, \"content\": \"%s\", \"special\": true}], "
                                    "\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": [\"a b\"]}}";
    snprintf(hf, sizeof hf, added_fmt, "<|endoftext|>", vocab);
    expect_error(make_tok("hf5", NULL, NULL, hf), "added token \"<|endoftext|>\" has id 256",
                 "the vocabulary gives to \"ab\"");
    snprintf(hf, sizeof hf, added_fmt, "ab", vocab);
    assert_int_equal(plait_tokenizer_load(make_tok("hf6", NULL, NULL, hf), &t), PLAIT_OK);
    assert_int_equal(plait_tokenizer_vocab_size(t), 257);
    plait_tokenizer_free(t);
    expect_error(make_tok("empty", NULL, NULL, NULL), "holds neither tokenizer.json", "vocab.json and merges.txt");
    /* one of GPT-2's two files alone is named; a FIFO in a file's place is
     * refused for what it is, without waiting for a writer */
    expect_error(make_tok("vocabonly", vocab, NULL, NULL), "holds vocab.json but no merges.txt", "needs both");
    char fifo[PATH_MAX + 128];
    snprintf(fifo, sizeof fifo, "%s/merges.txt", make_tok("fifo", vocab, NULL, NULL));
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_error(make_tok("fifo", NULL, NULL, NULL), "merges.txt is a FIFO", "not a regular file");
    /* a file far larger than any tokenizer file (sparse): its size named, not called irregular */
    char big[PATH_MAX + 128];
    snprintf(big, sizeof big, "%s/vocab.json", make_tok("huge", NULL, "", NULL));
    FILE *bf = fopen(big, "w");
    assert_non_null(bf);
    assert_int_equal(ftruncate(fileno(bf), (off_t)2 << 30), 0);
    fclose(bf);
    expect_error(make_tok("huge", NULL, NULL, NULL), "vocab.json has 2147483648 bytes, more than the 1073741824",
                 "another file in its place");
    snprintf(fifo, sizeof fifo, "%s/fifo-tok", scratch);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_not_equal(plait_tokenizer_load(fifo, &t), PLAIT_OK);
    assert_non_null(strstr(plait_last_error(), "is a FIFO"));
}

/* Saving never touches a directory holding other files, and leaves no half
 * tokenizer behind. */
static void test_save_refuses_foreign_directory(void **state) {
    (void)state;
    char dir[PATH_MAX + 32], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/mine", scratch);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_bytes(path, "keep", 4);
    assert_int_equal(plait_tokenizer_save(gpt2, dir), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "notes.txt"));
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    assert_int_not_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    assert_int_equal(access(path, F_OK), 0);
    /* no staging directory is left beside it */
    snprintf(path, sizeof path, "%s.staging-%ld", dir, (long)getpid());
    assert_int_not_equal(access(path, F_OK), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_reference_ids),
        cmocka_unit_test(test_white_space_class),
        cmocka_unit_test(test_round_trip_arbitrary_bytes),
        cmocka_unit_test(test_cut_points),
        cmocka_unit_test(test_train_on_corpus),
        cmocka_unit_test(test_train_is_deterministic_and_small_vocab),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_save_refuses_foreign_directory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
