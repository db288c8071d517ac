/* The TCP plugin against a fake peer in the same process (tcp_fake_peer.h):
 * the test plays rank 1 of a 2-rank world over raw sockets, so it can send
 * what no real rank would — garbage, inconsistent headers, oversized
 * announcements — and check that only the affected operations fail, with
 * messages naming the peer, and that nothing crashes or overruns. Also:
 * timeouts that leave the request pending, abort, a vanished peer, a
 * peer's last messages before its orderly exit (also one still travelling
 * on a stream when another stream ends), one stream ending while another
 * stays open, too-short receive buffers, and [comm.tcp] ifname. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <plait/comm.h>

#include "launch/net.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "../../plugins/comm/tcp/tcp_wire.h"
#include "host/host_table.h"
#include "tcp_fake_peer.h"

/* ---- tests ------------------------------------------------------------------ */

static void inject_valid_striped(void) {
    /* 150000 bytes in three chunks, out of order over both streams */
    static unsigned char msg[150000];
    for (size_t i = 0; i < sizeof msg; i++) msg[i] = (unsigned char)(i * 7);
    send_frame(1, 0, 5, 0, sizeof msg, 65536, msg + 65536, 65536);
    send_frame(0, 0, 5, 0, sizeof msg, 131072, msg + 131072, sizeof msg - 131072);
    send_frame(0, 0, 5, 0, sizeof msg, 0, msg, 65536);
}

static void test_valid_message_from_fake(void **state) {
    (void)state;
    char *buf = malloc(200000);
    size_t n = 0;
    assert_int_equal(recv_after(inject_valid_striped, buf, 200000, &n), PLAIT_OK);
    assert_int_equal(n, 150000);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] != (unsigned char)(i * 7)) fail_msg("byte %zu wrong", i);
    free(buf);
    /* and the plugin's own frames look as documented */
    char out[100];
    memset(out, 'x', sizeof out);
    void *req;
    plait_buffer b = hb(out, sizeof out);
    assert_int_equal(g_ops->isend(g_comm, &b, 1, 9, NULL, &req), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, req, 5, NULL), PLAIT_OK);
    tcp_frame f;
    int got = 0;
    for (int s = 0; s < STREAMS && !got; s++) {
        ssize_t r = recv(g_fds[s], &f, sizeof f, MSG_DONTWAIT);
        if (r == (ssize_t)sizeof f) got = 1;
    }
    assert_true(got);
    assert_int_equal(f.magic, TCP_FRAME_MAGIC);
    assert_int_equal(f.tag, 9);
    assert_int_equal(f.msg_len, 100);
    assert_int_equal(f.chunk_len, 100);
}

static void inject_random(void) {
    unsigned char junk[4096];
    plait_net_random(junk, sizeof junk);
    plait_net_write_all(g_fds[0], junk, sizeof junk, plait_clock_now() + 5);
}

static void test_random_bytes_fail_the_operation(void **state) {
    (void)state;
    char buf[64];
    plait_status st = recv_after(inject_random, buf, sizeof buf, NULL);
    assert_int_equal(st, PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "garbage from rank 1");
    assert_contains(plait_last_error(), "bad frame magic");
    /* later operations with that peer fail at once, same reason */
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    assert_int_equal(g_ops->isend(g_comm, &b, 1, 5, NULL, &req), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "rank 1");
    /* sends to self still work */
    void *sr, *rr;
    char self_out[8] = "selfmsg", self_in[8] = {0};
    plait_buffer so = hb(self_out, 8), si = hb(self_in, 8);
    assert_int_equal(g_ops->isend(g_comm, &so, 0, 1, NULL, &sr), PLAIT_OK);
    assert_int_equal(g_ops->irecv(g_comm, &si, 0, 1, NULL, &rr), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, rr, 1, NULL), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, sr, 1, NULL), PLAIT_OK);
    assert_string_equal(self_in, "selfmsg");
}

static void inject_chunk_outside(void) {
    char p[16] = {0};
    send_frame(0, 0, 5, 0, 10, 4, p, 16); /* 4 + 16 > 10 */
}

