/*
 * The coordinator of an elastic job's rounds (elastic/membership.h): a
 * thread in the store host's launcher that opens each round, closes it by
 * the rules there, watches the members' heartbeats and outcomes, ends the
 * round with a reason, and decides who is in the next one: a lost host is
 * gone, a host whose rank stopped progressing is dropped, a waiting host
 * joins. Everything it knows and says goes through the membership store
 * (elastic/membership_wire.h), so it survives the ranks and needs no other
 * channel to the launchers.
 *
 * Internal to elastic/. Thread-safe in the sense that it runs on its own
 * thread and shares nothing but the store client (itself thread-safe).
 */
#ifndef PLAIT_CORE_ELASTIC_COORDINATOR_H
#define PLAIT_CORE_ELASTIC_COORDINATOR_H

#include <stdint.h>

#include "elastic/membership.h"
#include "launch/store.h"

typedef struct elastic_coordinator elastic_coordinator;

/* Start the thread. `store` is borrowed (thread-safe client) and must
 * outlive the coordinator; `anchor` is the store host's own launcher id,
 * always node 0. */
plait_status elastic_coordinator_start(plait_store *store, const plait_membership_opts *o, uint64_t anchor,
                                       elastic_coordinator **out);
/* 1 once the job has ended (finished or failed) and the thread returned. */
int elastic_coordinator_finished(const elastic_coordinator *c);
/* Once finished: wait until every other launcher it knows has gone (said
 * goodbye, was dropped, or its heartbeat stopped for host_timeout), up to
 * the clock's `until`. 1 when all have, 0 at `until`, when the store
 * fails, or when the thread has not finished. Called by the thread that
 * started it. */
int elastic_coordinator_farewell(elastic_coordinator *c, double until);
/* Stop the thread (waiting for it) and free. NULL is ignored. */
void elastic_coordinator_stop(elastic_coordinator *c);

#endif
