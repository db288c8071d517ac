/*
 * The verbs plugin's engine (everything above the verbs calls) over a
 * loopback fabric (fake_fabric.c) in one process: eager and rendezvous in
 * both arrival orders, READs in pieces through a small send queue,
 * per-tag order, too-long messages, credits running dry, derived
 * communicators, abort (child and world, with the reason reaching the
 * peer), a dead link, garbage, failing READs, timeouts, user
 * registrations, and registrations released when transfers end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_fabric.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "verbs.h"
#include "host/host_table.h"

typedef struct net {
    int n;
    ff_world *w;
    vb_engine *e[4];
    vb_comm *c[4];
} net;

static vb_settings small_settings(void) {
    vb_settings s;
    vb_settings_default(&s);
    s.eager_max = 1024;
    s.max_read = 4096;
    s.sq_depth = 4;
    s.rx_depth = 32;
    s.tx_depth = 32;
    s.credits = 8;
    return s;
}

static void net_up(net *t, int n, const vb_settings *cfg) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->w = ff_world_new(n);
    assert_non_null(t->w);
    for (int i = 0; i < n; i++)
        assert_int_equal(vb_engine_new(plait_host_table(), cfg, i, n, ff_endpoint(t->w, i), &ff_ops, NULL, &t->e[i]),
                         PLAIT_OK);
    for (int i = 0; i < n; i++) {
        ff_start(ff_endpoint(t->w, i), t->e[i]);
        assert_int_equal(vb_comm_world(t->e[i], 0, &t->c[i]), PLAIT_OK);
    }
}

static void net_down(net *t) {
    for (int i = 0; i < t->n; i++) vb_comm_free(t->c[i]);
    ff_stop_all(t->w);
    for (int i = 0; i < t->n; i++) vb_engine_free(t->e[i]);
    ff_world_free(t->w);
}

static plait_buffer hbuf(void *p, size_t n) { return (plait_buffer){p, n, PLAIT_MEM_HOST, -1}; }

static vb_req *post_send(vb_comm *c, const void *p, size_t n, int peer, uint32_t tag) {
    plait_buffer b = hbuf((void *)(uintptr_t)p, n);
    vb_req *r = NULL;
    plait_status st = vb_isend(c, &b, peer, tag, NULL, &r);
    if (st != PLAIT_OK) fail_msg("isend: %s", plait_last_error());
    return r;
}

static vb_req *post_recv(vb_comm *c, void *p, size_t n, int peer, uint32_t tag) {
    plait_buffer b = hbuf(p, n);
    vb_req *r = NULL;
    plait_status st = vb_irecv(c, &b, peer, tag, NULL, &r);
    if (st != PLAIT_OK) fail_msg("irecv: %s", plait_last_error());
    return r;
}

static size_t wait_ok(vb_comm *c, vb_req *r) {
    size_t got = 0;
    plait_status st = vb_wait(c, r, 20.0, &got);
    if (st != PLAIT_OK) fail_msg("wait: %s: %s", plait_status_name(st), plait_last_error());
    return got;
}

static void wait_fails(vb_comm *c, vb_req *r, plait_status want, const char *needle) {
    plait_status st = vb_wait(c, r, 20.0, NULL);
    if (st != want) fail_msg("wait returned %s, expected %s: %s", plait_status_name(st), plait_status_name(want),
                             plait_last_error());
    if (needle && !strstr(plait_last_error(), needle))
        fail_msg("expected \"%s\" in: %s", needle, plait_last_error());
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

static void check(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 8))) fail_msg("byte %zu of %zu differs", i, n);
}

/* one transfer 0 -> 1 of n bytes; recv_first chooses the arrival order */
static void transfer(net *t, size_t n, int recv_first, uint32_t tag) {
    unsigned char *src = malloc(n + 1), *dst = malloc(n + 1);
    fill(src, n, (unsigned)n);
    memset(dst, 0, n + 1);
    vb_req *rr = recv_first ? post_recv(t->c[1], dst, n, 0, tag) : NULL;
    vb_req *sr = post_send(t->c[0], src, n, 1, tag);
    if (!recv_first) {
        /* let it arrive (and wait as unexpected) before the receive: an
         * eager send completes by itself, an announced one only once read */
        if (n <= t->e[0]->cfg.eager_max) {
            wait_ok(t->c[0], sr);
            sr = NULL;
        } else {
            assert_int_equal(vb_wait(t->c[0], sr, 0.05, NULL), PLAIT_ERR_TIMEOUT);
        }
        rr = post_recv(t->c[1], dst, n, 0, tag);
    }
    assert_int_equal(wait_ok(t->c[1], rr), n);
    if (sr) assert_int_equal(wait_ok(t->c[0], sr), n);
    check(dst, n, (unsigned)n);
    free(src);
    free(dst);
}

