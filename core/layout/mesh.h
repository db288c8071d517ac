/*
 * The 3-D device mesh dp × tp × pp over the world. `order` lists the axes
 * innermost first (default "tp,dp,pp": tensor-parallel ranks are neighbours,
 * so they share a host and its fastest links, as Megatron-LM lays them out).
 *
 * Thread-safety: creating and releasing the group communicators is
 * collective over the world, made by the thread that drives the run.
 */
#ifndef PLAIT_CORE_MESH_H
#define PLAIT_CORE_MESH_H

#include <plait/parallel.h>

#include "config/config.h"

enum { PLAIT_AXIS_DP = 0, PLAIT_AXIS_TP = 1, PLAIT_AXIS_PP = 2 };

/* Parse "tp,dp,pp" (any permutation of the three names) into axes[3],
 * innermost first. PLAIT_ERR_INVALID_CONFIG on anything else. */
plait_status plait_mesh_parse_order(const char *order, int axes[3]);

/* Read [parallel] dp, tp, pp (sizes, indexed by PLAIT_AXIS_*) and order
 * (axes, innermost first). PLAIT_ERR_INVALID_CONFIG for a bad order. */
plait_status plait_mesh_shape(const plait_config *cfg, int sizes[3], int axes[3]);

/* Coordinates of world rank `rank` (pure). sizes indexed by PLAIT_AXIS_*. */
void plait_mesh_coords(int rank, const int sizes[3], const int axes[3], int coords[3]);
/* World rank of coordinates (pure; inverse of plait_mesh_coords). */
int plait_mesh_rank_of(const int coords[3], const int sizes[3], const int axes[3]);

/* Read [parallel] dp/tp/pp/order, check dp*tp*pp == world size, and split
 * `world` into the DP, TP, PP and embedding groups (collective over the
 * world). The mesh's communicators are owned by the caller: release them with
 * plait_mesh_release(). */
plait_status plait_mesh_build(const plait_config *cfg, plait_comm *world, plait_mesh *mesh);
void plait_mesh_release(plait_mesh *mesh);

#endif
