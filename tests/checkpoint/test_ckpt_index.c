/*
 * A sharded checkpoint's index (checkpoint/checkpoint_index.h): a tensor
 * saved as the slices of one layout (TP parts with groups and padding, each
 * cut into ZeRO ranges) reads back, for any other layout's slice and any
 * element range of it, exactly what the full tensor gives; the index
 * round-trips through its JSON; and an index that does not match its
 * tensors (a slice missing or repeated, out of its slice, a file not
 * listed, malformed) is refused naming the tensor.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_shard.h"
#include "runtime/error.h"

#define ROWS 10
#define COLS 6

static float g_full[ROWS * COLS];

/* The slices of a [ROWS, COLS] tensor under TP `save` (parts along its dim)
 * with each TP slice cut into `zero` ranges: data copied out of g_full. */
typedef struct saved {
    plait_ckpt_index_tensor t;
    plait_ckpt_slice slices[64];
    float *data[64];
} saved;

static void save_layout(saved *s, const plait_shard *save, int zero) {
    memset(s, 0, sizeof *s);
    s->t.name = "w";
    s->t.ndim = 2;
    s->t.shape[0] = ROWS;
    s->t.shape[1] = COLS;
    s->t.numel = ROWS * COLS;
    s->t.slices = s->slices;
    int parts = save->parts > 0 ? save->parts : 1;
    for (int p = 0; p < parts; p++) {
        plait_shard sh = *save;
        sh.index = p;
        size_t n;
        assert_int_equal(plait_shard_numel(2, s->t.shape, &sh, &n), PLAIT_OK);
        float *local = malloc(n * sizeof *local);
        assert_int_equal(plait_shard_extract(2, s->t.shape, &sh, g_full, 0, n, local), PLAIT_OK);
        size_t per = (n + (size_t)zero - 1) / (size_t)zero;
        for (int z = 0; z < zero; z++) {
            size_t a = (size_t)z * per, b = a + per < n ? a + per : n;
            if (a >= b) continue;
            int k = s->t.n_slices++;
            s->data[k] = malloc((b - a) * sizeof(float));
            memcpy(s->data[k], local + a, (b - a) * sizeof(float));
            s->slices[k] = (plait_ckpt_slice){.file = k, .shard = sh, .begin = a, .end = b, .data = s->data[k]};
        }
        free(local);
    }
}

static void free_layout(saved *s) {
    for (int k = 0; k < s->t.n_slices; k++) free(s->data[k]);
}

static const plait_shard g_layouts[] = {
    {-1, 1, 0, 1, 0},   /* whole */
    {0, 2, 0, 1, ROWS}, /* rows in halves */
    {1, 2, 0, 1, COLS}, /* columns in halves */
    {1, 3, 0, 1, COLS}, /* columns in thirds */
    {1, 2, 0, 3, COLS}, /* three groups of columns (a fused QKV), each halved */
    {0, 4, 0, 1, 12},   /* rows padded to 12 in quarters: the last holds padding */
};

static void any_layout_reads_any_other(void **state) {
    (void)state;
    for (int i = 0; i < ROWS * COLS; i++) g_full[i] = (float)i + 0.25f;
    size_t n_layouts = sizeof g_layouts / sizeof g_layouts[0];
    for (size_t a = 0; a < n_layouts; a++)
        for (int zero = 1; zero <= 3; zero++) {
            saved s;
            save_layout(&s, &g_layouts[a], zero);
            for (size_t b = 0; b < n_layouts; b++) {
                int parts = g_layouts[b].parts;
                for (int p = 0; p < parts; p++) {
                    plait_shard want = g_layouts[b];
                    want.index = p;
                    size_t n;
                    assert_int_equal(plait_shard_numel(2, s.t.shape, &want, &n), PLAIT_OK);
                    float *expect = malloc(n * sizeof *expect), *got = malloc(n * sizeof *got);
                    assert_int_equal(plait_shard_extract(2, s.t.shape, &want, g_full, 0, n, expect), PLAIT_OK);
                    /* the whole slice, and a range inside it (a ZeRO rank's) */
                    assert_int_equal(plait_ckpt_index_read(&s.t, &want, 0, n, got, "test"), PLAIT_OK);
                    assert_memory_equal(got, expect, n * sizeof *got);
                    size_t off = n / 3, cnt = n / 2;
                    memset(got, 0x7f, n * sizeof *got);
                    assert_int_equal(plait_ckpt_index_read(&s.t, &want, off, cnt, got, "test"), PLAIT_OK);
                    assert_memory_equal(got, expect + off, cnt * sizeof *got);
                    free(expect);
                    free(got);
                }
            }
            free_layout(&s);
        }
}

