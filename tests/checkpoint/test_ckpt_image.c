/*
 * A pipeline stage's checkpoint shard as one block of memory
 * (checkpoint/ckpt_image.h): the tensors of the stage and its run state
 * round-trip, a tied copy is left to its original's stage, a stage without
 * tensors is a valid image, every flipped byte is found by the CRC32C, and
 * malformed images are refused without reading past their end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checkpoint/ckpt_image.h"
#include "runtime/error.h"

/* wte [8,4] (layer 0), w [4,4] (layer 1), lm_head tied to wte (layer 2) */
static plait_param g_params[3];
static plait_model_spec g_spec;
static const int32_t g_stage_of[3] = {0, 0, 1};
static const char *const g_states[] = {"exp_avg", "exp_avg_sq", NULL};

static void make_spec(void) {
    const char *names[3] = {"transformer.wte.weight", "transformer.h.0.w", "lm_head.weight"};
    int64_t rows[3] = {8, 4, 8};
    for (int i = 0; i < 3; i++) {
        plait_param *p = &g_params[i];
        memset(p, 0, sizeof *p);
        p->struct_size = sizeof *p;
        p->name = names[i];
        p->index = i;
        p->layer = i;
        p->ndim = 2;
        p->shape[0] = rows[i];
        p->shape[1] = 4;
        p->numel = (size_t)rows[i] * 4;
        p->tied_to = -1;
    }
    g_params[2].flags = PLAIT_PARAM_TIED_COPY;
    g_params[2].tied_to = 0;
    memset(&g_spec, 0, sizeof g_spec);
    g_spec.struct_size = sizeof g_spec;
    g_spec.n_params = 3;
    g_spec.params = g_params;
}

/* An image of stage 0 with recognisable values: element e of tensor t is t * 1000 + e. */
static unsigned char *stage0(size_t *bytes) {
    make_spec();
    *bytes = plait_ckpt_image_size(&g_spec, g_states, g_stage_of, 0);
    unsigned char *buf = malloc(*bytes);
    assert_non_null(buf);
    plait_ckpt_image_state s = {.step = 40, .optim_step = 41, .seed = 7, .data_tokens = 1000,
                                .data_train_tokens = 900, .data_train_crc32c = 0xabcdu, .stage = 0, .stages = 2,
                                .dp = 3, .tp = 1, .pp = 2};
    assert_int_equal(plait_ckpt_image_begin(buf, *bytes, &s, &g_spec, g_states, g_stage_of), PLAIT_OK);
    const char *which[3] = {"param", "exp_avg", "exp_avg_sq"};
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 3; k++) {
            float *slot = plait_ckpt_image_slot(buf, &g_spec, g, which[k]);
            assert_non_null(slot);
            assert_int_equal((uintptr_t)slot % 64, (uintptr_t)buf % 64);
            for (size_t e = 0; e < g_params[g].numel; e++) slot[e] = (float)((g * 3 + k) * 1000 + (int)e);
        }
    assert_null(plait_ckpt_image_slot(buf, &g_spec, 0, "momentum"));
    plait_ckpt_image_seal(buf);
    return buf;
}

static void test_round_trip(void **state) {
    (void)state;
    size_t bytes;
    unsigned char *buf = stage0(&bytes);
    plait_ckpt_image img;
    assert_int_equal(plait_ckpt_image_open(buf, bytes, 1, "the test image", &img), PLAIT_OK);
    assert_int_equal(img.n, 6);
    assert_int_equal(img.state.step, 40);
    assert_int_equal(img.state.optim_step, 41);
    assert_int_equal((int)img.state.seed, 7);
    assert_int_equal(img.state.data_train_crc32c, 0xabcdu);
    assert_int_equal(img.state.stages, 2);
    const plait_st_tensor *t = plait_ckpt_image_find(&img, "optim.exp_avg_sq.transformer.h.0.w");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 4);
    assert_int_equal(t->numel, 16);
    assert_true(t->data[5] == 5005.0f);
    assert_non_null(plait_ckpt_image_find(&img, "transformer.wte.weight"));
    assert_null(plait_ckpt_image_find(&img, "lm_head.weight")); /* a tied copy is its original */
    plait_ckpt_image_free(&img);
    free(buf);
}

