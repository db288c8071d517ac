/*
 * The node's hardware as placement needs it, read with hwloc: packages
 * (sockets), NUMA nodes, cores and their hardware threads, NVIDIA GPUs and
 * network cards, each I/O device with the NUMA node, package and PCIe bridge
 * it hangs off.
 *
 * Where it comes from: the XML file named by PLAIT_TOPOLOGY (or hwloc's own
 * HWLOC_XMLFILE), else this machine. GPUs are hwloc's CUDA/NVML OS devices
 * where hwloc was built with them, else PCI devices of NVIDIA (vendor 10de)
 * of display class (0300 VGA, 0302 3D), in PCI bus order: the order CUDA
 * numbers them under CUDA_DEVICE_ORDER=PCI_BUS_ID. A network card is a PCI
 * device of network class (02xx) with its interface (eth0) and its RDMA
 * device (mlx5_0) where it has them; its speed and MTU come from
 * /sys/class/net on this machine, from the info attributes LinkSpeedMbps and
 * MTU of the card in an XML file. NVLink is not in hwloc's view: an XML file
 * may give a GPU's island with the info attribute NVLinkIsland; elsewhere a
 * GPU's links are not known and each GPU is an island of its own
 * (docs/multi-node.md).
 *
 * Ownership: plait_topology_load's result is the caller's, freed with
 * plait_topology_free. A loaded topology is read-only and may be read from
 * any thread. Errors: PLAIT_ERR_INVALID_CONFIG naming the file and hwloc's
 * reason, PLAIT_ERR_SYSTEM when this machine's cannot be read.
 */
#ifndef PLAIT_CORE_LAUNCH_TOPOLOGY_H
#define PLAIT_CORE_LAUNCH_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include <plait/types.h>

/* A set of hardware threads by OS index (what sched_setaffinity takes). */
#define PLAIT_CPUSET_MAX 1024
typedef struct plait_cpuset {
    uint64_t bits[PLAIT_CPUSET_MAX / 64];
} plait_cpuset;

void plait_cpuset_add(plait_cpuset *s, int cpu);
int plait_cpuset_has(const plait_cpuset *s, int cpu);
int plait_cpuset_count(const plait_cpuset *s);
int plait_cpuset_equal(const plait_cpuset *a, const plait_cpuset *b);
int plait_cpuset_intersects(const plait_cpuset *a, const plait_cpuset *b);
/* "0-3,8,10-11"; "none" for the empty set. Truncated to cap. */
char *plait_cpuset_text(const plait_cpuset *s, char *buf, size_t cap);

typedef struct plait_topo_numa {
    int os_index;      /* the kernel's node number */
    int package;       /* index into packages, -1 unknown */
    plait_cpuset cpus; /* its hardware threads */
    int n_cores;       /* its cores */
} plait_topo_numa;

typedef struct plait_topo_core {
    int numa; /* index into numa[], -1 unknown */
    int package;
    int n_pus;
    int pus[8]; /* its hardware threads, OS indexes; pus[0] first */
} plait_topo_core;

/* Where an I/O device hangs off: the NUMA node and package of its host
 * bridge, and the PCIe bridge above it (a switch, else its host bridge):
 * two devices with the same bridge talk without crossing the CPU. */
typedef struct plait_topo_attach {
    int numa;        /* index into numa[], -1 unknown */
    int package;     /* -1 unknown */
    char bridge[16]; /* bus id of the bridge's downstream side, "" unknown */
} plait_topo_attach;

typedef struct plait_topo_gpu {
    char name[24]; /* cuda0, nvml0, or "gpu<i>" for a bare PCI device */
    char pci[16];  /* bus id 0000:1b:00.0 */
    int island;    /* NVLink island (NVLinkIsland), -1 = not known */
    plait_topo_attach at;
} plait_topo_gpu;

typedef struct plait_topo_nic {
    char ifname[24]; /* its network interface, "" = none (an InfiniBand-only port) */
    char rdma[24];   /* its RDMA device, "" = none */
    char pci[16];
    int speed_mbps; /* 0 = not known */
    int mtu;        /* 0 = not known */
    plait_topo_attach at;
} plait_topo_nic;

#define PLAIT_TOPO_MAX_NUMA 64
#define PLAIT_TOPO_MAX_DEV 64

typedef struct plait_topology {
    char source[512]; /* "this machine" or the XML file's path */
    int this_system;  /* 1 when it describes the machine this process runs on */
    int n_packages;
    int n_numa;
    plait_topo_numa numa[PLAIT_TOPO_MAX_NUMA];
    int n_cores;
    plait_topo_core *cores; /* n_cores, in OS order of their first thread */
    int n_pus;
    plait_cpuset all; /* every hardware thread */
    int n_gpus;
    plait_topo_gpu gpus[PLAIT_TOPO_MAX_DEV];
    int n_nics;
    plait_topo_nic nics[PLAIT_TOPO_MAX_DEV];
} plait_topology;

/* Read the topology: from `xml_path` when non-NULL, else PLAIT_TOPOLOGY,
 * else HWLOC_XMLFILE, else this machine. */
plait_status plait_topology_load(const char *xml_path, plait_topology **out);

void plait_topology_free(plait_topology *t);

/* The index into numa[] of the node holding hardware thread `cpu`; -1 if none. */
int plait_topology_numa_of_cpu(const plait_topology *t, int cpu);

#endif
