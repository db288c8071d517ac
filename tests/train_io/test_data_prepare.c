/* plait data prepare's output read back through the data loader: shards,
 * the train/validation cut, uint16 and uint32, and the errors (a bad
 * header, a vocabulary too large for uint16, a foreign output directory)
 * naming the file and offset with nothing half written; JSON Lines input. */
#include "train_io_test.h"

#include "runtime/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_train.h"
#include "train/data.h"
#include "train/data_prepare.h"
#include "train/token_file.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "prepare");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(scratch);
    return 0;
}

static const char *corpus_path(void) {
    static char p[PATH_MAX];
    const char *root = getenv("PLAIT_SOURCE_DIR");
    snprintf(p, sizeof p, "%s/data/corpus.txt", root ? root : ".");
    return p;
}

/* Names dir/<prefix>_000000.bin .. for n shards. */
static char **shard_names(const char *dir, const char *prefix, int n) {
    char **v = calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) {
        v[i] = malloc(PATH_MAX + 64);
        snprintf(v[i], PATH_MAX + 64, "%s/%s_%06d.bin", dir, prefix, i);
    }
    return v;
}

static void free_names(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* A 512-token BPE learned on the bundled corpus, which stays mapped in
 * *corpus. */
static plait_tokenizer *corpus_tokenizer(plait_mapped_file *corpus) {
    assert_int_equal(plait_mapped_file_open(corpus_path(), corpus), PLAIT_OK);
    const void *texts[] = {corpus->data};
    size_t lens[] = {corpus->len};
    plait_tokenizer_train_options to = {.vocab_size = 512};
    plait_tokenizer *tok = NULL;
    assert_int_equal(plait_tokenizer_train(&to, texts, lens, 1, &tok), PLAIT_OK);
    return tok;
}

static void test_shards_read_back_as_the_text(void **state) {
    (void)state;
    plait_mapped_file corpus;
    plait_tokenizer *tok = corpus_tokenizer(&corpus);

    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/ds", scratch);
    const char *inputs[] = {corpus_path()};
    plait_prepare_options o = {.inputs = inputs, .n_inputs = 1, .tokenizer = tok, .out_dir = out,
                               .val_fraction = 0.1, .shard_tokens = 40000};
    plait_prepare_result r, rp;
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_OK);
    assert_int_equal(r.dtype_bytes, 2);
    assert_int_equal(r.train_shards, (int)((r.train_tokens + 39999) / 40000));
    /* the text in parts of about 997 bytes on 4 threads (cut where no
     * piece spans the cut): every shard the same bytes as one stream's */
    char out_par[PATH_MAX + 32];
    snprintf(out_par, sizeof out_par, "%s/ds-parts", scratch);
    plait_prepare_options op = o;
    op.out_dir = out_par;
    op.workers = 4;
    op.text_part_bytes = 997;
    assert_int_equal(plait_data_prepare(&op, &rp), PLAIT_OK);
    assert_true(rp.train_tokens == r.train_tokens && rp.val_tokens == r.val_tokens &&
                rp.train_shards == r.train_shards);
    for (int i = 0; i < r.train_shards + r.val_shards; i++) {
        const int v = i >= r.train_shards;
        char a[PATH_MAX + 64], b[PATH_MAX + 64];
        snprintf(a, sizeof a, "%s/%s_%06d.bin", out, v ? "val" : "train", v ? i - r.train_shards : i);
        snprintf(b, sizeof b, "%s/%s_%06d.bin", out_par, v ? "val" : "train", v ? i - r.train_shards : i);
        plait_mapped_file fa, fb;
        assert_int_equal(plait_mapped_file_open(a, &fa), PLAIT_OK);
        assert_int_equal(plait_mapped_file_open(b, &fb), PLAIT_OK);
        assert_int_equal(fa.len, fb.len);
        assert_memory_equal(fa.data, fb.data, fa.len);
        plait_mapped_file_close(&fa);
        plait_mapped_file_close(&fb);
    }
    assert_int_equal(r.val_shards, 1);
    assert_true(r.val_tokens > 0 && r.train_tokens > 8 * r.val_tokens);

    char **train = shard_names(out, "train", r.train_shards), **val = shard_names(out, "val", r.val_shards);
    plait_data_options d_o = {.paths = (const char *const *)train, .n_paths = r.train_shards,
                              .val_paths = (const char *const *)val, .n_val_paths = r.val_shards,
                              .vocab_size = 512, .seq_len = 64, .seed = 1};
    plait_data *d = NULL;
    if (plait_data_open(&d_o, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_data_split_tokens(d, PLAIT_DATA_TRAIN), r.train_tokens);
    assert_int_equal(plait_data_split_tokens(d, PLAIT_DATA_VAL), r.val_tokens);
    assert_true(plait_data_has_llmc_header(d));
    /* every token: <|endoftext|> starts the document, then the text */
    int64_t n = plait_data_tokens(d);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) ids[i] = plait_data_token(d, i);
    assert_int_equal(ids[0], plait_tokenizer_eot(tok));
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(plait_tokenizer_decode(tok, ids + 1, (size_t)n - 1, &text, &len), PLAIT_OK);
    assert_int_equal(len, corpus.len);
    assert_memory_equal(text, corpus.data, len);
    /* the validation part starts at a line start */
    char *val_text = NULL;
    size_t val_len = 0;
    assert_int_equal(plait_tokenizer_decode(tok, ids + r.train_tokens, (size_t)r.val_tokens, &val_text, &val_len), PLAIT_OK);
    assert_int_equal(corpus.data[corpus.len - val_len - 1], '\n');
    /* a training batch reads across shard boundaries like one file */
    int32_t tokens[4 * 64], targets[4 * 64];
    for (int64_t step = 0; step < 50; step++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, step, 0, 4, 64, tokens, targets), PLAIT_OK);
        for (int row = 0; row < 4; row++) {
            int64_t s = plait_data_sequence_start(d, PLAIT_DATA_TRAIN, step, row);
            for (int t = 0; t < 64; t++) {
                assert_int_equal(tokens[row * 64 + t], ids[s + t]);
                assert_int_equal(targets[row * 64 + t], ids[s + t + 1]);
            }
        }
    }
    free(text);
    free(val_text);
    free(ids);
    plait_data_close(d);
    free_names(train, r.train_shards);
    free_names(val, r.val_shards);

    /* a token id out of range for the model names the file and offset */
    char first[PATH_MAX + 64];
    snprintf(first, sizeof first, "%s/train_000000.bin", out);
    plait_data_options small = {.path = first, .vocab_size = 300, .seq_len = 8};
    assert_int_equal(plait_data_open(&small, &d), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), first));
    assert_non_null(strstr(plait_last_error(), "at byte offset 1024 (token index 0)"));

    /* the output directory is replaced only when it holds nothing foreign */
    char foreign[PATH_MAX + 64];
    snprintf(foreign, sizeof foreign, "%s/notes.txt", out);
    write_bytes(foreign, "mine", 4);
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "notes.txt"));
    assert_int_equal(access(foreign, F_OK), 0);
    assert_int_equal(access(first, F_OK), 0);
    unlink(foreign);
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_OK);
    plait_tokenizer_free(tok);
    plait_mapped_file_close(&corpus);
}