static void test_eager_both_orders(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    transfer(&t, 100, 1, 1);
    transfer(&t, 100, 0, 1);
    transfer(&t, 0, 1, 2);
    transfer(&t, 0, 0, 2);
    transfer(&t, 1024, 0, 3); /* exactly eager_max */
    assert_true(ff_sends(t.w, 0, VB_EAGER) >= 5);
    assert_int_equal(ff_sends(t.w, 0, VB_RTS), 0);
    net_down(&t);
}

static void test_rendezvous_both_orders_in_pieces(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    transfer(&t, 1025, 1, 1);
    transfer(&t, 100000, 1, 1); /* 25 READs through a send queue of 4 */
    transfer(&t, 100000, 0, 1); /* RTS held until the receive is posted */
    transfer(&t, 4096 * 3, 0, 2);
    assert_int_equal(ff_sends(t.w, 0, VB_RTS), 4);
    assert_int_equal(ff_sends(t.w, 1, VB_FIN), 4);
    /* every temporary registration is gone (the bounce pool stays) */
    assert_int_equal(ff_live_registrations(t.w, 0), 1);
    assert_int_equal(ff_live_registrations(t.w, 1), 1);
    net_down(&t);
}

static void test_order_per_tag(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    enum { N = 8 };
    size_t sizes[N] = {10, 5000, 0, 1024, 3000, 7, 20000, 512};
    unsigned char *src[N], *dst[N];
    vb_req *sr[N], *rr[N];
    for (int i = 0; i < N; i++) {
        src[i] = malloc(sizes[i] + 1);
        dst[i] = calloc(1, sizes[i] + 1);
        fill(src[i], sizes[i], (unsigned)i + 1);
        sr[i] = post_send(t.c[0], src[i], sizes[i], 1, (uint32_t)(i % 2)); /* tags 0,1,0,1,... */
    }
    /* the receiver posts tag 1's receives before tag 0's */
    for (int i = 1; i < N; i += 2) rr[i] = post_recv(t.c[1], dst[i], sizes[i], 0, 1);
    for (int i = 0; i < N; i += 2) rr[i] = post_recv(t.c[1], dst[i], sizes[i], 0, 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(wait_ok(t.c[1], rr[i]), sizes[i]);
        wait_ok(t.c[0], sr[i]);
        check(dst[i], sizes[i], (unsigned)i + 1);
        free(src[i]);
        free(dst[i]);
    }
    net_down(&t);
}

static void test_longer_than_the_receive(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    static unsigned char src[50000], dst[50000];
    fill(src, sizeof src, 9);
    /* eager */
    vb_req *rr = post_recv(t.c[1], dst, 100, 0, 4);
    vb_req *sr = post_send(t.c[0], src, 200, 1, 4);
    wait_fails(t.c[1], rr, PLAIT_ERR_PROTOCOL, "message of 200 bytes (tag 4) from rank 0 is longer than the receive buffer of 100 bytes");
    wait_ok(t.c[0], sr);
    /* rendezvous: the receiver refuses, the sender is released */
    rr = post_recv(t.c[1], dst, 10000, 0, 4);
    sr = post_send(t.c[0], src, 50000, 1, 4);
    wait_fails(t.c[1], rr, PLAIT_ERR_PROTOCOL, "longer than the receive buffer of 10000 bytes");
    wait_ok(t.c[0], sr);
    /* the channel is still in step */
    transfer(&t, 3000, 1, 4);
    /* a shorter message completes with its own length */
    rr = post_recv(t.c[1], dst, 1000, 0, 5);
    sr = post_send(t.c[0], src, 10, 1, 5);
    assert_int_equal(wait_ok(t.c[1], rr), 10);
    wait_ok(t.c[0], sr);
    assert_int_equal(ff_live_registrations(t.w, 0), 1);
    net_down(&t);
}

