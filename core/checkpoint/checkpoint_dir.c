/* Checkpoint directories: listing, discovery of the latest complete one,
 * pruning. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_fs.h"

int plait_ckpt_parse_dir_name(const char *name, int64_t *step) {
    size_t plen = strlen(PLAIT_CKPT_DIR_PREFIX);
    if (strncmp(name, PLAIT_CKPT_DIR_PREFIX, plen) != 0) return -1;
    const char *d = name + plen;
    if (!*d || strlen(d) > 18) return -1;
    int64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return -1;
        v = v * 10 + (*d - '0');
    }
    *step = v;
    return 0;
}

void plait_ckpt_dir_path(char *buf, size_t cap, const char *out_dir, int64_t step) {
    snprintf(buf, cap, "%s/" PLAIT_CKPT_DIR_PREFIX "%08lld", out_dir, (long long)step);
}

static int cmp_entry(const void *a, const void *b) {
    const plait_ckpt_entry *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

/* All checkpoint directories, ascending by step. Caller frees *out.
 * Returns the count, or -1 if out_dir cannot be read (ENOENT gives 0). */
int plait_ckpt_scan(const char *out_dir, plait_ckpt_entry **out) {
    *out = NULL;
    DIR *dir = opendir(out_dir);
    if (!dir) return errno == ENOENT ? 0 : -1;
    plait_ckpt_entry *v = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        int64_t step;
        if (plait_ckpt_parse_dir_name(e->d_name, &step) != 0) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", out_dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            plait_ckpt_entry *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(dir);
                return -1;
            }
            v = nv;
        }
        char marker[PATH_MAX];
        snprintf(marker, sizeof marker, "%s/" PLAIT_CKPT_MARKER_FILE, path);
        v[n].step = step;
        v[n].has_marker = access(marker, F_OK) == 0;
        n++;
    }
    closedir(dir);
    if (n > 0) qsort(v, (size_t)n, sizeof *v, cmp_entry); /* v is NULL when the directory has none */
    *out = v;
    return n;
}

int plait_ckpt_list(const char *out_dir, plait_ckpt_entry *out, int cap) {
    plait_ckpt_entry *v;
    int n = plait_ckpt_scan(out_dir, &v);
    for (int i = 0; i < n && i < cap; i++) out[i] = v[i];
    free(v);
    return n;
}

plait_status plait_ckpt_open_latest(const char *out_dir, plait_ckpt **out) {
    *out = NULL;
    plait_ckpt_entry *v;
    int n = plait_ckpt_scan(out_dir, &v);
    if (n < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot list checkpoints in %s: %s", out_dir, strerror(errno));
    for (int i = n - 1; i >= 0; i--) {
        char dir[PATH_MAX];
        plait_ckpt_dir_path(dir, sizeof dir, out_dir, v[i].step);
        plait_ckpt *ck;
        if (plait_ckpt_open(dir, &ck) == PLAIT_OK) {
            *out = ck;
            break;
        }
        plait_log(PLAIT_LOG_WARN, "checkpoint", "%s; trying older checkpoints", plait_last_error());
    }
    free(v);
    return PLAIT_OK;
}

/* 0 if every entry of `dir` is a regular file, else -1 with the error set. */
static int only_plain_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        plait_set_error(PLAIT_ERR_SYSTEM, "listing %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            plait_set_error(PLAIT_ERR_INVALID_ARG,
                            "not deleting %s: it holds %s, which is not a plain file plait wrote", dir, path);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

/* Delete one checkpoint directory: check it holds only files, remove the
 * marker (durably), then the files. */
static plait_status remove_checkpoint(const char *dir) {
    if (only_plain_files(dir) != 0) return PLAIT_ERR_INVALID_ARG;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_MARKER_FILE, dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return plait_set_error(PLAIT_ERR_SYSTEM, "removing %s: %s", path, strerror(errno));
    plait_status st = plait_fs_fsync_dir(dir);
    if (st != PLAIT_OK) return st;
    DIR *d = opendir(dir);
    if (!d) return plait_set_error(PLAIT_ERR_SYSTEM, "listing %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) {
            int err = errno;
            closedir(d);
            return plait_set_error(PLAIT_ERR_SYSTEM, "removing %s: %s", path, strerror(err));
        }
    }
    closedir(d);
    if (rmdir(dir) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "removing %s: %s", dir, strerror(errno));
    return PLAIT_OK;
}

plait_status plait_ckpt_prune(const char *out_dir, int keep) {
    if (keep <= 0) return PLAIT_OK;
    plait_ckpt_entry *v;
    int n = plait_ckpt_scan(out_dir, &v);
    if (n < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot list checkpoints in %s: %s", out_dir, strerror(errno));
    int complete_seen = 0;
    int64_t newest_complete = -1;
    plait_status result = PLAIT_OK;
    for (int i = n - 1; i >= 0; i--) {
        int drop;
        if (v[i].has_marker) {
            if (newest_complete < 0) newest_complete = v[i].step;
            drop = ++complete_seen > keep;
        } else {
            drop = newest_complete >= 0; /* an older crash leftover */
        }
        if (!drop) continue;
        char dir[PATH_MAX];
        plait_ckpt_dir_path(dir, sizeof dir, out_dir, v[i].step);
        plait_status st = remove_checkpoint(dir);
        if (st != PLAIT_OK) {
            plait_log(PLAIT_LOG_WARN, "checkpoint", "pruning: %s", plait_last_error());
            if (result == PLAIT_OK) result = st;
        } else {
            plait_log(PLAIT_LOG_DEBUG, "checkpoint", "pruned %s", dir);
        }
    }
    free(v);
    if (result == PLAIT_OK) result = plait_fs_fsync_dir(out_dir);
    return result;
}