/* A tokenizer with 70000 ids: the 256 bytes plus tokens no merge makes. */
/* Llama 3's tokenizer.json (tests/tokenizer/llama3-mini.json: its pattern,
 * ignore_merges, <|begin_of_text|> put first by its post-processor): every
 * document starts with <|begin_of_text|>, and the directory keeps a copy of
 * the tokenizer.json (GPT-2's files cannot say what it does). */
static void test_llama3_tokenizer(void **state) {
    (void)state;
    char json[PATH_MAX], input[PATH_MAX + 32], out[PATH_MAX + 32], path[PATH_MAX + 64];
    const char *root = getenv("PLAIT_SOURCE_DIR");
    snprintf(json, sizeof json, "%s/tests/tokenizer/llama3-mini.json", root ? root : ".");
    plait_tokenizer *tok = NULL, *back = NULL;
    if (plait_tokenizer_load(json, &tok) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_tokenizer_bos(tok), 262);
    snprintf(input, sizeof input, "%s/doc.txt", scratch);
    write_bytes(input, "the naive doc\n", 14);
    snprintf(out, sizeof out, "%s/ds-llama3", scratch);
    const char *inputs[] = {input};
    plait_prepare_options o = {.inputs = inputs, .n_inputs = 1, .tokenizer = tok, .out_dir = out, .shard_tokens = 1000};
    plait_prepare_result r;
    if (plait_data_prepare(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    char **train = shard_names(out, "train", 1);
    plait_data_options d_o = {.paths = (const char *const *)train, .n_paths = 1, .vocab_size = 264, .seq_len = 2};
    plait_data *d = NULL;
    if (plait_data_open(&d_o, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_data_token(d, 0), 262);
    assert_int_equal(plait_data_token(d, 1), 257); /* "the" */
    plait_data_close(d);
    free_names(train, 1);
    snprintf(path, sizeof path, "%s/vocab.json", out);
    assert_int_not_equal(access(path, F_OK), 0);
    if (plait_tokenizer_load(out, &back) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_true(plait_tokenizer_fingerprint(back) == plait_tokenizer_fingerprint(tok));
    plait_tokenizer_free(back);
    plait_tokenizer_free(tok);
}

static plait_tokenizer *big_vocab(void) {
    char dir[PATH_MAX + 32], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/big", scratch);
    mkdir(dir, 0777);
    size_t cap = 4 << 20, k = 0;
    char *json = malloc(cap);
    k += (size_t)snprintf(json + k, cap - k, "{");
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae, n = 0;
        for (int c = 0; c < b; c++) n += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n;
        char u[3] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else {
            u[0] = (char)(0xc0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3f));
        }
        k += (size_t)snprintf(json + k, cap - k, "%s\"%s%s\": %d", b ? ", " : "", cp == '"' || cp == '\\' ? "\\" : "", u, b);
    }
    for (int i = 256; i < 70000; i++) k += (size_t)snprintf(json + k, cap - k, ", \"tok%d\": %d", i, i);
    k += (size_t)snprintf(json + k, cap - k, "}");
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    write_bytes(path, json, k);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    write_bytes(path, "#version: 0.2\n", 14);
    free(json);
    plait_tokenizer *t = NULL;
    if (plait_tokenizer_load(dir, &t) != PLAIT_OK) fail_msg("%s", plait_last_error());
    return t;
}

static void test_uint32_and_dtype_errors(void **state) {
    (void)state;
    plait_tokenizer *tok = big_vocab();
    char in[PATH_MAX + 32], out[PATH_MAX + 32], bin[PATH_MAX + 64];
    snprintf(in, sizeof in, "%s/doc.txt", scratch);
    write_bytes(in, "hello token files\nsecond line\n", 30);
    snprintf(out, sizeof out, "%s/u32", scratch);
    const char *inputs[] = {in};
    plait_prepare_options o = {.inputs = inputs, .n_inputs = 1, .tokenizer = tok, .out_dir = out,
                               .val_fraction = 0, .shard_tokens = 1000, .dtype_bytes = 2};
    plait_prepare_result r;
    /* forced uint16: refused before anything is written */
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "70000 ids does not fit uint16"));
    assert_int_not_equal(access(out, F_OK), 0);
    /* by vocabulary: uint32, llm.c's magic and version */
    o.dtype_bytes = 0;
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_OK);
    assert_int_equal(r.dtype_bytes, 4);
    assert_int_equal(r.train_tokens, 30); /* no <|endoftext|> in this vocabulary, no merges: a token per byte */
    snprintf(bin, sizeof bin, "%s/train_000000.bin", out);
    plait_token_file f;
    assert_int_equal(plait_token_file_open(bin, 0, &f), PLAIT_OK);
    assert_int_equal(f.width, 4);
    assert_int_equal(f.n_tokens, 30);
    plait_token_file_close(&f);
    plait_tokenizer_free(tok);
}