static void test_credits_run_dry_and_come_back(void **state) {
    (void)state;
    vb_settings s = small_settings();
    s.credits = 2;
    s.tx_depth = 16;
    net t;
    net_up(&t, 2, &s);
    enum { N = 200 };
    static unsigned char src[N][64], dst[N][64];
    vb_req *sr[N], *rr[N];
    for (int i = 0; i < N; i++) {
        fill(src[i], 64, (unsigned)i);
        sr[i] = post_send(t.c[0], src[i], 64, 1, 7);
    }
    for (int i = 0; i < N; i++) {
        rr[i] = post_recv(t.c[1], dst[i], 64, 0, 7);
        if (i % 10 == 9)
            for (int j = i - 9; j <= i; j++) assert_int_equal(wait_ok(t.c[1], rr[j]), 64);
    }
    for (int i = 0; i < N; i++) {
        wait_ok(t.c[0], sr[i]);
        check(dst[i], 64, (unsigned)i);
    }
    /* with 2 credits, 200 messages need grants back from the receiver */
    assert_true(ff_sends(t.w, 1, VB_CREDIT) > 0);
    net_down(&t);
}

static void test_derived_communicators_keep_apart(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 3, &s);
    /* child over world ranks {2, 0}: child rank 0 = world 2, child rank 1 = world 0 */
    int members[2] = {2, 0};
    vb_comm *k2 = NULL, *k0 = NULL;
    assert_int_equal(vb_comm_derive(t.c[2], 55, 0, 2, members, &k2), PLAIT_OK);
    assert_int_equal(vb_comm_derive(t.c[0], 55, 1, 2, members, &k0), PLAIT_OK);
    /* a member list that does not hold this rank is refused */
    vb_comm *bad = NULL;
    assert_int_equal(vb_comm_derive(t.c[1], 56, 0, 2, members, &bad), PLAIT_ERR_INVALID_ARG);
    static unsigned char a[3000], b[3000], ra[3000], rb[3000];
    fill(a, sizeof a, 1);
    fill(b, sizeof b, 2);
    /* same tag on the world and the child, posted in opposite orders */
    vb_req *s1 = post_send(t.c[0], a, sizeof a, 2, 9); /* world 0 -> world 2 */
    vb_req *s2 = post_send(k0, b, sizeof b, 0, 9);     /* child 1 -> child 0 (world 0 -> 2) */
    vb_req *r2 = post_recv(k2, rb, sizeof rb, 1, 9);
    vb_req *r1 = post_recv(t.c[2], ra, sizeof ra, 0, 9);
    wait_ok(t.c[2], r1);
    wait_ok(k2, r2);
    wait_ok(t.c[0], s1);
    wait_ok(k0, s2);
    check(ra, sizeof ra, 1);
    check(rb, sizeof rb, 2);
    /* errors name the child rank and the world rank */
    vb_req *lost = post_recv(k2, rb, 10, 1, 10);
    vb_abort(k2, "testing");
    wait_fails(k2, lost, PLAIT_ERR_PEER_LOST, "communicator 55 aborted: testing");
    vb_comm_free(k2);
    vb_comm_free(k0);
    transfer(&t, 2000, 1, 9); /* the world is unaffected */
    net_down(&t);
}

