/* The data loader: formats, split, deterministic layout-independent batches,
 * errors that name the file and offset. */
#include "train_io_test.h"

#include "train/batch_skip.h"
#include "train/val_sets.h"
#include "train/data.h"
#include "train/epoch_order.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "data");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(scratch);
    return 0;
}

/* Byte i of a text file with a recognisable pattern, never NUL (which no
 * text has). */
static unsigned char text_byte(size_t i) { return (unsigned char)(1 + (i * 7 + i / 251) % 255); }

/* A text file of n bytes of that pattern. */
static void make_text(const char *path, size_t n) {
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = text_byte(i);
    write_bytes(path, buf, n);
    free(buf);
}

static plait_data *open_text(size_t n, int32_t T, double val, uint64_t seed) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/text-%zu.txt", scratch, n);
    make_text(path, n);
    plait_data_options o = {.path = path, .val_fraction = val, .vocab_size = 256, .seq_len = T, .seed = seed};
    plait_data *d;
    plait_status st = plait_data_open(&o, &d);
    if (st != PLAIT_OK) fail_msg("%s", plait_last_error());
    return d;
}

static void test_batches_are_deterministic(void **state) {
    (void)state;
    const int32_t B = 4, T = 16;
    plait_data *d = open_text(5000, T, 0.1, 1337);
    int32_t a[4 * 16], at[4 * 16], b[4 * 16], bt[4 * 16], other[4 * 16];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 7, 3, B, T, a, at), PLAIT_OK);
    /* Reading anything else in between changes nothing. */
    for (int s = 0; s < 5; s++)
        for (int j = 0; j < 4; j++) assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, s, j, B, T, other, NULL), PLAIT_OK);
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_VAL, 0, 0, B, T, other, NULL), PLAIT_OK);
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 7, 3, B, T, b, bt), PLAIT_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(at, bt, sizeof at);
    /* Another handle on the same file (another rank) agrees. */
    plait_data *d2 = open_text(5000, T, 0.1, 1337);
    assert_int_equal(plait_data_batch(d2, PLAIT_DATA_TRAIN, 7, 3, B, T, b, bt), PLAIT_OK);
    assert_memory_equal(a, b, sizeof a);
    plait_data_close(d2);
    /* Different micro-batch, step or seed: different sequences. */
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 7, 2, B, T, b, NULL), PLAIT_OK);
    assert_memory_not_equal(a, b, sizeof a);
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 8, 3, B, T, b, NULL), PLAIT_OK);
    assert_memory_not_equal(a, b, sizeof a);
    plait_data *d3 = open_text(5000, T, 0.1, 42);
    assert_int_equal(plait_data_batch(d3, PLAIT_DATA_TRAIN, 7, 3, B, T, b, NULL), PLAIT_OK);
    assert_memory_not_equal(a, b, sizeof a);
    plait_data_close(d3);
    plait_data_close(d);
}

/* Cutting the global batch differently reads the same sequences. */
static void test_batches_independent_of_micro_batch_size(void **state) {
    (void)state;
    const int32_t T = 8;
    plait_data *d = open_text(3000, T, 0.1, 5);
    int32_t whole[8 * 8], part[2 * 8];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 11, 0, 8, T, whole, NULL), PLAIT_OK);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 11, j, 2, T, part, NULL), PLAIT_OK);
        assert_memory_equal(part, whole + j * 2 * T, sizeof part);
    }
    int32_t one[8];
    for (int g = 0; g < 8; g++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 11, g, 1, T, one, NULL), PLAIT_OK);
        assert_memory_equal(one, whole + g * T, sizeof one);
    }
    plait_data_close(d);
}