/* A slice gone: the read names the element no slice holds. */
static void a_missing_slice_is_named(void **state) {
    (void)state;
    saved s;
    save_layout(&s, &g_layouts[1], 2);
    s.t.n_slices--;
    plait_shard whole = {-1, 1, 0, 1, 0};
    float out[ROWS * COLS];
    assert_int_equal(plait_ckpt_index_read(&s.t, &whole, 0, ROWS * COLS, out, "ckpt"), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "no slice of tensor w holds its element"));
    s.t.n_slices++;
    free_layout(&s);
}

static plait_status parse_text(const char *text, plait_ckpt_index **ix) {
    return plait_ckpt_index_parse(text, strlen(text), "index.json", ix);
}

static void the_index_round_trips(void **state) {
    (void)state;
    saved s;
    save_layout(&s, &g_layouts[4], 2);
    const char *files[64];
    char names[64][32];
    for (int k = 0; k < s.t.n_slices; k++) {
        plait_ckpt_shard_file_name(names[k], sizeof names[k], k);
        files[k] = names[k];
    }
    plait_ckpt_index ix = {.step = 7, .n_files = s.t.n_slices, .files = files, .n_tensors = 1, .tensors = &s.t};
    plait_jbuf b = {0};
    plait_ckpt_index_render(&b, &ix);
    assert_false(b.failed);
    plait_ckpt_index *back = NULL;
    assert_int_equal(plait_ckpt_index_parse(b.data, b.len, "index.json", &back), PLAIT_OK);
    assert_int_equal(back->step, 7);
    assert_int_equal(back->n_files, s.t.n_slices);
    assert_string_equal(back->files[1], "shard-00001.safetensors");
    const plait_ckpt_index_tensor *t = plait_ckpt_index_find(back, "w");
    assert_non_null(t);
    assert_int_equal(t->n_slices, s.t.n_slices);
    for (int k = 0; k < t->n_slices; k++) {
        assert_int_equal(t->slices[k].shard.groups, 3);
        assert_int_equal(t->slices[k].begin, s.t.slices[k].begin);
        assert_int_equal(t->slices[k].end, s.t.slices[k].end);
    }
    assert_null(plait_ckpt_index_find(back, "v"));
    plait_ckpt_index_free(back);
    plait_jbuf_free(&b);
    free_layout(&s);
}

#define HEAD "{\"format\": \"plait-sharded-index\", \"format_version\": 1, \"step\": 1, "
#define SL(f, d, p, i, beg, end)                                                                                       \
    "{\"file\": " #f ", \"dim\": " #d ", \"parts\": " #p ", \"index\": " #i ", \"groups\": 1, \"padded_len\": 4, "     \
    "\"begin\": " #beg ", \"end\": " #end "}"

