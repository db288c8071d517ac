/*
 * How many GPUs this process could use, found without the CUDA driver
 * (nvidia_gpus.h). Shared by the plugins that drive NVIDIA GPUs: the cuda
 * device's probe and count, and the nccl comm plugin's probe.
 *
 * The launcher asks before it forks ranks, and a process that has
 * initialised CUDA cannot use it in a forked child (nor should `plait
 * plugins` or a probe pay for the runtime's start-up and keep its
 * descriptors), so nothing here calls CUDA or loads libcuda: the NVIDIA
 * kernel driver lists its GPUs in /proc/driver/nvidia/gpus/<pci-bus-id>/
 * (an `information` file holding "GPU UUID: GPU-..." and "Device Minor:
 * N"); where that directory is missing (some containers) the device nodes
 * /dev/nvidia0, /dev/nvidia1, ... are counted.
 *
 * A GPU counts only if this process can open its node /dev/nvidia<minor>,
 * as CUDA must: a container's /proc lists every GPU of the host, while the
 * container runtime (NVIDIA_VISIBLE_DEVICES, applied by the NVIDIA
 * container toolkit when the container starts, never by CUDA) mounts or
 * allows the nodes of its own GPUs only. CUDA then numbers the GPUs it can
 * use, and CUDA_VISIBLE_DEVICES is applied to those as CUDA applies it: a
 * comma-separated list of indices or UUID prefixes, cut at the first entry
 * that names no GPU (so "0,7,1" on a 2-GPU machine is one device).
 *
 * Where neither list exists (a driver that exposes no files, as under
 * WSL), `nvidia-smi -L` is asked, started with posix_spawn: no fork of this
 * process, which may already run threads (a forked child of a threaded
 * process may only make async-signal-safe calls; loading libcuda there can
 * deadlock on a lock another thread held), and no CUDA in it.
 *
 * The root of the driver's paths is PLAIT_CUDA_SYSFS_ROOT when that is set:
 * it exists only so tests can present a pretend driver tree (which is then
 * the whole world: nvidia-smi is looked for only at <root>/bin/nvidia-smi);
 * users never need it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "nvidia_gpus.h"

#define MAX_GPUS 64

typedef struct gpu_list {
    int n;
    char uuid[MAX_GPUS][96]; /* "" when unknown (device nodes only) */
} gpu_list;

static const char *root(void) {
    const char *r = getenv("PLAIT_CUDA_SYSFS_ROOT");
    return r ? r : "";
}

/* From the driver's `information` file of a GPU: its UUID ("" when
 * absent) and device minor number (-1 when absent). */
static void read_information(const char *dir, const char *entry, char *uuid, size_t len, int *minor) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/information", dir, entry);
    uuid[0] = '\0';
    *minor = -1;
    FILE *f = fopen(path, "re");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "GPU UUID:");
        if (p) {
            p += strlen("GPU UUID:");
            while (*p == ' ' || *p == '\t') p++;
            size_t k = strcspn(p, " \t\r\n");
            snprintf(uuid, len, "%.*s", (int)k, p);
        } else if ((p = strstr(line, "Device Minor:")) != NULL) {
            char *end = NULL;
            long m = strtol(p + strlen("Device Minor:"), &end, 10);
            if (end && end != p + strlen("Device Minor:") && m >= 0 && m < 1 << 20) *minor = (int)m;
        }
    }
    fclose(f);
}

/* 1 if this process can open /dev/nvidia<minor> (under the root), as CUDA
 * must to use the GPU; closed again at once. */
static int node_opens(int minor) {
    char path[1024];
    snprintf(path, sizeof path, "%s/dev/nvidia%d", root(), minor);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* GPUs the driver lists in procfs, in PCI order, whose node this process
 * can open (those whose minor is unknown count); -1 if the directory is
 * missing. *listed: how many the driver lists. */
static int list_procfs(gpu_list *g, int *listed) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/proc/driver/nvidia/gpus", root());
    DIR *d = opendir(dir);
    *listed = 0;
    if (!d) return -1;
    char *names[MAX_GPUS];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_GPUS;) {
        char *s = e->d_name[0] != '.' ? strdup(e->d_name) : NULL;
        if (s) names[n++] = s;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    g->n = 0;
    for (int i = 0; i < n; i++) {
        int minor;
        read_information(dir, names[i], g->uuid[g->n], sizeof g->uuid[g->n], &minor);
        if (minor < 0 || node_opens(minor)) g->n++;
        free(names[i]);
    }
    *listed = n;
    return g->n;
}

/* /dev/nvidia<N> nodes (not nvidiactl, nvidia-uvm, ...) this process can
 * open; -1 if /dev is unreadable. *listed: how many exist. */
static int list_dev_nodes(gpu_list *g, int *listed) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/dev", root());
    DIR *d = opendir(dir);
    *listed = 0;
    if (!d) return -1;
    g->n = 0;
    for (struct dirent *e; (e = readdir(d)) && g->n < MAX_GPUS;) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
        int digits = 1;
        for (const char *p = s + 6; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
        if (!digits) continue;
        ++*listed;
        if (node_opens(atoi(s + 6))) g->uuid[g->n++][0] = '\0';
    }
    closedir(d);
    return g->n;
}

