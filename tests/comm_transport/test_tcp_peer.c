/* The TCP plugin against a fake peer in the same process: the test plays
 * rank 1 of a 2-rank world over raw sockets, so it can send what no real
 * rank would — garbage, inconsistent headers, oversized announcements — and
 * check that only the affected operations fail, with messages naming the
 * peer, and that nothing crashes or overruns. Also: timeouts that leave the
 * request pending, abort, a vanished peer, a peer's last messages before
 * its orderly exit (also one still travelling on a stream when another
 * stream ends), one stream ending while another stays open, too-short
 * receive buffers, and the reason a rank going down sends (ABORT),
 * mid-chunk and received. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

#define STREAMS 2

#define assert_contains(haystack, needle)                                                  \
    do {                                                                                   \
        if (!strstr((haystack), (needle)))                                                 \
            fail_msg("expected \"%s\" in message: %s", (needle), (haystack));              \
    } while (0)

/* ---- a two-member bootstrap shared by the plugin (rank 0) and the fake --- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tcp_addr_info info[2];
    int have[2];
} g_bs = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}}, {0, 0}};

static plait_status bs_set(void *ctx, const char *key, const void *v, size_t n) {
    (void)ctx, (void)key, (void)v, (void)n;
    return PLAIT_OK;
}
static plait_status bs_get(void *ctx, const char *key, void *v, size_t cap, size_t *n) {
    (void)ctx, (void)key, (void)v, (void)cap, (void)n;
    return plait_set_error(PLAIT_ERR_TIMEOUT, "fake bootstrap has no keys");
}
static void publish(int rank, const tcp_addr_info *info) {
    pthread_mutex_lock(&g_bs.mu);
    g_bs.info[rank] = *info;
    g_bs.have[rank] = 1;
    pthread_cond_broadcast(&g_bs.cv);
    pthread_mutex_unlock(&g_bs.mu);
}
static void await(int rank, tcp_addr_info *out) {
    pthread_mutex_lock(&g_bs.mu);
    while (!g_bs.have[rank]) pthread_cond_wait(&g_bs.cv, &g_bs.mu);
    *out = g_bs.info[rank];
    pthread_mutex_unlock(&g_bs.mu);
}
static plait_status bs_allgather(void *ctx, const void *mine, void *all, size_t bytes) {
    (void)ctx;
    if (bytes != sizeof(tcp_addr_info)) { /* the single-copy agreement: the fake reads nothing */
        memset(all, 0, 2 * bytes);
        memcpy(all, mine, bytes);
        return PLAIT_OK;
    }
    publish(0, mine);
    tcp_addr_info *a = all;
    await(0, &a[0]);
    await(1, &a[1]);
    return PLAIT_OK;
}
static plait_status bs_barrier(void *ctx) {
    (void)ctx;
    return PLAIT_OK;
}

/* ---- the fake rank 1 ----------------------------------------------------- */

static int g_fds[STREAMS]; /* fake's ends of the plugin's connections, by stream */

static void *fake_peer(void *arg) {
    (void)arg;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ls = plait_net_listen((struct sockaddr *)&sa, sizeof sa, 8);
    socklen_t sl = sizeof sa;
    getsockname(ls, (struct sockaddr *)&sa, &sl);
    tcp_addr_info me = {0};
    me.magic = TCP_ADDR_MAGIC;
    me.version = TCP_WIRE_VERSION;
    me.family = AF_INET;
    me.port = ntohs(sa.sin_port);
    memcpy(me.addr, &sa.sin_addr, 4);
    memset(me.secret, 0x42, sizeof me.secret);
    me.streams = STREAMS;
    publish(1, &me);
    for (int i = 0; i < STREAMS; i++) {
        int fd = accept(ls, NULL, NULL);
        tcp_hello h;
        if (plait_net_read_all(fd, &h, sizeof h, plait_clock_now() + 10) != 0) return NULL;
        if (h.magic != TCP_HELLO_MAGIC || h.from_rank != 0 || h.to_rank != 1 || h.stream >= STREAMS ||
            memcmp(h.secret, me.secret, sizeof me.secret) != 0)
            return NULL;
        tcp_ack ack = {TCP_ACK_MAGIC, 1};
        plait_net_write_all(fd, &ack, sizeof ack, plait_clock_now() + 10);
        g_fds[h.stream] = fd;
    }
    close(ls);
    return NULL;
}

