/* The device whose memory the planner counts (cli/cost_device.h). */
#include "cli/cost_device.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cost/layouts.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "plugin/loader.h"
#include "runtime/error.h"

/* What a child that opened the device writes back. */
typedef struct answer {
    int opened;
    uint64_t memory_bytes;
    char name[128];
    char why[480]; /* the error, when it did not open */
    plait_cost_device cost;
} answer;

/* What one ask depends on: the device and the model's shape. */
typedef struct asked {
    char plugin[64];
    int64_t ordinal, T, HS;
    plait_precision precision;
} asked;

/* The answer kept for the process (cost_device.h: asked once). */
static struct {
    int valid;
    asked key;
    answer a;
} g_kept;

static void one_line(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\r') *s = ' ';
}

/* Open the device in a child process and read its answer; an answer of a
 * device that did not open carries the reason. */
static answer ask_child(const plait_config *cfg, int64_t T, int64_t HS) {
    answer a = {0};
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(a.why, sizeof a.why, "pipe: %s", strerror(errno));
        return a;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(a.why, sizeof a.why, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return a;
    }
    if (pid == 0) {
        close(fds[0]);
        if (plait_device_open(plait_plugin_host(), cfg, 0, 1) == PLAIT_OK) {
            const plait_device_info *info = plait_device_info_open();
            if (info && info->mem_kind != PLAIT_MEM_HOST) {
                a.memory_bytes = info->memory_bytes;
                snprintf(a.name, sizeof a.name, "%s", info->name);
            }
            plait_cost_device_of(plait_device_kernels(), T, HS, &a.cost);
            a.cost.own_memory = info && info->mem_kind != PLAIT_MEM_HOST;
            a.opened = 1;
        } else {
            snprintf(a.why, sizeof a.why, "%s", plait_last_error());
        }
        ssize_t w = write(fds[1], &a, sizeof a);
        _exit(w == (ssize_t)sizeof a ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], &a, sizeof a) != (ssize_t)sizeof a) {
        memset(&a, 0, sizeof a);
        snprintf(a.why, sizeof a.why, "the process that opened it ended without an answer");
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    a.name[sizeof a.name - 1] = '\0';
    a.why[sizeof a.why - 1] = '\0';
    one_line(a.why);
    return a;
}

void plait_cli_device_ask(const plait_config *cfg, plait_cli_device *out) {
    memset(out, 0, sizeof *out);
    asked k;
    memset(&k, 0, sizeof k); /* compared whole, padding included */
    const char *plugin = plait_config_str(cfg, "device", "plugin");
    snprintf(k.plugin, sizeof k.plugin, "%s", plugin);
    k.ordinal = plait_config_int(cfg, "device", "ordinal");
    k.precision = plait_device_precision(cfg);
    plait_cost_model_dims(cfg, &k.T, &k.HS);
    if (strcmp(plugin, "cpu") == 0) {
        snprintf(out->counted, sizeof out->counted, "cpu");
        snprintf(out->note, sizeof out->note, "[device] plugin");
        plait_cost_device_of(plait_kernels_table(), k.T, k.HS, &out->cost);
        return;
    }
    if (!g_kept.valid || memcmp(&g_kept.key, &k, sizeof k) != 0) {
        g_kept.a = ask_child(cfg, k.T, k.HS);
        g_kept.key = k;
        g_kept.valid = 1;
    }
    const answer *a = &g_kept.a;
    if (a->opened) {
        snprintf(out->counted, sizeof out->counted, "%s", plugin);
        snprintf(out->note, sizeof out->note, "[device] plugin, its kernel table asked in a child process");
        out->memory_bytes = a->memory_bytes;
        snprintf(out->name, sizeof out->name, "%s", a->name);
        out->cost = a->cost;
        return;
    }
    /* no such device here: the core's kernels, what the cpu device would
     * count */
    out->fell_back = 1;
    snprintf(out->counted, sizeof out->counted, "cpu");
    snprintf(out->note, sizeof out->note, "the config's does not open here: %s", a->why);
    plait_cost_device_of(plait_kernels_table(), k.T, k.HS, &out->cost);
}

void plait_cli_device_planned(const plait_config *cfg, const plait_cluster *c, plait_cli_device *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->counted, sizeof out->counted, "%s", c->gpu ? "cuda" : "cpu");
    snprintf(out->note, sizeof out->note, "%s", c->gpu ? "a GPU cluster's ranks run it" : "a CPU node's ranks run it");
    plait_cost_device_planned(cfg, c->gpu, &out->cost);
}

void plait_cli_device_line(const plait_cli_device *d, char *buf, size_t cap) {
    snprintf(buf, cap, "memory counted for the %s device (%s)", d->counted, d->note);
}
