/* The node's hardware through hwloc (topology.h). */
#include "launch/topology.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

void plait_cpuset_add(plait_cpuset *s, int cpu) {
    if (cpu >= 0 && cpu < PLAIT_CPUSET_MAX) s->bits[cpu / 64] |= 1ull << (cpu % 64);
}

int plait_cpuset_has(const plait_cpuset *s, int cpu) {
    return cpu >= 0 && cpu < PLAIT_CPUSET_MAX && (s->bits[cpu / 64] >> (cpu % 64) & 1);
}

int plait_cpuset_count(const plait_cpuset *s) {
    int n = 0;
    for (size_t i = 0; i < sizeof s->bits / sizeof s->bits[0]; i++) n += __builtin_popcountll(s->bits[i]);
    return n;
}

int plait_cpuset_equal(const plait_cpuset *a, const plait_cpuset *b) { return memcmp(a, b, sizeof *a) == 0; }

int plait_cpuset_intersects(const plait_cpuset *a, const plait_cpuset *b) {
    for (size_t i = 0; i < sizeof a->bits / sizeof a->bits[0]; i++)
        if (a->bits[i] & b->bits[i]) return 1;
    return 0;
}

char *plait_cpuset_text(const plait_cpuset *s, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int c = 0; c < PLAIT_CPUSET_MAX && off < cap; c++) {
        if (!plait_cpuset_has(s, c)) continue;
        int last = c;
        while (plait_cpuset_has(s, last + 1)) last++;
        int w = last == c ? snprintf(buf + off, cap - off, "%s%d", off ? "," : "", c)
                          : snprintf(buf + off, cap - off, "%s%d-%d", off ? "," : "", c, last);
        off += w > 0 ? (size_t)w : 0;
        c = last;
    }
    if (!buf[0]) snprintf(buf, cap, "none");
    return buf;
}

int plait_topology_numa_of_cpu(const plait_topology *t, int cpu) {
    for (int i = 0; i < t->n_numa; i++)
        if (plait_cpuset_has(&t->numa[i].cpus, cpu)) return i;
    return -1;
}

static plait_cpuset from_hwloc(hwloc_const_bitmap_t b) {
    plait_cpuset s;
    memset(&s, 0, sizeof s);
    int i;
    hwloc_bitmap_foreach_begin(i, b) plait_cpuset_add(&s, i);
    hwloc_bitmap_foreach_end();
    return s;
}

static int package_index(hwloc_topology_t topo, hwloc_obj_t obj) {
    hwloc_obj_t p = obj->type == HWLOC_OBJ_PACKAGE ? obj : hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj);
    return p ? (int)p->logical_index : -1;
}

static int numa_index_by_os(const plait_topology *t, int os_index) {
    for (int i = 0; i < t->n_numa; i++)
        if (t->numa[i].os_index == os_index) return i;
    return -1;
}

static void busid(const struct hwloc_pcidev_attr_s *p, char *out, size_t cap) {
    snprintf(out, cap, "%04x:%02x:%02x.%01x", p->domain & 0xffffu, p->bus, p->dev, p->func);
}

/* The NUMA node, package and top PCIe bridge an I/O object hangs off. */
static plait_topo_attach attach_of(hwloc_topology_t topo, const plait_topology *t, hwloc_obj_t obj) {
    plait_topo_attach a = {.numa = -1, .package = -1, .bridge = ""};
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
    if (anc) {
        a.package = package_index(topo, anc);
        int node = anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : -1;
        if (node >= 0 && hwloc_bitmap_weight(anc->nodeset) == 1) a.numa = numa_index_by_os(t, node);
        if (a.numa < 0 && anc->cpuset) { /* a package with several nodes: the one of its first thread */
            int cpu = hwloc_bitmap_first(anc->cpuset);
            if (cpu >= 0) a.numa = plait_topology_numa_of_cpu(t, cpu);
        }
    }
    /* the bridge just below the host bridge: the root port or the switch
     * every device beneath shares */
    hwloc_obj_t below = NULL;
    for (hwloc_obj_t p = obj->parent; p && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
        if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
            if (below) busid(&below->attr->bridge.upstream.pci, a.bridge, sizeof a.bridge);
            else
                snprintf(a.bridge, sizeof a.bridge, "host%04x:%02x", p->attr->bridge.downstream.pci.domain & 0xffffu,
                         p->attr->bridge.downstream.pci.secondary_bus);
            break;
        }
        below = p;
    }
    return a;
}

static void read_cpus(hwloc_topology_t topo, plait_topology *t) {
    t->n_packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nn && t->n_numa < PLAIT_TOPO_MAX_NUMA; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        plait_topo_numa *m = &t->numa[t->n_numa++];
        m->os_index = (int)o->os_index;
        m->package = package_index(topo, o);
        m->cpus = from_hwloc(o->cpuset);
    }
    t->all = from_hwloc(hwloc_topology_get_topology_cpuset(topo));
    t->n_pus = plait_cpuset_count(&t->all);
    /* a topology without cores (some virtual machines): each thread is one */
    int nc = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_obj_type_t unit = nc > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    nc = hwloc_get_nbobjs_by_type(topo, unit);
    t->cores = calloc(nc > 0 ? (size_t)nc : 1, sizeof *t->cores);
    for (int i = 0; t->cores && i < nc; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, unit, (unsigned)i);
        plait_topo_core *c = &t->cores[t->n_cores++];
        c->package = package_index(topo, o);
        int pu;
        hwloc_bitmap_foreach_begin(pu, o->cpuset) if (c->n_pus < 8) c->pus[c->n_pus++] = pu;
        hwloc_bitmap_foreach_end();
        c->numa = c->n_pus ? plait_topology_numa_of_cpu(t, c->pus[0]) : -1;
        if (c->numa >= 0) t->numa[c->numa].n_cores++;
    }
}

