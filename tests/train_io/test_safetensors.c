/* safetensors: round trip, strict refusal of damaged or foreign files, the
 * JSON subset parser, CRC32C. */
#include "train_io_test.h"

#include <math.h>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/safetensors_json.h"

static char scratch[PATH_MAX];

static int setup(void **state) {
    (void)state;
    make_scratch(scratch, sizeof scratch, "st");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(scratch);
    return 0;
}

static void path_of(char *buf, const char *name) { snprintf(buf, PATH_MAX, "%s/%s", scratch, name); }

/* Write a small file: a [2,3] tensor, a [4] tensor, a scalar, an empty one. */
static void write_sample(const char *path) {
    plait_st_writer *w;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    assert_int_equal(plait_st_writer_metadata(w, "model", "gpt \"tiny\"\n"), PLAIT_OK);
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s0[2] = {0, 5};
    assert_int_equal(plait_st_writer_declare(w, "transformer.h.0.attn.c_attn.weight", 2, s23), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(w, "b", 1, s4), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(w, "scalar", 0, NULL), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(w, "empty", 2, s0), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(w, "b", 1, s4), PLAIT_ERR_INVALID_ARG);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {-1.5f, 0.25f, 1e-30f, 3e30f}, s = 42.0f;
    /* Out of declaration order and in chunks. */
    assert_int_equal(plait_st_writer_write(w, "b", b, 3), PLAIT_OK);
    assert_int_equal(plait_st_writer_write(w, "transformer.h.0.attn.c_attn.weight", a, 6), PLAIT_OK);
    assert_int_equal(plait_st_writer_write(w, "b", b + 3, 1), PLAIT_OK);
    assert_int_equal(plait_st_writer_write(w, "b", b, 1), PLAIT_ERR_INVALID_ARG); /* too many */
    assert_int_equal(plait_st_writer_declare(w, "late", 1, s4), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_st_writer_finish(w, NULL), PLAIT_ERR_INVALID_ARG); /* scalar not written */
    assert_error_contains("scalar has 0 of its 1 elements");
    assert_int_equal(plait_st_writer_write(w, "scalar", &s, 1), PLAIT_OK);
    uint64_t bytes = 0;
    assert_int_equal(plait_st_writer_finish(w, &bytes), PLAIT_OK);
    assert_int_equal(access(path, F_OK), -1); /* only the temp file exists until commit */
    assert_int_equal(plait_st_writer_commit(w), PLAIT_OK);
    assert_int_equal(file_size(path), bytes);
}

