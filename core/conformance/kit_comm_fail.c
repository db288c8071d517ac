/* The failure checks of `plait plugin test`: abort() and a peer that dies
 * (see kit_comm.h). */
#include "conformance/kit_comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "launch/rank_report.h"
#include "runtime/clock.h"

typedef struct aborter {
    kit_p2p *k;
    double delay_s;
} aborter;

static void *abort_later(void *arg) {
    aborter *a = arg;
    struct timespec d = {(time_t)a->delay_s, (long)((a->delay_s - (double)(time_t)a->delay_s) * 1e9)};
    nanosleep(&d, NULL);
    a->k->ops->abort(a->k->comm, "plait plugin test: abort check");
    return NULL;
}

/* How a request that must fail ended: "" when it failed as it should. */
static const char *judge_failure(plait_status st, double took, double limit) {
    if (st == PLAIT_OK) return "completed although nothing was sent";
    if (st == PLAIT_ERR_TIMEOUT) return "was still pending when the wait timed out";
    if (took > limit) return "failed, but only after the wait's timeout";
    return "";
}

void kit_check_abort(kit_p2p *k, kit_outcome *o) {
    if (!k->ops->abort) {
        o->verdict = KIT_SKIP;
        snprintf(o->why, sizeof o->why, "the plugin has no abort() (optional: the core then waits for timeouts)");
        return;
    }
    /* a receive nobody will match; abort() from another thread after 0.2 s */
    char *rb = malloc(64);
    void *rr = NULL;
    plait_status st = rb ? kit_post(k, 0, rb, 64, (k->rank + 1) % k->size, 0x70u, &rr) : PLAIT_ERR_NO_MEMORY;
    if (st != PLAIT_OK) {
        kit_fail(o, "loss", "rank %d: posting a receive failed: %s", k->rank, plait_last_error());
        return;
    }
    aborter a = {k, 0.2};
    pthread_t t;
    if (pthread_create(&t, NULL, abort_later, &a) != 0) {
        kit_fail(o, "setup", "rank %d: cannot start a thread", k->rank);
        return;
    }
    double t0 = plait_clock_now();
    st = kit_wait(k, rr, k->timeout_s, NULL);
    double took = plait_clock_now() - t0;
    pthread_join(t, NULL);
    const char *bad = judge_failure(st, took, a.delay_s + 2.0);
    if (*bad) {
        kit_fail(o, "loss", "rank %d: a pending receive %s after abort() (%.1f s)", k->rank, bad, took);
        return; /* rb may still be written */
    }
    free(rb);
    /* later operations fail too, at once */
    char sb[8] = {0};
    void *sr = NULL;
    t0 = plait_clock_now();
    st = kit_post(k, 1, sb, sizeof sb, (k->rank + 1) % k->size, 0x71u, &sr);
    if (st == PLAIT_OK) st = kit_wait(k, sr, k->timeout_s, NULL);
    else if (st == PLAIT_ERR_TIMEOUT) st = PLAIT_ERR_INTERNAL; /* posting cannot time out */
    took = plait_clock_now() - t0;
    bad = judge_failure(st, took, 2.0);
    if (*bad && st == PLAIT_OK) bad = "completed after abort()";
    if (*bad) {
        kit_fail(o, "loss", "rank %d: a send posted after abort() %s", k->rank, bad);
        return;
    }
    snprintf(o->why, sizeof o->why, "pending receive failed %.2f s after abort() ('%s')", took, plait_status_name(st));
}

void kit_check_peer_lost(kit_p2p *k, kit_outcome *o) {
    int victim = k->size - 1;
    if (k->bs->barrier(k->bs->ctx) != PLAIT_OK) {
        kit_fail(o, "setup", "rank %d: barrier failed: %s", k->rank, plait_last_error());
        return;
    }
    if (k->rank == victim) {
        /* mid-operation: the others are posting receives from this rank.
         * Leaving is this check's plan, not a failure: the rank marks its
         * command finished so that plait's launcher does not count its
         * _exit(0) as a failed rank and stop the survivors. */
        plait_launch_report_finished();
        _exit(0);
    }
    char *rb = malloc(64);
    void *rr = NULL;
    double t0 = plait_clock_now();
    plait_status st = rb ? kit_post(k, 0, rb, 64, victim, 0x72u, &rr) : PLAIT_ERR_NO_MEMORY;
    if (st == PLAIT_OK) st = kit_wait(k, rr, k->timeout_s, NULL);
    double took = plait_clock_now() - t0;
    if (st == PLAIT_OK || st == PLAIT_ERR_TIMEOUT) {
        kit_fail(o, "loss", "rank %d: a receive from rank %d, which exited, %s", k->rank, victim,
                 st == PLAIT_OK ? "completed" : "was still pending when the wait timed out");
        return;
    }
    free(rb);
    if (st != PLAIT_ERR_PEER_LOST)
        kit_fail(o, "loss", "rank %d: a receive from rank %d, which exited, failed with '%s', not peer lost: %s",
                 k->rank, victim, plait_status_name(st), plait_last_error());
    else
        snprintf(o->why, sizeof o->why, "rank %d exited; the receive failed in %.2f s: %s", victim, took,
                 plait_last_error());
}
