/*
 * What the launchers of an elastic job and its coordinator keep in the
 * membership store (elastic/membership.h): the key names and the records
 * behind them. Internal to elastic/ (membership.c, coordinator.c).
 *
 * Keys ("<lid>" is a launcher's id, 16 hex digits; r a round, k a node):
 *   m/nreg               counter: launchers registered so far
 *   m/reg/<i>            launcher i's elastic_member record
 *   m/cfg/<lid>          its config's fingerprint (text), set before its record
 *   m/hb/<lid>           counter its heartbeat thread increments
 *   m/bye/<lid>          set when it leaves for good (not lost: no wait for it)
 *   m/dropped/<lid>      why the coordinator dropped it (it exits)
 *   m/round              counter: the round open now (0: none yet)
 *   m/r<r>/n             counter: arrivals in round r
 *   m/r<r>/a<i>          the id of arrival i (u64)
 *   m/r<r>/result        elastic_result: who is in, or why the job ends
 *   m/r<r>/store         the port rank 0's store listens on (i32), set by node 0
 *   m/r<r>/verdict/<k>   node k's memory check: "" fits, else the refusal
 *   m/r<r>/end           why the coordinator stops round r's ranks
 *   m/r<r>/grow          set when a host waits to join (ranks regroup at a boundary)
 *   m/r<r>/done/<k>      elastic_outcome: how node k's ranks ended
 *   m/finished           set when training is complete (waiting launchers exit)
 *
 * Records are fixed-size little-endian structs (every launcher runs the
 * same plait: the store's HELLO carries the protocol version).
 */
#ifndef PLAIT_CORE_ELASTIC_MEMBERSHIP_WIRE_H
#define PLAIT_CORE_ELASTIC_MEMBERSHIP_WIRE_H

#include <stdint.h>

#define ELASTIC_MAX_HOSTS 256
#define ELASTIC_REASON 1024
#define ELASTIC_BLAME 32

typedef struct elastic_member {
    uint64_t lid;
    int32_t ranks; /* ranks it runs on its host */
    int32_t pid;
    char host[64]; /* its host name, for messages */
} elastic_member;

enum { ELASTIC_RUN = 1, ELASTIC_FAILED = 2 };

typedef struct elastic_result {
    uint32_t magic;
    int32_t status;   /* ELASTIC_RUN: members train; ELASTIC_FAILED: the job ends (reason) */
    int32_t round;
    int32_t n;        /* members, node order */
    int32_t changes;  /* membership changes before this round */
    int32_t restarts; /* relaunches before this round */
    int32_t failures; /* relaunches after failures (against --max-restarts) */
    int32_t pad;
    uint64_t members[ELASTIC_MAX_HOSTS];
    char reason[ELASTIC_REASON]; /* why this round has these members ("" the first) */
    char names[ELASTIC_REASON];  /* the members' host names, node order */
} elastic_result;
#define ELASTIC_RESULT_MAGIC 0x504c4d52u

enum {
    ELASTIC_DONE_OK = 1,      /* training complete */
    ELASTIC_DONE_REGROUP = 2, /* the ranks stopped at a boundary for a new round */
    ELASTIC_DONE_FAILED = 3,  /* a rank failed */
    ELASTIC_DONE_STOPPED = 4, /* the coordinator stopped them */
    ELASTIC_DONE_REFUSED = 5  /* the round's layout does not fit a member's memory: the job ends */
};

typedef struct elastic_outcome {
    int32_t kind;
    int32_t n_blamed;
    int32_t n_failed;
    int32_t pad;
    int32_t blamed[ELASTIC_BLAME]; /* world ranks this host's failed ranks timed out waiting for */
    int32_t failed[ELASTIC_BLAME]; /* this host's world ranks that failed on their own */
    char message[ELASTIC_REASON];  /* the first failure, as the launcher describes it */
} elastic_outcome;

#endif