static void test_round_trip(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_of(path, "rt.safetensors");
    write_sample(path);
    plait_st_file *f;
    if (plait_st_open(path, PLAIT_ST_VERIFY, &f) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_int_equal(plait_st_count(f), 4);
    const plait_st_tensor *t = plait_st_find(f, "transformer.h.0.attn.c_attn.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->numel, 6);
    assert_int_equal(t->offset, 0); /* declaration order sets the layout */
    for (int i = 0; i < 6; i++) assert_true(t->data[i] == (float)(i + 1));
    assert_true(t->has_crc);
    t = plait_st_find(f, "b");
    assert_non_null(t);
    assert_int_equal(t->offset, 24);
    assert_true(t->data[0] == -1.5f && t->data[2] == 1e-30f && t->data[3] == 3e30f);
    t = plait_st_find(f, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_true(t->data[0] == 42.0f);
    t = plait_st_find(f, "empty");
    assert_int_equal(t->numel, 0);
    assert_null(plait_st_find(f, "missing"));
    assert_string_equal(plait_st_metadata(f, "model"), "gpt \"tiny\"\n");
    assert_string_equal(plait_st_metadata(f, "format"), "pt");
    assert_null(plait_st_metadata(f, "nope"));
    plait_st_close(f);

    /* The data starts 8-byte aligned and the header is valid JSON text. */
    FILE *fp = fopen(path, "rb");
    uint64_t n;
    assert_int_equal(fread(&n, 8, 1, fp), 1);
    fclose(fp);
    assert_int_equal((8 + n) % 8, 0);
}

static void test_abort_leaves_previous_file(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_of(path, "keep.safetensors");
    write_sample(path);
    size_t before = file_size(path);
    plait_st_writer *w;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    int64_t s[1] = {3};
    float x[3] = {1, 2, 3};
    assert_int_equal(plait_st_writer_declare(w, "x", 1, s), PLAIT_OK);
    assert_int_equal(plait_st_writer_write(w, "x", x, 3), PLAIT_OK);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", plait_st_writer_temp_path(w));
    assert_int_equal(access(tmp, F_OK), 0);
    plait_st_writer_abort(w);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(file_size(path), before);
    plait_st_file *f;
    assert_int_equal(plait_st_open(path, PLAIT_ST_VERIFY, &f), PLAIT_OK);
    plait_st_close(f);
}

/* Build a file from a raw header and data, as another writer (or an
 * attacker) could. */
static void write_raw(const char *path, const char *header, const void *data, size_t data_bytes, int64_t len_override) {
    size_t hl = strlen(header);
    uint64_t n = len_override >= 0 ? (uint64_t)len_override : hl;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&n, 8, 1, f), 1);
    assert_int_equal(fwrite(header, 1, hl, f), hl);
    if (data_bytes) assert_int_equal(fwrite(data, 1, data_bytes, f), data_bytes);
    fclose(f);
}

/* Writes `header` padded with spaces to a multiple of 8 (as writers do)
 * unless `exact`. */
static plait_status open_raw_as(const char *header, size_t data_bytes, int64_t len_override, int exact) {
    char path[PATH_MAX], padded[1024];
    path_of(path, "raw.safetensors");
    snprintf(padded, sizeof padded, "%s", header);
    while (!exact && strlen(padded) % 8) strcat(padded, " ");
    float data[64] = {0};
    write_raw(path, padded, data, data_bytes, len_override);
    plait_st_file *f = NULL;
    plait_status st = plait_st_open(path, PLAIT_ST_VERIFY, &f);
    plait_st_close(f);
    return st;
}

static plait_status open_raw(const char *header, size_t data_bytes, int64_t len_override) {
    return open_raw_as(header, data_bytes, len_override, 0);
}

static void test_foreign_file_without_checksums(void **state) {
    (void)state;
    /* What safetensors' save_file writes: no metadata, offsets, 8-byte padding. */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}";
    assert_int_equal(open_raw(h, 12, -1), PLAIT_OK);
}