static void test_abort_child_releases_the_sender(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    int members[2] = {0, 1};
    vb_comm *k0 = NULL, *k1 = NULL;
    assert_int_equal(vb_comm_derive(t.c[0], 77, 0, 2, members, &k0), PLAIT_OK);
    assert_int_equal(vb_comm_derive(t.c[1], 77, 1, 2, members, &k1), PLAIT_OK);
    static unsigned char big[20000];
    /* an announced message nobody receives, then the receiver aborts */
    vb_req *sr = post_send(k0, big, sizeof big, 1, 3);
    assert_int_equal(vb_wait(k0, sr, 0.2, NULL), PLAIT_ERR_TIMEOUT); /* announced, still pending */
    assert_non_null(strstr(plait_last_error(), "waiting for the receiver to read it"));
    vb_abort(k1, "stop");
    wait_fails(k0, sr, PLAIT_ERR_PEER_LOST, "aborted its communicator before receiving it");
    /* operations on an aborted communicator fail at once */
    plait_buffer b = hbuf(big, 10);
    vb_req *r = NULL;
    assert_int_equal(vb_irecv(k1, &b, 0, 1, NULL, &r), PLAIT_ERR_PEER_LOST);
    assert_non_null(strstr(plait_last_error(), "after abort: stop"));
    vb_comm_free(k0);
    vb_comm_free(k1);
    transfer(&t, 20000, 0, 3);
    assert_int_equal(ff_live_registrations(t.w, 0), 1);
    net_down(&t);
}

static void test_world_abort_reaches_the_peer(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    char buf[16];
    vb_req *rr = post_recv(t.c[1], buf, sizeof buf, 0, 1);
    vb_req *pending = post_recv(t.c[0], buf, sizeof buf, 1, 1);
    vb_abort(t.c[0], "loss is NaN at step 12");
    wait_fails(t.c[0], pending, PLAIT_ERR_PEER_LOST, "communicator 0 aborted: loss is NaN at step 12");
    wait_fails(t.c[1], rr, PLAIT_ERR_PEER_LOST, "rank 0 is going down: loss is NaN at step 12");
    net_down(&t);
}

static void test_dead_link_fails_the_peer(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 3, &s);
    char buf[64] = {0};
    vb_req *rr = post_recv(t.c[0], buf, sizeof buf, 1, 1);
    ff_break_link(t.w, 0, 1);
    vb_req *sr = post_send(t.c[0], buf, sizeof buf, 1, 2); /* its completion reports the broken link */
    wait_ok(t.c[0], sr); /* eager: complete once handed over */
    wait_fails(t.c[0], rr, PLAIT_ERR_PEER_LOST, "transport retry counter exceeded");
    assert_non_null(strstr(plait_last_error(), "rank 1"));
    plait_buffer b = hbuf(buf, 8);
    vb_req *r = NULL;
    assert_int_equal(vb_isend(t.c[0], &b, 1, 1, NULL, &r), PLAIT_ERR_PEER_LOST);
    /* rank 2 is unaffected */
    unsigned char x[5000], y[5000];
    fill(x, sizeof x, 3);
    vb_req *a = post_recv(t.c[2], y, sizeof y, 0, 1);
    vb_req *c = post_send(t.c[0], x, sizeof x, 2, 1);
    wait_ok(t.c[2], a);
    wait_ok(t.c[0], c);
    check(y, sizeof y, 3);
    net_down(&t);
}

static void test_garbage_closes_the_connection(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    char buf[64] = {0};
    vb_req *rr = post_recv(t.c[1], buf, sizeof buf, 0, 1);
    ff_corrupt_next_send(t.w, 0);
    vb_req *sr = post_send(t.c[0], buf, sizeof buf, 1, 1);
    wait_fails(t.c[1], rr, PLAIT_ERR_PROTOCOL, "garbage from rank 0 (fake0 port 1): bad header magic");
    vb_wait(t.c[0], sr, 5.0, NULL);
    net_down(&t);
}

static void test_failed_read(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    static unsigned char src[30000], dst[30000];
    ff_fail_reads_from(t.w, 1, 0);
    vb_req *rr = post_recv(t.c[1], dst, sizeof dst, 0, 1);
    vb_req *sr = post_send(t.c[0], src, sizeof src, 1, 1);
    wait_fails(t.c[1], rr, PLAIT_ERR_PEER_LOST, "RDMA READ from rank 0 failed: transport retry counter exceeded");
    assert_int_equal(ff_live_registrations(t.w, 1), 1); /* the receive's registration is released */
    /* the sender has nothing in flight to notice the broken connection with:
     * it waits for its FIN until the caller's timeout, which then aborts */
    assert_int_equal(vb_wait(t.c[0], sr, 0.3, NULL), PLAIT_ERR_TIMEOUT);
    vb_abort(t.c[0], "gave up on rank 1");
    wait_fails(t.c[0], sr, PLAIT_ERR_PEER_LOST, "gave up on rank 1");
    assert_int_equal(ff_live_registrations(t.w, 0), 1);
    net_down(&t);
}

