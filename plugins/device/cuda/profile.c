/*
 * [device.cuda] profile: where the compute stream's time goes, without a
 * profiler on the machine. Off unless the key names a file.
 *
 * Marks are events recorded on the compute stream: after each kernel
 * launcher (pc_check_launch, named as the launcher names itself), after
 * each product (pc_gemm_run, named by its shape, types and epilogue), at
 * the end of each kernel-table entry (what the entry queued past its last
 * mark: memsets, copies) and at the start of each entry (what was queued
 * on the stream outside the table: the core's copies, and waits for the
 * communication stream). The stream runs its work in order, so the time
 * between two consecutive marks is the work queued between them, and it
 * is charged to the later mark: the keys partition the stream's time from
 * the first mark to the last, idle time included (a GPU the host leaves
 * waiting shows up under the next mark, so a host-bound step is seen, not
 * hidden). The communication stream's own work is not marked.
 *
 * Events are recycled: each mark's elapsed time is read as soon as the
 * event has completed (cudaEventQuery, no waiting), so the host only
 * waits when PROF_PENDING marks are outstanding. At close() every call's
 * time has been read; the table is written to the file: per key (the
 * mark's label and detail, and the entry it was made in) the calls, the
 * total and the median, least and greatest call.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pcuda.h"

#define PROF_KEYS 512
#define PROF_PENDING 8192
#define PROF_LABEL 48
#define PROF_DETAIL 96

typedef struct {
    char label[PROF_LABEL], detail[PROF_DETAIL], entry[PROF_LABEL];
    float *us; /* every call's time, microseconds */
    size_t n, cap;
    double total_ms;
} prof_key;

typedef struct {
    cudaEvent_t ev;
    int key;
} prof_mark;

int pc_profile_on;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_path[1024];
static prof_key g_keys[PROF_KEYS];
static int g_n_keys, g_full; /* g_full: keys ran out (said in the file) */
static prof_mark g_ring[PROF_PENDING];
static size_t g_head, g_count;  /* pending marks: g_ring[g_head .. g_head + g_count) */
static cudaEvent_t g_prev;      /* the last completed mark: the next one's interval starts here */
static cudaEvent_t g_free[PROF_PENDING + 1];
static size_t g_n_free;
static double g_span_ms; /* the sum of the intervals read */
static uint64_t g_marks;
static const char *g_entry; /* the kernel-table entry running, or NULL */

plait_status pc_profile_open(const char *path) {
    pc_profile_on = 0;
    if (!path || !path[0]) return PLAIT_OK;
    if (strlen(path) >= sizeof g_path - 24)
        return pc.host->set_error(PLAIT_ERR_INVALID_CONFIG, "cuda: [" PC_SECTION "] profile: the path is too long");
    /* the file is made at close(); its directory is checked now, so a typo
     * is an error before the run and not a lost table after it */
    char dir[sizeof g_path];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    if (access(slash ? dir : ".", W_OK) != 0)
        return pc.host->set_error(PLAIT_ERR_INVALID_CONFIG,
                                  "cuda: [" PC_SECTION "] profile = %s: cannot write into %s (%s)", path,
                                  slash ? dir : "the working directory", strerror(errno));
    /* %p: the process id, so that ranks sharing a machine write a file each */
    const char *p = strstr(path, "%p");
    if (p)
        snprintf(g_path, sizeof g_path, "%.*s%ld%s", (int)(p - path), path, (long)getpid(), p + 2);
    else
        snprintf(g_path, sizeof g_path, "%s", path);
    memset(g_keys, 0, sizeof g_keys);
    g_n_keys = g_full = 0;
    g_head = g_count = g_n_free = 0;
    g_prev = NULL;
    g_span_ms = 0;
    g_marks = 0;
    pc_profile_on = 1;
    return PLAIT_OK;
}

static int key_of(const char *label, const char *detail, const char *entry) {
    for (int i = 0; i < g_n_keys; i++)
        if (strcmp(g_keys[i].label, label) == 0 && strcmp(g_keys[i].detail, detail) == 0 &&
            strcmp(g_keys[i].entry, entry) == 0)
            return i;
    if (g_n_keys == PROF_KEYS) {
        g_full = 1;
        return PROF_KEYS - 1; /* the last key takes the rest (said in the file) */
    }
    prof_key *k = &g_keys[g_n_keys];
    snprintf(k->label, sizeof k->label, "%s", label);
    snprintf(k->detail, sizeof k->detail, "%s", detail);
    snprintf(k->entry, sizeof k->entry, "%s", entry);
    return g_n_keys++;
}

static void charge(int key, float ms) {
    prof_key *k = &g_keys[key];
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        float *us = realloc(k->us, cap * sizeof *us);
        if (!us) return; /* the call is lost from the table, the run is not */
        k->us = us, k->cap = cap;
    }
    k->us[k->n++] = 1000.0f * ms;
    k->total_ms += ms;
    g_span_ms += ms;
}

