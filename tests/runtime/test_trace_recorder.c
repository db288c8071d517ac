/*
 * The trace recorder (runtime/trace.h) and the merge (runtime/trace_merge.h):
 * a full buffer keeps its first spans and counts the rest as dropped, from
 * one thread or several at once; nothing is recorded while recording is
 * off; a rank file says what it holds; the merge applies each rank's clock
 * offset and links a send to its receive with one flow id.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/error.h"
#include "runtime/trace.h"
#include "runtime/trace_merge.h"

static char dir[64];

/* The file's text (the last call's, kept until the next). */
static char *slurp(const char *path) {
    static char *text;
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    free(text);
    text = calloc((size_t)sb.st_size + 1, 1);
    FILE *f = fopen(path, "r");
    assert_non_null(text);
    assert_non_null(f);
    assert_int_equal(fread(text, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    return text;
}

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static void rank_path(char *buf, size_t cap, int rank) { snprintf(buf, cap, "%s/trace/rank-%05d.trace", dir, rank); }

static void test_full_buffer_counts_dropped(void **state) {
    (void)state;
    char path[128];
    rank_path(path, sizeof path, 0);
    assert_int_equal(plait_trace_open(4, 0, path), PLAIT_OK);
    assert_int_equal(plait_trace_begin(), 0); /* not recording yet */
    plait_trace_end(PLAIT_TRACE_STEP, "never", plait_trace_begin(), NULL);
    assert_int_equal(plait_trace_count(), 0);
    plait_trace_set_recording(1);
    for (int i = 0; i < 10; i++) {
        uint64_t t0 = plait_trace_begin();
        assert_true(t0 > 0);
        plait_trace_end(PLAIT_TRACE_COMPUTE, "forward", t0, NULL);
    }
    assert_int_equal(plait_trace_count(), 4);
    assert_int_equal(plait_trace_dropped(), 6);
    plait_trace_set_recording(0);
    assert_int_equal(plait_trace_begin(), 0);
    assert_int_equal(plait_trace_write(), PLAIT_OK);
    plait_trace_close();
    const char *text = slurp(path);
    assert_non_null(strstr(text, "spans 4\n"));
    assert_non_null(strstr(text, "dropped 6\n"));
    assert_non_null(strstr(text, "capacity 4\n"));
    assert_int_equal(count_of(text, "span\t"), 4);
}

#define THREADS 4
#define PER_THREAD 1000

static void *record_many(void *arg) {
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) plait_trace_end(PLAIT_TRACE_COLL, "allreduce", plait_trace_begin(), NULL);
    return NULL;
}

static void test_threads_share_one_bound(void **state) {
    (void)state;
    char path[128];
    rank_path(path, sizeof path, 0);
    size_t cap = THREADS * PER_THREAD * 5 / 8;
    assert_int_equal(plait_trace_open(cap, 0, path), PLAIT_OK);
    plait_trace_set_recording(1);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, record_many, NULL), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(plait_trace_count(), cap);
    assert_int_equal(plait_trace_dropped(), THREADS * PER_THREAD - cap);
    assert_int_equal(plait_trace_write(), PLAIT_OK);
    plait_trace_close();
    assert_int_equal(count_of(slurp(path), "span\t"), (int)cap);
}

/* rank `rank` records one transfer to or from `peer`, its clock `offset`
 * ns behind rank 0's */
static void one_rank(int rank, int is_send, int peer, int64_t offset, uint64_t t0) {
    char path[128];
    rank_path(path, sizeof path, rank);
    assert_int_equal(plait_trace_open(16, rank, path), PLAIT_OK);
    plait_trace_set_clock(offset, 1000, 8);
    plait_trace_args a = PLAIT_TRACE_ARGS;
    a.bytes = 4096;
    a.peer = peer;
    a.tag = 7;
    a.posted_ns = (int64_t)t0;
    a.comm = "pp";
    plait_trace_span(PLAIT_TRACE_P2P, is_send ? "send" : "recv", t0, t0 + 5000, &a);
    assert_int_equal(plait_trace_write(), PLAIT_OK);
    plait_trace_close();
}

static void test_merge_aligns_and_links(void **state) {
    (void)state;
    one_rank(0, 1, 1, 0, 1000000);
    one_rank(1, 0, 0, 3000000, 1000); /* 3 ms behind: its 1 µs is rank 0's 3.001 ms */
    int ranks = 0;
    assert_int_equal(plait_trace_merge(dir, &ranks), PLAIT_OK);
    assert_int_equal(ranks, 2);
    char path[128];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    const char *text = slurp(path);
    assert_int_equal(strncmp(text, PLAIT_TRACE_JSON_FIRST_LINE, strlen(PLAIT_TRACE_JSON_FIRST_LINE)), 0);
    assert_int_equal(count_of(text, "\"name\":\"process_name\""), 2);
    assert_non_null(strstr(text, "\"clock_offset_ns\":3000000"));
    /* the send at rank 0's 1 ms is time 0; the receive at 3.001 ms */
    assert_non_null(strstr(text, "\"pid\":1,\"tid\":1000,\"ts\":0.000,\"dur\":5.000,\"cat\":\"p2p\",\"name\":\"send\""));
    assert_non_null(strstr(text, "\"pid\":2,\"tid\":1000,\"ts\":2001.000,\"dur\":5.000,\"cat\":\"p2p\",\"name\":\"recv\""));
    assert_non_null(strstr(text, "{\"ph\":\"s\",\"pid\":1,\"tid\":1000,\"ts\":0.000,\"cat\":\"p2p\",\"name\":\"p2p\",\"id\":1}"));
    assert_non_null(strstr(text, "{\"ph\":\"f\",\"pid\":2,\"tid\":1000,\"ts\":2001.000,\"cat\":\"p2p\",\"name\":\"p2p\",\"id\":1,"));
}

static void test_merge_refuses_nothing(void **state) {
    (void)state;
    char empty[96];
    snprintf(empty, sizeof empty, "%s/none", dir);
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_not_equal(plait_trace_merge(empty, NULL), PLAIT_OK);
    assert_non_null(strstr(plait_last_error(), "[run] trace"));
    assert_int_equal(rmdir(empty), 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "%s/trace-test.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) return -1;
    char sub[96];
    snprintf(sub, sizeof sub, "%s/trace", dir);
    return mkdir(sub, 0755);
}

static int teardown(void **state) {
    (void)state;
    char p[128];
    for (int r = 0; r < 2; r++) {
        rank_path(p, sizeof p, r);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/trace.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/trace", dir);
    rmdir(p);
    return rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_buffer_counts_dropped),
        cmocka_unit_test(test_threads_share_one_bound),
        cmocka_unit_test(test_merge_aligns_and_links),
        cmocka_unit_test(test_merge_refuses_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
