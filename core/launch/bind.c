/* [run] bind applied (bind.h). */
#include "launch/bind.h"

#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "runtime/error.h"
#include "runtime/log.h"

#define COMPONENT "bind"

/* The GPU each local rank uses where the user fixed it: CUDA_VISIBLE_DEVICES
 * of bus-order indexes (UUIDs: not known, -1), an explicit ordinal. NULL
 * when nothing is fixed. */
static int *fixed_gpus(const plait_bind_request *req) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd && req->ordinal < 0) return NULL;
    int *g = malloc(sizeof *g * (size_t)req->local_ranks);
    if (!g) return NULL;
    int visible[64], nv = 0;
    for (const char *p = cvd; p && *p && nv < 64;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        visible[nv++] = end != p && (*end == ',' || !*end) ? (int)v : -1;
        p = strchr(p, ',');
        if (p) p++;
    }
    for (int r = 0; r < req->local_ranks; r++) {
        int ord = req->ordinal >= 0 ? req->ordinal : r;
        if (cvd) g[r] = nv ? visible[ord % nv] : -1;
        else g[r] = ord;
    }
    return g;
}

void plait_bind_current_mask(plait_cpuset *out) {
    memset(out, 0, sizeof *out);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE && c < PLAIT_CPUSET_MAX; c++)
        if (CPU_ISSET(c, &set)) plait_cpuset_add(out, c);
}

/* The topology, the mask the process started with (or each rank's,
 * `masks`), and every local rank's place. */
static plait_status plan(const plait_bind_request *req, const plait_cpuset *masks, plait_topology **topo,
                         plait_rank_place **places) {
    int mode = plait_bind_mode_parse(req->mode);
    if (mode < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[run] bind = '%s': allowed: auto, none, cores, numa",
                               req->mode ? req->mode : "");
    plait_status st = plait_topology_load(NULL, topo);
    if (st != PLAIT_OK) return st;
    plait_cpuset start;
    plait_bind_current_mask(&start);
    int have = (*topo)->this_system && plait_cpuset_count(&start) > 0;
    int *gpus = req->use_gpus ? fixed_gpus(req) : NULL;
    *places = calloc((size_t)req->local_ranks, sizeof **places);
    plait_placement_in in = {.topo = *topo,
                             .local_ranks = req->local_ranks,
                             .threads = req->threads,
                             .mode = (plait_bind_mode)mode,
                             .use_gpus = req->use_gpus,
                             .start_mask = have ? &start : NULL,
                             .start_masks = have ? masks : NULL,
                             .gpu_of_rank = gpus};
    st = *places ? plait_place_ranks(&in, *places) : plait_set_error(PLAIT_ERR_NO_MEMORY, "bind: out of memory");
    free(gpus);
    if (st != PLAIT_OK) {
        free(*places);
        *places = NULL;
        plait_topology_free(*topo);
        *topo = NULL;
    }
    return st;
}

/* Every thread of the process: those a library started before this call
 * (OpenBLAS's pool) as well as the main one; threads started later inherit. */
static plait_status set_all_threads(const plait_cpuset *cpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE && c < PLAIT_CPUSET_MAX; c++)
        if (plait_cpuset_has(cpus, c)) CPU_SET(c, &set);
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return sched_setaffinity(0, sizeof set, &set) == 0
                   ? PLAIT_OK
                   : plait_set_error(PLAIT_ERR_SYSTEM, "bind: sched_setaffinity failed");
    plait_status st = PLAIT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        pid_t tid = (pid_t)atoi(e->d_name);
        if (sched_setaffinity(tid, sizeof set, &set) != 0 && st == PLAIT_OK)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "bind: sched_setaffinity of thread %d failed", (int)tid);
    }
    closedir(d);
    return st;
}

static void set_unset(const char *name, const char *value) {
    if (value && *value && !getenv(name)) {
        setenv(name, value, 0);
        PLAIT_DEBUG(COMPONENT, "%s=%s (the nearest card)", name, value);
    }
}

/* Whether interface `name` is up with an address: a card without one (an
 * InfiniBand port without IPoIB) cannot carry the tcp plugin's sockets. */
static int iface_has_address(const char *name) {
    struct ifaddrs *list = NULL;
    if (!*name || getifaddrs(&list) != 0) return 0;
    int found = 0;
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next)
        found = a->ifa_addr && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6) &&
                (a->ifa_flags & IFF_UP) && strcmp(a->ifa_name, name) == 0;
    freeifaddrs(list);
    return found;
}

void plait_bind_comm_card(const plait_topology *t, const plait_rank_place *p, plait_bind_result *res) {
    res->ifname[0] = res->rdma[0] = '\0';
    if (p->nic < 0) return;
    const plait_topo_nic *n = &t->nics[p->nic];
    if (!t->this_system || iface_has_address(n->ifname)) snprintf(res->ifname, sizeof res->ifname, "%s", n->ifname);
    snprintf(res->rdma, sizeof res->rdma, "%s", n->rdma);
}

