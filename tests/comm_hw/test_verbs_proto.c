/*
 * The verbs plugin's protocol logic without hardware: header validation,
 * eager/rendezvous choice and READ chunking, the credit state machine (also
 * simulated between two endpoints: no deadlock, no buffer overrun, grants
 * always flow), and matching per (peer, communicator, tag).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "verbs_proto.h"

static size_t build(int type, uint64_t len, char *wire) {
    vb_hdr h = vp_header((uint8_t)type, 3, 7, 9, 11, type == VB_EAGER || type == VB_RTS || type == VB_ABORT ? len : 0);
    memcpy(wire, &h, sizeof h);
    size_t n = vp_wire_len(type, len);
    memset(wire + sizeof h, 0x5a, n - sizeof h);
    return n;
}

static void test_framing_accepts_every_type(void **state) {
    (void)state;
    char wire[4096], why[192];
    int types[] = {VB_EAGER, VB_RTS, VB_FIN, VB_CREDIT, VB_ABORT};
    uint64_t lens[] = {100, 1 << 20, 0, 0, 40};
    for (int i = 0; i < 5; i++) {
        size_t n = build(types[i], lens[i], wire);
        assert_int_equal(vp_check(wire, n, 1024, 1ull << 30, why, sizeof why), types[i]);
    }
    /* zero-byte eager messages are legal */
    size_t n = build(VB_EAGER, 0, wire);
    assert_int_equal(n, sizeof(vb_hdr));
    assert_int_equal(vp_check(wire, n, 1024, 1ull << 30, why, sizeof why), VB_EAGER);
}

static void expect_reject(const char *wire, size_t n, const char *needle) {
    char why[192] = "";
    assert_int_equal(vp_check(wire, n, 1024, 1ull << 30, why, sizeof why), -1);
    if (!strstr(why, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, why);
}

static void test_framing_rejects_garbage(void **state) {
    (void)state;
    char wire[4096];
    memset(wire, 0, sizeof wire);
    expect_reject(wire, 10, "shorter than a header");
    size_t n = build(VB_EAGER, 100, wire);
    wire[0] ^= 1;
    expect_reject(wire, n, "magic");
    n = build(VB_EAGER, 100, wire);
    wire[2] = 99; /* version */
    expect_reject(wire, n, "version");
    n = build(VB_EAGER, 100, wire);
    expect_reject(wire, n - 1, "announces 100 bytes but carries 99");
    n = build(VB_EAGER, 2000, wire); /* over eager_max */
    expect_reject(wire, n, "eager_max 1024");
    n = build(VB_RTS, 0, wire);
    expect_reject(wire, n, "RTS");
    n = build(VB_RTS, 1ull << 31, wire); /* over max_message */
    expect_reject(wire, n, "limit");
    n = build(VB_FIN, 0, wire);
    expect_reject(wire, n + 1, "FIN");
    n = build(VB_CREDIT, 0, wire);
    expect_reject(wire, n + 4, "CREDIT");
    vb_hdr h = vp_header(42, 0, 0, 0, 0, 0);
    memcpy(wire, &h, sizeof h);
    expect_reject(wire, sizeof h, "unknown message type 42");
}

static void test_protocol_choice_and_chunks(void **state) {
    (void)state;
    assert_int_equal(vp_protocol_for(0, 8192), VB_EAGER);
    assert_int_equal(vp_protocol_for(8192, 8192), VB_EAGER);
    assert_int_equal(vp_protocol_for(8193, 8192), VB_RTS);
    assert_int_equal(vp_chunks(10, 4), 3);
    assert_int_equal(vp_chunk_len(10, 4, 0), 4);
    assert_int_equal(vp_chunk_len(10, 4, 2), 2);
    assert_int_equal(vp_chunk_len(10, 4, 3), 0);
    assert_int_equal(vp_chunks(8, 4), 2);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < vp_chunks(1000003, 4096); i++) sum += vp_chunk_len(1000003, 4096, i);
    assert_int_equal(sum, 1000003);
}

