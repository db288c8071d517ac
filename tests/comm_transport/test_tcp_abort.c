/* A rank going down says why: the TCP plugin's ABORT frame, written after
 * the chunk in flight on each stream and read by a peer that keeps
 * reading (also when the peer reads nothing, the abort returns), and an
 * ABORT the fake peer sends mid-message, reported with its cause
 * (tcp_fake_peer.h). */
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
    return tcp_fake_setup(state);
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


#define T(f) cmocka_unit_test_setup_teardown(f, tcp_fake_setup, tcp_fake_teardown)

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_abort_mid_chunk_tells_the_peer_why, setup_big_chunks, tcp_fake_teardown),
        cmocka_unit_test_setup_teardown(test_abort_with_a_peer_not_reading_returns, setup_big_chunks,
                                        tcp_fake_teardown),
        T(test_abort_frame_after_a_chunk_is_reported),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_plugins_unload_all();
    return rc;
}
