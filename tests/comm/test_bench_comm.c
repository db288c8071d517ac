/*
 * plait bench comm on the in-process transport: every operation prints one
 * row per size with #wrong 0, busbw = algbw x the nccl-tests factor, the
 * CSV has the same rows, and a wrong result in any iteration (one flipped
 * element, or an iteration that writes nothing) is counted in #wrong; all
 * of it also with device buffers (fake_device.c: memory the host cannot
 * touch, staged in several chunks per size), where results are checked
 * after copying them back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bench/bench_comm.h"
#include "comm/comm_threads.h"
#include "comm/fake_device.h"
#include "runtime/error.h"
#include "host/host_table.h"

typedef struct run {
    plait_threads_world *w;
    plait_bench_comm_opts o;
    FILE *out;
    plait_status st[8];
    uint64_t wrong[8];
} run;

/* Device buffers for the runs that set it (NULL = host memory). */
static const plait_bench_mem *g_mem;

static void *dev_alloc(size_t bytes, const char *tag) {
    (void)tag;
    return fake_device_alloc(bytes);
}

static plait_status dev_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    if (dir == PLAIT_COPY_TO_HOST) fake_device_download(dst, src, bytes);
    else fake_device_upload(dst, src, bytes);
    return PLAIT_OK;
}

static const plait_bench_mem fake_mem = {PLAIT_MEM_CUDA, "fake-device", dev_alloc, fake_device_free, dev_copy};

static void rank_main(int r, void *arg) {
    run *x = arg;
    plait_comm *c = NULL;
    plait_comm_settings set;
    plait_comm_settings_default(&set);
    set.staging_chunk = 4096; /* 1K-256K messages: one to 64 chunks */
    set.device = fake_device_comm();
    x->st[r] = plait_threads_comm_world(x->w, r, &set, &c);
    if (x->st[r] == PLAIT_OK) x->st[r] = plait_bench_comm_run(c, &x->o, r == 0 ? x->out : NULL, &x->wrong[r], NULL);
    plait_comm_free(c);
}

/* Runs the bench; returns rank 0's output (caller frees). */
static char *bench(int n, plait_bench_op op, plait_bench_fault fault, uint64_t *wrong, char **csv_text) {
    run *x = calloc(1, sizeof *x);
    char *text = NULL, *csv = NULL;
    size_t len = 0, clen = 0;
    x->out = open_memstream(&text, &len);
    FILE *csvf = open_memstream(&csv, &clen);
    x->w = plait_threads_world_new(n, 30);
    x->o = (plait_bench_comm_opts){.op = op, .min_bytes = 1024, .max_bytes = 256 << 10, .factor = 4,
                                   .warmup = 1, .iters = 3, .dtype = PLAIT_F32, .redop = PLAIT_SUM,
                                   .transport = "threads", .csv = csvf, .fault = fault, .mem = g_mem};
    assert_int_equal(plait_threads_run(n, rank_main, x), PLAIT_OK);
    for (int r = 0; r < n; r++) {
        if (x->st[r] != PLAIT_OK) fail_msg("rank %d: %s", r, plait_last_error());
        assert_int_equal(x->wrong[r], x->wrong[0]); /* the total is agreed */
    }
    *wrong = x->wrong[0];
    fclose(x->out);
    fclose(csvf);
    plait_threads_world_free(x->w);
    free(x);
    *csv_text = csv;
    return text;
}