/* What the place asks of the device and the comm plugin (bind.h). */
static void fill_result(const plait_bind_request *req, const plait_topology *t, const plait_rank_place *p,
                        int multi_host, plait_bind_result *res) {
    res->gpu_ordinal = -1;
    res->ifname[0] = res->rdma[0] = '\0';
    if (!t->this_system) return;
    if (req->use_gpus && p->gpu >= 0 && req->ordinal < 0 && !getenv("CUDA_VISIBLE_DEVICES")) res->gpu_ordinal = p->gpu;
    if (multi_host && plait_bind_mode_parse(req->mode) != PLAIT_BIND_NONE) plait_bind_comm_card(t, p, res);
}

plait_status plait_bind_self(const plait_bind_request *req, int local_rank, int rank, int multi_host,
                             const plait_cpuset *masks, plait_bind_result *res) {
    plait_topology *t = NULL;
    plait_rank_place *all = NULL;
    plait_status st = plan(req, masks, &t, &all);
    if (st != PLAIT_OK) return plait_wrap_error(st, "rank %d", rank);
    const plait_rank_place *p = &all[local_rank];
    char text[768], set[256];
    plait_place_text(t, p, text, sizeof text);
    if (!t->this_system) {
        PLAIT_INFO(COMPONENT, "rank %d: topology from %s: its place would be %s; nothing bound here", rank, t->source,
                   text);
    } else if (p->bound && (st = set_all_threads(&p->cpus)) == PLAIT_OK) {
        cpu_set_t now;
        plait_cpuset back;
        memset(&back, 0, sizeof back);
        if (sched_getaffinity(0, sizeof now, &now) == 0)
            for (int c = 0; c < CPU_SETSIZE && c < PLAIT_CPUSET_MAX; c++)
                if (CPU_ISSET(c, &now)) plait_cpuset_add(&back, c);
        PLAIT_INFO(COMPONENT, "rank %d (local %d): %s; affinity now cpus %s", rank, local_rank, text,
                   plait_cpuset_text(&back, set, sizeof set));
    } else if (p->warn) {
        PLAIT_WARN(COMPONENT, "rank %d: %s", rank, p->note);
    } else if (p->gpu != p->gpu_default) {
        PLAIT_INFO(COMPONENT, "rank %d (local %d): %s", rank, local_rank, text);
    } else {
        /* unbound by choice or by oversubscription: the launcher said it
         * once; under mpirun or srun the first local rank says it (a
         * process alone has nothing to say) */
        if (local_rank == 0 && req->local_ranks > 1) PLAIT_INFO(COMPONENT, "rank %d: %s", rank, text);
        else PLAIT_DEBUG(COMPONENT, "rank %d: %s", rank, text);
    }
    if (res) fill_result(req, t, p, multi_host, res);
    if (st == PLAIT_OK && t->this_system) {
        if (req->use_gpus && p->gpu >= 0) set_unset("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        if (multi_host && p->nic >= 0) {
            set_unset("NCCL_SOCKET_IFNAME", t->nics[p->nic].ifname);
            set_unset("NCCL_IB_HCA", t->nics[p->nic].rdma);
        }
    }
    if (res) {
        res->topo = t;
        res->places = all;
    } else {
        free(all);
        plait_topology_free(t);
    }
    return st;
}

void plait_bind_result_free(plait_bind_result *res) {
    free(res->places);
    plait_topology_free(res->topo);
    res->places = NULL;
    res->topo = NULL;
}

plait_status plait_bind_print_plan(const plait_bind_request *req, FILE *out, plait_topology **topo,
                                   plait_rank_place **places) {
    plait_topology *t = NULL;
    plait_rank_place *all = NULL;
    plait_status st = plan(req, NULL, &t, &all);
    if (st != PLAIT_OK) return st;
    /* a rank bound, warned about or moved to another GPU gets a line of its
     * own; ranks all left alone share one */
    int listed = 0;
    for (int r = 0; r < req->local_ranks; r++)
        listed += all[r].bound || all[r].warn || all[r].gpu != all[r].gpu_default;
    char text[768];
    if (!listed) {
        fprintf(out, "plait: ranks not bound ([run] bind = %s): %s\n", req->mode, all[0].note);
    } else {
        fprintf(out, "plait: [run] bind = %s on %s:\n", req->mode, t->source);
        for (int r = 0; r < req->local_ranks; r++)
            fprintf(out, "plait:   local rank %d: %s\n", r, plait_place_text(t, &all[r], text, sizeof text));
    }
    if (topo && places) {
        *topo = t;
        *places = all;
    } else {
        free(all);
        plait_topology_free(t);
    }
    return PLAIT_OK;
}