/* Entries of CUDA_VISIBLE_DEVICES that name a GPU, up to the first that does not. */
static int apply_visible(const gpu_list *g, const char *vis) {
    int count = 0;
    char used[MAX_GPUS] = {0};
    const char *p = vis;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        size_t k = strcspn(p, ",");
        char tok[128];
        snprintf(tok, sizeof tok, "%.*s", (int)k, p);
        for (size_t e = strlen(tok); e > 0 && tok[e - 1] == ' '; e--) tok[e - 1] = '\0';
        p += k;
        int idx = -1;
        char *end = NULL;
        long v = strtol(tok, &end, 10);
        if (end != tok && *end == '\0') {
            if (v >= 0 && v < g->n) idx = (int)v;
        } else if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0) {
            for (int i = 0; i < g->n && idx < 0; i++)
                if (g->uuid[i][0] && strncmp(g->uuid[i], tok, strlen(tok)) == 0) idx = i;
        }
        if (idx < 0 || used[idx]) break; /* CUDA stops at an entry it cannot use */
        used[idx] = 1;
        count++;
    }
    return count;
}

/* The GPUs `nvidia-smi -L` lists ("GPU 0: <name> (UUID: GPU-...)"), run
 * with posix_spawn (see the top) and stopped after 10 s; -1 with the reason
 * in `why` when it cannot be run or lists nothing readable. */
static int list_nvidia_smi(gpu_list *g, char *why, size_t why_len) {
    const char *r = root();
    char tool[1024];
    snprintf(tool, sizeof tool, "%s%s", r, *r ? "/bin/nvidia-smi" : "nvidia-smi");
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "nvidia-smi: pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)"nvidia-smi", (char *)"-L", NULL};
    pid_t pid = -1;
    /* PATH, then where WSL keeps it (a driver without files is WSL's) */
    int rc = *r ? posix_spawn(&pid, tool, &fa, NULL, argv, environ) : posix_spawnp(&pid, tool, &fa, NULL, argv, environ);
    if (rc == ENOENT && !*r) rc = posix_spawn(&pid, "/usr/lib/wsl/lib/nvidia-smi", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        snprintf(why, why_len, "nvidia-smi cannot be run (%s)", strerror(rc));
        return -1;
    }
    char out[8192];
    size_t got = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int timed_out = 0;
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left_ms = 10000 - (long)((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left_ms <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int k = poll(&p, 1, (int)left_ms);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            timed_out = k == 0;
            break;
        }
        ssize_t n = read(fds[0], out + got, sizeof out - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        if (got == sizeof out - 1) break;
    }
    close(fds[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    out[got] = '\0';
    g->n = 0;
    for (char *line = out; *line && g->n < MAX_GPUS;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strncmp(line, "GPU ", 4) == 0) {
            const char *u = strstr(line, "(UUID: ");
            size_t k = u ? strcspn(u + 7, ")") : 0;
            snprintf(g->uuid[g->n], sizeof g->uuid[g->n], "%.*s", (int)k, u ? u + 7 : "");
            g->n++;
        }
        if (!nl) break;
        line = nl + 1;
    }
    if (timed_out) snprintf(why, why_len, "nvidia-smi -L did not answer within 10 s");
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        snprintf(why, why_len, "nvidia-smi -L failed (%s %d)", WIFEXITED(status) ? "exit status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    else if (g->n == 0) snprintf(why, why_len, "nvidia-smi -L lists no GPU");
    return timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || g->n == 0 ? -1 : g->n;
}

/* Where the container runtime chose the GPUs, say so (a reason's tail). */
static const char *container_note(char *buf, size_t len) {
    const char *nv = getenv("NVIDIA_VISIBLE_DEVICES");
    if (!nv) return "";
    snprintf(buf, len, "; NVIDIA_VISIBLE_DEVICES=\"%s\": the container runtime gives this container those GPUs' "
                       "nodes only",
             nv);
    return buf;
}

int nvidia_visible_gpus(char *why, size_t why_len) {
    gpu_list g;
    memset(&g, 0, sizeof g);
    const char *r = root();
    char note[256];
    int listed = 0;
    int n = list_procfs(&g, &listed);
    if (n < 0) {
        n = list_dev_nodes(&g, &listed);
        if (n == 0 && listed > 0) {
            snprintf(why, why_len, "this process can open none of the %d GPU device nodes in %s/dev%s", listed, r,
                     container_note(note, sizeof note));
            return 0;
        }
        if (n <= 0) {
            char smi[300] = "";
            n = list_nvidia_smi(&g, smi, sizeof smi);
            if (n <= 0) {
                snprintf(why, why_len,
                         "no NVIDIA driver: %s/proc/driver/nvidia/gpus does not exist, %s/dev has no nvidiaN node, "
                         "and %s",
                         r, r, smi);
                return 0;
            }
        }
    } else if (listed == 0) {
        snprintf(why, why_len, "the NVIDIA driver lists no GPU in %s/proc/driver/nvidia/gpus", r);
        return 0;
    } else if (n == 0) {
        snprintf(why, why_len,
                 "the NVIDIA driver lists %d GPU%s, but this process can open none of their device nodes "
                 "(%s/dev/nvidiaN)%s",
                 listed, listed == 1 ? "" : "s", r, container_note(note, sizeof note));
        return 0;
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) return n;
    int v = apply_visible(&g, vis);
    if (v == 0)
        snprintf(why, why_len, "CUDA_VISIBLE_DEVICES=\"%s\" leaves none of the %d GPU%s visible", vis, n,
                 n == 1 ? "" : "s");
    return v;
}
