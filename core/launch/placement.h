/*
 * Where each of a host's ranks runs: the hardware threads it is bound to,
 * the GPU it uses and the network card nearest it, from the node's topology
 * (topology.h), [run] bind and what the user fixed. A pure function: the
 * local launcher prints its result, and every rank (under `plait -n`,
 * mpirun or srun alike) computes its own row the same way and applies it
 * (launch/bootstrap.c).
 *
 * The rules (docs/multi-node.md, "Binding ranks to cores and devices"):
 *  - a GPU rank uses GPU (local rank mod GPUs) in PCI bus order unless the
 *    caller names it (an explicit [device] ordinal or CUDA_VISIBLE_DEVICES),
 *    and is bound to the threads of that GPU's NUMA node (numa) or to
 *    `threads` cores of its own there (cores);
 *  - a CPU rank is placed in blocks over the NUMA nodes (consecutive ranks,
 *    tp's groups, share one), then on `threads` cores of its own, one
 *    hardware thread per core;
 *  - auto = numa for GPU ranks, cores for CPU ranks, and nothing where the
 *    ranks' threads outnumber the cores (an oversubscribed run is left to
 *    the scheduler, and says so) or for one CPU rank alone (processes
 *    started side by side would all be bound to the first cores);
 *  - a mask the processes started with that leaves out some of the node's
 *    threads (taskset, Slurm's --cpu-bind, mpirun's --bind-to) is the
 *    user's: kept, and said; where it excludes every thread of the rank's
 *    GPU's NUMA node, the GPU is re-chosen among those near the allowed
 *    threads (the one fewest ranks use), unless the caller fixed it; with
 *    none near, or a fixed GPU, a warning names the rank and both sets;
 *  - cores with more ranks x threads than the cores allowed is an error.
 *  - the NIC: the fastest under the same PCIe switch as the GPU, else on
 *    its NUMA node, else on its package, else any; ranks tied on one choice
 *    are spread over equally near cards.
 *
 * Thread-safe; no state. Errors: PLAIT_ERR_INVALID_CONFIG with the message
 * naming the key, the counts and what is allowed.
 */
#ifndef PLAIT_CORE_LAUNCH_PLACEMENT_H
#define PLAIT_CORE_LAUNCH_PLACEMENT_H

#include "launch/topology.h"

typedef enum plait_bind_mode {
    PLAIT_BIND_AUTO = 0,
    PLAIT_BIND_NONE,
    PLAIT_BIND_CORES,
    PLAIT_BIND_NUMA,
} plait_bind_mode;

/* "auto", "none", "cores", "numa" -> the mode; -1 for anything else. */
int plait_bind_mode_parse(const char *s);
const char *plait_bind_mode_name(plait_bind_mode m);

typedef struct plait_placement_in {
    const plait_topology *topo;
    int local_ranks; /* this host's ranks, >= 1 */
    int threads;     /* math threads of each, >= 1 */
    plait_bind_mode mode;
    int use_gpus;                   /* 1: the ranks compute on GPUs (a device plugin other than cpu) */
    const plait_cpuset *start_mask; /* the affinity the ranks start with; NULL = every thread of the node */
    /* NULL, or local_ranks masks, each rank's own (mpirun, srun): wins over start_mask */
    const plait_cpuset *start_masks;
    const int *gpu_of_rank;         /* NULL, or local_ranks topology GPU indexes the user fixed (-1: not known) */
} plait_placement_in;

typedef struct plait_rank_place {
    int bound; /* 1: bind to cpus; 0: run with the mask it started with (cpus) */
    plait_cpuset cpus;
    int numa;       /* index into topo->numa, -1 unknown */
    int gpu;        /* index into topo->gpus, -1 none */
    int gpu_default; /* the GPU it would use without the start mask; != gpu when re-chosen near the mask */
    int nic;        /* index into topo->nics, -1 none */
    int warn;       /* 1: note is a warning */
    char note[384]; /* why it is not bound, what was kept; "" when bound as asked */
} plait_rank_place;

/* Fill out[0..local_ranks-1]. */
plait_status plait_place_ranks(const plait_placement_in *in, plait_rank_place *out);

/* One line for rank `local_rank`'s place: "cpus 0-3 (NUMA node 0), GPU gpu0
 * 0000:18:00.0, NIC mlx5_0/ibp23s0" or "not bound (...)". */
char *plait_place_text(const plait_topology *t, const plait_rank_place *p, char *buf, size_t cap);

#endif