static void test_split_boundaries(void **state) {
    (void)state;
    const int32_t T = 10;
    const size_t n = 1000;
    plait_data *d = open_text(n, T, 0.25, 9);
    assert_int_equal(plait_data_tokens(d), 1000);
    assert_int_equal(plait_data_split_tokens(d, PLAIT_DATA_VAL), 250);
    assert_int_equal(plait_data_split_tokens(d, PLAIT_DATA_TRAIN), 750);
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t s = 0; s < 200; s++)
        for (int64_t g = 0; g < 16; g++) {
            int64_t start = plait_data_sequence_start(d, PLAIT_DATA_TRAIN, s, g);
            assert_true(start >= 0);
            assert_true(start + T + 1 <= 750); /* last target inside the training split */
            if (start < lo) lo = start;
            if (start > hi) hi = start;
        }
    /* 3200 uniform draws over 740 positions reach both ends. */
    assert_true(lo <= 3);
    assert_true(hi >= 736);
    /* Validation: consecutive windows from the first validation token,
     * wrapping after (250 - 1) / 10 = 24 of them, the same at every step. */
    assert_int_equal(plait_data_sequence_start(d, PLAIT_DATA_VAL, 0, 0), 750);
    assert_int_equal(plait_data_sequence_start(d, PLAIT_DATA_VAL, 0, 1), 760);
    assert_int_equal(plait_data_sequence_start(d, PLAIT_DATA_VAL, 0, 23), 750 + 230);
    assert_int_equal(plait_data_sequence_start(d, PLAIT_DATA_VAL, 0, 24), 750);
    assert_int_equal(plait_data_sequence_start(d, PLAIT_DATA_VAL, 99, 5), 800);
    for (int64_t g = 0; g < 100; g++)
        assert_true(plait_data_sequence_start(d, PLAIT_DATA_VAL, 0, g) + T + 1 <= 1000);
    /* Tokens and targets are the file's bytes, shifted by one. */
    int32_t tok[2 * 10], tgt[2 * 10];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_VAL, 0, 1, 2, T, tok, tgt), PLAIT_OK);
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < T; t++) {
            size_t pos = 750 + (size_t)(2 + r) * 10 + (size_t)t;
            assert_int_equal(tok[r * T + t], text_byte(pos));
            assert_int_equal(tgt[r * T + t], text_byte(pos + 1));
        }
    plait_data_close(d);
}

static void test_no_validation_split(void **state) {
    (void)state;
    plait_data *d = open_text(100, 8, 0.0, 1);
    assert_int_equal(plait_data_split_tokens(d, PLAIT_DATA_VAL), 0);
    int32_t tok[8];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_VAL, 0, 0, 1, 8, tok, NULL), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("val_fraction = 0");
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 0, 0, 1, 9, tok, NULL), PLAIT_ERR_INVALID_ARG);
    plait_data_close(d);
}

static void write_u16(const char *path, const uint16_t *tokens, size_t n, int llmc_header, int32_t header_count) {
    size_t bytes = (llmc_header ? 1024 : 0) + 2 * n;
    unsigned char *buf = calloc(1, bytes);
    if (llmc_header) {
        int32_t h[3] = {20240520, 1, header_count};
        memcpy(buf, h, sizeof h); /* little-endian host */
    }
    for (size_t i = 0; i < n; i++) {
        buf[(llmc_header ? 1024 : 0) + 2 * i] = (unsigned char)(tokens[i] & 0xff);
        buf[(llmc_header ? 1024 : 0) + 2 * i + 1] = (unsigned char)(tokens[i] >> 8);
    }
    write_bytes(path, buf, bytes);
    free(buf);
}

static void test_u16_files(void **state) {
    (void)state;
    enum { N = 400 };
    uint16_t tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (uint16_t)(i * 131 % 50257);
    char raw[PATH_MAX], llmc[PATH_MAX];
    snprintf(raw, sizeof raw, "%s/raw.bin", scratch);
    snprintf(llmc, sizeof llmc, "%s/llmc.bin", scratch);
    write_u16(raw, tokens, N, 0, 0);
    write_u16(llmc, tokens, N, 1, N);
    const char *paths[2] = {raw, llmc};
    for (int k = 0; k < 2; k++) {
        plait_data_options o = {.path = paths[k], .val_fraction = 0.1, .vocab_size = 50257, .seq_len = 16, .seed = 3};
        plait_data *d;
        if (plait_data_open(&o, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
        assert_int_equal(plait_data_format_of(d), PLAIT_DATA_FORMAT_U16);
        assert_int_equal(plait_data_has_llmc_header(d), k);
        assert_int_equal(plait_data_tokens(d), N);
        for (int i = 0; i < N; i++) assert_int_equal(plait_data_token(d, i), tokens[i]);
        int32_t tok[16], tgt[16];
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 2, 1, 1, 16, tok, tgt), PLAIT_OK);
        int64_t start = plait_data_sequence_start(d, PLAIT_DATA_TRAIN, 2, 1);
        for (int t = 0; t < 16; t++) {
            assert_int_equal(tok[t], tokens[start + t]);
            assert_int_equal(tgt[t], tokens[start + t + 1]);
        }
        plait_data_close(d);
    }
}

static plait_status open_path(const char *path, plait_data_format fmt, int32_t vocab, int32_t T, double val) {
    plait_data_options o = {.path = path, .format = fmt, .val_fraction = val, .vocab_size = vocab, .seq_len = T};
    plait_data *d = NULL;
    plait_status st = plait_data_open(&o, &d);
    plait_data_close(d);
    return st;
}

