/*
 * Data parallelism's replicas at the start of a run (dp_replicas.c): the
 * initial broadcast from DP rank 0, the checksum that proves the replicas
 * equal, and the debug perturbation that tests both.
 */
#ifndef PLAIT_DP_REPLICAS_H
#define PLAIT_DP_REPLICAS_H

#include <plait/plait.h>

/* [parallel.dp] debug_perturb_replicas: DP ranks > 0 shift their parameters
 * before the broadcast or after it. */
typedef enum dp_perturb { DP_PERTURB_OFF, DP_PERTURB_BEFORE, DP_PERTURB_AFTER } dp_perturb;
extern const char *const dp_perturb_choices[]; /* the key's values, in dp_perturb order */

typedef struct dp_replica_checks {
    int verify;         /* [parallel.dp] verify_params */
    dp_perturb perturb; /* debug */
} dp_replica_checks;

/* Broadcast every parameter holding values of its own from DP rank 0 over
 * the DP group, then (checks->verify) compare the replicas' checksums. A
 * difference fails with PLAIT_ERR_INTERNAL naming the DP rank, its world
 * rank and both checksums. Collective over the DP group. */
plait_status dp_replicas_start(const plait_host *host, const plait_mesh *mesh, const dp_replica_checks *checks,
                               plait_param_set *set);

#endif