static void recycle(cudaEvent_t ev) {
    if (ev) g_free[g_n_free++] = ev;
}

/* Read the pending marks that have completed, oldest first; with `wait`,
 * wait for the oldest one first. */
static void drain(int wait) {
    while (g_count) {
        prof_mark *m = &g_ring[g_head];
        cudaError_t q = wait ? cudaEventSynchronize(m->ev) : cudaEventQuery(m->ev);
        if (q == cudaErrorNotReady) return;
        wait = 0;
        float ms = 0.0f;
        if (q == cudaSuccess && g_prev && cudaEventElapsedTime(&ms, g_prev, m->ev) == cudaSuccess) charge(m->key, ms);
        (void)cudaGetLastError(); /* a failed read loses one interval, not the run's sticky state */
        recycle(g_prev);
        g_prev = m->ev;
        g_head = (g_head + 1) % PROF_PENDING;
        g_count--;
    }
}

void pc_profile_mark(const char *label, const char *detail) {
    if (!pc_profile_on || !pc.stream) return;
    pthread_mutex_lock(&g_lock);
    if (g_count == PROF_PENDING) drain(1);
    cudaEvent_t ev = g_n_free ? g_free[--g_n_free] : NULL;
    if (!ev && cudaEventCreate(&ev) != cudaSuccess) ev = NULL;
    if (ev && cudaEventRecord(ev, pc.stream) == cudaSuccess) {
        g_ring[(g_head + g_count) % PROF_PENDING] =
            (prof_mark){ev, key_of(label, detail ? detail : "", g_entry ? g_entry : "")};
        g_count++;
        g_marks++;
    } else if (ev) {
        g_free[g_n_free++] = ev;
    }
    (void)cudaGetLastError(); /* a mark that could not be made is not the kernels' failure */
    drain(0);
    pthread_mutex_unlock(&g_lock);
}

void pc_profile_entry(const char *name) {
    if (!pc_profile_on) return;
    pthread_mutex_lock(&g_lock);
    g_entry = name;
    pthread_mutex_unlock(&g_lock);
}

static int by_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int by_total(const void *a, const void *b) {
    double x = ((const prof_key *)a)->total_ms, y = ((const prof_key *)b)->total_ms;
    return (x < y) - (x > y);
}

/* The table, written to a temporary file beside the path and renamed over
 * it (never through a link: O_NOFOLLOW, O_EXCL). */
static void write_table(void) {
    char tmp[sizeof g_path + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", g_path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        pc.host->log(PLAIT_LOG_WARN, "cuda", "[" PC_SECTION "] profile: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    qsort(g_keys, (size_t)g_n_keys, sizeof g_keys[0], by_total);
    fprintf(f, "# plait cuda profile: the compute stream's time between consecutive marks, charged to the later "
               "mark (plugins/device/cuda/profile.c)\n");
    fprintf(f, "# marks %llu, span_ms %.3f%s\n", (unsigned long long)g_marks, g_span_ms,
            g_full ? ", keys ran out: the last row also holds every later key" : "");
    fprintf(f, "label\tdetail\tentry\tcalls\ttotal_ms\tmedian_us\tmin_us\tmax_us\n");
    for (int i = 0; i < g_n_keys; i++) {
        prof_key *k = &g_keys[i];
        if (!k->n) continue;
        qsort(k->us, k->n, sizeof *k->us, by_float);
        float med = k->n % 2 ? k->us[k->n / 2] : 0.5f * (k->us[k->n / 2 - 1] + k->us[k->n / 2]);
        fprintf(f, "%s\t%s\t%s\t%zu\t%.3f\t%.2f\t%.2f\t%.2f\n", k->label, k->detail[0] ? k->detail : "-",
                k->entry[0] ? k->entry : "-", k->n, k->total_ms, med, k->us[0], k->us[k->n - 1]);
    }
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, g_path) != 0) {
        pc.host->log(PLAIT_LOG_WARN, "cuda", "[" PC_SECTION "] profile: cannot write %s: %s", g_path, strerror(errno));
        unlink(tmp);
        return;
    }
    pc.host->log(PLAIT_LOG_INFO, "cuda", "profile of %llu marks (%.1f ms of the compute stream) written to %s",
                 (unsigned long long)g_marks, g_span_ms, g_path);
}

void pc_profile_close(void) {
    if (!pc_profile_on) return;
    pthread_mutex_lock(&g_lock);
    if (pc.stream) cudaStreamSynchronize(pc.stream);
    while (g_count) drain(1);
    write_table();
    for (int i = 0; i < g_n_keys; i++) free(g_keys[i].us);
    memset(g_keys, 0, sizeof g_keys);
    recycle(g_prev);
    g_prev = NULL;
    for (size_t i = 0; i < g_n_free; i++) cudaEventDestroy(g_free[i]);
    g_n_free = 0;
    (void)cudaGetLastError();
    pc_profile_on = 0;
    pthread_mutex_unlock(&g_lock);
}
