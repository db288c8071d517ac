#include "layout/mesh.h"

#include <stdio.h>
#include <string.h>

#include "commstate/comm_topo.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "comm/comm.h"

static const char *const axis_names[PLAIT_MESH_AXES] = {"dp", "tp", "pp", "cp"};

static plait_status bad_order(const char *order) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "[parallel] order = %s: expected the axes tp, dp, pp once each and optionally cp, "
                           "innermost first (e.g. tp,dp,pp or tp,cp,dp,pp); ep has no place of its own: it is "
                           "carved out of dp x cp",
                           order);
}

plait_status plait_mesh_parse_order(const char *order, int axes[PLAIT_MESH_AXES]) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", order);
    int n = 0, seen[PLAIT_MESH_AXES] = {0, 0, 0, 0};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        int a = -1;
        for (int i = 0; i < PLAIT_MESH_AXES; i++)
            if (strcmp(tok, axis_names[i]) == 0) a = i;
        if (a < 0 || seen[a] || n == PLAIT_MESH_AXES) return bad_order(order);
        seen[a] = 1;
        axes[n++] = a;
    }
    if (n < 3 || !seen[PLAIT_AXIS_DP] || !seen[PLAIT_AXIS_TP] || !seen[PLAIT_AXIS_PP]) return bad_order(order);
    if (!seen[PLAIT_AXIS_CP]) { /* cp just outside tp, Megatron-Core's tp-cp-dp-pp */
        int t = 0;
        while (axes[t] != PLAIT_AXIS_TP) t++;
        memmove(&axes[t + 2], &axes[t + 1], (size_t)(2 - t) * sizeof axes[0]);
        axes[t + 1] = PLAIT_AXIS_CP;
    }
    return PLAIT_OK;
}

void plait_mesh_coords(int rank, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                       int coords[PLAIT_MESH_AXES]) {
    for (int i = 0; i < PLAIT_MESH_AXES; i++) {
        coords[axes[i]] = rank % sizes[axes[i]];
        rank /= sizes[axes[i]];
    }
}

int plait_mesh_rank_of(const int coords[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES],
                       const int axes[PLAIT_MESH_AXES]) {
    int rank = 0;
    for (int i = PLAIT_MESH_AXES - 1; i >= 0; i--) rank = rank * sizes[axes[i]] + coords[axes[i]];
    return rank;
}

int plait_mesh_dpcp_index(const int coords[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES],
                          const int axes[PLAIT_MESH_AXES]) {
    int index = 0;
    for (int i = PLAIT_MESH_AXES - 1; i >= 0; i--)
        if (axes[i] == PLAIT_AXIS_DP || axes[i] == PLAIT_AXIS_CP) index = index * sizes[axes[i]] + coords[axes[i]];
    return index;
}

const char *plait_mesh_sizes_text(const int sizes[PLAIT_MESH_AXES], char *buf, size_t len) {
    char cp[24] = "";
    if (sizes[PLAIT_AXIS_CP] > 1) snprintf(cp, sizeof cp, " x cp %d", sizes[PLAIT_AXIS_CP]);
    snprintf(buf, len, "dp %d%s x tp %d x pp %d", sizes[PLAIT_AXIS_DP], cp, sizes[PLAIT_AXIS_TP], sizes[PLAIT_AXIS_PP]);
    return buf;
}

int64_t plait_mesh_world_size(const plait_config *cfg) {
    return plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "cp") *
           plait_config_int(cfg, "parallel", "tp") * plait_config_int(cfg, "parallel", "pp");
}

plait_status plait_mesh_shape(const plait_config *cfg, int sizes[PLAIT_MESH_AXES], int axes[PLAIT_MESH_AXES]) {
    sizes[PLAIT_AXIS_DP] = (int)plait_config_int(cfg, "parallel", "dp");
    sizes[PLAIT_AXIS_TP] = (int)plait_config_int(cfg, "parallel", "tp");
    sizes[PLAIT_AXIS_PP] = (int)plait_config_int(cfg, "parallel", "pp");
    sizes[PLAIT_AXIS_CP] = (int)plait_config_int(cfg, "parallel", "cp");
    int ep = (int)plait_config_int(cfg, "parallel", "ep");
    int dpcp = sizes[PLAIT_AXIS_DP] * sizes[PLAIT_AXIS_CP];
    if (dpcp % ep != 0) {
        const char *where = "";
        plait_config_origin(cfg, "parallel", "ep", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [parallel] ep = %d does not divide dp %d x cp %d = %d: expert parallelism is "
                               "carved out of the dp x cp ranks; set ep to a divisor of %d",
                               where, ep, sizes[PLAIT_AXIS_DP], sizes[PLAIT_AXIS_CP], dpcp, dpcp);
    }
    return plait_mesh_parse_order(plait_config_str(cfg, "parallel", "order"), axes);
}

