/* Does the layout fit this host's memory (cli/memory_check.h)? */
#include "cli/memory_check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "cli/cli.h"
#include "cli/cost_device.h"
#include "cost/layouts.h"
#include "layout/mesh.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"

/* Where the layout must fit: the host's memory shared by its ranks, or one
 * rank's device. */
typedef struct room {
    int on_device;
    double bytes;       /* what is available there (per host, or per device) */
    double per_process; /* the host's limit on one process (ulimit -v), 0 = none */
    char what[512];     /* how that was found, for the message */
} room;

/* What the layout needs there. */
typedef struct need {
    int ok;                /* predicted at all */
    double bytes;          /* the largest need: one host's ranks together, or one rank's device */
    plait_cost_mem worst;  /* the rank needing the most */
    double host_state;     /* [optim] offload: one host's ranks' offloaded state in host memory */
    double disk;           /* and on offload_path's disk */
} need;

plait_cost_mem *plait_cli_predict_memory(plait_config *cfg, const plait_cost_device *dev, int *n) {
    plait_cluster c;
    plait_cluster_default(&c);
    int world = (int)plait_mesh_world_size(cfg);
    plait_cost_mem *m = calloc((size_t)world, sizeof *m);
    *n = 0;
    if (!m) {
        plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (plait_cost_config_memory(cfg, &c, dev, m, world, n) != PLAIT_OK || *n < 1) {
        free(m);
        return NULL;
    }
    return m;
}

/* The prediction for `cfg`: on a device, the largest rank without the
 * runtime (which stays in host memory); on the host, the largest sum over
 * one host's `local` consecutive ranks (plait's launcher puts consecutive
 * world ranks on a host). */
static need predict(plait_config *cfg, const plait_cost_device *dev, int local, int on_device) {
    need n = {0};
    int got = 0;
    plait_cost_mem *m = plait_cli_predict_memory(cfg, dev, &got);
    if (!m) {
        plait_clear_error();
        return n;
    }
    if (local < 1 || local > got) local = got;
    for (int r = 0; r < got; r++)
        if (m[r].total > n.worst.total) n.worst = m[r];
    if (on_device) {
        n.bytes = n.worst.total - n.worst.process;
    } else {
        for (int h = 0; h * local < got; h++) {
            double sum = 0;
            for (int r = h * local; r < (h + 1) * local && r < got; r++) sum += m[r].total + m[r].host_state;
            if (sum > n.bytes) n.bytes = sum;
        }
    }
    for (int h = 0; h * local < got; h++) {
        double host = 0, disk = 0;
        for (int r = h * local; r < (h + 1) * local && r < got; r++) host += m[r].host_state, disk += m[r].disk;
        if (host > n.host_state) n.host_state = host;
        if (disk > n.disk) n.disk = disk;
    }
    n.ok = 1;
    free(m);
    return n;
}

/* What the ranks have (on the device `d`); 0 = nothing known to compare
 * with. */
static int find_room(const plait_cli_device *d, room *r) {
    memset(r, 0, sizeof *r);
    char a[32];
    if (d->memory_bytes > 0) {
        r->on_device = 1;
        r->bytes = (double)d->memory_bytes;
        snprintf(r->what, sizeof r->what, "its device (%s) has %s", d->name, plait_bytes_text(r->bytes, a, sizeof a));
        return 1;
    }
    plait_host_memory m;
    plait_host_memory_read(&m);
    if (m.process_limit != UINT64_MAX) r->per_process = (double)m.process_limit;
    if (m.usable == UINT64_MAX || m.usable == 0) return r->per_process > 0;
    r->bytes = (double)m.usable;
    plait_host_memory_room_text(&m, r->what, sizeof r->what);
    return 1;
}

static int fits(const need *n, const room *r) {
    if (!n->ok) return 1; /* nothing predicted: nothing to refuse */
    if (r->bytes > 0 && n->bytes > r->bytes) return 0;
    return !(r->per_process > 0 && !r->on_device && n->worst.total > r->per_process);
}

/* The rank's parts, largest first: "activations 21.8 GiB, optimizer state 950 MiB, ...". */
static void largest_parts(const plait_cost_mem *m, int on_device, char *buf, size_t cap) {
    typedef struct part {
        const char *name;
        double bytes;
    } part;
    part p[] = {
        {"activations", m->activations}, {"optimizer state", m->state}, {"parameters", m->param},
        {"gradients", m->grad}, {"working buffers", m->buffers}, {"the runtime", on_device ? 0 : m->process}};
    size_t n = sizeof p / sizeof p[0], off = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (p[j].bytes > p[i].bytes) {
                part t = p[i];
                p[i] = p[j];
                p[j] = t;
            }
    buf[0] = '\0';
    double total = 0;
    for (size_t i = 0; i < n; i++) total += p[i].bytes;
    for (size_t i = 0; i < n && off + 48 < cap; i++) {
        if (p[i].bytes < 0.01 * total) continue; /* the parts that matter */
        char t[32];
        off += (size_t)snprintf(buf + off, cap - off, "%s%s %s", off ? ", " : "", p[i].name,
                                plait_bytes_text(p[i].bytes, t, sizeof t));
    }
}

/* The user's config with `extra` settings on top; its need, or !ok when it
 * is not a valid layout. */
static need variant(const char *path, int n_over, char *const *over, const char *const *extra, int n_extra,
                    const plait_cost_device *dev, int local, int on_device) {
    need n = {0};
    char **all = calloc((size_t)(n_over + n_extra) + 1, sizeof *all);
    if (!all) return n;
    for (int i = 0; i < n_over; i++) all[i] = over[i];
    for (int i = 0; i < n_extra; i++) all[n_over + i] = (char *)extra[i];
    plait_config *cfg = NULL;
    if (plait_cli_load_config(path, n_over + n_extra, all, &cfg) == PLAIT_OK) n = predict(cfg, dev, local, on_device);
    plait_config_free(cfg);
    plait_clear_error();
    free(all);
    return n;
}

/* Append "SETTING (X)" for the first of `settings` (one override each,
 * after `common`) whose variant fits. Returns 1 when one did. */
static int suggest(const char *path, int n_over, char *const *over, const char *const *common, int n_common,
                   char settings[][96], int n_settings, const plait_cost_device *dev, int local, const room *r,
                   char *buf, size_t cap) {
    for (int i = 0; i < n_settings; i++) {
        const char *extra[8];
        int k = 0;
        for (int j = 0; j < n_common && k < 7; j++) extra[k++] = common[j];
        extra[k++] = settings[i];
        need n = variant(path, n_over, over, extra, k, dev, local, r->on_device);
        if (!n.ok || !fits(&n, r)) continue;
        char t[32];
        size_t off = strlen(buf);
        snprintf(buf + off, cap - off, "%s%s (%s)", off ? ", " : "", settings[i],
                 plait_bytes_text(n.bytes, t, sizeof t));
        return 1;
    }
    return 0;
}

double plait_cli_offload_free(const plait_config *cfg, char *why, size_t cap) {
    const char *dir = plait_config_str(cfg, "optim", "offload_path");
    struct statvfs fs;
    if (why) why[0] = '\0';
    if (!dir || !*dir || statvfs(dir, &fs) != 0) {
        if (why) snprintf(why, cap, "%s", dir && *dir ? strerror(errno) : "not set");
        return -1;
    }
    if (fs.f_flag & ST_RDONLY) {
        if (why) snprintf(why, cap, "a read-only file system");
        return -1;
    }
    return (double)fs.f_bavail * (double)fs.f_frsize;
}

/* The offloaded state's room: offload_path's disk (nvme) and, where the
 * ranks compute on a device of their own, the host's memory. */
static plait_status offload_check(const plait_config *cfg, const char *name, const need *n, const room *r, int local) {
    int offload, params;
    double buffer;
    plait_cost_offload_of(cfg, &offload, &buffer, &params);
    if (!n->ok || !offload) return PLAIT_OK;
    char a[32], b[32], why[256];
    const char *dir = plait_config_str(cfg, "optim", "offload_path");
    if (offload == 2) {
        double free_bytes = plait_cli_offload_free(cfg, why, sizeof why);
        if (free_bytes < 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [optim] offload = nvme: offload_path = %s: %s; it must be a writable directory "
                                   "with room for %s of optimizer state (the %d rank(s) on this host), so no rank was "
                                   "started",
                                   name, dir, why, plait_bytes_text(n->disk, a, sizeof a), local);
        if (n->disk > free_bytes)
            return plait_set_error(PLAIT_ERR_NO_MEMORY,
                                   "%s: [optim] offload = nvme: offload_path = %s has %s free and the optimizer state "
                                   "of the %d rank(s) on this host needs %s there, so no rank was started; free space "
                                   "there, point offload_path at a larger disk, or shard the state (a higher ZeRO "
                                   "stage with more ranks)",
                                   name, dir, plait_bytes_text(free_bytes, a, sizeof a), local,
                                   plait_bytes_text(n->disk, b, sizeof b));
    }
    if (!r->on_device) return PLAIT_OK; /* host memory is the device's: counted in its need */
    plait_host_memory m;
    plait_host_memory_read(&m);
    if (m.usable != UINT64_MAX && m.usable > 0 && n->host_state > (double)m.usable) {
        plait_host_memory_room_text(&m, why, sizeof why);
        return plait_set_error(PLAIT_ERR_NO_MEMORY,
                               "%s: [optim] offload = %s: the offloaded optimizer state of the %d rank(s) on this host "
                               "needs %s of host memory, and %s, so no rank was started; use offload = nvme (with "
                               "offload_path) or a higher ZeRO stage",
                               name, offload == 1 ? "host" : "nvme", local,
                               plait_bytes_text(n->host_state, a, sizeof a), why);
    }
    return PLAIT_OK;
}

plait_status plait_cli_memory_check(plait_config *cfg, const char *path, int n_over, char *const *over,
                                    int local_ranks) {
    if (!plait_config_bool(cfg, "run", "memory_check")) return PLAIT_OK;
    room r;
    plait_cli_device d;
    plait_cli_device_ask(cfg, &d);
    const plait_cost_device dev = d.cost;
    int known = find_room(&d, &r);
    int world = (int)plait_mesh_world_size(cfg);
    int local = local_ranks > 0 && local_ranks < world ? local_ranks : world;
    need n = predict(cfg, &dev, local, r.on_device);
    plait_status st = offload_check(cfg, path ? path : "the config", &n, &r, local);
    if (st != PLAIT_OK) return st;
    if (!known || fits(&n, &r)) return PLAIT_OK;

    char parts[256], a[32], b[32], c[32], what[1024];
    largest_parts(&n.worst, r.on_device, parts, sizeof parts);
    if (r.on_device)
        snprintf(what, sizeof what, "plait plan predicts %s on each rank's device for its largest rank (%s), and %s",
                 plait_bytes_text(n.bytes, a, sizeof a), parts, r.what);
    else if (r.bytes > 0 && n.bytes > r.bytes && local == 1)
        snprintf(what, sizeof what, "plait plan predicts %s for its one rank (%s), and %s",
                 plait_bytes_text(n.bytes, a, sizeof a), parts, r.what);
    else if (r.bytes > 0 && n.bytes > r.bytes)
        snprintf(what, sizeof what, "plait plan predicts %s for the %d ranks on this host (the largest holds %s: %s), "
                 "and %s", plait_bytes_text(n.bytes, a, sizeof a), local, plait_bytes_text(n.worst.total, b, sizeof b),
                 parts, r.what);
    else
        snprintf(what, sizeof what, "plait plan predicts %s for its largest rank (%s), and each process may map at "
                 "most %s here (ulimit -v)", plait_bytes_text(n.worst.total, a, sizeof a), parts,
                 plait_bytes_text(r.per_process, c, sizeof c));

    /* what would fit, one setting changed (the global batch kept) */
    char fix[1024] = "";
    char gb[96];
    snprintf(gb, sizeof gb, "data.global_batch=%lld", (long long)plait_config_int(cfg, "data", "global_batch"));
    const char *keep_batch[] = {gb, "data.accumulation_steps=0"};
    char mbs[8][96];
    int n_mb = 0;
    for (int64_t m = plait_config_int(cfg, "data", "micro_batch") / 2; m >= 1 && n_mb < 8; m /= 2)
        snprintf(mbs[n_mb++], 96, "data.micro_batch=%lld", (long long)m);
    suggest(path, n_over, over, keep_batch, 2, mbs, n_mb, &dev, local, &r, fix, sizeof fix);
    char rc[2][96] = {"model.recompute=selective", "model.recompute=full"};
    const char *now_rc = plait_config_str(cfg, "model", "recompute");
    int first_rc = strcmp(now_rc, "none") == 0 ? 0 : strcmp(now_rc, "selective") == 0 ? 1 : 2;
    if (first_rc < 2)
        suggest(path, n_over, over, NULL, 0, rc + first_rc, 2 - first_rc, &dev, local, &r, fix, sizeof fix);
    /* full recomputation's kept inputs in host memory, where the device's
     * memory is its own */
    char off[1][96] = {"model.recompute_offload=host"};
    if (r.on_device && first_rc == 2 && strcmp(plait_config_str(cfg, "model", "recompute_offload"), "host") != 0)
        suggest(path, n_over, over, NULL, 0, off, 1, &dev, local, &r, fix, sizeof fix);
    const char *optim = plait_config_str(cfg, "optim", "plugin");
    if (plait_config_int(cfg, "parallel", "dp") > 1 && (!strcmp(optim, "adam") || !strncmp(optim, "zero", 4))) {
        char zs[3][96];
        int nz = 0;
        for (int z = strcmp(optim, "adam") == 0 ? 1 : atoi(optim + 4) + 1; z <= 3; z++)
            snprintf(zs[nz++], 96, "optim.plugin=zero%d", z);
        suggest(path, n_over, over, NULL, 0, zs, nz, &dev, local, &r, fix, sizeof fix);
    }
    const char *name = path ? path : "the config";
    return plait_set_error(
        PLAIT_ERR_NO_MEMORY,
        "%s: this layout needs more memory than there is, so no rank was started: %s. %s%s%s`plait plan %s --ranks N` "
        "weighs layouts of more ranks; [run] memory_check = false starts it anyway",
        name, what, fix[0] ? "What fits, one setting changed (each predicted the same way): " : "", fix,
        fix[0] ? "; " : "No single setting makes it fit here; ", name);
}
