/* A communicator's failure state: the first error recorded wins, the plugin
 * communicators are aborted so peers learn why, and every later call fails
 * naming it. Called by the executor, the collective algorithms and the
 * point-to-point layer; calls nothing else of core/comm, so it breaks no
 * call chain into a circle. Thread-safe (comm->lock). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commstate/comm_state.h"
#include "commstate/comm_watchdog.h"
#include "runtime/error.h"
#include "runtime/log.h"

void plait_comm_where(const plait_comm *comm, char *buf, size_t len) {
    snprintf(buf, len, "comm '%s' rank %d/%d (world rank %d)", comm->name, comm->rank, comm->size,
             comm->world_ranks[comm->rank]);
}

void plait_comm_fail(plait_comm *comm, plait_status status, const char *message) {
    pthread_mutex_lock(&comm->lock);
    int first = comm->failed == PLAIT_OK;
    if (first) {
        comm->failed = status == PLAIT_OK ? PLAIT_ERR_INTERNAL : status;
        comm->failure = strdup(message ? message : "");
    }
    pthread_mutex_unlock(&comm->lock);
    if (!first) return;
    /* The failure reaches the caller as its error, which the command prints
     * once; the rank's log file keeps this account too (and stderr at
     * debug level), so it is not said twice on the console. */
    if (plait_log_enabled_for(PLAIT_LOG_DEBUG, "comm"))
        plait_log(PLAIT_LOG_ERROR, "comm", "%s", message ? message : "communicator failed");
    else
        plait_log_file_only(PLAIT_LOG_ERROR, "comm", "%s", message ? message : "communicator failed");
    if (!comm->ops->abort) return;
    /* Peers are told why (the transport carries a few hundred bytes). A
     * failure caused by another rank's going down passes on that rank's own
     * account (plait_error_relayed: the innermost one) instead of the whole
     * nested chain: after a few hops of nesting the root cause (which rank
     * died, in which operation) would be cut off, and in a pipeline the far
     * stages learn of a lost rank only this way. */
    const char *why = message ? message : "communicator failed";
    int origin;
    const char *root = plait_error_relayed(why, &origin);
    char relay[1024];
    if (root) {
        snprintf(relay, sizeof relay, "world rank %d stopped after %s",
                 comm->world_ranks ? comm->world_ranks[comm->rank] : comm->rank, root);
        why = relay;
    }
    /* watched: a plugin whose abort() waits on the peer that failed would
     * hang the rank that is reporting it */
    plait_watched_call c = {.ops = comm->ops, .fn = "abort", .rule = "loss", .comm_name = comm->name, .peer = -1,
                            .limit_s = plait_watchdog_limit(comm->settings.timeout_s)};
    plait_watchdog_enter(&c);
    comm->ops->abort(comm->pcoll, why);
    plait_watchdog_leave();
    plait_watchdog_enter(&c);
    comm->ops->abort(comm->pp2p, why);
    plait_watchdog_leave();
}

plait_status plait_comm_check_usable(plait_comm *comm) {
    pthread_mutex_lock(&comm->lock);
    plait_status st = comm->failed;
    if (st != PLAIT_OK)
        plait_set_error(st, "communicator '%s' is unusable after an earlier error: %s", comm->name,
                        comm->failure ? comm->failure : "");
    pthread_mutex_unlock(&comm->lock);
    return st;
}
