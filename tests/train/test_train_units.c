/* Trainer building blocks without communication: batch arithmetic, mesh
 * coordinates, deterministic tree accumulation, what a resume checks against
 * the checkpoint's run state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/error.h"
#include "layout/batch.h"
#include "train/grad_tree.h"
#include "layout/mesh.h"
#include "train/run_source.h"
#include "host/host_table.h"

static void test_batch_derivations(void **state) {
    (void)state;
    plait_batch b;
    assert_int_equal(plait_batch_solve(0, 0, 0, 4, &b), PLAIT_OK);
    assert_int_equal(b.micro_batch, 8);
    assert_int_equal(b.accumulation, 1);
    assert_int_equal(b.global_batch, 32);
    assert_int_equal(plait_batch_solve(32, 4, 0, 2, &b), PLAIT_OK); /* derive accumulation */
    assert_int_equal(b.accumulation, 4);
    assert_int_equal(plait_batch_solve(32, 4, 0, 4, &b), PLAIT_OK); /* same global batch, other dp */
    assert_int_equal(b.accumulation, 2);
    assert_int_equal(plait_batch_solve(32, 0, 2, 4, &b), PLAIT_OK); /* derive micro batch */
    assert_int_equal(b.micro_batch, 4);
    assert_int_equal(plait_batch_solve(0, 4, 2, 3, &b), PLAIT_OK); /* derive global */
    assert_int_equal(b.global_batch, 24);
    assert_int_equal(plait_batch_solve(16, 0, 0, 2, &b), PLAIT_OK); /* global only */
    assert_int_equal(b.micro_batch, 8);
    assert_int_equal(plait_batch_solve(0, 0, 3, 1, &b), PLAIT_OK); /* accumulation only */
    assert_int_equal(b.global_batch, 24);
    assert_int_equal(plait_batch_solve(30, 4, 0, 2, &b), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "not a multiple of dp x micro_batch"));
    assert_int_equal(plait_batch_solve(32, 4, 2, 2, &b), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "do not agree"));
}

static void test_mesh_coords_roundtrip(void **state) {
    (void)state;
    int axes[3];
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    int sizes[3] = {2, 2, 2}; /* dp, tp, pp */
    int c[3];
    plait_mesh_coords(1, sizes, axes, c); /* tp innermost: rank 1 = tp 1 */
    assert_int_equal(c[PLAIT_AXIS_TP], 1);
    assert_int_equal(c[PLAIT_AXIS_DP], 0);
    plait_mesh_coords(2, sizes, axes, c);
    assert_int_equal(c[PLAIT_AXIS_DP], 1);
    plait_mesh_coords(4, sizes, axes, c);
    assert_int_equal(c[PLAIT_AXIS_PP], 1);
    int s2[3] = {3, 2, 4};
    assert_int_equal(plait_mesh_parse_order("dp, pp, tp", axes), PLAIT_OK);
    for (int r = 0; r < 24; r++) {
        plait_mesh_coords(r, s2, axes, c);
        assert_int_equal(plait_mesh_rank_of(c, s2, axes), r);
    }
    assert_int_equal(plait_mesh_parse_order("tp,dp", axes), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(plait_mesh_parse_order("tp,tp,pp", axes), PLAIT_ERR_INVALID_CONFIG);
}

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) - 0.5) * 3.7f;
}

/* Reference: the left-complete pairwise tree in float arithmetic. */
static float tree_f(const float *v, int32_t n) {
    if (n == 1) return v[0];
    int32_t half = 1;
    while (half * 2 < n) half *= 2;
    return tree_f(v, half) + tree_f(v + half, n - half);
}

static void run_tree(const float *mbs, int32_t m, size_t n, float *out) {
    plait_grad_tree *t = NULL;
    assert_int_equal(plait_grad_tree_create(n, m, &t), PLAIT_OK);
    float *fresh = malloc(n * sizeof(float));
    for (int32_t j = 0; j < m; j++) {
        memcpy(fresh, mbs + (size_t)j * n, n * sizeof(float));
        assert_int_equal(plait_grad_tree_add(t, j, fresh, out, 0, n / 2), PLAIT_OK);
        assert_int_equal(plait_grad_tree_add(t, j, fresh, out, n / 2, n - n / 2), PLAIT_OK);
    }
    free(fresh);
    plait_grad_tree_free(t);
}

