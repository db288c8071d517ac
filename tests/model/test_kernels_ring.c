/*
 * Ring attention's block kernels on the CPU (ABI 1.18, kernels_ring.c)
 * against the fused grouped-query attention over the whole sequence: cp
 * ranks, rank r holding chunks r and 2cp-1-r of every sequence, each fold
 * their own block and then their ring predecessors' (ring_attention.c's
 * order). The ranks' output, lse and dq rows, and dK|dV summed over the
 * ranks' shares, equal the whole sequence's within 1e-5; 3 threads give
 * 1 thread's bits. The shapes cross the kernels' tiles (64 query rows,
 * 128 keys) unevenly and take head sizes that are not multiples of 8.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "model/kernel_check.h"

typedef struct shape {
    int cp;
    int64_t B, c, NH, NKV, HS; /* c: a chunk's tokens, a rank's T = 2c */
} shape;

/* What the ranks computed, in the whole sequence's layout. */
typedef struct ring_result {
    float *out, *lse, *dqkv; /* dqkv: q columns from dq, k|v columns summed over the ranks' dK|dV */
} ring_result;

/* The position in the whole sequence of rank r's row t. */
static int64_t position(const shape *s, int r, int64_t t) {
    const int64_t chunk = t < s->c ? r : 2 * s->cp - 1 - r;
    return chunk * s->c + t % s->c;
}

/* Rank r's rows of x (width columns a row, the whole sequence of Tf rows
 * a batch) gathered into its local layout, or scattered back (adding). */
static void gather(const shape *s, int r, float *local, const float *x, int64_t width) {
    const int64_t T = 2 * s->c, Tf = s->cp * T;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(local + (b * T + t) * width, x + (b * Tf + position(s, r, t)) * width, (size_t)width * sizeof *x);
}

static void scatter_add(const shape *s, int r, float *x, const float *local, int64_t width, int64_t col,
                        int64_t stride) {
    const int64_t T = 2 * s->c, Tf = s->cp * T;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < width; i++)
                x[(b * Tf + position(s, r, t)) * stride + col + i] += local[(b * T + t) * width + i];
}

/* Each rank's forward then backward over its cp blocks; res zeroed. */
static void run_ring(const shape *s, const float *qkv, const float *dout, ring_result *res) {
    const int64_t T = 2 * s->c, Tf = s->cp * T, B = s->B, NH = s->NH, NKV = s->NKV, HS = s->HS;
    const int64_t W = (NH + 2 * NKV) * HS, KVW = 2 * NKV * HS, OW = NH * HS;
    float *lq[8], *ldo = fzeros((size_t)(B * T * OW)), *lo = fzeros((size_t)(B * T * OW));
    float *mx = fzeros((size_t)(B * NH * T)), *l = fzeros((size_t)(B * NH * T)), *dq = fzeros((size_t)(B * T * W));
    float *kv = fzeros((size_t)(B * T * KVW)), *share = fzeros((size_t)(B * T * KVW));
    for (int r = 0; r < s->cp; r++) {
        lq[r] = fzeros((size_t)(B * T * W));
        gather(s, r, lq[r], qkv, W);
    }
    for (int r = 0; r < s->cp; r++) {
        gather(s, r, ldo, dout, OW);
        for (int step = 0; step < 2 * s->cp; step++) { /* the forward's cp blocks, then the backward's */
            const int i = step % s->cp, src = (r - i + s->cp) % s->cp;
            const plait_ring_block blk = {.q_chunk = {r, 2 * s->cp - 1 - r},
                                          .k_chunk = {src, 2 * s->cp - 1 - src},
                                          .first = i == 0};
            const float *k = kv;
            int64_t st = KVW;
            if (src == r) k = lq[r] + NH * HS, st = W; /* the own block read in place, as the model does */
            else plait_k_copy_rows(kv, KVW, lq[src] + NH * HS, W, B * T, KVW);
            if (step < s->cp) {
                plait_k_ring_attention_forward(lo, mx, l, lq[r], k, st, B, T, NH, NKV, HS, &blk);
                if (i == s->cp - 1) plait_k_ring_attention_finish(lo, mx, l, B, T, NH, HS);
                continue;
            }
            memset(share, 0, (size_t)(B * T * KVW) * sizeof *share);
            plait_k_ring_attention_backward(dq, share, lq[r], k, st, ldo, lo, mx, B, T, NH, NKV, HS, &blk);
            scatter_add(s, src, res->dqkv, share, KVW, NH * HS, W);
        }
        scatter_add(s, r, res->out, lo, OW, 0, OW);
        scatter_add(s, r, res->dqkv, dq, W, 0, W); /* its k|v columns zero: the kernel writes q's */
        memset(dq, 0, (size_t)(B * T * W) * sizeof *dq);
        for (int64_t bh = 0; bh < B * NH; bh++)
            for (int64_t t = 0; t < T; t++) res->lse[bh * Tf + position(s, r, t)] = mx[bh * T + t];
    }
    for (int r = 0; r < s->cp; r++) free(lq[r]);
    float *bufs[] = {ldo, lo, mx, l, dq, kv, share};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

static void expect_near(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-5f * (1.0f + fabsf(want[i])))
            fail_msg("%s[%zu] = %.9g, whole sequence %.9g", what, i, (double)got[i], (double)want[i]);
}