void plait_mesh_fill(plait_mesh *mesh, int rank, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                     int ep, const char *order) {
    int c[PLAIT_MESH_AXES];
    plait_mesh_coords(rank, sizes, axes, c);
    memset(mesh, 0, sizeof *mesh);
    mesh->struct_size = sizeof *mesh;
    mesh->dp = sizes[PLAIT_AXIS_DP];
    mesh->tp = sizes[PLAIT_AXIS_TP];
    mesh->pp = sizes[PLAIT_AXIS_PP];
    mesh->cp = sizes[PLAIT_AXIS_CP];
    mesh->dp_rank = c[PLAIT_AXIS_DP];
    mesh->tp_rank = c[PLAIT_AXIS_TP];
    mesh->pp_rank = c[PLAIT_AXIS_PP];
    mesh->cp_rank = c[PLAIT_AXIS_CP];
    mesh->dpcp_rank = plait_mesh_dpcp_index(c, sizes, axes);
    mesh->ep = ep;
    mesh->ep_rank = mesh->dpcp_rank % ep;
    mesh->world_rank = rank;
    mesh->world_size = sizes[0] * sizes[1] * sizes[2] * sizes[3];
    mesh->order = order;
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

/* A group's colour: the coordinates of the axes not in `in`, as one number
 * (members share it); -1 for "not a member". */
static int colour_without(const int c[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES], unsigned in) {
    int colour = 0;
    for (int a = PLAIT_MESH_AXES - 1; a >= 0; a--)
        if (!(in & (1u << a))) colour = colour * sizes[a] + c[a];
    return colour;
}

/* The groups of cp and ep (the dp x tp x pp ones are split before): the
 * aliases when an axis is 1 keep cp = ep = 1 the three-axis mesh's
 * communicators exactly. */
static plait_status split_cp_ep(plait_comm *world, const int c[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES],
                                plait_mesh *mesh) {
    const unsigned dp = 1u << PLAIT_AXIS_DP, cp = 1u << PLAIT_AXIS_CP;
    plait_status st = PLAIT_OK;
    mesh->dpcp_comm = mesh->dp_comm;
    if (mesh->cp > 1) {
        st = plait_comm_split(world, colour_without(c, sizes, cp), mesh->cp_rank, "cp", &mesh->cp_comm);
        if (st == PLAIT_OK)
            st = plait_comm_split(world, colour_without(c, sizes, dp | cp), mesh->dpcp_rank, "dpcp", &mesh->dpcp_comm);
        if (st != PLAIT_OK) mesh->dpcp_comm = NULL;
    }
    mesh->edp_comm = mesh->dpcp_comm;
    if (st == PLAIT_OK && mesh->ep > 1) {
        int outer = colour_without(c, sizes, dp | cp) * (mesh->dp * mesh->cp);
        st = plait_comm_split(world, outer + mesh->dpcp_rank / mesh->ep, mesh->ep_rank, "ep", &mesh->ep_comm);
        mesh->edp_comm = NULL;
        if (st == PLAIT_OK)
            st = plait_comm_split(world, outer + mesh->ep_rank, mesh->dpcp_rank / mesh->ep, "edp", &mesh->edp_comm);
    }
    return st;
}

plait_status plait_mesh_build(const plait_config *cfg, plait_comm *world, plait_mesh *mesh) {
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES], c[PLAIT_MESH_AXES];
    plait_status st = plait_mesh_shape(cfg, sizes, axes);
    if (st != PLAIT_OK) return st;
    const char *order = plait_config_str(cfg, "parallel", "order");
    int world_size = plait_comm_size(world), rank = plait_comm_rank(world);
    int want = sizes[0] * sizes[1] * sizes[2] * sizes[3];
    char text[96];
    if (want != world_size)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[parallel] %s = %d ranks, but the job has %d; set the sizes so their product is the "
                               "world size (or launch %d ranks)",
                               plait_mesh_sizes_text(sizes, text, sizeof text), want, world_size, want);
    plait_mesh_coords(rank, sizes, axes, c);
    plait_mesh_fill(mesh, rank, sizes, axes, (int)plait_config_int(cfg, "parallel", "ep"), order);
    mesh->world = world;
    /* Each group: members share the other coordinates; key = own coordinate. */
    const unsigned DP = 1u << PLAIT_AXIS_DP, TP = 1u << PLAIT_AXIS_TP, PP = 1u << PLAIT_AXIS_PP;
    st = plait_comm_split(world, colour_without(c, sizes, DP), c[PLAIT_AXIS_DP], "dp", &mesh->dp_comm);
    if (st == PLAIT_OK)
        st = plait_comm_split(world, colour_without(c, sizes, TP), c[PLAIT_AXIS_TP], "tp", &mesh->tp_comm);
    if (st == PLAIT_OK)
        st = plait_comm_split(world, colour_without(c, sizes, PP), c[PLAIT_AXIS_PP], "pp", &mesh->pp_comm);
    if (st == PLAIT_OK) {
        int edge = mesh->pp > 1 && (mesh->pp_rank == 0 || mesh->pp_rank == mesh->pp - 1);
        st = plait_comm_split(world, edge ? colour_without(c, sizes, PP) : -1, c[PLAIT_AXIS_PP], "embed",
                              &mesh->embed_comm);
    }
    if (st == PLAIT_OK) st = split_cp_ep(world, c, sizes, mesh);
    if (st != PLAIT_OK) {
        plait_mesh_release(mesh);
        return plait_wrap_error(st, "building the dp x cp x tp x pp mesh");
    }
    warn_spanning_tp(mesh, order);
    return PLAIT_OK;
}

void plait_mesh_release(plait_mesh *mesh) {
    /* the aliases first, so that each communicator is freed once */
    if (mesh->edp_comm == mesh->dpcp_comm) mesh->edp_comm = NULL;
    if (mesh->dpcp_comm == mesh->dp_comm) mesh->dpcp_comm = NULL;
    plait_comm **comms[] = {&mesh->dp_comm, &mesh->tp_comm,   &mesh->pp_comm, &mesh->embed_comm,
                            &mesh->cp_comm, &mesh->dpcp_comm, &mesh->ep_comm, &mesh->edp_comm};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++) {
        if (*comms[i]) plait_comm_free(*comms[i]);
        *comms[i] = NULL;
    }
}
