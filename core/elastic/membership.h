/*
 * Elastic membership (`plait train --nnodes MIN:MAX`): which hosts train
 * together, decided in rounds, as torchrun's c10d rendezvous does.
 *
 * Every host runs one launcher. The launcher that can bind the store's
 * address (MASTER_ADDR:MASTER_PORT, or a Slurm allocation's first node) is
 * the store host: it serves the membership store in its own process, which
 * outlives its ranks, and runs the coordinator (elastic/coordinator.h) in a
 * thread. Every launcher, the store host's included, registers, beats a
 * heartbeat, and joins rounds:
 *
 *   1. the coordinator opens round r;
 *   2. launchers arrive; the round closes when MAX have arrived, or when at
 *      least MIN have and either every live launcher has (a restart) or
 *      join_wait has passed since it opened (the first round: hosts are
 *      still starting); with fewer than MIN after join_timeout the job
 *      ends, naming who came;
 *   3. the members, in node order (the store host first, then earlier
 *      members in their order, then newcomers by host name), train: node k runs world
 *      ranks k*R .. k*R+R-1; the others wait for the next round;
 *   4. the coordinator ends the round when a member's heartbeat stops
 *      (host_timeout), when a member's ranks fail, or when the ranks stop at
 *      a boundary because a host is waiting to join; it then opens the next
 *      round, with the reason, which every rank logs.
 *
 * The store host is the one host the job cannot lose: when it goes, the
 * other launchers lose the store, stop their ranks and exit naming it
 * (torchrun's c10d backend has the same limit; docs/multi-node.md).
 *
 * Not thread-safe: one thread (the launcher's main thread) calls these;
 * the object runs a heartbeat thread (and on the store host the store's
 * server and the coordinator) of its own.
 */
#ifndef PLAIT_CORE_ELASTIC_MEMBERSHIP_H
#define PLAIT_CORE_ELASTIC_MEMBERSHIP_H

#include <stddef.h>
#include <plait/types.h>

typedef struct plait_membership_opts {
    const char *store_host;   /* where the membership store listens (MASTER_ADDR) */
    int store_port;           /* (MASTER_PORT) */
    const char *token;        /* PLAIT_JOB_TOKEN */
    int min_hosts, max_hosts; /* 1 <= MIN <= MAX <= 256 */
    int ranks_per_host;       /* R: every host runs as many */
    double join_wait;         /* first round: how long to wait for up to MAX once MIN joined */
    double join_timeout;      /* a round waits at most this long for MIN hosts */
    double host_timeout;      /* a host whose heartbeat stops this long is lost */
    int max_restarts;         /* relaunches after failures the job may take */
    /* This host's plait_config_fingerprint (borrowed for the open), or
     * NULL: once the job has trained, a host whose text differs from the
     * store host's is not admitted, alone (the job goes on). */
    const char *config_text;
} plait_membership_opts;

typedef struct plait_membership plait_membership;

/* Register this launcher: host the store and the coordinator when this
 * host can bind the store's address, else connect to it (retrying until
 * join_timeout). Errors name the address. */
plait_status plait_membership_open(const plait_membership_opts *o, plait_membership **out);
/* Leave: stop the heartbeat, say goodbye (the coordinator then need not
 * wait for this host), and on the store host keep the store up until the
 * coordinator is done and every other launcher has left or is lost (at
 * most 2 x host_timeout + 2 s after the coordinator is done). Returns 1 on
 * the store host when every other launcher had left or was lost, so the
 * store closed within a second, waiting for no lost host's connection
 * (which may never close); 0 otherwise, and for m NULL. */
int plait_membership_close(plait_membership *m);
int plait_membership_is_store_host(const plait_membership *m);

typedef enum plait_round_status {
    PLAIT_ROUND_TRAIN = 1,    /* this host is a member: train */
    PLAIT_ROUND_FINISHED = 2, /* the job finished (training complete) */
    PLAIT_ROUND_FAILED = 3,   /* the job ends: `reason` */
    PLAIT_ROUND_DROPPED = 4   /* this host was dropped from the job: `reason` */
} plait_round_status;

typedef struct plait_round {
    plait_round_status status;
    int round;
    int hosts;        /* members */
    int node;         /* this host's index among them */
    int changes;      /* membership changes before this round */
    int restarts;     /* relaunches before this round */
    char reason[1024];
    char names[1024]; /* the members' host names, node order, comma separated */
} plait_round;

/* Join the next round and wait until it closes: returns with this host's
 * place, or why there is none. A host that arrives after a round closed
 * waits for the next one (while the job trains), or learns that the job
 * finished. Errors: the store lost. */
plait_status plait_membership_join(plait_membership *m, plait_round *out);

/* Node 0 publishes the port its rank 0 serves the ranks' store on; the
 * others read it (0 when the round was stopped meanwhile: rejoin; -1 when
 * the store is lost, the error set). */
plait_status plait_membership_set_store_port(plait_membership *m, int port);
int plait_membership_store_port(plait_membership *m, int *port);

/* Every member's verdict on whether the round's layout fits its host
 * (`refusal` NULL: it fits). Returns 0 when all fit, 1 when one refused
 * (`why` gets the first refusal, naming its host), 2 when the round was
 * stopped meanwhile (a member lost: rejoin), -1 when the store is lost
 * (the error set). */
int plait_membership_verdicts(plait_membership *m, const char *refusal, char *why, size_t cap);

/* An fd (eventfd) that becomes readable when the coordinator stops the
 * current round's ranks (or the store is lost): the launcher's stop_fd.
 * Reset by plait_membership_join. */
int plait_membership_stop_fd(const plait_membership *m);
/* 1 when a host waits to join: the ranks should regroup at their next
 * boundary. Thread-safe. */
int plait_membership_grow_wanted(const plait_membership *m);

/* How this host's ranks ended. */
typedef struct plait_attempt_end {
    int kind;           /* PLAIT_ATTEMPT_* */
    int n_blamed, n_failed;
    int blamed[32];     /* world ranks this host's failed ranks timed out waiting for */
    int failed[32];     /* world ranks of this host that failed on their own */
    char message[1024]; /* the launcher's account of the first failure */
} plait_attempt_end;
enum {
    PLAIT_ATTEMPT_OK = 1,      /* training complete */
    PLAIT_ATTEMPT_REGROUP = 2, /* the ranks stopped at a boundary so a waiting host can join */
    PLAIT_ATTEMPT_FAILED = 3,  /* a rank failed */
    PLAIT_ATTEMPT_STOPPED = 4, /* stopped through plait_membership_stop_fd */
    PLAIT_ATTEMPT_REFUSED = 5  /* the round's layout does not fit (plait_membership_verdicts): the job ends */
};

plait_status plait_membership_report(plait_membership *m, const plait_attempt_end *end);

/* Why the current round's ranks were stopped ("" if they were not). */
const char *plait_membership_stop_reason(const plait_membership *m);

#endif