static void test_bad_files(void **state) {
    (void)state;
    char path[PATH_MAX];
    uint16_t tokens[64];
    for (int i = 0; i < 64; i++) tokens[i] = (uint16_t)i;

    /* A token beyond the vocabulary: named with file, byte offset and index. */
    tokens[37] = 300;
    snprintf(path, sizeof path, "%s/badtoken.bin", scratch);
    write_u16(path, tokens, 64, 1, 64);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 256, 8, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains(path);
    assert_error_contains("token 300 at byte offset 1098 (token index 37)");
    assert_error_contains("vocab_size = 256");
    tokens[37] = 37;

    /* Text bytes above a smaller vocabulary. */
    snprintf(path, sizeof path, "%s/text.txt", scratch);
    write_bytes(path, "hello world, hello plait", 24);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 100, 4, 0.0), PLAIT_ERR_PROTOCOL);
    assert_error_contains("token 104 at byte offset 0 (token index 0)");
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 128, 4, 0.0), PLAIT_OK);

    /* llm.c header whose count does not match the size (truncated). */
    snprintf(path, sizeof path, "%s/short.bin", scratch);
    write_u16(path, tokens, 64, 1, 80);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_U16, 256, 8, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("header says 80 tokens");

    /* Raw uint16 with an odd size. */
    snprintf(path, sizeof path, "%s/odd.bin", scratch);
    write_bytes(path, tokens, 33);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 256, 8, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("whole number of uint16 tokens");

    /* llm.c's uint32 variant with a wrong version (7 is its uint32 version). */
    snprintf(path, sizeof path, "%s/u32.bin", scratch);
    int32_t h[256] = {20240801, 1, 0};
    write_bytes(path, h, sizeof h);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 256, 8, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("u32.bin: byte 4: llm.c header version 1 is not supported with magic 20240801");

    /* Too short for one sequence, in either split. */
    snprintf(path, sizeof path, "%s/tiny.txt", scratch);
    write_bytes(path, "abcdefgh", 8);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 256, 8, 0.0), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("too short");
    snprintf(path, sizeof path, "%s/valshort.txt", scratch);
    make_text(path, 100);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 256, 16, 0.1), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("10 for validation");
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 256, 16, 0.2), PLAIT_OK);

    /* Missing file and empty file. */
    snprintf(path, sizeof path, "%s/missing.txt", scratch);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 256, 8, 0.1), PLAIT_ERR_SYSTEM);
    assert_error_contains(path);
    snprintf(path, sizeof path, "%s/empty.txt", scratch);
    write_bytes(path, "", 0);
    assert_int_not_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 256, 8, 0.1), PLAIT_OK);
}

/* Every file is what it is read as, or refused naming why: an llm.c header
 * one bit off is not taken for raw tokens (it fits the vocabulary), nor a
 * text file for tokens, nor a token file for text, nor a compressed or a
 * weights file for either; a list mixing formats is refused. */
