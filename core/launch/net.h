/*
 * Small socket helpers shared by the rendezvous store, the bootstrap and the
 * launcher: address parsing, deadline-bounded blocking I/O, randomness and a
 * constant-time comparison. Everything here is thread-safe (no shared state)
 * and reports failures through plait_set_error() with the address involved.
 */
#ifndef PLAIT_CORE_NET_H
#define PLAIT_CORE_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <plait/types.h>

#include "runtime/clock.h" /* deadlines are plait_clock_now() seconds */


/* Split "host:port" ("[v6]:port" for IPv6) into its parts. `host` receives
 * at most `host_cap` bytes. Returns PLAIT_ERR_INVALID_CONFIG naming `what`
 * (e.g. "[comm] rendezvous") when malformed. */
plait_status plait_net_split_hostport(const char *text, const char *what, char *host, size_t host_cap,
                                      int *port);

/* Resolve `host` (name or literal) to its first IPv4/IPv6 address with
 * `port` filled in. */
plait_status plait_net_resolve(const char *host, int port, struct sockaddr_storage *out,
                               socklen_t *out_len);

/* "1.2.3.4:567" / "[::1]:567" for messages. Never fails (writes "?" on
 * unknown families). Returns `buf`. */
const char *plait_net_addr_str(const struct sockaddr *sa, char *buf, size_t cap);
/* The peer address of a connected socket as text ("?" if unknown). */
const char *plait_net_peer_str(int fd, char *buf, size_t cap);

/* Create a listening TCP socket bound to `addr` (port 0 = ephemeral),
 * SO_REUSEADDR, close-on-exec, blocking. Returns the fd or -1 with the error
 * set (naming the address). */
int plait_net_listen(const struct sockaddr *addr, socklen_t len, int backlog);

/* Connect to `addr`, retrying refused/unreachable attempts every ~50 ms
 * until `deadline` (plait_clock_now() seconds). Returns a blocking,
 * close-on-exec socket with TCP_NODELAY, or -1 with an error naming the
 * address, `what` and the last errno text. */
int plait_net_connect_retry(const struct sockaddr *addr, socklen_t len, double deadline,
                            const char *what);

/* Write/read exactly `len` bytes before `deadline`, sleeping in poll().
 * Return 0, or -1 with errno set: ETIMEDOUT at the deadline, ECONNRESET
 * (read) when the peer closed the connection, or the socket's error. */
int plait_net_write_all(int fd, const void *buf, size_t len, double deadline);
int plait_net_read_all(int fd, void *buf, size_t len, double deadline);

/* Fill `buf` with cryptographically random bytes (getrandom). */
plait_status plait_net_random(void *buf, size_t len);
/* Lower-case hex of `len` bytes into `out` (2*len+1 bytes). */
void plait_net_hex(const void *bytes, size_t len, char *out);

/* 1 if the two byte strings are equal. Runs in time depending only on the
 * lengths (tokens are compared with it so timing does not leak them). */
int plait_net_ct_equal(const void *a, size_t alen, const void *b, size_t blen);

/* Set O_NONBLOCK; 0 or -1 with errno. */
int plait_net_set_nonblocking(int fd);

#endif