static void a_mismatched_index_is_refused(void **state) {
    (void)state;
    static const struct {
        const char *text, *says;
    } bad[] = {
        {HEAD "\"files\": [\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": \"F32\", \"shape\": [4, 2], "
              "\"slices\": [" SL(0, 0, 2, 0, 0, 4) "]}}}",
         "its slices hold 4 elements but its shape has 8"},
        {HEAD "\"files\": [\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": \"F32\", \"shape\": [4, 2], "
              "\"slices\": [" SL(0, 0, 2, 0, 0, 4) ", " SL(0, 0, 2, 0, 0, 4) ", " SL(0, 0, 2, 1, 0, 4) "]}}}",
         "its slices hold 12 elements"},
        {HEAD "\"files\": [\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": \"F32\", \"shape\": [4, 2], "
              "\"slices\": [" SL(0, 0, 2, 0, 0, 5) "]}}}",
         "does not fit its shape"},
        {HEAD "\"files\": [\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": \"F32\", \"shape\": [4, 2], "
              "\"slices\": [" SL(1, -1, 1, 0, 0, 8) "]}}}",
         "a slice must be"},
        {HEAD "\"files\": [\"../model.safetensors\"], \"tensors\": {}}", "is not a shard file name"},
        {HEAD "\"files\": [\"shard-0\", \"shard-0\"], \"tensors\": {}}", "listed twice"},
        {HEAD "\"files\": [], \"tensors\": {\"w\": {\"dtype\": \"BF16\", \"shape\": [2], \"slices\": []}}}",
         "must be {\"dtype\": \"F32\""},
        {"{\"format\": \"plait-sharded-index\", \"format_version\": 3, \"step\": 1, \"files\": [], \"tensors\": {}}",
         "format_version 3 is not 1 or 2"},
        {"{\"format\": \"plait-checkpoint\"}", "not a plait sharded checkpoint index"},
        {"{\"format\": ", "index.json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        plait_ckpt_index *ix = (plait_ckpt_index *)1;
        assert_int_equal(parse_text(bad[i].text, &ix), PLAIT_ERR_PROTOCOL);
        assert_null(ix);
        if (!strstr(plait_last_error(), bad[i].says)) fail_msg("case %zu: %s", i, plait_last_error());
    }
    plait_ckpt_index *ix = NULL;
    assert_int_equal(parse_text(HEAD "\"files\": [\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": "
                                     "\"F32\", \"shape\": [4, 2], \"slices\": [" SL(0, 0, 2, 0, 0,
                                                                                    4) ", " SL(0, 0, 2, 1, 0, 4) "]}}}",
                                &ix),
                     PLAIT_OK);
    plait_ckpt_index_free(ix);
}

/* Format version 2: slices cut twice (an expert tensor [2, 2, 2] at tp 2 x
 * ep 2: its experts over ep on dimension 0, each one's rows over tp), each
 * that part of the block its first split gives, read back whole and as
 * another layout's slice; such a slice in a version 1 index is refused. */
#define S2(e, t)                                                                                                       \
    "{\"file\": 0, \"dim\": 0, \"parts\": 2, \"index\": " #e ", \"groups\": 1, \"padded_len\": 2, \"begin\": 0, "      \
    "\"end\": 2, \"second_dim\": 1, \"second_parts\": 2, \"second_index\": " #t "}"
#define TWICE(v)                                                                                                       \
    "{\"format\": \"plait-sharded-index\", \"format_version\": " #v ", \"step\": 1, \"files\": "                       \
    "[\"shard-00000.safetensors\"], \"tensors\": {\"w\": {\"dtype\": \"F32\", \"shape\": [2, 2, 2], \"slices\": [" S2( \
        0, 0) ", " S2(0, 1) ", " S2(1, 0) ", " S2(1, 1) "]}}}"

static void slices_cut_twice_read_back(void **state) {
    (void)state;
    plait_ckpt_index *ix = NULL;
    assert_int_equal(parse_text(TWICE(2), &ix), PLAIT_OK);
    const plait_ckpt_index_tensor *t = plait_ckpt_index_find(ix, "w");
    assert_non_null(t);
    assert_int_equal(t->n_slices, 4);
    /* w[a][b][c] = 4a + 2b + c: slice (e, t) holds w[e][t][0..1] */
    static float held[4][2];
    for (int k = 0; k < 4; k++) {
        const plait_ckpt_slice *sl = &t->slices[k];
        assert_int_equal(sl->second.dim, 1);
        for (int c = 0; c < 2; c++) held[k][c] = (float)(4 * sl->shard.index + 2 * sl->second.index + c);
        t->slices[k].data = held[k];
    }
    float got[8];
    const plait_shard whole = {-1, 1, 0, 1, 0};
    assert_int_equal(plait_ckpt_index_read(t, &whole, 0, 8, got, "test"), PLAIT_OK);
    for (int i = 0; i < 8; i++) assert_true(got[i] == (float)i);
    const plait_shard last_column = {.dim = 2, .parts = 2, .index = 1, .groups = 1, .padded_len = 2};
    assert_int_equal(plait_ckpt_index_read(t, &last_column, 0, 4, got, "test"), PLAIT_OK);
    for (int i = 0; i < 4; i++) assert_true(got[i] == (float)(2 * i + 1));
    /* written back as version 2 */
    plait_jbuf b = {0};
    plait_ckpt_index_render(&b, ix);
    assert_non_null(strstr(b.data, "\"format_version\": 2"));
    assert_non_null(strstr(b.data, "\"second_dim\": 1, \"second_parts\": 2, \"second_index\": 1"));
    plait_jbuf_free(&b);
    plait_ckpt_index_free(ix);
    ix = (plait_ckpt_index *)1;
    assert_int_equal(parse_text(TWICE(1), &ix), PLAIT_ERR_PROTOCOL);
    assert_null(ix);
    assert_non_null(strstr(plait_last_error(), "a slice must be"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(any_layout_reads_any_other), cmocka_unit_test(a_missing_slice_is_named),
        cmocka_unit_test(the_index_round_trips),      cmocka_unit_test(a_mismatched_index_is_refused),
        cmocka_unit_test(slices_cut_twice_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
