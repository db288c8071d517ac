/* The mesh laid over the hardware (mesh_map.h). */
#include "layout/mesh_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_axis[PLAIT_MESH_AXES] = {"dp", "tp", "pp", "cp"};

struct tally {
    int groups, host, numa, island;
};

/* Whether every member of a group shares a host, a NUMA node, an island. */
static void count(struct tally *t, const plait_rank_site *site, const int *members, int n) {
    int host = 1, numa = 1, island = 1;
    for (int i = 1; i < n; i++) {
        const plait_rank_site *a = &site[members[0]], *b = &site[members[i]];
        host &= a->host == b->host;
        numa &= a->host == b->host && a->numa >= 0 && a->numa == b->numa;
        island &= a->host == b->host && a->island >= 0 && a->island == b->island;
    }
    t->groups++;
    t->host += host;
    t->numa += numa;
    t->island += island;
}

char *plait_mesh_map_text(const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                          const plait_rank_site *site, char *buf, size_t cap) {
    int world = sizes[0] * sizes[1] * sizes[2] * sizes[3];
    size_t off = 0;
    buf[0] = '\0';
    int gpus = 0;
    for (int r = 0; r < world; r++) gpus |= site[r].island >= 0;
    /* tp first: the axis that most wants the fastest link */
    static const int order[] = {PLAIT_AXIS_TP, PLAIT_AXIS_CP, PLAIT_AXIS_PP, PLAIT_AXIS_DP};
    for (int k = 0; k < PLAIT_MESH_AXES && off < cap; k++) {
        int a = order[k], n = sizes[a];
        if (n <= 1) continue;
        struct tally t = {0};
        int members[2];
        for (int r = 0; r < world; r++) {
            int c[PLAIT_MESH_AXES];
            plait_mesh_coords(r, sizes, axes, c);
            if (a == PLAIT_AXIS_PP) { /* neighbours: stage s and s+1 */
                if (c[a] + 1 >= n) continue;
                members[0] = r;
                c[a]++;
                members[1] = plait_mesh_rank_of(c, sizes, axes);
                count(&t, site, members, 2);
                continue;
            }
            if (c[a] != 0) continue; /* one group each, from its first member */
            int group[4096], m = 0;
            for (int i = 0; i < n && m < 4096; i++) {
                c[a] = i;
                group[m++] = plait_mesh_rank_of(c, sizes, axes);
            }
            count(&t, site, group, m);
        }
        char island[64] = "";
        if (gpus) snprintf(island, sizeof island, ", %d in one NVLink island", t.island);
        int w = a == PLAIT_AXIS_PP
                    ? snprintf(buf + off, cap - off,
                               "pp: %d neighbour pair%s of %d stages, %d on one host, %d on one "
                               "NUMA node%s\n",
                               t.groups, t.groups == 1 ? "" : "s", n, t.host, t.numa, island)
                    : snprintf(buf + off, cap - off, "%s: %d group%s of %d, %d on one host, %d on one NUMA node%s\n",
                               g_axis[a], t.groups, t.groups == 1 ? "" : "s", n, t.host, t.numa, island);
        off += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

void plait_mesh_sites(const plait_topology *t, const plait_rank_place *p, int local, const int *host_of, int world,
                      plait_rank_site *site) {
    for (int r = 0; r < world; r++) {
        int host = host_of ? host_of[r] : r / local, lr = host_of ? 0 : r % local;
        for (int q = 0; host_of && q < r; q++) lr += host_of[q] == host;
        const plait_rank_place *k = &p[lr % local];
        site[r].host = host;
        site[r].numa = k->numa;
        site[r].island = k->gpu >= 0 ? t->gpus[k->gpu].island : -1;
    }
}

char *plait_mesh_map_node_text(const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES],
                               const plait_topology *t, const plait_rank_place *p, int local, const int *host_of,
                               char *buf, size_t cap) {
    int world = sizes[0] * sizes[1] * sizes[2] * sizes[3];
    buf[0] = '\0';
    if (world < 2 || local < 1 || (!host_of && world % local)) return buf;
    size_t off = 0;
    for (int n = 0; n < t->n_numa && off < cap; n++) {
        char ranks[256] = "";
        size_t k = 0;
        for (int r = 0; r < local && k + 12 < sizeof ranks; r++)
            if (p[r].numa == n) k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", k ? " " : "", r);
        int w = k ? snprintf(buf + off, cap - off, "NUMA node %d: local ranks %s\n", t->numa[n].os_index, ranks) : 0;
        off += w > 0 ? (size_t)w : 0;
    }
    plait_rank_site *site = calloc((size_t)world, sizeof *site);
    if (!site || off >= cap) {
        free(site);
        return buf;
    }
    plait_mesh_sites(t, p, local, host_of, world, site);
    plait_mesh_map_text(sizes, axes, site, buf + off, cap - off);
    free(site);
    return buf;
}
