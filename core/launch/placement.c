/* Ranks onto the node's cores, GPUs and NICs (placement.h). */
#include "launch/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

static const char *const g_modes[] = {"auto", "none", "cores", "numa"};

int plait_bind_mode_parse(const char *s) {
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, g_modes[i]) == 0) return i;
    return -1;
}

const char *plait_bind_mode_name(plait_bind_mode m) { return (unsigned)m < 4 ? g_modes[m] : "?"; }

/* How near a NIC is to a GPU or NUMA node: 0 same PCIe switch, 1 same NUMA
 * node, 2 same package, 3 elsewhere. */
static int nic_distance(const plait_topology *t, const plait_topo_nic *n, int gpu, int numa) {
    if (gpu >= 0 && n->at.bridge[0] && strcmp(n->at.bridge, t->gpus[gpu].at.bridge) == 0) return 0;
    if (numa >= 0 && n->at.numa == numa) return 1;
    int pkg = numa >= 0 ? t->numa[numa].package : -1;
    if (pkg >= 0 && n->at.package == pkg) return 2;
    return 3;
}

/* The nearest NIC, fastest among the nearest, the one fewest ranks chose
 * among those. */
static int pick_nic(const plait_topology *t, int gpu, int numa, const int *chosen) {
    int best = -1, bd = 99, bs = -1, bc = 1 << 30;
    for (int i = 0; i < t->n_nics; i++) {
        int d = nic_distance(t, &t->nics[i], gpu, numa), s = t->nics[i].speed_mbps;
        if (d < bd || (d == bd && (s > bs || (s == bs && chosen[i] < bc)))) {
            best = i;
            bd = d;
            bs = s;
            bc = chosen[i];
        }
    }
    return best;
}

/* CPU ranks in blocks over the NUMA nodes that have allowed cores. */
static int cpu_rank_numa(const int *avail, int n_numa, int r, int ranks) {
    int usable = 0;
    for (int i = 0; i < n_numa; i++) usable += avail[i] > 0;
    if (!usable) return -1;
    int k = (int)((long long)r * usable / ranks);
    for (int i = 0; i < n_numa; i++)
        if (avail[i] > 0 && k-- == 0) return i;
    return -1;
}

/* `threads` free allowed cores for a rank, its own node's first: one
 * hardware thread of each. */
static void take_cores(const plait_topology *t, const plait_cpuset *allowed, char *used, int numa, int threads,
                       plait_cpuset *cpus) {
    memset(cpus, 0, sizeof *cpus);
    for (int pass = 0; pass < 2 && threads > 0; pass++)
        for (int c = 0; c < t->n_cores && threads > 0; c++) {
            const plait_topo_core *k = &t->cores[c];
            if (used[c] || !plait_cpuset_has(allowed, k->pus[0]) || (pass == 0 && k->numa != numa)) continue;
            used[c] = 1;
            plait_cpuset_add(cpus, k->pus[0]);
            threads--;
        }
}

static plait_cpuset numa_cpus(const plait_topology *t, const plait_cpuset *allowed, int numa) {
    plait_cpuset s;
    memset(&s, 0, sizeof s);
    for (size_t i = 0; i < sizeof s.bits / sizeof s.bits[0]; i++)
        s.bits[i] = allowed->bits[i] & (numa >= 0 ? t->numa[numa].cpus.bits[i] : ~0ull);
    return s;
}

/* The rank keeps the mask it started with; a warning when that mask leaves
 * out its GPU's NUMA node. */
static void keep_mask(const plait_topology *t, plait_rank_place *p, int r, const plait_cpuset *allowed, int user) {
    p->bound = 0;
    p->cpus = *allowed;
    if (!user) return;
    char a[256], b[256];
    plait_cpuset_text(allowed, a, sizeof a);
    if (p->gpu >= 0 && p->numa >= 0 && !plait_cpuset_intersects(allowed, &t->numa[p->numa].cpus)) {
        p->warn = 1;
        snprintf(p->note, sizeof p->note,
                 "local rank %d: its affinity mask (cpus %s) excludes every core of its GPU %s's NUMA node %d "
                 "(cpus %s): kept, but host copies to the GPU cross the socket link; bind the rank to that "
                 "node's cores (Slurm --cpu-bind, mpirun --bind-to) or drop the mask and let [run] bind place it",
                 r, a, t->gpus[p->gpu].pci, t->numa[p->numa].os_index,
                 plait_cpuset_text(&t->numa[p->numa].cpus, b, sizeof b));
    } else {
        snprintf(p->note, sizeof p->note, "kept the affinity mask it started with (cpus %s of the node's %s)", a,
                 plait_cpuset_text(&t->all, b, sizeof b));
    }
}

