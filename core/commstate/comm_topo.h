/*
 * Which members of a communicator share a host (runtime/host_identity.h),
 * for the hierarchical collectives (coll_hier.c), rank placement checks and
 * reports.
 *
 * Hosts are numbered 0..n_hosts-1 in order of their first member. The world
 * learns its members' hosts at creation (one bootstrap allgather of 8 bytes
 * per rank); a split inherits its members' hosts from the parent. Immutable
 * after creation (tests may replace it before the first collective), so
 * reads are thread-safe.
 */
#ifndef PLAIT_CORE_COMM_TOPO_H
#define PLAIT_CORE_COMM_TOPO_H

#include "commstate/comm_state.h"

/* World creation: allgather every member's host key over `bootstrap` and
 * number the hosts. Collective over the bootstrap's members. */
plait_status plait_comm_topo_init_world(plait_comm *comm, const plait_bootstrap *bootstrap);

/* Split: member i of `child` is member parent_members[i] of `parent`. */
plait_status plait_comm_topo_inherit(plait_comm *child, const plait_comm *parent, const int *parent_members);

/* Replace the host map (member -> host index, `comm->size` entries; indices
 * need not be dense). For tests and `plait bench comm --hosts`, which
 * pretend that in-process ranks live on several hosts. Not thread-safe with
 * running collectives. */
plait_status plait_comm_set_hosts(plait_comm *comm, const int *host_of);

/* Number of distinct hosts among the members; a member's host index. */
int plait_comm_n_hosts(const plait_comm *comm);
int plait_comm_host_of(const plait_comm *comm, int rank);

/* Free the host map (communicator release). */
void plait_comm_topo_free(plait_comm *comm);

#endif
