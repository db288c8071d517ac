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
 * out its GPU's NUMA node (a GPU the user fixed, or none near the mask),
 * a note when its GPU was re-chosen near the mask. */
static void keep_mask(const plait_topology *t, plait_rank_place *p, int r, const plait_cpuset *allowed, int user,
                      int fixed) {
    p->bound = 0;
    p->cpus = *allowed;
    if (!user) return;
    char a[256], b[256];
    plait_cpuset_text(allowed, a, sizeof a);
    if (p->gpu >= 0 && p->numa >= 0 && !plait_cpuset_intersects(allowed, &t->numa[p->numa].cpus)) {
        p->warn = 1;
        snprintf(p->note, sizeof p->note,
                 "local rank %d: its affinity mask (cpus %s) excludes every core of its GPU %s's NUMA node %d "
                 "(cpus %s), and %s: kept, but host copies to the GPU cross the socket link; bind the rank to "
                 "that node's cores (Slurm --cpu-bind, mpirun --bind-to) or drop the mask and let [run] bind "
                 "place it",
                 r, a, t->gpus[p->gpu].pci, t->numa[p->numa].os_index,
                 plait_cpuset_text(&t->numa[p->numa].cpus, b, sizeof b),
                 fixed ? "the GPU was fixed by [device] ordinal or CUDA_VISIBLE_DEVICES"
                       : "no GPU hangs off a NUMA node of those cpus");
    } else if (p->gpu != p->gpu_default) {
        const plait_topo_gpu *was = &t->gpus[p->gpu_default];
        snprintf(p->note, sizeof p->note,
                 "kept the affinity mask it started with (cpus %s of the node's %s); GPU %s %s near those cpus "
                 "instead of %s, whose NUMA node %d it excludes",
                 a, plait_cpuset_text(&t->all, b, sizeof b), t->gpus[p->gpu].name, t->gpus[p->gpu].pci, was->name,
                 was->at.numa >= 0 ? t->numa[was->at.numa].os_index : -1);
    } else {
        snprintf(p->note, sizeof p->note, "kept the affinity mask it started with (cpus %s of the node's %s)", a,
                 plait_cpuset_text(&t->all, b, sizeof b));
    }
}

/* Whether any allowed thread lies on the NUMA node of `gpu`. */
static int gpu_near(const plait_topology *t, int gpu, const plait_cpuset *allowed) {
    int numa = t->gpus[gpu].at.numa;
    return numa >= 0 && plait_cpuset_intersects(allowed, &t->numa[numa].cpus);
}

/* Each rank's GPU: the one the user fixed, else local rank mod GPUs; where
 * the mask a rank started with excludes that GPU's NUMA node, the GPU near
 * its allowed threads that fewest ranks use (ranks keep near defaults
 * first, so that the re-chosen ones fill in around them). Every rank
 * computes every row from the same masks, so they agree. A GPU the user
 * fixed is never changed; a rank with no GPU near keeps its default and
 * warns (keep_mask). */
static void choose_gpus(const plait_topology *t, const plait_placement_in *in, const plait_cpuset *allowed,
                        const char *user, int *gpu, int *gpu_default) {
    int n = in->local_ranks, users[PLAIT_TOPO_MAX_DEV] = {0}, moved = 0;
    for (int r = 0; r < n; r++) {
        gpu[r] = in->gpu_of_rank ? in->gpu_of_rank[r] : r % t->n_gpus;
        if (gpu[r] >= t->n_gpus) gpu[r] = -1;
        gpu_default[r] = gpu[r];
        if (gpu[r] < 0) continue;
        if (user[r] && !in->gpu_of_rank && !gpu_near(t, gpu[r], &allowed[r])) moved = 1;
        else users[gpu[r]]++;
    }
    for (int r = 0; moved && r < n; r++) {
        if (gpu[r] < 0 || !user[r] || in->gpu_of_rank || gpu_near(t, gpu[r], &allowed[r])) continue;
        int best = -1;
        for (int g = 0; g < t->n_gpus; g++)
            if (gpu_near(t, g, &allowed[r]) && (best < 0 || users[g] < users[best])) best = g;
        if (best >= 0) gpu[r] = best;
        users[gpu[r]]++;
    }
}

/* Each rank's allowed threads (the node's, within the mask it starts with)
 * and whether that mask is the user's (leaves some of the node out). */
static void allowed_sets(const plait_placement_in *in, plait_cpuset *allowed, char *user) {
    const plait_topology *t = in->topo;
    for (int r = 0; r < in->local_ranks; r++) {
        const plait_cpuset *m = in->start_masks ? &in->start_masks[r] : in->start_mask;
        allowed[r] = t->all;
        for (size_t i = 0; m && i < sizeof allowed[r].bits / sizeof allowed[r].bits[0]; i++)
            allowed[r].bits[i] &= m->bits[i];
        user[r] = m && !plait_cpuset_equal(&allowed[r], &t->all);
    }
}