static void test_empty_stage(void **state) {
    (void)state;
    make_spec();
    /* stage 1 holds only the tied copy, whose tensors are stage 0's */
    size_t bytes = plait_ckpt_image_size(&g_spec, g_states, g_stage_of, 1);
    unsigned char *buf = malloc(bytes);
    plait_ckpt_image_state s = {.step = 2, .stage = 1, .stages = 2};
    assert_int_equal(plait_ckpt_image_begin(buf, bytes, &s, &g_spec, g_states, g_stage_of), PLAIT_OK);
    plait_ckpt_image_seal(buf);
    plait_ckpt_image img;
    assert_int_equal(plait_ckpt_image_open(buf, bytes, 1, "stage 1", &img), PLAIT_OK);
    assert_int_equal(img.n, 0);
    plait_ckpt_image_free(&img);
    /* the writer refuses a buffer of another size */
    assert_int_equal(plait_ckpt_image_begin(buf, bytes - 1, &s, &g_spec, g_states, g_stage_of), PLAIT_ERR_INTERNAL);
    free(buf);
}

static void test_every_flip_found(void **state) {
    (void)state;
    size_t bytes;
    unsigned char *buf = stage0(&bytes);
    for (size_t i = 0; i < bytes; i += 7) {
        buf[i] ^= 0x10;
        plait_ckpt_image img;
        plait_status st = plait_ckpt_image_open(buf, bytes, 1, "a damaged image", &img);
        if (st == PLAIT_OK) fail_msg("byte %zu flipped and the image still opened", i);
        assert_int_equal(st, PLAIT_ERR_PROTOCOL);
        buf[i] ^= 0x10;
    }
    /* a flip in the data is reported as damage, naming both checksums */
    buf[bytes - 1] ^= 1;
    plait_ckpt_image img;
    assert_int_equal(plait_ckpt_image_open(buf, bytes, 1, "the image of stage 0", &img), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "the image of stage 0 is damaged: its CRC32C is"));
    /* without verification the same image opens (a reader that trusts it) */
    assert_int_equal(plait_ckpt_image_open(buf, bytes, 0, "unverified", &img), PLAIT_OK);
    plait_ckpt_image_free(&img);
    free(buf);
}

static void test_malformed(void **state) {
    (void)state;
    size_t bytes;
    unsigned char *buf = stage0(&bytes);
    plait_ckpt_image img;
    assert_int_equal(plait_ckpt_image_open(buf, 10, 0, "short", &img), PLAIT_ERR_PROTOCOL);
    assert_int_equal(plait_ckpt_image_open(buf, bytes - 8, 0, "cut", &img), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "another size"));
    /* an entry pointing past the end, its CRC made to match: the first
     * tensor's data offset, found by its value (the header holds it first,
     * as where the data starts; the entry second) */
    unsigned char *bad = malloc(bytes);
    memcpy(bad, buf, bytes);
    uint64_t at = (uint64_t)((unsigned char *)plait_ckpt_image_slot(buf, &g_spec, 0, "param") - buf), huge = bytes;
    size_t pos = 0;
    int seen = 0;
    for (size_t i = 0; i + 8 <= at && !pos; i += 8)
        if (memcmp(bad + i, &at, 8) == 0 && ++seen == 2) pos = i;
    assert_true(pos > 0);
    memcpy(bad + pos, &huge, 8);
    plait_ckpt_image_seal(bad);
    assert_int_equal(plait_ckpt_image_open(bad, bytes, 1, "forged", &img), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "out of range"));
    free(bad);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_stage),
        cmocka_unit_test(test_every_flip_found),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
