/*
 * A cluster description for `plait plan`: nodes, the compute and memory of
 * each, and the links between ranks (CLUSTER.ini, see configs/clusters/).
 *
 * Parsed by the config machinery (config/config.h), so a mistake is
 * "FILE:LINE: [section] key ..." with the allowed values, like a run config.
 * The struct is plain data: no ownership, copy freely; thread-safe to read.
 */
#ifndef PLAIT_CORE_COST_CLUSTER_H
#define PLAIT_CORE_COST_CLUSTER_H

#include <plait/device.h>
#include <plait/types.h>

#include "launch/topology.h"
#include "layout/mesh_map.h"

/* One class of link, in the alpha-beta model: sending S bytes takes
 * latency + S / bandwidth. */
typedef struct plait_link {
    char kind[16];      /* shm, nvlink, pcie, infiniband, roce, ethernet, none */
    double bandwidth;   /* bytes/s one rank can push through it */
    double latency;     /* seconds per message (alpha) */
} plait_link;

typedef struct plait_cluster {
    char name[128];        /* the file, or "this machine" */
    int nodes;
    int gpu;               /* 1: a rank per GPU; 0: ranks share the node's CPU cores */
    int units_per_node;    /* GPUs, or CPU cores */
    double memory;         /* bytes per GPU, or per node for CPUs (shared by its ranks) */
    double peak_flops;     /* fp32 FLOP/s per GPU, or per node for CPUs (all cores); 0 = measure here */
    double efficiency;     /* share of peak_flops a training step's compute reaches */
    double half_rows;      /* CPU: rows of a micro-batch at which a rank computes at half that rate (0: GPU) */
    double half_width;     /* GPU: a rank's products' width at which it computes at half that rate (0: any) */
    /* Tensor-core rates: FLOP/s and the share reached, per GPU or per CPU
     * node; 0 = not given (a CPU then computes at its fp32 rate, a GPU
     * cluster cannot be planned in that precision) */
    double peak_tf32, efficiency_tf32, peak_bf16, efficiency_bf16;
    /* GPU: the shares of each precision's peak the device's fused attention
     * reaches (0: as the products) */
    double attention_efficiency, attention_efficiency_tf32, attention_efficiency_bf16;
    plait_precision precision; /* what the cluster trains in unless the run's config says */
    double memory_bandwidth; /* bytes/s per GPU, or per node for CPUs */
    double host_bandwidth;   /* bytes/s a GPU copies to or from host memory, each way (a CPU node: 0) */
    double process_bytes;  /* bytes every rank holds besides the model (runtime, libraries, data) */
    plait_link intra;      /* between ranks of one node */
    plait_link inter;      /* between nodes: inter.bandwidth is one rank's (its NIC's) */
    double inter_node_bandwidth; /* bytes/s all ranks of a node push through the network together */
    char precision_where[160];   /* "FILE:LINE" of [node] precision, or "FILE" when defaulted */
    double disk_bandwidth;       /* bytes/s the checkpoint directory takes from all ranks together */
    double disk_writer_bandwidth; /* bytes/s one rank writes to it (at most disk_bandwidth) */
    /* [node] topology: a node's hwloc XML, its ranks placed as a run's
     * would be (cluster_topo.c); node_ranks 0 = none given */
    char topology[512];
    int node_ranks;                                /* the node's ranks placed on it (its GPUs) */
    plait_rank_site node_site[PLAIT_TOPO_MAX_DEV]; /* each local rank's NUMA node and NVLink island */
    plait_link cross; /* between ranks of one node outside one NVLink island (with a topology) */
} plait_cluster;

/* Read CLUSTER.ini. Errors: PLAIT_ERR_INVALID_CONFIG with every problem as
 * FILE:LINE (or the file alone for a missing key) and what is allowed;
 * PLAIT_ERR_SYSTEM when the file cannot be read. */
