/*
 * The staging layer's entry: where one collective's buffers go (coll_staging.c
 * explains it). The executor (comm_exec.c) runs every collective through it.
 */
#ifndef PLAIT_CORE_COMM_COLL_STAGE_H
#define PLAIT_CORE_COMM_COLL_STAGE_H

#include "commstate/comm_state.h"

/* Runs one collective on the calling thread: the buffers go to the
 * transport, through pinned host memory for device memory on a host-memory
 * transport, or through device memory for host memory on a transport that
 * moves device memory only. [comm] check_collectives is made here for such
 * a transport (its fingerprints travel through device memory too), else by
 * plait_coll_execute. */
plait_status plait_coll_run(plait_comm *comm, const plait_coll_args *args);

#endif
