/*
 * The comm part of `plait plugin test`: checks a comm plugin against the
 * point-to-point rules of plait/comm.h and runs the core's collectives over
 * it, as every rank of a local job (2 to 8 ranks).
 *
 * Point-to-point checks talk to the plugin directly (its own init, isend,
 * irecv, test, wait, abort, destroy), so a failure is the plugin's and not
 * the core's; the collective checks go through the core's communicator, as
 * training does. Every check has a deadline (the kit's timeout), so a broken
 * plugin fails a check instead of hanging the kit. Requests a failed check
 * leaves pending keep their buffers for the life of the process (the plugin
 * might still write into them).
 */
#ifndef PLAIT_CORE_KIT_COMM_H
#define PLAIT_CORE_KIT_COMM_H

#include <stddef.h>

#include <plait/comm.h>
#include <plait/plugin.h>

#include "launch/bootstrap.h"
#include "conformance/kit_report.h"

typedef struct kit_comm_opts {
    const plait_host *host; /* the host table handed to the plugin (the CLI's) */
    double timeout_s;     /* the longest one check waits */
    size_t large_bytes;   /* size of the large-message check */
    int lose_peer;        /* end with the peer-lost check: the last rank exits in the middle of it */
} kit_comm_opts;

/* One check's outcome on one rank. */
typedef struct kit_outcome {
    kit_verdict verdict;
    char rule[24];
    char why[KIT_WHY_LEN - 64];
} kit_outcome;

/* A plugin communicator under test and what the checks need around it. */
typedef struct kit_p2p {
    const plait_comm_ops *ops;
    void *comm;
    int rank, size;
    double timeout_s;
    size_t large_bytes;
    const plait_bootstrap *bs;  /* the world's, for barriers between phases */
} kit_p2p;

/* The plugin's isend/irecv (host memory), wait and test as the checks call
 * them, each watched (commstate/comm_watchdog.h): a call that never returns
 * ends the rank naming the function and the rule it breaks, where it would
 * hang the kit. */
plait_status kit_post(kit_p2p *k, int is_send, void *buf, size_t bytes, int peer, uint32_t tag, void **req);
plait_status kit_wait(kit_p2p *k, void *req, double timeout_s, size_t *bytes);
plait_status kit_test(kit_p2p *k, void *req, int *done, size_t *bytes);

/* Record a failure of `rule` in *o (the first one wins). */
void kit_fail(kit_outcome *o, const char *rule, const char *fmt, ...) PLAIT_PRINTF(3, 4);

/* The point-to-point checks (kit_comm_p2p.c), each collective over the
 * communicator's members. */
void kit_check_order(kit_p2p *k, kit_outcome *o);
void kit_check_tags(kit_p2p *k, kit_outcome *o);
void kit_check_zero(kit_p2p *k, kit_outcome *o);
void kit_check_truncation(kit_p2p *k, kit_outcome *o);
void kit_check_posting(kit_p2p *k, kit_outcome *o);
void kit_check_progress(kit_p2p *k, kit_outcome *o);
void kit_check_timeout(kit_p2p *k, kit_outcome *o);
/* abort() from another thread fails a pending receive at once (kit_comm_fail.c). */
void kit_check_abort(kit_p2p *k, kit_outcome *o);
/* The last rank exits; the others' receives from it must fail with
 * PLAIT_ERR_PEER_LOST. The exiting rank never returns. */
void kit_check_peer_lost(kit_p2p *k, kit_outcome *o);

/* Run every comm check as one rank of `job` (collective over all ranks).
 * `desc` is the plugin, `cfg` the configuration its init reads. Rank 0
 * appends the rows to *report; other ranks leave it alone. */
void plait_kit_comm_run(plait_job *job, const plait_plugin_desc *desc, const plait_config *cfg,
                        const kit_comm_opts *opts, kit_report *report);

#endif
