/*
 * The job's rendezvous store: a small TCP key-value store hosted by rank 0
 * (a server thread) through which ranks find each other.
 *
 * Protocol (store_wire.h): binary frames with length limits. The first frame
 * of every connection is HELLO carrying the job's token; the server compares
 * it in constant time and drops the connection (warn log) on a mismatch, a
 * malformed or oversized frame, or silence past the hello deadline. A bad
 * client never affects other connections.
 *
 * Operations: set, get (optionally waiting for the key), add (atomic 64-bit
 * counter), and gather: each of n members stores its contribution under
 * "<prefix><index>" and waits until all n exist, receiving all of them in
 * index order — the basis of allgather and barrier. Waits end with
 * PLAIT_ERR_TIMEOUT; a timed-out gather names the indexes that are missing.
 *
 * Keys are plain strings; callers namespace them ("job/...", "c<id>/...").
 */
#ifndef PLAIT_CORE_STORE_H
#define PLAIT_CORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* Largest key and value the store accepts (frames beyond are rejected). */
#define PLAIT_STORE_MAX_KEY 1024
#define PLAIT_STORE_MAX_VALUE (64u << 20)
/* Largest token (PLAIT_JOB_TOKEN) in bytes. */
#define PLAIT_STORE_MAX_TOKEN 256
/* How long a connection may take to authenticate (a rank needs two round
 * trips; a peer without the token is dropped after this). */
#define PLAIT_STORE_HANDSHAKE_S 10.0

/* ---- server -------------------------------------------------------------- */

typedef struct plait_store_server plait_store_server;

/* Start serving on a listening socket `listen_fd` (taken over; e.g. created
 * by the launcher and inherited by rank 0) or, when listen_fd < 0, on a new
 * socket bound to `bind_host`:`port` (port 0 = ephemeral). `token` (not
 * empty) is what every client must present. `hello_timeout_s` bounds how
 * long a connection may take to authenticate. Connections still in their
 * handshake have a budget of their own (a full one drops the oldest), apart
 * from the ranks' authenticated ones; a budget that is hit, and running out
 * of file descriptors, is logged. Starts one thread.
 * Errors name the address. */
plait_status plait_store_server_start(int listen_fd, const char *bind_host, int port,
                                      const char *token, double hello_timeout_s,
                                      plait_store_server **out);
/* The port the server listens on. */
int plait_store_server_port(const plait_store_server *srv);
/* Connections rejected so far (bad token, bad frame, silence). Thread-safe. */
uint64_t plait_store_server_rejected(const plait_store_server *srv);
/* Stop: first wait up to `drain_s` seconds for every authenticated client to
 * disconnect (so ranks still using the store are not cut off), then close
 * everything and join the thread. NULL is ignored. */
void plait_store_server_stop(plait_store_server *srv, double drain_s);

/* ---- client -------------------------------------------------------------- */

typedef struct plait_store plait_store;

/* Connect to the store at `host`:`port`, presenting `token` and identifying
 * as `rank` (shown in the server's messages). Retries a refused connection
 * until `timeout_s` passes (rank 0 may start later than the others).
 * `what` describes the store in messages ("the job's store (rank 0) at
 * 127.0.0.1:4000"). Thread-safe afterwards: concurrent calls use separate
 * connections from a small pool. */
plait_status plait_store_connect(const char *host, int port, const char *token, int rank,
                                 double timeout_s, const char *what, plait_store **out);
void plait_store_close(plait_store *st);

plait_status plait_store_set(plait_store *st, const char *key, const void *value, size_t len);
/* Copy at most `cap` bytes of key's value into `value`; *len (if not NULL)
 * receives its full length. `timeout_s` <= 0: do not wait (PLAIT_ERR_INVALID_ARG
 * "not found" when absent); otherwise wait up to timeout_s for the key
 * (PLAIT_ERR_TIMEOUT naming the key). */
plait_status plait_store_get(plait_store *st, const char *key, void *value, size_t cap, size_t *len,
                             double timeout_s);
/* Atomically add `delta` to the 64-bit counter `key` (absent = 0); *result
 * (if not NULL) receives the new value. */
plait_status plait_store_add(plait_store *st, const char *key, int64_t delta, int64_t *result);

/* Store `mine` (bytes) as "<prefix><index>", wait until "<prefix>0" ..
 * "<prefix><n-1>" all exist, then copy them into `all` (n*bytes, index order).
 * Every contribution must be exactly `bytes` long. On timeout returns
 * PLAIT_ERR_TIMEOUT, fills missing[0..*n_missing) (if not NULL; capacity n)
 * with the indexes that never arrived, and sets a message naming them. */
plait_status plait_store_gather(plait_store *st, const char *prefix, int n, int index,
                                const void *mine, void *all, size_t bytes, double timeout_s,
                                int *missing, int *n_missing);

/* Give up on a store that does not answer after `seconds` (> 0): for a
 * request, past the wait it asked for; for a new connection of the pool,
 * trying to connect. By default a request waits 30 s more and a new
 * connection max(30 s, the connect timeout): a rank's store is its job's
 * lifeline. An elastic job's launchers must notice a lost store host
 * sooner (elastic/membership.c). Not thread-safe with requests in flight:
 * set it right after connecting. */
void plait_store_set_patience(plait_store *st, double seconds);

/* "host:port" the client talks to. */
const char *plait_store_address(const plait_store *st);

#endif