static void check_ring(const shape *s) {
    const int64_t Tf = 2 * s->cp * s->c, B = s->B, NH = s->NH, HS = s->HS, W = (NH + 2 * s->NKV) * HS;
    const size_t nqkv = (size_t)(B * Tf * W), nout = (size_t)(B * Tf * NH * HS), nlse = (size_t)(B * NH * Tf);
    arr qkv = arr_rand(nqkv, 1, 0), dout = arr_rand(nout, 1, 0);
    float *scr = fzeros(plait_k_attention_fused_scratch(B, Tf, NH, HS));
    float *out = fzeros(nout), *lse = fzeros(nlse), *dqkv = fzeros(nqkv);
    plait_k_attention_gqa_forward(out, lse, scr, qkv.f, B, Tf, NH, s->NKV, HS);
    plait_k_attention_gqa_backward(dqkv, scr, dout.f, qkv.f, out, lse, B, Tf, NH, s->NKV, HS);
    ring_result one = {fzeros(nout), fzeros(nlse), fzeros(nqkv)}, three = {fzeros(nout), fzeros(nlse), fzeros(nqkv)};
    run_ring(s, qkv.f, dout.f, &one);
    expect_near("ring out", one.out, out, nout);
    expect_near("ring lse", one.lse, lse, nlse);
    expect_near("ring dq|dk|dv", one.dqkv, dqkv, nqkv);
    plait_kernels_set_threads(3);
    run_ring(s, qkv.f, dout.f, &three);
    plait_kernels_set_threads(1);
    assert_memory_equal(one.out, three.out, nout * sizeof(float));
    assert_memory_equal(one.lse, three.lse, nlse * sizeof(float));
    assert_memory_equal(one.dqkv, three.dqkv, nqkv * sizeof(float));
    float *bufs[] = {scr, out, lse, dqkv, one.out, one.lse, one.dqkv, three.out, three.lse, three.dqkv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    arr_free(&qkv);
    arr_free(&dout);
}

/* cp 2, chunks of 150 tokens: row tiles of 64, 64 and 22, key tiles of
 * 128 and 22; grouped-query (4 query heads on 2), head size 24. */
static void test_ring_cp2_tiles(void **state) {
    (void)state;
    check_ring(&(shape){.cp = 2, .B = 2, .c = 150, .NH = 4, .NKV = 2, .HS = 24});
}

/* cp 3 on short chunks and a head size of 13, one key/value head per
 * query head; and cp 4, every query head on one key/value head. */
static void test_ring_cp3_cp4(void **state) {
    (void)state;
    check_ring(&(shape){.cp = 3, .B = 1, .c = 9, .NH = 2, .NKV = 2, .HS = 13});
    check_ring(&(shape){.cp = 4, .B = 2, .c = 20, .NH = 3, .NKV = 1, .HS = 16});
}

int main(void) {
    plait_kernels_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_cp2_tiles),
        cmocka_unit_test(test_ring_cp3_cp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