static void test_credit_rules(void **state) {
    (void)state;
    vp_credit c;
    vp_credit_init(&c, 8, 2);
    assert_true(vp_credit_take(&c, VB_EAGER));
    assert_true(vp_credit_take(&c, VB_FIN));
    assert_false(vp_credit_take(&c, VB_RTS));  /* window exhausted */
    assert_true(vp_credit_take(&c, VB_CREDIT)); /* grants always go */
    assert_true(vp_credit_take(&c, VB_ABORT));
    vp_credit_received(&c, VB_EAGER, 2);
    assert_int_equal(c.credits, 2);
    assert_int_equal(c.to_return, 1);
    vp_credit_received(&c, VB_CREDIT, 0); /* uncounted: nothing owed */
    assert_int_equal(c.to_return, 1);
    assert_false(vp_credit_due(&c));
    for (int i = 0; i < 3; i++) vp_credit_received(&c, VB_EAGER, 0);
    assert_true(vp_credit_due(&c)); /* half the window (4) owed */
    assert_int_equal(vp_credit_grant(&c), 4);
    assert_int_equal(c.to_return, 0);
    assert_false(vp_credit_due(&c));
}

/* Two endpoints exchanging random traffic through bounded receive
 * buffers: every message eventually goes, no endpoint ever has more
 * unconsumed counted messages than the window it granted, and grants never
 * stall. The consumer side drains in bursts, so windows do run dry. */
typedef struct sim_msg {
    int type;
    uint16_t grant;
} sim_msg;

typedef struct sim_ep {
    vp_credit cr;
    int backlog;          /* data messages the application wants to send */
    sim_msg inbox[1024];  /* arrived, not consumed */
    int in_n;
    int counted_in_inbox;
} sim_ep;

static unsigned rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 16;
}

static void sim_send(sim_ep *from, sim_ep *to, int type) {
    assert_true(to->in_n < 1024);
    to->inbox[to->in_n++] = (sim_msg){type, vp_credit_grant(&from->cr)};
    if (vp_counted(type)) to->counted_in_inbox++;
}

static void sim_consume(sim_ep *ep, int max) {
    int n = max < ep->in_n ? max : ep->in_n;
    for (int i = 0; i < n; i++) {
        sim_msg m = ep->inbox[i];
        vp_credit_received(&ep->cr, m.type, m.grant);
        if (vp_counted(m.type)) ep->counted_in_inbox--;
    }
    memmove(ep->inbox, ep->inbox + n, (size_t)(ep->in_n - n) * sizeof(sim_msg));
    ep->in_n -= n;
}

static void test_credit_simulation(void **state) {
    (void)state;
    for (unsigned seed = 1; seed <= 50; seed++) {
        unsigned s = seed;
        int wa = 2 + (int)(rnd(&s) % 16), wb = 2 + (int)(rnd(&s) % 16);
        sim_ep a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        vp_credit_init(&a.cr, wa, wb);
        vp_credit_init(&b.cr, wb, wa);
        a.backlog = 500;
        b.backlog = (int)(rnd(&s) % 300);
        int sent_a = 0, sent_b = 0, steps = 0;
        while ((a.backlog || b.backlog || a.in_n || b.in_n) && steps < 100000) {
            steps++;
            sim_ep *x = rnd(&s) & 1 ? &a : &b, *y = x == &a ? &b : &a;
            switch (rnd(&s) % 3) {
            case 0: /* send data while the window allows */
                while (x->backlog && vp_credit_take(&x->cr, VB_EAGER)) {
                    sim_send(x, y, VB_EAGER);
                    x->backlog--;
                    if (x == &a) sent_a++;
                    else sent_b++;
                }
                break;
            case 1: sim_consume(x, 1 + (int)(rnd(&s) % 8)); break;
            default: break;
            }
            /* what the engine does after every batch: grant when due */
            if (vp_credit_due(&x->cr)) {
                assert_true(vp_credit_take(&x->cr, VB_CREDIT));
                sim_send(x, y, VB_CREDIT);
            }
            /* a receiver never holds more counted messages than it granted */
            assert_true(a.counted_in_inbox <= wa);
            assert_true(b.counted_in_inbox <= wb);
        }
        assert_int_equal(a.backlog, 0);
        assert_int_equal(b.backlog, 0);
        assert_int_equal(sent_a, 500);
    }
}

static void test_queue_ops(void **state) {
    (void)state;
    vp_link x[4];
    vp_queue q = {0};
    for (int i = 0; i < 4; i++) vp_queue_push(&q, &x[i]);
    assert_true(vp_queue_remove(&q, &x[3]));
    assert_ptr_equal(q.tail, &x[2]);
    assert_true(vp_queue_remove(&q, &x[0]));
    assert_false(vp_queue_remove(&q, &x[0]));
    assert_ptr_equal(vp_queue_pop(&q), &x[1]);
    assert_ptr_equal(vp_queue_pop(&q), &x[2]);
    assert_null(vp_queue_pop(&q));
    assert_null(q.tail);
}