/* The mode decided from the counts, then each rank's GPU, NUMA node, cpus
 * (kept, bound to the node, or cores of its own) and NIC in turn. */
plait_status plait_place_ranks(const plait_placement_in *in, plait_rank_place *out) {
    const plait_topology *t = in->topo;
    int n = in->local_ranks, threads = in->threads > 0 ? in->threads : 1;
    char *used = calloc(t->n_cores > 0 ? (size_t)t->n_cores : 1, 1);
    int *chosen = calloc(t->n_nics > 0 ? (size_t)t->n_nics : 1, sizeof *chosen);
    int *gpu_of = calloc(2 * (size_t)n, sizeof *gpu_of);
    plait_cpuset *allowed = calloc((size_t)n, sizeof *allowed);
    char *user = calloc((size_t)n, 1);
    plait_status st = PLAIT_OK;
    if (!used || !chosen || !gpu_of || !allowed || !user) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "placement: out of memory");
        goto out;
    }
    allowed_sets(in, allowed, user);
    /* the counts: the threads any rank may use */
    plait_cpuset any;
    memset(&any, 0, sizeof any);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < sizeof any.bits / sizeof any.bits[0]; i++) any.bits[i] |= allowed[r].bits[i];
    int avail[PLAIT_TOPO_MAX_NUMA] = {0}, cores = 0;
    for (int c = 0; c < t->n_cores; c++)
        if (plait_cpuset_has(&any, t->cores[c].pus[0])) {
            cores++;
            if (t->cores[c].numa >= 0) avail[t->cores[c].numa]++;
        }
    int gpus = in->use_gpus ? t->n_gpus : 0;
    plait_bind_mode mode = in->mode;
    char set[256];
    int any_user = 0;
    for (int r = 0; r < n; r++) any_user |= user[r];
    if (mode == PLAIT_BIND_CORES && !any_user && (long long)n * threads > cores) {
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "[run] bind = cores: %d rank%s x %d math thread%s = %lld, but this node has %d cores "
                             "(cpus %s); allowed: fewer ranks or [run] threads, or bind = numa, none or auto "
                             "(auto leaves an oversubscribed run unbound)",
                             n, n == 1 ? "" : "s", threads, threads == 1 ? "" : "s", (long long)n * threads, cores,
                             plait_cpuset_text(&any, set, sizeof set));
        goto out;
    }
    /* one CPU process alone gains nothing from a subset of the cores, and
     * several started side by side would all pile onto the first ones */
    int lone = mode == PLAIT_BIND_AUTO && !gpus && n == 1;
    if (mode == PLAIT_BIND_AUTO)
        mode = lone || (long long)n * threads > cores ? PLAIT_BIND_NONE : gpus ? PLAIT_BIND_NUMA : PLAIT_BIND_CORES;
    if (gpus) choose_gpus(t, in, allowed, user, gpu_of, gpu_of + n);
    for (int r = 0; r < n; r++) {
        plait_rank_place *p = &out[r];
        memset(p, 0, sizeof *p);
        p->gpu = gpus ? gpu_of[r] : -1;
        p->gpu_default = gpus ? gpu_of[n + r] : -1;
        p->numa = p->gpu >= 0 ? t->gpus[p->gpu].at.numa : cpu_rank_numa(avail, t->n_numa, r, n);
        if (user[r]) {
            keep_mask(t, p, r, &allowed[r], 1, in->gpu_of_rank != NULL);
        } else if (mode == PLAIT_BIND_NONE) {
            keep_mask(t, p, r, &allowed[r], 0, 0);
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
            p->cpus = numa_cpus(t, &allowed[r], p->numa);
            if (!plait_cpuset_count(&p->cpus)) p->cpus = allowed[r]; /* a node without threads (memory only) */
        } else {
            p->bound = 1;
            take_cores(t, &allowed[r], used, p->numa, threads, &p->cpus);
        }
        if (p->bound && p->gpu < 0 && p->numa < 0 && plait_cpuset_count(&p->cpus))
            p->numa = plait_topology_numa_of_cpu(t, p->cpus.bits[0] ? __builtin_ctzll(p->cpus.bits[0]) : 0);
        p->nic = pick_nic(t, p->gpu, p->numa, chosen);
        if (p->nic >= 0) chosen[p->nic]++;
    }
out:
    free(used);
    free(chosen);
    free(gpu_of);
    free(allowed);
    free(user);
    return st;
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
