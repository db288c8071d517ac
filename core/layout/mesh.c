#include "layout/mesh.h"

#include <stdio.h>
#include <string.h>

#include "commstate/comm_topo.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "comm/comm.h"

static const char *const axis_names[3] = {"dp", "tp", "pp"};

plait_status plait_mesh_parse_order(const char *order, int axes[3]) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", order);
    int n = 0, seen[3] = {0, 0, 0};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int a = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(tok, axis_names[i]) == 0) a = i;
        if (a < 0 || seen[a] || n == 3) {
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "[parallel] order = %s: expected the three axes tp, dp, pp once each, "
                                   "innermost first (e.g. tp,dp,pp)",
                                   order);
        }
        seen[a] = 1;
        axes[n++] = a;
    }
    if (n != 3)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[parallel] order = %s: expected the three axes tp, dp, pp once each", order);
    return PLAIT_OK;
}

void plait_mesh_coords(int rank, const int sizes[3], const int axes[3], int coords[3]) {
    for (int i = 0; i < 3; i++) {
        coords[axes[i]] = rank % sizes[axes[i]];
        rank /= sizes[axes[i]];
    }
}

int plait_mesh_rank_of(const int coords[3], const int sizes[3], const int axes[3]) {
    int rank = 0;
    for (int i = 2; i >= 0; i--) rank = rank * sizes[axes[i]] + coords[axes[i]];
    return rank;
}

plait_status plait_mesh_shape(const plait_config *cfg, int sizes[3], int axes[3]) {
    sizes[PLAIT_AXIS_DP] = (int)plait_config_int(cfg, "parallel", "dp");
    sizes[PLAIT_AXIS_TP] = (int)plait_config_int(cfg, "parallel", "tp");
    sizes[PLAIT_AXIS_PP] = (int)plait_config_int(cfg, "parallel", "pp");
    return plait_mesh_parse_order(plait_config_str(cfg, "parallel", "order"), axes);
}

/* Tensor parallelism all-reduces activations in every layer: its group
 * belongs on one host (rank order puts tp innermost so that consecutive
 * ranks, which launchers place together, form it). Say so when a group
 * spans hosts (its first member speaks for it). */
static void warn_spanning_tp(const plait_mesh *mesh, const char *order) {
    int hosts = plait_comm_n_hosts(mesh->tp_comm);
    if (mesh->tp < 2 || mesh->tp_rank != 0 || hosts < 2) return;
    PLAIT_WARN("mesh", "the tp group of world rank %d (tp = %d, order %s) spans %d hosts: its all-reduces in every "
                       "layer cross the network; give each host a multiple of tp ranks and keep tp first in "
                       "[parallel] order",
               mesh->world_rank, mesh->tp, order, hosts);
}

plait_status plait_mesh_build(const plait_config *cfg, plait_comm *world, plait_mesh *mesh) {
    int sizes[3], axes[3], c[3];
    plait_status st = plait_mesh_shape(cfg, sizes, axes);
    if (st != PLAIT_OK) return st;
    const char *order = plait_config_str(cfg, "parallel", "order");
    int world_size = plait_comm_size(world), rank = plait_comm_rank(world);
    if (sizes[0] * sizes[1] * sizes[2] != world_size)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[parallel] dp %d x tp %d x pp %d = %d ranks, but the job has %d; set the "
                               "sizes so their product is the world size (or launch %d ranks)",
                               sizes[0], sizes[1], sizes[2], sizes[0] * sizes[1] * sizes[2], world_size,
                               sizes[0] * sizes[1] * sizes[2]);
    plait_mesh_coords(rank, sizes, axes, c);
    memset(mesh, 0, sizeof *mesh);
    mesh->struct_size = sizeof *mesh;
    mesh->dp = sizes[PLAIT_AXIS_DP];
    mesh->tp = sizes[PLAIT_AXIS_TP];
    mesh->pp = sizes[PLAIT_AXIS_PP];
    mesh->dp_rank = c[PLAIT_AXIS_DP];
    mesh->tp_rank = c[PLAIT_AXIS_TP];
    mesh->pp_rank = c[PLAIT_AXIS_PP];
    mesh->world_rank = rank;
    mesh->world_size = world_size;
    mesh->world = world;
    mesh->order = order;
    /* Each group: members share the other two coordinates; key = own coordinate. */
    int tp = mesh->tp, dp = mesh->dp;
    st = plait_comm_split(world, c[PLAIT_AXIS_TP] + tp * c[PLAIT_AXIS_PP], c[PLAIT_AXIS_DP], "dp", &mesh->dp_comm);
    if (st == PLAIT_OK)
        st = plait_comm_split(world, c[PLAIT_AXIS_DP] + dp * c[PLAIT_AXIS_PP], c[PLAIT_AXIS_TP], "tp", &mesh->tp_comm);
    if (st == PLAIT_OK)
        st = plait_comm_split(world, c[PLAIT_AXIS_DP] + dp * c[PLAIT_AXIS_TP], c[PLAIT_AXIS_PP], "pp", &mesh->pp_comm);
    if (st == PLAIT_OK) {
        int edge = mesh->pp > 1 && (mesh->pp_rank == 0 || mesh->pp_rank == mesh->pp - 1);
        st = plait_comm_split(world, edge ? c[PLAIT_AXIS_DP] + dp * c[PLAIT_AXIS_TP] : -1, c[PLAIT_AXIS_PP], "embed",
                         &mesh->embed_comm);
    }
    if (st != PLAIT_OK) {
        plait_mesh_release(mesh);
        return plait_wrap_error(st, "building the dp x tp x pp mesh");
    }
    warn_spanning_tp(mesh, order);
    return PLAIT_OK;
}

void plait_mesh_release(plait_mesh *mesh) {
    plait_comm **comms[] = {&mesh->dp_comm, &mesh->tp_comm, &mesh->pp_comm, &mesh->embed_comm};
    for (int i = 0; i < 4; i++) {
        if (*comms[i]) plait_comm_free(*comms[i]);
        *comms[i] = NULL;
    }
}
