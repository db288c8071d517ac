/* A cluster node's topology for plait plan (cluster.h): the node's ranks
 * placed on its hwloc XML as a run's ranks are, and which groups stay inside
 * one NVLink island. */
#include "cost/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/placement.h"
#include "runtime/error.h"

plait_status plait_cluster_read_topology(plait_cluster *c, const char *file, const char *path, const char *where) {
    if (!c->gpu)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [node] topology is for kind = gpu (a CPU node's ranks share its cores)", where);
    const char *slash = path[0] == '/' ? NULL : strrchr(file, '/');
    snprintf(c->topology, sizeof c->topology, "%.*s%s", slash ? (int)(slash - file + 1) : 0, file, path);
    plait_topology *t = NULL;
    plait_status st = plait_topology_load(c->topology, &t);
    if (st != PLAIT_OK) return plait_wrap_error(st, "%s: [node] topology", where);
    int n = c->units_per_node;
    if (t->n_gpus != n || n > PLAIT_TOPO_MAX_DEV) {
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "%s: [node] topology = %s has %d NVIDIA GPU%s, but [node] gpus = %d: allowed: the "
                             "XML of a node like the cluster's",
                             where, c->topology, t->n_gpus, t->n_gpus == 1 ? "" : "s", n);
        plait_topology_free(t);
        return st;
    }
    plait_rank_place *p = calloc((size_t)n, sizeof *p);
    plait_placement_in in = {.topo = t, .local_ranks = n, .threads = 1, .mode = PLAIT_BIND_AUTO, .use_gpus = 1};
    st = p ? plait_place_ranks(&in, p) : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK) {
        plait_mesh_sites(t, p, n, NULL, n, c->node_site);
        c->node_ranks = n;
    }
    free(p);
    plait_topology_free(t);
    return st;
}

int plait_cluster_group_crosses(const plait_cluster *c, int size, int stride) {
    int n = c->node_ranks;
    if (n < 1 || size < 2) return 0;
    /* each group that starts on the first node, members stride apart; every
     * node is like it */
    for (int b = 0; b < n; b++) {
        if ((b / stride) % size) continue;
        int island = c->node_site[b].island;
        for (int i = 1; i < size; i++) {
            long m = b + (long)i * stride;
            if (island < 0 || c->node_site[m % n].island != island) return 1;
        }
    }
    return 0;
}