static int is_nvidia_gpu(hwloc_obj_t o) {
    unsigned cls = o->attr->pcidev.class_id;
    return o->attr->pcidev.vendor_id == 0x10de && (cls == 0x0300 || cls == 0x0302);
}

static int info_int(hwloc_obj_t o, const char *name, int dflt) {
    const char *v = hwloc_obj_get_info_by_name(o, name);
    return v ? atoi(v) : dflt;
}

/* this machine's word on an interface: /sys/class/net/<if>/<what> */
static int sys_net_int(const char *ifname, const char *what) {
    char path[128];
    snprintf(path, sizeof path, "/sys/class/net/%s/%s", ifname, what);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int v = 0;
    if (fscanf(f, "%d", &v) != 1 || v < 0) v = 0; /* speed reads -1 or fails on a link that is down */
    fclose(f);
    return v;
}

static void read_pci(hwloc_topology_t topo, plait_topology *t) {
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
        char id[16];
        busid(&o->attr->pcidev, id, sizeof id);
        if (is_nvidia_gpu(o) && t->n_gpus < PLAIT_TOPO_MAX_DEV) {
            plait_topo_gpu *g = &t->gpus[t->n_gpus];
            snprintf(g->name, sizeof g->name, "gpu%d", t->n_gpus);
            snprintf(g->pci, sizeof g->pci, "%s", id);
            g->island = info_int(o, "NVLinkIsland", -1);
            g->at = attach_of(topo, t, o);
            for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
                if (c->type == HWLOC_OBJ_OS_DEVICE && c->name &&
                    (strncmp(c->name, "cuda", 4) == 0 || strncmp(c->name, "nvml", 4) == 0))
                    snprintf(g->name, sizeof g->name, "%s", c->name);
            t->n_gpus++;
        } else if ((o->attr->pcidev.class_id >> 8) == 0x02 && t->n_nics < PLAIT_TOPO_MAX_DEV) {
            plait_topo_nic *n = &t->nics[t->n_nics];
            memset(n, 0, sizeof *n);
            snprintf(n->pci, sizeof n->pci, "%s", id);
            n->at = attach_of(topo, t, o);
            for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
                if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
                if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && !n->ifname[0])
                    snprintf(n->ifname, sizeof n->ifname, "%s", c->name);
                else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && !n->rdma[0])
                    snprintf(n->rdma, sizeof n->rdma, "%s", c->name);
            }
            if (!n->ifname[0] && !n->rdma[0]) continue; /* a port with no driver bound: unusable */
            n->speed_mbps = info_int(o, "LinkSpeedMbps", 0);
            n->mtu = info_int(o, "MTU", 0);
            if (t->this_system && n->ifname[0]) {
                if (!n->speed_mbps) n->speed_mbps = sys_net_int(n->ifname, "speed");
                if (!n->mtu) n->mtu = sys_net_int(n->ifname, "mtu");
            }
            t->n_nics++;
        }
    }
}

plait_status plait_topology_load(const char *xml_path, plait_topology **out) {
    *out = NULL;
    const char *var = "PLAIT_TOPOLOGY";
    if (!xml_path || !*xml_path) xml_path = getenv(var);
    if (!xml_path || !*xml_path) {
        var = "HWLOC_XMLFILE";
        xml_path = getenv(var);
    }
    if (xml_path && !*xml_path) xml_path = NULL;
    plait_topology *t = calloc(1, sizeof *t);
    hwloc_topology_t topo;
    if (!t || hwloc_topology_init(&topo) != 0) {
        free(t);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "topology: out of memory");
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc's opencl and gl components find nothing plait reads (GPUs come
     * from PCI and the cuda plugin, not OpenCL or X displays), and the
     * opencl one loads libOpenCL, whose thread-local storage, once touched
     * and then unloaded with the plugin, crashes LeakSanitizer's exit scan
     * in the sanitized tests. */
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    if (xml_path && hwloc_topology_set_xml(topo, xml_path) != 0) {
        hwloc_topology_destroy(topo);
        free(t);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "topology file %s (%s): hwloc cannot read it as an XML topology (write one with "
                               "`lstopo file.xml` or hwloc_topology_export_xml; unset %s to read this machine's)",
                               xml_path, var, var);
    }
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        free(t);
        if (xml_path)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "topology file %s (%s): hwloc cannot load it", xml_path,
                                   var);
        return plait_set_error(PLAIT_ERR_SYSTEM, "topology: hwloc cannot read this machine's");
    }
    snprintf(t->source, sizeof t->source, "%s", xml_path ? xml_path : "this machine");
    t->this_system = !xml_path;
    read_cpus(topo, t);
    read_pci(topo, t);
    hwloc_topology_destroy(topo);
    if (!t->cores || t->n_pus < 1 || t->n_cores < 1) {
        plait_topology_free(t);
        return plait_set_error(xml_path ? PLAIT_ERR_INVALID_CONFIG : PLAIT_ERR_SYSTEM,
                               "topology %s: no processing unit in it", xml_path ? xml_path : "of this machine");
    }
    if (t->n_numa < 1) { /* no NUMA information: the whole node is one */
        t->n_numa = 1;
        t->numa[0].os_index = 0;
        t->numa[0].package = t->n_packages > 0 ? 0 : -1;
        t->numa[0].cpus = t->all;
        for (int i = 0; i < t->n_cores; i++) t->cores[i].numa = 0;
        t->numa[0].n_cores = t->n_cores;
    }
    *out = t;
    return PLAIT_OK;
}

void plait_topology_free(plait_topology *t) {
    if (!t) return;
    free(t->cores);
    free(t);
}