static void test_refuses_damaged_files(void **state) {
    (void)state;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    assert_int_equal(open_raw(ok, 8, -1), PLAIT_OK);

    /* Truncated data, extra data. */
    assert_int_equal(open_raw(ok, 4, -1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("truncated");
    assert_int_equal(open_raw(ok, 12, -1), PLAIT_ERR_PROTOCOL);
    assert_error_contains("bytes after the last tensor");
    /* Header length beyond the file, absurd, or too small. */
    assert_int_equal(open_raw(ok, 8, 100000), PLAIT_ERR_PROTOCOL);
    assert_error_contains("does not fit");
    assert_int_equal(open_raw(ok, 8, (int64_t)1 << 40), PLAIT_ERR_PROTOCOL);
    assert_error_contains("exceeds");
    assert_int_equal(open_raw(ok, 8, 1), PLAIT_ERR_PROTOCOL);
    /* Bad JSON. */
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("trailing comma");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("only integers");
    assert_int_equal(open_raw("[1,2]   ", 0, -1), PLAIT_ERR_PROTOCOL);
    assert_int_equal(open_raw_as("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}\n       ", 8, -1, 1),
                     PLAIT_ERR_PROTOCOL); /* padding must be spaces */
    /* Wrong dtype, shape/offset mismatch, out of bounds, overlap, gap. */
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("dtype BF16");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("its shape needs 12");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("gaps or overlaps");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                              12, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("gaps or overlaps");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("unknown field");
    assert_int_equal(open_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                              16, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("duplicate");
    assert_int_equal(open_raw("{\"__metadata__\":{\"k\":1}}      ", 0, -1), PLAIT_ERR_PROTOCOL);
    /* Unaligned data start: fine without data (8 + 6 bytes), refused with
     * float data at byte 8 + 54. */
    assert_int_equal(open_raw_as("{    }", 0, -1, 1), PLAIT_OK);
    assert_int_equal(open_raw_as("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, 1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("aligned");
    /* Not a file at all. */
    plait_st_file *f;
    char path[PATH_MAX];
    path_of(path, "short.safetensors");
    write_bytes(path, "abc", 3);
    assert_int_equal(plait_st_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    assert_error_contains(path);
    path_of(path, "absent.safetensors");
    assert_int_equal(plait_st_open(path, 0, &f), PLAIT_ERR_SYSTEM);
}

/* A writer storing bfloat16 or float16: each value rounded to nearest, ties
 * to even (bit patterns worked out by hand), NaN kept, infinity kept; the
 * file reads back (checksums verified) as those values; float16 refuses a
 * value past 65504 naming the tensor and element; the dtype is set before
 * any declaration or refused. */
static void test_written_halves(void **state) {
    (void)state;
    const float in[] = {1.0f,
                        -2.5f,
                        65504.0f,
                        65519.0f,
                        0x1p-24f,
                        0x1p-25f,
                        0x1.8p-25f,
                        0x1p-14f,
                        1.0f + 0x1p-11f,
                        1.0f + 0x3p-11f,
                        1.0f + 0x1p-8f,
                        1.0f + 0x3p-8f,
                        -0.15625f,
                        0.1f,
                        -INFINITY,
                        NAN,
                        0.0f,
                        -0.0f};
    const uint16_t f16[] = {0x3c00, 0xc100, 0x7bff, 0x7bff, 0x0001, 0x0000, 0x0001, 0x0400, 0x3c00,
                            0x3c02, 0x3c04, 0x3c0c, 0xb100, 0x2e66, 0xfc00, 0x7e00, 0x0000, 0x8000};
    const uint16_t bf16[] = {0x3f80, 0xc020, 0x4780, 0x4780, 0x3380, 0x3300, 0x3340, 0x3880, 0x3f80,
                             0x3f80, 0x3f80, 0x3f82, 0xbe20, 0x3dcd, 0xff80, 0x7fc0, 0x0000, 0x8000};
    const size_t n = sizeof in / sizeof in[0];
    for (int d = 0; d < 2; d++) {
        char path[PATH_MAX];
        path_of(path, d ? "f16.safetensors" : "bf16.safetensors");
        plait_st_writer *w;
        assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
        assert_int_equal(plait_st_writer_dtype(w, d ? PLAIT_ST_F16 : PLAIT_ST_BF16), PLAIT_OK);
        int64_t shape[1] = {(int64_t)n};
        assert_int_equal(plait_st_writer_declare(w, "x", 1, shape), PLAIT_OK);
        assert_int_equal(plait_st_writer_dtype(w, PLAIT_ST_F32), PLAIT_ERR_INVALID_ARG); /* too late */
        assert_int_equal(plait_st_writer_write(w, "x", in, 5), PLAIT_OK);
        assert_int_equal(plait_st_writer_write(w, "x", in + 5, n - 5), PLAIT_OK);
        assert_int_equal(plait_st_writer_commit(w), PLAIT_OK);
        plait_st_file *f = NULL;
        if (plait_st_open(path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &f) != PLAIT_OK) fail_msg("%s", plait_last_error());
        const plait_st_tensor *t = plait_st_find(f, "x");
        assert_non_null(t);
        assert_string_equal(t->dtype, d ? "F16" : "BF16");
        assert_int_equal(t->stored_bytes, 2 * n);
        const uint16_t *want = d ? f16 : bf16;
        for (size_t k = 0; k < n; k++) {
            uint16_t got;
            memcpy(&got, t->raw + 2 * k, 2);
            if (got != want[k])
                fail_msg("%s element %zu (%a): 0x%04x, not 0x%04x", d ? "F16" : "BF16", k, in[k], got, want[k]);
        }
        plait_st_close(f);
        /* the header alone: nothing converted, no data but the raw bytes */
        assert_int_equal(plait_st_open(path, PLAIT_ST_ANY_DTYPE, &f), PLAIT_OK);
        t = plait_st_find(f, "x");
        assert_true(t && t->data == NULL && t->raw != NULL);
        plait_st_close(f);
        assert_int_equal(plait_st_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    }
    char path[PATH_MAX];
    path_of(path, "f16-over.safetensors");
    plait_st_writer *w;
    assert_int_equal(plait_st_writer_create(path, &w), PLAIT_OK);
    assert_int_equal(plait_st_writer_dtype(w, PLAIT_ST_F16), PLAIT_OK);
    int64_t shape[1] = {3};
    assert_int_equal(plait_st_writer_declare(w, "big", 1, shape), PLAIT_OK);
    const float big[3] = {1.0f, 65520.0f, 70000.0f};
    assert_int_equal(plait_st_writer_write(w, "big", big, 3), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("tensor big holds 65520 at element 1, past float16's range (65504)");
    assert_int_equal(plait_st_writer_finish(w, NULL), PLAIT_ERR_INVALID_ARG);
    plait_st_writer_abort(w);
    assert_int_equal(access(path, F_OK), -1);
}

/* Valid files of other dtypes: F16, BF16 and F64 are converted to float32
 * when asked (PLAIT_ST_CONVERT), else named, never called damaged; an
 * integer dtype is named as not floating point; a file that is not
 * safetensors at all is named for what it is. */
static void test_dtypes_and_foreign_files(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_of(path, "halves.safetensors");
    /* h: F16 [1.0, -2.5, 65504, 2^-24 (the smallest subnormal)], b: BF16
     * [1.0, -0.15625], d: F64 [0.1], laid out as written */
    const uint16_t h16[4] = {0x3c00, 0xc100, 0x7bff, 0x0001}, b16[2] = {0x3f80, 0xbe20};
    const double d64 = 0.1;
    char header[256];
    snprintf(header, sizeof header,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
             "\"d\":{\"dtype\":\"F64\",\"shape\":[1,1],\"data_offsets\":[12,20]}}");
    while (strlen(header) % 8) strcat(header, " ");
    unsigned char data[20];
    memcpy(data, h16, 8);
    memcpy(data + 8, b16, 4);
    memcpy(data + 12, &d64, 8);
    write_raw(path, header, data, sizeof data, -1);
    plait_st_file *f = NULL;
    assert_int_equal(plait_st_open(path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &f), PLAIT_OK);
    const plait_st_tensor *t = plait_st_find(f, "h");
    assert_non_null(t);
    assert_string_equal(t->dtype, "F16");
    assert_true(t->data[0] == 1.0f && t->data[1] == -2.5f && t->data[2] == 65504.0f && t->data[3] == 0x1p-24f);
    t = plait_st_find(f, "b");
    assert_true(t->data[0] == 1.0f && t->data[1] == -0.15625f);
    t = plait_st_find(f, "d");
    assert_true(t->data[0] == 0.1f);
    assert_int_equal(t->bytes, 4);
    plait_st_close(f);
    f = NULL;
    assert_int_equal(plait_st_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
    assert_error_contains("tensor h has dtype F16: a valid safetensors file");
    if (strstr(plait_last_error(), "damaged")) fail_msg("a valid F16 file called damaged: %s", plait_last_error());

    assert_int_equal(open_raw("{\"q\":{\"dtype\":\"I8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("tensor q has dtype I8, which plait does not read");
    /* a foreign file (PLAIT_ST_CONVERT): an integer tensor is kept without
     * data for its reader to ignore or refuse; F32 data not 4-byte aligned
     * (a header of 107 bytes: "a" starts at byte 117) is copied, not damaged */
    path_of(path, "mixed.safetensors");
    const float two[2] = {1.5f, -3.25f};
    write_raw(path, "{\"q\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]}}", NULL, 0, -1);
    FILE *mf = fopen(path, "ab");
    unsigned char mask[2] = {1, 0};
    fwrite(mask, 1, 2, mf);
    fwrite(two, 4, 2, mf);
    fclose(mf);
    assert_int_equal(plait_st_open(path, PLAIT_ST_VERIFY, &f), PLAIT_ERR_PROTOCOL);
    assert_error_contains("tensor q has dtype U8, which plait does not read");
    assert_int_equal(plait_st_open(path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &f), PLAIT_OK);
    t = plait_st_find(f, "q");
    assert_null(t->data);
    assert_int_equal(plait_st_require_float(f, t), PLAIT_ERR_PROTOCOL);
    assert_error_contains("tensor q has dtype U8, which plait does not read");
    t = plait_st_find(f, "a");
    assert_int_equal(plait_st_require_float(f, t), PLAIT_OK);
    assert_true(((uintptr_t)t->raw & 3) != 0);
    assert_true(((uintptr_t)t->data & 3) == 0 && t->data[0] == 1.5f && t->data[1] == -3.25f);
    plait_st_close(f);
    f = NULL;
    assert_int_equal(open_raw("{\"q\":{\"dtype\":\"F7\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8, -1),
                     PLAIT_ERR_PROTOCOL);
    assert_error_contains("dtype \"F7\", which safetensors does not define");

    /* not safetensors at all */
    static const struct {
        const char *bytes, *want;
        size_t n;
    } foreign[] = {
        {"[model]\nn_layer = 2\nn_head = 4\n", "is text, not a safetensors file", 30},
        {"\x88\xd8\x34\x01\x01\x00\x00\x00\x02\x00\x00\x00", "is an llm.c token file", 12},
        {"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x00\x00", "is a gzip-compressed file", 12},
    };
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        path_of(path, "foreign.safetensors");
        write_bytes(path, foreign[i].bytes, foreign[i].n);
        assert_int_equal(plait_st_open(path, 0, &f), PLAIT_ERR_PROTOCOL);
        assert_error_contains(foreign[i].want);
    }
}

/* Any flipped bit of a plait-written file is refused: header (JSON or its
 * padding), tensor data, or the length prefix. */
static void test_bit_flips(void **state) {
    (void)state;
    char path[PATH_MAX], copy[PATH_MAX];
    path_of(path, "flip-src.safetensors");
    path_of(copy, "flip.safetensors");
    write_sample(path);
    size_t n = file_size(path);
    FILE *src = fopen(path, "rb");
    unsigned char *orig = malloc(n);
    assert_int_equal(fread(orig, 1, n, src), n);
    fclose(src);
    int refused = 0, tried = 0;
    for (size_t off = 0; off < n; off += 3) {
        write_bytes(copy, orig, n);
        flip_bit(copy, off, (int)(off % 8));
        plait_st_file *f = NULL;
        plait_status st = plait_st_open(copy, PLAIT_ST_VERIFY, &f);
        plait_st_close(f);
        tried++;
        if (st != PLAIT_OK) {
            refused++;
            assert_int_equal(st, PLAIT_ERR_PROTOCOL);
        } else {
            fail_msg("a flipped bit at byte %zu of %zu was not detected", off, n);
        }
    }
    assert_int_equal(refused, tried);
    /* A data flip is reported as the tensor's checksum. */
    write_bytes(copy, orig, n);
    flip_bit(copy, n - 40, 2);
    plait_st_file *f;
    assert_int_equal(plait_st_open(copy, PLAIT_ST_VERIFY, &f), PLAIT_ERR_PROTOCOL);
    assert_error_contains("checksum mismatch");
    /* Without VERIFY the file opens, and verifying the tensor finds it. */
    assert_int_equal(plait_st_open(copy, 0, &f), PLAIT_OK);
    int bad = 0;
    for (size_t i = 0; i < plait_st_count(f); i++)
        bad += plait_st_verify_tensor(f, plait_st_tensor_at(f, i)) != PLAIT_OK;
    assert_int_equal(bad, 1);
    plait_st_close(f);
    free(orig);
}

/* Two writers of one path at once (two exports into one directory) never
 * share a temporary file: each renames a whole file of its own, so the
 * result is one of them, never a mixture. */
static void test_two_writers_one_path(void **state) {
    (void)state;
    char path[PATH_MAX];
    path_of(path, "shared.safetensors");
    plait_st_writer *a, *b;
    int64_t shape[1] = {64};
    assert_int_equal(plait_st_writer_create(path, &a), PLAIT_OK);
    assert_int_equal(plait_st_writer_create(path, &b), PLAIT_OK);
    assert_string_not_equal(plait_st_writer_temp_path(a), plait_st_writer_temp_path(b));
    assert_int_equal(plait_st_writer_declare(a, "t", 1, shape), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(b, "t", 1, shape), PLAIT_OK);
    float ones[64], twos[64];
    for (int i = 0; i < 64; i++) ones[i] = 1, twos[i] = 2;
    for (int half = 0; half < 2; half++) { /* interleaved */
        assert_int_equal(plait_st_writer_write(a, "t", ones + 32 * half, 32), PLAIT_OK);
        assert_int_equal(plait_st_writer_write(b, "t", twos + 32 * half, 32), PLAIT_OK);
    }
    assert_int_equal(plait_st_writer_commit(a), PLAIT_OK);
    assert_int_equal(plait_st_writer_commit(b), PLAIT_OK);
    plait_st_file *f;
    assert_int_equal(plait_st_open(path, 0, &f), PLAIT_OK);
    const plait_st_tensor *t = plait_st_find(f, "t");
    assert_non_null(t);
    for (int i = 0; i < 64; i++) assert_true(t->data[i] == 2.0f);
    plait_st_close(f);
    /* and a link in place of the file is replaced, never written through */
    char target[PATH_MAX];
    path_of(target, "target");
    write_bytes(target, "keep", 4);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(plait_st_writer_create(path, &a), PLAIT_OK);
    assert_int_equal(plait_st_writer_declare(a, "t", 1, shape), PLAIT_OK);
    assert_int_equal(plait_st_writer_write(a, "t", ones, 64), PLAIT_OK);
    assert_int_equal(plait_st_writer_commit(a), PLAIT_OK);
    assert_int_equal(file_size(target), 4);
}

static void test_json_parser(void **state) {
    (void)state;
    plait_json_doc *doc;
    const char *good = " {\"a\": [1, -2, 9223372036854775807, -9223372036854775808], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\\\"\","
                       " \"o\": {}, \"e\": []} ";
    assert_int_equal(plait_json_parse(good, strlen(good), "t", &doc), PLAIT_OK);
    const plait_json *root = plait_json_root(doc);
    const plait_json *a = plait_json_get(root, "a");
    assert_int_equal(a->count, 4);
    assert_int_equal(a->child->num, 1);
    assert_int_equal(a->child->next->num, -2);
    assert_true(a->child->next->next->num == INT64_MAX);
    assert_true(a->child->next->next->next->num == INT64_MIN);
    assert_string_equal(plait_json_get(root, "s")->str, "x\xc3\xa9\xf0\x9f\x98\x80\n\"");
    assert_int_equal(plait_json_get(root, "o")->count, 0);
    assert_null(plait_json_get(root, "zz"));
    plait_json_free(doc);

    const char *bad[] = {
        "",          "{",           "{\"a\" 1}",          "{\"a\":1,}",        "[1 2]",
        "01",        "1.5",         "1e3",                "true",              "null",
        "\"\\x\"",   "\"\\u12\"",   "\"\\ud800\"",        "\"\\u0000\"",       "\"a\x01\"",
        "\"\xff\"",  "\"\xc0\xaf\"", "{\"a\":1,\"a\":2}", "[1] x",             "9223372036854775808",
        "\"abc",     "{1:2}",       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        plait_status st = plait_json_parse(bad[i], strlen(bad[i]), "bad", &doc);
        if (st == PLAIT_OK) fail_msg("accepted bad JSON #%zu: %s", i, bad[i]);
        assert_int_equal(st, PLAIT_ERR_PROTOCOL);
        assert_error_contains("bad: byte ");
    }
    /* Writer escapes what the parser reads back. */
    plait_jbuf b = {0};
    plait_jbuf_string(&b, "q\"b\\s\n\x01 end");
    assert_false(b.failed);
    assert_int_equal(plait_json_parse(b.data, b.len, "esc", &doc), PLAIT_OK);
    assert_string_equal(plait_json_root(doc)->str, "q\"b\\s\n\x01 end");
    plait_json_free(doc);
    plait_jbuf_free(&b);
}

static void test_crc32c(void **state) {
    (void)state;
    assert_int_equal(plait_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(plait_crc32c_portable(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(plait_crc32c(0, "", 0), 0);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 31 + 7);
    for (size_t n = 0; n < 40; n++) /* every tail length, both paths, chunked = whole */
        assert_int_equal(plait_crc32c(0, buf + 1, n + 900), plait_crc32c_portable(0, buf + 1, n + 900));
    uint32_t c = plait_crc32c(0, buf, 333);
    c = plait_crc32c(c, buf + 333, 667);
    assert_int_equal(c, plait_crc32c(0, buf, 1000));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_abort_leaves_previous_file),
        cmocka_unit_test(test_foreign_file_without_checksums),
        cmocka_unit_test(test_refuses_damaged_files),
        cmocka_unit_test(test_dtypes_and_foreign_files),
        cmocka_unit_test(test_written_halves),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_two_writers_one_path),
        cmocka_unit_test(test_json_parser),
        cmocka_unit_test(test_crc32c),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