/* The accumulator equals the reference tree bit for bit, and splitting the
 * micro-batches into power-of-two blocks (data-parallel ranks) finished by a
 * tree over the blocks gives the same bits. */
static void test_grad_tree_bits(void **state) {
    (void)state;
    const size_t n = 29;
    for (int32_t m = 1; m <= 17; m++) {
        float *mbs = malloc(sizeof(float) * n * (size_t)m), out[29], col[17];
        uint64_t seed = 99u + (uint64_t)m;
        for (size_t i = 0; i < n * (size_t)m; i++) mbs[i] = rnd(&seed);
        run_tree(mbs, m, n, out);
        for (size_t i = 0; i < n; i++) {
            for (int32_t j = 0; j < m; j++) col[j] = mbs[(size_t)j * n + i];
            float ref = tree_f(col, m);
            assert_memory_equal(&out[i], &ref, sizeof ref);
        }
        /* dp split: blocks of 2^k micro-batches, then a tree over the blocks */
        for (int32_t blk = 1; blk <= m; blk *= 2) {
            if (m % blk) continue;
            int32_t dp = m / blk;
            float partial[17][29];
            for (int32_t r = 0; r < dp; r++) run_tree(mbs + (size_t)r * blk * n, blk, n, partial[r]);
            for (size_t i = 0; i < n; i++) {
                for (int32_t r = 0; r < dp; r++) col[r] = partial[r][i];
                float split = tree_f(col, dp);
                assert_memory_equal(&split, &out[i], sizeof split);
            }
        }
        free(mbs);
    }
    double d[5] = {1e16, 1, -1e16, 1, 3};
    assert_true(plait_tree_sum(d, 5) == ((1e16 + 1) + (-1e16 + 1)) + 3);
}

/* A resume continues the interrupted run's data position; another seed or
 * other data is reported (and warned about), never silently taken; a state
 * whose data position is not its step is refused. */
static void test_resume_checks(void **state) {
    (void)state;
    plait_ckpt_data data = {.path = "a.txt", .tokens = 1000, .train_tokens = 900, .train_crc32c = 0x1234abcdu};
    plait_ckpt_state saved = {.step = 40, .seed = 7, .data_step = 40, .optim_step = 40, .has_data = 1, .data = data};
    unsigned differs = 99;
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);
    data.path = "moved/a.txt"; /* the same data elsewhere */
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);

    assert_int_equal(plait_run_check_resume(&saved, "ck", 8, &data, 1, &differs), PLAIT_OK);
    assert_int_equal(differs, PLAIT_RESUME_OTHER_SEED);
    plait_ckpt_data other[3] = {data, data, data};
    other[0].train_crc32c ^= 1;
    other[1].tokens++;
    other[2].train_tokens--;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &other[k], 0, &differs), PLAIT_OK);
        assert_int_equal(differs, PLAIT_RESUME_OTHER_DATA);
    }
    assert_int_equal(plait_run_check_resume(&saved, "ck", 8, &other[0], 0, &differs), PLAIT_OK);
    assert_int_equal(differs, PLAIT_RESUME_OTHER_SEED | PLAIT_RESUME_OTHER_DATA);

    saved.has_data = 0; /* format 1: nothing to compare the data with */
    assert_int_equal(plait_run_check_resume(&saved, "ck", 7, &other[0], 1, &differs), PLAIT_OK);
    assert_int_equal(differs, 0);

    saved.data_step = 39;
    assert_int_equal(plait_run_check_resume(&saved, "ck/ckpt-00000040", 7, &data, 1, &differs), PLAIT_ERR_PROTOCOL);
    assert_non_null(strstr(plait_last_error(), "checkpoint ck/ckpt-00000040: its data position (data_step 39) is "
                                               "not its step (40)"));
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_derivations),
        cmocka_unit_test(test_mesh_coords_roundtrip),
        cmocka_unit_test(test_grad_tree_bits),
        cmocka_unit_test(test_resume_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