static void test_timeout_keeps_the_request(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    char buf[32] = {0}, out[32] = "hello";
    vb_req *rr = post_recv(t.c[1], buf, sizeof buf, 0, 3);
    double t0 = plait_host_table()->now();
    assert_int_equal(vb_wait(t.c[1], rr, 0.2, NULL), PLAIT_ERR_TIMEOUT);
    double dt = plait_host_table()->now() - t0;
    assert_true(dt >= 0.19); /* not before its timeout */
    assert_non_null(strstr(plait_last_error(), "receive from rank 0 (tag 3, 32 bytes) did not complete within 0.2 s"));
    int done = 1;
    assert_int_equal(vb_test(t.c[1], rr, &done, NULL), PLAIT_OK);
    assert_int_equal(done, 0);
    vb_req *sr = post_send(t.c[0], out, 6, 1, 3);
    assert_int_equal(wait_ok(t.c[1], rr), 6);
    assert_string_equal(buf, "hello");
    wait_ok(t.c[0], sr);
    net_down(&t);
}

static void test_user_registration(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    static unsigned char src[40000], dst[40000];
    fill(src, sizeof src, 5);
    plait_buffer sb = hbuf(src, sizeof src), db = hbuf(dst, sizeof dst);
    vb_mr *smr = NULL, *dmr = NULL;
    assert_int_equal(vb_reg(t.e[0], &sb, &smr), PLAIT_OK);
    assert_int_equal(vb_reg(t.e[1], &db, &dmr), PLAIT_OK);
    assert_int_equal(ff_live_registrations(t.w, 0), 2);
    vb_req *rr = NULL, *sr = NULL;
    assert_int_equal(vb_irecv(t.c[1], &db, 0, 1, dmr, &rr), PLAIT_OK);
    assert_int_equal(vb_isend(t.c[0], &sb, 1, 1, smr, &sr), PLAIT_OK);
    assert_int_equal(ff_live_registrations(t.w, 0), 2); /* no temporary one */
    wait_ok(t.c[1], rr);
    wait_ok(t.c[0], sr);
    check(dst, sizeof dst, 5);
    assert_int_equal(ff_live_registrations(t.w, 1), 2); /* still the user's */
    vb_dereg(t.e[0], smr);
    vb_dereg(t.e[1], dmr);
    assert_int_equal(ff_live_registrations(t.w, 0), 1);
    net_down(&t);
}

static void test_refusals(void **state) {
    (void)state;
    vb_settings s = small_settings();
    net t;
    net_up(&t, 2, &s);
    char buf[8];
    plait_buffer dev = {buf, 8, PLAIT_MEM_CUDA, 0};
    vb_req *r = NULL;
    assert_int_equal(vb_isend(t.c[0], &dev, 1, 1, NULL, &r), PLAIT_ERR_UNSUPPORTED);
    assert_non_null(strstr(plait_last_error(), "host memory"));
    plait_buffer b = hbuf(buf, 8);
    assert_int_equal(vb_isend(t.c[0], &b, 0, 1, NULL, &r), PLAIT_ERR_INVALID_ARG); /* to itself */
    assert_int_equal(vb_irecv(t.c[0], &b, 5, 1, NULL, &r), PLAIT_ERR_INVALID_ARG);
    plait_buffer null = {NULL, 8, PLAIT_MEM_HOST, -1};
    assert_int_equal(vb_irecv(t.c[0], &null, 1, 1, NULL, &r), PLAIT_ERR_INVALID_ARG);
    net_down(&t);
}

/* Every rank sends to every other, mixed sizes and tags, all posted before
 * any wait: the progress threads carry it. Unreceived unexpected messages
 * are released when the engines go. */
