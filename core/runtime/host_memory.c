#include "runtime/host_memory.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

uint64_t plait_proc_kb(const char *path, const char *field) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && sscanf(line + n, "%" SCNu64, &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* A cgroup file's number under `dir`; UINT64_MAX for "max", a v1 "no
 * limit" (2^63 rounded to pages) or an unreadable file. */
static uint64_t cgroup_value(const char *dir, const char *group, const char *file) {
    char path[600], text[64] = "";
    snprintf(path, sizeof path, "%s%s/%s", dir, group, file);
    FILE *f = fopen(path, "r");
    if (!f) return UINT64_MAX;
    uint64_t v = UINT64_MAX;
    if (fgets(text, sizeof text, f) && strncmp(text, "max", 3) != 0 && sscanf(text, "%" SCNu64, &v) != 1)
        v = UINT64_MAX;
    fclose(f);
    return v >= (UINT64_C(1) << 62) ? UINT64_MAX : v;
}

/* The smallest limit on the way from `group` up to the root of the
 * hierarchy mounted at `dir`: cgroup v2 (memory.max, memory.current) or v1
 * (memory.limit_in_bytes, memory.usage_in_bytes). */
static void cgroup_limit(plait_host_memory *out, const char *dir, const char *path, const char *limit_file,
                         const char *used_file) {
    char group[256];
    snprintf(group, sizeof group, "%s", strcmp(path, "/") == 0 ? "" : path);
    for (;;) {
        uint64_t lim = cgroup_value(dir, group, limit_file);
        if (lim < out->cgroup_limit) {
            out->cgroup_limit = lim;
            out->cgroup_used = cgroup_value(dir, group, used_file);
            if (out->cgroup_used == UINT64_MAX) out->cgroup_used = 0;
            snprintf(out->cgroup, sizeof out->cgroup, "%s", group[0] ? group : "/");
        }
        char *slash = strrchr(group, '/');
        if (!slash) break;
        *slash = '\0';
    }
}

void plait_host_memory_read(plait_host_memory *out) {
    memset(out, 0, sizeof *out);
    out->total = plait_proc_kb("/proc/meminfo", "MemTotal:");
    out->available = plait_proc_kb("/proc/meminfo", "MemAvailable:");
    out->cgroup_limit = UINT64_MAX;
    /* "0::/path" (v2) and "N:memory:/path" (v1) */
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        if (strncmp(line, "0::", 3) == 0)
            cgroup_limit(out, "/sys/fs/cgroup", c2 + 1, "memory.max", "memory.current");
        else if (c2 - c1 == 7 && strncmp(c1 + 1, "memory", 6) == 0)
            cgroup_limit(out, "/sys/fs/cgroup/memory", c2 + 1, "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
    if (f) fclose(f);
    struct rlimit rl;
    out->process_limit = getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (uint64_t)rl.rlim_cur
                                                                                         : UINT64_MAX;
    out->usable = out->available ? out->available : UINT64_MAX;
    if (out->cgroup_limit != UINT64_MAX) {
        uint64_t left = out->cgroup_limit > out->cgroup_used ? out->cgroup_limit - out->cgroup_used : 0;
        if (left < out->usable) out->usable = left;
    }
}

const char *plait_bytes_text(double bytes, char *buf, size_t cap) {
    double mib = bytes / 1048576.0;
    if (mib >= 10240)
        snprintf(buf, cap, "%.1f GiB", mib / 1024);
    else
        snprintf(buf, cap, "%.0f MiB", mib);
    return buf;
}

const char *plait_host_memory_room_text(const plait_host_memory *m, char *buf, size_t cap) {
    char a[32], b[32], c[32];
    int n = snprintf(buf, cap, "this host can still give %s (MemAvailable %s", plait_bytes_text((double)m->usable, a, sizeof a),
                     plait_bytes_text((double)m->available, b, sizeof b));
    if (m->cgroup_limit != UINT64_MAX && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "; cgroup %s: limit %s, %s in use", m->cgroup,
                      plait_bytes_text((double)m->cgroup_limit, b, sizeof b),
                      plait_bytes_text((double)m->cgroup_used, c, sizeof c));
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ")");
    return buf;
}
