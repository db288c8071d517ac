/*
 * The checkpoint comparison the end-to-end tests rely on (ckpt_compare.h)
 * must fail on every difference it claims to catch: values beyond each
 * mode's tolerance, a tensor on one side only (either side), a shape that
 * differs with the same element count, a missing file, an empty selection,
 * NaN, and malformed arguments. Checkpoints are written with the real
 * writer into a scratch directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "tools/ckpt_compare.h"
#include "checkpoint/checkpoint.h"
#include "train_io/train_io_test.h"

typedef struct tensor_spec {
    plait_ckpt_file file;
    const char *name;
    int32_t ndim;
    int64_t shape[2];
    const float *values; /* NULL: value_at(name, i) */
} tensor_spec;

static float value_at(size_t i) { return 1.0f + 0.25f * (float)i; }

/* Write checkpoint `step` under out_dir holding `n` tensors; returns its directory in dir. */
static void save(const char *out_dir, int64_t step, const tensor_spec *t, size_t n, char *dir, size_t cap) {
    plait_ckpt_writer *w = NULL;
    assert_int_equal(plait_ckpt_writer_begin(out_dir, step, &w), PLAIT_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(plait_ckpt_declare(w, t[i].file, t[i].name, t[i].ndim, t[i].shape), PLAIT_OK);
    for (size_t i = 0; i < n; i++) {
        size_t numel = 1;
        for (int32_t d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
        float buf[64];
        assert_true(numel <= 64);
        for (size_t k = 0; k < numel; k++) buf[k] = t[i].values ? t[i].values[k] : value_at(k);
        assert_int_equal(plait_ckpt_write(w, t[i].name, buf, numel), PLAIT_OK);
    }
    snprintf(dir, cap, "%s", plait_ckpt_writer_dir(w));
    plait_ckpt_state s = {.step = step, .seed = 1, .data_step = step, .optim_step = step};
    assert_int_equal(plait_ckpt_commit(w, &s, 0, 0), PLAIT_OK);
}

/* ckpt_diff A B args...; its stdout and stderr land in out / err. */
static int diff(const char *a, const char *b, const char *args, char *out, size_t out_cap, char *err,
                size_t err_cap) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", args);
    char *argv[16] = {"ckpt_diff", (char *)a, (char *)b};
    int argc = 3;
    for (char *tok = strtok(copy, " "); tok && argc < 16; tok = strtok(NULL, " ")) argv[argc++] = tok;
    FILE *fo = fmemopen(out, out_cap, "w"), *fe = fmemopen(err, err_cap, "w");
    assert_non_null(fo);
    assert_non_null(fe);
    int rc = ckpt_diff_run(argc, argv, fo, fe);
    fclose(fo);
    fclose(fe);
    return rc;
}

/* ckpt_diff A B ARGS must exit with rc and print `needle` (stdout or stderr). */
static void expect(int line, int rc, const char *a, const char *b, const char *args, const char *needle) {
    char out[2048] = "", err[2048] = "";
    int got = diff(a, b, args, out, sizeof out, err, sizeof err);
    if (got != rc || (!strstr(out, needle) && !strstr(err, needle)))
        fail_msg("line %d: ckpt_diff %s: exit %d (want %d), wanted \"%s\"; stdout: %s stderr: %s", line, args, got,
                 rc, needle, out, err);
}
#define EXPECT(rc, a, b, args, needle) expect(__LINE__, rc, a, b, args, needle)

static const tensor_spec base[] = {
    {PLAIT_CKPT_MODEL, "w", 2, {2, 3}, NULL},
    {PLAIT_CKPT_MODEL, "b", 1, {3, 0}, NULL},
    {PLAIT_CKPT_OPTIM, "optim.m.w", 2, {2, 3}, NULL},
};

static void test_identical_and_tolerances(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, base, 3, b, sizeof b);
    EXPECT(0, a, b, "--bits", "bit-identical");
    EXPECT(0, a, b, "", "worst relative difference 0");
    EXPECT(0, a, b, "--elementwise", "worst element");
    /* b's second element moves by 1e-4 on a scale of 100: 1e-6 of the
     * tensor's scale, but 10% of the element itself */
    static const float small[] = {100.0f, 1e-3f, 100.0f};
    static const float moved[] = {100.0f, 1.1e-3f, 100.0f};
    tensor_spec t[3] = {base[0], {PLAIT_CKPT_MODEL, "b", 1, {3, 0}, small}, base[2]};
    save(root, 3, t, 3, a, sizeof a);
    t[1].values = moved;
    save(root, 4, t, 3, c, sizeof c);
    EXPECT(1, a, c, "--bits", "b: differs first at element 1");
    EXPECT(0, a, c, "--rtol 1e-5", "in b");
    EXPECT(1, a, c, "--rtol 1e-7", "in b");
    EXPECT(1, a, c, "--elementwise --rtol 1e-5", "worst element b[1]");
    EXPECT(0, a, c, "--elementwise --rtol 0.1", "worst element b[1]");
    EXPECT(0, a, c, "--elementwise --rtol 1e-5 --atol 2e-4", "worst element b[1]");
    EXPECT(1, a, c, "--elementwise --atol 5e-5", "worst element b[1]");
}

