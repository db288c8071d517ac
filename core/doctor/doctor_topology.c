/* plait doctor --topology: the node's sockets, NUMA nodes, GPUs and NICs as
 * placement sees them, and what is lopsided (doctor.h). */
#include <stdio.h>
#include <string.h>

#include "doctor/doctor.h"
#include "launch/placement.h"
#include "launch/topology.h"
#include "runtime/error.h"

/* a link this fast wants jumbo frames: 1500-byte frames cost a packet per
 * 1.5 KB, and the CPU time of that caps what one socket moves */
#define FAST_LINK_MBPS 25000

static void nic_name(const plait_topo_nic *n, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", n->rdma, n->rdma[0] && n->ifname[0] ? "/" : "", n->ifname);
}

static void table(plait_doctor *d, const plait_topology *t) {
    int smt = t->n_cores ? t->n_pus / t->n_cores : 1;
    plait_doctor_line(d, "topology",
                      "%s: %d package%s, %d NUMA node%s, %d cores, %d hardware threads (%d per core), "
                      "%d NVIDIA GPU%s, %d network card%s",
                      t->source, t->n_packages, t->n_packages == 1 ? "" : "s", t->n_numa, t->n_numa == 1 ? "" : "s",
                      t->n_cores, t->n_pus, smt, t->n_gpus, t->n_gpus == 1 ? "" : "s", t->n_nics,
                      t->n_nics == 1 ? "" : "s");
    char set[256], name[64];
    for (int i = 0; i < t->n_numa; i++)
        plait_doctor_line(d, "numa", "node %d, package %d: %d cores, cpus %s", t->numa[i].os_index, t->numa[i].package,
                          t->numa[i].n_cores, plait_cpuset_text(&t->numa[i].cpus, set, sizeof set));
    int chosen[PLAIT_TOPO_MAX_DEV] = {0};
    plait_rank_place p[PLAIT_TOPO_MAX_DEV];
    plait_placement_in in = {.topo = t, .local_ranks = t->n_gpus, .threads = 1, .mode = PLAIT_BIND_NUMA, .use_gpus = 1};
    int placed = t->n_gpus > 0 && plait_place_ranks(&in, p) == PLAIT_OK;
    for (int i = 0; i < t->n_gpus; i++) {
        const plait_topo_gpu *g = &t->gpus[i];
        char island[32] = "NVLink not known";
        if (g->island >= 0) snprintf(island, sizeof island, "NVLink island %d", g->island);
        name[0] = '\0';
        if (placed && p[i].nic >= 0) nic_name(&t->nics[p[i].nic], name, sizeof name);
        plait_doctor_line(d, "gpu", "%d %s %s: NUMA node %d, package %d, PCIe %s, %s; nearest NIC %s", i, g->name,
                          g->pci, g->at.numa >= 0 ? t->numa[g->at.numa].os_index : -1, g->at.package,
                          g->at.bridge[0] ? g->at.bridge : "?", island, name[0] ? name : "none");
        if (placed && p[i].nic >= 0) chosen[p[i].nic]++;
    }
    for (int i = 0; i < t->n_nics; i++) {
        const plait_topo_nic *n = &t->nics[i];
        nic_name(n, name, sizeof name);
        char speed[32] = "speed not known", mtu[24] = "MTU not known";
        if (n->speed_mbps) snprintf(speed, sizeof speed, "%g Gb/s", n->speed_mbps / 1000.0);
        if (n->mtu) snprintf(mtu, sizeof mtu, "MTU %d", n->mtu);
        plait_doctor_line(d, "nic", "%s %s: NUMA node %d, package %d, PCIe %s, %s, %s", name, n->pci,
                          n->at.numa >= 0 ? t->numa[n->at.numa].os_index : -1, n->at.package,
                          n->at.bridge[0] ? n->at.bridge : "?", speed, mtu);
    }
}

/* What makes some ranks slower than others, or all slower than they could be. */
static void lopsided(plait_doctor *d, const plait_topology *t) {
    char name[64];
    for (int i = 0; i < t->n_gpus && t->n_nics > 0; i++) {
        int near = 0;
        for (int k = 0; k < t->n_nics; k++) near |= t->nics[k].at.package == t->gpus[i].at.package;
        if (!near)
            plait_doctor_problem(d, "topology",
                                 "put a network card on that socket, or expect this GPU's traffic to "
                                 "cross the socket link",
                                 "GPU %d (%s) has no network card on its socket (package %d): "
                                 "its rank's traffic between hosts crosses the socket link",
                                 i, t->gpus[i].pci, t->gpus[i].at.package);
    }
    int lo = 0, hi = 0, lo_i = -1, hi_i = -1;
    for (int k = 0; k < t->n_nics; k++) {
        int s = t->nics[k].speed_mbps;
        if (!s) continue;
        if (lo_i < 0 || s < lo) lo = s, lo_i = k;
        if (hi_i < 0 || s > hi) hi = s, hi_i = k;
    }
    if (lo_i >= 0 && lo != hi) {
        char slow[64];
        nic_name(&t->nics[lo_i], slow, sizeof slow);
        nic_name(&t->nics[hi_i], name, sizeof name);
        plait_doctor_problem(d, "topology",
                             "plait picks each rank's nearest fastest card; name the interface "
                             "([comm.tcp] ifname, NCCL_SOCKET_IFNAME) where a slower one is nearer",
                             "network cards of different speeds: %s at %g Gb/s, %s at %g Gb/s; a collective runs at "
                             "the pace of the slowest card a rank uses",
                             slow, lo / 1000.0, name, hi / 1000.0);
    }
    for (int k = 0; k < t->n_nics; k++) {
        const plait_topo_nic *n = &t->nics[k];
        if (n->mtu == 1500 && n->speed_mbps >= FAST_LINK_MBPS && n->ifname[0])
            plait_doctor_problem(d, "topology", "raise the MTU (ip link set dev IF mtu 9000, and on the switch)",
                                 "interface %s has MTU 1500 on a %g Gb/s link: TCP over it costs a packet per 1.5 KB "
                                 "and tops out well below the line rate",
                                 n->ifname, n->speed_mbps / 1000.0);
    }
    if (t->n_pus > t->n_cores)
        plait_doctor_problem(d, "topology",
                             "[run] bind = cores (one thread of each core) or [run] threads = cores "
                             "per rank",
                             "%d hardware threads on %d cores: the math-thread rule (threads = available CPUs / local "
                             "ranks) counts SMT siblings as cores, and two math threads on one core's siblings share "
                             "its FMA units",
                             t->n_pus, t->n_cores);
}

void plait_doctor_topology(plait_doctor *d) {
    plait_topology *t = NULL;
    if (plait_topology_load(NULL, &t) != PLAIT_OK) {
        plait_doctor_problem(d, "topology", "point PLAIT_TOPOLOGY at a file `lstopo file.xml` wrote, or unset it", "%s",
                             plait_last_error());
        plait_clear_error();
        return;
    }
    table(d, t);
    lopsided(d, t);
    plait_topology_free(t);
}
