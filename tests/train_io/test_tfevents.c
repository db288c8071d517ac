/* TensorBoard's event records, byte by byte against the format
 * (train/tfevents.h), and the event folder's refusals. */
#include "train_io_test.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors_crc32c.h"
#include "train/tfevents.h"

static uint32_t masked(const uint8_t *p, size_t n) {
    uint32_t c = plait_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The CRC is CRC32C (Castagnoli): its check value, and a record of one
 * scalar as the format spells it out. */
static void test_record_bytes(void **state) {
    (void)state;
    assert_int_equal(plait_crc32c(0, "123456789", 9), 0xe3069283u);
    const char names[3][32] = {"step", "loss", "x"};
    const double values[3] = {3, 2.5, NAN};
    static const uint8_t data[] = {
        0x09, 0,    0,   0,    0,    0,   0, 0xf8, 0x3f, /* wall_time 1.5 */
        0x10, 0x03,                                      /* step 3 */
        0x2a, 0x0d,                                      /* summary, 13 bytes */
        0x0a, 0x0b,                                      /* a value, 11 bytes */
        0x0a, 0x04, 'l', 'o',  's',  's',                /* its tag */
        0x15, 0,    0,   0x20, 0x40,                     /* simple_value 2.5f ("step" and NaN left out) */
    };
    uint8_t want[12 + sizeof data + 4], got[256];
    put_le(want, sizeof data, 8);
    put_le(want + 8, masked(want, 8), 4);
    memcpy(want + 12, data, sizeof data);
    put_le(want + 12 + sizeof data, masked(data, sizeof data), 4);
    size_t n = plait_tfevents_record(got, sizeof got, 3, 1.5, 3, names, values);
    assert_int_equal(n, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    /* too small a buffer, or nothing to say: no record */
    assert_int_equal(plait_tfevents_record(got, sizeof want - 1, 3, 1.5, 3, names, values), 0);
    const double none[3] = {3, NAN, NAN};
    assert_int_equal(plait_tfevents_record(got, sizeof got, 3, 1.5, 3, names, none), 0);
}

/* An event file starts with the file version; something in the folder's
 * place, a link too, is refused naming it and nothing is written there. */
static void test_open(void **state) {
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    make_scratch(dir, sizeof dir, "tfevents");
    plait_tfevents t;
    assert_int_equal(plait_tfevents_open(&t, dir), PLAIT_OK);
    const char names[1][32] = {"loss"};
    const double v[1] = {1.25};
    assert_int_equal(plait_tfevents_scalars(&t, 1, 10.0, 1, names, v), PLAIT_OK);
    snprintf(path, sizeof path, "%s", t.path);
    plait_tfevents_close(&t);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t head[64];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    assert_true(got > 12 + 24);
    assert_memory_equal(head + 12 + 9,
                        "\x1a\x0d"
                        "brain.Event:2",
                        15);
    assert_non_null(strstr(path, "/tensorboard/events.out.tfevents."));

    char other[PATH_MAX], link_dir[PATH_MAX];
    make_scratch(other, sizeof other, "tfevents-other");
    make_scratch(link_dir, sizeof link_dir, "tfevents-link");
    snprintf(path, sizeof path, "%s/tensorboard", link_dir);
    assert_int_equal(symlink(other, path), 0);
    assert_int_equal(plait_tfevents_open(&t, link_dir), PLAIT_ERR_INVALID_CONFIG);
    assert_error_contains("is in the way of the event files");
    assert_null(t.file);
    rm_tree(other);
    rm_tree(link_dir);
    rm_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_bytes),
        cmocka_unit_test(test_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
