/*
 * The mesh laid over the hardware: which of a layout's groups stay inside a
 * host, a NUMA node or an NVLink island, from each rank's site (the host
 * the launcher puts it on, and its place there: launch/placement.h). What
 * the launcher prints at start-up, so that a tp group that crosses PCIe or
 * a pp neighbour on another host is seen before the first step.
 *
 * Pure; thread-safe.
 */
#ifndef PLAIT_CORE_LAYOUT_MESH_MAP_H
#define PLAIT_CORE_LAYOUT_MESH_MAP_H

#include <stddef.h>

#include "launch/placement.h"
#include "layout/mesh.h"

typedef struct plait_rank_site {
    int host;   /* 0..hosts-1 */
    int numa;   /* the NUMA node it is bound to or runs near; -1 not known */
    int island; /* its GPU's NVLink island; -1 none or not known */
} plait_rank_site;

/* Lines (each ending in '\n') saying, for tp, cp, dp and the pp neighbours,
 * how many groups (pairs) stay on one host, one NUMA node and one NVLink
 * island, into buf. */
char *plait_mesh_map_text(const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                          const plait_rank_site *site, char *buf, size_t cap);

/* The sites of a job's `world` ranks from this host's places (`p`, its
 * `local` ranks on topology `t`, launch/placement.h): rank r on host
 * host_of[r] at its local rank there (the count of earlier ranks on that
 * host), or, with host_of NULL, on host r / local at local rank r % local;
 * every host is taken to be like this one. `site` has `world` entries. */
void plait_mesh_sites(const plait_topology *t, const plait_rank_place *p, int local, const int *host_of, int world,
                      plait_rank_site *site);

/* What the launcher, or rank 0 under mpirun and srun, prints at start-up:
 * a line per NUMA node naming this host's ranks on it, then
 * plait_mesh_map_text. Lines end in '\n'; "" when the layout cannot be
 * shaped or has fewer than 2 ranks. */
char *plait_mesh_map_node_text(const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                               const plait_topology *t, const plait_rank_place *p, int local, const int *host_of,
                               char *buf, size_t cap);

#endif
