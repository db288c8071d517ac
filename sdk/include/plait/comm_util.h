/*
 * plait SDK — the request engine's small pieces every point-to-point
 * transport needs alike (ABI 1.11): a peer's name in messages, a request's
 * failure recorded once, and a wait's deadline on the monotonic clock of
 * host->now(). plait's tcp and verbs comm plugins use them; a third-party
 * transport gets the same messages by using them too.
 *
 * Header-only: nothing here calls the core but host->now() and
 * host->set_error, so a plugin using it loads in any core of ABI major 1.
 * Every function is reentrant; none takes a lock (the caller holds its
 * engine's). Strings are written into the caller's buffers, truncated to
 * their capacity and always terminated.
 */
#ifndef PLAIT_COMM_UTIL_H
#define PLAIT_COMM_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <plait/host.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A peer as messages name it: "rank 3" on the world communicator (or with
 * no communicator: world_of NULL), "rank 1 of communicator 7 (world rank
 * 3)" on a derived one whose ranks map to world ranks through world_of[0,
 * size), "world rank 3" for one that is not a member. */
static inline void plait_comm_peer_name(int is_world, const int *world_of, int size, uint32_t comm_id, int world_peer,
                                        char *buf, size_t cap) {
    if (is_world || !world_of) {
        snprintf(buf, cap, "rank %d", world_peer);
        return;
    }
    for (int i = 0; i < size; i++)
        if (world_of[i] == world_peer) {
            snprintf(buf, cap, "rank %d of communicator %u (world rank %d)", i, comm_id, world_peer);
            return;
        }
    snprintf(buf, cap, "world rank %d", world_peer);
}

/* Records a request's failure: status st and the formatted message into
 * err[cap], what the request's test or wait later hands to
 * host->set_error. The caller records only a request not done yet (a
 * request fails once) and then marks it done and wakes its waiters. */
static inline void plait_req_vfail(plait_status *status, char *err, size_t cap, plait_status st, const char *fmt,
                                   va_list ap) {
    vsnprintf(err, cap, fmt, ap);
    *status = st;
}

/* The deadline of a wait of timeout_s seconds from now, on host->now()'s
 * clock (a timeout of 0 or less: now, so the wait looks once). */
static inline double plait_deadline(const plait_host *host, double timeout_s) {
    return host->now() + (timeout_s > 0 ? timeout_s : 0);
}

/* A deadline of host->now()'s clock (CLOCK_MONOTONIC) as the timespec of
 * pthread_cond_timedwait on a condition variable whose clock attribute is
 * CLOCK_MONOTONIC. */
static inline void plait_deadline_timespec(double deadline, struct timespec *ts) {
    ts->tv_sec = (time_t)deadline;
    ts->tv_nsec = (long)((deadline - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* A wait that ended at its deadline: sets PLAIT_ERR_TIMEOUT with
 * "TRANSPORT: send to PEER (tag T, N bytes) did not complete within S s"
 * (receive from, for a receive), and " (STATE)" after it when state is
 * not NULL (where the request stood); returns PLAIT_ERR_TIMEOUT. */
static inline plait_status plait_req_timeout(const plait_host *host, const char *transport, int is_send,
                                             const char *peer, unsigned tag, size_t bytes, double timeout_s,
                                             const char *state) {
    return host->set_error(PLAIT_ERR_TIMEOUT, "%s: %s %s (tag %u, %zu bytes) did not complete within %.3g s%s%s%s",
                           transport, is_send ? "send to" : "receive from", peer, tag, bytes, timeout_s,
                           state ? " (" : "", state ? state : "", state ? ")" : "");
}

#ifdef __cplusplus
}
#endif

#endif /* PLAIT_COMM_UTIL_H */
