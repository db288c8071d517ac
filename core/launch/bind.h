/*
 * [run] bind applied: a rank binds itself and its threads to its place
 * (placement.h) when it joins a job, under `plait -n`, mpirun or srun
 * alike, and the local launcher prints every local rank's place before
 * starting them. What the user fixed wins: a mask the process started with
 * that leaves out some of the node's threads, an explicit [device] ordinal,
 * CUDA_VISIBLE_DEVICES, and interface variables already set.
 *
 * Not thread-safe (changes the affinity of every thread of the process and
 * its environment: call it from the main thread, before plugins start
 * threads of their own). Errors: PLAIT_ERR_INVALID_CONFIG naming [run] bind
 * and the counts (bind = cores on too few cores), or the topology file.
 */
#ifndef PLAIT_CORE_LAUNCH_BIND_H
#define PLAIT_CORE_LAUNCH_BIND_H

#include <stdio.h>

#include <plait/types.h>

#include "launch/placement.h"

typedef struct plait_bind_request {
    const char *mode; /* [run] bind: auto, none, cores, numa */
    int use_gpus;     /* the ranks compute on GPUs ([device] plugin is not cpu) */
    int ordinal;      /* [device] ordinal; -1 = not fixed */
    int local_ranks;  /* this host's ranks */
    int threads;      /* math threads of each */
} plait_bind_request;

/* What the rank's place asks of the device and the comm plugin, filled by
 * plait_bind_self on the machine its topology describes (else left at
 * -1 and ""). */
typedef struct plait_bind_result {
    int gpu_ordinal; /* the GPU placement chose, as a CUDA ordinal in bus order; -1 = local rank mod devices
                        (no GPU, [device] ordinal or CUDA_VISIBLE_DEVICES set) */
    char ifname[24]; /* job on several hosts: the nearest card's interface, up with an address; "" none */
    char rdma[24];   /* job on several hosts: the nearest card's RDMA device; "" none */
    plait_topology *topo;     /* the node as read, for the start-up map; NULL when the rank did not bind */
    plait_rank_place *places; /* every local rank's place on it */
} plait_bind_result;

/* Free what a result holds (topo, places); the struct itself is the caller's. */
void plait_bind_result_free(plait_bind_result *res);

/* Bind this process (local rank `local_rank`, world rank `rank`) and every
 * thread it has to its place; log it, with the mask read back. `masks`:
 * NULL, or the mask each of the host's req->local_ranks ranks started with
 * (gathered when they joined), so that every rank computes the same GPUs.
 * With `multi_host`, NCCL_SOCKET_IFNAME and NCCL_IB_HCA name the nearest
 * card where they are unset; with GPUs, CUDA_DEVICE_ORDER=PCI_BUS_ID where
 * unset, so that the ordinal counts GPUs in the bus order placement uses.
 * `res` (non-NULL) receives the rest, and owns the topology and places
 * (plait_bind_result_free). */
plait_status plait_bind_self(const plait_bind_request *req, int local_rank, int rank, int multi_host,
                             const plait_cpuset *masks, plait_bind_result *res);

/* The card of place `p` as the comm plugins name it: its interface (on
 * this machine only where it is up with an address: an InfiniBand port
 * without IPoIB cannot carry sockets) and its RDMA device; "" where none.
 * gpu_ordinal is left alone. */
void plait_bind_comm_card(const plait_topology *t, const plait_rank_place *p, plait_bind_result *res);

/* The mask this process may run on now (sched_getaffinity). */
void plait_bind_current_mask(plait_cpuset *out);

/* Print every local rank's place to `out` (the local launcher, before it
 * starts them). With `topo` and `places` non-NULL, hands the topology and
 * the req->local_ranks places over (the caller frees them:
 * plait_topology_free, free); else frees them. */
plait_status plait_bind_print_plan(const plait_bind_request *req, FILE *out, plait_topology **topo,
                                   plait_rank_place **places);

#endif