static void test_files_selection(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX];
    static const float other[] = {9, 9, 9, 9, 9, 9};
    tensor_spec t[3] = {base[0], base[1], {PLAIT_CKPT_OPTIM, "optim.m.w", 2, {2, 3}, other}};
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, t, 3, b, sizeof b);
    EXPECT(0, a, b, "--files model --bits", "bit-identical");
    EXPECT(1, a, b, "--files optim --bits", "optim.m.w: differs first at element 0");
    EXPECT(1, a, b, "--files all --rtol 0.5", "in optim.m.w");
    EXPECT(1, a, b, "", "in optim.m.w");
}

static void test_tensor_on_one_side(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX];
    tensor_spec more[4] = {base[0], base[1], base[2], {PLAIT_CKPT_OPTIM, "optim.v.w", 2, {2, 3}, NULL}};
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, more, 4, b, sizeof b);
    /* only in the second: the old tool counted tensors, this names it */
    EXPECT(1, a, b, "--files optim", "optim.v.w only in");
    EXPECT(1, a, b, "--bits", "optim.v.w only in");
    EXPECT(1, a, b, "--elementwise --rtol 1", "optim.v.w only in");
    EXPECT(0, a, b, "--files model", "worst relative difference 0");
    /* only in the first */
    EXPECT(1, b, a, "--files optim", "optim.v.w only in");
    /* one missing and one extra: same counts, still both named */
    tensor_spec swapped[3] = {base[0], base[1], {PLAIT_CKPT_OPTIM, "optim.v.w", 2, {2, 3}, NULL}};
    save(root, 3, swapped, 3, b, sizeof b);
    EXPECT(1, a, b, "--files optim", "optim.v.w only in");
    EXPECT(1, a, b, "--files optim", "optim.m.w only in");
}

static void test_shape_mismatch(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX];
    /* the same six elements, transposed shape */
    tensor_spec t[3] = {{PLAIT_CKPT_MODEL, "w", 2, {3, 2}, NULL}, base[1], base[2]};
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, t, 3, b, sizeof b);
    EXPECT(1, a, b, "--files model", "w has shape [2, 3] in");
    EXPECT(1, a, b, "--bits", "but [3, 2] in");
    /* one dimension fewer */
    tensor_spec flat[3] = {{PLAIT_CKPT_MODEL, "w", 1, {6, 0}, NULL}, base[1], base[2]};
    save(root, 3, flat, 3, b, sizeof b);
    EXPECT(1, a, b, "--elementwise --rtol 1", "w has shape [2, 3] in");
}

static void test_missing_file_and_empty_selection(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX], path[PATH_MAX + 32];
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, base, 3, b, sizeof b);
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_OPTIM_FILE, b);
    assert_int_equal(unlink(path), 0);
    EXPECT(2, a, b, "--files model", PLAIT_CKPT_OPTIM_FILE);
    EXPECT(2, b, a, "", PLAIT_CKPT_OPTIM_FILE);
    /* no optimizer state on either side: --files optim compares nothing */
    save(root, 3, base, 2, a, sizeof a);
    save(root, 4, base, 2, b, sizeof b);
    EXPECT(1, a, b, "--files optim", "no tensor to compare");
    EXPECT(0, a, b, "--files all", "worst relative difference 0");
}

static void test_nan(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX];
    float nan_values[3] = {1.0f, NAN, 1.5f};
    tensor_spec t[3] = {base[0], {PLAIT_CKPT_MODEL, "b", 1, {3, 0}, nan_values}, base[2]};
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, t, 3, b, sizeof b);
    EXPECT(1, a, b, "--rtol 1e9", "in b");
    EXPECT(1, a, b, "--elementwise --rtol 1e9 --atol 1e9", "worst element b[1]");
    EXPECT(1, a, b, "--bits", "b: differs first at element 1");
}

static void test_arguments(void **state) {
    const char *root = *state;
    char a[PATH_MAX], b[PATH_MAX];
    save(root, 1, base, 3, a, sizeof a);
    save(root, 2, base, 3, b, sizeof b);
    EXPECT(2, a, b, "--files modle", "--files takes model, optim or all: modle");
    EXPECT(2, a, b, "--files", "--files needs");
    EXPECT(2, a, b, "--rtol", "a tolerance is a number >= 0");
    EXPECT(2, a, b, "--rtol 1e-4x", "a tolerance is a number >= 0: 1e-4x");
    EXPECT(2, a, b, "--rtol -1", "a tolerance is a number >= 0: -1");
    EXPECT(2, a, b, "--atol 1e-6", "--atol needs --elementwise");
    EXPECT(2, a, b, "--bits --rtol 1e-4", "--bits compares exactly");
    EXPECT(2, a, b, "--tol 1e-4", "unknown option: --tol");
    EXPECT(2, a, b, "extra", "a third checkpoint: extra");
    EXPECT(2, a, "--bits", "", "two checkpoint directories are needed");
}

/* Every test writes its checkpoints into a scratch directory of its own. */
static int make_root(void **state) {
    static char root[PATH_MAX];
    make_scratch(root, sizeof root, "ckpt-diff");
    *state = root;
    return 0;
}

static int remove_root(void **state) {
    rm_tree(*state);
    return 0;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, make_root, remove_root)

int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_identical_and_tolerances),
        TEST(test_files_selection),
        TEST(test_tensor_on_one_side),
        TEST(test_shape_mismatch),
        TEST(test_missing_file_and_empty_selection),
        TEST(test_nan),
        TEST(test_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
