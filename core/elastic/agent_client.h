/*
 * A rank's side of its launcher's replica keeper (elastic/agent.h), found
 * through PLAIT_AGENT_FD (set by an elastic launcher only). Also the
 * memory a replica lives in: a sealed memfd, which the keeper holds on to.
 *
 * Thread-safe (one request at a time, under a lock); errors name the
 * keeper.
 */
#ifndef PLAIT_CORE_ELASTIC_AGENT_CLIENT_H
#define PLAIT_CORE_ELASTIC_AGENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* One image a launcher holds. */
typedef struct plait_replica_info {
    int64_t step;
    int shard, n_shards;
    uint64_t bytes;
    uint32_t crc;   /* as its writer computed it (the image says it again) */
    int origin;     /* the node that wrote it */
} plait_replica_info;

/* How long a reply may take before the keeper (its launcher) is taken as
 * stopped or stuck and the request fails with PLAIT_ERR_TIMEOUT: the
 * rank's [comm] timeout (300 s until set). */
void plait_agent_set_timeout(double seconds);

/* 1 when this rank has a keeper (an elastic launcher started it). */
int plait_agent_present(void);

plait_status plait_agent_put(const plait_replica_info *info, int fd);
/* What this host holds: at most cap entries, *n of them. */
plait_status plait_agent_list(plait_replica_info *out, int cap, int *n);
/* The image of (step, shard, n_shards): *fd (the caller closes it) and
 * its entry; PLAIT_ERR_UNSUPPORTED when this host holds none. */
plait_status plait_agent_get(int64_t step, int shard, int n_shards, int *fd, plait_replica_info *info);
/* *yes 1 when a host waits to join the job. */
plait_status plait_agent_regroup(int *yes);

/* ---- the memory of an image ---- */
/* A memfd of `bytes`, mapped read-write at *map. */
plait_status plait_replica_mem_create(size_t bytes, int *fd, void **map);
/* Unmap the writable mapping and seal the memfd against any change (after
 * which it can only be read); *map becomes a read-only mapping of it. */
plait_status plait_replica_mem_seal(int fd, size_t bytes, void **map);
/* Map an image read-only. */
plait_status plait_replica_mem_map(int fd, size_t bytes, const void **map);

#endif