/* ---- fixture: a fresh world per test --------------------------------------- */

static const plait_comm_ops *g_ops;
static plait_config *g_cfg;
static void *g_comm;

static const char *g_extra_override[3]; /* more [comm.tcp] settings for the next setup */

static int setup(void **state) {
    (void)state;
    memset(g_bs.have, 0, sizeof g_bs.have);
    for (int i = 0; i < STREAMS; i++) g_fds[i] = -1;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "tcp");
    if (!d) {
        fprintf(stderr, "%s\n", plait_last_error());
        return -1;
    }
    g_ops = d->ops;
    g_cfg = plait_config_new();
    plait_config_declare_core(g_cfg);
    plait_config_declare(g_cfg, "comm.tcp", d->keys, d->n_keys, d->key_size, "tcp");
    plait_config_add_override(g_cfg, "comm.tcp.streams=2");
    plait_config_add_override(g_cfg, "comm.tcp.chunk_size=64K");
    plait_config_add_override(g_cfg, "comm.tcp.max_message=1M");
    for (int i = 0; i < 3 && g_extra_override[i]; i++) plait_config_add_override(g_cfg, g_extra_override[i]);
    memset(g_extra_override, 0, sizeof g_extra_override);
    char *empty_env[] = {NULL};
    if (plait_config_finalize(g_cfg, empty_env) != PLAIT_OK) {
        fprintf(stderr, "%s\n", plait_last_error());
        return -1;
    }
    pthread_t t;
    pthread_create(&t, NULL, fake_peer, NULL);
    plait_bootstrap bs = {.struct_size = sizeof bs, .size = 2, .local_size = 2, .timeout_s = 10.0, .set = bs_set,
                          .get = bs_get, .allgather = bs_allgather, .barrier = bs_barrier};
    plait_comm_init init = {sizeof init, plait_host_table(), g_cfg, &bs, 0, 2};
    plait_status st = g_ops->init(&init, &g_comm);
    pthread_join(t, NULL);
    if (st != PLAIT_OK) {
        fprintf(stderr, "init: %s\n", plait_last_error());
        return -1;
    }
    for (int i = 0; i < STREAMS; i++)
        if (g_fds[i] < 0) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    g_ops->destroy(g_comm);
    for (int i = 0; i < STREAMS; i++)
        if (g_fds[i] >= 0) close(g_fds[i]);
    plait_config_free(g_cfg);
    return 0;
}

static plait_buffer hb(void *p, size_t n) { return (plait_buffer){p, n, PLAIT_MEM_HOST, -1}; }

static void send_frame(int stream, uint32_t comm, uint32_t tag, uint32_t seq, uint64_t msg_len, uint64_t off,
                       const void *payload, uint32_t n) {
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, comm, tag, seq, n, msg_len, off};
    assert_int_equal(plait_net_write_all(g_fds[stream], &f, sizeof f, plait_clock_now() + 5), 0);
    if (n) assert_int_equal(plait_net_write_all(g_fds[stream], payload, n, plait_clock_now() + 5), 0);
}

/* Post a receive from the fake peer, run `inject`, and return wait's status. */
static plait_status recv_after(void (*inject)(void), char *buf, size_t cap, size_t *bytes) {
    void *req;
    plait_buffer b = hb(buf, cap);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    inject();
    return g_ops->wait(g_comm, req, 5, bytes);
}

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
    return setup(state);
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

/* ---- a rank going down says why ------------------------------------------ */

/* The fake's view of one of the plugin's streams while reading frames. */
typedef struct fake_stream {
    int fd;
    unsigned char hdr[sizeof(tcp_frame)];
    size_t hdr_got;
    uint64_t left; /* payload bytes of the current frame still to come */
    int is_abort;
} fake_stream;