static void test_matching_order_and_separation(void **state) {
    (void)state;
    vp_table t;
    assert_int_equal(vp_table_init(&t), 0);
    vp_chan *a = vp_chan_find(&t, 1, 0, 5, 1);
    vp_chan *b = vp_chan_find(&t, 1, 0, 6, 1);   /* other tag */
    vp_chan *c = vp_chan_find(&t, 1, 77, 5, 1);  /* other communicator */
    vp_chan *d = vp_chan_find(&t, 2, 0, 5, 1);   /* other peer */
    assert_true(a != b && a != c && a != d && b != c);
    assert_ptr_equal(vp_chan_find(&t, 1, 0, 5, 0), a);
    assert_null(vp_chan_find(&t, 3, 0, 5, 0));

    /* receives first: the n-th message goes to the n-th receive */
    vp_link r[3], m[3], *got = NULL;
    for (int i = 0; i < 3; i++) assert_null(vp_post_recv(a, &r[i]));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(vp_arrive(a, (uint32_t)i, &m[i], &got), 0);
        assert_ptr_equal(got, &r[i]);
    }
    /* messages first: queued, then handed out in arrival order */
    vp_link r2[2], m2[2];
    assert_int_equal(vp_arrive(b, 0, &m2[0], &got), 0);
    assert_null(got);
    assert_int_equal(vp_arrive(b, 1, &m2[1], &got), 0);
    assert_ptr_equal(vp_post_recv(b, &r2[0]), &m2[0]);
    assert_ptr_equal(vp_post_recv(b, &r2[1]), &m2[1]);
    /* a sequence gap is a protocol error, and does not advance the channel */
    vp_link bad;
    assert_int_equal(vp_arrive(c, 1, &bad, &got), -1);
    assert_int_equal(c->recv_seq, 0);
    assert_int_equal(vp_arrive(c, 0, &bad, &got), 0);

    /* dropping one communicator leaves the others */
    vp_table_drop(&t, 77, 0, NULL, NULL);
    assert_null(vp_chan_find(&t, 1, 77, 5, 0));
    assert_ptr_equal(vp_chan_find(&t, 1, 0, 5, 0), a);
    assert_ptr_equal(vp_chan_find(&t, 2, 0, 5, 0), d);
    vp_table_free(&t);
}

static int drops_posted, drops_unexpected;
static void count_drop(vp_link *x, int posted, void *ctx) {
    (void)x;
    (void)ctx;
    if (posted) drops_posted++;
    else drops_unexpected++;
}

static void test_table_growth_and_drop(void **state) {
    (void)state;
    vp_table t;
    assert_int_equal(vp_table_init(&t), 0);
    static vp_link items[1000];
    for (int i = 0; i < 1000; i++) {
        vp_chan *ch = vp_chan_find(&t, i % 10, (uint32_t)(i % 3), (uint32_t)i, 1);
        assert_non_null(ch);
        if (i % 2) assert_null(vp_post_recv(ch, &items[i]));
        else {
            vp_link *got;
            assert_int_equal(vp_arrive(ch, 0, &items[i], &got), 0);
        }
    }
    assert_int_equal(t.n, 1000);
    assert_true(t.n_buckets >= 1000);
    for (int i = 0; i < 1000; i++)
        assert_non_null(vp_chan_find(&t, i % 10, (uint32_t)(i % 3), (uint32_t)i, 0));
    drops_posted = drops_unexpected = 0;
    vp_table_drop(&t, 1, 0, count_drop, NULL);
    assert_int_equal(drops_posted + drops_unexpected, 333);
    vp_table_drop(&t, 0, 1, count_drop, NULL);
    assert_int_equal(drops_posted, 500);
    assert_int_equal(drops_unexpected, 500);
    assert_int_equal(t.n, 0);
    vp_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_framing_accepts_every_type),
        cmocka_unit_test(test_framing_rejects_garbage),
        cmocka_unit_test(test_protocol_choice_and_chunks),
        cmocka_unit_test(test_credit_rules),
        cmocka_unit_test(test_credit_simulation),
        cmocka_unit_test(test_queue_ops),
        cmocka_unit_test(test_matching_order_and_separation),
        cmocka_unit_test(test_table_growth_and_drop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
