/* Buffers a rank keeps across steps for a plugin: see kept_buffers.h. */
#include "host/kept_buffers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static plait_kept *g_kept;
static int g_n, g_cap;

static int name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= sizeof g_kept->name) return 0;
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~' || name[i] == '/' || name[i] == '"' || name[i] == '\\') return 0;
    return 1;
}

static int index_of_name(const char *name) {
    for (int i = 0; i < g_n; i++)
        if (strcmp(g_kept[i].name, name) == 0) return i;
    return -1;
}

float *plait_kept_alloc(size_t count, plait_mem_kind kind, const char *name, const char *tag) {
    if (!name_ok(name)) {
        plait_set_error(PLAIT_ERR_INVALID_ARG,
                        "alloc_kept: name \"%s\" is not a kept buffer's name (1 to 95 printable characters, no "
                        "space, '/', '\"' or '\\')", name ? name : "(null)");
        return NULL;
    }
    if (count == 0) count = 1;
    int device = kind != PLAIT_MEM_HOST && kind == plait_device_mem_kind();
    if (!device && kind != PLAIT_MEM_HOST) {
        plait_set_error(PLAIT_ERR_INVALID_ARG, "alloc_kept(%s): host or the device's memory only", name);
        return NULL;
    }
    pthread_mutex_lock(&g_lock);
    plait_status st = PLAIT_OK;
    if (index_of_name(name) >= 0)
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "alloc_kept: a kept buffer named %s exists already on this rank (each name once: the "
                             "checkpoint finds it by its name)", name);
    if (st == PLAIT_OK && g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 16;
        plait_kept *v = realloc(g_kept, (size_t)cap * sizeof *v);
        if (!v) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        else g_kept = v, g_cap = cap;
    }
    float *p = NULL;
    if (st == PLAIT_OK) {
        if (!tag || !*tag) tag = name;
        p = device ? plait_device_alloc(count * sizeof(float), tag)
                   : plait_alloc(count * sizeof(float), PLAIT_MEM_HOST, 64, tag);
        if (p && device) plait_device_kernels_open()->zero(p, count);
        else if (p) memset(p, 0, count * sizeof(float));
    }
    if (p) {
        plait_kept *k = &g_kept[g_n++];
        memset(k, 0, sizeof *k);
        snprintf(k->name, sizeof k->name, "%s", name);
        k->data = p;
        k->count = count;
        k->kind = device ? kind : PLAIT_MEM_HOST;
    }
    pthread_mutex_unlock(&g_lock);
    return p;
}

void plait_kept_free(void *ptr) {
    if (!ptr) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n; i++) {
        if (g_kept[i].data != ptr) continue;
        memmove(&g_kept[i], &g_kept[i + 1], (size_t)(g_n - i - 1) * sizeof *g_kept);
        g_n--;
        break;
    }
    pthread_mutex_unlock(&g_lock);
    plait_device_free(ptr);
}

int plait_kept_at(int i, plait_kept *out) {
    pthread_mutex_lock(&g_lock);
    int ok = i >= 0 && i < g_n;
    if (ok) *out = g_kept[i];
    pthread_mutex_unlock(&g_lock);
    return ok;
}

int plait_kept_count(void) {
    pthread_mutex_lock(&g_lock);
    int n = g_n;
    pthread_mutex_unlock(&g_lock);
    return n;
}

plait_status plait_kept_to_host(const plait_kept *k, float *dst) {
    if (k->kind == PLAIT_MEM_HOST) {
        memcpy(dst, k->data, k->count * sizeof(float));
        return PLAIT_OK;
    }
    return plait_device_copy(dst, k->data, k->count * sizeof(float), PLAIT_COPY_TO_HOST);
}

plait_status plait_kept_from_host(const plait_kept *k, const float *src) {
    if (k->kind == PLAIT_MEM_HOST) {
        memcpy(k->data, src, k->count * sizeof(float));
        return PLAIT_OK;
    }
    return plait_device_copy(k->data, src, k->count * sizeof(float), PLAIT_COPY_TO_DEVICE);
}

int plait_kept_tensor_name(char *buf, size_t cap, const char *layout, int rank, const char *name) {
    return snprintf(buf, cap, "plait.kept.%s.rank%d.%s", layout, rank, name);
}

void plait_kept_layout(char *buf, size_t cap, int world, int dp, int tp, int pp, const char *order) {
    char axes[32];
    size_t n = 0;
    for (const char *c = order ? order : ""; *c && n + 1 < sizeof axes; c++)
        if (*c != ',' && *c != ' ') axes[n++] = *c;
    axes[n] = '\0';
    snprintf(buf, cap, "w%d.dp%d.tp%d.pp%d.%s", world, dp, tp, pp, axes);
}