/* What the fake read until every stream ended. */
typedef struct fake_reading {
    int aborts; /* ABORT frames read whole */
    char why[TCP_ABORT_MAX + 1];
    size_t why_len;
    int bad_headers; /* headers without the frame magic */
    int ended;       /* streams that ended (the plugin closed them) */
} fake_reading;

/* Parse `n` bytes of stream `s` into frames. */
static void fake_parse(fake_stream *s, const unsigned char *b, size_t n, fake_reading *rd) {
    for (size_t i = 0; i < n;) {
        if (s->hdr_got < sizeof s->hdr) {
            size_t take = sizeof s->hdr - s->hdr_got < n - i ? sizeof s->hdr - s->hdr_got : n - i;
            memcpy(s->hdr + s->hdr_got, b + i, take);
            s->hdr_got += take;
            i += take;
            if (s->hdr_got < sizeof s->hdr) break;
            tcp_frame h;
            memcpy(&h, s->hdr, sizeof h);
            if (h.magic != TCP_FRAME_MAGIC) rd->bad_headers++;
            s->left = h.chunk_len;
            s->is_abort = h.type == TCP_FRAME_ABORT;
            if (s->is_abort) rd->why_len = 0;
        } else {
            size_t take = s->left < n - i ? (size_t)s->left : n - i;
            if (s->is_abort && rd->why_len + take <= TCP_ABORT_MAX) {
                memcpy(rd->why + rd->why_len, b + i, take);
                rd->why_len += take;
            }
            s->left -= take;
            i += take;
        }
        if (s->hdr_got == sizeof s->hdr && s->left == 0) { /* a whole frame */
            if (s->is_abort) rd->aborts++, rd->why[rd->why_len] = '\0';
            s->hdr_got = 0;
        }
    }
}

/* The fake reads every stream (a peer that keeps reading) until all end,
 * or 20 s pass. */
static void *fake_read_all(void *arg) {
    fake_reading *rd = arg;
    fake_stream st[STREAMS];
    memset(st, 0, sizeof st);
    for (int i = 0; i < STREAMS; i++) st[i].fd = g_fds[i];
    static unsigned char buf[1 << 16];
    double until = plait_clock_now() + 20;
    while (rd->ended < STREAMS && plait_clock_now() < until) {
        struct pollfd pf[STREAMS];
        for (int i = 0; i < STREAMS; i++) pf[i] = (struct pollfd){st[i].fd, POLLIN, 0};
        if (poll(pf, STREAMS, 100) <= 0) continue;
        for (int i = 0; i < STREAMS; i++) {
            if (st[i].fd < 0 || !pf[i].revents) continue;
            ssize_t r = recv(st[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0) fake_parse(&st[i], buf, (size_t)r, rd);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                st[i].fd = -1; /* the fake's end stays open: teardown closes it */
                rd->ended++;
            }
        }
    }
    return NULL;
}

/* 2 MiB in chunks of 1 MiB, one on each stream, through send buffers of
 * 64 KiB, and no progress thread to write more while the fake reads: both
 * streams are in the middle of a chunk when the plugin aborts. */
static int setup_big_chunks(void **state) {
    g_extra_override[0] = "comm.tcp.chunk_size=1M";
    g_extra_override[1] = "comm.tcp.sndbuf=64K";
    g_extra_override[2] = "comm.tcp.progress_thread=false";
    return setup(state);
}