static void test_formats_recognised(void **state) {
    (void)state;
    enum { N = 2000 };
    uint16_t tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (uint16_t)(i * 131 % 50257);
    char path[PATH_MAX], other[PATH_MAX];

    snprintf(path, sizeof path, "%s/flip.bin", scratch);
    write_u16(path, tokens, N, 1, N);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint8_t b0;
    assert_int_equal(fread(&b0, 1, 1, f), 1);
    b0 ^= 0x40; /* 20240520 -> 20240584: bytes 0-3 as two tokens still fit a 65536-id vocabulary */
    fseek(f, 0, SEEK_SET);
    fwrite(&b0, 1, 1, f);
    fclose(f);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 65536, 16, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("flip.bin: byte 0: magic 20240584 is not llm.c's");
    assert_error_contains("a damaged header; refusing to read the file as raw uint16 tokens");
    /* the magic replaced whole, the rest of the header intact */
    int32_t junk = 0x12345678;
    f = fopen(path, "r+b");
    fwrite(&junk, 4, 1, f);
    fclose(f);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 65536, 16, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("a damaged header");
    /* the same file read as text */
    write_u16(path, tokens, N, 1, N);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_TEXT, 65536, 16, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("starts with an llm.c token-file header (magic 20240520 at byte 0)");
    /* raw tokens read as text: a NUL byte */
    snprintf(path, sizeof path, "%s/raw-as-text.txt", scratch);
    write_u16(path, tokens, N, 0, 0);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 65536, 16, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("raw-as-text.txt is read as text");
    assert_error_contains("byte 0 is NUL");
    /* text named *.bin */
    snprintf(path, sizeof path, "%s/text.bin", scratch);
    static const char prose[] = "It was the best of times, it was the worst of times.\n";
    write_bytes(path, prose, sizeof prose - 1);
    assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 65536, 4, 0.1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("text.bin has no llm.c header and its first 53 bytes are text");
    /* known binary files, either way */
#define BYTES(lit) lit, sizeof lit - 1
    static const struct {
        const char *name, *want, *bytes;
        size_t n;
    } foreign[] = {
        {"x.bin", "gzip-compressed", BYTES("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" "abcdefgh")},
        {"x.txt", "zip archive", BYTES("PK\x03\x04\x14\x00\x00\x00\x08\x00" "abcdefgh")},
        {"y.bin", "safetensors file", BYTES("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{}}        ")},
        {"z.bin", "NumPy .npy file", BYTES("\x93NUMPY\x01\x00v\x00{'descr': '<u2', 'fortran_order': False}")},
    };
#undef BYTES
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch, foreign[i].name);
        write_bytes(path, foreign[i].bytes, foreign[i].n);
        assert_int_equal(open_path(path, PLAIT_DATA_FORMAT_AUTO, 65536, 4, 0.0), PLAIT_ERR_PROTOCOL);
        assert_error_contains(foreign[i].want);
    }

    /* a list mixing formats: llm.c and raw uint16, uint16 and text */
    snprintf(path, sizeof path, "%s/llmc-a.bin", scratch);
    write_u16(path, tokens, N, 1, N);
    snprintf(other, sizeof other, "%s/raw-b.bin", scratch);
    write_u16(other, tokens, N, 0, 0);
    const char *mixed[2] = {path, other};
    plait_data_options o = {.paths = mixed, .n_paths = 2, .val_fraction = 0.1, .vocab_size = 65536, .seq_len = 16};
    plait_data *d = NULL;
    assert_int_equal(plait_data_open(&o, &d), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("[data] files mix formats");
    assert_error_contains("llmc-a.bin is llm.c uint16 tokens but");
    assert_error_contains("raw-b.bin is raw uint16 tokens (no header)");
    snprintf(other, sizeof other, "%s/text-c.txt", scratch);
    make_text(other, 3000);
    assert_int_equal(plait_data_open(&o, &d), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("text-c.txt is text (a token per byte)");
    /* files of one format still read back to back */
    snprintf(other, sizeof other, "%s/llmc-b.bin", scratch);
    write_u16(other, tokens, N, 1, N);
    assert_int_equal(plait_data_open(&o, &d), PLAIT_OK);
    assert_int_equal(plait_data_tokens(d), 2 * N);
    plait_data_close(d);
}

/* The bundled corpus, found through the config's default path. */
static void test_bundled_corpus(void **state) {
    (void)state;
    plait_config *cfg = config_from("[model]\nblock_size = 64\n");
    plait_data *d;
    plait_status st = plait_data_open_config(cfg, 8, &d);
    if (st != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_data_format_of(d), PLAIT_DATA_FORMAT_TEXT);
    assert_true(plait_data_tokens(d) > 300000 && plait_data_tokens(d) <= 2000000);
    for (int64_t i = 0; i < plait_data_tokens(d); i++) {
        int32_t t = plait_data_token(d, i);
        assert_true(t == '\n' || (t >= 32 && t < 127));
    }
    int32_t tok[4 * 64];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 0, 0, 4, 64, tok, NULL), PLAIT_OK);
    plait_data_close(d);

    plait_config *bad = config_from("[data]\npath = no/such/file.txt\n");
    assert_int_equal(plait_data_open_config(bad, 8, &d), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("no/such/file.txt: no such file (tried no/such/file.txt");
    plait_config_free(bad);
    plait_config_free(cfg);
}

/* A text file of n bytes cycling through `alphabet`. */
static void make_cycle(const char *path, size_t n, const char *alphabet) {
    unsigned char *buf = malloc(n);
    size_t m = strlen(alphabet);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)alphabet[(i * 7 + i / 13) % m];
    write_bytes(path, buf, n);
    free(buf);
}

/* A blend of two datasets, letters (two files) and digits (one), read
 * with the weights given. */
