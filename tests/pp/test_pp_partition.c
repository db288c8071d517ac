/*
 * Layer partitions: the balanced one (the SDK's plait_partition_balanced,
 * which the pp plugin runs and the planner predicts) against brute force over every
 * contiguous partition, and explicit `stages = ...` text with each kind of
 * mistake reported clearly.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <plait/partition_util.h>

#include "partition.h"

static double chunk_cost(const double *costs, const int32_t *b, int32_t c) {
    double x = 0;
    for (int32_t i = b[c]; i < b[c + 1]; i++) x += costs[i];
    return x;
}

/* Best (max, sum of squares) over every partition of n layers into k
 * non-empty contiguous chunks, by enumerating the cut positions. */
static void brute_force(const double *costs, int32_t n, int32_t k, double *best_max, double *best_sq) {
    int32_t b[16];
    *best_max = INFINITY;
    *best_sq = INFINITY;
    /* cuts b[1] < ... < b[k-1] in [1, n-1] */
    b[0] = 0;
    b[k] = n;
    for (int32_t c = 1; c < k; c++) b[c] = c;
    for (;;) {
        double mx = 0, sq = 0;
        for (int32_t c = 0; c < k; c++) {
            double x = chunk_cost(costs, b, c);
            mx = fmax(mx, x);
            sq += x * x;
        }
        if (mx < *best_max - 1e-9 || (mx <= *best_max + 1e-9 && sq < *best_sq)) {
            if (mx < *best_max - 1e-9) *best_sq = INFINITY;
            *best_max = fmin(*best_max, mx);
            *best_sq = fmin(*best_sq, sq);
        }
        int32_t c = k - 1;
        while (c >= 1 && b[c] == n - (k - c)) c--;
        if (c < 1) break;
        b[c]++;
        for (int32_t d = c + 1; d < k; d++) b[d] = b[d - 1] + 1;
    }
}

static void check_valid(const int32_t *b, int32_t n, int32_t k) {
    assert_int_equal(b[0], 0);
    assert_int_equal(b[k], n);
    for (int32_t c = 0; c < k; c++) assert_true(b[c] < b[c + 1]);
}

