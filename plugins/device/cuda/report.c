/* What `plait doctor` shows of the cuda device (plait_plugin_desc.report):
 * the NVIDIA driver's version and the GPUs it lists, read from its files
 * (no CUDA call: a report leaves no driver context behind), the CUDA this
 * plugin was built with, and a problem when the driver is older than that
 * CUDA. The root of the driver's files is PLAIT_CUDA_SYSFS_ROOT when set
 * (tests only: a pretend driver tree), as for counting the GPUs. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "pcuda.h"

/* The oldest Linux driver of each CUDA release (NVIDIA's CUDA Toolkit
 * release notes, "CUDA Toolkit and Corresponding Driver Versions"), newest
 * first: what a driver's version says about the CUDA it supports. */
static const struct {
    int cuda;      /* 12040 = 12.4, as CUDART_VERSION */
    int major, minor; /* the driver, e.g. 550.54 */
} k_cuda_drivers[] = {
    {13000, 580, 65}, {12090, 575, 51}, {12080, 570, 26}, {12060, 560, 28}, {12050, 555, 42}, {12040, 550, 54},
    {12030, 545, 23}, {12020, 535, 54}, {12010, 530, 30}, {12000, 525, 60}, {11080, 520, 61}, {11070, 515, 43},
    {11060, 510, 39}, {11050, 495, 29}, {11040, 470, 42}, {11030, 465, 19}, {11020, 460, 27}, {11010, 455, 23},
    {11000, 450, 36},
};

static const char *root(void) {
    const char *r = getenv("PLAIT_CUDA_SYSFS_ROOT");
    return r ? r : "";
}

/* The newest CUDA a driver of version major.minor supports; 0 if older
 * than every one listed. */
static int cuda_of_driver(int major, int minor) {
    for (size_t i = 0; i < sizeof k_cuda_drivers / sizeof k_cuda_drivers[0]; i++)
        if (major > k_cuda_drivers[i].major || (major == k_cuda_drivers[i].major && minor >= k_cuda_drivers[i].minor))
            return k_cuda_drivers[i].cuda;
    return 0;
}

/* The oldest driver for `cuda`, into buf; "" when not listed. */
static void driver_for(int cuda, char *buf, size_t cap) {
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof k_cuda_drivers / sizeof k_cuda_drivers[0]; i++)
        if (k_cuda_drivers[i].cuda <= cuda) {
            snprintf(buf, cap, "%d.%02d", k_cuda_drivers[i].major, k_cuda_drivers[i].minor);
            return;
        }
}

static int visible(const struct dirent *e) { return e->d_name[0] != '.'; }

static void gpus(plait_report_fn line, void *ctx) {
    char dir[1024], text[512];
    snprintf(dir, sizeof dir, "%s/proc/driver/nvidia/gpus", root());
    struct dirent **e = NULL;
    int n = scandir(dir, &e, visible, alphasort);
    for (int i = 0; i < n; i++) {
        char path[1400], l[256], model[160] = "model unknown";
        snprintf(path, sizeof path, "%s/%s/information", dir, e[i]->d_name);
        FILE *f = fopen(path, "re");
        while (f && fgets(l, sizeof l, f)) {
            if (strncmp(l, "Model:", 6) != 0) continue;
            const char *m = l + 6;
            while (*m == ' ' || *m == '\t') m++;
            snprintf(model, sizeof model, "%.*s", (int)strcspn(m, "\r\n"), m);
        }
        if (f) fclose(f);
        snprintf(text, sizeof text, "GPU %s: %s", e[i]->d_name, model);
        line(ctx, text, NULL);
        free(e[i]);
    }
    free(e);
}

void pc_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx) {
    (void)h, (void)cfg;
    char path[1024], text[512], first[256] = "";
    const int built = CUDART_VERSION;
    snprintf(path, sizeof path, "%s/proc/driver/nvidia/version", root());
    FILE *f = fopen(path, "re");
    if (f) {
        if (!fgets(first, sizeof first, f)) first[0] = '\0';
        fclose(f);
    }
    snprintf(text, sizeof text, "built with CUDA %d.%d (its runtime linked in)", built / 1000, built % 1000 / 10);
    line(ctx, text, NULL);
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue ..." */
    const char *k = strstr(first, "Kernel Module");
    int major = 0, minor = 0;
    char version[32] = "";
    if (k && sscanf(k + strlen("Kernel Module"), " %31s", version) == 1) sscanf(version, "%d.%d", &major, &minor);
    if (!major) {
        snprintf(text, sizeof text, "no NVIDIA driver loaded (%s %s)", path, f ? "names no version" : "does not exist");
        line(ctx, text, NULL);
        return;
    }
    int supports = cuda_of_driver(major, minor);
    if (supports)
        snprintf(text, sizeof text, "NVIDIA driver %s: supports CUDA up to %d.%d", version, supports / 1000,
                 supports % 1000 / 10);
    else
        snprintf(text, sizeof text, "NVIDIA driver %s: older than every CUDA 11 and 12 release", version);
    line(ctx, text, NULL);
    gpus(line, ctx);
    if (supports < built) {
        char need[32], problem[512], fix[512];
        driver_for(built, need, sizeof need);
        snprintf(problem, sizeof problem, "the NVIDIA driver %s is older than the CUDA %d.%d plait's cuda plugin was "
                 "built with%s", version, built / 1000, built % 1000 / 10,
                 supports / 1000 == built / 1000 ? " (CUDA's minor-version compatibility may run it, without what "
                                                   "the newer CUDA added)" : ": it will not run");
        snprintf(fix, sizeof fix, "install NVIDIA driver %s or later, or build plait with the CUDA toolkit the driver "
                 "supports (%d.%d)", need[0] ? need : "a newer one", supports / 1000, supports % 1000 / 10);
        line(ctx, problem, fix);
    }
}
