/*
 * The environment plait's launcher gives each rank it starts (launch.h
 * lists the variables): the launcher's own, without the variables a rank's
 * job owns (an outer job's rank, store or report fd), then this job's.
 */
#ifndef PLAIT_CORE_LAUNCH_RANK_ENV_H
#define PLAIT_CORE_LAUNCH_RANK_ENV_H

#include "launch/launch.h"

/* Local rank `rank`'s environment: a malloc'd, NULL-terminated array of
 * malloc'd strings (free with plait_launch_rank_env_free), or NULL when out
 * of memory. `listen_fd` (rank 0 only, >= 0) becomes PLAIT_STORE_FD and
 * `agent_fd` (>= 0) PLAIT_AGENT_FD. Reads environ: call it from the
 * launcher's thread before fork. */
char **plait_launch_rank_env(const plait_launch_opts *o, int rank, const char *store_addr, const char *token,
                             int listen_fd, int report_fd, int threads, int agent_fd);
void plait_launch_rank_env_free(char **env);

#endif
