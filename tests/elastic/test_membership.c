/*
 * Elastic membership (elastic/membership.h) with two launchers in one
 * process on loopback: the first binds the store's address and hosts the
 * store and the coordinator, the second becomes a client (the address is
 * taken). Round by round:
 *   1. both join: node 0 is the store host, node 1 the other; both fit;
 *   2. node 0's ranks fail having waited for world rank 3 (node 1's) that
 *      never failed itself: the coordinator stops node 1's ranks (its stop
 *      fd), and drops node 1, which learns why on its next join; the next
 *      round has node 0 alone, reason naming the stuck rank;
 *   3. node 0's ranks finish: the job is over for a late join too.
 * A third launcher with MIN 2 and nobody else gives up after join_timeout.
 * A round whose layout does not fit one member's memory: every member
 * learns the refusal, naming that host. Host counts outside 1 <= MIN <=
 * MAX <= 256 are refused before anything starts.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/membership.h"
#include "launch/net.h"
#include "runtime/error.h"

static int free_port(void) {
    struct sockaddr_storage ss;
    socklen_t len;
    assert_int_equal(plait_net_resolve("127.0.0.1", 0, &ss, &len), PLAIT_OK);
    int fd = plait_net_listen((struct sockaddr *)&ss, len, 1);
    assert_true(fd >= 0);
    struct sockaddr_in bound;
    socklen_t bl = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &bl);
    close(fd);
    return ntohs(bound.sin_port);
}

static plait_membership_opts opts(int port, int min, int max) {
    return (plait_membership_opts){.store_host = "127.0.0.1", .store_port = port, .token = "test-token",
                                   .min_hosts = min, .max_hosts = max, .ranks_per_host = 2, .join_wait = 5,
                                   .join_timeout = 2, .host_timeout = 0.6, .max_restarts = 3};
}

typedef struct joiner {
    plait_membership *m;
    plait_round r;
    plait_status st;
    int verdict;
} joiner;

/* Every member's verdict is awaited by every member: both at once. */
static void *verdict_thread(void *arg) {
    joiner *j = arg;
    char why[256];
    j->verdict = plait_membership_verdicts(j->m, NULL, why, sizeof why);
    return NULL;
}

static char b_why[512];

/* Node 1's verdict: it does not fit. */
static void *refuse_thread(void *arg) {
    joiner *j = arg;
    j->verdict = plait_membership_verdicts(j->m, "host b: 9.0 GiB a rank, 4.0 GiB available", b_why, sizeof b_why);
    return NULL;
}

static void *join_thread(void *arg) {
    joiner *j = arg;
    j->st = plait_membership_join(j->m, &j->r);
    return NULL;
}

/* Both join at once (each blocks until the round closes). */
static void join_both(joiner *a, joiner *b) {
    pthread_t t;
    pthread_create(&t, NULL, join_thread, b);
    join_thread(a);
    pthread_join(t, NULL);
    assert_int_equal(a->st, PLAIT_OK);
    assert_int_equal(b->st, PLAIT_OK);
}

static int readable(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
}