static void every_op_clean(void) {
    const int n = 3;
    for (int op = 0; op < PLAIT_BENCH_OP_COUNT; op++) {
        uint64_t wrong = 99;
        char *csv = NULL;
        char *text = bench(n, (plait_bench_op)op, PLAIT_BENCH_FAULT_NONE, &wrong, &csv);
        assert_int_equal(wrong, 0);
        assert_non_null(strstr(text, "#wrong"));
        assert_non_null(strstr(text, plait_bench_op_name((plait_bench_op)op)));
        assert_non_null(strstr(text, g_mem ? "fake-device memory (results copied back to be checked)" : "host memory"));
        /* rows: sizes 1K, 4K, 16K, 64K, 256K (rounded to multiples of n for some ops) */
        int rows = 0;
        double factor = op == PLAIT_BENCH_ALLREDUCE ? 2.0 * (n - 1) / n
                        : op == PLAIT_BENCH_BROADCAST || op == PLAIT_BENCH_SENDRECV ? 1.0
                                                                                   : (double)(n - 1) / n;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (line[0] == '#') continue;
            unsigned long long size, count;
            char type[16], redop[16];
            char algo[16];
            double t, algbw, busbw, loop;
            long long w;
            assert_int_equal(sscanf(line, "%llu %llu %15s %15s %lf %lf %lf %lld %15s %lf", &size, &count, type,
                                    redop, &t, &algbw, &busbw, &w, algo, &loop), 10);
            assert_int_equal(w, 0);
            assert_int_equal(size, count * 4);
            assert_true(t > 0);
            assert_true(loop > 0);
            assert_true(fabs(algbw - size / t / 1e3) <= 0.002 + 0.01 * algbw);
            assert_true(fabs(busbw - algbw * factor) <= 0.002 + 0.01 * busbw);
            rows++;
        }
        assert_int_equal(rows, 5);
        int csv_rows = 0; /* rows only: the CLI writes the header */
        for (char *p = csv; *p; p++) csv_rows += *p == '\n';
        assert_int_equal(csv_rows, 5);
        free(text);
        free(csv);
    }
}

static void test_every_op_clean(void **state) {
    (void)state;
    every_op_clean();
}

static void with_device(void (*fn)(void **), const char *what) {
    uint64_t copies = fake_device_copies_on_stager();
    g_mem = &fake_mem;
    fn(NULL);
    g_mem = NULL;
    /* the operations really went through the staging (every op has one) */
    fprintf(stderr, "%s on device buffers: %llu staged copies\n", what,
            (unsigned long long)(fake_device_copies_on_stager() - copies));
    assert_true(fake_device_copies_on_stager() - copies > 0);
    assert_int_equal(fake_device_in_use(), 0);
}

static void test_every_op_clean_device(void **state) {
    (void)state;
    with_device(test_every_op_clean, "every op");
}

static void test_wrong_results_are_counted(void **state) {
    (void)state;
    uint64_t wrong = 0;
    char *csv = NULL;
    char *text = bench(2, PLAIT_BENCH_ALLREDUCE, PLAIT_BENCH_FAULT_FLIP, &wrong, &csv);
    /* one flipped element per checked result (1 warm-up + 3 timed + the
     * back-to-back loop's last) on 5 sizes */
    assert_int_equal(wrong, 5 * 5);
    assert_non_null(strstr(text, "Total #wrong         : 25"));
    free(text);
    free(csv);
}

/* Timed iterations after the first write nothing, nor does the
 * back-to-back loop: each must be caught, not pass on the result the first
 * one left in the buffer. */
static void test_stale_results_are_counted(void **state) {
    (void)state;
    const int n = 2, stale_iters = 2 + 1; /* timed iterations 1 and 2 of 0..2, and the loop */
    uint64_t wrong = 0, expected = 0;
    char *csv = NULL;
    char *text = bench(n, PLAIT_BENCH_ALLREDUCE, PLAIT_BENCH_FAULT_STALE, &wrong, &csv);
    for (uint64_t bytes = 1024; bytes <= 256 << 10; bytes *= 4) expected += bytes / 4 * n * stale_iters;
    assert_int_equal(wrong, expected);
    free(text);
    free(csv);
}

static void test_wrong_results_are_counted_device(void **state) {
    (void)state;
    with_device(test_wrong_results_are_counted, "flipped results");
}

static void test_stale_results_are_counted_device(void **state) {
    (void)state;
    with_device(test_stale_results_are_counted, "stale results");
}

int main(void) {
    plait_host_install();
    fake_device_open((size_t)1 << 30);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_clean),
        cmocka_unit_test(test_wrong_results_are_counted),
        cmocka_unit_test(test_stale_results_are_counted),
        cmocka_unit_test(test_every_op_clean_device),
        cmocka_unit_test(test_wrong_results_are_counted_device),
        cmocka_unit_test(test_stale_results_are_counted_device),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fake_device_close();
    return rc;
}