static void *post_big_send(void) {
    static char big[2u << 20];
    memset(big, 'x', sizeof big);
    void *req;
    plait_buffer b = hb(big, sizeof big);
    assert_int_equal(g_ops->isend(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    return req;
}

/* The world's abort while every stream to the peer is mid-chunk: the peer,
 * which keeps reading, gets the rest of a chunk and then the reason. */
static void test_abort_mid_chunk_tells_the_peer_why(void **state) {
    (void)state;
    void *req = post_big_send();
    fake_reading rd = {0};
    pthread_t t;
    pthread_create(&t, NULL, fake_read_all, &rd);
    g_ops->abort(g_comm, "lost rank 7 in allreduce #3 (test)");
    pthread_join(t, NULL);
    assert_int_equal(rd.ended, STREAMS);
    assert_int_equal(rd.bad_headers, 0);
    if (rd.aborts != 1) fail_msg("the peer read %d ABORT frames, expected 1", rd.aborts);
    assert_string_equal(rd.why, "lost rank 7 in allreduce #3 (test)");
    assert_int_equal(g_ops->wait(g_comm, req, 5, NULL), PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "lost rank 7 in allreduce #3 (test)");
}

/* A peer that reads nothing does not hold the abort up: it returns, the
 * send fails, and the connections end. */
static void test_abort_with_a_peer_not_reading_returns(void **state) {
    (void)state;
    void *req = post_big_send();
    g_ops->abort(g_comm, "going down (test)");
    assert_int_equal(g_ops->wait(g_comm, req, 5, NULL), PLAIT_ERR_PEER_LOST);
    fake_reading rd = {0};
    fake_read_all(&rd);
    assert_int_equal(rd.ended, STREAMS);
}

/* The fake goes down mid-message as a rank does: a chunk and its reason on
 * stream 1, then both streams end, stream 0 first. */
static void *inject_abort_after_chunk(void *arg) {
    (void)arg;
    static char half[64 << 10];
    memset(half, 'y', sizeof half);
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, 0, 5, 0, sizeof half, 2 * sizeof half, 0};
    const char why[] = "lost rank 9 in allgather #4 (test)";
    tcp_frame a = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_ABORT, 0, 0, 0, 0, sizeof why - 1, sizeof why - 1, 0};
    if (plait_net_write_all(g_fds[1], &f, sizeof f, plait_clock_now() + 5) == 0 &&
        plait_net_write_all(g_fds[1], half, sizeof half, plait_clock_now() + 5) == 0 &&
        plait_net_write_all(g_fds[1], &a, sizeof a, plait_clock_now() + 5) == 0)
        (void)!plait_net_write_all(g_fds[1], why, sizeof why - 1, plait_clock_now() + 5);
    for (int i = 0; i < STREAMS; i++) {
        close(g_fds[i]);
        g_fds[i] = -1;
    }
    return NULL;
}

/* The receiver reads an ABORT that follows a whole chunk, also when it
 * notices the end of the other stream first, and reports the relayed
 * cause. */
static void test_abort_frame_after_a_chunk_is_reported(void **state) {
    (void)state;
    static char buf[128 << 10];
    void *req;
    plait_buffer b = hb(buf, sizeof buf);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    pthread_t t;
    pthread_create(&t, NULL, inject_abort_after_chunk, NULL);
    plait_status st = g_ops->wait(g_comm, req, 5, NULL);
    pthread_join(t, NULL);
    assert_int_equal(st, PLAIT_ERR_PEER_LOST);
    assert_contains(plait_last_error(), "rank 1 is going down: lost rank 9 in allgather #4 (test)");
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
    plait_bootstrap bs = {.struct_size = sizeof bs, .size = 2, .local_size = 2, .timeout_s = 10.0, .set = bs_set,
                          .get = bs_get, .allgather = bs_allgather, .barrier = bs_barrier};
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
    return setup(state);
}

static void test_ifname_prefix_works(void **state) {
    (void)state;
    test_valid_message_from_fake(state);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

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
        cmocka_unit_test_setup_teardown(test_last_big_message_outlives_the_first_end, setup_small_buffers, teardown),
        T(test_one_stream_ended_others_open),
        T(test_stream_ends_mid_frame),
        T(test_stream_reset_is_a_loss),
        T(test_unagreed_single_copy_refused),
        T(test_unknown_acknowledgement),
        cmocka_unit_test_setup_teardown(test_abort_mid_chunk_tells_the_peer_why, setup_big_chunks, teardown),
        cmocka_unit_test_setup_teardown(test_abort_with_a_peer_not_reading_returns, setup_big_chunks, teardown),
        T(test_abort_frame_after_a_chunk_is_reported),
        cmocka_unit_test(test_ifname_unknown),
        cmocka_unit_test_setup_teardown(test_ifname_prefix_works, setup_ifname_prefix, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_plugins_unload_all();
    return rc;
}