plait_status plait_place_ranks(const plait_placement_in *in, plait_rank_place *out) {
    const plait_topology *t = in->topo;
    int n = in->local_ranks, threads = in->threads > 0 ? in->threads : 1;
    plait_cpuset allowed = t->all;
    if (in->start_mask)
        for (size_t i = 0; i < sizeof allowed.bits / sizeof allowed.bits[0]; i++)
            allowed.bits[i] &= in->start_mask->bits[i];
    int user = in->start_mask && !plait_cpuset_equal(&allowed, &t->all);
    int avail[PLAIT_TOPO_MAX_NUMA] = {0}, cores = 0;
    for (int c = 0; c < t->n_cores; c++)
        if (plait_cpuset_has(&allowed, t->cores[c].pus[0])) {
            cores++;
            if (t->cores[c].numa >= 0) avail[t->cores[c].numa]++;
        }
    int gpus = in->use_gpus ? t->n_gpus : 0;
    plait_bind_mode mode = in->mode;
    char set[256];
    if (mode == PLAIT_BIND_CORES && !user && (long long)n * threads > cores)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] bind = cores: %d rank%s x %d math thread%s = %lld, but this node has %d cores "
                               "(cpus %s); allowed: fewer ranks or [run] threads, or bind = numa, none or auto "
                               "(auto leaves an oversubscribed run unbound)",
                               n, n == 1 ? "" : "s", threads, threads == 1 ? "" : "s", (long long)n * threads, cores,
                               plait_cpuset_text(&allowed, set, sizeof set));
    /* one CPU process alone gains nothing from a subset of the cores, and
     * several started side by side would all pile onto the first ones */
    int lone = mode == PLAIT_BIND_AUTO && !gpus && n == 1;
    if (mode == PLAIT_BIND_AUTO)
        mode = lone || (long long)n * threads > cores ? PLAIT_BIND_NONE : gpus ? PLAIT_BIND_NUMA : PLAIT_BIND_CORES;
    char *used = calloc(t->n_cores > 0 ? (size_t)t->n_cores : 1, 1);
    int *chosen = calloc(t->n_nics > 0 ? (size_t)t->n_nics : 1, sizeof *chosen);
    if (!used || !chosen) {
        free(used);
        free(chosen);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "placement: out of memory");
    }
    for (int r = 0; r < n; r++) {
        plait_rank_place *p = &out[r];
        memset(p, 0, sizeof *p);
        p->gpu = -1;
        if (gpus) p->gpu = in->gpu_of_rank ? in->gpu_of_rank[r] : r % gpus;
        if (p->gpu >= t->n_gpus) p->gpu = -1;
        p->numa = p->gpu >= 0 ? t->gpus[p->gpu].at.numa : cpu_rank_numa(avail, t->n_numa, r, n);
        if (user) {
            keep_mask(t, p, r, &allowed, 1);
        } else if (mode == PLAIT_BIND_NONE) {
            keep_mask(t, p, r, &allowed, 0);
            if (lone)
                snprintf(p->note, sizeof p->note,
                         "not bound: one CPU rank alone keeps every core it may use "
                         "(bind = cores binds it)");
            else if (in->mode == PLAIT_BIND_AUTO)
                snprintf(p->note, sizeof p->note,
                         "not bound: %d rank%s x %d math thread%s on %d cores share them "
                         "(bind = auto binds only ranks whose threads have cores of their own)",
                         n, n == 1 ? "" : "s", threads, threads == 1 ? "" : "s", cores);
            else snprintf(p->note, sizeof p->note, "not bound ([run] bind = none)");
        } else if (mode == PLAIT_BIND_NUMA) {
            p->bound = 1;
            p->cpus = numa_cpus(t, &allowed, p->numa);
            if (!plait_cpuset_count(&p->cpus)) p->cpus = allowed; /* a node without threads (memory only) */
        } else {
            p->bound = 1;
            take_cores(t, &allowed, used, p->numa, threads, &p->cpus);
        }
        if (p->bound && p->gpu < 0 && p->numa < 0 && plait_cpuset_count(&p->cpus))
            p->numa = plait_topology_numa_of_cpu(t, p->cpus.bits[0] ? __builtin_ctzll(p->cpus.bits[0]) : 0);
        p->nic = pick_nic(t, p->gpu, p->numa, chosen);
        if (p->nic >= 0) chosen[p->nic]++;
    }
    free(used);
    free(chosen);
    return PLAIT_OK;
}

char *plait_place_text(const plait_topology *t, const plait_rank_place *p, char *buf, size_t cap) {
    char set[256], gpu[96] = "", nic[96] = "";
    if (p->gpu >= 0) snprintf(gpu, sizeof gpu, ", GPU %s %s", t->gpus[p->gpu].name, t->gpus[p->gpu].pci);
    if (p->nic >= 0) {
        const plait_topo_nic *n = &t->nics[p->nic];
        snprintf(nic, sizeof nic, ", NIC %s%s%s", n->rdma, n->rdma[0] && n->ifname[0] ? "/" : "", n->ifname);
    }
    if (p->bound)
        snprintf(buf, cap, "cpus %s (NUMA node %d)%s%s", plait_cpuset_text(&p->cpus, set, sizeof set),
                 p->numa >= 0 ? t->numa[p->numa].os_index : -1, gpu, nic);
    else snprintf(buf, cap, "cpus %s, %s%s%s", plait_cpuset_text(&p->cpus, set, sizeof set), p->note, gpu, nic);
    return buf;
}