static void test_bad_headers(void **state) {
    (void)state;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/hdr.bin", scratch);
    plait_token_writer w;
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i;
    assert_int_equal(plait_token_writer_open(&w, path, 2), PLAIT_OK);
    assert_int_equal(plait_token_writer_append(&w, ids, 40), PLAIT_OK);
    /* an id too large for the width names the file and byte */
    int32_t big = 70000;
    assert_int_equal(plait_token_writer_append(&w, &big, 1), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(plait_last_error(), "byte 1104: token id 70000 does not fit uint16"));
    assert_int_equal(plait_token_writer_close(&w), PLAIT_OK);
    plait_token_file f;
    assert_int_equal(plait_token_file_open(path, 0, &f), PLAIT_OK);
    assert_int_equal(f.n_tokens, 40);
    plait_token_file_close(&f);

    plait_mapped_file m;
    assert_int_equal(plait_mapped_file_open(path, &m), PLAIT_OK);
    unsigned char *copy = malloc(m.len);
    memcpy(copy, m.data, m.len);
    size_t n = m.len;
    plait_mapped_file_close(&m);
    /* wrong count */
    copy[8] = 41;
    write_bytes(path, copy, n);
    assert_int_equal(plait_token_file_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "hdr.bin: byte 8: llm.c header says 41 tokens"));
    /* wrong version */
    copy[8] = 40;
    copy[4] = 3;
    write_bytes(path, copy, n);
    assert_int_equal(plait_token_file_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "hdr.bin: byte 4: llm.c header version 3"));
    /* truncated header */
    copy[4] = 1;
    write_bytes(path, copy, 100);
    assert_int_equal(plait_token_file_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "shorter than its 1024-byte header"));
    free(copy);
}