static plait_status open_blend(double wa, double wb, size_t digits, double val, plait_data **d) {
    char a1[PATH_MAX], a2[PATH_MAX], b[PATH_MAX];
    snprintf(a1, sizeof a1, "%s/letters-1.txt", scratch);
    snprintf(a2, sizeof a2, "%s/letters-2.txt", scratch);
    snprintf(b, sizeof b, "%s/digits-%zu.txt", scratch, digits);
    make_cycle(a1, 3000, "abcdefghijklmnopqrstuvwxyz");
    make_cycle(a2, 2000, "abcdefghijklmnopqrstuvwxyz");
    make_cycle(b, digits, "0123456789");
    const char *paths[] = {a1, a2, b};
    const int set_files[] = {2, 1};
    const double weights[] = {wa, wb};
    plait_data_options o = {.paths = paths,
                            .n_paths = 3,
                            .val_fraction = val,
                            .vocab_size = 256,
                            .seq_len = 16,
                            .seed = 7,
                            .n_sets = 2,
                            .set_files = set_files,
                            .weights = weights};
    return plait_data_open(&o, d);
}

/* Which dataset a sequence came from: 0 letters, 1 digits, -1 both (a
 * sequence that ran from one into the other). */
static int dataset_of(const int32_t *tok, const int32_t *tgt, int T) {
    int letters = 0, digits = 0;
    for (int t = 0; t < T; t++) {
        letters += tok[t] >= 'a' && tok[t] <= 'z';
        digits += tok[t] >= '0' && tok[t] <= '9';
    }
    letters += tgt[T - 1] >= 'a' && tgt[T - 1] <= 'z';
    digits += tgt[T - 1] >= '0' && tgt[T - 1] <= '9';
    return letters == T + 1 ? 0 : digits == T + 1 ? 1 : -1;
}

/* A weighted blend: each sequence inside one dataset, the datasets drawn
 * in the weights' proportion, a dataset of weight 0 never read, the same
 * sequences whatever the micro-batch size, the stream's CRC following the
 * weights, a dataset too short for a sequence refused. */
static void test_blend(void **state) {
    (void)state;
    enum { T = 16, B = 8, STEPS = 500 };
    plait_data *d;
    assert_int_equal(open_blend(3, 1, 4000, 0, &d), PLAIT_OK);
    assert_int_equal(plait_data_sets(d), 2);
    assert_true(plait_data_set_share(d, 0) == 0.75 && plait_data_set_tokens(d, 0) == 5000);
    assert_true(plait_data_set_share(d, 1) == 0.25 && plait_data_set_tokens(d, 1) == 4000);
    int32_t tok[B * T], tgt[B * T], one[T], one_tgt[T];
    int count[2] = {0, 0};
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, s, 0, B, T, tok, tgt), PLAIT_OK);
        for (int r = 0; r < B; r++) {
            int k = dataset_of(tok + r * T, tgt + r * T, T);
            if (k < 0) fail_msg("step %d row %d mixes the datasets", s, r);
            count[k]++;
            /* the same sequence read in micro-batches of 1 */
            assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, s, r, 1, T, one, one_tgt), PLAIT_OK);
            assert_memory_equal(one, tok + r * T, sizeof one);
        }
    }
    /* 4,000 draws at 3:1: 3,000 expected letters, the binomial's sd 27 */
    if (count[0] < 2850 || count[0] > 3150) fail_msg("letters drawn %d times of 4000 at weight 3:1", count[0]);
    const uint32_t crc31 = plait_data_train_crc32c(d);
    plait_data_close(d);

    assert_int_equal(open_blend(0, 1, 4000, 0, &d), PLAIT_OK);
    for (int s = 0; s < 50; s++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, s, 0, B, T, tok, tgt), PLAIT_OK);
        for (int r = 0; r < B; r++) assert_int_equal(dataset_of(tok + r * T, tgt + r * T, T), 1);
    }
    assert_true(plait_data_train_crc32c(d) != crc31);
    plait_data_close(d);
    assert_int_equal(open_blend(1, 0, 10, 0, &d), PLAIT_OK); /* too short, but never read */
    plait_data_close(d);

    assert_int_equal(open_blend(1, 1, 10, 0, &d), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("[data] weights: dataset 2 (");
    assert_error_contains("has weight 1 but 10 training tokens, fewer than [model] block_size + 1 = 17");
    /* the validation tail comes out of the last dataset */
    assert_int_equal(open_blend(1, 1, 500, 0.1, &d), PLAIT_ERR_INVALID_CONFIG); /* 550 held out */
    assert_error_contains("the validation split took its tail");
}