plait_status plait_cluster_load(const char *path, plait_cluster *out);
/* The same from INI text (errors say `name` where they would say the file). */
plait_status plait_cluster_parse(const char *name, const char *text, plait_cluster *out);

/* The default: this machine, a CPU node whose cores the ranks share, with
 * the figures measured here (docs/benchmarks.md) and peak_flops 0 (the
 * caller measures the SGEMM rate). */
void plait_cluster_default(plait_cluster *out);

/* Calibrate the intra-node link from a `plait bench comm --op allreduce
 * --csv FILE` table: a least-squares fit of its per-iteration times to the
 * ring's 2(n-1)(alpha + S/(n.beta)), which sets intra.latency (alpha) and
 * intra.bandwidth (beta). Errors name the file (and line) when it cannot be
 * read, is not such a table, or has fewer than two allreduce sizes. */
plait_status plait_cluster_fit_comm(plait_cluster *c, const char *csv_path);

/* The rate a rank computes at in `precision`: peak x efficiency, FLOP/s
 * per GPU or per CPU node. PLAIT_ERR_INVALID_CONFIG naming the file and
 * the missing key when a GPU cluster gives no peak for that precision. */
plait_status plait_cluster_rate(const plait_cluster *c, plait_precision precision, double *flops_per_s);

/* The rate a GPU's fused attention runs at in `precision`, FLOP/s by the
 * planner's count (plait_cost_block_flops_per_token): the precision's
 * peak x [node] *attention_efficiency; 0 where the cluster gives none,
 * or on CPU nodes: the attention then runs at the products' rate. */
double plait_cluster_attention_rate(const plait_cluster *c, plait_precision precision);

/* Bytes/s each of `concurrent` ranks of one node gets through the network
 * when all of them use it at once: the rank's own link (its NIC), or its
 * share of what the node's NICs move together, whichever is less. */
double plait_cluster_inter_share(const plait_cluster *c, int concurrent);

/* PLAIT_ERR_INVALID_CONFIG when a job of `ranks` does not fit the cluster
 * (more ranks than GPUs). */
plait_status plait_cluster_check_ranks(const plait_cluster *c, int ranks);

/* Ranks on one node for a job of `ranks` (a GPU cluster: one per GPU; CPUs:
 * the ranks spread evenly over the nodes, rounded up). */
int plait_cluster_ranks_per_node(const plait_cluster *c, int ranks);
/* The math threads a rank of a job of `ranks` computes on: 1 on a GPU
 * node; on a CPU node `given` ([run] threads) where it is above 0, else
 * the node's cores over its ranks (at least 1), as plait train's launcher
 * sets them (launch/math_threads.h), at most the node's cores (more
 * threads run no faster, and crowd the others' cores). */
int plait_cluster_rank_threads(const plait_cluster *c, int ranks, int given);

/* The link a group of `size` ranks whose members are `stride` world ranks
 * apart uses (ranks are placed node by node): inter when the group spans
 * nodes; within a node, with a topology, intra when every such group stays
 * inside one NVLink island and cross otherwise; intra without one. */
const plait_link *plait_cluster_link(const plait_cluster *c, int ranks, int size, int stride);

/* Read [node] topology (cluster_topo.c): the XML at `path` (relative to the
 * folder of the cluster file `file`), its GPUs placed as `plait train`
 * places a node's ranks (launch/placement.c, layout/mesh_map.c), into
 * c->node_site. `where` names the key ("FILE:LINE") in errors:
 * PLAIT_ERR_INVALID_CONFIG for a file that does not parse, a node of
 * another kind, or GPUs other than [node] gpus. */
plait_status plait_cluster_read_topology(plait_cluster *c, const char *file, const char *path, const char *where);

/* Whether some group of `size` ranks `stride` apart inside one node leaves
 * one NVLink island (or islands are not known), by the node's sites. */
int plait_cluster_group_crosses(const plait_cluster *c, int size, int stride);

#endif
