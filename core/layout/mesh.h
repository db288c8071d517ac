/*
 * The device mesh over the world: four axes dp × cp × tp × pp in an order
 * (`[parallel] order`, innermost first; default "tp,dp,pp", with cp placed
 * just outside tp when the order does not name it, so tensor-parallel ranks
 * are neighbours, then context-parallel ones, as Megatron-Core lays them
 * out), and expert parallelism carved out of dp × cp: the ep group is ep
 * consecutive ranks of the dp × cp group (its innermost ones), the
 * expert-data-parallel group the ranks of that group with the same ep rank.
 * cp = ep = 1 is the dp × tp × pp mesh exactly.
 *
 * Thread-safety: creating and releasing the group communicators is
 * collective over the world, made by the thread that drives the run.
 */
#ifndef PLAIT_CORE_MESH_H
#define PLAIT_CORE_MESH_H

#include <plait/parallel.h>

#include "config/config.h"

enum { PLAIT_AXIS_DP = 0, PLAIT_AXIS_TP = 1, PLAIT_AXIS_PP = 2, PLAIT_AXIS_CP = 3, PLAIT_MESH_AXES = 4 };

/* Parse an order (a permutation of tp, dp, pp and optionally cp) into
 * axes[4], innermost first; a missing cp goes just outside tp.
 * PLAIT_ERR_INVALID_CONFIG on anything else. */
plait_status plait_mesh_parse_order(const char *order, int axes[PLAIT_MESH_AXES]);

/* Read [parallel] dp, tp, pp, cp (sizes, indexed by PLAIT_AXIS_*) and order
 * (axes, innermost first), and check [parallel] ep divides dp × cp.
 * PLAIT_ERR_INVALID_CONFIG for a bad order or ep. */
plait_status plait_mesh_shape(const plait_config *cfg, int sizes[PLAIT_MESH_AXES], int axes[PLAIT_MESH_AXES]);

/* "dp 2 x tp 2 x pp 1", with "x cp N" after dp when cp > 1, into buf. */
const char *plait_mesh_sizes_text(const int sizes[PLAIT_MESH_AXES], char *buf, size_t len);

/* dp × cp × tp × pp of [parallel]: the ranks a job needs (no check). */
int64_t plait_mesh_world_size(const plait_config *cfg);

/* Coordinates of world rank `rank` (pure). sizes indexed by PLAIT_AXIS_*. */
void plait_mesh_coords(int rank, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                       int coords[PLAIT_MESH_AXES]);
/* World rank of coordinates (pure; inverse of plait_mesh_coords). */
int plait_mesh_rank_of(const int coords[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES],
                       const int axes[PLAIT_MESH_AXES]);

/* A rank's index in its dp × cp group: the two coordinates in the order's
 * nesting (the inner of the two varies fastest), 0 .. dp*cp-1 (pure). */
int plait_mesh_dpcp_index(const int coords[PLAIT_MESH_AXES], const int sizes[PLAIT_MESH_AXES],
                          const int axes[PLAIT_MESH_AXES]);

/* Fill a communicator-less mesh for world rank `rank` (the preflight's
 * view of every rank; plait_mesh_build fills the same fields and the
 * groups). */
void plait_mesh_fill(plait_mesh *mesh, int rank, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                     int ep, const char *order);

/* Read [parallel], check dp*cp*tp*pp == world size, and split `world`
 * into the DP, TP, PP, CP, dp × cp, EP, expert-DP and embedding groups
 * (collective over the world). The mesh's communicators are owned by the
 * caller: release them with plait_mesh_release(). */
plait_status plait_mesh_build(const plait_config *cfg, plait_comm *world, plait_mesh *mesh);
void plait_mesh_release(plait_mesh *mesh);

#endif
