/* What `plait doctor` shows of the verbs transport
 * (plait_plugin_desc.report): every RDMA device the kernel lists in
 * /sys/class/infiniband and each port's state, link layer and rate, read
 * from sysfs (no verbs call); a port that is not ACTIVE is a problem. The
 * root of that path is PLAIT_VERBS_SYSFS_ROOT when set (tests only: a
 * pretend tree). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

static void read_text(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f) return;
    if (!fgets(out, (int)cap, f)) out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int visible(const struct dirent *e) { return e->d_name[0] != '.'; }

void vb_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx) {
    (void)h, (void)cfg;
    const char *root = getenv("PLAIT_VERBS_SYSFS_ROOT");
    char dir[1024], text[1024];
    snprintf(dir, sizeof dir, "%s/sys/class/infiniband", root ? root : "");
    struct dirent **devs = NULL;
    int n = scandir(dir, &devs, visible, by_name);
    if (n < 0) {
        snprintf(text, sizeof text, "no RDMA devices: %s does not exist", dir);
        line(ctx, text, NULL);
        return;
    }
    if (n == 0) line(ctx, "no RDMA devices listed by the kernel", NULL);
    for (int i = 0; i < n; i++) {
        char ports_dir[1300];
        snprintf(ports_dir, sizeof ports_dir, "%s/%s/ports", dir, devs[i]->d_name);
        struct dirent **ports = NULL;
        int np = scandir(ports_dir, &ports, visible, by_name);
        for (int p = 0; p < np; p++) {
            char base[1600], path[1700], state[64], layer[64], rate[64];
            snprintf(base, sizeof base, "%s/%s", ports_dir, ports[p]->d_name);
            snprintf(path, sizeof path, "%s/state", base);
            read_text(path, state, sizeof state);
            snprintf(path, sizeof path, "%s/link_layer", base);
            read_text(path, layer, sizeof layer);
            snprintf(path, sizeof path, "%s/rate", base);
            read_text(path, rate, sizeof rate);
            /* "4: ACTIVE" -> "ACTIVE" */
            const char *st = strchr(state, ':') ? strchr(state, ':') + 1 : state;
            while (*st == ' ') st++;
            snprintf(text, sizeof text, "%s port %s: %s, %s, %s", devs[i]->d_name, ports[p]->d_name,
                     *st ? st : "state unknown", layer[0] ? layer : "link layer unknown", rate[0] ? rate : "rate unknown");
            if (*st && strcmp(st, "ACTIVE") != 0) {
                char problem[1200];
                snprintf(problem, sizeof problem, "%s is not ACTIVE: ranks cannot use it", text);
                line(ctx, problem, "check its cable and, on InfiniBand, that a subnet manager runs (ibstat shows "
                                   "the port), or name an active device in [comm.verbs] device");
            } else {
                line(ctx, text, NULL);
            }
            free(ports[p]);
        }
        free(ports);
        if (np <= 0) {
            snprintf(text, sizeof text, "%s: no ports listed", devs[i]->d_name);
            line(ctx, text, NULL);
        }
        free(devs[i]);
    }
    free(devs);
}