static void test_balanced_equal_layers(void **state) {
    (void)state;
    double costs[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int32_t b[5];
    assert_int_equal(plait_partition_balanced(costs, 8, 2, b, NULL, 0), PLAIT_OK);
    assert_int_equal(b[1], 4);
    assert_int_equal(plait_partition_balanced(costs, 8, 4, b, NULL, 0), PLAIT_OK);
    for (int c = 0; c <= 4; c++) assert_int_equal(b[c], 2 * c);
    /* 8 into 3: 3,3,2 in some order — max 3; the tie-break cuts earlier:
     * 2,3,3, the first chunk the lightest. */
    assert_int_equal(plait_partition_balanced(costs, 8, 3, b, NULL, 0), PLAIT_OK);
    assert_float_equal(pp_partition_max_cost(costs, 3, b), 3.0, 0);
    assert_int_equal(b[1], 2);
    assert_int_equal(b[2], 5);
    /* All zero: counted as 1 each. */
    double zeros[6] = {0};
    assert_int_equal(plait_partition_balanced(zeros, 6, 3, b, NULL, 0), PLAIT_OK);
    assert_int_equal(b[1], 2);
    assert_int_equal(b[2], 4);
    /* n == k: one layer each. */
    assert_int_equal(plait_partition_balanced(costs, 4, 4, b, NULL, 0), PLAIT_OK);
    for (int c = 0; c <= 4; c++) assert_int_equal(b[c], c);
}

/* A GPT: cheap embedding, equal blocks, a head as dear as three blocks. */
static void test_balanced_gpt_shape(void **state) {
    (void)state;
    double costs[10] = {0.01, 1, 1, 1, 1, 1, 1, 1, 1, 3}; /* embedding, h.0-h.7, head */
    int32_t b[5];
    assert_int_equal(plait_partition_balanced(costs, 10, 2, b, NULL, 0), PLAIT_OK);
    /* total 11.01: the head's stage takes fewer blocks. */
    assert_int_equal(b[1], 6); /* 0-5 = 5.01, 6-9 = 6 */
    double mx, sq;
    brute_force(costs, 10, 2, &mx, &sq);
    assert_float_equal(pp_partition_max_cost(costs, 2, b), mx, 1e-12);
    assert_int_equal(plait_partition_balanced(costs, 10, 4, b, NULL, 0), PLAIT_OK);
    brute_force(costs, 10, 4, &mx, &sq);
    assert_float_equal(pp_partition_max_cost(costs, 4, b), mx, 1e-12);
    assert_int_equal(b[3], 9); /* the head alone on the last stage */
}

/* A chunk of two blocks where the blocks do not divide evenly: the most
 * even partitions differ only in where it sits, and it sits last among
 * the blocks, away from the first stage, which keeps the most
 * micro-batches in flight (as Llama 3's run took a block off its first
 * stage). */
static void test_balanced_early_chunks_lighter(void **state) {
    (void)state;
    double costs[6] = {0.01, 1, 1, 1, 1, 1.4}; /* embedding, h.0-h.3, head */
    int32_t b[5];
    assert_int_equal(plait_partition_balanced(costs, 6, 4, b, NULL, 0), PLAIT_OK);
    static const int32_t want[5] = {0, 2, 3, 5, 6}; /* embedding + h.0 | h.1 | h.2 h.3 | head */
    for (int c = 0; c <= 4; c++) assert_int_equal(b[c], want[c]);
}

/* Random costs against brute force: optimal maximum, and the most even
 * partition among the optimal ones. */
static void test_balanced_vs_brute_force(void **state) {
    (void)state;
    uint64_t x = 12345;
    for (int trial = 0; trial < 400; trial++) {
        int32_t n = 1 + (int32_t)(trial % 11);
        int32_t k = 1 + (int32_t)((trial / 11) % (uint32_t)n);
        if (k > 6) k = 6;
        double costs[12];
        for (int32_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int r = (int)(x >> 58); /* 0..63: small integers make ties common */
            costs[i] = trial % 3 == 0 ? (double)(r % 4) : (double)r / 7.0;
        }
        int32_t b[13];
        char err[128];
        assert_int_equal(plait_partition_balanced(costs, n, k, b, err, sizeof err), PLAIT_OK);
        check_valid(b, n, k);
        double mx, sq, got_sq = 0;
        brute_force(costs, n, k, &mx, &sq);
        for (int32_t c = 0; c < k; c++) got_sq += chunk_cost(costs, b, c) * chunk_cost(costs, b, c);
        assert_float_equal(pp_partition_max_cost(costs, k, b), mx, 1e-9);
        assert_float_equal(got_sq, sq, 1e-9);
    }
}

static void test_balanced_errors(void **state) {
    (void)state;
    double costs[4] = {1, 1, 1, 1};
    int32_t b[8];
    char err[256];
    assert_int_equal(plait_partition_balanced(costs, 4, 5, b, err, sizeof err), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "4 layers cannot fill 5 pipeline chunks"));
    assert_int_equal(plait_partition_balanced(costs, 4, 0, b, err, sizeof err), PLAIT_ERR_INVALID_ARG);
    /* refused before any cost is read, so four costs stand for them all */
    assert_int_equal(plait_partition_balanced(costs, PLAIT_PARTITION_MAX_LAYERS + 1, 2, b, err, sizeof err),
                     PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "at most 65536 can be partitioned"));
    costs[2] = -1;
    assert_int_equal(plait_partition_balanced(costs, 4, 2, b, err, sizeof err), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "layer 2 has cost -1"));
    costs[2] = NAN;
    assert_int_equal(plait_partition_balanced(costs, 4, 2, b, err, sizeof err), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "layer 2"));
}

static void test_assign_and_format(void **state) {
    (void)state;
    /* pp = 2, v = 2: chunks in model order go to stages 0,1,0,1. */
    int32_t b[5] = {0, 2, 5, 6, 8};
    int32_t stage[8], chunk[8];
    pp_partition_assign(b, 2, 2, stage, chunk);
    const int32_t want_stage[8] = {0, 0, 1, 1, 1, 0, 1, 1};
    const int32_t want_chunk[8] = {0, 0, 0, 0, 0, 1, 1, 1};
    assert_memory_equal(stage, want_stage, sizeof stage);
    assert_memory_equal(chunk, want_chunk, sizeof chunk);
    char text[64];
    assert_int_equal(plait_partition_format(b, 4, 0, 1, text, sizeof text), strlen("0-1,2-4,5,6-7"));
    assert_string_equal(text, "0-1,2-4,5,6-7");
    /* Truncation keeps whole ranges only. */
    char small[10];
    assert_int_equal(plait_partition_format(b, 4, 0, 1, small, sizeof small), 13);
    assert_string_equal(small, "0-1,2-4,5");
    char exact[9];
    plait_partition_format(b, 4, 0, 1, exact, sizeof exact);
    assert_string_equal(exact, "0-1,2-4");
    char tiny[8];
    plait_partition_format(b, 4, 0, 1, tiny, sizeof tiny);
    assert_string_equal(tiny, "0-1,2-4");
    /* A stage's chunks: stage s of p is chunks s, s + p, ... */
    assert_int_equal(plait_partition_format(b, 4, 0, 2, text, sizeof text), strlen("0-1,5"));
    assert_string_equal(text, "0-1,5");
    plait_partition_format(b, 4, 1, 2, text, sizeof text);
    assert_string_equal(text, "2-4,6-7");
    /* nothing past the last chunk; NULL or no room writes nothing */
    assert_int_equal(plait_partition_format(b, 4, 4, 2, text, sizeof text), 0);
    assert_string_equal(text, "");
    assert_int_equal(plait_partition_format(b, 4, 3, 1, NULL, 0), strlen("6-7"));
    char none[1] = {'x'};
    assert_int_equal(plait_partition_format(b, 4, 0, 1, none, 0), 13);
    assert_int_equal(none[0], 'x');
    char one[1];
    plait_partition_format(b, 4, 0, 1, one, sizeof one);
    assert_string_equal(one, "");
}