static void test_chunk_outside_message(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(recv_after(inject_chunk_outside, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "outside its message");
}

static void inject_huge(void) { send_frame(0, 0, 5, 0, 1ull << 40, 0, NULL, 0); }

static void test_oversized_announcement(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(recv_after(inject_huge, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "max_message");
}

static void inject_unknown_comm(void) { send_frame(1, 77, 5, 0, 4, 0, "abcd", 4); }

static void test_unknown_communicator(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(recv_after(inject_unknown_comm, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "unknown communicator 77");
}

static void inject_inconsistent(void) {
    char p[8] = {0};
    send_frame(0, 0, 5, 0, 16, 0, p, 8);
    send_frame(1, 0, 5, 0, 24, 8, p, 8); /* same message, different length */
}

static void test_inconsistent_chunks(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(recv_after(inject_inconsistent, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "an earlier one said");
}

static void inject_overfull(void) {
    char p[8] = {0};
    send_frame(0, 0, 5, 0, 12, 0, p, 8);
    send_frame(1, 0, 5, 0, 12, 0, p, 8); /* 16 announced bytes for a 12-byte message */
}

static void test_chunks_exceed_message(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(recv_after(inject_overfull, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "add up to more");
}

static void inject_long_then_short(void) {
    char p[100];
    memset(p, 'L', sizeof p);
    send_frame(0, 0, 5, 0, 100, 0, p, 100); /* longer than the 50-byte buffer */
    send_frame(0, 0, 5, 1, 3, 0, "abc", 3);
}

static void test_too_long_for_buffer_keeps_stream(void **state) {
    (void)state;
    char buf[50];
    memset(buf, 0, sizeof buf);
    assert_int_equal(recv_after(inject_long_then_short, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "longer than the receive buffer of 50 bytes");
    for (size_t i = 0; i < sizeof buf; i++) assert_int_equal(buf[i], 0); /* nothing written */
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    size_t n = 0;
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, req, 5, &n), PLAIT_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, "abc", 3);
}

static void test_timeout_leaves_request_pending(void **state) {
    (void)state;
    char buf[16];
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    double t0 = plait_clock_now();
    assert_int_equal(g_ops->wait(g_comm, req, 0.2, NULL), PLAIT_ERR_TIMEOUT);
    double el = plait_clock_now() - t0;
    assert_true(el >= 0.15); /* not before its timeout */
    assert_contains(plait_last_error(), "rank 1");
    int done = 1;
    assert_int_equal(g_ops->test(g_comm, req, &done, NULL), PLAIT_OK);
    assert_int_equal(done, 0);
    send_frame(1, 0, 5, 0, 0, 0, NULL, 0); /* a zero-byte message */
    size_t n = 99;
    assert_int_equal(g_ops->wait(g_comm, req, 5, &n), PLAIT_OK);
    assert_int_equal(n, 0);
}

static void inject_close(void) {
    for (int i = STREAMS - 1; i >= 0; i--) {
        close(g_fds[i]);
        g_fds[i] = -1;
    }
}

/* A process that exits, or dies, closes every stream. */
static void test_peer_vanishes(void **state) {
    (void)state;
    char buf[16];
    plait_status st = recv_after(inject_close, buf, sizeof buf, NULL);
    assert_int_equal(st, PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
}

/* The end of one stream in the middle of a frame truncates a message that
 * can never be whole: the peer is lost at once, though its other stream is
 * open. */
static void inject_end_mid_frame(void) {
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, 0, 5, 0, 100, 100, 0};
    assert_int_equal(plait_net_write_all(g_fds[1], &f, sizeof f, plait_clock_now() + 5), 0);
    assert_int_equal(plait_net_write_all(g_fds[1], "0123456789", 10, plait_clock_now() + 5), 0);
    close(g_fds[1]);
    g_fds[1] = -1;
}

static void test_stream_ends_mid_frame(void **state) {
    (void)state;
    char buf[128];
    assert_int_equal(recv_after(inject_end_mid_frame, buf, sizeof buf, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection (stream 1");
}

/* A reset (not an orderly end) on one stream is the peer's loss at once. */
static void inject_reset(void) {
    struct linger lg = {1, 0}; /* close() sends a reset */
    setsockopt(g_fds[1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(g_fds[1]);
    g_fds[1] = -1;
}

static void test_stream_reset_is_a_loss(void **state) {
    (void)state;
    char buf[16];
    assert_int_equal(recv_after(inject_reset, buf, sizeof buf, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "connection to rank 1 (stream 1");
}

/* A peer that ends one stream in order and keeps the other open is not
 * lost: a receive it can still satisfy waits as for a live peer, one it
 * does not satisfy ends at its timeout naming the rank and the stream that
 * ended, and the end of its last stream is its loss. */
static void test_one_stream_ended_others_open(void **state) {
    (void)state;
    close(g_fds[1]);
    g_fds[1] = -1;
    char buf[16] = {0};
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    plait_status st = g_ops->wait(g_comm, req, 0.3, NULL);
    if (st != PLAIT_ERR_TIMEOUT) fail_msg("status %d, expected a timeout: %s", st, plait_last_error());
    assert_contains(plait_last_error(), "receive from rank 1");
    assert_contains(plait_last_error(), "rank 1 closed stream 1");
    send_frame(0, 0, 5, 0, 6, 0, "alive", 6);
    size_t n = 0;
    assert_int_equal(g_ops->wait(g_comm, req, 5, &n), PLAIT_OK);
    assert_int_equal(n, 6);
    assert_string_equal(buf, "alive");
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    close(g_fds[0]);
    g_fds[0] = -1;
    assert_int_equal(g_ops->wait(g_comm, req, 5, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
}

static void test_abort_fails_pending(void **state) {
    (void)state;
    char buf[16];
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    g_ops->abort(g_comm, "the job is going down (test)");
    assert_int_equal(g_ops->wait(g_comm, req, 5, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "going down (test)");
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_ERR_PEER_LOST);
}

static void test_unexpected_then_posted(void **state) {
    (void)state;
    /* arrives before the receive: buffered, then copied once posted */
    send_frame(0, 0, 8, 0, 5, 0, "hello", 5);
    send_frame(1, 0, 8, 1, 5, 0, "world", 5);
    usleep(20000);
    char a[8] = {0}, b2[8] = {0};
    void *r1, *r2;
    plait_buffer ba = hb(a, 8), bb = hb(b2, 8);
    assert_int_equal(g_ops->irecv(g_comm, &ba, 1, 8, NULL, &r1), PLAIT_OK);
    assert_int_equal(g_ops->irecv(g_comm, &bb, 1, 8, NULL, &r2), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, r2, 5, NULL), PLAIT_OK);
    assert_int_equal(g_ops->wait(g_comm, r1, 5, NULL), PLAIT_OK);
    assert_string_equal(a, "hello");
    assert_string_equal(b2, "world");
}

/* A rank that finished sends its last message and closes every stream (an
 * orderly exit). Its receiver may post that receive only after it has seen
 * the streams end: the message was read before the end and is delivered;
 * only a receive beyond it fails, naming the closed connection. Either
 * order of the two ends is covered: `first` is the stream closed first. */
static void last_message_then_exit(int first) {
    send_frame(1, 0, 8, 0, 11, 0, "last words", 11);
    close(g_fds[first]);
    close(g_fds[1 - first]);
    g_fds[0] = g_fds[1] = -1;
    /* wait until the plugin has seen the ends: a receive on another tag fails */
    char other[8], buf[16] = {0};
    void *req;
    plait_buffer bo = hb(other, sizeof other), bb = hb(buf, sizeof buf);
    plait_status st = g_ops->irecv(g_comm, &bo, 1, 9, NULL, &req);
    if (st == PLAIT_OK) st = g_ops->wait(g_comm, req, 5, NULL);
    assert_int_equal(st, PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
    size_t n = 0;
    st = g_ops->irecv(g_comm, &bb, 1, 8, NULL, &req);
    if (st != PLAIT_OK) fail_msg("the last message is lost to the orderly close: %s", plait_last_error());
    assert_int_equal(g_ops->wait(g_comm, req, 5, &n), PLAIT_OK);
    assert_int_equal(n, 11);
    assert_string_equal(buf, "last words");
    assert_int_equal(g_ops->irecv(g_comm, &bb, 1, 8, NULL, &req), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
}

static void test_last_message_before_orderly_close(void **state) {
    (void)state;
    last_message_then_exit(0);
}

static void test_last_message_on_the_stream_closed_first(void **state) {
    (void)state;
    last_message_then_exit(1);
}

/* The message of several MiB that the fake sends last on stream 1, and the
 * part of it written before stream 0 ends. */
#define LAST_BIG (4u << 20)
#define LAST_BIG_HEAD (32u << 10)

static unsigned char g_last_big[LAST_BIG];

/* The rest of the big message on stream 1, then the end of stream 1: what
 * an exiting rank's kernel still sends after the rank closed its streams.
 * It gets through only as fast as the plugin reads (small buffers). */
static void *write_rest_and_close(void *arg) {
    (void)arg;
    int fd = g_fds[1];
    if (plait_net_write_all(fd, g_last_big + LAST_BIG_HEAD, LAST_BIG - LAST_BIG_HEAD, plait_clock_now() + 20) != 0)
        fprintf(stderr, "fake: writing the rest of the last message failed: %s\n", strerror(errno));
    close(fd);
    return NULL;
}

/* Small socket buffers and messages of several MiB. */
static int setup_small_buffers(void **state) {
    g_extra_override[0] = "comm.tcp.rcvbuf=64K";
    g_extra_override[1] = "comm.tcp.max_message=8M";
    return tcp_fake_setup(state);
}

/* A rank that finished sends its last message, larger than the socket
 * buffers hold, on stream 1 and closes every stream, stream 0 first: the
 * end of stream 0 reaches the receiver while most of the message is still
 * travelling on stream 1. The receive, posted after that end was seen,
 * gets every byte; the end of the last stream is the peer's loss. */
static void test_last_big_message_outlives_the_first_end(void **state) {
    (void)state;
    int small = 64 << 10;
    setsockopt(g_fds[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    for (size_t i = 0; i < LAST_BIG; i++) g_last_big[i] = (unsigned char)(i * 13 + (i >> 16));
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, 0, 8, 0, LAST_BIG, LAST_BIG, 0};
    assert_int_equal(plait_net_write_all(g_fds[1], &f, sizeof f, plait_clock_now() + 5), 0);
    assert_int_equal(plait_net_write_all(g_fds[1], g_last_big, LAST_BIG_HEAD, plait_clock_now() + 5), 0);
    close(g_fds[0]);
    g_fds[0] = -1;
    /* wait until the plugin has seen stream 0 end: a receive on another tag
     * times out saying so (or fails, the peer counted lost) */
    char other[8];
    void *oreq, *req;
    plait_buffer bo = hb(other, sizeof other);
    assert_int_equal(g_ops->irecv(g_comm, &bo, 1, 9, NULL, &oreq), PLAIT_OK);
    plait_status st = PLAIT_ERR_TIMEOUT;
    for (int i = 0; i < 100 && st == PLAIT_ERR_TIMEOUT && !strstr(plait_last_error(), "rank 1 closed stream 0"); i++)
        st = g_ops->wait(g_comm, oreq, 0.1, NULL);
    if (st == PLAIT_ERR_TIMEOUT) assert_contains(plait_last_error(), "rank 1 closed stream 0");
    unsigned char *buf = calloc(1, LAST_BIG);
    plait_buffer bb = hb(buf, LAST_BIG);
    st = g_ops->irecv(g_comm, &bb, 1, 8, NULL, &req);
    if (st != PLAIT_OK) {
        free(buf);
        fail_msg("the last message is lost to the end of stream 0: %s", plait_last_error());
    }
    pthread_t t;
    pthread_create(&t, NULL, write_rest_and_close, NULL);
    size_t n = 0;
    st = g_ops->wait(g_comm, req, 20, &n);
    pthread_join(t, NULL);
    g_fds[1] = -1;
    if (st != PLAIT_OK) {
        free(buf);
        fail_msg("the last message failed: %s", plait_last_error());
    }
    assert_int_equal(n, LAST_BIG);
    int same = memcmp(buf, g_last_big, LAST_BIG) == 0;
    free(buf);
    assert_true(same);
    /* both streams have ended: the peer is lost, the close named */
    assert_int_equal(g_ops->wait(g_comm, oreq, 5, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
    assert_int_equal(g_ops->irecv(g_comm, &bb, 1, 8, NULL, &req), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 closed the connection");
}

static void send_control(int stream, uint8_t type, uint64_t msg_len, uint64_t a, uint64_t b) {
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, type, 0, 0, 5, 0, 16, msg_len, 0};
    uint64_t payload[2] = {a, b};
    assert_int_equal(plait_net_write_all(g_fds[stream], &f, sizeof f, plait_clock_now() + 5), 0);
    assert_int_equal(plait_net_write_all(g_fds[stream], payload, sizeof payload, plait_clock_now() + 5), 0);
}

static void inject_rts(void) { send_control(0, TCP_FRAME_RTS, 1000, 0x1000, 1); }

/* A peer that was not found readable at setup cannot make us read its memory. */
static void test_unagreed_single_copy_refused(void **state) {
    (void)state;
    char buf[2000];
    assert_int_equal(recv_after(inject_rts, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "never agreed to read from rank 1");
}

static void inject_bad_ack(void) { send_control(1, TCP_FRAME_ACK, 0, 12345, 0); }

static void test_unknown_acknowledgement(void **state) {
    (void)state;
    char buf[16];
    assert_int_equal(recv_after(inject_bad_ack, buf, sizeof buf, NULL), PLAIT_ERR_PROTOCOL);
    assert_contains(plait_last_error(), "acknowledgement for unknown message 12345");
}

/* [comm.tcp] ifname: a name that matches nothing is refused with the list
 * of interfaces; a prefix selects the interface ("l" -> lo). */
static void test_ifname_unknown(void **state) {
    (void)state;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "tcp");
    assert_non_null(d);
    plait_config *cfg = plait_config_new();
    plait_config_declare_core(cfg);
    plait_config_declare(cfg, "comm.tcp", d->keys, d->n_keys, d->key_size, "tcp");
    plait_config_add_override(cfg, "comm.tcp.ifname=nosuchif9");
    char *empty_env[] = {NULL};
    assert_int_equal(plait_config_finalize(cfg, empty_env), PLAIT_OK);
    plait_bootstrap bs = tcp_fake_bootstrap();
    plait_comm_init init = {sizeof init, plait_host_table(), cfg, &bs, 0, 2};
    void *comm = NULL;
    const plait_comm_ops *ops = d->ops;
    assert_int_equal(ops->init(&init, &comm), PLAIT_ERR_INVALID_CONFIG);
    assert_contains(plait_last_error(), "ifname = 'nosuchif9' matches no interface");
    assert_contains(plait_last_error(), "lo (127.0.0.1)");
    plait_config_free(cfg);
}

static int setup_ifname_prefix(void **state) {
    g_extra_override[0] = "comm.tcp.ifname=l";
    return tcp_fake_setup(state);
}

static void test_ifname_prefix_works(void **state) {
    (void)state;
    test_valid_message_from_fake(state);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tcp_fake_setup, tcp_fake_teardown)

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        T(test_valid_message_from_fake),
        T(test_random_bytes_fail_the_operation),
        T(test_chunk_outside_message),
        T(test_oversized_announcement),
        T(test_unknown_communicator),
        T(test_inconsistent_chunks),
        T(test_chunks_exceed_message),
        T(test_too_long_for_buffer_keeps_stream),
        T(test_timeout_leaves_request_pending),
        T(test_peer_vanishes),
        T(test_abort_fails_pending),
        T(test_unexpected_then_posted),
        T(test_last_message_before_orderly_close),
        T(test_last_message_on_the_stream_closed_first),
        cmocka_unit_test_setup_teardown(test_last_big_message_outlives_the_first_end, setup_small_buffers,
                                        tcp_fake_teardown),
        T(test_one_stream_ended_others_open),
        T(test_stream_ends_mid_frame),
        T(test_stream_reset_is_a_loss),
        T(test_unagreed_single_copy_refused),
        T(test_unknown_acknowledgement),
        cmocka_unit_test(test_ifname_unknown),
        cmocka_unit_test_setup_teardown(test_ifname_prefix_works, setup_ifname_prefix, tcp_fake_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_plugins_unload_all();
    return rc;
}