/* [data] weights against [data] path's patterns. */
static void test_blend_config(void **state) {
    (void)state;
    static const struct {
        const char *ini, *want;
    } bad[] = {
        {"[data]\npath = a.bin, b/*.bin\nweights = 1\n",
         "gives 1 weight for 2 patterns of [data] path = a.bin, b/*.bin"},
        {"[data]\npath = a.bin b.bin\nweights = 0.5, x\n", "'x' is not a number >= 0"},
        {"[data]\npath = a.bin b.bin\nweights = 0.5, -1\n", "'-1' is not a number >= 0"},
        {"[data]\npath = a.bin b.bin\nweights = 0 0\n", "every weight is 0"},
        {"[data]\npath = a.bin b.bin\nweights = 1 1\nsampling = epochs\n",
         "[data] sampling = epochs (test.ini:4) beside a blend ([data] weights = 1 1, test.ini:3)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        plait_config *cfg = config_from(bad[i].ini);
        int n = -1;
        assert_int_equal(plait_data_check_weights(cfg, NULL, 0, &n), PLAIT_ERR_INVALID_CONFIG);
        assert_error_contains(bad[i].want);
        plait_config_free(cfg);
    }
    plait_config *cfg = config_from("[data]\npath = a.bin,\tb/*.bin c.bin\nweights = 0.5, 0.25 0.25\n");
    double w[3];
    int n = 0;
    assert_int_equal(plait_data_check_weights(cfg, w, 3, &n), PLAIT_OK);
    assert_int_equal(n, 3);
    assert_true(w[0] == 0.5 && w[1] == 0.25 && w[2] == 0.25);
    plait_config_free(cfg);
    cfg = config_from("[data]\npath = a.bin b.bin\n");
    assert_int_equal(plait_data_check_weights(cfg, w, 3, &n), PLAIT_OK);
    assert_int_equal(n, 0); /* no blend */
    plait_config_free(cfg);
}

/* [data] sampling = epochs: every training window once an epoch, each
 * epoch in another order, the same sequences whatever the micro-batches;
 * the epoch permutation itself a bijection at awkward sizes. */
static void test_epochs(void **state) {
    (void)state;
    const int32_t T = 10, GB = 6;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/text-epochs.txt", scratch);
    make_text(path, 1000);
    plait_data_options o = {.path = path,
                            .val_fraction = 0.25,
                            .vocab_size = 256,
                            .seq_len = T,
                            .seed = 5,
                            .epochs = 1,
                            .global_batch = GB};
    plait_data *d;
    if (plait_data_open(&o, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
    const int64_t W = plait_data_epoch_windows(d);
    assert_int_equal(W, (750 - 1) / T); /* 74 windows of 11 tokens in the 750 training tokens */
    int64_t order[2][74];
    for (int64_t i = 0; i < 2 * W; i++) { /* two epochs, sample by sample */
        int64_t start = plait_data_sequence_start(d, PLAIT_DATA_TRAIN, i / GB, i % GB);
        assert_int_equal(start % T, 0);
        assert_true(start >= 0 && start + T + 1 <= 750);
        order[i / W][i % W] = start / T;
    }
    for (int e = 0; e < 2; e++) {
        int seen[74] = {0};
        for (int64_t k = 0; k < W; k++) seen[order[e][k]]++;
        for (int64_t w = 0; w < W; w++)
            if (seen[w] != 1) fail_msg("epoch %d read window %lld %d times", e, (long long)w, seen[w]);
    }
    assert_memory_not_equal(order[0], order[1], sizeof order[0]);
    /* a step read as 1 x 6 or 6 x 1 rows: the same tokens */
    int32_t whole[6 * 10], one[10];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 13, 0, GB, T, whole, NULL), PLAIT_OK);
    for (int g = 0; g < GB; g++) {
        assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, 13, g, 1, T, one, NULL), PLAIT_OK);
        assert_memory_equal(one, whole + g * T, sizeof one);
    }
    /* another seed, another order; the random sampling's CRC differs */
    plait_data *r;
    o.seed = 6;
    if (plait_data_open(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    int differ = 0;
    for (int64_t i = 0; i < W; i++)
        differ += plait_data_sequence_start(r, PLAIT_DATA_TRAIN, i / GB, i % GB) / T != order[0][i];
    assert_true(differ > W / 2);
    plait_data_close(r);
    o.epochs = 0;
    if (plait_data_open(&o, &r) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_data_epoch_windows(r), 0);
    assert_true(plait_data_train_crc32c(r) != plait_data_train_crc32c(d));
    plait_data_close(r);
    plait_data_close(d);
    static const int64_t sizes[] = {1, 2, 3, 5, 17, 64, 65, 1000, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        char *hit = calloc((size_t)sizes[k], 1);
        for (int64_t g = 0; g < sizes[k]; g++) {
            int64_t w = plait_epoch_window(42, 3 * sizes[k] + g, sizes[k]);
            assert_true(w >= 0 && w < sizes[k]);
            if (hit[w]++) fail_msg("window %lld of %lld taken twice in an epoch", (long long)w, (long long)sizes[k]);
        }
        free(hit);
    }
}

/* [data] skip_batches: the list parsed, sorted and merged, each step's
 * batch past the skipped ones, the data reading the mapped step; bad
 * items refused naming the key. */
static void test_skip_batches(void **state) {
    (void)state;
    plait_config *cfg = config_from("[data]\nskip_batches = 5, 2-3 4\t9-9 ,12-13\n");
    plait_batch_skip k;
    assert_int_equal(plait_batch_skip_parse(cfg, &k), PLAIT_OK);
    plait_config_free(cfg);
    assert_int_equal(k.n, 3); /* 2-5 merged, 9, 12-13 */
    assert_true(k.lo[0] == 2 && k.hi[0] == 5 && k.lo[1] == 9 && k.hi[1] == 9 && k.lo[2] == 12 && k.hi[2] == 13);
    assert_int_equal(plait_batch_skip_count(&k), 7);
    /* steps 1.. (metrics.csv's numbers) read batches 1, 6, 7, 8, 10, 11, 14, 15 */
    static const int64_t want[] = {1, 6, 7, 8, 10, 11, 14, 15};
    for (int64_t s = 0; s < 8; s++) assert_int_equal(plait_batch_skip_map(&k, s) + 1, want[s]);
    plait_batch_skip none = {0};
    assert_int_equal(plait_batch_skip_map(&none, 41), 41);
    /* the data: step 1 (0-based) reads step 5's sequences */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/text-skip.txt", scratch);
    make_text(path, 3000);
    plait_data_options o = {.path = path, .val_fraction = 0.1, .vocab_size = 256, .seq_len = 16, .seed = 3};
    plait_data *plain, *skipping;
    if (plait_data_open(&o, &plain) != PLAIT_OK) fail_msg("%s", plait_last_error());
    o.skip = &k;
    if (plait_data_open(&o, &skipping) != PLAIT_OK) fail_msg("%s", plait_last_error());
    for (int64_t s = 0; s < 8; s++)
        for (int64_t g = 0; g < 4; g++)
            assert_int_equal(plait_data_sequence_start(skipping, PLAIT_DATA_TRAIN, s, g),
                             plait_data_sequence_start(plain, PLAIT_DATA_TRAIN, want[s] - 1, g));
    assert_int_equal(plait_data_sequence_start(skipping, PLAIT_DATA_VAL, 3, 1),
                     plait_data_sequence_start(plain, PLAIT_DATA_VAL, 3, 1));
    plait_data_close(plain);
    plait_data_close(skipping);
    static const char *const bad[] = {"0", "3-2", "x", "4-", "-4", "1.5", "7-9x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ini[96];
        snprintf(ini, sizeof ini, "[data]\nskip_batches = 10, %s\n", bad[i]);
        cfg = config_from(ini);
        assert_int_equal(plait_batch_skip_parse(cfg, &k), PLAIT_ERR_INVALID_CONFIG);
        char want_text[64];
        snprintf(want_text, sizeof want_text, "test.ini:2: [data] skip_batches = 10, %s: '%s' is not", bad[i], bad[i]);
        assert_error_contains(want_text);
        plait_config_free(cfg);
    }
}

/* [data] eod_mask_loss: a target whose input token is the end of a
 * document is -1, and the step's count of targets that count is the
 * batch's tokens less those. */
static void test_eod_mask(void **state) {
    (void)state;
    const int32_t B = 4, T = 16, eod = text_byte(5); /* a byte the pattern holds now and then */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/text-eod.txt", scratch);
    make_text(path, 4000);
    plait_data_options o = {.path = path, .val_fraction = 0.1, .vocab_size = 256, .seq_len = T, .seed = 2};
    plait_data *plain, *masked;
    if (plait_data_open(&o, &plain) != PLAIT_OK) fail_msg("%s", plait_last_error());
    o.mask_eod = 1;
    o.eod_token = eod;
    if (plait_data_open(&o, &masked) != PLAIT_OK) fail_msg("%s", plait_last_error());
    int64_t seen = 0;
    for (int split = 0; split < 2; split++)
        for (int64_t step = 0; step < 40; step++) {
            int64_t counted = 0, want = 2 * B * T;
            for (int64_t j = 0; j < 2; j++) {
                int32_t tok[4 * 16], tgt[4 * 16], ptok[4 * 16], ptgt[4 * 16];
                assert_int_equal(plait_data_batch(masked, split, step, j, B, T, tok, tgt), PLAIT_OK);
                assert_int_equal(plait_data_batch(plain, split, step, j, B, T, ptok, ptgt), PLAIT_OK);
                assert_memory_equal(tok, ptok, sizeof tok);
                for (int i = 0; i < B * T; i++) {
                    assert_int_equal(tgt[i], tok[i] == eod ? -1 : ptgt[i]);
                    want -= tok[i] == eod;
                    seen += tok[i] == eod;
                }
            }
            assert_int_equal(plait_data_step_targets(masked, split, step, 2 * B, T, &counted), PLAIT_OK);
            assert_int_equal(counted, want);
            assert_int_equal(plait_data_step_targets(plain, split, step, 2 * B, T, &counted), PLAIT_OK);
            assert_int_equal(counted, 2 * B * T);
        }
    assert_true(seen > 10); /* the test masked something */
    plait_data_close(plain);
    plait_data_close(masked);
}

/* A validation set alone ([data] val_sets): its VAL reads are the windows
 * the same file gives as a run's val_path; a TRAIN read is refused; the
 * key's items parse, and malformed ones are refused naming the line. */
static void test_val_sets(void **state) {
    (void)state;
    char train[PATH_MAX], val[PATH_MAX];
    snprintf(train, sizeof train, "%s/text-vs-train.txt", scratch);
    snprintf(val, sizeof val, "%s/text-vs-val.txt", scratch);
    make_text(train, 3000);
    make_text(val, 700);
    const char *const vals[] = {val};
    plait_data_options o = {
        .path = train, .val_paths = vals, .n_val_paths = 1, .vocab_size = 256, .seq_len = 16, .seed = 4};
    plait_data *run, *set;
    if (plait_data_open(&o, &run) != PLAIT_OK) fail_msg("%s", plait_last_error());
    o.val_only = 1;
    if (plait_data_open(&o, &set) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_data_split_tokens(set, PLAIT_DATA_VAL), plait_data_split_tokens(run, PLAIT_DATA_VAL));
    assert_int_equal(plait_data_split_tokens(set, PLAIT_DATA_TRAIN), 0);
    for (int64_t j = 0; j < 12; j++) {
        int32_t tok[2 * 16], tgt[2 * 16], rtok[2 * 16], rtgt[2 * 16];
        assert_int_equal(plait_data_batch(set, PLAIT_DATA_VAL, 0, j, 2, 16, tok, tgt), PLAIT_OK);
        assert_int_equal(plait_data_batch(run, PLAIT_DATA_VAL, 0, j, 2, 16, rtok, rtgt), PLAIT_OK);
        assert_memory_equal(tok, rtok, sizeof tok);
        assert_memory_equal(tgt, rtgt, sizeof tgt);
    }
    int32_t tok[16];
    assert_int_equal(plait_data_batch(set, PLAIT_DATA_TRAIN, 0, 0, 1, 16, tok, NULL), PLAIT_ERR_INVALID_ARG);
    plait_data_close(run);
    plait_data_close(set);

    plait_config *cfg = config_from("[data]\nval_sets = wiki=a.bin, code-2=b/*.bin\tc_3=c\n");
    plait_val_sets v;
    assert_int_equal(plait_val_sets_parse(cfg, &v), PLAIT_OK);
    plait_config_free(cfg);
    assert_int_equal(v.n, 3);
    assert_string_equal(v.name[1], "code-2");
    assert_string_equal(v.pattern[1], "b/*.bin");
    assert_string_equal(v.name[2], "c_3");
    static const char *const bad[][2] = {{"a=x b", "'b' is not NAME=PATTERN"},
                                         {"=x", "'=x' is not NAME=PATTERN"},
                                         {"a=", "'a=' is not NAME=PATTERN"},
                                         {"a.b=x", "the name 'a.b' is not"},
                                         {"a=x a=y", "names 'a' twice"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ini[96];
        snprintf(ini, sizeof ini, "[data]\nval_sets = %s\n", bad[i][0]);
        cfg = config_from(ini);
        assert_int_equal(plait_val_sets_parse(cfg, &v), PLAIT_ERR_INVALID_CONFIG);
        assert_error_contains("test.ini:2: [data] val_sets");
        assert_error_contains(bad[i][1]);
        plait_config_free(cfg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_are_deterministic),
        cmocka_unit_test(test_batches_independent_of_micro_batch_size),
        cmocka_unit_test(test_split_boundaries),
        cmocka_unit_test(test_no_validation_split),
        cmocka_unit_test(test_u16_files),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_formats_recognised),
        cmocka_unit_test(test_bundled_corpus),
        cmocka_unit_test(test_blend),
        cmocka_unit_test(test_blend_config),
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_skip_batches),
        cmocka_unit_test(test_eod_mask),
        cmocka_unit_test(test_val_sets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