static void test_all_to_all_stress(void **state) {
    (void)state;
    vb_settings s = small_settings();
    s.credits = 4;
    net t;
    net_up(&t, 4, &s);
    enum { K = 6 };
    size_t sizes[K] = {0, 33, 1024, 1025, 9000, 70000};
    unsigned char *src[4][4][K], *dst[4][4][K];
    vb_req *sr[4][4][K], *rr[4][4][K];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < K && a != b; k++) {
                src[a][b][k] = malloc(sizes[k] + 1);
                dst[a][b][k] = calloc(1, sizes[k] + 1);
                fill(src[a][b][k], sizes[k], (unsigned)(a * 100 + b * 10 + k));
            }
    for (int k = 0; k < K; k++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) {
                if (a == b) continue;
                sr[a][b][k] = post_send(t.c[a], src[a][b][k], sizes[k], b, (uint32_t)(k % 3));
                rr[b][a][k] = post_recv(t.c[b], dst[b][a][k], sizes[k], a, (uint32_t)(k % 3));
            }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < K && a != b; k++) {
                assert_int_equal(wait_ok(t.c[b], rr[b][a][k]), sizes[k]);
                wait_ok(t.c[a], sr[a][b][k]);
                check(dst[b][a][k], sizes[k], (unsigned)(a * 100 + b * 10 + k));
                free(src[a][b][k]);
                free(dst[b][a][k]);
            }
    /* leave two unexpected messages behind (one eager, one RTS): freed with the engine */
    static unsigned char left[2][20000];
    vb_req *l1 = post_send(t.c[0], left[0], 10, 1, 99);
    vb_req *l2 = post_send(t.c[0], left[1], sizeof left[1], 1, 99);
    wait_ok(t.c[0], l1);
    assert_int_equal(vb_wait(t.c[0], l2, 0.1, NULL), PLAIT_ERR_TIMEOUT);
    vb_abort(t.c[0], "test over"); /* fails l2, which the caller then releases */
    wait_fails(t.c[0], l2, PLAIT_ERR_PEER_LOST, "test over");
    net_down(&t);
}

/* Three ranks send to one whose shared receive queue is smaller than the
 * credits they hold together: sends wait for receive buffers (RNR) instead
 * of failing, and everything arrives in order. */
static void test_incast_beyond_the_receive_queue(void **state) {
    (void)state;
    vb_settings s = small_settings();
    s.rx_depth = 16;
    s.credits = 8;
    net t;
    net_up(&t, 4, &s);
    enum { M = 50 };
    static unsigned char src[4][M][200], dst[4][M][200];
    vb_req *sr[4][M], *rr[4][M];
    for (int i = 0; i < M; i++)
        for (int p = 1; p < 4; p++) {
            fill(src[p][i], 200, (unsigned)(p * 1000 + i));
            sr[p][i] = post_send(t.c[p], src[p][i], 200, 0, 0);
        }
    for (int i = 0; i < M; i++)
        for (int p = 1; p < 4; p++) rr[p][i] = post_recv(t.c[0], dst[p][i], 200, p, 0);
    for (int i = 0; i < M; i++)
        for (int p = 1; p < 4; p++) {
            assert_int_equal(wait_ok(t.c[0], rr[p][i]), 200);
            wait_ok(t.c[p], sr[p][i]);
            check(dst[p][i], 200, (unsigned)(p * 1000 + i));
        }
    net_down(&t);
}

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager_both_orders),
        cmocka_unit_test(test_rendezvous_both_orders_in_pieces),
        cmocka_unit_test(test_order_per_tag),
        cmocka_unit_test(test_longer_than_the_receive),
        cmocka_unit_test(test_credits_run_dry_and_come_back),
        cmocka_unit_test(test_derived_communicators_keep_apart),
        cmocka_unit_test(test_abort_child_releases_the_sender),
        cmocka_unit_test(test_world_abort_reaches_the_peer),
        cmocka_unit_test(test_dead_link_fails_the_peer),
        cmocka_unit_test(test_garbage_closes_the_connection),
        cmocka_unit_test(test_failed_read),
        cmocka_unit_test(test_timeout_keeps_the_request),
        cmocka_unit_test(test_user_registration),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_all_to_all_stress),
        cmocka_unit_test(test_incast_beyond_the_receive_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
