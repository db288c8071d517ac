#include "device/cuda_test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cuda_test_mapped(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static int entries(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

void cuda_test_quiet_begin(cuda_test_quiet *q) {
    fflush(stdout);
    fflush(stderr);
    char path[] = "/tmp/plait-cuda-quiet-XXXXXX";
    q->cap = mkstemp(path);
    unlink(path);
    q->out = dup(1);
    q->err = dup(2);
    /* counted with the capture and the saved descriptors already open */
    q->threads = entries("/proc/self/task");
    q->fds = entries("/proc/self/fd");
    dup2(q->cap, 1);
    dup2(q->cap, 2);
}

void cuda_test_quiet_end(cuda_test_quiet *q, long *printed, int *threads, int *fds) {
    fflush(stdout);
    fflush(stderr);
    *threads = entries("/proc/self/task") - q->threads;
    *fds = entries("/proc/self/fd") - q->fds;
    dup2(q->out, 1);
    dup2(q->err, 2);
    close(q->out);
    close(q->err);
    *printed = lseek(q->cap, 0, SEEK_END);
    close(q->cap);
}