/* Reads every token of a prepared directory's first shard of `split`. */
static int64_t read_split(const char *dir, const char *split, int32_t *ids, int64_t cap) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s_000000.bin", dir, split);
    plait_data_options d_o = {.path = path, .vocab_size = 512, .seq_len = 1, .val_fraction = 0};
    plait_data *d = NULL;
    if (plait_data_open(&d_o, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
    int64_t n = plait_data_tokens(d);
    assert_true(n <= cap);
    for (int64_t i = 0; i < n; i++) ids[i] = plait_data_token(d, i);
    plait_data_close(d);
    return n;
}

/* JSON Lines: each line's "text" (escapes, \u and a surrogate pair
 * decoded) is a document, exactly as the same documents given as files;
 * the validation cut falls between lines; --json-key names another
 * member; a bad line is refused naming the file and the line, nothing
 * written. */
static void test_jsonl(void **state) {
    (void)state;
    plait_mapped_file corpus;
    plait_tokenizer *tok = corpus_tokenizer(&corpus);
    static const char *const docs[] = {"First line\nsecond \"quoted\" line\n", "caf\xc3\xa9 \xf0\x9f\x98\x80 tab\there",
                                       "the last document"};
    char jsonl[PATH_MAX + 32], files[3][PATH_MAX + 32];
    snprintf(jsonl, sizeof jsonl, "%s/docs.jsonl", scratch);
    const char *body = "{\"id\": 1, \"text\": \"First line\\nsecond \\\"quoted\\\" line\\n\", \"score\": 0.5}\n"
                       "\n"
                       "{\"text\": \"caf\\u00e9 \\ud83d\\ude00 tab\\there\", \"ok\": true, \"meta\": null}\r\n"
                       "{\"text\": \"the last document\", \"other\": \"x\"}\n";
    write_bytes(jsonl, body, strlen(body));
    for (int i = 0; i < 3; i++) {
        snprintf(files[i], sizeof files[i], "%s/doc%d.txt", scratch, i);
        write_bytes(files[i], docs[i], strlen(docs[i]));
    }
    char out_j[PATH_MAX + 32], out_f[PATH_MAX + 32];
    snprintf(out_j, sizeof out_j, "%s/from-jsonl", scratch);
    snprintf(out_f, sizeof out_f, "%s/from-files", scratch);
    const char *in_j[] = {jsonl}, *in_f[] = {files[0], files[1], files[2]};
    plait_prepare_options o = {.inputs = in_j, .n_inputs = 1, .tokenizer = tok, .out_dir = out_j, .shard_tokens = 1000};
    plait_prepare_result r, rf;
    if (plait_data_prepare(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    /* on 1 and 5 threads: the same bits */
    char out_1[PATH_MAX + 32];
    snprintf(out_1, sizeof out_1, "%s/one-thread", scratch);
    plait_prepare_options o1 = o;
    o1.out_dir = out_1;
    o1.workers = 1;
    o.workers = 5;
    assert_int_equal(plait_data_prepare(&o1, &rf), PLAIT_OK);
    if (plait_data_prepare(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    plait_prepare_options of = o;
    of.inputs = in_f;
    of.n_inputs = 3;
    of.out_dir = out_f;
    assert_int_equal(plait_data_prepare(&of, &rf), PLAIT_OK);
    int32_t a[512], b[512];
    int64_t na = read_split(out_j, "train", a, 512), nb = read_split(out_f, "train", b, 512);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, sizeof(int32_t) * (size_t)na);
    nb = read_split(out_1, "train", b, 512);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, sizeof(int32_t) * (size_t)na);
    int eots = 0;
    for (int64_t i = 0; i < na; i++) eots += a[i] == plait_tokenizer_eot(tok);
    assert_int_equal(eots, 3); /* a document start each */
    /* the validation cut at a line start: the last document alone */
    o.val_fraction = 0.3; /* 133 of 189 bytes: inside the third document's line, so from the fourth line */
    if (plait_data_prepare(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    na = read_split(out_j, "val", a, 512);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(a[0], plait_tokenizer_eot(tok));
    assert_int_equal(plait_tokenizer_decode(tok, a + 1, (size_t)na - 1, &text, &len), PLAIT_OK);
    assert_int_equal(len, strlen(docs[2]));
    assert_memory_equal(text, docs[2], len);
    free(text);
    /* the same from the three text files: 41 of 68 bytes falls inside the
     * second file's one line (inside its emoji), which no line break ends:
     * the cut moves to the next file's start, not into the character */
    of.val_fraction = 0.4;
    if (plait_data_prepare(&of, &rf) != PLAIT_OK) fail_msg("%s", plait_last_error());
    nb = read_split(out_f, "val", b, 512);
    assert_int_equal(b[0], plait_tokenizer_eot(tok));
    assert_int_equal(plait_tokenizer_decode(tok, b + 1, (size_t)nb - 1, &text, &len), PLAIT_OK);
    assert_int_equal(len, strlen(docs[2]));
    assert_memory_equal(text, docs[2], len);
    free(text);
    /* another member */
    const char *other = "{\"body\": \"one\"}\n{\"body\": \"two\"}\n";
    write_bytes(jsonl, other, strlen(other));
    o.val_fraction = 0;
    o.json_key = "body";
    assert_int_equal(plait_data_prepare(&o, &r), PLAIT_OK);
    /* bad lines: refused naming the file and line; the directory as it was */
    static const struct {
        const char *body, *want;
    } bad[] = {
        {"{\"text\": \"a\"}\n[1, 2]\n", "docs.jsonl: line 2: not a JSON object"},
        {"{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n", "docs.jsonl: line 3: the object has no \"text\""},
        {"{\"text\": 5}\n", "docs.jsonl: line 1: \"text\" is not a string"},
        {"{\"text\": \"a\"\n", "docs.jsonl: line 1"},
        {"{\"text\": \"a\\u0000b\"}\n", "docs.jsonl: line 1"},
        {"{\"text\": \"a\"}\n{\"text\": 1}\n{\"text\": \"b\"}\n[]\n",
         "docs.jsonl: line 2"}, /* the first, on any thread */
    };
    o.json_key = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_bytes(jsonl, bad[i].body, strlen(bad[i].body));
        assert_int_equal(plait_data_prepare(&o, &r), PLAIT_ERR_PROTOCOL);
        if (!strstr(plait_last_error(), bad[i].want)) fail_msg("%s lacks %s", plait_last_error(), bad[i].want);
    }
    na = read_split(out_j, "train", a, 512); /* the "body" run's output, whole */
    assert_true(na > 2);
    plait_tokenizer_free(tok);
    plait_mapped_file_close(&corpus);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards_read_back_as_the_text),
        cmocka_unit_test(test_uint32_and_dtype_errors),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_llama3_tokenizer),
        cmocka_unit_test(test_jsonl),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