static void test_rounds(void **state) {
    (void)state;
    int port = free_port();
    plait_membership_opts o = opts(port, 1, 2);
    joiner a = {0}, b = {0};
    if (plait_membership_open(&o, &a.m) != PLAIT_OK) fail_msg("%s", plait_last_error());
    if (plait_membership_open(&o, &b.m) != PLAIT_OK) fail_msg("%s", plait_last_error());
    assert_true(plait_membership_is_store_host(a.m));
    assert_false(plait_membership_is_store_host(b.m));

    /* round 1: both, the store host first */
    join_both(&a, &b);
    assert_int_equal(a.r.status, PLAIT_ROUND_TRAIN);
    assert_int_equal(b.r.status, PLAIT_ROUND_TRAIN);
    assert_int_equal(a.r.hosts, 2);
    assert_int_equal(a.r.node, 0);
    assert_int_equal(b.r.node, 1);
    assert_int_equal(a.r.round, b.r.round);
    assert_int_equal(a.r.changes, 0);
    pthread_t t;
    pthread_create(&t, NULL, verdict_thread, &b);
    verdict_thread(&a);
    pthread_join(t, NULL);
    assert_int_equal(a.verdict, 0);
    assert_int_equal(b.verdict, 0);
    assert_int_equal(plait_membership_set_store_port(a.m, 4242), PLAIT_OK);
    int rank_port = 0;
    assert_int_equal(plait_membership_store_port(b.m, &rank_port), 1);
    assert_int_equal(rank_port, 4242);

    /* round 1 ends: world rank 0 (node 0) timed out waiting for world rank
     * 3 (node 1), which never failed itself: it stopped progressing */
    plait_attempt_end end = {.kind = PLAIT_ATTEMPT_FAILED, .n_blamed = 1, .blamed = {3}, .n_failed = 1, .failed = {0}};
    snprintf(end.message, sizeof end.message, "rank 0 failed: timed out waiting for world rank 3");
    assert_int_equal(plait_membership_report(a.m, &end), PLAIT_OK);
    assert_true(readable(plait_membership_stop_fd(b.m), 5000)); /* node 1's ranks are stopped */
    assert_non_null(strstr(plait_membership_stop_reason(b.m), "rank 0 failed"));
    plait_attempt_end stopped = {.kind = PLAIT_ATTEMPT_STOPPED};
    assert_int_equal(plait_membership_report(b.m, &stopped), PLAIT_OK);
    join_both(&a, &b);
    assert_int_equal(b.r.status, PLAIT_ROUND_DROPPED);
    assert_non_null(strstr(b.r.reason, "world rank 3 on host"));
    assert_non_null(strstr(b.r.reason, "stopped progressing"));
    assert_int_equal(a.r.status, PLAIT_ROUND_TRAIN);
    assert_int_equal(a.r.hosts, 1);
    assert_int_equal(a.r.changes, 1);
    assert_int_equal(a.r.restarts, 1);
    assert_non_null(strstr(a.r.reason, "is dropped from the job"));
    plait_membership_close(b.m);

    /* round 2's ranks finish: the job is over */
    plait_attempt_end ok = {.kind = PLAIT_ATTEMPT_OK};
    assert_int_equal(plait_membership_report(a.m, &ok), PLAIT_OK);
    pthread_create(&t, NULL, join_thread, &a);
    pthread_join(t, NULL);
    assert_int_equal(a.st, PLAIT_OK);
    assert_int_equal(a.r.status, PLAIT_ROUND_FINISHED);
    plait_membership_close(a.m);
}

static void test_too_few(void **state) {
    (void)state;
    plait_membership_opts o = opts(free_port(), 2, 3);
    joiner a = {0};
    if (plait_membership_open(&o, &a.m) != PLAIT_OK) fail_msg("%s", plait_last_error());
    join_thread(&a);
    assert_int_equal(a.st, PLAIT_OK);
    assert_int_equal(a.r.status, PLAIT_ROUND_FAILED);
    assert_non_null(strstr(a.r.reason, "only 1 host joined within 2 s ([run] join_timeout), fewer than the 2"));
    plait_membership_close(a.m);
}

/* Node 1's host refuses the round's layout: both launchers learn it, with
 * its words, so neither starts ranks; the job then ends. */
static void test_refusal(void **state) {
    (void)state;
    plait_membership_opts o = opts(free_port(), 2, 2);
    joiner a = {0}, b = {0};
    if (plait_membership_open(&o, &a.m) != PLAIT_OK) fail_msg("%s", plait_last_error());
    if (plait_membership_open(&o, &b.m) != PLAIT_OK) fail_msg("%s", plait_last_error());
    join_both(&a, &b);
    assert_int_equal(a.r.status, PLAIT_ROUND_TRAIN);
    assert_int_equal(b.r.hosts, 2);
    char why_a[512] = "";
    const char *refusal = "host b: 9.0 GiB a rank, 4.0 GiB available";
    pthread_t t;
    pthread_create(&t, NULL, refuse_thread, &b);
    int va = plait_membership_verdicts(a.m, NULL, why_a, sizeof why_a);
    pthread_join(t, NULL);
    assert_int_equal(va, 1);
    assert_int_equal(b.verdict, 1);
    if (!strstr(why_a, refusal) || !strstr(b_why, refusal))
        fail_msg("both should give node 1's refusal: '%s', '%s'", why_a, b_why);
    plait_attempt_end refused = {.kind = PLAIT_ATTEMPT_REFUSED};
    snprintf(refused.message, sizeof refused.message, "%s", refusal);
    assert_int_equal(plait_membership_report(a.m, &refused), PLAIT_OK);
    assert_int_equal(plait_membership_report(b.m, &refused), PLAIT_OK);
    plait_membership_close(b.m);
    plait_membership_close(a.m);
}

static void test_bad_hosts(void **state) {
    (void)state;
    const int cases[][2] = {{0, 2}, {3, 2}, {1, 257}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plait_membership_opts o = opts(free_port(), cases[i][0], cases[i][1]);
        plait_membership *m = NULL;
        assert_int_equal(plait_membership_open(&o, &m), PLAIT_ERR_INVALID_ARG);
        assert_null(m);
        assert_non_null(strstr(plait_last_error(), "1 <= MIN <= MAX <= 256"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_too_few),
        cmocka_unit_test(test_refusal),
        cmocka_unit_test(test_bad_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