static void test_parse_ok(void **state) {
    (void)state;
    int32_t b[5];
    char err[256] = "";
    assert_int_equal(plait_partition_parse("0-3,4-7", 8, 2, b, err, sizeof err), PLAIT_OK);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], 4);
    assert_int_equal(b[2], 8);
    assert_int_equal(plait_partition_parse(" 0 - 2 , 3,4-6,7 ", 8, 4, b, err, sizeof err), PLAIT_OK);
    const int32_t want[5] = {0, 3, 4, 7, 8};
    assert_memory_equal(b, want, sizeof want);
    /* Round trip through the formatter. */
    char text[64];
    plait_partition_format(b, 4, 0, 1, text, sizeof text);
    int32_t again[5];
    assert_int_equal(plait_partition_parse(text, 8, 4, again, err, sizeof err), PLAIT_OK);
    assert_memory_equal(again, b, sizeof b);
}

static void expect_parse_error(const char *text, int32_t n, int32_t k, const char *needle) {
    int32_t b[16];
    char err[512] = "";
    plait_status st = plait_partition_parse(text, n, k, b, err, sizeof err);
    if (st != PLAIT_ERR_INVALID_CONFIG || !strstr(err, needle))
        fail_msg("stages = '%s' (n=%d, k=%d): status %d, message '%s', want '%s'", text, n, k, st, err, needle);
}

static void test_parse_errors(void **state) {
    (void)state;
    /* the ranges a text gives, before any check */
    assert_int_equal(plait_partition_ranges(NULL), 0);
    assert_int_equal(plait_partition_ranges(" \t"), 0);
    assert_int_equal(plait_partition_ranges("0-7"), 1);
    assert_int_equal(plait_partition_ranges("0-1,2,3-7"), 3);
    assert_int_equal(plait_partition_ranges("0-3,4-7,"), 3);
    expect_parse_error("0-2,4-7", 8, 2, "gap: layer 3 is in no stage (range 1 ends at 2, range 2 starts at 4)");
    expect_parse_error("0-1,4-7", 8, 2, "gap: layers 2-3 are in no stage");
    expect_parse_error("0-4,4-7", 8, 2, "range 2 ('4-7') starts at layer 4, which range 1 already holds");
    expect_parse_error("4-7,0-3", 8, 2, "must start at layer 0");
    expect_parse_error("0-3,4-7,0-1", 8, 2, "overlap or are out of model order");
    expect_parse_error("0-3,4-9", 8, 2, "range 2 ('4-9') goes past the last layer 7");
    expect_parse_error("0-7", 8, 2, "1 range given, need pp x virtual_stages = 2");
    expect_parse_error("0-1,2-3,4-7", 8, 2, "3 ranges given, need pp x virtual_stages = 2");
    expect_parse_error("0-3,6-4", 8, 2, "range 2 ('6-4') is empty: it ends before it starts");
    expect_parse_error("0-3,4-6", 8, 2, "layer 7 is in no stage: the last range must end at layer 7 (the head)");
    expect_parse_error("0-3,4-5", 8, 2, "layers 6-7 are in no stage");
    expect_parse_error("0-3;4-7", 8, 2, "range 1 ('0-3;4-7'): unexpected ';'");
    expect_parse_error("a-3,4-7", 8, 2, "range 1 ('a-3'): expected a layer index or a range a-b");
    expect_parse_error("0-,4-7", 8, 2, "expected a layer index after '-'");
    expect_parse_error("0-3,4-7,", 8, 2, "range 3 (''): expected a layer index");
    expect_parse_error("", 8, 2, "empty");
    expect_parse_error("  ", 8, 2, "empty");
    expect_parse_error("0-3,-4-7", 8, 2, "expected a layer index");
    expect_parse_error("0-99999999999999999999,4-7", 8, 2, "goes past the last layer 7");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_balanced_equal_layers),
        cmocka_unit_test(test_balanced_gpt_shape),
        cmocka_unit_test(test_balanced_early_chunks_lighter),
        cmocka_unit_test(test_balanced_vs_brute_force),
        cmocka_unit_test(test_balanced_errors),
        cmocka_unit_test(test_assign_and_format),
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
