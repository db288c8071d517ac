/*
 * How many GPUs this process could use, found without the CUDA driver
 * (nvidia_gpus.h). Shared by the plugins that drive NVIDIA GPUs: the cuda
 * device's probe and count, and the nccl comm plugin's probe.
 *
 * The launcher asks before it forks ranks, and a process that has
 * initialised CUDA cannot use it in a forked child (nor should `plait
 * plugins` or a probe pay for the runtime's start-up and keep its
 * descriptors), so nothing here calls CUDA or loads libcuda: the NVIDIA kernel driver lists its GPUs in
 * /proc/driver/nvidia/gpus/<pci-bus-id>/ (with an `information` file
 * holding "GPU UUID: GPU-..."); where that directory is missing (some
 * containers) the device nodes /dev/nvidia0, /dev/nvidia1, ... are counted.
 * CUDA_VISIBLE_DEVICES is then applied as CUDA applies it: a comma-separated
 * list of indices or UUID prefixes, cut at the first entry that names no
 * GPU (so "0,7,1" on a 2-GPU machine is one device).
 *
 * Where neither exists (a driver that exposes neither, in some container),
 * the count is asked of the driver itself in a forked child that loads
 * libcuda.so.1, calls cuInit and cuDeviceGetCount, and exits: the calling
 * process never initialises CUDA.
 *
 * The root of both paths is PLAIT_CUDA_SYSFS_ROOT when that is set: it
 * exists only so tests can present a pretend driver tree (which is then the
 * whole world: no child is asked); users never need it.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void read_uuid(const char *dir, const char *entry, char *out, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/information", dir, entry);
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "GPU UUID:");
        if (!p) continue;
        p += strlen("GPU UUID:");
        while (*p == ' ' || *p == '\t') p++;
        size_t k = strcspn(p, " \t\r\n");
        snprintf(out, len, "%.*s", (int)k, p);
        break;
    }
    fclose(f);
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* GPUs the driver lists in procfs, in PCI order; -1 if the directory is missing. */
static int list_procfs(gpu_list *g) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/proc/driver/nvidia/gpus", root());
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *names[MAX_GPUS];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_GPUS;) {
        char *s = e->d_name[0] != '.' ? strdup(e->d_name) : NULL;
        if (s) names[n++] = s;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n; i++) {
        read_uuid(dir, names[i], g->uuid[i], sizeof g->uuid[i]);
        free(names[i]);
    }
    g->n = n;
    return n;
}

/* /dev/nvidia<N> nodes (not nvidiactl, nvidia-uvm, ...); -1 if /dev is unreadable. */
static int list_dev_nodes(gpu_list *g) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/dev", root());
    DIR *d = opendir(dir);
    if (!d) return -1;
    g->n = 0;
    for (struct dirent *e; (e = readdir(d)) && g->n < MAX_GPUS;) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
        int digits = 1;
        for (const char *p = s + 6; *p; p++) digits &= isdigit((unsigned char)*p) != 0;
        if (digits) g->uuid[g->n++][0] = '\0';
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

/* The driver's own count, from a forked child (see the top); -1 with the
 * child's reason in `why` when it has none. */
static int count_in_child(char *why, size_t why_len) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        char msg[256] = "";
        int n = -1;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            snprintf(msg, sizeof msg, "libcuda.so.1 cannot be loaded: %s", dlerror());
        } else {
            int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
            int (*get)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
            int rc = init && get ? init(0) : -1;
            if (rc == 0) rc = get(&n);
            if (rc != 0) {
                n = -1;
                snprintf(msg, sizeof msg, "the CUDA driver library loads but cuInit/cuDeviceGetCount fail (CUresult %d)", rc);
            }
        }
        char out[sizeof msg + 16];
        int len = snprintf(out, sizeof out, "%d %s", n, msg);
        ssize_t w = write(fds[1], out, (size_t)len);
        _exit(w == len ? 0 : 1);
    }
    close(fds[1]);
    char in[300] = "";
    size_t got = 0;
    for (ssize_t r; got < sizeof in - 1 && ((r = read(fds[0], in + got, sizeof in - 1 - got)) > 0 || (r < 0 && errno == EINTR));)
        got += r > 0 ? (size_t)r : 0;
    close(fds[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    in[got] = '\0';
    char *rest = NULL;
    long n = strtol(in, &rest, 10);
    if (rest == in) return -1;
    if (n < 0 && rest && *rest == ' ') snprintf(why, why_len, "%s", rest + 1);
    return (int)n;
}

int nvidia_visible_gpus(char *why, size_t why_len) {
    gpu_list g;
    memset(&g, 0, sizeof g);
    const char *r = root();
    int n = list_procfs(&g);
    if (n < 0) {
        n = list_dev_nodes(&g);
        if (n <= 0) {
            char child[300] = "";
            int c = *r ? -1 : count_in_child(child, sizeof child); /* the driver knows what CUDA_VISIBLE_DEVICES leaves */
            if (c > 0) return c;
            if (c == 0) snprintf(child, sizeof child, "the CUDA driver counts no visible GPU");
            snprintf(why, why_len,
                     "no NVIDIA driver: %s/proc/driver/nvidia/gpus does not exist, %s/dev has no nvidiaN node%s%s",
                     r, r, child[0] ? ", and " : "", child);
            return 0;
        }
    } else if (n == 0) {
        snprintf(why, why_len, "the NVIDIA driver lists no GPU in %s/proc/driver/nvidia/gpus", r);
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
