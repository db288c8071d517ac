/* The fake rank 1 of a 2-rank world that the TCP plugin's tests talk to
 * over raw sockets (tcp_fake_peer.c), in the test's own process: a
 * bootstrap both sides share, the fake's ends of the plugin's streams, and
 * a fixture that gives each test a fresh world. The tests that use it
 * send what no real rank would (test_tcp_peer.c) or read what a rank
 * going down sends (test_tcp_abort.c).
 *
 * Not thread-safe: one test at a time; the fake's thread runs inside
 * tcp_fake_setup only. */
#ifndef PLAIT_TESTS_TCP_FAKE_PEER_H
#define PLAIT_TESTS_TCP_FAKE_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <plait/comm.h>

#define STREAMS 2

#define assert_contains(haystack, needle)                                                                              \
    do {                                                                                                               \
        if (!strstr((haystack), (needle))) fail_msg("expected \"%s\" in message: %s", (needle), (haystack));           \
    } while (0)

extern int g_fds[STREAMS];              /* the fake's ends of the plugin's connections, by stream */
extern const plait_comm_ops *g_ops;     /* the tcp plugin's operations */
extern void *g_comm;                    /* the plugin's world, rank 0 of 2 */
extern const char *g_extra_override[3]; /* more [comm.tcp] settings for the next setup */

/* The bootstrap the plugin and the fake share (its allgather meets the
 * fake's address; other keys are absent). */
plait_bootstrap tcp_fake_bootstrap(void);
/* cmocka fixture: loads the plugin, starts the fake, connects both
 * streams (0, or -1 with the reason on stderr); teardown ends both. */
int tcp_fake_setup(void **state);
int tcp_fake_teardown(void **state);

/* A host buffer over p. */
plait_buffer hb(void *p, size_t n);
/* The fake writes one DATA frame (header and payload) on `stream`. */
void send_frame(int stream, uint32_t comm, uint32_t tag, uint32_t seq, uint64_t msg_len, uint64_t off,
                const void *payload, uint32_t n);
/* Post a receive from the fake peer, run `inject`, and return wait's status. */
plait_status recv_after(void (*inject)(void), char *buf, size_t cap, size_t *bytes);

#endif
