/*
 * A loopback fabric for the verbs engine's tests: N endpoints in one
 * process behave like RC queue pairs over a shared receive queue.
 *   - a SEND lands in a buffer the target posted (in order per sender);
 *     without one it waits (RNR) until the target posts a receive; the
 *     sender's completion arrives once it landed;
 *   - an RDMA READ copies from the peer's memory only if that range is
 *     inside a live registration with that rkey (else a remote access
 *     error, as an HCA would report), then completes;
 *   - kill_peer puts the pair in the error state: work posted afterwards,
 *     or still waiting, completes with a flush error, and the peer's sends
 *     to us fail with "transport retry counter exceeded";
 *   - each endpoint has a progress thread that sleeps until a completion is
 *     queued, then runs vb_progress under the engine's mutex, exactly like
 *     verbs_ib.c's thread on the completion channel.
 * Failure injection: fail every READ from a peer; corrupt the next SEND.
 */
#ifndef PLAIT_TEST_FAKE_FABRIC_H
#define PLAIT_TEST_FAKE_FABRIC_H

#include "verbs.h"

typedef struct ff_world ff_world;
typedef struct ff_ep ff_ep;

extern const vb_fabric_ops ff_ops;

ff_world *ff_world_new(int n);
/* The endpoint of `rank` (the `fab` argument of vb_engine_new). */
ff_ep *ff_endpoint(ff_world *w, int rank);
/* Start the endpoint's progress thread for engine `e`. */
void ff_start(ff_ep *ep, vb_engine *e);
/* Stop every progress thread, then free (engines freed after stop). */
void ff_stop_all(ff_world *w);
void ff_world_free(ff_world *w);

/* Injection. */
void ff_fail_reads_from(ff_world *w, int reader, int owner);
void ff_corrupt_next_send(ff_world *w, int from);
/* A completion with an error for the pair (from -> to), as if the link died. */
void ff_break_link(ff_world *w, int from, int to);

/* Counters. */
int ff_sends(ff_world *w, int from, int type);   /* SENDs of a message type posted by `from` */
int ff_live_registrations(ff_world *w, int rank);

#endif
